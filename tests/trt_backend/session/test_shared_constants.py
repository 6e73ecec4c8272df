"""Constants read by several segments: each segment computes its own copy, so the stitched session
hands no constant over and an engine build needs no profile for one (it used to stop with "segment
input 'k' is a shape tensor; give its min/opt/max values")."""
from __future__ import annotations

import json
import os

import numpy as np
import onnxruntime as ort
import pytest

from tests.helpers import shared_constants_model
from trt_backend.errors import ProfileError
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

PROFILES = [{"x": ((1, 6), (2, 6), (4, 6))}]
OPTIONS = SessionOptions(exclude_ops=("Sin",), emulate=True, boundary_cost=None)  # the structure, not its price
pytestmark = pytest.mark.usefixtures("flavor")  # TensorRT-RTX's parser decides, its builder builds


def whole_model(proto, x: np.ndarray) -> list[np.ndarray]:
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})


@pytest.mark.parametrize("shape_output", [False, True])
def test_emulated_session_equals_whole_model_without_handing_constants_over(shape_output) -> None:
    proto = shared_constants_model(shape_output)
    sess = Session(proto, PROFILES, OPTIONS)
    assert sess.segment_executors == ["emulated", "onnxruntime", "emulated"]
    assert [s.copies for s in sess.plan.segments] == [(), (), (0, 1, 2)]
    assert [r.input_names for r in sess.runners] == [("x",), ("a",), ("s", "ga", "gb", "ra")]
    profiles = sess.segment_profiles[2][0]
    assert sorted(profiles) == ["ga", "gb", "ra", "s"]  # none for k or shp
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 4):
        x = rng.standard_normal((n, 6)).astype(np.float32)
        got = sess.run(None, {"x": x})
        want = whole_model(proto, x)
        assert len(got) == len(want) == 4 + shape_output
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        assert got[3].shape == (6, n)
    if shape_output:
        assert [s.runner.segment.id for s in sess.schedule(["shp"])] == [0]
        assert sess.run(["shp"], {"x": np.zeros((2, 6), np.float32)})[0].tolist() == [-1]


def test_saved_plan_with_copies_is_reused_and_one_without_them_refused() -> None:
    proto = shared_constants_model()
    saved = json.loads(Session(proto, PROFILES, OPTIONS).plan.to_json())
    again = Session(proto, PROFILES, OPTIONS, plan=saved)
    assert again.segment_profiles == Session(proto, PROFILES, OPTIONS).segment_profiles
    old = {**saved, "segments": [{k: v for k, v in s.items() if k != "copies"} for s in saved["segments"]]}
    with pytest.raises(ProfileError, match=r"segment 2 copies were \[\], now \[0, 1, 2\]"):
        Session(proto, PROFILES, OPTIONS, plan=old)


def test_engines_build_with_no_profile_for_a_shared_constant(tmp_path) -> None:
    """Real TensorRT-RTX builds of both TensorRT segments; the later one reads k and shp as shape
    tensors from its own copies, so only the model input's profile is given."""
    from trt_backend.artifacts.write import build as build_folder_build

    proto = shared_constants_model()
    out = str(tmp_path / "b")
    manifest = build_folder_build(proto, out, PROFILES, SessionOptions(exclude_ops=("Sin",), boundary_cost=None))
    assert manifest["demoted"] == []
    assert [(s["backend"], bool(s["engine"])) for s in manifest["segments"]] == [
        ("tensorrt", True), ("onnxruntime", False), ("tensorrt", True)]
    assert all(s["engine_bytes"] > 1000 for s in manifest["segments"] if s["engine"])
    segs = manifest["plan"]["segments"]
    assert segs[2]["copies"] == [0, 1, 2] and "copies" not in segs[0]
    assert segs[2]["inputs"] == ["s", "ga", "gb", "ra"]
    assert sorted(segs[2]["profiles"][0]) == ["ga", "gb", "ra", "s"]
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
        assert json.load(f)["plan"]["segments"][2]["copies"] == [0, 1, 2]
    loaded = Session.load(out, SessionOptions(emulate=True))  # the folder's plan, copies read back
    assert loaded.plan.segments[2].copies == (0, 1, 2)
    x = np.random.default_rng(1).standard_normal((3, 6)).astype(np.float32)
    for g, w in zip(loaded.run(None, {"x": x}), whole_model(proto, x)):
        np.testing.assert_array_equal(g, w)

"""``build --cache-dir`` twice: the second is a copy of the first (a real TensorRT-RTX build,
then none), keyed by the model's bytes and every option; damaged entries are rebuilt. And the
fp32 build path extracts segments holding the model's weights by reference, with the same
engine-cache keys as full copies."""
from __future__ import annotations

import json
import os
import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.support.external_mlp import write_mlp
from trt_backend.cli import main
from trt_backend.engines.builder import (
    BuildOptions,
    by_reference,
    is_held,
    key_material,
)
from trt_backend.errors import OptionsError, SignatureError
from trt_backend.planning import make_plan
from trt_backend.artifacts.build_cache import BUILDS, DIGESTS
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

HIDDEN = 192
SHAPES = ["--min-shapes", f"x:1x{HIDDEN}", "--opt-shapes", f"x:2x{HIDDEN}", "--max-shapes", f"x:4x{HIDDEN}"]
pytestmark = pytest.mark.usefixtures("flavor")


def inline_mlp(path: str, seed: int = 0) -> str:
    """The MLP (MatMul weights of 144 KiB, a Det in the middle: 3 segments) with weights inline."""
    tmp = path + ".ext.onnx"
    write_mlp(tmp, HIDDEN, 4, seed=seed)
    onnx.save(onnx.load(tmp), path)
    return path


def build(model: str, out: str, cache: str, *extra: str, shapes: list[str] = SHAPES) -> dict:
    assert main(["build", model, "-o", out, "--cache-dir", cache, *shapes, *extra]) == 0
    return json.load(open(os.path.join(out, "manifest.json")))


def feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(3).standard_normal((3, HIDDEN)).astype(np.float32)}


def check_runs(folder: str, model: str, sign_key: str | None = None) -> None:
    sess = Session.load(folder, SessionOptions(emulate=True), sign_key=sign_key)
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds())[0]
    np.testing.assert_allclose(sess.run(None, feeds())[0], ref, rtol=0, atol=1e-5)


def test_second_build_is_a_copy_and_any_option_changes_the_key(tmp_path, capsys) -> None:
    model, cache = inline_mlp(str(tmp_path / "mlp.onnx")), str(tmp_path / "cache")
    first = build(model, str(tmp_path / "a"), cache)
    assert first["build_cache"]["hit"] is False
    capsys.readouterr()
    second = build(model, str(tmp_path / "b"), cache)
    assert "build cache hit" in capsys.readouterr().out
    assert second["build_cache"] == {"key": first["build_cache"]["key"], "hit": True}
    assert [s["engine_sha256"] for s in second["segments"]] == [s["engine_sha256"] for s in first["segments"]]
    assert len([s for s in second["segments"] if s["engine"]]) == 2
    check_runs(str(tmp_path / "b"), model)
    entry = os.path.join(cache, BUILDS, first["build_cache"]["key"])
    engine = next(s["engine"] for s in first["segments"] if s["engine"])
    data = first["data_files"][0]["file"]
    assert os.stat(os.path.join(entry, engine)).st_nlink >= 2  # (engines linked, not copied)
    assert os.stat(os.path.join(tmp_path / "b", data)).st_nlink == 1  # (onnx refuses linked data files)
    other = build(model, str(tmp_path / "c"), cache, "--min-segment-size", "1")
    assert other["build_cache"]["hit"] is False and other["build_cache"]["key"] != first["build_cache"]["key"]
    shapes = build(model, str(tmp_path / "d"), cache, shapes=[*SHAPES[:-1], f"x:8x{HIDDEN}"])
    assert shapes["build_cache"]["hit"] is False
    # a memory budget cuts the model, and so the folder: a miss each way (a budget's folder was a hit
    # of a build without one, and recorded the budget it was not given)
    budget = build(model, str(tmp_path / "e"), cache, "--max-build-memory", "8G")
    assert budget["build_cache"]["hit"] is False and budget["build"]["max_build_memory"] == 8 * 2**30
    again = build(model, str(tmp_path / "f"), cache)
    assert again["build_cache"]["hit"] is True and again["build"]["max_build_memory"] is None
    # int8's kept ops change its fp16 remainder, and so the engines: a miss
    cal = str(tmp_path / "cal.npz")
    np.savez(cal, x=feeds()["x"])
    int8 = ["--precision", "int8", "--calibration-data", cal]
    first8 = build(model, str(tmp_path / "g"), cache, *int8)
    kept8 = build(model, str(tmp_path / "h"), cache, *int8, "--keep-fp32-ops", "Relu")
    assert first8["build_cache"]["key"] != kept8["build_cache"]["key"] and kept8["build_cache"]["hit"] is False
    # the same data under another path: a hit (its bytes are keyed), recording the path given
    moved = str(tmp_path / "moved.npz")
    os.rename(cal, moved)
    again8 = build(model, str(tmp_path / "i"), cache, "--precision", "int8", "--calibration-data", moved)
    assert again8["build_cache"]["hit"] is True and again8["build"]["calibration"]["source"] == moved


def test_a_changed_model_of_the_same_size_and_time_misses(tmp_path) -> None:
    model, cache = inline_mlp(str(tmp_path / "mlp.onnx")), str(tmp_path / "cache")
    past = time.time() - 3600
    os.utime(model, (past, past))  # (old enough for its digest to be remembered by its status)
    first = build(model, str(tmp_path / "a"), cache)
    digests = json.load(open(os.path.join(cache, BUILDS, DIGESTS)))
    assert os.path.abspath(model) in digests
    size = os.path.getsize(model)
    inline_mlp(model, seed=7)  # other weights, same size; the same time stamp given back
    os.utime(model, (past, past))
    assert os.path.getsize(model) == size
    second = build(model, str(tmp_path / "b"), cache)
    assert second["build_cache"]["hit"] is False and second["build_cache"]["key"] != first["build_cache"]["key"]
    check_runs(str(tmp_path / "b"), model)


def test_a_damaged_entry_is_rebuilt_and_a_hit_is_signed_with_its_own_key(tmp_path, caplog) -> None:
    model, cache = inline_mlp(str(tmp_path / "mlp.onnx")), str(tmp_path / "cache")
    first = build(model, str(tmp_path / "a"), cache, "--sign-key", "first-key")
    entry = os.path.join(cache, BUILDS, first["build_cache"]["key"])
    engine = os.path.join(entry, next(s["engine"] for s in first["segments"] if s["engine"]))
    os.unlink(engine)  # (break the link before truncating: the first folder keeps its engine)
    with open(os.path.join(tmp_path / "a", os.path.basename(engine)), "rb") as f:
        open(engine, "wb").write(f.read()[:1000])
    again = build(model, str(tmp_path / "b"), cache, "--sign-key", "second-key")
    assert again["build_cache"]["hit"] is False
    assert "is damaged" in caplog.text
    hit = build(model, str(tmp_path / "c"), cache, "--sign-key", "second-key")
    assert hit["build_cache"]["hit"] is True
    check_runs(str(tmp_path / "c"), model, sign_key="second-key")
    with pytest.raises(SignatureError):
        Session.load(str(tmp_path / "c"), SessionOptions(emulate=True), sign_key="first-key")


def test_segments_by_reference_have_the_keys_of_full_copies(tmp_path, flavor) -> None:
    model = inline_mlp(str(tmp_path / "mlp.onnx"))
    with pytest.raises(OptionsError, match="must be a PartitionOptions, got SessionOptions"):
        make_plan(model, SessionOptions())  # type: ignore[arg-type]
    plan = make_plan(model)
    assert plan.model is not None
    held = {t.name: t for t in plan.model.proto.graph.initializer}
    for seg in plan.tensorrt_segments():
        copy, light = plan.extract(seg.id), plan.extract(seg.id, by_reference(held))
        assert any(is_held(t) for t in light.graph.initializer)
        assert light.ByteSize() < copy.ByteSize() // 10
        full = key_material(copy, [], BuildOptions(), flavor, "t", weights_dir=str(tmp_path))
        ref = key_material(light, [], BuildOptions(), flavor, "t", weights_dir=str(tmp_path),
                           weights=held)
        assert full == ref and "inline_weights_sha256" in full



def test_a_corrupt_model_with_external_data_is_the_loaders_one_line_error(tmp_path, capsys) -> None:
    """The build cache reads a model's data file names before loading it: a corrupt file is left
    to the loader's error (was: a DecodeError traceback, found by benchmarks/conformance/fuzz.py)."""
    src = str(tmp_path / "ext.onnx")
    write_mlp(src, HIDDEN, 2)
    data = bytearray(open(src, "rb").read())
    assert b"location" in data
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(bytes(data[: len(data) * 2 // 3]))
    assert main(["build", str(bad), "-o", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c"), *SHAPES]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"trt-backend: error: {bad}: not an ONNX model or truncated") and "\n" not in err, err
    assert not os.path.exists(tmp_path / "out")

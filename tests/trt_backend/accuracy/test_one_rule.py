"""One error rule: ``compare``'s elementwise verdict (Polygraphy's: an element fails where its
absolute error exceeds atol *and* its relative error exceeds rtol) and the precision search's
score are the same function, so a plan the search keeps passes ``compare`` at the same tolerances."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import trt_backend
from tests.support.graphs import cnn, transformer_model
from trt_backend.accuracy.auto_precision import AutoOptions
from trt_backend.accuracy.numeric import tensor_error, tolerance_ratio
from trt_backend.engines.builder import BuildOptions
from trt_backend.session.options import SessionOptions


def test_ratio_and_verdict_agree_everywhere() -> None:
    rng = np.random.default_rng(0)
    for _ in range(400):
        ref = rng.standard_normal(50).astype(np.float32) * rng.choice([1e-3, 1.0, 300.0])
        ref[rng.random(50) < 0.1] = 0
        ours = ref + rng.standard_normal(50).astype(np.float32) * rng.choice([1e-5, 1e-3, 1e-1])
        atol, rtol = float(rng.choice([0.0, 1e-4, 1e-3, 1e-1])), float(rng.choice([0.0, 1e-4, 1e-3, 1e-1]))
        verdict = tensor_error(ours, ref, atol, rtol).passed
        assert verdict == (tolerance_ratio(ours, ref, atol, rtol) <= 1.0), (atol, rtol)


def test_the_old_score_differed_where_the_rule_does_not() -> None:
    """abs 1.5e-3 on a value of 1: beyond atol 1e-3 and rtol 1e-3 both, so it fails compare;
    the search once scored it 1.5e-3 / (1e-3 + 1e-3) = 0.75, a pass."""
    ref, ours = np.array([1.0], np.float32), np.array([1.0015], np.float32)
    assert not tensor_error(ours, ref, 1e-3, 1e-3).passed
    assert tolerance_ratio(ours, ref, 1e-3, 1e-3) == pytest.approx(1.5, rel=1e-3)


@pytest.mark.usefixtures("flavor")
@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_an_auto_build_passes_compare_at_its_tolerances(name, tmp_path) -> None:
    make, profile = {"cnn": (cnn, [{"x": ((1, 3, 16, 16), (2, 3, 16, 16), (4, 3, 16, 16))}]),
                     "transformer": (transformer_model, [{"x": ((1, 8, 32), (2, 8, 32), (2, 8, 32))}])}[name]
    path = str(tmp_path / "m.onnx")
    onnx.save(make(), path)
    atol = rtol = 2e-3
    base = SessionOptions(emulate=True)
    plan = trt_backend.search_precision(path, profile, base, AutoOptions(atol=atol, rtol=rtol, allow=("fp16", "bf16")))
    assert any(s.precision != "fp32" for s in plan.segments)  # (something was reduced, so the check means something)
    folder = str(tmp_path / "built")
    trt_backend.build(path, folder, profile, SessionOptions(build=BuildOptions(precision="auto", precision_plan=plan)))
    # the search's own validation inputs: seeded random at the opt shapes, as compare draws them
    report = trt_backend.compare(folder, trt_backend.CompareOptions(atol=atol, rtol=rtol, iterations=2),
                                 session_options=SessionOptions(emulate=True))
    assert report.passed, report.lines()

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


def _near_tie_classifier(path: str) -> np.ndarray:
    """Logits over 1,000 classes where the last two columns nearly tie (3e-4 apart, below fp16's
    resolution) and dominate, and the ArgMax label: fp16 flips the label of many rows while the
    logits stay within 1% of their range. Returns the inputs."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 1000)).astype(np.float32) * 0.1
    w[:, 998] = np.abs(w[:, 998]) + 1.0
    w[:, 999] = w[:, 998] * (1 + 3e-4) + rng.standard_normal(64).astype(np.float32) * 1e-4
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["logits"]),
         helper.make_node("ArgMax", ["logits"], ["label"], axis=1, keepdims=0)], "near_tie",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [64, 1000]),
         helper.make_tensor_value_info("label", TensorProto.INT64, [64])], [numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return rng.random((64, 64)).astype(np.float32)


@pytest.mark.usefixtures("flavor")
def test_integer_outputs_are_judged_by_equality_in_compare_and_auto_alike(tmp_path, capsys) -> None:
    """Class labels are not measurements: a tolerance scaled to their range (``atol_of_range``
    0.01 of label 999 is 9.99) once let fp16 flip most labels and still PASS. Compare and the
    precision search judge them by equality, and the report counts the labels that differ."""
    from trt_backend.cli import main

    path = str(tmp_path / "m.onnx")
    x = _near_tie_classifier(path)
    feeds = [{"x": x}]
    so = SessionOptions(emulate=True)
    folder = str(tmp_path / "fp16")
    trt_backend.build(path, folder, None, SessionOptions(build=BuildOptions(precision="fp16")))
    report = trt_backend.compare(folder, trt_backend.CompareOptions(atol_of_range=0.01, atol=5.0),
                                 session_options=so, feeds=feeds)
    by_name = {o.name: o for o in report.outputs}
    assert by_name["logits"].passed  # within 1% of the logits' range
    label = by_name["label"]
    assert not label.passed and not report.passed
    assert (label.atol, label.rtol) == (0.0, 0.0)
    ours = trt_backend.Session(folder, options=so).run(["label"], {"x": x})[0]
    import onnxruntime as ort
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(["label"], {"x": x})[0]
    flipped = int(np.count_nonzero(ours != ref))
    assert flipped > 0 and label.error.differing == flipped
    assert report.to_dict()["outputs"][1]["compared_by"] == "equality"
    np.savez(tmp_path / "x.npz", x=x)
    assert main(["compare", folder, "--inputs", str(tmp_path / "x.npz"), "--atol-of-range", "0.01"]) == 1
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("label"))
    assert f"equal: {flipped} of 64 differ" in line and "FAILED" in line
    # The search judges the label by the same rule: it keeps what fp16 would flip in fp32.
    plan = trt_backend.search_precision(path, None, so, AutoOptions(atol_of_range=0.01, allow=("fp16",)), feeds=feeds)
    auto = str(tmp_path / "auto")
    trt_backend.build(path, auto, None, SessionOptions(build=BuildOptions(precision="auto", precision_plan=plan)))
    assert trt_backend.compare(auto, trt_backend.CompareOptions(atol_of_range=0.01), session_options=so,
                               feeds=feeds).passed
    # The plan, the folder and compare say the tolerance the search held the outputs to: the
    # logits' atol raised to 1% of their range (it read "atol 0.001" alone)
    logits = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(["logits"], {"x": x})[0]
    peak = float(np.abs(logits).max())
    assert plan.atol_of_range == 0.01 and plan.atols["logits"] == pytest.approx(0.01 * peak, rel=1e-6)
    words = f"atol 0.001 or 0.01 x each output's largest magnitude ('logits' {0.01 * peak:.3g}), rtol 0.001"
    assert plan.tolerance_words() == words
    assert main(["inspect", auto]) == 0
    assert f"precision plan ({words}):" in capsys.readouterr().out
    assert main(["compare", auto, "--inputs", str(tmp_path / "x.npz"), "--atol-of-range", "0.01"]) == 0
    assert "atol 0.001 or 0.01 x each output's largest magnitude, rtol 0.001" in capsys.readouterr().out
    # Given no tolerance, compare of the folder judges by the rule it was searched with, and says so
    # (it judged at the defaults and FAILED what the search held within its rule)
    assert main(["compare", auto, "--inputs", str(tmp_path / "x.npz")]) == 0
    out = capsys.readouterr().out
    assert f"note: judged by the tolerance the folder's precision plan was searched with ({words})" in out, out
    report = trt_backend.compare(auto, session_options=so, feeds=feeds)
    assert report.passed and report.atol_of_range == 0.01
    given = trt_backend.compare(auto, trt_backend.CompareOptions(atol=1e-4), session_options=so, feeds=feeds)
    assert given.atol_of_range is None and given.atol == 1e-4
    assert f"the folder's precision plan was searched with {words}; judged here by the tolerance given" in given.notes
    # a tolerance typed at the default's value is given all the same (it was taken for none)
    assert main(["compare", auto, "--inputs", str(tmp_path / "x.npz"), "--atol", "0.001", "--rtol", "0.001"]) in (0, 1)
    out = capsys.readouterr().out
    assert "judged here by the tolerance given" in out and "atol 0.001, rtol 0.001, precision" in out, out
    at_defaults = trt_backend.CompareOptions(folder_rule=False)
    assert trt_backend.compare(auto, at_defaults, session_options=so, feeds=feeds).atol_of_range is None


@pytest.mark.usefixtures("flavor")
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_a_sequence_of_maps_is_judged_by_its_numbers_in_compare_and_auto_alike(tmp_path) -> None:
    """scikit-learn's classifiers convert (skl2onnx) to a ZipMap output, a sequence of maps of
    class to probability. ``compare`` judges its numbers by the one rule; the search once scored any
    such output inf unless equal to the bit, so it never reduced a segment feeding one (every
    precision "beyond what pins fix") while compare passed fp16 and bf16 builds of it."""
    from skl2onnx import to_onnx
    from sklearn.datasets import load_digits
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = load_digits(return_X_y=True)
    x = x.astype(np.float32)
    clf = make_pipeline(StandardScaler(), MLPClassifier((32,), max_iter=60, random_state=0)).fit(x[:1000], y[:1000])
    path = str(tmp_path / "digits.onnx")
    with open(path, "wb") as f:
        f.write(to_onnx(clf, x[:1], target_opset=17).SerializeToString())
    feeds = [{"X": x[1000:1032]}]
    so = SessionOptions(emulate=True)
    profiles = [{"X": ((1, 64), (32, 64), (64, 64))}]
    plan = trt_backend.search_precision(path, profiles, so, AutoOptions(allow=("fp16", "bf16")), feeds=feeds)
    assert [s.precision for s in plan.segments] != ["fp32"] * len(plan.segments), plan.rounds
    assert np.isfinite(max(plan.worst.values())), plan.worst
    folder = str(tmp_path / "auto")
    trt_backend.build(path, folder, profiles, SessionOptions(build=BuildOptions(precision="auto", precision_plan=plan)))
    report = trt_backend.compare(folder, trt_backend.CompareOptions(), session_options=so, feeds=feeds)
    maps = next(o for o in report.outputs if o.name == "output_probability")
    assert report.passed and maps.error.max_abs_error > 0  # reduced, measured, within tolerance
    assert 0 < plan.worst["output_probability"] <= 1.0  # the search measured it too, by the same rule

"""Verdicts a user can trust: tolerances that fit each output (``--atol-of-range``), task checks
beside the numbers (top1, argmax-sequence, boxes), no PASS where nothing was compared, real
inputs in (``--inputs``) and outputs saved and compared elsewhere (``--save-outputs``,
``--load-outputs``). Real ONNX Runtime runs and real TensorRT-RTX builds throughout."""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import trt_backend
from trt_backend.accuracy.tasks import TaskCheck, run_checks
from trt_backend.cli import main
from trt_backend.errors import OptionsError, PrecisionSearchError
from trt_backend.session.options import SessionOptions

pytestmark = pytest.mark.usefixtures("flavor")


def detector() -> onnx.ModelProto:
    """x [N, 16] -> boxes [N, 8, 4] in pixels (0..320), scores [N, 8], classes [N, 8], logits [N, 5]."""
    rng = np.random.default_rng(3)
    w = nh.from_array((rng.standard_normal((16, 32)) * 0.5).astype(np.float32), "w")
    wl = nh.from_array((rng.standard_normal((16, 5))).astype(np.float32), "wl")
    scale = nh.from_array(np.array(160.0, np.float32), "scale")
    shape = nh.from_array(np.array([0, 8, 4], np.int64), "shape")
    nodes = [h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Tanh", ["m"], ["t"]),
             h.make_node("Add", ["t", "one"], ["t1"]), h.make_node("Mul", ["t1", "scale"], ["flat"]),
             h.make_node("Reshape", ["flat", "shape"], ["raw"]),
             h.make_node("Split", ["raw", "split"], ["lo", "size"], axis=2),
             h.make_node("Add", ["lo", "size"], ["hi"]), h.make_node("Concat", ["lo", "hi"], ["boxes"], axis=2),
             h.make_node("ReduceMean", ["raw"], ["mean"], axes=[2], keepdims=0),
             h.make_node("Sigmoid", ["mean"], ["pre"]), h.make_node("Mul", ["pre", "pre"], ["scores"]),
             h.make_node("Mul", ["mean", "three"], ["cm"]), h.make_node("Cast", ["cm"], ["classes"], to=T.INT64),
             h.make_node("MatMul", ["x", "wl"], ["logits"])]
    inits = [w, wl, scale, shape, nh.from_array(np.array([2, 2], np.int64), "split"),
             nh.from_array(np.array(1.0, np.float32), "one"), nh.from_array(np.array([2], np.int64), "axes"),
             nh.from_array(np.array(0.01, np.float32), "three")]
    graph = h.make_graph(nodes, "detector", [h.make_tensor_value_info("x", T.FLOAT, ["N", 16])],
                         [h.make_tensor_value_info("boxes", T.FLOAT, None),
                          h.make_tensor_value_info("scores", T.FLOAT, None),
                          h.make_tensor_value_info("classes", T.INT64, None),
                          h.make_tensor_value_info("logits", T.FLOAT, None)], inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def empty_finder() -> onnx.ModelProto:
    """Indices of the elements of x above 10: on inputs in [0, 1) always empty."""
    nodes = [h.make_node("Greater", ["x", "ten"], ["big"]), h.make_node("NonZero", ["big"], ["nz"]),
             h.make_node("Transpose", ["nz"], ["where"], perm=[1, 0]),
             h.make_node("Cast", ["where"], ["where_f"], to=T.FLOAT),
             h.make_node("Mul", ["where_f", "two"], ["found"])]
    graph = h.make_graph(nodes, "finder", [h.make_tensor_value_info("x", T.FLOAT, [4, 6])],
                         [h.make_tensor_value_info("found", T.FLOAT, None)],
                         [nh.from_array(np.array(10.0, np.float32), "ten"),
                          nh.from_array(np.array(2.0, np.float32), "two")])
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


RANGE = ["--min-shapes", "x:1x16", "--opt-shapes", "x:4x16", "--max-shapes", "x:8x16"]


@pytest.fixture(scope="module")
def det_path(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("det") / "det.onnx")
    onnx.save(detector(), path)
    return path


def test_task_checks_count_what_users_see() -> None:
    logits = np.array([[0.1, 0.9, 0.0], [0.5, 0.4, 0.1]], np.float32)
    moved = logits + np.array([[0.0, -0.85, 0.0], [0.0, 0.0, 0.0]], np.float32)  # row 0's answer changes
    [top1] = run_checks([TaskCheck.parse("top1:l@0.5")], [{"l": moved}], [{"l": logits}], ["l"])
    assert (top1.agreed, top1.total, top1.passed) == (1, 2, True)
    # one score a row (a word-boundary probability): its arg-max is 0 whatever the score, and top1
    # said PASSED where 8 of 35 thresholded answers had flipped; nothing is compared there
    probs, flipped = np.array([[0.2], [0.7]], np.float32), np.array([[0.7], [0.2]], np.float32)
    [one] = run_checks([TaskCheck.parse("top1:p")], [{"p": flipped}], [{"p": probs}], ["p"])
    assert (one.total, one.passed) == (0, False) and one.line().endswith("NOT COMPARED"), one.line()
    with pytest.raises(OptionsError, match="more than one class"):
        run_checks([TaskCheck.parse("top1")], [{"p": flipped}], [{"p": probs}], ["p"])
    # greedy CTC: [1, 1, 0, 2] and [1, 0, 0, 2] both read "1 2"; [2, 2, 0, 1] reads "2 1"
    steps = np.eye(3, dtype=np.float32)[[[1, 1, 0, 2], [1, 0, 0, 2], [2, 2, 0, 1]]]
    ref = np.eye(3, dtype=np.float32)[[[1, 0, 0, 2], [1, 0, 2, 2], [2, 0, 1, 1]]]
    [seq] = run_checks([TaskCheck.parse("argmax-sequence:s")], [{"s": steps}], [{"s": ref}], ["s"])
    assert (seq.agreed, seq.total, seq.passed) == (3, 3, True)
    # time-first outputs [time, batch, classes] with the blank last (a CRNN's): read along axis 0
    # with blank 2, sample 1 reads "1 0" against the reference's "0"; read as [batch, time], the 4
    # time steps would be taken for the rows (the check said PASSED over them before it took time=)
    first = np.ascontiguousarray(steps.transpose(1, 0, 2))
    ref_first = first.copy()
    ref_first[0, 1] = np.eye(3, dtype=np.float32)[0]  # sample 1, step 0: token 0 where ours has 1
    [tf] = run_checks([TaskCheck.parse("argmax-sequence:s;time=0;blank=2")], [{"s": first}], [{"s": ref_first}],
                      ["s"])
    assert (tf.agreed, tf.total, tf.passed) == (2, 3, False)
    assert "over 3 sequence(s) (time axis 0, blank 2)" in tf.line()
    boxes_ref = np.array([[0, 0, 10, 10], [50, 50, 80, 90], [0, 0, 1, 1]], np.float32)
    scores_ref = np.array([0.9, 0.8, 0.1], np.float32)
    boxes = boxes_ref + np.array([[1, 1, 1, 1], [40, 40, 40, 40], [0, 0, 0, 0]], np.float32)  # second one moved off
    check = TaskCheck.parse("boxes:b,s@0.5;score=0.3;iou=0.5")
    [det] = run_checks([check], [{"b": boxes, "s": scores_ref}], [{"b": boxes_ref, "s": scores_ref}], ["b", "s"])
    assert (det.agreed, det.total, det.passed) == (1, 2, True)
    [none] = run_checks([check], [{"b": boxes, "s": scores_ref * 0}], [{"b": boxes_ref, "s": scores_ref * 0}],
                        ["b", "s"])
    assert not none.passed and "no detection" in none.line() and "NOT COMPARED" in none.line()
    for bad, message in (("top5", "unknown task check"), ("boxes:b", "boxes names its outputs"),
                         ("top1@2", r"must be a finite number in \[0, 1\], got .2."),
                         ("top1;iou=0.5", "unknown option")):
        with pytest.raises(OptionsError, match=message):
            TaskCheck.parse(bad)


def test_a_detector_in_fp16_fails_pixel_blind_tolerances_and_passes_ones_that_fit(det_path, tmp_path, capsys) -> None:
    common = ["compare", det_path, *RANGE, "--emulate", "--precision", "fp16", "--iterations", "3"]
    assert main([*common, "--json", str(tmp_path / "strict.json")]) == 1
    strict = json.load(open(tmp_path / "strict.json"))
    boxes = next(o for o in strict["outputs"] if o["name"] == "boxes")
    assert not boxes["passed"] and boxes["max_abs_error"] > 1e-2 and boxes["value_range"][1] > 100
    assert boxes["elements"] == 3 * 4 * 8 * 4  # (3 inputs of 4 rows, 8 boxes of 4 numbers)
    capsys.readouterr()
    code = main([*common, "--atol-of-range", "2e-3", "--check", "boxes:boxes,scores,classes;score=0.2",
                 "--check", "top1:logits", "--json", str(tmp_path / "fit.json")])
    out = capsys.readouterr().out
    fit = json.load(open(tmp_path / "fit.json"))
    boxes = next(o for o in fit["outputs"] if o["name"] == "boxes")
    assert boxes["atol"] == pytest.approx(2e-3 * boxes["value_range"][1], rel=1e-6) and boxes["passed"]
    assert {t["check"]: t["passed"] for t in fit["tasks"]} == {"boxes:boxes,scores,classes": True, "top1:logits": True}
    assert all(t["units"] > 0 and t["agreement"] == 1.0 for t in fit["tasks"])
    assert "task checks:" in out and code == 0 and fit["passed"], out


def test_an_empty_output_is_not_a_pass(tmp_path, capsys) -> None:
    path = str(tmp_path / "finder.onnx")
    onnx.save(empty_finder(), path)
    assert main(["compare", path, "--emulate", "--json", str(tmp_path / "r.json")]) == 1
    out = capsys.readouterr().out
    report = json.load(open(tmp_path / "r.json"))
    assert not report["passed"] and report["compared_outputs"] == 0
    assert "NOTHING COMPARED" in out and "NOT COMPARED" in out and "empty in all 1 comparison(s)" in out
    # drawn from a range that reaches past 10, the output holds something and is compared
    assert main(["compare", path, "--emulate", "--val-range", "0,20", "--json", str(tmp_path / "r2.json")]) == 0
    second = json.load(open(tmp_path / "r2.json"))
    assert second["passed"] and second["outputs"][0]["elements"] > 0
    with pytest.raises(PrecisionSearchError, match="empty on all .* validation input"):
        trt_backend.search_precision(path, None, SessionOptions(emulate=True))


def test_fp32_emulation_says_what_it_checks(det_path, capsys) -> None:
    assert main(["compare", det_path, *RANGE, "--emulate"]) == 0
    assert "note: TensorRT segments ran emulated in fp32" in capsys.readouterr().out


def test_real_inputs_and_saved_outputs(det_path, tmp_path, capsys) -> None:
    """--inputs (a folder of samples of two batch sizes: the profile spans them), --save-outputs of
    an fp32 run, then the fp16 build folder compared against those saved outputs."""
    samples = tmp_path / "samples"
    samples.mkdir()
    rng = np.random.default_rng(5)
    np.savez(samples / "a.npz", x=rng.standard_normal((2, 16)).astype(np.float32))
    np.savez(samples / "b.npz", x=rng.standard_normal((5, 16)).astype(np.float32))
    run = str(tmp_path / "run.npz")
    assert main(["compare", det_path, "--emulate", "--inputs", str(samples), "--save-outputs", run,
                 "--json", str(tmp_path / "fp32.json")]) == 0
    fp32 = json.load(open(tmp_path / "fp32.json"))
    assert fp32["points"] == [{"x": [2, 16]}, {"x": [5, 16]}] and fp32["iterations"] == 2
    with np.load(run) as saved:
        assert sorted(saved.files)[:2] == ["inputs/0/x", "inputs/1/x"] and "outputs/1/boxes" in saved.files
    folder = str(tmp_path / "fp16")
    assert main(["build", det_path, "-o", folder, "--min-shapes", "x:1x16", "--opt-shapes", "x:2x16",
                 "--max-shapes", "x:8x16", "--precision", "fp16"]) == 0
    capsys.readouterr()
    assert main(["compare", folder, "--emulate", "--load-outputs", run, "--atol-of-range", "2e-3",
                 "--check", "top1:logits", "--json", str(tmp_path / "loaded.json")]) == 0
    out = capsys.readouterr().out
    loaded = json.load(open(tmp_path / "loaded.json"))
    assert "reference: outputs saved in" in out and loaded["precision"] == "fp16"
    assert max(o["max_abs_error"] for o in loaded["outputs"]) > 0  # (fp16 against the saved fp32 outputs)
    assert loaded["points"] == fp32["points"]
    # the saved outputs against the same fp32 session: equal
    assert main(["compare", det_path, "--emulate", "--load-outputs", run, "--json", str(tmp_path / "same.json")]) == 0
    assert all(o["max_abs_error"] == 0 for o in json.load(open(tmp_path / "same.json"))["outputs"])
    assert main(["compare", det_path, "--emulate", "--load-outputs", str(samples / "a.npz")]) == 2
    assert "holds no outputs" in capsys.readouterr().err


def test_bench_and_auto_take_real_inputs(det_path, tmp_path, capsys) -> None:
    x = str(tmp_path / "x.npz")
    np.savez(x, x=np.random.default_rng(2).standard_normal((3, 16)).astype(np.float32))
    report = str(tmp_path / "bench.json")
    assert main(["bench", det_path, "--emulate", "--inputs", x, "--baselines", "ort-cpu", "--warmup-ms", "10",
                 "--duration-s", "0.05", "--iterations", "3", "--rounds", "1", "--json", report]) == 0
    assert json.load(open(report))["shapes"] == {"x": [3, 16]}
    folder = str(tmp_path / "auto")
    assert main(["build", det_path, "-o", folder, *RANGE, "--precision", "auto", "--allow", "fp16", "--inputs", x,
                 "--atol-of-range", "2e-3"]) == 0
    assert os.path.exists(os.path.join(folder, "manifest.json"))


def test_nan_against_nan_in_every_element_is_not_a_pass(tmp_path, capsys) -> None:
    """Inputs that make every output element NaN on both sides compare nothing (it read PASSED,
    "4 NaN/inf equal in both"); a NaN on one side only still fails; finite elements beside
    matching NaNs are compared as before."""
    graph = h.make_graph([h.make_node("Relu", ["x"], ["r"]), h.make_node("Mul", ["r", "x"], ["y"])], "g",
                         [h.make_tensor_value_info("x", T.FLOAT, [2, 4])],
                         [h.make_tensor_value_info("y", T.FLOAT, [2, 4])])
    path = str(tmp_path / "m.onnx")
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8), path)
    nan, half = str(tmp_path / "nan.npz"), str(tmp_path / "half.npz")
    np.savez(nan, x=np.full((2, 4), np.nan, np.float32))
    np.savez(half, x=np.array([[np.nan] * 4, [1, 2, 3, 4]], np.float32))
    assert main(["compare", path, "--emulate", "--inputs", nan, "--json", str(tmp_path / "r.json")]) == 1
    out = capsys.readouterr().out
    report = json.load(open(tmp_path / "r.json"))
    assert not report["passed"] and report["compared_outputs"] == 0
    assert report["outputs"][0]["elements"] == 8 and report["outputs"][0]["finite_elements"] == 0
    assert "NOTHING COMPARED" in out and "nothing finite to compare" in out
    assert main(["compare", path, "--emulate", "--inputs", half, "--json", str(tmp_path / "r2.json")]) == 0
    second = json.load(open(tmp_path / "r2.json"))
    assert second["passed"] and second["outputs"][0]["finite_elements"] == 4


def test_a_plan_without_a_tensorrt_segment_says_it_compared_onnx_runtime_with_itself(tmp_path, capsys,
                                                                                     caplog) -> None:
    graph = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g",
                         [h.make_tensor_value_info("x", T.FLOAT, [2, 4])],
                         [h.make_tensor_value_info("y", T.FLOAT, [2, 4])])
    path = str(tmp_path / "m.onnx")
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8), path)
    assert main(["compare", path, "--emulate", "--exclude-ops", "Relu", "--precision", "fp16"]) == 0
    out = capsys.readouterr().out
    assert ("note: the plan has no TensorRT segment: ONNX Runtime ran the whole model on both sides, so the "
            "comparison is equal by construction (the precision asked for, fp16, applies to TensorRT segments only)"
            ) in out
    assert "TensorRT segments ran emulated in fp32" not in out
    # the build says so too, and the folder shows what was built beside what was asked
    folder = str(tmp_path / "b")
    assert main(["build", path, "-o", folder, "--exclude-ops", "Relu", "--precision", "fp16"]) == 0
    assert "--precision fp16 applies to TensorRT segments, and the plan has none" in caplog.text
    capsys.readouterr()
    assert main(["inspect", folder]) == 0
    assert "| precision fp32 (asked: fp16) |" in capsys.readouterr().out


def test_a_boxes_check_naming_outputs_that_are_no_boxes_is_one_line(det_path, capsys) -> None:
    """Logits of 5 per row named as the boxes (not 4 numbers each) ended in numpy's reshape
    traceback; a tensor that is no number (labels as strings, maps) named as scores, in a TypeError."""
    from trt_backend.cli import main

    rc = main(["compare", det_path, "--shapes", "x:3x16", "--check", "boxes:logits,scores", "--emulate"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert rc == 2 and err == ("trt-backend: error: task check boxes:logits,scores: output 'logits' (float32, shape "
                               "(3, 5)) cannot be read as boxes (4 numbers each)"), err


def test_a_tf32_folder_says_it_ran_as_fp32(det_path, tmp_path, capsys) -> None:
    """tf32 rounds Conv and MatMul inputs in a GPU's kernels only: a tf32 folder compared without a
    GPU ran fp32, and the report said "precision tf32" and advised building in a reduced precision."""
    from trt_backend.cli import main

    folder = str(tmp_path / "tf32")
    assert main(["build", det_path, "-o", folder, *RANGE, "--precision", "tf32"]) == 0
    capsys.readouterr()
    assert main(["compare", folder]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("precision tf32 (tf32 emulated as fp32)"), out
    note = next(line for line in out.splitlines() if line.startswith("note: TensorRT segments ran emulated"))
    assert "tf32 is not emulated" in note and note.endswith("compare on a GPU to measure those")


def _branches() -> onnx.ModelProto:
    """torch.cond's export: a mean picks one of two MLP heads, all the arithmetic inside If
    branches (Gemm, Tanh / Gemm, Relu), which a reduced precision leaves in fp32."""
    rng = np.random.default_rng(2)
    w1, w2 = (nh.from_array(rng.standard_normal((8, 4)).astype(np.float32), n) for n in ("w1", "w2"))
    out = h.make_tensor_value_info("y", T.FLOAT, ["n", 4])
    then = h.make_graph([h.make_node("Gemm", ["x", "w1"], ["g1"]), h.make_node("Tanh", ["g1"], ["y"])], "then", [],
                        [out])
    other = h.make_graph([h.make_node("Gemm", ["x", "w2"], ["g2"]), h.make_node("Relu", ["g2"], ["y"])], "else",
                         [], [out])
    g = h.make_graph([h.make_node("ReduceMean", ["x"], ["m"], keepdims=0, name="mean"),
                      h.make_node("Greater", ["m", "zero"], ["c"], name="positive"),
                      h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="heads")],
                     "cond", [h.make_tensor_value_info("x", T.FLOAT, ["n", 8])], [out],
                     [w1, w2, nh.from_array(np.array(0, np.float32), "zero")])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 18)])


def _switch_only() -> onnx.ModelProto:
    """silero-vad's form: an integer setting picks one of two heads, so nothing outside the If is
    float arithmetic (Equal on int64), and its bodies hold all of it (MatMul, Tanh)."""
    rng = np.random.default_rng(3)
    weights = [nh.from_array(rng.standard_normal((8, 8)).astype(np.float32), n) for n in ("w1", "w2")]
    out = h.make_tensor_value_info("y", T.FLOAT, ["n", 8])
    branches = [h.make_graph([h.make_node("MatMul", ["x", w.name], [f"m{k}"]), h.make_node("Tanh", [f"m{k}"], ["y"])],
                             f"head{k}", [], [out]) for k, w in enumerate(weights)]
    g = h.make_graph([h.make_node("Equal", ["rate", "k16"], ["is16"], name="is16k"),
                      h.make_node("If", ["is16"], ["y"], then_branch=branches[0], else_branch=branches[1],
                                  name="heads")],
                     "switch", [h.make_tensor_value_info("x", T.FLOAT, ["n", 8]),
                                h.make_tensor_value_info("rate", T.INT64, [])], [out],
                     [*weights, nh.from_array(np.array(16000, np.int64), "k16")])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def test_a_precision_that_reduces_nothing_outside_subgraphs_is_labelled_fp32_at_every_door(tmp_path, capsys,
                                                                                           caplog) -> None:
    """All of a segment's float arithmetic inside an If: fp16 and int8 reduce nothing and build the
    same engine, which fp16 labelled fp32 without a word and int8 labelled fp16 ("compare: PASSED at
    0, precision fp16"; export-triton gave its accelerator precision_mode FP16, which would lower
    the If's bodies on a GPU). Both now say fp32, that the precision asked reduced none of its
    nodes, and why, on the build line, in inspect DIR and in compare of the model and the folder;
    export sets no FP16 for a segment whose subgraphs stay fp32."""
    path = str(tmp_path / "switch.onnx")
    onnx.save(_switch_only(), path)
    np.savez(tmp_path / "in.npz", x=np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32),
             rate=np.array(16000, np.int64))
    inputs = ["--inputs", str(tmp_path / "in.npz")]
    inside = ("the 4 node(s) inside its If subgraphs compute in fp32 (the reduced precisions do not reach into "
              "subgraphs)")
    engines = {}
    for precision in ("fp16", "int8"):
        folder = str(tmp_path / precision)
        extra = ["--calibration-data", str(tmp_path / "in.npz")] if precision == "int8" else []
        assert main(["build", path, "-o", folder, "--precision", precision, "--shapes", "x:4x8", *extra]) == 0
        out = capsys.readouterr()
        said = f"{precision} asked: none of its nodes computes in a reduced precision"
        assert f"tensorrt    fp32 ({said}) ({inside})" in out.out, out.out
        assert "none of its nodes computes in a reduced precision: its float arithmetic is the 4 node(s) inside its " \
            "If subgraphs, which compute in fp32; built in fp32" in caplog.text
        assert main(["inspect", folder]) == 0
        assert f"segment 0: {said}; segment 0: {inside}" in capsys.readouterr().out
        for door in ([folder], [path, "--precision", precision, "--shapes", "x:4x8", *extra]):
            assert main(["compare", *door, *inputs]) == 0
            out = capsys.readouterr().out
            assert f"note: segment 0 (fp32): {said}; {inside}" in out, out
            assert f"precision fp32 ({precision} asked: none of its segments' nodes computes in it)" in out
            assert "compare on a GPU to measure those" in out and "build in a reduced precision" not in out
        manifest = json.load(open(os.path.join(folder, "manifest.json")))
        entry = manifest["segments"][0]
        assert (entry["precision"], entry["unreduced"]) == ("fp32", precision)
        assert entry["fp32_subgraphs"] == {"nodes": ["heads"], "ops": ["If"], "inner": 4}
        engines[precision] = open(os.path.join(folder, "segment_0.engine"), "rb").read()
    assert engines["fp16"] == engines["int8"]  # one engine, one label
    # a segment reduced outside its If, exported for Triton's accelerator: no FP16 flag to lower its bodies
    cond = str(tmp_path / "cond.onnx")
    onnx.save(_branches(), cond)
    assert main(["build", cond, "-o", str(tmp_path / "c16"), "--precision", "fp16", "--shapes", "x:4x8"]) == 0
    assert main(["export-triton", str(tmp_path / "c16"), "-o", str(tmp_path / "repo"), "--trt-format", "onnx"]) == 0
    assert "inside If/Loop/Scan subgraphs): exported without the accelerator's precision_mode FP16" in \
        capsys.readouterr().out
    configs = [open(os.path.join(root, f)).read() for root, _, files in os.walk(tmp_path / "repo") for f in files
               if f == "config.pbtxt"]
    assert configs and not any("FP16" in c for c in configs)


def test_a_reduced_precision_says_what_stays_fp32_inside_subgraphs(tmp_path, capsys) -> None:
    """fp16, bf16 and int8 do not reach into If/Loop/Scan bodies: the segment was labelled fp16
    (and compared at error 0 "precision fp16") while all its arithmetic computed in fp32; int8
    quantized nothing and said so only with -v. The build line, ``inspect DIR`` and ``compare``
    of the model and of the folder now say it, in the same words."""
    path = str(tmp_path / "cond.onnx")
    onnx.save(_branches(), path)
    said = "the 4 node(s) inside its If subgraphs compute in fp32: reduced precision applies outside them"
    folder, folder8 = str(tmp_path / "b16"), str(tmp_path / "b8")
    assert main(["build", path, "-o", folder, "--precision", "fp16", "--shapes", "x:4x8"]) == 0
    assert f"fp16 ({said})" in capsys.readouterr().out
    assert main(["build", path, "-o", folder8, "--precision", "int8", "--shapes", "x:4x8", "--calibration-data",
                 "random"]) == 0
    line = next(li for li in capsys.readouterr().out.splitlines() if "segment 0" in li)
    assert "fp16 (int8 asked: no Conv, ConvTranspose, MatMul or Gemm of it was quantized)" in line and said in line
    for door in ([path, "--precision", "fp16", "--shapes", "x:4x8"], [folder]):
        assert main(["compare", *door]) == 0
        out = capsys.readouterr().out
        assert f"note: segment 0 (fp16): {said}" in out, out
    assert main(["inspect", folder8]) == 0
    assert f"segment 0: {said}" in capsys.readouterr().out
    manifest = json.load(open(os.path.join(folder, "manifest.json")))
    assert manifest["segments"][0]["fp32_subgraphs"] == {"nodes": ["heads"], "ops": ["If"], "inner": 4}

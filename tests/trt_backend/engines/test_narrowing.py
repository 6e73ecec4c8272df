"""A build TensorRT refuses without naming a node is narrowed, not surrendered: an LSTM inside
an If (as PyTorch exports an LSTM whose state may be absent, in a voice-activity network of Convs)
makes TensorRT-RTX's builder fail with an internal assertion on the whole segment. Bisection over
the segment's topological order (real trial builds of its prefixes) blames the If alone: it goes
to ONNX Runtime, every other node builds in TensorRT, and the emulated run equals ONNX Runtime."""
from __future__ import annotations

import json

import logging
import os
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from trt_backend.artifacts.write import build as build_folder
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

H = 8
PROFILES = [{"x": ((1, 64), (2, 512), (4, 1024))}]


def _weight(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
    return nh.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)


def _branch(k: int) -> onnx.GraphProto:
    """An If branch running an LSTM over the outer ``seq`` (its weights W{k}, R{k}, B{k})."""
    return h.make_graph([h.make_node("LSTM", ["seq", f"W{k}", f"R{k}", f"B{k}"], [f"ys{k}", f"yh{k}"],
                                     hidden_size=H, name=f"lstm{k}"),
                         h.make_node("Squeeze", [f"yh{k}", "ax0"], [f"out{k}"], name=f"squeeze{k}")],
                        f"branch{k}", [], [h.make_tensor_value_info(f"out{k}", T.FLOAT, ["N", H])])


def _lstm_weights(rng: np.random.Generator) -> list[onnx.TensorProto]:
    return [_weight(rng, f"{name}{k}", shape) for k in (0, 1)
            for name, shape in (("W", (1, 4 * H, 8)), ("R", (1, 4 * H, H)), ("B", (1, 8 * H)))]


def lstm_in_if() -> onnx.ModelProto:
    """x [N, L], sr []: Conv1d/Relu x2 (stride 4) -> a sequence -> If(sr == 16000) whose branches
    each run an LSTM -> Gemm -> Sigmoid."""
    rng = np.random.default_rng(0)
    nodes = [h.make_node("Unsqueeze", ["x", "ax1"], ["x1"], name="unsq"),
             h.make_node("Conv", ["x1", "w1"], ["c1"], pads=[1, 1], strides=[4], name="conv1"),
             h.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             h.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1], strides=[4], name="conv2"),
             h.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             h.make_node("Transpose", ["r2"], ["seq"], perm=[2, 0, 1], name="to_seq"),
             h.make_node("Equal", ["sr", "rate"], ["cond"], name="is16k"),
             h.make_node("If", ["cond"], ["b"], then_branch=_branch(0), else_branch=_branch(1), name="rnn_if"),
             h.make_node("Gemm", ["b", "fw"], ["g"], name="fc"),
             h.make_node("Sigmoid", ["g"], ["y"], name="sig")]
    inits = [_weight(rng, "w1", (8, 1, 3)), _weight(rng, "w2", (8, 8, 3)), _weight(rng, "fw", (H, 1)),
             nh.from_array(np.array([1], np.int64), "ax1"), nh.from_array(np.array([0], np.int64), "ax0"),
             nh.from_array(np.array(16000, np.int64), "rate"), *_lstm_weights(rng)]
    graph = h.make_graph(nodes, "vad", [h.make_tensor_value_info("x", T.FLOAT, ["N", "L"]),
                                        h.make_tensor_value_info("sr", T.INT64, [])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["N", 1])], inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 15)])
    m.ir_version = 8
    return m


def test_a_builder_failure_naming_no_node_is_narrowed_to_the_if(tmp_path, flavor, caplog) -> None:
    m = lstm_in_if()
    with caplog.at_level(logging.INFO, logger="trt_backend.engines.fallback"):
        manifest = build_folder(m, str(tmp_path / "b"), PROFILES, SessionOptions())
    demoted = manifest["demoted"]
    assert [d["name"] for d in demoted] == ["rnn_if"]
    assert "Assertion" in demoted[0]["reason"] and "narrowed by bisection" in demoted[0]["reason"]
    assert caplog.text.count("bisection blames node 7 'rnn_if'") == 1
    trials = caplog.text.count("bisection build ")
    assert 1 <= trials <= 5  # (log2 of the segment's 10 nodes, rounded up)
    engines = [s for s in manifest["segments"] if s["backend"] == "tensorrt"]
    assert len(engines) == 2 and all(s["engine_bytes"] > 0 for s in engines)
    on_trt = sum(len(s["nodes"]) for s in manifest["plan"]["segments"] if s["backend"] == "tensorrt")
    assert on_trt == len(m.graph.node) - 1  # every node but the If (before: all 10 went to ONNX Runtime)
    sess = Session.load(str(tmp_path / "b"), SessionOptions(emulate=True))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for n, length, sr in ((1, 64, 16000), (3, 700, 8000)):
        feeds = {"x": rng.standard_normal((n, length)).astype(np.float32), "sr": np.array(sr, np.int64)}
        np.testing.assert_allclose(sess.run(None, feeds)[0], ref.run(None, feeds)[0], atol=1e-5)


def test_a_precision_search_before_the_builder_moved_a_node_says_so(tmp_path, flavor, capsys) -> None:
    """--precision auto searches on the plan the parser made; the builder then refuses the If,
    which runs on ONNX Runtime. The folder's precision plan keeps the search's entries (a rebuild
    from them moves the same node) and records what moved after it; inspect DIR says the search's
    errors were measured with it in a TensorRT segment."""
    from trt_backend.cli import main
    from trt_backend.engines.precision_plan import read_precision_plan

    path, folder = str(tmp_path / "vad.onnx"), str(tmp_path / "auto")
    onnx.save(lstm_in_if(), path)
    shapes = ["--min-shapes", "x:1x64,sr:", "--opt-shapes", "x:2x512,sr:", "--max-shapes", "x:4x1024,sr:"]
    assert main(["build", path, "-o", folder, "--precision", "auto", "--allow", "fp16", *shapes]) == 0
    manifest = json.load(open(os.path.join(folder, "manifest.json")))
    assert [d["name"] for d in manifest["demoted"]] == ["rnn_if"]
    assert manifest["precision_plan"]["moved_after_search"] == ["rnn_if"]
    assert read_precision_plan(folder).moved == ("rnn_if",)
    capsys.readouterr()
    assert main(["inspect", folder]) == 0
    out = capsys.readouterr().out
    assert "searched before the build: TensorRT's builder then refused 1 node(s) (rnn_if)" in out


def test_past_the_budget_the_segment_is_demoted_whole(flavor) -> None:
    """With no trial builds allowed the failing segment goes to ONNX Runtime whole, as before."""
    from trt_backend.compiler import compile as compile_model

    compiled = compile_model(lstm_in_if(), PROFILES, SessionOptions(max_narrowing_builds=0))
    assert compiled.plan.tensorrt_segments() == []
    assert compiled.report is not None and len(compiled.report.demoted) == len(lstm_in_if().graph.node)


def test_an_int8_folder_whose_every_segment_went_to_onnx_runtime_runs(tmp_path, flavor) -> None:
    """int8 calibrated, then the one TensorRT segment refused by the builder goes to ONNX Runtime
    whole (no trial builds allowed): the folder holds no int8 segment, and reading it back (run,
    compare) used to fail with "int8 needs calibration data" since no calibration was recorded."""
    from trt_backend.cli import main

    m = lstm_in_if()
    rng = np.random.default_rng(3)
    np.savez(tmp_path / "cal.npz", x=rng.standard_normal((2, 512)).astype(np.float32), sr=np.array(16000, np.int64))
    feeds: dict[str, Any] = {"x": rng.standard_normal((2, 300)).astype(np.float32), "sr": np.array(16000, np.int64)}
    np.savez(tmp_path / "in.npz", **feeds)
    folder = str(tmp_path / "b")
    options = SessionOptions(precision="int8", calibration_data=str(tmp_path / "cal.npz"), max_narrowing_builds=0)
    manifest = build_folder(m, folder, PROFILES, options)
    assert not [s for s in manifest["segments"] if s["backend"] == "tensorrt"]
    assert manifest["build"]["calibration"]["source"] == str(tmp_path / "cal.npz")
    sess = Session.load(folder, SessionOptions(emulate=True))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, feeds)[0], ref.run(None, feeds)[0], atol=1e-6)
    assert main(["run", folder, "--inputs", str(tmp_path / "in.npz")]) == 0
    assert main(["compare", folder, "--inputs", str(tmp_path / "in.npz")]) == 0


def mixed_scale_matmul() -> onnx.ModelProto:
    """fp16 x [N, T, 16] -> Relu -> Q/DQ (fp16 scale) -> MatMul with an int8 weight whose DQ has an
    fp32 scale, cast to fp16: TensorRT-RTX's builder (Myelin) fails on it with an internal check
    ("type mismatch between matmul operand scales") naming no node, and its native code prints
    that check to stderr as well."""
    w = np.random.default_rng(0).integers(-127, 128, (16, 8)).astype(np.int8)
    nodes = [h.make_node("Relu", ["x"], ["r"], name="relu"),
             h.make_node("QuantizeLinear", ["r", "xs", "xz"], ["rq"], name="q"),
             h.make_node("DequantizeLinear", ["rq", "xs", "xz"], ["rd"], name="dq"),
             h.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], name="wdq"),
             h.make_node("Cast", ["wd"], ["wf"], to=T.FLOAT16, name="wcast"),
             h.make_node("MatMul", ["rd", "wf"], ["m"], name="mm"), h.make_node("Tanh", ["m"], ["y"], name="tanh")]
    inits = [nh.from_array(np.array(0.02, np.float16), "xs"), nh.from_array(np.array(0, np.int8), "xz"),
             nh.from_array(w, "w"), nh.from_array(np.full(8, 0.01, np.float32), "ws"),
             nh.from_array(np.zeros(8, np.int8), "wz")]
    graph = h.make_graph(nodes, "mixed", [h.make_tensor_value_info("x", T.FLOAT16, ["N", "T", 16])],
                         [h.make_tensor_value_info("y", T.FLOAT16, ["N", "T", 8])], inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 19)])
    m.ir_version = 9
    return m


def test_a_build_failure_is_told_once_and_quiet_means_quiet(tmp_path, flavor) -> None:
    """The build command on a model whose build fails naming no node: the reason is one warning
    on stderr (the bisection's warning names the node, not the reason again) and one line of the
    report on stdout; TensorRT's note that this machine has no CUDA driver is not part of it;
    Myelin's own print to stderr goes to the debug log. With -q stderr is empty."""
    import subprocess
    import sys

    path = str(tmp_path / "mixed.onnx")
    onnx.save(mixed_scale_matmul(), path)
    check = "type mismatch between matmul operand scales"
    for quiet in (False, True):
        out = str(tmp_path / f"b{int(quiet)}")
        command = ["build", path, "-o", out, *(["-q"] if quiet else []),
                   "--min-shapes", "x:1x1x16", "--opt-shapes", "x:4x5x16", "--max-shapes", "x:8x64x16"]
        proc = subprocess.run([sys.executable, "-m", "trt_backend", *command], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.count(check) == 1 and "demoted 1 node of segment 0 (round 1: MatMul x1)" in proc.stdout
        assert "cudaError" not in proc.stdout + proc.stderr and "Internal Error" not in proc.stderr
        if quiet:
            assert proc.stderr == ""
        else:
            assert proc.stderr.count(check) == 1, proc.stderr
            assert "bisection blames node 5 'mm' (MatMul)" in proc.stderr


def test_compare_of_a_model_runs_what_a_build_of_it_keeps(tmp_path, flavor, capsys) -> None:
    """TensorRT's builder refuses a segment its parser took (the MatMul above): a build demotes
    the MatMul to ONNX Runtime. ``compare`` of the model file builds the engines as the build does
    (on the CPU with TensorRT-RTX), so it runs and judges what the folder holds: the same
    executors and the same errors from the model as from the folder (it emulated the refused
    segment whole before, as if it had built)."""
    from trt_backend.cli import main

    path, folder = str(tmp_path / "mixed.onnx"), str(tmp_path / "b")
    onnx.save(mixed_scale_matmul(), path)
    shapes = ["--min-shapes", "x:1x1x16", "--opt-shapes", "x:4x5x16", "--max-shapes", "x:8x64x16"]
    assert main(["-q", "build", path, "-o", folder, *shapes]) == 0
    capsys.readouterr()
    outputs = []
    for target in (path, folder):
        rc = main(["-q", "compare", target, *(shapes if target == path else []), "--json", str(tmp_path / "c.json")])
        header = capsys.readouterr().out.splitlines()[0]
        report = json.load(open(tmp_path / "c.json"))
        outputs.append((rc, header.split("|")[1].strip(), report["outputs"][0]["max_abs_error"]))
    assert outputs[0] == outputs[1] and "onnxruntime x1" in outputs[0][1], outputs


def test_run_of_a_model_says_its_segments_were_planned_not_built(tmp_path, flavor, capsys, caplog) -> None:
    """``run`` of a model file emulates what was planned, without building (a build of every
    segment for one run would cost more than the run): a segment the builder refuses (the MatMul
    above) is emulated where a build demotes it. The run says so, once; a folder's run, whose
    segments were built, does not."""
    from trt_backend.cli import main

    path, folder = str(tmp_path / "mixed.onnx"), str(tmp_path / "b")
    onnx.save(mixed_scale_matmul(), path)
    shapes = ["--min-shapes", "x:1x1x16", "--opt-shapes", "x:4x5x16", "--max-shapes", "x:8x64x16"]
    assert main(["-q", "build", path, "-o", folder, *shapes]) == 0
    said = "as planned (not built"
    for target, extra, planned in ((path, shapes, True), (folder, [], False)):
        for emulate in ([], ["--emulate"]):
            caplog.clear()
            capsys.readouterr()
            assert main(["run", target, *extra, *emulate]) == 0
            out = capsys.readouterr().out
            warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
            told = out.count(said) + sum(said in w for w in warned)
            assert told == (1 if planned else 0), (target, emulate, out, warned)
            executors = out.split("executors: ")[1].splitlines()[0]
            assert executors == ("emulated x1" if planned else "onnxruntime x1"), (target, executors)


def test_bench_of_a_model_times_what_a_build_of_it_keeps(tmp_path, flavor, capsys) -> None:
    """bench of a model file timed the segment TensorRT's builder refuses as a TensorRT segment
    (emulated) while its own build line said it failed; it now times the plan a build keeps, as
    compare judges it: the refused MatMul on ONNX Runtime, one failure warning."""
    from trt_backend.cli import main

    path, folder = str(tmp_path / "mixed.onnx"), str(tmp_path / "b")
    onnx.save(mixed_scale_matmul(), path)
    shapes = ["--min-shapes", "x:1x1x16", "--opt-shapes", "x:4x5x16", "--max-shapes", "x:8x64x16"]
    assert main(["-q", "build", path, "-o", folder, *shapes]) == 0
    with open(os.path.join(folder, "manifest.json")) as f:
        built = [(s["backend"], s["engine"] is not None) for s in json.load(f)["segments"]]
    capsys.readouterr()
    report = str(tmp_path / "bench.json")
    assert main(["bench", path, *shapes, "--warmup-ms", "10", "--duration-s", "0.1", "--iterations", "3",
                 "--rounds", "1", "--no-progress", "--baselines", "ort-cpu", "--json", report]) == 0
    err = capsys.readouterr().err
    with open(report) as f:
        ours = next(r for r in json.load(f)["runners"] if r["name"] == "trt-backend")
    timed = [(s["backend"], s["executor"]) for s in ours["segments"]]
    assert [b for b, _ in timed] == [b for b, _ in built], (timed, built)
    assert ("onnxruntime", "onnxruntime") in timed and err.count("TensorRT build failed") <= 1, (timed, err)


def test_a_first_node_the_builder_refuses_is_blamed_not_the_whole_segment(tmp_path, flavor, caplog) -> None:
    """The If first in the segment's order (its condition a graph input): not even the one-node
    prefix builds, which bisection took for a build that cannot succeed at all, demoting every
    node. A network of its inputs passed through builds, so the builder works and the If is to blame."""
    rng = np.random.default_rng(1)
    nodes = [h.make_node("If", ["cond"], ["b"], then_branch=_branch(0), else_branch=_branch(1), name="rnn_if"),
             h.make_node("Gemm", ["b", "fw"], ["g"], name="fc"), h.make_node("Relu", ["g"], ["r"], name="relu"),
             h.make_node("Gemm", ["r", "fw2"], ["g2"], name="fc2"), h.make_node("Sigmoid", ["g2"], ["y"], name="sig")]
    inits = [_weight(rng, "fw", (H, H)), _weight(rng, "fw2", (H, 1)), nh.from_array(np.array([0], np.int64), "ax0"),
             *_lstm_weights(rng)]
    graph = h.make_graph(nodes, "first", [h.make_tensor_value_info("seq", T.FLOAT, ["L", "N", 8]),
                                          h.make_tensor_value_info("cond", T.BOOL, [])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["N", 1])], inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 15)])
    m.ir_version = 8
    profiles = [{"seq": ((1, 1, 8), (16, 2, 8), (64, 4, 8)), "cond": ((), (), ())}]
    with caplog.at_level(logging.INFO, logger="trt_backend.engines.fallback"):
        manifest = build_folder(m, str(tmp_path / "b"), profiles, SessionOptions(min_segment_size=1))
    assert [d["name"] for d in manifest["demoted"]] == ["rnn_if"], manifest["demoted"]
    on_trt = sum(len(s["nodes"]) for s in manifest["plan"]["segments"] if s["backend"] == "tensorrt")
    assert on_trt == len(nodes) - 1
    sess = Session.load(str(tmp_path / "b"), SessionOptions(emulate=True))
    feeds = {"seq": rng.standard_normal((16, 2, 8)).astype(np.float32), "cond": np.array(True)}
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(sess.run(None, feeds)[0], ref, rtol=1e-5, atol=1e-6)

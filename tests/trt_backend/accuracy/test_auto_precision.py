"""``--precision auto`` on hand-made graphs, measured for real (emulated segments on ONNX Runtime,
the TensorRT-RTX parser deciding what it takes): a cancellation that fp16 cannot hold is pinned to
fp32 with the rest of the segment kept in fp16, the plan survives JSON and a real RTX build that
reuses it without searching, and a model whose output no precision can meet (random ops) is one
error naming the output."""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from trt_backend.accuracy.auto_precision import AutoOptions, search_precision
from trt_backend.accuracy.compare import compare
from trt_backend.cli import main
from trt_backend.engines.builder import BuildOptions
from trt_backend.engines.precision_plan import PrecisionPlan, read_precision_plan
from trt_backend.errors import PrecisionError, PrecisionSearchError
from trt_backend.artifacts.write import build as build_folder_build
from trt_backend.session.options import SessionOptions

pytestmark = pytest.mark.usefixtures("oracle")  # the TensorRT parser plans and checks what it takes

PROFILE = [{"x": ((1, 8), (4, 8), (8, 8))}]


def cancelling() -> onnx.ModelProto:
    """x -> MatMul -> Relu -> (+1000) -> (-1000) -> MatMul -> Tanh -> y. In fp16, 1000 + v keeps
    v to 0.5 only: the subtraction returns v with that error, far beyond 1e-3."""
    rng = np.random.default_rng(0)
    inits = [nh.from_array((rng.standard_normal((8, 8)) * 0.5).astype(np.float32), "w1"),
             nh.from_array((rng.standard_normal((8, 8)) * 0.5).astype(np.float32), "w2"),
             nh.from_array(np.array(1000.0, np.float32), "big")]
    nodes = [h.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"), h.make_node("Relu", ["m1"], ["r1"], name="relu"),
             h.make_node("Add", ["r1", "big"], ["a"], name="shift"),
             h.make_node("Sub", ["a", "big"], ["s"], name="unshift"),
             h.make_node("MatMul", ["s", "w2"], ["m2"], name="mm2"), h.make_node("Tanh", ["m2"], ["y"], name="tanh")]
    m = h.make_model(h.make_graph(nodes, "cancel", [h.make_tensor_value_info("x", T.FLOAT, ["N", 8])],
                                  [h.make_tensor_value_info("y", T.FLOAT, ["N", 8])], inits),
                     opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("auto") / "cancel.onnx")
    onnx.save(cancelling(), path)
    return path


@pytest.fixture(scope="module")
def plan(model_path) -> PrecisionPlan:
    return search_precision(model_path, PROFILE, SessionOptions(), AutoOptions(allow=("fp16",)))


def test_fp16_fails_and_auto_pins_the_cancellation(model_path, plan) -> None:
    fp16 = compare(model_path, profiles=PROFILE, session_options=SessionOptions(emulate=True, precision="fp16"))
    assert not fp16.passed  # the premise: fp16 alone cannot hold it
    (segment,) = plan.segments
    assert segment.precision == "fp16" and {"shift", "unshift"} <= set(segment.pinned_names)
    assert {"mm1", "mm2"}.isdisjoint(segment.pinned_names) and segment.reduced >= 3
    assert all(p.error > 1 or p.tensor.startswith("s") or p.tensor.startswith("a") for p in segment.pinned)
    assert max(plan.worst.values()) <= 1 and plan.rounds[0].startswith("fp32:") and "pin" in " ".join(plan.rounds)
    # the plan holds on inputs the search did not see
    build = BuildOptions(precision="auto", precision_plan=plan)
    report = compare(model_path, profiles=PROFILE, session_options=SessionOptions(emulate=True, build=build), seed=7,
                     iterations=3, localize="always")
    # the report names what the session computes: the plan's fp16 (its one TensorRT segment), not "auto"
    assert report.segments is not None
    assert report.passed and report.precision == "fp16" and report.segments[0].precision == "fp16"


def test_the_plan_round_trips_and_builds_without_searching(model_path, plan, flavor, tmp_path, capsys) -> None:
    again = PrecisionPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again.segments == plan.segments and again.rounds == plan.rounds
    out = str(tmp_path / "built")
    manifest = build_folder_build(model_path, out, PROFILE,
                                  SessionOptions(build=BuildOptions(precision="auto", precision_plan=plan)))
    (seg,) = [s for s in manifest["segments"] if s["engine"]]
    assert seg["precision"] == "fp16" and manifest["precision_plan"]["segments"][0]["precision"] == "fp16"
    assert read_precision_plan(out).segments == plan.segments
    # the Python door takes what --precision-plan takes: a plan file, a build folder, the plan's JSON
    plan_file = str(tmp_path / "plan.json")
    with open(plan_file, "w") as f:
        json.dump(plan.to_dict(), f)
    # (typed PrecisionPlan, for the code that reads the field; the others are read into one)
    sources: list[Any] = [plan_file, tmp_path / "plan.json", out, plan.to_dict(), str(tmp_path / "missing.json")]
    for given in sources[:-1]:
        read = BuildOptions(precision="auto", precision_plan=given).precision_plan
        assert read is not None and read.segments == plan.segments
    with pytest.raises(PrecisionError, match="cannot read precision plan .*missing.json"):
        BuildOptions(precision="auto", precision_plan=sources[-1])
    rc = main(["build", model_path, "-o", str(tmp_path / "again"), "--min-shapes", "x:1x8", "--opt-shapes", "x:4x8",
               "--max-shapes", "x:8x8", "--precision", "auto", "--precision-plan", out])
    captured = capsys.readouterr()
    assert rc == 0 and "not searched again" in captured.err and "precision search" not in captured.err
    assert "segment 0: fp16," in captured.out and "pinned to fp32: " in captured.out


def test_cli_build_auto_searches_and_records(model_path, tmp_path, capsys) -> None:
    out = tmp_path / "b"
    rc = main(["build", model_path, "-o", str(out), "--min-shapes", "x:1x8", "--opt-shapes", "x:4x8",
               "--max-shapes", "x:8x8", "--precision", "auto", "--allow", "fp16", "--atol", "1e-3", "--rtol", "1e-3"])
    captured = capsys.readouterr()
    assert rc == 0 and "precision search (" in captured.err and "round 1: segment 0 fp16" in captured.err
    data = json.loads((out / "manifest.json").read_text())
    assert data["build_options"]["precision"] == "auto" and data["precision_plan"]["rounds"]


def test_cli_compare_of_a_model_searches_auto_as_build_does(model_path, tmp_path, capsys) -> None:
    """``compare MODEL --precision auto`` ended in a TypeError traceback: compare's --seed came to
    the search as text ("0"), which AutoOptions took unchecked. It searches now, seeded as compare
    seeds its inputs, to the plan ``build --precision auto`` searches with the same seed."""
    flags = ["--min-shapes", "x:1x8", "--opt-shapes", "x:4x8", "--max-shapes", "x:8x8", "--precision", "auto",
             "--allow", "fp16"]
    rc = main(["compare", model_path, *flags, "--seed", "0"])
    captured = capsys.readouterr()
    assert rc in (0, 1) and "precision search (" in captured.err and "Traceback" not in captured.err
    assert "round 1: segment 0 fp16" in captured.err
    searched = [ln for ln in captured.err.splitlines() if ln.startswith("  round ")]
    assert main(["build", model_path, "-o", str(tmp_path / "b"), *flags]) == 0
    assert [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("  round ")] == searched
    assert AutoOptions(seed="7").seed == 7  # type: ignore[arg-type]  # (as the command line hands it over)
    from partitioner.errors import OptionsError

    with pytest.raises(OptionsError, match="seed must be"):
        AutoOptions(seed="seven")  # type: ignore[arg-type]


def random_output() -> onnx.ModelProto:
    nodes = [h.make_node("Relu", ["x"], ["r"], name="relu"),
             h.make_node("RandomUniformLike", ["r"], ["n"], name="noise"),
             h.make_node("Add", ["r", "n"], ["y"], name="add")]
    m = h.make_model(h.make_graph(nodes, "noisy", [h.make_tensor_value_info("x", T.FLOAT, ["N", 8])],
                                  [h.make_tensor_value_info("y", T.FLOAT, ["N", 8])]),
                     opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_an_output_no_precision_can_meet_is_named(tmp_path) -> None:
    path = str(tmp_path / "noisy.onnx")
    onnx.save(random_output(), path)
    with pytest.raises(PrecisionSearchError, match=r"output 'y' differs from the reference by .* even with every "
                                                   r"segment in fp32 \(nondeterministic ops\?\)"):
        search_precision(path, PROFILE)
    rc = main(["build", path, "-o", str(tmp_path / "b"), "--shapes", "x:4x8", "--precision", "auto"])
    assert rc == 1 and not os.path.exists(tmp_path / "b")


def test_int8_asked_for_without_calibration_data_is_said_and_left_out(model_path, caplog) -> None:
    """int8 needs calibration data: asked for by name without it, the search says so in a warning
    (shown by the CLI's default level) and tries what is left; the default allow list only notes it."""
    with caplog.at_level("INFO", logger="trt_backend.accuracy.auto_precision"):
        plan = search_precision(model_path, PROFILE, SessionOptions(), AutoOptions(allow=("fp16", "int8")))
    said = [(r.levelname, r.getMessage()) for r in caplog.records if "int8 left out" in r.getMessage()]
    assert said == [("WARNING", "int8 left out of the precision search: it needs calibration data "
                                "(--calibration-data FILE)")]
    assert plan.allowed == ("fp16",)
    caplog.clear()
    with caplog.at_level("INFO", logger="trt_backend.accuracy.auto_precision"):
        plan = search_precision(model_path, PROFILE, SessionOptions(), AutoOptions(allow=("fp16", "bf16", "int8")))
    assert [r.levelname for r in caplog.records if "int8 left out" in r.getMessage()] == ["INFO"]
    assert plan.allowed == ("bf16", "fp16")


def test_bad_auto_options() -> None:
    from partitioner.errors import OptionsError

    with pytest.raises(OptionsError, match="--allow takes some of int8, bf16, fp16, got fp8"):
        AutoOptions(allow=("fp8",))
    # (both doors' ways named: the Python door's user has no command-line flags)
    with pytest.raises(OptionsError, match=r"precision 'auto' builds from a precision plan: .*"
                                           r"trt_backend\.search_precision\(model, \.\.\.\).*"
                                           r"BuildOptions\(precision_plan=\.\.\.\)"):
        BuildOptions(precision="auto")


def test_inspect_and_run_show_the_plan(model_path, plan, flavor, tmp_path, capsys) -> None:
    out = str(tmp_path / "built")
    build_folder_build(model_path, out, PROFILE,
                       SessionOptions(build=BuildOptions(precision="auto", precision_plan=plan)))
    page = str(tmp_path / "picture.html")
    assert main(["inspect", model_path, "--precision-plan", out, "--picture", page]) == 0
    text = capsys.readouterr().out
    assert "segment 0: fp16, " in text and "pinned to fp32: " in text and "unshift (Sub, " in text
    with open(page, encoding="utf-8") as f:
        html = f.read()
    assert "<h2>Precision</h2>" in html and "unshift (Sub): " in html
    assert main(["run", out, "--emulate", "--shapes", "x:4x8"]) == 0
    assert "emulated in: segment 0 fp16" in capsys.readouterr().out


def two_matmuls() -> onnx.ModelProto:
    """``cancelling`` without the cancellation: x -> MatMul -> Relu -> MatMul -> Tanh -> y."""
    m = cancelling()
    nodes = [n for n in m.graph.node if n.name not in ("shift", "unshift")]
    nodes[2].input[0] = "r1"
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    big = [t for t in m.graph.initializer if t.name == "big"]
    m.graph.initializer.remove(big[0])
    return m


def test_auto_reaches_int8_with_fp16_and_its_error_is_the_transformed_models(tmp_path) -> None:
    """At a tolerance int8 can hold, auto stays at the mixed level (int8 with fp16 for the rest,
    every node reduced); the session's emulated output is exactly an ONNX Runtime run of the
    transformed segment (Q/DQ + fp16, rounded as the engine holds it), and int8's error is real."""
    import onnxruntime as ort

    from trt_backend.engines.emulation import rounded_in_fp32
    from trt_backend.session.session import Session

    path, data = str(tmp_path / "mm.onnx"), str(tmp_path / "cal.npz")
    onnx.save(two_matmuls(), path)
    np.savez(data, x=np.random.default_rng(3).standard_normal((32, 8)).astype(np.float32))
    plan = search_precision(path, PROFILE, SessionOptions(calibration_data=data),
                            AutoOptions(atol=0.1, rtol=0.1, allow=("int8", "fp16")))
    (segment,) = plan.segments
    assert segment.precision == "int8" and not segment.pinned, plan.rounds
    assert segment.reduced == 4 and max(plan.worst.values()) <= 1  # MatMuls in int8, Relu and Tanh in fp16
    build = BuildOptions(precision="auto", calibration_data=data, precision_plan=plan)
    x = np.random.default_rng(9).standard_normal((4, 8)).astype(np.float32)
    with Session(path, PROFILE, SessionOptions(emulate=True, build=build)) as sess:
        emulated = sess.run(None, {"x": x})[0]
        transformed = sess.quantizer(build)(sess.plan.extract(0))
    assert any(t.data_type == T.FLOAT16 for t in transformed.graph.initializer)  # the fp16 remainder
    assert sum(n.op_type == "QuantizeLinear" for n in transformed.graph.node) == 2
    basic = ort.SessionOptions()  # (above "basic", ONNX Runtime's own int8 kernels replace the Q/DQ arithmetic)
    basic.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    direct = ort.InferenceSession(rounded_in_fp32(transformed, T.FLOAT16).SerializeToString(), basic,
                                  providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    reference = ort.InferenceSession(two_matmuls().SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    assert np.array_equal(emulated, direct)
    err = np.abs(emulated - reference)
    assert 1e-3 < err.max() and np.all(err <= 0.1 + 0.1 * np.abs(reference))  # int8's error, within the tolerance


def test_a_segment_moved_up_for_another_ones_error_comes_back_down(tmp_path) -> None:
    """The demo (two TensorRT segments around an ONNX Runtime one): segment 0 is blamed first and
    climbs to fp32, then segment 2's conv3 turns out to be what breaks int8; the descent brings
    segment 0 back to a reduced precision with every output still within 1e-3."""
    data = str(tmp_path / "cal.npz")
    np.savez(data, image=np.random.default_rng(0).random((32, 3, 32, 32), dtype=np.float32))
    profiles = [{"image": ((1, 3, 32, 32), (4, 3, 32, 32), (8, 3, 32, 32))}]
    demo = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))),
                        "trt_backend", "data", "demo.onnx")
    plan = search_precision(demo, profiles, SessionOptions(calibration_data=data))
    first, last = plan.segments
    assert any(line.startswith(f"descent: segment {first.segment} fp32 -> ") for line in plan.rounds), plan.rounds
    assert first.precision != "fp32" and first.reduced == len(first.nodes)
    # (under compare's elementwise rule the classifier head needs its Flatten and Gemm kept too:
    # the score that once let conv3 alone pass was up to 2x more lenient than compare)
    assert last.precision == "int8" and last.pinned_names[0] == "conv3" and len(last.pinned_names) <= 3
    assert max(plan.worst.values()) <= 1


def test_when_pins_stop_helping_a_bisected_tail_beats_fp32(model_path) -> None:
    """At 0.3 the cancellation's error spreads past the two nodes pinned first; rather than send the
    segment to fp32, auto bisects the shortest tail of it that, pinned, passes, and keeps the head
    in fp16. The plan prints the tail once."""
    plan = search_precision(model_path, PROFILE, SessionOptions(), AutoOptions(atol=0.3, rtol=0.3, allow=("fp16",)))
    (segment,) = plan.segments
    bisection = [line for line in plan.rounds if "tail bisection" in line]
    assert bisection and segment.precision == "fp16" and max(plan.worst.values()) <= 1, plan.rounds
    order = [n for n in cancelling().graph.node]
    k = len(segment.pinned)
    assert 0 < k < len(order) and set(segment.pinned_names) == {n.name for n in order[len(order) - k:]}
    assert f"the last {k} of {len(order)} node(s) pinned pass" in bisection[0]
    assert segment.reduced == len(order) - k
    # a long tail (ResNet-50's 119 nodes) prints once, first to last
    from trt_backend.engines.precision_plan import PinnedNode, SegmentPrecision

    why = "(the last 8 node(s) of the segment, pinned by bisection)"
    long = PrecisionPlan((SegmentPrecision("fp16", tuple("abcdefghij"), tuple(PinnedNode(n, "Conv", why, 0.5, 3)
                                                                            for n in "cdefghij"), 2, 0),),
                         1e-3, 1e-3, ("fp16",))
    assert long.lines() == [f"segment 0: fp16, 2/10 node(s) reduced, 8 pinned to fp32: c ... j {why}"]



def test_the_manifest_lists_the_nodes_the_precision_plan_pinned(tmp_path) -> None:
    """An auto build keeps the plan's pinned nodes fp32; the folder's segment entry lists them as
    ``pinned`` (it listed only the nodes TensorRT refused, so the plan said one thing and the
    segment none), and the segment model the engine was built from computes them in fp32."""
    from tests.support.graphs import cnn

    path = str(tmp_path / "cnn.onnx")
    onnx.save(cnn(), path)
    names = [n.name for n in cnn().graph.node]
    plan = PrecisionPlan.from_dict({"format": 1, "atol": 1e-3, "rtol": 1e-3, "allowed": ["fp16"], "segments": [
        {"segment": 0, "precision": "fp16", "reduced": 8, "nodes": names,
         "pinned": [{"node": "conv1", "op_type": "Conv", "tensor": "y", "error": 2.0, "round": 1}]}]})
    folder = str(tmp_path / "b")
    manifest = build_folder_build(path, folder, [{"x": ((1, 3, 16, 16), (2, 3, 16, 16), (4, 3, 16, 16))}],
                                  SessionOptions(build=BuildOptions(precision="auto", precision_plan=plan)))
    built = {s["id"]: onnx.load(os.path.join(folder, s["model"])) for s in manifest["segments"] if s["engine"]}
    holding = [s for s in manifest["segments"] if s["id"] in built
               and any(n.name == "conv1" for n in built[s["id"]].graph.node)]
    assert len(holding) == 1 and holding[0]["precision"] == "fp16" and holding[0]["pinned"] == ["conv1"], holding
    assert all(s["pinned"] == [] for s in manifest["segments"] if s["id"] in built and s not in holding)
    graph = built[holding[0]["id"]].graph
    weights = {t.name: t.data_type for t in graph.initializer}
    convs = {n.name: weights[n.input[1]] for n in graph.node if n.op_type == "Conv"}
    assert convs["conv1"] == T.FLOAT and all(t == T.FLOAT16 for n, t in convs.items() if n != "conv1"), convs
    # Triton's TensorRT accelerator is not told FP16 for a segment with pins (it would lower them
    # too): the exported segment model's casts carry what was reduced; the others are told FP16.
    repo = str(tmp_path / "repo")
    assert main(["export-triton", folder, "-o", repo]) == 0
    configs = {d: open(os.path.join(repo, d, "config.pbtxt")).read() for d in os.listdir(repo) if d.endswith("_trt")}
    told = {int(d.rsplit("_", 2)[-2]): '"precision_mode"' in c for d, c in configs.items()}
    assert told == {s["id"]: not s["pinned"] for s in manifest["segments"] if s["id"] in built}, (told, configs)


def test_auto_on_a_model_stored_in_fp16_records_fp32_not_a_precision_that_reduced_nothing(tmp_path, capsys) -> None:
    """bf16 lowers none of an fp16 model's nodes, so its search "passes" bf16 at error 0; the plan,
    the folder and compare said bf16 though nothing computed in it. The segment is recorded as
    fp32, and the build line says the model computes in its own fp16."""
    w = nh.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float16), "w")
    graph = h.make_graph([h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["y"])],
                         "fp16net", [h.make_tensor_value_info("x", T.FLOAT16, ["N", 3, 8, 8])],
                         [h.make_tensor_value_info("y", T.FLOAT16, ["N", 4, 8, 8])], [w])
    path = str(tmp_path / "fp16net.onnx")
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), path)
    profile = [{"x": ((1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8))}]
    plan = search_precision(path, profile, SessionOptions(emulate=True), AutoOptions(allow=("bf16",)))
    assert [(s.precision, s.reduced) for s in plan.segments] == [("fp32", 0)]
    assert any("bf16 reduces none of its nodes; recorded as fp32" in line for line in plan.rounds)
    assert main(["build", path, "-o", str(tmp_path / "b"), "--shapes", "x:2x3x8x8", "--precision", "auto"]) == 0
    out = capsys.readouterr().out
    assert "tensorrt    fp32 (computes in fp16: the model's own types)" in out, out


def test_a_precision_asked_of_a_model_stored_in_fp16_says_it_reduced_nothing(tmp_path, capsys, caplog) -> None:
    """--precision bf16 of a model stored in fp16 builds it as it is (fp32, computing in its own
    fp16): the build says so in a warning, and compare's closing line names the types it computes
    in where it said "precision fp32" alone."""
    import logging

    w = nh.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float16), "w")
    graph = h.make_graph([h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv_asked"),
                          h.make_node("Relu", ["c"], ["y"], name="relu_asked")],
                         "fp16net", [h.make_tensor_value_info("x", T.FLOAT16, ["N", 3, 8, 8])],
                         [h.make_tensor_value_info("y", T.FLOAT16, ["N", 4, 8, 8])], [w])
    path = str(tmp_path / "fp16net.onnx")
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), path)
    with caplog.at_level(logging.WARNING, logger="trt_backend.engines.builder"):
        assert main(["build", path, "-o", str(tmp_path / "b"), "--shapes", "x:2x3x8x8", "--precision", "bf16"]) == 0
    assert "bf16 asked, but it holds no float32 arithmetic to reduce: it computes in the model's own fp16 types" \
        in caplog.text
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "b")]) == 0
    assert "precision fp32 (computing in the model's own fp16 types)" in capsys.readouterr().out


def test_a_plan_reused_on_another_partition_keeps_what_it_measured_in_fp32() -> None:
    """A plan searched on three segments and reused where the partition made one of them: the
    merged segment took its largest entry's precision and that entry's pins only, so a node the
    search had pinned to fp32 in another segment computed in fp16 (compare then FAILED what the
    searched folder passed). Every pin, every node of an entry of another precision, and every
    node the search never measured in TensorRT stay fp32."""
    from trt_backend.engines.precision_plan import PinnedNode, PrecisionPlan, SegmentPrecision, pinned_of

    pin = PinnedNode("e", "Exp", "summary", 3.0, 1)
    plan = PrecisionPlan((SegmentPrecision("fp16", ("a", "b", "g")), SegmentPrecision("fp32", ("c",)),
                          SegmentPrecision("fp16", ("d", "e"), (pin,))), 1e-3, 1e-3, ("fp16",))
    assert pinned_of(plan, ["a", "b", "g"]) == ("fp16", ())  # as searched
    assert pinned_of(plan, ["d", "e"]) == ("fp16", ("e",))
    assert pinned_of(plan, ["a", "b", "g", "c", "d", "e", "f"]) == ("fp16", ("e", "c", "f"))
    assert pinned_of(plan, ["c", "x"]) == ("fp32", ())


def test_a_tail_search_that_found_none_is_not_run_again_in_the_descent() -> None:
    """Its first node leaves fp16's range (x 1000 on inputs of 100): only the whole segment pinned
    passes, so the round's tail bisection leaves nothing reduced and the segment goes to fp32; the
    descent then ran the same bisection again, the same runs to the same end (NudeNet: nine runs,
    its line twice)."""
    k, k2 = nh.from_array(np.array(1000.0, np.float32), "k"), nh.from_array(np.array(1e-3, np.float32), "k2")
    g = h.make_graph([h.make_node("Mul", ["x", "k"], ["a"]), h.make_node("Relu", ["a"], ["b"]),
                      h.make_node("Mul", ["b", "k2"], ["c"]), h.make_node("Neg", ["c"], ["y"])], "wide",
                     [h.make_tensor_value_info("x", T.FLOAT, ["N", 8])], [h.make_tensor_value_info("y", T.FLOAT, None)],
                     [k, k2])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    feeds = [{"x": np.full((4, 8), 100.0, np.float32)}]
    plan = search_precision(m, PROFILE, SessionOptions(emulate=True, min_segment_size=1),
                            AutoOptions(allow=("fp16",)), feeds=feeds)
    assert [s.precision for s in plan.segments] == ["fp32"]
    bisections = [r for r in plan.rounds if "tail bisection" in r]
    assert len(bisections) == 1 and "leaves nothing reduced" in bisections[0], plan.rounds
    assert any(r.startswith("descent: segment 0 fp16: no tail search (the one before") for r in plan.rounds), \
        plan.rounds

"""Types shape inference cannot give are learned by running the model (trt_backend.ort.probe):
an skl2onnx pipeline's MLP core after its ai.onnx.ml nodes goes to TensorRT in one segment, runs
emulated equal to ONNX Runtime and builds; a probe that cannot run names what it could not learn."""
from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from tests.support.attention import attention_reshape
from tests.support.graphs import assert_same, ort_reference
from tests.support.pipelines import mlp_pipeline
from trt_backend.ort.probe import HOW, opt_shapes
from trt_backend.profiles.given import profile_shapes
from trt_backend.planning import make_plan
from trt_backend.artifacts.write import build as build_folder_build
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_mlp_core_after_ml_ops_is_one_tensorrt_segment(flavor, tmp_path) -> None:
    m = mlp_pipeline()
    plan = make_plan(m)
    matmuls = [i for i, n in enumerate(m.graph.node) if n.op_type in ("MatMul", "Add", "Relu")]
    assert len(matmuls) == 8
    holding = {plan.nodes[i].segment for i in matmuls}
    assert len(holding) == 1 and plan.segments[holding.pop()].backend == "tensorrt"
    scaled = m.graph.node[0].output[0]  # the Scaler's output: unknown to ONNX's shape inference
    assert plan.learned[scaled] == HOW and len(plan.learned) >= 9
    assert plan.model is not None
    tp = plan.model.index.types[scaled].tensor_type
    assert tp.elem_type == T.FLOAT and [d.dim_value for d in tp.shape.dim] == [0, 8]  # batch unknown, 8 static
    assert '"learned_types": {' in plan.to_json()
    # it runs emulated as ONNX Runtime runs the whole model, and it builds
    profiles = [{"X": ((1, 8), (4, 8), (16, 8))}]
    sess = Session(m, profiles, SessionOptions(emulate=True))
    rng = np.random.default_rng(5)
    for n in (1, 4, 16):
        feeds = {"X": rng.standard_normal((n, 8)).astype(np.float32)}
        assert_same(sess.run(None, feeds), ort_reference(m, feeds))
    manifest = build_folder_build(m, str(tmp_path / "b"), profiles, SessionOptions())
    engines = [s for s in manifest["segments"] if s["engine"]]
    assert len(engines) >= 1 and all(s["engine_bytes"] > 0 for s in engines)


def test_named_input_dims_carry_over() -> None:
    """A learned dim that follows a named input dim in both probe runs gets its name."""
    x = h.make_tensor_value_info("x", T.FLOAT, ["batch", 4])
    nodes = [h.make_node("Scaler", ["x"], ["s"], domain="ai.onnx.ml", offset=[0.5] * 4, scale=[2.0] * 4),
             h.make_node("Relu", ["s"], ["y"])]
    m = h.make_model(h.make_graph(nodes, "g", [x], [h.make_tensor_value_info("y", T.FLOAT, None)]),
                     opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", 3)])
    from trt_backend.planning import load_normalized as load

    model = load(m)
    dims = model.index.types["s"].tensor_type.shape.dim
    assert [(d.dim_param, d.dim_value) for d in dims] == [("batch", 0), ("", 4)]
    assert model.learned == {"s": HOW, "y": HOW}  # (the output, declared without a shape, too)


def test_a_probe_that_cannot_run_names_the_tensors(flavor, caplog) -> None:
    """ONNX Runtime cannot run an op of an unknown domain: the probe fails, a warning names the
    tensors it could not learn, and planning goes on with their readers on ONNX Runtime."""
    x = h.make_tensor_value_info("x", T.FLOAT, [2, 4])
    nodes = [h.make_node("Mystery", ["x"], ["u"], domain="com.example"),
             h.make_node("Relu", ["u"], ["r"]), h.make_node("Neg", ["r"], ["y"])]
    m = h.make_model(h.make_graph(nodes, "g", [x], [h.make_tensor_value_info("y", T.FLOAT, [2, 4])]),
                     opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.example", 1)])
    from partitioner import PartitionOptions

    with caplog.at_level(logging.WARNING, logger="trt_backend.ort.probe"):
        plan = make_plan(m, PartitionOptions(min_segment_size=1))
    assert plan.learned == {}
    assert "could not be learned by running the model" in caplog.text and "'u'" in caplog.text
    relu = plan.nodes[1]
    assert relu.verdict == "onnxruntime" and "dtype of input 'u' is unknown" in (relu.reason or "")


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_compare_checks_sequence_of_maps_outputs(flavor) -> None:
    """ZipMap's probabilities (a sequence of maps) are compared too, not handed to Polygraphy
    (which cannot take them); a difference in them fails the comparison."""
    from trt_backend.accuracy.compare import compare
    from trt_backend.accuracy.options import CompareOptions
    from trt_backend.accuracy.polygraphy_glue import side_errors

    m = mlp_pipeline()
    report = compare(m, CompareOptions(), profiles=[{"X": ((1, 8), (4, 8), (8, 8))}],
                     session_options=SessionOptions(emulate=True))
    assert report.passed and [o.name for o in report.outputs] == ["output_label", "output_probability"]
    assert report.skipped_outputs == []
    # what was compared, counted once: 4 samples (the opt shape), a map of 3 classes each
    assert [o.elements for o in report.outputs] == [4, 12]
    opts = CompareOptions()
    same = [{0: 0.25, 1: 0.75}, {0: 0.5, 1: 0.5}]
    assert side_errors("p", same, [dict(d) for d in same], opts).passed
    off = side_errors("p", same, [{0: 0.25, 1: 0.75}, {0: 0.6, 1: 0.4}], opts)
    assert not off.passed and off.max_abs_error == pytest.approx(0.1)
    note = side_errors("p", same, [{0: 0.25, 2: 0.75}, {0: 0.5, 1: 0.5}], opts).note
    assert note == "map keys differ from the reference's"
    assert not side_errors("p", same, same[:1], opts).passed


def test_a_declared_type_the_probe_cannot_check_is_kept(flavor) -> None:
    """A custom op ONNX Runtime cannot run, whose output the model's value_info types: the probe
    fails, the declaration stays (recorded as such) and what follows is typed from it."""
    from partitioner.model import DECLARED
    from trt_backend.planning import load_normalized as load

    x = h.make_tensor_value_info("x", T.FLOAT, [2, 4])
    nodes = [h.make_node("Mystery", ["x"], ["u"], domain="com.example"),
             h.make_node("Relu", ["u"], ["r"]), h.make_node("Neg", ["r"], ["y"])]
    m = h.make_model(h.make_graph(nodes, "g", [x], [h.make_tensor_value_info("y", T.FLOAT, [2, 4])],
                                  value_info=[h.make_tensor_value_info("u", T.FLOAT, [2, 4])]),
                     opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.example", 1)])
    model = load(m)
    assert model.learned == {"u": DECLARED}
    assert [d.dim_value for d in model.index.types["r"].tensor_type.shape.dim] == [2, 4]


def test_a_failed_probe_gives_a_graph_outputs_declared_type_back_as_it_found_it(flavor) -> None:
    """A graph output recorded as typed by the model's declaration (loading records one so where
    the exporter declares it in value_info too and inference cannot type it), which the probe checks and
    cannot (here a Reshape to a shape fed at run time fails at the probe's made-up values): the
    declaration is given back recorded as it was. It was dropped from the record (a graph
    output's type is on the output, not in value_info, where the probe looked), so a plan kept in
    the plan cache never fit the model loaded again: "its plan does not fit the model" at every
    later run."""
    from partitioner.model import DECLARED, load_model
    from trt_backend.ort.probe import learn_unknown_types

    nodes = [h.make_node("Reshape", ["x", "s"], ["r"], name="reshape"), h.make_node("Relu", ["r"], ["y"], name="relu")]
    m = h.make_model(h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 4]),
                                               h.make_tensor_value_info("s", T.INT64, ["k"])],
                                  [h.make_tensor_value_info("y", T.FLOAT, [2, 4])]),
                     opset_imports=[h.make_opsetid("", 17)])
    model = load_model(m)
    model.learned["y"] = DECLARED  # (as loading records a graph output it cannot type but by its declaration)
    assert learn_unknown_types(model) == []  # (the probe fails: the Reshape cannot run at its values)
    assert model.learned == {"y": DECLARED}
    assert [d.dim_value for d in model.proto.graph.output[0].type.tensor_type.shape.dim] == [2, 4]


def test_a_probe_of_a_loop_without_an_end_is_stopped(flavor, monkeypatch, caplog) -> None:
    """A Loop given neither a trip count nor an ending condition (its condition a constant true)
    over a value whose type inference cannot give: the probe that would learn it would never end,
    and loading with it (so inspect) would not either. It is stopped after PROBE_SECONDS and said
    as a probe that failed; the model loads, its unknown types left unknown."""
    from onnx import numpy_helper as nh

    from trt_backend.ort import probe
    from trt_backend.planning import load_normalized as load

    monkeypatch.setattr(probe, "PROBE_SECONDS", 1.0)
    def vi(name: str, elem: int, shape: list[int] | None) -> onnx.ValueInfoProto:
        return h.make_tensor_value_info(name, elem, shape)

    branch = [h.make_graph([h.make_node(op, ["x"], ["o"])], op, [], [vi("o", T.FLOAT, None)]) for op in ("Relu", "Neg")]
    body = h.make_graph([h.make_node("Identity", ["c"], ["c_out"]), h.make_node("Sigmoid", ["v"], ["v_out"])], "body",
                        [vi("i", T.INT64, []), vi("c", T.BOOL, []), vi("v", T.FLOAT, None)],
                        [vi("c_out", T.BOOL, []), vi("v_out", T.FLOAT, None)])
    nodes = [h.make_node("ReduceMean", ["x"], ["m"], keepdims=0, name="mean"),
             h.make_node("Greater", ["m", "zero"], ["cond"], name="greater"),
             h.make_node("If", ["cond"], ["b"], then_branch=branch[0], else_branch=branch[1], name="if"),
             h.make_node("Loop", ["", "true", "b"], ["looped"], body=body, name="loop"),
             h.make_node("Relu", ["looped"], ["y"], name="relu")]
    constants = [nh.from_array(np.array(0, np.float32), "zero"), nh.from_array(np.array(True), "true")]
    m = h.make_model(h.make_graph(nodes, "g", [vi("x", T.FLOAT, [2, 4])], [vi("y", T.FLOAT, None)], constants),
                     opset_imports=[h.make_opsetid("", 17)])
    with caplog.at_level(logging.WARNING, logger="trt_backend.ort.probe"):
        model = load(m)
    assert "did not end within 1 s" in caplog.text
    assert "looped" not in model.learned


def test_a_probe_run_that_fails_says_so_once(tmp_path, flavor) -> None:
    """A reflect Pad of 64 cannot run at the probe's dims of 2 (a voice-activity model's STFT
    padding): the one warning says so, and ONNX Runtime's own error log line does not repeat it
    on stderr. At the profile's shapes (``run --shapes``) the probe runs and there is nothing to say."""
    import subprocess
    import sys

    import onnx
    from onnx import numpy_helper as nh

    nodes = [h.make_node("Pad", ["x", "pads"], ["p"], mode="reflect", name="pad"),
             h.make_node("Gelu", ["p"], ["u"], domain="com.microsoft", name="gelu"),  # (a type inference cannot give)
             h.make_node("Relu", ["u"], ["r"], name="relu"), h.make_node("Sigmoid", ["r"], ["y"], name="sig")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, "n"])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     [nh.from_array(np.array([0, 64, 0, 64], np.int64), "pads")])
    path = tmp_path / "padded.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)]), str(path))
    run = subprocess.run([sys.executable, "-m", "trt_backend", "inspect", str(path)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stderr.count("could not be learned by running the model") == 1 and "Pad reflect" in run.stderr
    assert "onnxruntime:" not in run.stderr and "ExecuteKernel" not in run.stderr, run.stderr
    shaped = subprocess.run([sys.executable, "-m", "trt_backend", "run", str(path), "--shapes", "x:1x200", "--emulate"],
                            capture_output=True, text=True, timeout=300)
    assert shaped.returncode == 0 and "could not be learned" not in shaped.stderr, shaped.stderr


def test_an_attention_reshape_needs_no_probe_and_runs_as_onnx_runtime_runs_it(flavor, monkeypatch) -> None:
    """The rank after a Reshape whose shape follows from a Mod of constants is inferred (the
    constant shape arithmetic evaluated for inference, partitioner.folding): no probe run, no
    learned types, one TensorRT segment that runs as ONNX Runtime runs the model."""
    from trt_backend.ort import probe

    def no_probe(*args, **kw):
        raise AssertionError("the probe ran")

    monkeypatch.setattr(probe, "_probe", no_probe)
    model = attention_reshape()
    plan = make_plan(model)
    assert plan.learned == {} and [s.backend for s in plan.segments] == ["tensorrt"]
    feeds = {"x": np.random.default_rng(0).standard_normal((3, 5, 8)).astype(np.float32)}
    sess = Session(model, [{"x": ((1, 5, 8), (3, 5, 8), (4, 5, 8))}], SessionOptions(emulate=True))
    assert_same(sess.run(None, feeds), ort_reference(model, feeds))


def _tree_classifier(extra: list[onnx.NodeProto], outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
    """A one-tree TreeEnsembleClassifier on x (2 classes: x[:, 0] <= 0.5 or not), whose label and
    probabilities ONNX's shape inference gives no rank, then ZipMap, then the ``extra`` nodes."""
    x = h.make_tensor_value_info("x", T.FLOAT, ["batch", 3])
    tree = h.make_node(
        "TreeEnsembleClassifier", ["x"], ["label", "prob"], domain="ai.onnx.ml", nodes_treeids=[0, 0, 0],
        nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0], nodes_values=[0.5, 0.0, 0.0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
        class_treeids=[0, 0], class_nodeids=[1, 2], class_ids=[0, 1], class_weights=[1.0, 1.0],
        classlabels_int64s=[0, 1])
    zipmap = h.make_node("ZipMap", ["prob"], ["probabilities"], domain="ai.onnx.ml", classlabels_int64s=[0, 1])
    maps = h.make_value_info("probabilities", h.make_sequence_type_proto(h.make_map_type_proto(
        T.INT64, h.make_tensor_type_proto(T.FLOAT, None))))
    graph = h.make_graph([tree, zipmap, *extra], "trees", [x], [*outputs, maps])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", 1)])


def test_no_probe_where_only_onnx_ml_nodes_read_the_unknown_types(flavor, caplog) -> None:
    """A tree ensemble and its ZipMap: only ai.onnx.ml nodes read the tensors of unknown rank, so no
    verdict, estimate or boundary reads their types, the model is not run to learn them, and the
    plan is the one ONNX Runtime segment it is with them learned."""
    from trt_backend.planning import load_normalized as load

    m = _tree_classifier([], [h.make_tensor_value_info("label", T.INT64, None)])
    with caplog.at_level(logging.INFO, logger="trt_backend.ort.probe"):
        model = load(m)
    assert model.learned == {}
    assert "prob" not in model.index.types  # not learned: unknown
    assert "the model is not run to learn them" in caplog.text and "'prob'" in caplog.text
    plan = make_plan(m)
    assert [s.backend for s in plan.segments] == ["onnxruntime"] and plan.learned == {}
    assert '"learned_types"' not in plan.to_json()
    sess = Session(m, options=SessionOptions(emulate=True))
    feeds = {"x": np.array([[0.2, 1, 1], [0.9, 1, 1], [0.4, 0, 0]], np.float32)}
    got = sess.run(None, feeds)
    assert_same(got, ort_reference(m, feeds))


def test_probe_still_runs_where_a_standard_node_reads_an_unknown_type(flavor) -> None:
    """The same trees with a Cast of the label after them (a node TensorRT may take): the probe
    runs and learns the label's rank and dtype, as it does for every tensor of unknown type."""
    from trt_backend.planning import load_normalized as load

    cast = h.make_node("Cast", ["label"], ["label_f"], to=T.FLOAT)
    m = _tree_classifier([cast], [h.make_tensor_value_info("label_f", T.FLOAT, None)])
    model = load(m)
    assert model.learned == {"label": HOW, "prob": HOW, "label_f": HOW}
    dims = model.index.types["label"].tensor_type.shape.dim
    assert model.index.types["label"].tensor_type.elem_type == T.INT64 and [d.dim_param for d in dims] == ["batch"]


def test_probe_runs_where_an_onnx_ml_reader_also_reads_what_tensorrt_may_take(flavor) -> None:
    """A Scaler's output (of unknown rank) read only by a FeatureVectorizer, an ai.onnx.ml node,
    that also reads a Relu chain TensorRT may take: that reader runs after the chain, in a later
    ONNX Runtime segment than the Scaler, so the Scaler's output crosses a boundary and its type
    is learned."""
    from trt_backend.planning import load_normalized as load

    x = h.make_tensor_value_info("x", T.FLOAT, ["batch", 4])
    nodes = [h.make_node("Scaler", ["x"], ["s"], domain="ai.onnx.ml", offset=[0.5] * 4, scale=[2.0] * 4),
             h.make_node("Relu", ["x"], ["r"]), h.make_node("Neg", ["r"], ["n"]), h.make_node("Abs", ["n"], ["a"]),
             h.make_node("FeatureVectorizer", ["s", "a"], ["y"], domain="ai.onnx.ml", inputdimensions=[4, 4])]
    m = h.make_model(h.make_graph(nodes, "g", [x], [h.make_tensor_value_info("y", T.FLOAT, None)]),
                     opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", 3)])
    model = load(m)
    assert model.learned.get("s") == HOW
    assert [d.dim_value for d in model.index.types["s"].tensor_type.shape.dim] == [0, 4]


def test_opt_shapes_are_each_profiles_second_shapes() -> None:
    profiles = [{"x": ((1, 3), (2, 3), (4, 3))}, {"x": ((5, 3), (6, 3), (8, 3))}]
    assert opt_shapes(profile_shapes(profiles)) == [{"x": (2, 3)}, {"x": (6, 3)}]
    assert opt_shapes([{"x": (7, 3)}]) == [{"x": (7, 3)}]  # shapes given once: as they are
    assert opt_shapes([]) == []

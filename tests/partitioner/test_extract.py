"""Extracted segments are standalone: full checker, ONNX Runtime loads them, numbers match."""
from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from partitioner import PartitionOptions, plan_model
from partitioner.extract import boundary, extract
from partitioner.model import check_model, load_model
from tests.helpers import (
    assert_plan_valid,
    const,
    crop_resize,
    model,
    shared_constants_model,
    vi,
)

LIGHT = ["light_bvlc_alexnet", "light_densenet121", "light_inception_v1", "light_inception_v2", "light_resnet50",
         "light_shufflenet", "light_squeezenet", "light_vgg19", "light_zfnet512"]


def ort_session(proto: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", LIGHT)
def test_light_models_plan_as_one_tensorrt_segment(name, light_dir, oracle) -> None:
    plan = plan_model(os.path.join(light_dir, name + ".onnx"), oracle)
    assert [s.backend for s in plan.segments] == ["tensorrt"]
    assert all(n.verdict == "tensorrt" for n in plan.nodes)
    assert_plan_valid(plan)
    seg = plan.extract(0)
    check_model(seg, where=name, full=True)
    ort_session(seg)


def test_light_model_cut_in_three_reproduces_whole_model(light_dir, oracle) -> None:
    """Force two fallbacks into ResNet-50, run the five segments by hand, compare to the whole."""
    path = os.path.join(light_dir, "light_resnet50.onnx")
    whole = load_model(path)
    relus = [n.name for n in whole.proto.graph.node if n.op_type == "Relu"]
    plan = plan_model(path, oracle, PartitionOptions(exclude_nodes=(relus[10], relus[30])))
    assert [s.backend for s in plan.segments] == ["tensorrt", "onnxruntime", "tensorrt", "onnxruntime", "tensorrt"]
    assert_plan_valid(plan)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    values = {"gpu_0/data_0": x}
    for seg in plan.segments:
        sub = plan.extract(seg.id)
        check_model(sub, where=f"segment {seg.id}", full=True)
        outs = ort_session(sub).run(list(seg.outputs), {k: values[k] for k in seg.inputs})
        values.update(zip(seg.outputs, outs))
    expected = ort_session(whole.proto).run(None, {"gpu_0/data_0": x})[0]
    np.testing.assert_allclose(values[whole.proto.graph.output[0].name], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape_output", [False, True])
def test_segments_with_copied_constants_are_standalone_and_stitch_to_the_whole_model(oracle, shape_output) -> None:
    """Each segment model holds the constant-only nodes it reads (the later TensorRT segment its
    copies of k, fill and cast) and the initializers; run one after another they give the whole
    model's outputs, a constant-only graph output included."""
    proto = shared_constants_model(shape_output)
    plan = plan_model(proto, oracle, PartitionOptions(exclude_ops=("Sin",), boundary_cost=None))
    x = np.random.default_rng(0).standard_normal((3, 6)).astype(np.float32)
    values = {"x": x}
    for seg in plan.segments:
        sub = plan.extract(seg.id)
        onnx.checker.check_model(sub, full_check=True)
        assert [i.name for i in sub.graph.input] == list(seg.inputs)
        names = [n.name for n in sub.graph.node]
        assert all(plan.nodes[i].name in names for i in seg.members)
        outs = ort_session(sub).run(list(seg.outputs), {k: values[k] for k in seg.inputs})
        values.update(zip(seg.outputs, outs))
    tail = plan.extract(2)
    assert [n.name for n in tail.graph.node][:3] == ["k", "fill", "cast"]
    assert sorted(t.name for t in tail.graph.initializer) == ["ax0", "idx", "one"]
    expected = ort_session(proto).run(None, {"x": x})
    assert len(expected) == 4 + shape_output
    for out, want in zip(proto.graph.output, expected):
        np.testing.assert_array_equal(values[out.name], want)
    assert values["y4"].shape == (6, 3)
    if shape_output:
        assert values["shp"].tolist() == [-1]


def test_extract_carries_only_used_initializers_and_typed_boundaries() -> None:
    rz, inits = crop_resize("a", "r")
    nodes = [helper.make_node("Mul", ["x", "w"], ["a"], name="mul"), rz,
             helper.make_node("Add", ["r", "b"], ["y"], name="add")]
    m = load_model(model(nodes, [vi("x", ["N", 3, 4, 4])], [vi("y", ["N", 3, 4, 4])],
                         inits + [const("w", np.full((1,), 2, np.float32)), const("b", np.ones((1,), np.float32))]))
    sub = extract(m, [1, 2], name="tail")
    assert sorted(t.name for t in sub.graph.initializer) == ["b", "r.roi", "r.scales"]
    (inp,) = sub.graph.input
    assert inp.name == "a"
    assert [d.dim_param or d.dim_value for d in inp.type.tensor_type.shape.dim] == ["N", 3, 4, 4]
    assert inp.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert [o.name for o in sub.graph.output] == ["y"]
    check_model(sub, where="tail", full=True)
    out = ort_session(sub).run(None, {"a": np.ones((2, 3, 4, 4), np.float32)})[0]
    assert out.shape == (2, 3, 4, 4)


def test_extract_brings_local_functions_it_calls() -> None:
    fn = helper.make_function("my.fn", "Double", ["i"], ["o"], [helper.make_node("Add", ["i", "i"], ["o"])],
                              [helper.make_opsetid("", 17)])
    nodes = [helper.make_node("Double", ["x"], ["a"], domain="my.fn", name="dbl"),
             helper.make_node("Relu", ["a"], ["y"], name="r")]
    m = model(nodes, [vi("x", ["N"])], [vi("y", ["N"])], extra_opsets=[("my.fn", 1)])
    m.functions.append(fn)
    loaded = load_model(m)
    sub = extract(loaded, [0], name="fn_only")
    assert [(f.domain, f.name) for f in sub.functions] == [("my.fn", "Double")]
    assert ort_session(sub).run(None, {"x": np.array([1.5], np.float32)})[0].tolist() == [3.0]
    assert len(extract(loaded, [1], name="relu_only").functions) == 0


def test_a_deep_chain_of_local_functions_comes_along() -> None:
    """Functions calling functions 5,000 deep (5x the recursion limit): every one is carried."""
    from partitioner.extract import _used_functions

    depth = 5000
    fns = [helper.make_function("my.fn", f"F{k}", ["i"], ["o"],
                                [helper.make_node(f"F{k + 1}", ["i"], ["o"], domain="my.fn") if k + 1 < depth
                                 else helper.make_node("Relu", ["i"], ["o"])],
                                [helper.make_opsetid("", 17), helper.make_opsetid("my.fn", 1)]) for k in range(depth)]
    nodes = [helper.make_node("F0", ["x"], ["y"], domain="my.fn", name="outer")]
    m = model(nodes, [vi("x", ["N"])], [vi("y", ["N"])], extra_opsets=[("my.fn", 1)])
    m.functions.extend(fns)
    assert [f.name for f in _used_functions(m, m.graph.node)] == sorted(f"F{k}" for k in range(depth))


def test_every_node_has_the_graphs_own_interface_in_its_order(oracle) -> None:
    """A node set holding every node has the graph's inputs and outputs in the graph's order (as
    TensorRT's parser makes a network of the model's file), inputs no node reads included where
    the parser makes a network input of them (an int64 one; not a string one, which it cannot
    hold, nor a default listed as an input too); part of the graph keeps its first-read and
    production order."""
    nodes = [helper.make_node("Mul", ["a", "b"], ["m"], name="mul"),
             helper.make_node("Relu", ["m"], ["late"], name="relu"),
             helper.make_node("Neg", ["b"], ["early"], name="neg")]
    inputs = [vi("tag", [1], onnx.TensorProto.STRING), vi("b", ["N", 4]), vi("length", [1], onnx.TensorProto.INT64),
              vi("a", ["N", 4]), vi("scale", [1])]
    m = load_model(model(nodes, inputs, [vi("early", ["N", 4]), vi("late", ["N", 4])],
                         [const("scale", np.ones((1,), np.float32))]))
    assert boundary(m.index, range(3)) == (["b", "length", "a"], ["early", "late"])
    assert boundary(m.index, [0, 1]) == (["a", "b"], ["late"])
    plan = plan_model(m, oracle, PartitionOptions(min_segment_size=1))  # (TensorRT's parser asked of it whole)
    (seg,) = plan.segments
    assert (seg.backend, plan.oracle_calls) == ("tensorrt", 1)
    whole = plan.extract(seg.id)
    assert [v.name for v in whole.graph.input] == ["b", "length", "a"]
    assert [v.name for v in whole.graph.output] == ["early", "late"]
    feeds = {"a": np.ones((2, 4), np.float32), "b": np.full((2, 4), -2, np.float32), "length": np.array([3])}
    early, late = ort_session(whole).run(None, feeds)
    np.testing.assert_array_equal(early, np.full((2, 4), 2, np.float32))
    np.testing.assert_array_equal(late, np.zeros((2, 4), np.float32))


"""Types past ops shape inference has no rule for (a Reshape whose target shape is computed at run
time before opset 14, a Loop's final loop-carried values): loading types what follows them
without running the model, each type what ONNX Runtime computes."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from partitioner import load_model
from partitioner.model import unknown_tensor_types
from partitioner.walk import types_past_inference
from tests.helpers import const, model, vi


def _ints(name: str, values: list[int]) -> onnx.TensorProto:
    return const(name, np.array(values, np.int64))


def _paddle_like(opset: int) -> onnx.ModelProto:
    """A Conv, then Paddle2ONNX's reshape to ``[N, C, -1]`` with the target computed from the
    Conv's own shape, then attention-like ops after it, and a second such reshape of a tensor
    only the first one types (``[N, -1]`` through Gather and Unsqueeze)."""
    slice_inputs = ["s", "zero", "two"] if opset >= 10 else ["s"]
    slice_attrs: dict[str, Any] = {} if opset >= 10 else {"starts": [0], "ends": [2]}
    unsqueeze = (helper.make_node("Unsqueeze", ["n", "zero"], ["n1"]) if opset >= 13
                 else helper.make_node("Unsqueeze", ["n"], ["n1"], axes=[0]))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Shape", ["c"], ["s"]),
             helper.make_node("Slice", slice_inputs, ["s2"], **slice_attrs),
             helper.make_node("Concat", ["s2", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["c", "target"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["t", "m"], ["mm"]),  # (a weight past what inference is handed)
             helper.make_node("Softmax", ["mm"], ["sm"], axis=-1),
             helper.make_node("Shape", ["sm"], ["s3"]),
             helper.make_node("Gather", ["s3", "zero_scalar"], ["n"], axis=0),
             unsqueeze,
             helper.make_node("Concat", ["n1", "minus_one"], ["target2"], axis=0),
             helper.make_node("Reshape", ["sm", "target2"], ["y"])]
    inits = [const("w", np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)),
             const("m", np.random.default_rng(1).standard_normal((4, 500)).astype(np.float32)),
             _ints("zero", [0]), _ints("two", [2]), _ints("minus_one", [-1]),
             const("zero_scalar", np.array(0, np.int64))]
    return model(nodes, [vi("x", ["N", 3, None, "W"])], [vi("y", None)], inits, opset=opset)


def _dims(tp: onnx.TypeProto) -> list[int | str | None]:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tp.tensor_type.shape.dim]


def _agrees_with_onnx_runtime(m: onnx.ModelProto, types: dict[str, onnx.TypeProto], x_shapes: list[tuple[int, ...]]
                              ) -> None:
    """Every tensor's type in ``types`` holds in ONNX Runtime's run of ``m`` at each input shape:
    its rank and dtype, its numbers, and its input dim names as the inputs' dims."""
    tapped = onnx.ModelProto()
    tapped.CopyFrom(m)
    names = sorted(types)
    tapped.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
    sess = ort.InferenceSession(tapped.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in x_shapes:
        x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
        got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": x})))
        declared = m.graph.input[0].type.tensor_type.shape.dim
        named = {d.dim_param: size for d, size in zip(declared, shape) if d.dim_param}
        for n in names:
            want = _dims(types[n])
            assert len(want) == got[n].ndim, (n, want, got[n].shape)
            assert types[n].tensor_type.elem_type == onnx.helper.np_dtype_to_tensor_dtype(got[n].dtype), n
            for d, actual in zip(want, got[n].shape):
                expected = named.get(d) if isinstance(d, str) else d  # (None: a name of its own, or unknown)
                assert expected is None or expected == actual, (n, want, got[n].shape)


def test_a_reshape_to_a_target_computed_at_run_time_is_typed_past_it() -> None:
    """Paddle2ONNX's models (opset 11 and 12): shape inference typed nothing after the first
    reshape to a computed target, and loading then ran the whole model in ONNX Runtime. Now every
    tensor is typed at load: the reshape's rank is its target's length and its dims what the
    target says (the batch and channels read from the Conv's shape, the -1 unknown), and what
    follows is ONNX's inference from there; each type holds in ONNX Runtime's runs."""
    for opset in (9, 11, 12, 13):
        m = _paddle_like(opset)
        loaded = load_model(m)
        assert unknown_tensor_types(loaded) == [], opset
        assert loaded.learned == {}
        types = loaded.index.types
        assert _dims(types["r"]) == ["N", 4, None], opset
        assert _dims(types["sm"])[0] == "N" and _dims(types["sm"])[2] == 500
        assert _dims(types["y"]) == ["N", None]
        _agrees_with_onnx_runtime(m, {n: types[n] for n in ("r", "t", "mm", "sm", "y")}, [(1, 3, 6, 8), (3, 3, 2, 5)])


def test_a_reshape_target_of_numbers_gives_numbers_and_its_minus_one_what_the_element_count_leaves() -> None:
    """Static dims: the -1 is the element count over the other dims, a 0 copies the input's dim,
    dims multiplied (two axes merged, as torch's exports of old write it) are their product, and
    constant arithmetic (a Div of constants) is what partitioner.folding computes of it."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "zero", "one"], ["s1"]),
             helper.make_node("Concat", ["s1", "zero", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"]),
             helper.make_node("Gather", ["s", "zero_scalar"], ["a"], axis=0),
             helper.make_node("Gather", ["s", "one_scalar"], ["b"], axis=0),
             helper.make_node("Mul", ["a", "b"], ["ab"]),
             helper.make_node("Unsqueeze", ["ab"], ["ab1"], axes=[0]),
             helper.make_node("Concat", ["ab1", "minus_one"], ["target2"], axis=0),
             helper.make_node("Reshape", ["x", "target2"], ["y2"]),
             helper.make_node("Div", ["twelve", "four"], ["three"]),
             helper.make_node("Concat", ["s1", "three", "minus_one"], ["target3"], axis=0),
             helper.make_node("Reshape", ["x", "target3"], ["y3"])]
    m = model(nodes, [vi("x", [2, 3, 4, 5])], [vi("y", None), vi("y2", None), vi("y3", None)],
              [_ints("zero", [0]), _ints("one", [1]), _ints("minus_one", [-1]), _ints("twelve", [12]),
               _ints("four", [4]), const("zero_scalar", np.array(0, np.int64)),
               const("one_scalar", np.array(1, np.int64))], opset=12)
    loaded = load_model(m)
    assert [_dims(o.type) for o in loaded.proto.graph.output] == [[2, 3, 20], [6, 20], [2, 3, 20]]


def test_a_target_whose_values_are_not_known_still_gives_the_rank() -> None:
    """A target fed at run time: its values unknown, its length known, so the rank is."""
    nodes = [helper.make_node("Reshape", ["x", "target"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    m = model(nodes, [vi("x", ["N", 6]), vi("target", [3], TensorProto.INT64)], [vi("y", None)], opset=12)
    loaded = load_model(m)
    assert len(_dims(loaded.proto.graph.output[0].type)) == 3
    assert unknown_tensor_types(loaded) == [] and loaded.learned == {}


def test_from_opset_14_on_inference_reads_a_computed_target_itself() -> None:
    """Reshape-14 has ONNX's own rule for a computed target (data propagation): nothing to add."""
    m = _paddle_like(14)
    copy = onnx.shape_inference.infer_shapes(m, data_prop=True)
    assert types_past_inference(copy) == {}
    assert _dims(load_model(m).index.types["r"])[:2] == ["N", 4]


def _loop(body_nodes: list[onnx.NodeProto], body_out: onnx.ValueInfoProto) -> onnx.ModelProto:
    """x -> Loop (3 iterations, a constant trip count; one loop-carried value from x, the body's
    nodes making ``h_out`` from ``h``) -> Relu -> ReduceMean: as torch.jit.script exports a loop,
    the body's input declared with the start's shape."""
    body = helper.make_graph([helper.make_node("Identity", ["cond_in"], ["cond_out"]), *body_nodes], "body",
                             [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("h", ["N", 4])],
                             [vi("cond_out", [], TensorProto.BOOL), body_out])
    nodes = [helper.make_node("Loop", ["steps", "", "x"], ["looped"], body=body),
             helper.make_node("Relu", ["looped"], ["r"]), helper.make_node("ReduceMean", ["r"], ["y"], keepdims=0)]
    return model(nodes, [vi("x", ["N", 4])], [vi("y", None)], [const("steps", np.array(3, np.int64))], opset=17)


def test_a_loops_final_value_has_the_type_its_start_and_its_body_share() -> None:
    """A Loop's loop-carried value: inference leaves its final value without a shape (it may change
    from one iteration to the next), and loading ran the model to learn it. Now it has the element
    type and rank its start and the body's output share, with the dims they share: all of them
    where the body keeps the shape, the rank alone where it grows a dim; each holds in ONNX
    Runtime's runs."""
    keeps = _loop([helper.make_node("Relu", ["h"], ["t"]), helper.make_node("Add", ["t", "h"], ["h_out"])],
                  vi("h_out", None))
    grows = _loop([helper.make_node("Concat", ["h", "h"], ["h_out"], axis=1)], vi("h_out", None))
    for m, want in ((keeps, ["N", 4]), (grows, ["N", None])):
        loaded = load_model(m)
        assert unknown_tensor_types(loaded) == [] and loaded.learned == {}
        types = loaded.index.types
        assert _dims(types["looped"]) == want
        _agrees_with_onnx_runtime(m, {n: types[n] for n in ("looped", "r")}, [(2, 4), (5, 4)])


def test_dims_past_what_an_int64_holds_are_unknown_not_an_error() -> None:
    """A dim multiplied past int64 (a fuzzed huge dim times a constant: found by a mutation run,
    where it raised out of ONNX's helper) is an unknown dim; loading goes on."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero_scalar"], ["a"], axis=0),
             helper.make_node("Mul", ["a", "sixteen"], ["a16"]),
             helper.make_node("Unsqueeze", ["a16"], ["a1"], axes=[0]),
             helper.make_node("Concat", ["a1", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    m = model(nodes, [vi("x", [2**61, 2, "W"])], [vi("y", None)],
              [_ints("minus_one", [-1]), const("zero_scalar", np.array(0, np.int64)),
               const("sixteen", np.array(16, np.int64))], opset=12)
    assert _dims(load_model(m).proto.graph.output[0].type) == [None, None]


def test_a_node_onnx_refuses_its_input_types_stays_untyped_not_an_error() -> None:
    """ONNX's rule for a node past the walked Reshape refuses its input's type (a Relu of strings:
    found by a mutation run, where the checker's ValidationError came out of the walk): the node
    stays untyped, the model loads (ONNX Runtime is what refuses it, at run time)."""
    nodes = [helper.make_node("Reshape", ["x", "target"], ["r"]), helper.make_node("Cast", ["r"], ["c"], to=8),
             helper.make_node("Relu", ["c"], ["y"])]
    m = model(nodes, [vi("x", ["N", 6]), vi("target", [2], TensorProto.INT64)], [vi("y", None)], opset=12)
    loaded = load_model(m)
    assert len(_dims(loaded.index.types["c"])) == 2 and "y" in unknown_tensor_types(loaded)


def test_the_walk_takes_a_node_whose_attributes_onnx_would_refuse_as_unknown() -> None:
    """Loading's checker refuses a Concat whose axis is a string, but skips models past 2 GiB: the
    walk itself takes such a node's value as unknown (the Reshape after it keeps its rank) rather
    than failing on it."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Concat", ["s", "m"], ["t"], axis=0),
             helper.make_node("Reshape", ["x", "t"], ["y"])]
    m = model(nodes, [vi("x", ["N", 6])], [vi("y", None)], [_ints("m", [-1])], opset=12)
    m.graph.node[1].attribute[0].CopyFrom(helper.make_attribute("axis", "bogus"))
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=False)
    assert len(_dims(types_past_inference(inferred)["y"])) == 3


def test_graph_outputs_are_described_as_onnx_runtime_describes_them_not_as_the_walk_types_them() -> None:
    """ONNX Runtime describes a graph output by the model's declaration and its own inference; the
    walk's types go further (ddddocr's TorchScript export declares its output [1, seqlen] where the
    walk computes rank 3, and the description lost its shape). The description is ONNX Runtime's:
    the walk's types are not part of it. Here a Loop's value, through a Relu, declared [1, a, b]."""
    m = _loop([helper.make_node("Relu", ["h"], ["t"]), helper.make_node("Add", ["t", "h"], ["h_out"])],
              vi("h_out", None))
    del m.graph.node[-1]  # (the ReduceMean: the Relu's output is the graph output)
    m.graph.output[0].CopyFrom(vi("r", [1, "a", "b"]))
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).get_outputs()[0].shape
    loaded = load_model(m)
    assert _dims(loaded.output_types[0]) == want == [1, "a", "b"]
    assert _dims(loaded.index.types["looped"]) == ["N", 4]  # (what the walk computes, for planning)

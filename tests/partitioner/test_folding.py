"""Constant shape arithmetic evaluated for shape inference (partitioner.folding): every op's value
equals what ONNX's reference evaluator computes, negative operands and axes included; a node that
cannot be said exactly is left to the model; and a model whose Reshape rank follows from a Mod of
constants (torch's attention export) is typed by inference, the model itself unchanged."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from partitioner.folding import fold_for_inference
from partitioner.model import load_model, unknown_tensor_types
from tests.support.attention import attention_reshape

I64 = np.int64


def _const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return h.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name + "_v"))


def _folded(nodes: list[onnx.NodeProto], out: str, opset: int = 17) -> np.ndarray | None:
    """The value ``fold_for_inference`` gives ``out``; None where it left that node alone."""
    graph = h.make_graph(nodes + [h.make_node("Identity", ["x"], ["y"])], "g",
                         [h.make_tensor_value_info("x", T.FLOAT, [1])], [h.make_tensor_value_info("y", T.FLOAT, [1])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    folded = fold_for_inference(model)
    if folded is None:
        return None
    found = {t.name: numpy_helper.to_array(t) for t in folded.graph.initializer}
    return found.get(out)


def _reference(nodes: list[onnx.NodeProto], out: str, opset: int = 17) -> np.ndarray:
    graph = h.make_graph(nodes, "g", [], [h.make_tensor_value_info(out, T.UNDEFINED, None)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    (value,) = ReferenceEvaluator(model).run(None, {})
    return np.asarray(value)


A = np.array([7, -7, 7, -7, 0, 9], dtype=I64)
B = np.array([2, 2, -2, -2, 3, -4], dtype=I64)
CASES = {
    "add": [_const("a", A), _const("b", B), h.make_node("Add", ["a", "b"], ["z"])],
    "sub": [_const("a", A), _const("b", B), h.make_node("Sub", ["a", "b"], ["z"])],
    "mul": [_const("a", A), _const("b", np.array(3, dtype=I64)), h.make_node("Mul", ["a", "b"], ["z"])],
    "div_int_truncates": [_const("a", A), _const("b", B), h.make_node("Div", ["a", "b"], ["z"])],
    "div_float": [_const("a", A.astype(np.float32)), _const("b", B.astype(np.float32)),
                  h.make_node("Div", ["a", "b"], ["z"])],
    "mod_sign_of_divisor": [_const("a", A), _const("b", B), h.make_node("Mod", ["a", "b"], ["z"])],
    "mod_fmod": [_const("a", A), _const("b", B), h.make_node("Mod", ["a", "b"], ["z"], fmod=1)],
    "reshape_zero_and_minus_one": [_const("a", np.arange(24, dtype=I64).reshape(2, 3, 4)),
                                   _const("s", np.array([0, -1], dtype=I64)),
                                   h.make_node("Reshape", ["a", "s"], ["z"])],
    "concat_negative_axis": [_const("a", np.ones((2, 1), I64)), _const("b", np.zeros((2, 2), I64)),
                             h.make_node("Concat", ["a", "b"], ["z"], axis=-1)],
    "unsqueeze_negative_axes": [_const("a", np.arange(6, dtype=I64).reshape(2, 3)),
                                _const("ax", np.array([-1, 0], dtype=I64)),
                                h.make_node("Unsqueeze", ["a", "ax"], ["z"])],
    "squeeze_axes": [_const("a", np.arange(3, dtype=I64).reshape(1, 3, 1)), _const("ax", np.array([-1], dtype=I64)),
                     h.make_node("Squeeze", ["a", "ax"], ["z"])],
    "cast_float_to_int_truncates": [_const("a", np.array([-2.7, 2.7, 0.5], np.float32)),
                                    h.make_node("Cast", ["a"], ["z"], to=T.INT64)],
    "gather_negative_index": [_const("a", np.array([10, 20, 30, 40], I64)), _const("i", np.array([-1, 0], I64)),
                              h.make_node("Gather", ["a", "i"], ["z"], axis=0)],
    "shape_start_end": [_const("a", np.zeros((2, 3, 4, 5), np.float32)),
                        h.make_node("Shape", ["a"], ["z"], start=1, end=-1)],
    "constant_ints": [h.make_node("Constant", [], ["z"], value_ints=[3, -1, 4])],
    "chain_of_mod_and_reshape": [_const("a", np.array([5], I64)), _const("b", np.array([4], I64)),
                                 h.make_node("Mod", ["a", "b"], ["m"]), _const("s", np.array([1], I64)),
                                 h.make_node("Reshape", ["m", "s"], ["r"]), _const("c", np.array([2], I64)),
                                 h.make_node("Add", ["r", "c"], ["z"])],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_op_folds_to_what_the_reference_evaluator_computes(case: str) -> None:
    nodes = CASES[case]
    got = _folded(nodes, "z")
    want = _reference(nodes, "z")
    assert got is not None, case
    assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want), (got, want)


@pytest.mark.parametrize("nodes", [
    [_const("a", A), _const("b", np.zeros(6, I64)), h.make_node("Mod", ["a", "b"], ["z"])],  # by zero
    [_const("a", A), _const("b", np.zeros(6, I64)), h.make_node("Div", ["a", "b"], ["z"])],  # by zero
    [_const("a", np.array([np.nan], np.float32)), h.make_node("Cast", ["a"], ["z"], to=T.INT64)],
    [_const("a", np.array([1, 2], I64)), _const("i", np.array([5], I64)), h.make_node("Gather", ["a", "i"], ["z"])],
    [_const("a", np.zeros(5000, np.float32)), h.make_node("Identity", ["a"], ["z"])],  # not shape arithmetic
    [_const("a", A), h.make_node("Relu", ["a"], ["z"])],  # an op it has no rule for
])
def test_what_cannot_be_said_exactly_is_left_to_the_model(nodes) -> None:
    assert _folded(nodes, "z") is None


def test_an_attention_reshape_is_typed_without_running_the_model() -> None:
    model = load_model(attention_reshape())
    assert unknown_tensor_types(model) == [] and model.learned == {}
    for name in ("r", "a", "y"):
        tp = model.index.types[name].tensor_type
        assert tp.elem_type == T.FLOAT and len(tp.shape.dim) == 4, name
    assert [n.op_type for n in model.proto.graph.node].count("Mod") == 1  # (the model keeps its nodes)

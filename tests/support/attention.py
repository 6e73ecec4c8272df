"""The shape arithmetic of torch's attention export, as a small model."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper


def _const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return h.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name + "_v"))


def attention_reshape() -> onnx.ModelProto:
    """The shape arithmetic of torch's attention export: ``Reshape(x, Concat(Slice(Shape(x), 0,
    Reshape(Mod(c1, c2), c3)), [2, -1]))`` -> Relu -> Transpose; ONNX's inference alone cannot
    tell the new shape's length, so the rank of everything after the Reshape is unknown."""
    nodes = [h.make_node("Shape", ["x"], ["shp"]),
             _const("zero", np.array([0], np.int64)), _const("c1", np.array([-1], np.int64)),
             _const("c2", np.array([3], np.int64)),
             h.make_node("Mod", ["c1", "c2"], ["mod"]), _const("c3", np.array([1], np.int64)),
             h.make_node("Reshape", ["mod", "c3"], ["end"]),
             h.make_node("Slice", ["shp", "zero", "end"], ["head"]),
             _const("tail", np.array([2, -1], np.int64)),
             h.make_node("Concat", ["head", "tail"], ["new"], axis=0),
             h.make_node("Reshape", ["x", "new"], ["r"]),
             h.make_node("Relu", ["r"], ["a"]),
             h.make_node("Transpose", ["a"], ["y"], perm=[0, 1, 3, 2])]
    graph = h.make_graph(nodes, "attn", [h.make_tensor_value_info("x", T.FLOAT, ["N", 5, 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, None)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model

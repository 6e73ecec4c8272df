"""ONNX Runtime sessions of a model with its weights given by address: the same values as a
session of the model's bytes, without copying or serializing the weights."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from partitioner.model import load_model
from trt_backend.ort.options import OrtOptions
from trt_backend.ort.sessions import tapped_session, weights_apart


def _model() -> onnx.ModelProto:
    """x [N, 64] @ w (64x64 floats, 16 KiB) -> Reshape to [N, 8, 8] (its shape an int64 constant)
    -> Resize by 2 on the last two axes (float scales) -> Relu; int8 weights of 8 KiB dequantized
    beside it; a small float bias inline."""
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w"),
             numpy_helper.from_array(np.full((64,), 0.25, np.float32), "b"),
             numpy_helper.from_array(np.array([-1, 8, 8], np.int64), "shape"),
             numpy_helper.from_array(np.array([1, 2, 2], np.float32), "scales"),
             numpy_helper.from_array(rng.integers(-128, 128, (128, 64), dtype=np.int8), "q"),
             numpy_helper.from_array(np.array(0.5, np.float32), "q_scale")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["a"], name="add"),
             helper.make_node("Reshape", ["a", "shape"], ["r"], name="reshape"),
             helper.make_node("Resize", ["r", "", "scales"], ["z"], mode="nearest", name="resize"),
             helper.make_node("Relu", ["z"], ["y"], name="relu"),
             helper.make_node("DequantizeLinear", ["q", "q_scale"], ["dq"], name="dq")]
    graph = helper.make_graph(nodes, "by_address", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16, 16]),
                               helper.make_tensor_value_info("dq", TensorProto.FLOAT, [128, 64])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_weights_go_by_address_and_shape_constants_stay_in_the_model() -> None:
    model = load_model(_model())
    proto, by_address = weights_apart(model.proto)
    assert by_address.names == ("w", "q")  # (16 KiB of floats, 8 KiB of int8: the rest is small)
    stubs = {t.name: t for t in proto.graph.initializer}
    assert [stubs[n].data_location for n in ("w", "q")] == [TensorProto.EXTERNAL] * 2
    assert not stubs["w"].raw_data and stubs["shape"].raw_data == model.index.initializer_protos["shape"].raw_data
    assert len(proto.SerializeToString()) < 2048 < 24 << 10 < len(model.proto.SerializeToString())
    x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    run = tapped_session(model, ["r", "m"], OrtOptions(), "a session by address")
    got = run({"x": x}, ["y", "dq", "r", "m"])
    want = ort.InferenceSession(_tapped(model.proto, ["r", "m"]), providers=["CPUExecutionProvider"]).run(
        ["y", "dq", "r", "m"], {"x": x})
    for name, value in zip(["y", "dq", "r", "m"], want):
        np.testing.assert_array_equal(got[name], value)


def _tapped(proto: onnx.ModelProto, names: list[str]) -> bytes:
    copy = onnx.ModelProto.FromString(proto.SerializeToString())
    copy.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
    return copy.SerializeToString()

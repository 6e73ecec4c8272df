"""Models whose exporter wrote model-local functions (onnxscript, spox, some PyTorch exports): the
precision transforms and ONNX Runtime's quantizer rewrite the main graph only, so each segment's
functions are inlined before its fp16/bf16/int8 form is made. Without that, the functions' bodies
stayed fp32 under fp16, and under int8 the quantized model lost its functions and TensorRT refused
it ("Plugin not found"), so the build fell back to fp32."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from trt_backend.artifacts.write import build
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

PROFILES = [{"x": ((4, 16), (4, 16), (4, 16))}]


def function_model() -> onnx.ModelProto:
    """x -> GeluBlock -> GeluBlock -> Relu, GeluBlock a local function MatMul -> x*sigmoid(1.702x)."""
    body = [h.make_node("MatMul", ["x", "w"], ["y"]),
            h.make_node("Constant", [], ["k"], value_float=1.702),
            h.make_node("Mul", ["y", "k"], ["yk"]),
            h.make_node("Sigmoid", ["yk"], ["s"]),
            h.make_node("Mul", ["y", "s"], ["z"])]
    fn = h.make_function("local", "GeluBlock", ["x", "w"], ["z"], body, opset_imports=[h.make_opsetid("", 18)])
    w = nh.from_array((np.random.default_rng(0).standard_normal((16, 16)) * 0.3).astype(np.float32), "w")
    graph = h.make_graph([h.make_node("GeluBlock", ["x", "w"], ["h1"], domain="local", name="b1"),
                          h.make_node("GeluBlock", ["h1", "w"], ["h2"], domain="local", name="b2"),
                          h.make_node("Relu", ["h2"], ["out"], name="r")], "fn",
                         [h.make_tensor_value_info("x", T.FLOAT, ["N", 16])],
                         [h.make_tensor_value_info("out", T.FLOAT, ["N", 16])], [w])
    model = h.make_model(graph, functions=[fn],
                         opset_imports=[h.make_opsetid("", 18), h.make_opsetid("local", 1)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_a_segment_with_local_functions_is_built_in_the_precision_asked(precision, tmp_path) -> None:
    path = tmp_path / "fn.onnx"
    onnx.save(function_model(), str(path))
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "cal.npz", x=rng.random((16, 16), dtype=np.float32))
    options = SessionOptions(precision=precision, calibration_data=str(tmp_path / "cal.npz"))
    manifest = build(str(path), str(tmp_path / "out"), PROFILES, options)
    assert [s["precision"] for s in manifest["segments"] if s["backend"] == "tensorrt"] == [precision]
    built = onnx.load(str(tmp_path / "out" / "segment_0.onnx"))
    ops = [n.op_type for n in built.graph.node]
    assert not built.functions and ops.count("MatMul") == 2 and "GeluBlock" not in ops
    if precision == "int8":
        assert ops.count("QuantizeLinear") >= 2
    else:
        assert [i.data_type for i in built.graph.initializer if i.name == "w"] == [T.FLOAT16]
    x = rng.random((4, 16), dtype=np.float32)
    ref = Session(function_model(), PROFILES, SessionOptions(emulate=True)).run(None, {"x": x})[0]
    got = Session.load(str(tmp_path / "out")).run(None, {"x": x})[0]
    err = float(np.abs(got - ref).max())
    assert 0 < err < 0.05 * float(np.abs(ref).max())  # reduced precision: close, not exact


def test_an_op_excluded_by_the_user_is_found_inside_local_functions(tmp_path, capsys) -> None:
    """--exclude-ops looks inside a local function's body as it looks inside an If's: a node
    calling a function that holds an excluded op runs on ONNX Runtime, with the reason. Before,
    the exclusion of an op found only inside functions was accepted and did nothing."""
    from trt_backend.cli import main
    from trt_backend.planning import make_plan
    from trt_backend.session.options import SessionOptions as Options

    plan = make_plan(function_model(), Options(exclude_ops=("Sigmoid",), min_segment_size=1).partition)
    on_ort = {n.name: n.reason for n in plan.nodes if plan.segments[n.segment].backend == "onnxruntime"}
    assert on_ort == {"b1": "local function 'GeluBlock': contains Sigmoid, excluded by user",
                      "b2": "local function 'GeluBlock': contains Sigmoid, excluded by user"}, on_ort
    assert [s.backend for s in plan.segments] == ["onnxruntime", "tensorrt"]
    path = str(tmp_path / "fn.onnx")
    onnx.save(function_model(), path)
    assert main(["inspect", path, "--exclude-ops", "Sigmoid", "--min-segment-size", "1", "--shapes", "x:4x16"]) == 0
    assert "local function 'GeluBlock': contains Sigmoid, excluded by user" in capsys.readouterr().out

"""ONNX Runtime sessions of a model with its weights given by address: the same values as a
session of the model's bytes, without copying or serializing the weights."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
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


def interpolated_positions() -> onnx.ModelProto:
    """A ViT's position embeddings interpolated to the input's size, as PyTorch exports it
    (DINOv2's ``interpolate_pos_encoding``): an 8x8 grid of C channels, its Reshape target
    computed from the input's Shape, Transpose to NCHW, a cubic Resize down to half the input's
    height and width, Transpose back. With ONNX Runtime's ReshapeFusion switched off, its layout
    transformation at level "all" moves both Transposes through the Resize, whose downscaling of
    an inner axis its cubic mode then refuses; with its full set of optimizers the model runs."""
    rng = np.random.default_rng(0)

    def ints(name: str, value: object) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(value, np.int64), name)

    inits = [numpy_helper.from_array(rng.standard_normal((1, 64, 8)).astype(np.float32), "pos"),
             ints("one", [1]), ints("eight", [8]), ints("i1", 1), ints("i2", 2), ints("i3", 3), ints("ax0", [0]),
             ints("from", [0]), ints("to", [2]), ints("two", 2)]
    nodes = [helper.make_node("Shape", ["x"], ["xs"]),
             helper.make_node("Gather", ["xs", "i1"], ["c"], axis=0),
             helper.make_node("Unsqueeze", ["c", "ax0"], ["c1"]),
             helper.make_node("Concat", ["one", "eight", "eight", "c1"], ["target"], axis=0),
             helper.make_node("Reshape", ["pos", "target"], ["grid"]),
             helper.make_node("Transpose", ["grid"], ["nchw"], perm=[0, 3, 1, 2]),
             helper.make_node("Gather", ["xs", "i2"], ["h"], axis=0),
             helper.make_node("Gather", ["xs", "i3"], ["w"], axis=0),
             helper.make_node("Div", ["h", "two"], ["h2"]), helper.make_node("Div", ["w", "two"], ["w2"]),
             helper.make_node("Unsqueeze", ["h2", "ax0"], ["h21"]),
             helper.make_node("Unsqueeze", ["w2", "ax0"], ["w21"]),
             helper.make_node("Shape", ["nchw"], ["ns"]),
             helper.make_node("Slice", ["ns", "from", "to"], ["nc"]),
             helper.make_node("Concat", ["nc", "h21", "w21"], ["sizes"], axis=0),
             helper.make_node("Resize", ["nchw", "", "", "sizes"], ["small"], mode="cubic"),
             helper.make_node("Transpose", ["small"], ["y"], perm=[0, 2, 3, 1])]
    graph = helper.make_graph(nodes, "interpolated_positions",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "C", "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "h", "w", "C"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


def test_a_run_onnx_runtime_fails_without_some_optimizers_runs_with_all_of_them(tmp_path) -> None:
    from trt_backend.cli import main
    from trt_backend.errors import SegmentRunError
    from trt_backend.ort.sessions import first_line, ort_errors, ort_session

    model = interpolated_positions()
    x = np.random.default_rng(1).standard_normal((1, 8, 12, 12)).astype(np.float32)
    quiet = ort.SessionOptions()
    quiet.log_severity_level = 4
    plain = ort.InferenceSession(model.SerializeToString(), quiet, providers=["CPUExecutionProvider"])
    (ref,) = plain.run(None, {"x": x})
    assert ref.shape == (1, 6, 6, 8)
    without = ort.InferenceSession(model.SerializeToString(), quiet, providers=["CPUExecutionProvider"],
                                   disabled_optimizers=["ReshapeFusion"])
    with pytest.raises(ort_errors()) as failed:  # (ONNX Runtime with it off: why the session keeps a second way)
        without.run(None, {"x": x})
    assert "Cubic" in str(failed.value) and not isinstance(failed.value, SegmentRunError)
    line = first_line(failed.value)  # (ONNX Runtime's list of what the op supports, in the one line)
    assert "\n" not in line and "2-D inputs" in line and line.startswith("[ONNXRuntimeError]"), line
    assert OrtOptions().disabled_optimizers == ("ReshapeFusion",)
    sess = ort_session(model, OrtOptions(), "the model")
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], ref)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], ref)  # (the session kept)
    # every door: run and compare of the model, a build folder, Python's Session
    path, feeds = str(tmp_path / "m.onnx"), str(tmp_path / "x.npz")
    onnx.save(model, path)
    np.savez(feeds, x=x)
    out = str(tmp_path / "y.npz")
    assert main(["run", path, "--inputs", feeds, "--outputs", out, "-q"]) == 0
    np.testing.assert_array_equal(np.load(out)["y"], ref)
    assert main(["build", path, "-o", str(tmp_path / "b"), "--shapes", "x:1x8x12x12", "-q"]) == 0
    assert main(["compare", str(tmp_path / "b"), "--inputs", feeds, "-q"]) == 0
    import trt_backend

    got = trt_backend.Session(str(tmp_path / "b")).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, ref)

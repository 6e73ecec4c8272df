"""The ONNX Runtime CUDA runner on CPU: against ONNX Runtime itself where that shows the behaviour
(a CUDA provider the wheel lists but the session did not get), and against a fake of the CUDA
provider over the contract-strict CUDA fake (tests/fakes/ort_cuda.py) where device memory is
involved: a real ONNX Runtime CPU session computes, device reads and writes follow CUDA's rules."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from partitioner import Segment
from tests.fakes.ort_cuda import FakeOrtCuda
from trt_backend.errors import SegmentLoadError
from trt_backend.gpu import memory as mem
from trt_backend.ort.options import OrtOptions
from trt_backend.runners.ort_cuda import OrtCudaRunner


def tensor_model() -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def non_tensor_model() -> onnx.ModelProto:
    """A sequence in, a sequence, a string tensor and an optional out (what ONNX-ML and sequence
    models pass between segments)."""
    seq = helper.make_tensor_sequence_value_info
    nodes = [helper.make_node("SequenceInsert", ["q", "x"], ["s"]),
             helper.make_node("Cast", ["x"], ["t"], to=TensorProto.STRING),
             helper.make_node("Optional", ["x"], ["o"])]
    graph = helper.make_graph(nodes, "ml", [seq("q", TensorProto.FLOAT, None),
                                            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [seq("s", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("t", TensorProto.STRING, [2]),
                               helper.make_value_info("o", helper.make_optional_type_proto(
                                   helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def segment_of(model: onnx.ModelProto) -> Segment:
    return Segment(1, "onnxruntime", tuple(range(len(model.graph.node))), tuple(i.name for i in model.graph.input),
                   tuple(o.name for o in model.graph.output))


@pytest.fixture
def ort_gpu(fake_gpu, monkeypatch) -> FakeOrtCuda:
    return FakeOrtCuda(fake_gpu.cuda).install(monkeypatch)


def test_sequences_strings_and_optionals_run_as_on_the_cpu(ort_gpu) -> None:
    model = non_tensor_model()
    r = OrtCudaRunner(segment_of(model), model, OrtOptions())
    x = np.array([1.5, -2.0], np.float32)
    s, t, o = r.run([[np.zeros(3, np.float32)], x])
    assert isinstance(s, list) and len(s) == 2 and np.array_equal(s[1], x)
    assert t.tolist() == ["1.5", "-2"] and np.array_equal(o, x)
    assert not r.bound and ort_gpu.sessions[0].runs == 1
    r.close()


def test_device_inputs_are_read_after_their_stream_and_outputs_stay_on_the_device(fake_gpu, ort_gpu) -> None:
    model = tensor_model()
    r = OrtCudaRunner(segment_of(model), model, OrtOptions())
    x = np.array([[1, -2, 3, -4]], np.float32)
    user = fake_gpu.cuda.user_stream()
    ptr = int(fake_gpu.cuda.cudaMalloc(256)[1])
    fake_gpu.cuda.write(ptr, x, user)  # produced on the user's stream, which its interface names
    (y,) = r.run([mem.DeviceArray(ptr, x.shape, x.dtype, stream=user)])
    assert isinstance(y, mem.DeviceArray) and int(y.stream.handle) == ort_gpu.sessions[0].stream
    np.testing.assert_array_equal(y.to_host(), np.maximum(x, 0))
    del y
    fake_gpu.cuda.cudaFree(ptr)
    r.close()


def test_the_stream_reaches_onnx_runtime_and_its_python_fallback_is_off(ort_gpu) -> None:
    model = tensor_model()
    r = OrtCudaRunner(segment_of(model), model, OrtOptions())
    session = ort_gpu.sessions[0]
    assert session.stream == r.stream.ptr and session.get_provider_options()["CUDAExecutionProvider"][
        "has_user_compute_stream"] == "1"
    assert session.fallback is False  # a run failing in the provider must not re-create it without the stream
    r.close()


def test_a_cuda_provider_listed_but_not_given_to_the_session_is_refused(fake_gpu, monkeypatch) -> None:
    """The wheel lists CUDAExecutionProvider but it does not load (missing CUDA libraries):
    ONNX Runtime makes the session on the CPU (here, for real: this onnxruntime has no CUDA
    provider). The runner says so instead of running a 'GPU' segment on the CPU."""
    import onnxruntime as ort

    listed = list(ort.get_available_providers())
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", *listed])
    model = tensor_model()
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"):
        with pytest.raises(SegmentLoadError, match=r"ONNX Runtime did not give the segment its CUDA provider \(it runs "
                                                   r"on CPUExecutionProvider\)"):
            OrtCudaRunner(segment_of(model), model, OrtOptions())


def bf16_model() -> onnx.ModelProto:
    """a, b (bfloat16 [2]) -> Cast to float -> Add -> y (float [2])."""
    nodes = [helper.make_node("Cast", ["a"], ["af"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["b"], ["bf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["af", "bf"], ["y"])]
    graph = helper.make_graph(nodes, "bf16", [helper.make_tensor_value_info(n, TensorProto.BFLOAT16, [2])
                                              for n in ("a", "b")],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_bf16_tensors_bind_by_their_onnx_type_on_the_device_and_the_host(fake_gpu, ort_gpu) -> None:
    """ONNX Runtime converts a numpy dtype given to bind_input, and a host array given to
    bind_cpu_input, by numpy's type number, which ml_dtypes' bfloat16 (what a TensorRT segment's
    bf16 output is here) lacks: every such tensor entering an ONNX Runtime CUDA segment raised
    "Numpy_type 256 can't be converted to MLDataType", a bare RuntimeError. The device tensor binds
    by ONNX's type number, the host one as an OrtValue of its type."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    model = bf16_model()
    r = OrtCudaRunner(segment_of(model), model, OrtOptions())
    a = np.array([1.5, -2.25], ml_dtypes.bfloat16)
    b = np.array([0.5, 4.0], ml_dtypes.bfloat16)
    user = fake_gpu.cuda.user_stream()
    ptr = int(fake_gpu.cuda.cudaMalloc(256)[1])
    fake_gpu.cuda.write(ptr, a, user)
    (y,) = r.run([mem.DeviceArray(ptr, a.shape, a.dtype, stream=user), b])
    np.testing.assert_array_equal(y.to_host(), np.array([2.0, 1.75], np.float32))
    del y
    fake_gpu.cuda.cudaFree(ptr)
    r.close()


@pytest.mark.parametrize("reader", ["onnxruntime", "tensorrt"])
def test_an_output_read_on_another_stream_is_reused_only_after_that_read(fake_gpu, ort_gpu, reader) -> None:
    """ONNX Runtime's arena takes an output's memory back when its OrtValue goes and hands it to
    the next output of its own stream, unsynchronized. A segment that read it on a stream of its
    own (TensorRT's enqueueV3: memory released before the stream synchronizes is undefined; another
    ONNX Runtime CUDA segment) must order that stream after its reads before the value is dropped,
    else the next run overwrites what the read may not have read yet."""
    model = tensor_model()
    producer = OrtCudaRunner(segment_of(model), model, OrtOptions())
    if reader == "onnxruntime":
        consumer: Any = OrtCudaRunner(segment_of(model), model, OrtOptions())
    else:
        from trt_backend.profiles import TensorProfile

        consumer = fake_gpu.runner(Segment(0, "tensorrt", (0,), ("x",), ("y",)), model,
                                   [{"x": TensorProfile((1, 4), (1, 4), (2, 4))}], outputs_on_device=True)
    x = np.array([[1, -2, 3, -4]], np.float32)
    (middle,) = producer.run([x])
    (out,) = consumer.run([middle])
    del middle  # back to the producer's arena
    (again,) = producer.run([x * 2])  # takes the same block, written on the producer's stream
    np.testing.assert_array_equal(out.to_host(), np.maximum(x, 0))
    np.testing.assert_array_equal(again.to_host(), np.maximum(x * 2, 0))
    del out, again
    consumer.close()
    producer.close()

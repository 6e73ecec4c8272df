"""A GPU session serving, through the contract-strict CUDA and TensorRT fakes (tests/fakes/):
models planned TensorRT / ONNX Runtime / TensorRT, the real TensorRT runners, streams and buffer
pool; outputs kept on the device and dropped after each run, as a server does."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from partitioner.capability import QueryResult

from tests.helpers import in_threads
from trt_backend.data.demo import DEMO_PATH
from trt_backend.gpu import memory as mem
from trt_backend.session.options import RunOptions, SessionOptions
from trt_backend.session.session import Session

pytestmark = pytest.mark.usefixtures("flavor")
PROFILE = [{"image": ((1, 3, 32, 32), (2, 3, 32, 32), (4, 3, 32, 32))}]


def gpu_session(machine, **options) -> Session:
    plan = Session.make_plan(DEMO_PATH)
    sess = Session(plan, PROFILE, SessionOptions(**options), engines={0: b"", 2: b""}, runners=machine.factory(plan))
    assert sess.segment_executors == ["tensorrt", "onnxruntime", "tensorrt"]
    return sess


class AcceptAll:
    """Takes every node; the Exp exclusion cuts the plan."""

    target = "accept-all"

    def query(self, model: onnx.ModelProto) -> QueryResult:
        return QueryResult(True)


def three_segments() -> onnx.ModelProto:
    """Relu, Mul (TensorRT) -> Exp (ONNX Runtime) -> Add, Sigmoid (TensorRT); the last segment
    reads ``a`` straight from the first (device to device) and ``c`` from ONNX Runtime."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Mul", ["a", "w"], ["b"]),
             helper.make_node("Exp", ["b"], ["c"]), helper.make_node("Add", ["c", "a"], ["d"]),
             helper.make_node("Sigmoid", ["d"], ["y"])]
    graph = helper.make_graph(nodes, "three", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])],
                              [helper.make_tensor("w", TensorProto.FLOAT, [8], np.arange(8, dtype=np.float32) / 8)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_thousand_runs_with_device_outputs_dropped_keep_memory_bounded_and_close_frees_it(fake_gpu) -> None:
    model = three_segments()
    opts = SessionOptions(oracle=AcceptAll(), exclude_ops=("Exp",), min_segment_size=1, boundary_cost=None,
                          outputs_on_device=True, intra_op_threads=1)
    plan = Session.make_plan(model, opts)
    sess = Session(plan, [{"x": ((1, 8), (4, 8), (16, 8))}], opts, engines={0: b"", 2: b""},
                   runners=fake_gpu.factory(plan))
    assert sess.segment_executors == ["tensorrt", "onnxruntime", "tensorrt"]
    assert set(sess.plan.segments[2].inputs) == {"a", "c"}
    reference = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    outstanding = []
    for i in range(1000):
        x = rng.standard_normal((1 + i % 16, 8)).astype(np.float32)
        (y,) = sess.run(None, {"x": x})
        assert isinstance(y, mem.DeviceArray)
        if i % 97 == 0:
            np.testing.assert_allclose(y.to_host(), reference.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
        del y  # a server hands the output on and drops it
        outstanding.append(fake_gpu.cuda.outstanding())
    # once every batch size was seen, nothing more is allocated: the count stays flat
    assert max(outstanding) == outstanding[31] and fake_gpu.cuda.mallocs == fake_gpu.cuda.peak_outstanding, \
        (outstanding[:40], max(outstanding), fake_gpu.cuda.mallocs)
    assert max(outstanding) <= 16, max(outstanding)  # buffers of one run in flight, contexts, no growth per run
    sess.close()
    assert fake_gpu.cuda.outstanding() == 0 and fake_gpu.cuda.live_streams() == []


def test_close_frees_what_the_session_made_even_mid_use(fake_gpu) -> None:
    sess = gpu_session(fake_gpu, outputs_on_device=True)
    x = np.zeros((2, 3, 32, 32), np.float32)
    kept = sess.run(None, {"image": x})[0]
    sess.run(None, {"image": x}, RunOptions(outputs_on_device=False))
    sess.close()
    assert fake_gpu.cuda.outstanding() == 1  # the one output the caller still holds
    assert kept.to_host().shape == (2, 10)
    del kept
    sess.close()  # (twice is harmless)


def test_threads_run_on_their_own_streams(fake_gpu) -> None:
    sess = gpu_session(fake_gpu)
    x = np.random.default_rng(1).standard_normal((2, 3, 32, 32)).astype(np.float32)
    want = ort.InferenceSession(DEMO_PATH, providers=["CPUExecutionProvider"]).run(None, {"image": x})

    def serve(k: int) -> None:
        for _ in range(5):
            np.testing.assert_allclose(sess.run(None, {"image": x})[0], want[0], rtol=1e-5, atol=1e-6)

    assert in_threads(serve, 3) == []
    assert len(sess._made.streams) == 3
    sess.close()

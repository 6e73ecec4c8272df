"""The Session's whole device path on a real GPU, with a PyTorch stand-in for the engine (see
torch_standin.py): a model planned TensorRT / ONNX Runtime / TensorRT whose last TensorRT segment
reads one tensor straight from the first (device-resident, never copied to the host) and one from
the ONNX Runtime segment; device feeds, the session's stream and events, ``outputs_on_device``;
outputs equal ONNX Runtime on the CPU. Needs a GPU, torch and onnx2torch (the device run:
benchmarks/device/gpu_device_check.sh)."""
from __future__ import annotations

import threading

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from partitioner.capability import QueryResult
from tests.helpers import const, crop_resize, model, vi
from trt_backend.gpu import device as dev
from trt_backend.gpu import memory as mem
from trt_backend.runners.factory import RunnerFactory
from trt_backend.session.options import RunOptions, SessionOptions
from trt_backend.session.session import Session

pytestmark = pytest.mark.gpu
PROFILE = [{"image": ((1, 3, 16, 16), (2, 3, 16, 16), (4, 3, 16, 16))}]


class AcceptAll:
    """Takes every node (no TensorRT on the device machine); the Resize exclusion cuts the plan."""

    target = "accept-all"

    def query(self, model: onnx.ModelProto) -> QueryResult:
        return QueryResult(True)


def skip_model() -> onnx.ModelProto:
    """conv-relu-conv-relu -> r2; crop Resize (ONNX Runtime) r2 -> up; Add(r2, up) -> conv, pool,
    Gemm, Softmax, TopK. The second TensorRT segment reads r2 from the first TensorRT segment."""
    rng = np.random.default_rng(14)

    def w(name: str, *shape: int):
        return const(name, (rng.standard_normal(shape) * 0.2).astype(np.float32))

    resize, resize_inits = crop_resize("r2", "up")
    nodes = [
        helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        resize,
        helper.make_node("Add", ["r2", "up"], ["sum"]),
        helper.make_node("Conv", ["sum", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("GlobalAveragePool", ["r3"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fw", "fb"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
        helper.make_node("TopK", ["probs", "k"], ["top_scores", "top_classes"], axis=1),
    ]
    inits = [w("w1", 8, 3, 3, 3), w("b1", 8), w("w2", 8, 8, 3, 3), w("b2", 8), w("w3", 16, 8, 3, 3), w("b3", 16),
             w("fw", 16, 10), w("fb", 10), const("k", np.array([3], np.int64)), *resize_inits]
    return model(nodes, [vi("image", ["batch", 3, 16, 16])],
                 [vi("probs", ["batch", 10]), vi("top_scores", ["batch", 3]),
                  vi("top_classes", ["batch", 3], onnx.TensorProto.INT64)], inits)


@pytest.fixture
def standin_session():
    from tests.trt_backend.gpu.torch_standin import TorchStandInRunner

    made: list[TorchStandInRunner] = []

    def make_runner(segment, engine, profiles, shape_tensors, **kw):  # the "engine" is the segment's ONNX model
        made.append(TorchStandInRunner(segment, onnx.load_from_string(engine), profiles, shape_tensors, **kw))
        return made[-1]

    # the real stream, buffer pool and CUDA provider check; TensorRT is the PyTorch stand-in
    runners = RunnerFactory(status=lambda device: (True, "PyTorch stand-in"), tensorrt_runner=make_runner)
    proto = skip_model()
    opts = SessionOptions(oracle=AcceptAll(), exclude_ops=("Resize",), device_id=0, outputs_on_device=True)
    plan = Session.make_plan(proto, opts)
    assert [s.backend for s in plan.segments] == ["tensorrt", "onnxruntime", "tensorrt"]
    assert set(plan.segments[2].inputs) == {"r2", "up"}  # r2 comes straight from segment 0
    engines = {s.id: plan.extract(s.id).SerializeToString() for s in plan.tensorrt_segments()}
    sess = Session(plan, PROFILE, opts, engines=engines, runners=runners)
    reference = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess, made, reference


def check(got, want) -> None:
    for g, w in zip(got, want):
        if w.dtype == np.int64:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_session_device_path_for_real_with_a_torch_standin(standin_session) -> None:
    import torch

    sess, made, reference = standin_session
    assert sess.segment_executors == ["tensorrt", "onnxruntime", "tensorrt"] and sess.device_id == 0
    x = np.random.default_rng(0).standard_normal((3, 3, 16, 16)).astype(np.float32)
    want = reference.run(None, {"image": x})

    # host feed, outputs left on the device (the session's option)
    out = sess.run(None, {"image": x})
    assert all(isinstance(o, mem.DeviceArray) and o.device_id == 0 and dev.device_of(o.ptr) == 0 for o in out)
    check([torch.as_tensor(o, device="cuda:0").cpu().numpy() for o in out], want)
    check([o.to_host() for o in out], want)
    assert made[1].device_inputs >= 1  # r2 reached segment 2 on the device, straight from segment 0

    # a torch CUDA tensor as the feed, taken in place; outputs to the host for this run
    before = made[0].device_inputs
    feed = torch.from_numpy(x).to("cuda:0")
    host = sess.run(None, {"image": feed}, RunOptions(outputs_on_device=False))
    assert all(isinstance(h, np.ndarray) for h in host) and made[0].device_inputs == before + 1
    check(host, want)

    # another thread runs the same session on the same GPU
    results: list = []
    t = threading.Thread(target=lambda: results.append(sess.run(None, {"image": x},
                                                                RunOptions(outputs_on_device=False))))
    t.start()
    t.join()
    check(results[0], want)
    assert dev.current_device() == 0
    sess.close()

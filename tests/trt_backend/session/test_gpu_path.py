"""The Session's GPU path up to the GPU boundary: with TensorRT declared executable, the session
builds a real engine (TensorRT-RTX, on CPU) for every TensorRT segment through the cache and hands
each to a TensorRT runner. Only what needs a device is replaced: the stream, the buffer pool and
the runner that would execute the engine (it runs the segment emulated and keeps the engine)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import trt_backend.session.session as session_module
from trt_backend.data.demo import DEMO_PATH
from trt_backend.engines.builder import BuildOptions
from trt_backend.ort.options import OrtOptions
from trt_backend.runners.ort import EmulatedTensorRTRunner
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

PROFILE = [{"image": ((1, 3, 32, 32), (2, 3, 32, 32), (4, 3, 32, 32))}]
pytestmark = pytest.mark.usefixtures("flavor")


class EngineKeepingRunner(EmulatedTensorRTRunner):
    executor = "tensorrt"

    def __init__(self, segment, engine, profiles, shape_tensors, **kw) -> None:
        self.engine, self.kw = engine, kw
        proto = _PLAN[0].extract(segment.id)
        super().__init__(segment, proto, OrtOptions(), profiles, shape_tensors)


_PLAN: list = []


@pytest.fixture
def gpu_boundary(monkeypatch):
    monkeypatch.setattr(session_module, "tensorrt_status", lambda device=0: (True, "declared by the test"))
    monkeypatch.setattr(session_module, "Stream", lambda device=None: "stream")
    monkeypatch.setattr(session_module, "BufferPool", lambda device=None: "pool")
    monkeypatch.setattr(session_module, "cuda_provider_available", lambda: False)
    made: list[EngineKeepingRunner] = []

    def fake_runner(segment, engine, profiles, shape_tensors, **kw):
        made.append(EngineKeepingRunner(segment, engine, profiles, shape_tensors, **kw))
        return made[-1]

    monkeypatch.setattr(session_module, "make_tensorrt_runner", fake_runner)
    real_make = session_module.Session._make_runners

    def remember_plan(self, plan, *a, **k):
        _PLAN[:] = [plan]
        return real_make(self, plan, *a, **k)

    monkeypatch.setattr(session_module.Session, "_make_runners", remember_plan)
    return made


def test_gpu_path_builds_an_engine_per_tensorrt_segment(gpu_boundary, tmp_path) -> None:
    sess = Session(DEMO_PATH, PROFILE, SessionOptions(emulate="auto", cache_dir=str(tmp_path / "cache")))
    assert sess.segment_executors == ["tensorrt", "onnxruntime", "tensorrt"]
    assert [r.segment.id for r in gpu_boundary] == [0, 2]
    assert all(len(r.engine) > 10_000 for r in gpu_boundary)
    assert gpu_boundary[0].kw == {"pool": "pool", "stream": "stream", "outputs_on_device": True,
                                  "allow_host_code": False, "device_id": None}
    assert sorted(s.segment for s in sess.build_report.segments) == [0, 2]
    x = np.random.default_rng(0).standard_normal((3, 3, 32, 32)).astype(np.float32)
    want = ort.InferenceSession(DEMO_PATH, providers=["CPUExecutionProvider"]).run(None, {"image": x})
    np.testing.assert_allclose(sess.run(None, {"image": x})[0], want[0], rtol=1e-5, atol=1e-6)
    again = Session(DEMO_PATH, PROFILE, SessionOptions(cache_dir=str(tmp_path / "cache")))
    assert all(s.cached for s in again.build_report.segments)  # second session: engines from the cache


def test_gpu_path_demotes_what_tensorrt_cannot_build(gpu_boundary) -> None:
    # a zero workspace makes TensorRT refuse every segment: the session still works, all on ORT
    sess = Session(DEMO_PATH, PROFILE, SessionOptions(build=BuildOptions(workspace_bytes=0)))
    assert sess.segment_executors == ["onnxruntime"]
    assert {d.node for d in sess.build_report.demoted} >= {0, 1, 2, 3}
    x = np.zeros((2, 3, 32, 32), np.float32)
    want = ort.InferenceSession(DEMO_PATH, providers=["CPUExecutionProvider"]).run(None, {"image": x})
    np.testing.assert_allclose(sess.run(None, {"image": x})[0], want[0], rtol=1e-5, atol=1e-6)


def test_emulated_segments_compute_in_the_build_precision() -> None:
    x = np.random.default_rng(1).standard_normal((2, 3, 32, 32)).astype(np.float32)
    fp32 = Session(DEMO_PATH, PROFILE, SessionOptions(emulate=True)).run(["probs"], {"image": x})[0]
    fp16 = Session(DEMO_PATH, PROFILE, SessionOptions(emulate=True, build=BuildOptions(precision="fp16")))
    got = fp16.run(["probs"], {"image": x})[0]
    assert got.dtype == np.float32  # the model's own I/O dtype is kept
    err = float(np.max(np.abs(got - fp32)))
    assert 0 < err < 5e-3  # fp16 rounding shows, and stays small

"""The Session's GPU path up to the GPU boundary: with TensorRT declared executable, the session
builds a real engine (TensorRT-RTX, on CPU) for every TensorRT segment through the cache and hands
each to a TensorRT runner. Only what needs a device is replaced, through the RunnerFactory the
session is given: the streams, the buffer pool and the runner that would execute the engine (it
runs the segment emulated and keeps the engine); the CUDA runtime is the contract fake."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnxruntime as ort
import pytest

from trt_backend.data.demo import DEMO_PATH
from trt_backend.engines.builder import BuildOptions
from trt_backend.ort.options import OrtOptions
from trt_backend.runners.factory import RunnerFactory
from trt_backend.runners.ort import EmulatedTensorRTRunner
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

PROFILE = [{"image": ((1, 3, 32, 32), (2, 3, 32, 32), (4, 3, 32, 32))}]
pytestmark = pytest.mark.usefixtures("flavor")


class EngineKeepingRunner(EmulatedTensorRTRunner):
    executor = "tensorrt"

    def __init__(self, segment, engine, profiles, shape_tensors, *, plan, **kw) -> None:
        self.engine, self.kw = engine, kw
        super().__init__(segment, plan.extract(segment.id), OrtOptions(), profiles, shape_tensors)


@dataclass(frozen=True)
class GpuBoundary(RunnerFactory):
    """The runner factory with only the device replaced: TensorRT is declared executable, the
    stream and pool are placeholders, the TensorRT runner keeps its engine and runs the segment
    emulated (the plan ``make`` is given is remembered for it); ``made``: those runners."""

    made: list = field(default_factory=list)
    plans: list = field(default_factory=list)

    def make(self, plan, *a, **k):
        self.plans[:] = [plan]
        return super().make(plan, *a, **k)


@pytest.fixture
def gpu_boundary(fake_gpu) -> GpuBoundary:
    def fake_runner(segment, engine, profiles, shape_tensors, **kw):
        factory.made.append(EngineKeepingRunner(segment, engine, profiles, shape_tensors, plan=factory.plans[0], **kw))
        return factory.made[-1]

    factory = GpuBoundary(status=lambda device: (True, "declared by the test"), tensorrt_runner=fake_runner,
                          streams=lambda device: None, pool=lambda device: None,
                          cuda_provider=lambda: False)
    return factory


def test_gpu_path_builds_an_engine_per_tensorrt_segment(gpu_boundary, tmp_path) -> None:
    sess = Session(DEMO_PATH, PROFILE, SessionOptions(emulate="auto", cache_dir=str(tmp_path / "cache")),
                   runners=gpu_boundary)
    made = gpu_boundary.made
    assert sess.segment_executors == ["tensorrt", "onnxruntime", "tensorrt"]
    assert [r.segment.id for r in made] == [0, 2]
    assert all(len(r.engine) > 10_000 for r in made)
    assert made[0].kw == {"pool": None, "streams": None, "outputs_on_device": True, "allow_host_code": False,
                          "device_id": 0, "runtime_cache_dir": str(tmp_path / "cache" / "runtime")}
    assert sess.build_report is not None
    assert sorted(s.segment for s in sess.build_report.segments) == [0, 2]
    x = np.random.default_rng(0).standard_normal((3, 3, 32, 32)).astype(np.float32)
    want = ort.InferenceSession(DEMO_PATH, providers=["CPUExecutionProvider"]).run(None, {"image": x})
    np.testing.assert_allclose(sess.run(None, {"image": x})[0], want[0], rtol=1e-5, atol=1e-6)
    again = Session(DEMO_PATH, PROFILE, SessionOptions(cache_dir=str(tmp_path / "cache")), runners=gpu_boundary)
    assert again.build_report is not None
    assert all(s.cached for s in again.build_report.segments)  # second session: engines from the cache


def test_gpu_path_demotes_what_tensorrt_cannot_build(gpu_boundary) -> None:
    # a zero workspace makes TensorRT refuse every segment: the session still works, all on ORT
    sess = Session(DEMO_PATH, PROFILE, SessionOptions(build=BuildOptions(workspace_bytes=0)), runners=gpu_boundary)
    assert sess.segment_executors == ["onnxruntime"]
    assert sess.build_report is not None
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

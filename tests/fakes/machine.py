"""A GPU machine for tests without one: the contract-strict CUDA runtime and TensorRT runtime fakes,
put in place at the GPU boundary only (``trt_backend.gpu.device.cudart`` and the TensorRT flavor
module a runner is given), with a :class:`~trt_backend.runners.factory.RunnerFactory` whose
TensorRT runner is the real :class:`~trt_backend.runners.tensorrt.TensorRTRunner` over the fake
runtime. An engine of a segment is a fake plan of that segment's ONNX model and the profiles the
session gives the runner (what a build with those profiles would hold)."""
from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import onnx

from tests.fakes.cuda_runtime import FakeCudaRuntime, FakeGpu
from tests.fakes.tensorrt_runtime import FakePlan, FakeTensorRT
from trt_backend.gpu import device as device_layer
from trt_backend.runners.factory import RunnerFactory
from trt_backend.runners.tensorrt import TensorRTRunner
from trt_backend.tensorrt.flavor import Flavor


class FakeMachine:
    """``gpus`` fake GPUs and a fake TensorRT runtime (``rtx``: TensorRT-RTX's runtime API)."""

    def __init__(self, monkeypatch: Any, gpus: int | list[FakeGpu] = 1, *, rtx: bool = True,
                 version: str = "1.7.0") -> None:
        self.cuda = FakeCudaRuntime(gpus)
        monkeypatch.setattr(device_layer, "cudart", lambda: self.cuda)
        monkeypatch.setattr(device_layer, "driver_absent", lambda: False)
        self.trt = FakeTensorRT(self.cuda, rtx=rtx, version=version)
        self.flavor = Flavor("tensorrt_rtx" if rtx else "tensorrt", version, self.trt)  # type: ignore[arg-type]
        self.runners: list[TensorRTRunner] = []

    def plan_bytes(self, model: onnx.ModelProto, profiles: Any = (), **kw: Any) -> bytes:
        return FakePlan(model, [{n: p for n, p in prof.items()} for prof in profiles], **kw).serialize()

    def runner(self, segment: Any, model: onnx.ModelProto, profiles: Any = (),
               shape_tensors: frozenset[str] = frozenset(),
               plan: dict[str, Any] | None = None, **kw: Any) -> TensorRTRunner:
        engine = self.plan_bytes(model, profiles, host_inputs=tuple(sorted(shape_tensors)), **(plan or {}))
        r = TensorRTRunner(segment, engine, self.flavor, profiles, shape_tensors, **kw)
        self.runners.append(r)
        return r

    def factory(self, plan: Any, *, cuda_provider: Callable[[], bool] = lambda: False,
                plan_options: dict[str, Any] | None = None, **fields: Any) -> RunnerFactory:
        """A RunnerFactory for a session of ``plan`` (a partitioner Plan): TensorRT segments run
        their fake engines through the real TensorRTRunner; streams and pool are the real ones."""
        def tensorrt_runner(segment: Any, engine: Any, profiles: Any, shape_tensors: Any, **kw: Any) -> TensorRTRunner:
            model = engine if isinstance(engine, onnx.ModelProto) else plan.extract(segment.id)
            return self.runner(segment, model, profiles, shape_tensors, plan_options, **kw)

        return RunnerFactory(status=lambda device: (True, "contract fake"), tensorrt_runner=tensorrt_runner,
                             cuda_provider=cuda_provider, **fields)

    def check(self, *, released: bool = True) -> None:
        """At the end of a test: no contract broken that the test did not provoke, and (``released``)
        every allocation, stream and event given back."""
        gc.collect()
        assert self.trt.unexpected() == [], self.trt.unexpected()
        if released:
            self.cuda.assert_released()

"""Segment runners: the base, one module per backend (ONNX Runtime and emulated, TensorRT, ONNX
Runtime CUDA) and the choice of runner above them (:class:`RunnerFactory`, which a Session takes)."""
from __future__ import annotations

from trt_backend._lazy import facade

__getattr__, __dir__, __all__ = facade(__name__, {
    "SegmentRunner": "trt_backend.runners.base",
    "RunnerFactory": "trt_backend.runners.factory",
    "Runners": "trt_backend.runners.factory",
    "OnnxRuntimeRunner": "trt_backend.runners.ort",
    "EmulatedTensorRTRunner": "trt_backend.runners.ort",
    "TensorRTRunner": "trt_backend.runners.tensorrt",
    "OrtCudaRunner": "trt_backend.runners.ort_cuda",
})

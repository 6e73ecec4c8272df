"""The CUDA device layer (cuda-python): devices, per-thread streams, device buffers and their pool,
and whether TensorRT segments can execute here."""
from __future__ import annotations

from trt_backend._lazy import facade

__getattr__, __dir__, __all__ = facade(__name__, {
    "Stream": "trt_backend.gpu.device",
    "ThreadStreams": "trt_backend.gpu.device",
    "cuda_device_count": "trt_backend.gpu.device",
    "cuda_status": "trt_backend.gpu.device",
    "DeviceArray": "trt_backend.gpu.memory",
    "BufferPool": "trt_backend.gpu.memory",
    "tensorrt_status": "trt_backend.gpu.status",
})

"""The CUDA device layer (cuda-python): devices, streams, device buffers and their pool, and whether
TensorRT segments can execute here."""
from __future__ import annotations

from trt_backend._lazy import facade

__getattr__, __dir__, __all__ = facade(__name__, {
    "DeviceArray": "trt_backend.gpu.device",
    "Stream": "trt_backend.gpu.device",
    "BufferPool": "trt_backend.gpu.device",
    "cuda_device_count": "trt_backend.gpu.device",
    "tensorrt_status": "trt_backend.gpu.status",
})

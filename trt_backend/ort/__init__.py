"""ONNX Runtime: its options, the sessions trt_backend makes, thread pools and OrtValues."""
from __future__ import annotations

from trt_backend._lazy import facade

__getattr__, __dir__, __all__ = facade(__name__, {
    "OrtOptions": "trt_backend.ort.options",
    "ort_session": "trt_backend.ort.sessions",
})

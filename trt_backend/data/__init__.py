"""The bundled demo model."""
from __future__ import annotations

from trt_backend._lazy import facade

__getattr__, __dir__, __all__ = facade(__name__, {
    "DEMO_PATH": "trt_backend.data.demo",
})

"""Accuracy: :func:`compare` runs a Session (or a build folder) against whole-model ONNX Runtime
through Polygraphy and localises a divergence to a segment; :func:`search_precision` finds the
precision plan of ``--precision auto``."""
from __future__ import annotations

from trt_backend._lazy import facade

__getattr__, __dir__, __all__ = facade(__name__, {
    "compare": "trt_backend.accuracy.compare",
    "CompareOptions": "trt_backend.accuracy.options",
    "ComparisonReport": "trt_backend.accuracy.report",
    "search_precision": "trt_backend.accuracy.auto_precision",
    "AutoOptions": "trt_backend.accuracy.auto_precision",
})

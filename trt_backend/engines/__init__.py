"""Engines: build options, the precision transform (fp16/bf16 casts, int8 Q/DQ), the builder (it
builds the segments it is given and reports failures), the demote-and-replan loop, the engine cache."""
from __future__ import annotations

from trt_backend._lazy import facade

__getattr__, __dir__, __all__ = facade(__name__, {
    "BuildOptions": "trt_backend.engines.options",
    "prepare_segment": "trt_backend.engines.builder",
    "build_engines": "trt_backend.engines.fallback",
    "build_with_fallback": "trt_backend.engines.fallback",
    "BuildReport": "trt_backend.engines.report",
    "BuildResult": "trt_backend.engines.report",
    "BuiltSegment": "trt_backend.engines.report",
    "EngineCache": "trt_backend.engines.cache",
    "SegmentQuantizer": "trt_backend.engines.quantize",
    "apply_precision": "trt_backend.engines.precision",
    "PrecisionPlan": "trt_backend.engines.precision_plan",
})

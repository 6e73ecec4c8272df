"""trt-backend: TensorRT engines for what TensorRT runs, ONNX Runtime for the rest, one session.

Heavy modules (TensorRT, ONNX Runtime, CUDA) load on first use, not at import."""
from __future__ import annotations

import importlib
from typing import Any

from partitioner.errors import InvalidModelError, ModelLoadError, OptionsError, TrtBackendError

__version__ = "0.1.0"

_LAZY = {
    "Session": "trt_backend.session",
    "SessionOptions": "trt_backend.session",
    "ParserOracle": "trt_backend.capability",
    "make_plan": "trt_backend.planning",
    "load_flavor": "trt_backend.flavor",
    "Flavor": "trt_backend.flavor",
    "TensorRTUnavailableError": "trt_backend.flavor",
    "ParserCrashError": "trt_backend.planning",
    "BuildOptions": "trt_backend.builder",
    "SegmentBuildError": "trt_backend.builder",
    "build_segment": "trt_backend.builder",
    "build_engines": "trt_backend.engines",
    "build_with_fallback": "trt_backend.engines",
    "BuildReport": "trt_backend.build_report",
    "BuildResult": "trt_backend.build_report",
    "EngineCache": "trt_backend.cache",
    "EngineCacheError": "trt_backend.cache",
    "apply_precision": "trt_backend.precision",
    "load": "trt_backend.artifacts",
    "compare": "trt_backend.compare_api",
    "run_bench": "trt_backend.bench",
    "BenchOptions": "trt_backend.bench",
    "CompareOptions": "trt_backend.compare_options",
    "ComparisonReport": "trt_backend.compare_report",
    "ReferenceRunError": "trt_backend.compare_options",
    "ArtifactError": "trt_backend.artifacts",
}

__all__ = ["InvalidModelError", "ModelLoadError", "OptionsError", "TrtBackendError", "__version__", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'trt_backend' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

"""trt-backend: TensorRT engines for what TensorRT runs, ONNX Runtime for the rest, one session.

Heavy modules (TensorRT, ONNX Runtime, CUDA) load on first use, not at import."""
from __future__ import annotations

import importlib
from typing import Any

from trt_backend import errors
from trt_backend._version import __version__
from trt_backend.errors import *  # noqa: F403 - every exception a user can catch, as errors lists them

# public name -> module holding it (imported on first use)
_LAZY = {
    "Session": "trt_backend.session.session",
    "SessionOptions": "trt_backend.session.options",
    "RunOptions": "trt_backend.session.options",
    "OrtOptions": "trt_backend.ort.options",
    "PartitionOptions": "partitioner",
    "ParserOracle": "trt_backend.tensorrt.oracle",
    "make_plan": "trt_backend.planning",
    "load_flavor": "trt_backend.tensorrt.flavor",
    "Flavor": "trt_backend.tensorrt.flavor",
    "BuildOptions": "trt_backend.engines.builder",
    "build_segment": "trt_backend.engines.builder",
    "build_engines": "trt_backend.engines.fallback",
    "build_with_fallback": "trt_backend.engines.fallback",
    "BuildReport": "trt_backend.engines.report",
    "BuildResult": "trt_backend.engines.report",
    "EngineCache": "trt_backend.engines.cache",
    "apply_precision": "trt_backend.engines.precision",
    "TensorProfile": "trt_backend.profiles",
    "build": "trt_backend.session.build_folder",
    "load": "trt_backend.session.build_folder",
    "compare": "trt_backend.accuracy.compare",
    "CompareOptions": "trt_backend.accuracy.options",
    "ComparisonReport": "trt_backend.accuracy.report",
    "run_bench": "trt_backend.bench.loop",
    "BenchOptions": "trt_backend.bench.loop",
}

__all__ = ["__version__", *errors.__all__, *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'trt_backend' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

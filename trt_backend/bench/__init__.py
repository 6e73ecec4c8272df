"""trtexec-style benchmarking of a Session against baselines measured in the same run."""
from __future__ import annotations

from trt_backend._lazy import facade

__getattr__, __dir__, __all__ = facade(__name__, {
    "run_bench": "trt_backend.bench.loop",
    "BenchOptions": "trt_backend.bench.loop",
    "BenchResult": "trt_backend.bench.report",
    "TimingConfig": "trt_backend.bench.timing",
})

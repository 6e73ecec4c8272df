"""Latency statistics of a benchmark, defined as trtexec defines them.

Percentiles are **nearest-rank** on the ascending samples: the p-th percentile of n samples is
the sample of rank ``ceil(p * n / 100)`` (1-based; rank 1 when that is 0), so p100 is the
maximum and every percentile is a measured value, never an interpolation. trtexec's
``findPercentile`` means the same rank, ``n - floor((1 - p/100) * n)``, but computes it in
float32, which rounds down at some exact boundaries (p99 of 100 samples comes out as the 100th
value there, the 99th here); here the rank is computed in exact rational arithmetic. The median is the middle sample,
or the mean of the two middle samples for an even count (trtexec's ``findMedian``), so it may differ from
p50. Throughput is completed queries divided by the wall time of the timed loop, which counts
the loop's own overhead as trtexec's does."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction

from partitioner.errors import OptionsError
from partitioner.options_check import number_option

PERCENTILES = (90, 95, 99)
STAT_KEYS = ("min", "max", "mean", "median", "p90", "p95", "p99")
PERCENTILE_DEFINITION = (
    "nearest rank: the p-th percentile of n ascending samples is sample number ceil(p*n/100) (1-based, at least 1), "
    "exact arithmetic (trtexec's rule); median: middle sample, mean of the two middle ones for even n")


def nearest_rank(sorted_samples: Sequence[float], p: float) -> float:
    """The p-th percentile (0 <= p <= 100) of ascending ``sorted_samples`` by nearest rank."""
    if not sorted_samples:
        raise OptionsError("no samples to take a percentile of")
    number_option(p, "percentile", low=0, high=100)
    n = len(sorted_samples)
    rank = math.ceil(Fraction(str(p)) * n / 100)  # Fraction(str(.)) keeps 99.9 exact
    return float(sorted_samples[max(rank, 1) - 1])


def median(sorted_samples: Sequence[float]) -> float:
    n = len(sorted_samples)
    if n == 0:
        raise OptionsError("no samples to take a median of")
    m = n // 2
    return float(sorted_samples[m]) if n % 2 else (float(sorted_samples[m - 1]) + float(sorted_samples[m])) / 2


@dataclass(frozen=True)
class LatencyStats:
    """Latency summary in milliseconds (the JSON's ``latency_ms`` object)."""

    min: float
    max: float
    mean: float
    median: float
    p90: float
    p95: float
    p99: float

    @classmethod
    def of(cls, samples_ms: Iterable[float]) -> LatencyStats:
        s = sorted(float(x) for x in samples_ms)
        if not s:
            raise OptionsError("no samples: nothing was timed")
        return cls(min=s[0], max=s[-1], mean=math.fsum(s) / len(s), median=median(s),
                   p90=nearest_rank(s, 90), p95=nearest_rank(s, 95), p99=nearest_rank(s, 99))

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def throughput_qps(queries: int, wall_seconds: float) -> float:
    """Queries per second over a timed loop's wall time (0 when nothing was timed)."""
    return queries / wall_seconds if queries and wall_seconds > 0 else 0.0


def spread(samples_ms: Sequence[float]) -> float:
    """Coefficient of variation (standard deviation / mean) of the samples; 0 for fewer than 2."""
    if len(samples_ms) < 2:
        return 0.0
    mean = math.fsum(samples_ms) / len(samples_ms)
    var = math.fsum((x - mean) ** 2 for x in samples_ms) / (len(samples_ms) - 1)
    return math.sqrt(var) / mean if mean > 0 else 0.0


__all__ = ["LatencyStats", "PERCENTILES", "PERCENTILE_DEFINITION", "STAT_KEYS", "median", "nearest_rank",
           "spread", "throughput_qps"]

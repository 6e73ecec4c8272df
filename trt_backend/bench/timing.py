"""The timing loop of ``trt-backend bench``, as trtexec runs it: warm up for a time, then run
until both a minimum number of iterations and a minimum duration are reached, timing every
iteration on the host with ``time.perf_counter`` (monotonic). Optionally split into rounds
that alternate between runners, so slow drift of a shared machine hits every runner alike.

Per-segment times of a stitched :class:`~trt_backend.session.session.Session` come from
:class:`SegmentTimer`, which wraps each segment runner's ``run`` for the time of a benchmark
(an instance attribute shadowing the method; removed afterwards)."""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from partitioner.options_check import number_option
from trt_backend.errors import BenchOptionsError

_UNSET = object()


@dataclass(frozen=True)
class TimingConfig:
    """How long each runner is timed. ``warmup_s`` must be >= 0 (0: one untimed call, which
    every runner gets, as its first call pays for what loads lazily), ``duration_s`` > 0,
    ``min_iterations`` and ``rounds`` >= 1; ``pause_s`` is slept before every timed block so
    idle threads of the runtime timed before (ONNX Runtime's spin) stop competing. Each runner's
    duration and iterations are split over ``rounds`` blocks that alternate between runners;
    ``rounds=1`` is trtexec's procedure exactly, more rounds make ratios robust to drift."""

    warmup_s: float = 0.2
    duration_s: float = 3.0
    min_iterations: int = 10
    rounds: int = 3
    pause_s: float = 0.05

    def __post_init__(self) -> None:
        warmup = self.warmup_s
        if isinstance(warmup, (int, float)) and not isinstance(warmup, bool):
            warmup = warmup * 1000  # checked as the flag gives it, in milliseconds
        number_option(warmup, "--warmup-ms", low=0, error=BenchOptionsError)
        number_option(self.duration_s, "--duration-s", above=0, error=BenchOptionsError)
        for name, flag in (("min_iterations", "--iterations"), ("rounds", "--rounds")):
            number_option(getattr(self, name), flag, whole=True, low=1, error=BenchOptionsError)
        number_option(self.pause_s, "pause_s", low=0, error=BenchOptionsError)

    def block(self, round_index: int) -> tuple[float, float, int]:
        """(warm-up s, duration s, minimum iterations) of one runner's block in a round: the
        first round warms up fully, later ones briefly (the runner is warm; its caches are not)."""
        warm = self.warmup_s if round_index == 0 else min(self.warmup_s, 0.05)
        return warm, self.duration_s / self.rounds, math.ceil(self.min_iterations / self.rounds)


@dataclass(frozen=True)
class ProgressEvent:
    """Progress of one runner's block: ``phase`` is "warmup", "timed" or "done"."""

    runner: str
    phase: str
    round: int
    rounds: int
    elapsed_s: float
    iterations: int
    target_s: float
    target_iterations: int


BenchProgress = Callable[[ProgressEvent], None]


@dataclass
class Measurement:
    """Host latency samples (ms) of one runner over all its timed blocks, and the blocks' wall time."""

    samples_ms: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    warmup_iterations: int = 0


def warm_up(fn: Callable[[], Any], seconds: float) -> int:
    """Call ``fn`` until ``seconds`` have passed (at least once); the number of calls."""
    clock = time.perf_counter
    start = clock()
    n = 0
    while True:
        fn()
        n += 1
        if clock() - start >= seconds:
            return n


def timed_loop(fn: Callable[[], Any], seconds: float, iterations: int, out: Measurement,
               report: Callable[[float, int], None] | None = None, report_every_s: float = 0.5) -> None:
    """Call ``fn`` until at least ``iterations`` calls and ``seconds`` have passed, appending each
    call's host latency (ms) to ``out.samples_ms`` and the loop's wall time to ``out.wall_s``."""
    clock = time.perf_counter
    append = out.samples_ms.append
    n = 0
    start = last = clock()
    while True:
        t0 = clock()
        fn()
        t1 = clock()
        append((t1 - t0) * 1e3)
        n += 1
        if n >= iterations and t1 - start >= seconds:
            break
        if report is not None and t1 - last >= report_every_s:
            report(t1 - start, n)
            last = t1
    out.wall_s += t1 - start


class SegmentTimer:
    """Host time of every segment run of a Session while :attr:`recording` is True.

    ``install`` shadows each runner's ``run`` with a timing wrapper (an instance attribute);
    ``remove`` takes the wrappers off again. Overhead: two clock reads per segment run."""

    def __init__(self, runners: Sequence[Any]) -> None:
        self.runners = list(runners)
        self.total_s = [0.0] * len(self.runners)
        self.counts = [0] * len(self.runners)
        self.recording = False
        self._installed = False
        self._saved: list[Any] = []

    def install(self) -> SegmentTimer:
        if not self._installed:
            self._saved = [runner.__dict__.get("run", _UNSET) for runner in self.runners]
            for k, runner in enumerate(self.runners):
                runner.run = self._wrap(k, runner.run)
            self._installed = True
        return self

    def remove(self) -> None:
        """Put back each runner's ``run`` as it was before :meth:`install`."""
        if self._installed:
            for runner, saved in zip(self.runners, self._saved):
                if saved is _UNSET:
                    runner.__dict__.pop("run", None)
                else:
                    runner.__dict__["run"] = saved
            self._installed = False

    def _wrap(self, k: int, run: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
        clock = time.perf_counter

        def timed(inputs: Sequence[Any], *args: Any) -> list[Any]:
            if not self.recording:
                return run(inputs, *args)
            t0 = clock()
            out = run(inputs, *args)
            self.total_s[k] += clock() - t0
            self.counts[k] += 1
            return out

        return timed

    def mean_ms(self, k: int) -> float:
        return self.total_s[k] / self.counts[k] * 1e3 if self.counts[k] else 0.0

    def __enter__(self) -> SegmentTimer:
        return self.install()

    def __exit__(self, *exc: Any) -> None:
        self.remove()


__all__ = ["BenchOptionsError", "Measurement", "BenchProgress", "ProgressEvent", "SegmentTimer", "TimingConfig",
           "timed_loop", "warm_up"]

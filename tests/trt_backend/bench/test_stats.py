"""Benchmark statistics on known samples (nearest-rank percentiles, trtexec's median), timing
settings, the timing loop's stop rule, and the wrappers that time segments and GPU phases."""
from __future__ import annotations

import random
import time

import pytest

from partitioner.errors import OptionsError
from trt_backend.bench.gpu_phases import PhaseRecorder
from trt_backend.bench.stats import (
    LatencyStats,
    median,
    nearest_rank,
    spread,
    throughput_qps,
)
from trt_backend.bench.timing import (
    Measurement,
    SegmentTimer,
    TimingConfig,
    timed_loop,
    warm_up,
)
from trt_backend.errors import BenchOptionsError


def shuffled(values):
    out = list(values)
    random.Random(0).shuffle(out)
    return out


def test_ten_samples_exact_values() -> None:
    st = LatencyStats.of(shuffled(range(1, 11)))  # 1..10 ms, order must not matter
    assert st.to_dict() == {"min": 1.0, "max": 10.0, "mean": 5.5, "median": 5.5, "p90": 9.0, "p95": 10.0,
                            "p99": 10.0}


def test_hundred_samples_nearest_rank_is_a_measured_value() -> None:
    st = LatencyStats.of(shuffled(range(1, 101)))
    assert (st.p90, st.p95, st.p99, st.median, st.mean) == (90.0, 95.0, 99.0, 50.5, 50.5)
    # trtexec's float32 arithmetic gives the 100th value for p99 of 100; the exact rank is 99
    assert nearest_rank([float(x) for x in range(1, 101)], 99) == 99.0


@pytest.mark.parametrize("n, p, rank", [(20, 95, 19), (20, 90, 18), (7, 50, 4), (3, 99, 3), (1000, 99.9, 999),
                                        (5, 0, 1), (5, 100, 5), (1, 90, 1), (200, 99, 198)])
def test_nearest_rank(n: int, p: float, rank: int) -> None:
    assert nearest_rank([float(x) for x in range(1, n + 1)], p) == float(rank)


def test_odd_median_is_the_middle_sample_and_single_sample_is_everything() -> None:
    assert median([1.0, 2.0, 40.0]) == 2.0
    st = LatencyStats.of([3.25])
    assert set(st.to_dict().values()) == {3.25}


def test_skewed_samples() -> None:
    st = LatencyStats.of([10.0] * 97 + [50.0, 60.0, 70.0])
    assert (st.median, st.p90, st.p95, st.p99, st.max) == (10.0, 10.0, 10.0, 60.0, 70.0)
    assert st.mean == pytest.approx(11.5)


def test_statistics_errors_are_user_errors() -> None:
    with pytest.raises(OptionsError, match="no samples"):
        LatencyStats.of([])
    with pytest.raises(OptionsError, match=r"\[0, 100\]"):
        nearest_rank([1.0], 101)


def test_throughput_and_spread() -> None:
    assert throughput_qps(50, 2.0) == 25.0
    assert throughput_qps(0, 1.0) == 0.0 and throughput_qps(3, 0.0) == 0.0
    assert spread([2.0, 2.0, 2.0]) == 0.0 and spread([1.0]) == 0.0
    assert spread([1.0, 3.0]) == pytest.approx(2 ** 0.5 / 2)


@pytest.mark.parametrize("kwargs, message", [
    ({"duration_s": 0}, "--duration-s must be a finite number > 0, got 0"),
    ({"duration_s": -1.5}, "--duration-s must be a finite number > 0"),
    ({"warmup_s": -0.2}, "--warmup-ms must be a finite number >= 0, got -200"),
    ({"warmup_s": float("nan")}, "--warmup-ms must be a finite number >= 0"),
    ({"duration_s": float("inf")}, "--duration-s must be a finite number > 0"),
    ({"min_iterations": 0}, "--iterations must be a whole number >= 1, got 0"),
    ({"min_iterations": 2.5}, "--iterations must be a whole number"),
    ({"rounds": 0}, "--rounds must be a whole number >= 1"),
])
def test_timing_config_rejects_bad_values(kwargs, message) -> None:
    with pytest.raises(BenchOptionsError, match=message.replace("(", r"\(")):
        TimingConfig(**kwargs)


def test_no_warm_up_is_one_untimed_call() -> None:
    """--warmup-ms 0 (trtexec's --warmUp=0, Polygraphy's default): the one untimed first call
    every runner gets, as it pays for what loads lazily."""
    assert TimingConfig(warmup_s=0).block(0)[0] == 0
    calls: list[int] = []
    assert warm_up(lambda: calls.append(1), 0.0) == 1 and calls == [1]


def test_rounds_split_duration_and_iterations() -> None:
    t = TimingConfig(warmup_s=0.2, duration_s=3.0, min_iterations=10, rounds=3)
    assert t.block(0) == (0.2, 1.0, 4)
    assert t.block(1) == (0.05, 1.0, 4)  # later rounds re-warm briefly


class FakeClock:
    """``time`` for the timing module: perf_counter reads a clock the timed call advances (by
    powers of two of a second, so every sum is exact)."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_loop_runs_until_both_iterations_and_duration(monkeypatch) -> None:
    import trt_backend.bench.timing as timing

    clock = FakeClock()
    monkeypatch.setattr(timing, "time", clock)

    def call(seconds: float) -> None:
        clock.now += seconds

    m = Measurement()
    timed_loop(lambda: call(2**-10), 2**-9, 50, m)  # iterations bind: 50 calls are far past the duration
    assert m.samples_ms == [1e3 * 2**-10] * 50 and m.wall_s == 50 * 2**-10
    m2 = Measurement()
    timed_loop(lambda: call(2**-6), 0.25, 2, m2)  # duration binds: 16 calls of 15.625 ms make 250 ms
    assert m2.samples_ms == [15.625] * 16 and m2.wall_s == 0.25
    reports: list[tuple[float, int]] = []
    timed_loop(lambda: call(0.125), 1.0, 1, Measurement(), lambda e, n: reports.append((e, n)))
    assert reports == [(0.5, 4)]  # every 0.5 s of the loop until it ends (at 1.0 s, 8 calls)
    assert warm_up(lambda: call(2**-5), 0.1) == 4  # 3 x 31.25 ms fall short of 100 ms, 4 pass it


def test_warm_up_runs_at_least_once() -> None:
    calls = []
    assert warm_up(lambda: calls.append(1), 1e-9) == 1 and calls == [1]


class FakeRunner:
    def __init__(self, log):
        self.log = log

    def run(self, inputs):
        self.log.append("run")
        time.sleep(0.001)
        return [inputs]


def test_segment_timer_records_only_while_recording_and_restores() -> None:
    log: list[str] = []
    runners = [FakeRunner(log), FakeRunner(log)]
    with SegmentTimer(runners) as timer:
        runners[0].run([1])
        assert timer.counts == [0, 0]
        timer.recording = True
        assert runners[0].run([1]) == [[1]]
        runners[1].run([2])
        runners[1].run([2])
    assert timer.counts == [1, 2] and timer.total_s[1] >= 0.002 and timer.mean_ms(1) >= 1.0
    assert "run" not in runners[0].__dict__ and log == ["run"] * 4


class FakeEvent:
    """Records the fake GPU clock at record time; elapsed_ms like cudaEventElapsedTime."""

    clock = [0.0]

    def __init__(self) -> None:
        self.t: float | None = None

    def record(self, stream) -> None:
        self.t = FakeEvent.clock[0]

    def synchronize(self) -> None:
        pass

    def elapsed_ms(self, start) -> float:
        assert self.t is not None, "elapsed_ms of an event never recorded"
        return self.t - start.t


class FakeTrtRunner:
    """The shape of TensorRTRunner.run_impl: mark, bind inputs (H2D), mark, execute, mark, copy
    outputs (D2H), mark; the marks record ``phase_events`` when set."""

    def __init__(self) -> None:
        self.stream = object()
        self.input_names = ("a", "b")
        self.output_names = ("y",)
        self.phase_events = None

    def _mark(self, point: int) -> None:
        if self.phase_events is not None:
            self.phase_events[point].record(self.stream)

    def run(self, inputs):
        self._mark(0)
        FakeEvent.clock[0] += 1.0 * len(inputs)  # each copy takes 1 ms
        self._mark(1)
        FakeEvent.clock[0] += 7.0  # execute_async_v3
        self._mark(2)
        FakeEvent.clock[0] += 0.5 * len(self.output_names)
        self._mark(3)
        return list(self.output_names)


def test_phase_recorder_splits_h2d_compute_d2h_and_nests_with_the_segment_timer() -> None:
    runner = FakeTrtRunner()
    rec = PhaseRecorder(runner, FakeEvent).install()
    timer = SegmentTimer([runner]).install()
    runner.run([1, 2])  # not recording: nothing kept
    rec.recording = timer.recording = True
    assert runner.run([1, 2]) == ["y"]
    assert rec.samples == {"h2d": [2.0], "compute": [7.0], "d2h": [0.5]} and rec.totals_ms() == [9.5]
    assert timer.counts == [1]
    timer.remove()
    assert runner.__dict__["run"] is not None  # the recorder's wrapper is back
    rec.close()
    assert "run" not in runner.__dict__ and runner.phase_events is None


def test_gpu_phases_of_several_segments_add_up_per_query() -> None:
    from trt_backend.bench.loop import _gpu_stats

    recs = []
    for _ in range(2):
        runner = FakeTrtRunner()
        rec = PhaseRecorder(runner, FakeEvent).install()
        rec.recording = True
        runner.run([1, 2])
        runner.run([1, 2])
        recs.append(rec)
    stats = _gpu_stats(recs)
    assert stats is not None
    assert stats["h2d"]["mean"] == 4.0 and stats["compute"]["median"] == 14.0 and stats["d2h"]["max"] == 1.0
    assert stats["total"]["min"] == 19.0
    assert _gpu_stats([]) is None

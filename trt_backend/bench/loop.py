"""``trt-backend bench`` as a library: time our stitched session and the baselines a user would
use instead, in one run on the same inputs, with trtexec's timing and statistics.

    result = run_bench("model.onnx", BenchOptions(shapes={"x": (1, 3, 224, 224)}, baselines=("ort-cpu",)),
                       SessionOptions(emulate=True))
    print(result.table()); open("bench.json", "w").write(result.to_json())

Definitions (statistics, ratios) are in :mod:`trt_backend.bench.stats` and the JSON itself."""
from __future__ import annotations

import logging
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from partitioner.options_check import keyword_checked, plain_options, names_option
from partitioner import Plan
from partitioner.model import ModelSource
from trt_backend.artifacts.read import is_build_folder
from trt_backend.bench.candidates import (
    BASELINES,
    OURS,
    Candidate,
    build_info,
    first_run,
    ort_baseline,
    trt_whole,
)
from trt_backend.bench.gpu_phases import attach_phase_recorders
from trt_backend.bench.report import BenchResult, RunnerResult
from trt_backend.bench.stats import LatencyStats, throughput_qps
from trt_backend.compiler import compile_as_built
from trt_backend.bench.timing import (
    BenchProgress,
    Measurement,
    ProgressEvent,
    SegmentTimer,
    TimingConfig,
    timed_loop,
    warm_up,
)
from trt_backend.errors import BenchOptionsError, TensorRTUnavailableError
from trt_backend.gpu.device import cuda_device_count
from trt_backend.ort.threads import thread_pool_mode
from trt_backend.profiles import Shape
from trt_backend.session.feeds import random_feeds
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session
from trt_backend.tensorrt.flavor import load_flavor

log = logging.getLogger(__name__)



@keyword_checked
@plain_options
@dataclass(frozen=True)
class BenchOptions:
    """What to benchmark and how. ``shapes``: input shapes to run (default: the opt shapes of
    the first profile, or the model's fixed shapes); ``profiles`` as :class:`Session` takes
    them (without any, ``shapes`` make one fixed profile, as ``--shapes`` does); ``build``: build
    TensorRT engines (timed, apart from inference) where a TensorRT flavor imports, through the
    session options' ``cache_dir`` (default: a fresh temporary one, so the first build is cold and
    the second a cache hit). What precision is measured is the session's (``SessionOptions.build``)
    or the build folder's."""

    shapes: Mapping[str, Shape] = field(default_factory=dict)
    profiles: Sequence[Mapping[str, Any]] | None = None
    baselines: tuple[str, ...] = BASELINES
    timing: TimingConfig = field(default_factory=TimingConfig)
    build: bool = True
    seed: int = 0
    feeds: Mapping[str, Any] | None = None  # real inputs to time with (instead of seeded random ones)
    # the ranges random inputs are drawn from (trt_backend.session.feeds.value_ranges)
    val_range: Any = None
    int_range: Any = None

    def __post_init__(self) -> None:
        names = names_option(self.baselines, "baselines")
        unknown = [b for b in names if b not in BASELINES]
        if unknown:
            raise BenchOptionsError(f"unknown baseline(s) {', '.join(repr(u) for u in unknown)}; "
                                    f"choose from {', '.join(BASELINES)}")
        object.__setattr__(self, "baselines", tuple(dict.fromkeys(names)))
        if not isinstance(self.timing, TimingConfig):
            raise BenchOptionsError(f"timing must be a TimingConfig, got {type(self.timing).__name__}")


def run_bench(model: ModelSource, options: BenchOptions | None = None, session_options: SessionOptions | None = None,
              progress: BenchProgress | None = None) -> BenchResult:
    """Benchmark ``model``: our session, then every baseline asked for (or why it cannot run).
    ``model`` may be a ``trt-backend build`` folder: its engines are measured as built (emulated
    where TensorRT cannot execute), with no planning, calibration or build; ``shapes`` then only
    shape the inputs (the folder brings its profiles) and the result records the folder's digest."""
    options = options or BenchOptions()
    profiles = options.profiles or ([{n: tuple(s) for n, s in options.shapes.items()}] if options.shapes else None)
    if is_build_folder(model):
        profiles = options.profiles  # A Session refuses profiles given with a folder.
        options = replace(options, build=False)
    cache_dir = temp_cache = None
    if options.build:
        given_cache = session_options.cache_dir if session_options is not None else None
        cache_dir = given_cache or (temp_cache := tempfile.mkdtemp(prefix="trt-backend-bench-"))
    so = _session_options(session_options, options, cache_dir)
    candidates: list[Candidate] = []
    # (real samples derive the TensorRT segments' profiles: random data may be values the model refuses)
    calibration = [options.feeds] if options.feeds is not None and not is_build_folder(model) else []
    try:
        t0 = time.perf_counter()
        source: Any = model
        if options.build and not is_build_folder(model):  # what a build holds: refused segments demoted
            source = compile_as_built(model, profiles, so, _build_progress(OURS, progress), calibration)
        # (without profiles, the shapes to run are a fixed one)
        sess = Session(source, profiles, so, calibration_feeds=calibration)
        setup_s = time.perf_counter() - t0
    except BaseException:
        if temp_cache:
            shutil.rmtree(temp_cache, ignore_errors=True)
        raise
    try:
        feeds = _feeds(sess, options)
        names = [a.name for a in sess.get_outputs()]
        ours = Candidate(OURS, setup_s=setup_s)
        candidates.append(ours)
        _prepare_ours(ours, sess, feeds)
        reference = dict(zip(names, first_run(ours)))  # the session validates the feeds (model, profiles)
        ours.build = _build_ours(sess, options, cache_dir, so, _build_progress(OURS, progress))
        for name in options.baselines:
            candidates.append(_baseline(name, sess, feeds, names, options, cache_dir, ours.build, so,
                                        _build_progress(name, progress)))
        for c in candidates[1:]:
            first_run(c, reference)
        measured = measure(candidates, options.timing, progress)
        return _result(sess, options, candidates, measured, feeds)
    finally:
        for c in candidates:
            c.close()
        sess.close()
        if temp_cache:
            shutil.rmtree(temp_cache, ignore_errors=True)


def _feeds(sess: Session, options: BenchOptions) -> dict[str, Any]:
    if options.feeds is not None:
        return dict(options.feeds)  # The session validates them on the first run.
    inputs = {a.name for a in sess.get_inputs()}
    unknown = [n for n in options.shapes if n not in inputs]
    if unknown:
        raise BenchOptionsError(f"--shapes names {', '.join(repr(u) for u in unknown)}, not input(s) of the model "
                                f"(inputs: {', '.join(sorted(inputs)) or 'none'})")
    shapes = dict(options.shapes)
    if sess.input_profiles:
        for n, tp in sess.input_profiles[0].items():
            shapes.setdefault(n, tp.opt)
    return random_feeds(sess.get_inputs(), shapes, options.seed, options.val_range, options.int_range)


def _build_progress(name: str, progress: BenchProgress | None) -> Any:
    """Engine-build events as progress events (phase "build": ``iterations`` segments done of
    ``target_iterations``, ``elapsed_s`` that segment's seconds)."""
    if progress is None:
        return None

    def relay(e: Any) -> None:
        progress(ProgressEvent(name, "build", 0, 1, e.seconds, e.done, 0.0, e.total))

    return relay


def _prepare_ours(c: Candidate, sess: Session, feeds: Mapping[str, Any]) -> None:
    phases = attach_phase_recorders(sess.runners)  # TensorRT runners only; none when emulated
    timer = SegmentTimer(sess.runners).install()
    c.recorders += [*phases.values(), timer]
    c.cleanup += [p.close for p in phases.values()] + [timer.remove]  # closed in reverse: timer first
    c.segment_timer, c.phases = timer, phases
    c.call = lambda: sess.run(None, feeds)


def _session_options(given: SessionOptions | None, options: BenchOptions, cache_dir: str | None) -> SessionOptions:
    """The session's options, with the bench's engine cache where it builds engines itself (the
    GPU path) and the caller set none."""
    so = given if given is not None else SessionOptions()
    if so.cache_dir is None and cache_dir is not None:
        so = replace(so, cache_dir=cache_dir)
    return so


def _build_ours(sess: Session, options: BenchOptions, cache_dir: str | None, so: SessionOptions,
                progress: Any = None) -> dict[str, Any] | None:
    """Build seconds and cache-load seconds of our TensorRT segments. On the GPU path the session
    built them (its ``build_report``); emulated, they are built here, as they would be."""
    if not sess.plan.tensorrt_segments():
        return {"skipped": "no TensorRT segments"}
    if sess.folder_manifest is not None:
        return {"skipped": "build folder: engines built earlier, nothing built here",
                "engine_bytes": {s["id"]: s["engine_bytes"] for s in sess.folder_manifest["segments"] if s["engine"]}}
    built = sess.build_report
    if built is None and not options.build:
        return {"skipped": "--no-build"}
    try:
        flavor = load_flavor(so.flavor)
    except TensorRTUnavailableError as e:
        return {"skipped": str(e) if str(e).startswith("no TensorRT") else f"no TensorRT flavor importable: {e}"}
    info = build_info(sess.plan, sess.segment_profiles, so.build, cache_dir, flavor, progress, built)
    if built is not None:
        info["note"] = "built, or taken from the engine cache, by the session while it was made (setup_s includes it)"
    return info


def _baseline(name: str, sess: Session, feeds: Mapping[str, Any], names: list[str], options: BenchOptions,
              cache_dir: str | None, ours_build: dict[str, Any] | None, so: SessionOptions,
              progress: Any = None) -> Candidate:
    if name == "trt-whole" and sess.folder_manifest is not None:
        return Candidate(name, reason="a build folder is measured as built: no whole-model engine is built "
                                      "(bench the model file for this baseline)")
    if name == "trt-whole":
        capability: Plan = sess.plan
        if so.partition.exclude_ops or so.partition.exclude_nodes:  # ask TensorRT about the whole model
            whole = replace(so, partition=replace(so.partition, exclude_ops=(), exclude_nodes=()))
            capability = sess.make_plan(sess.model, whole)
        built = ours_build if ours_build and "seconds" in ours_build else None
        return trt_whole(sess, capability, feeds, so.build, cache_dir, built, so.flavor, options.build, progress,
                         device_id=so.device_id)
    model = sess.model.proto.SerializeToString()
    ort_dir = os.path.join(cache_dir, "ort-trt") if cache_dir and name == "ort-trt" else None
    if ort_dir:
        os.makedirs(ort_dir, exist_ok=True)
    return ort_baseline(name, model, feeds, names, so.ort_for(1), sess.options.build.precision, ort_dir,
                        device_id=so.device_id,
                        weights_dir=sess.model.base_dir)


def measure(candidates: Sequence[Candidate], timing: TimingConfig,
            progress: BenchProgress | None = None) -> dict[str, Measurement]:
    """Time every available candidate: per round, each in turn warms up then runs its block."""
    live = [(c, c.call) for c in candidates if c.call is not None]
    out = {c.name: Measurement() for c, _ in live}
    for r in range(timing.rounds):
        for c, call in live:
            warm_s, block_s, block_n = timing.block(r)
            m = out[c.name]
            time.sleep(timing.pause_s)

            def emit(phase: str, elapsed: float, n: int, name: str = c.name) -> None:
                if progress is not None:
                    # B023: r and block_s are this round's; emit is called in this round only
                    progress(ProgressEvent(name, phase, r, timing.rounds, elapsed, n, block_s, block_n))  # noqa: B023

            emit("warmup", 0.0, 0)
            m.warmup_iterations += warm_up(call, warm_s)
            before = len(m.samples_ms)
            c.set_recording(True)
            try:
                timed_loop(call, block_s, block_n, m, lambda e, n: emit("timed", e, n))
            finally:
                c.set_recording(False)
            emit("done", block_s, len(m.samples_ms) - before)
    return out


def _result(sess: Session, options: BenchOptions, candidates: Sequence[Candidate], measured: Mapping[str, Measurement],
            feeds: Mapping[str, Any]) -> BenchResult:
    runners = [_runner_result(c, measured.get(c.name), sess) for c in candidates]
    ours = runners[0]
    for r in runners:
        if r.latency is not None and ours.latency is not None and r.latency.median > 0:
            r.ours_ratio = ours.latency.median / r.latency.median
    executors = sess.segment_executors
    t = options.timing
    notes = []
    precision = sess.compiled.precision_summary()
    if precision != "fp32" and "emulated" in executors:
        notes.append(f"emulated TensorRT segments compute in {precision} (the built forms, rounded as the engines "
                     "would round) through ONNX Runtime on CPU: their speed is not the engines'")
    return BenchResult(
        model=str(sess.model.source), runners=runners,
        shapes={n: [int(d) for d in np.shape(v)] for n, v in feeds.items()},
        settings={"warmup_ms": t.warmup_s * 1e3, "duration_s": t.duration_s, "iterations": t.min_iterations,
                  "rounds": t.rounds, "precision": sess.compiled.precision_summary(), "seed": options.seed,
                  "baselines": list(options.baselines), "emulate": sess.options.emulate, "build": options.build,
                  "intra_op_threads": sess.options.ort.intra_op_threads,
                  "thread_pool": thread_pool_mode(),  # what ran, whatever was asked
                  "share_arena": sess.options.ort.share_arena},
        environment=_environment(sess),
        plan={"segments": len(sess.plan.segments), "tensorrt": sess.plan.tensorrt, "executors": executors,
              "summary": f"{len(sess.plan.segments)} segment(s): " + ", ".join(
                  f"{e} x{executors.count(e)}" for e in dict.fromkeys(executors))},
        notes=notes, source=_source(sess, candidates[0]))


def _source(sess: Session, ours: Candidate) -> dict[str, Any]:
    """What was measured: a model (and whether our engines were built in this run) or a build
    folder (never built here: its manifest digest says which build)."""
    manifest = sess.folder_manifest
    if manifest is None:
        return {"source": "model", "built": bool(ours.build and "seconds" in ours.build)}
    return {"source": "build folder", "built": False, "folder": os.path.dirname(str(sess.model.source)),
            "manifest_digest": manifest.get("digest"),
            "signed": "signature" in manifest, "built_with": manifest.get("tensorrt"),
            "gpu_target": manifest.get("gpu_target")}


def _runner_result(c: Candidate, m: Measurement | None, sess: Session) -> RunnerResult:
    extra: dict[str, Any] = {"setup_s": c.setup_s, "first_run_ms": c.first_run_ms,
                             "build": {k: v for k, v in c.build.items() if k != "engines"} if c.build else None}
    extra.update(c.details)
    if m is None or not m.samples_ms:
        return RunnerResult(c.name, False, c.reason or "nothing was timed", extra=extra)
    stats = LatencyStats.of(m.samples_ms)
    extra.update(wall_s=m.wall_s, warmup_iterations=m.warmup_iterations, timing="host (time.perf_counter)")
    r = RunnerResult(c.name, True, None, stats, throughput_qps(len(m.samples_ms), m.wall_s), len(m.samples_ms),
                     extra=extra, samples_ms=m.samples_ms)
    gpu = _gpu_stats(list(c.phases.values()))
    if gpu:
        extra.update(gpu_ms=gpu, timing="host (time.perf_counter) + CUDA events (H2D, compute, D2H)")
    if c.segment_timer is not None:
        r.segments = _segments(sess, c.segment_timer, c.phases, len(m.samples_ms), stats.mean)
        extra["overhead_ms"] = stats.mean - sum(s["mean_ms"] for s in r.segments)
    return r


def _gpu_stats(recorders: Sequence[Any]) -> dict[str, dict[str, float]] | None:
    """Statistics of each GPU phase per query, summed over the recorders (the GPU segments of
    one query run one after another)."""
    recorders = [r for r in recorders if r.samples.get("compute")]
    if not recorders:
        return None
    out = {p: LatencyStats.of([sum(v) for v in zip(*(r.samples[p] for r in recorders))]).to_dict()
           for p in recorders[0].samples}
    out["total"] = LatencyStats.of([sum(v) for v in zip(*(r.totals_ms() for r in recorders))]).to_dict()
    return out


def _segments(sess: Session, timer: SegmentTimer, phases: Mapping[int, Any], queries: int,
              mean_ms: float) -> list[dict[str, Any]]:
    rows = []
    for k, runner in enumerate(sess.runners):
        seg = runner.segment
        seg_ms = timer.total_s[k] * 1e3 / queries if queries else 0.0
        row: dict[str, Any] = {"id": seg.id, "backend": seg.backend, "executor": runner.executor,
                               "mean_ms": seg_ms, "share": seg_ms / mean_ms if mean_ms > 0 else 0.0,
                               "nodes": len(seg.nodes), "runs": timer.counts[k]}
        rec = phases.get(k)
        if rec is not None and rec.samples["compute"]:
            row["gpu_ms"] = {p: float(np.mean(v)) for p, v in rec.samples.items()}
        rows.append(row)
    return rows


def _environment(sess: Session) -> dict[str, Any]:
    env: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine(),
                           "cpus": os.cpu_count(), "numpy": np.__version__, "tensorrt": sess.plan.tensorrt,
                           "cuda_devices": cuda_device_count()}
    try:
        import onnxruntime

        env["onnxruntime"] = onnxruntime.__version__
    except ImportError:  # pragma: no cover - the session needs it
        env["onnxruntime"] = None
    return env


__all__ = ["BenchOptions", "BenchOptionsError", "TimingConfig", "measure", "run_bench"]

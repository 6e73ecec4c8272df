"""What ``trt-backend bench`` times: our stitched session and the baselines a user would use
instead, each made here or declared unavailable with the reason (never dropped).

- ``trt-backend``: the :class:`~trt_backend.session.session.Session` (emulated TensorRT segments on CPU).
- ``ort-cpu`` / ``ort-cuda`` / ``ort-trt``: the whole model in one ONNX Runtime session with the
  CPU, CUDA or TensorRT execution provider, with the same ONNX Runtime settings as ours.
- ``trt-whole``: one TensorRT engine for the whole model, when TensorRT supports every node."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from partitioner import Plan, Segment, Verdict, build_plan
from partitioner.errors import TrtBackendError
from trt_backend.bench.gpu_phases import PhaseRecorder
from trt_backend.engines.builder import BuildOptions, ProfilesArg
from trt_backend.engines.cache import EngineCache
from trt_backend.engines.fallback import build_engines, plugin_rewrite
from trt_backend.engines.memory import engine_bytes
from trt_backend.errors import CudaError, SegmentLoadError, TensorRTUnavailableError
from trt_backend.gpu.device import cuda_device_count
from trt_backend.gpu.status import tensorrt_status
from trt_backend.ort.sessions import ort_session
from trt_backend.profiles import Profile
from trt_backend.runners.tensorrt import TensorRTRunner
from trt_backend.session.session import Session
from trt_backend.tensorrt.flavor import Flavor, load_flavor

log = logging.getLogger(__name__)

OURS = "trt-backend"
BASELINES = ("ort-cpu", "ort-cuda", "ort-trt", "trt-whole")
_PROVIDERS = {"ort-cpu": "CPUExecutionProvider", "ort-cuda": "CUDAExecutionProvider",
              "ort-trt": "TensorrtExecutionProvider"}


@dataclass
class Candidate:
    """A runner to time: ``call`` runs one inference on the benchmark's inputs (None when
    unavailable, with ``reason``). ``recorders`` have a ``recording`` flag the timing loop sets."""

    name: str
    call: Callable[[], Any] | None = None
    reason: str | None = None
    setup_s: float | None = None
    first_run_ms: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    build: dict[str, Any] | None = None
    output_names: tuple[str, ...] | None = None  # order of ``call``'s outputs when not the model's
    recorders: list[Any] = field(default_factory=list)
    segment_timer: Any = None  # a SegmentTimer for stitched sessions (ours)
    phases: dict[int, Any] = field(default_factory=dict)  # PhaseRecorder per GPU segment (ours) or 0 (whole)
    cleanup: list[Callable[[], None]] = field(default_factory=list)

    @property
    def available(self) -> bool:
        return self.call is not None

    def set_recording(self, on: bool) -> None:
        for r in self.recorders:
            r.recording = on

    def close(self) -> None:
        for fn in reversed(self.cleanup):
            fn()
        self.cleanup.clear()


def max_abs_diff(ours: Sequence[Any], theirs: Sequence[Any]) -> float | None:
    """Largest absolute difference over the numeric tensor outputs (None when none compare)."""
    worst: float | None = None
    for a, b in zip(ours, theirs):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.dtype.kind not in "biuf":
            continue
        if a.shape != b.shape:
            return float("inf")
        if a.size:
            d = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            worst = d if worst is None else max(worst, d)
    return worst


def first_run(c: Candidate, reference: Mapping[str, Any] | None = None) -> list[Any]:
    """Run ``c`` once (one-time costs land in ``first_run_ms``, not in the statistics) and
    compare its outputs with ``reference`` (ours, by output name). Its outputs."""
    if c.call is None:
        return []
    t0 = time.perf_counter()
    out = list(c.call())
    c.first_run_ms = (time.perf_counter() - t0) * 1e3
    if reference is not None:
        names = c.output_names or tuple(reference)
        got = dict(zip(names, out))
        common = [n for n in names if n in got and n in reference]
        c.details["max_abs_diff"] = max_abs_diff([reference[n] for n in common], [got[n] for n in common])
    return out


# ------------------------------------------------------------------ ONNX Runtime baselines

def provider_problem(name: str) -> str | None:
    """Why baseline ``name``'s execution provider cannot run here, or None."""
    import onnxruntime as ort

    provider = _PROVIDERS[name]
    have = ort.get_available_providers()
    if provider not in have:
        return (f"{provider} not available in this onnxruntime build (onnxruntime {ort.__version__}; "
                f"providers: {', '.join(have)})")
    if name != "ort-cpu" and cuda_device_count() == 0:
        return f"no CUDA device ({provider} is in this onnxruntime build but has no GPU to run on)"
    return None


def ort_baseline(name: str, model: bytes, feeds: Mapping[str, Any], output_names: Sequence[str], ort_options: Any,
                 precision: str, cache_dir: str | None, device_id: int | None = None, *,
                 weights_dir: str | None = None) -> Candidate:
    """The whole model in one ONNX Runtime session with ``name``'s provider (same settings as ours;
    ``device_id``: the GPU of the CUDA and TensorRT providers); external data read from ``weights_dir``."""
    c = Candidate(name)
    problem = provider_problem(name)
    if problem:
        c.reason = problem
        return c
    provider = _PROVIDERS[name]
    entries: list[Any] = [provider]
    if name == "ort-trt":
        opts: dict[str, Any] = {"trt_fp16_enable": precision == "fp16", "trt_bf16_enable": precision == "bf16"}
        if cache_dir:
            opts.update(trt_engine_cache_enable=True, trt_engine_cache_path=cache_dir)
        entries = [(provider, opts), "CUDAExecutionProvider"]
    if device_id is not None:  # ONNX Runtime's TensorRT EP fails on devices other than 0: onnxruntime#21276.
        gpu = {"device_id": str(device_id)}
        entries = [(e[0], {**e[1], **gpu}) if isinstance(e, tuple) else (e, gpu) for e in entries]
    if provider != "CPUExecutionProvider":
        entries.append("CPUExecutionProvider")
    t0 = time.perf_counter()
    try:
        sess = ort_session(model, replace(ort_options, providers=tuple(entries)), f"{name} baseline",
                           weights_dir=weights_dir)
    except SegmentLoadError as e:
        c.reason = str(e)
        return c
    c.setup_s = time.perf_counter() - t0
    if provider not in sess.get_providers():
        c.reason = (f"{provider} failed to initialise; ONNX Runtime fell back to {', '.join(sess.get_providers())} "
                    "(see ONNX Runtime's log: missing CUDA/cuDNN/TensorRT libraries?)")
        return c
    names, data = list(output_names), dict(feeds)
    c.call = lambda: sess.run(names, data)
    c.details["providers"] = list(sess.get_providers())
    if name == "ort-trt":
        c.details["note"] = "TensorRT EP builds its engines during the first run (first_run_ms)"
    return c


# ------------------------------------------------------------------ TensorRT builds

def build_info(plan: Plan, profiles: ProfilesArg, build_options: BuildOptions, cache_dir: str | None, flavor: Flavor,
               progress: Callable[[Any], None] | None = None, built: Any = None) -> dict[str, Any]:
    """Build every TensorRT segment of ``plan`` through an engine cache at ``cache_dir``, then
    again (all cache hits): seconds of each, apart from inference. ``engines`` holds the bytes.
    ``built``: a BuildReport of a build already done (a session on the GPU path builds its own
    engines), so only the cache load is timed. ``progress`` gets the first build's BuildEvents.
    A plan TensorRT cannot build for (plugins with TensorRT-RTX) comes back as ``skipped``."""
    try:
        rewrite = plugin_rewrite(plan, flavor)
    except TrtBackendError as e:
        return {"skipped": str(e)}
    cache = EngineCache(cache_dir) if cache_dir else None
    engines: dict[int, bytes] = {}
    if built is None:
        t0 = time.perf_counter()
        first = build_engines(plan, profiles, build_options, cache, flavor=flavor, progress=progress, rewrite=rewrite)
        report, build_s = first.report, time.perf_counter() - t0
        engines = {k: engine_bytes(e) for k, e in first.engines.items()}
    else:
        report, build_s = built, built.seconds
    info: dict[str, Any] = {
        "flavor": flavor.target, "precision": build_options.precision, "seconds": build_s,
        "cached_load_seconds": None, "all_cache_hits": None,
        "segments": [{"id": s.segment, "nodes": s.nodes, "seconds": s.seconds, "engine_bytes": s.engine_bytes,
                      "cached": s.cached, "precision": s.precision} for s in report.segments],
        "failures": [{"id": f.segment, "stage": f.stage, "message": f.message} for f in report.failures],
        "engines": engines}
    if cache is not None:
        t0 = time.perf_counter()
        again = build_engines(plan, profiles, build_options, cache, flavor=flavor, rewrite=rewrite)
        info["cached_load_seconds"] = time.perf_counter() - t0
        info["all_cache_hits"] = all(s.cached for s in again.report.segments)
        info["engines"] = engines or again.engines
    return info


def whole_model_blocker(plan: Plan) -> str | None:
    """Why one TensorRT engine cannot hold the whole model of ``plan``, or None."""
    if plan.tensorrt is None:
        return "no TensorRT parser decided capability (no TensorRT flavor importable)"
    off = [n for n in plan.nodes if n.verdict != "tensorrt"]
    if not off:
        return None
    n = off[0]
    return (f"the whole model is not TensorRT-supported: {len(off)} of {len(plan.nodes)} node(s) fall back, "
            f"e.g. {n.op_type} '{n.name}' ({n.verdict}: {n.reason or 'no reason given'})")


def trt_whole(sess: Session, capability_plan: Plan, feeds: Mapping[str, Any], build_options: BuildOptions,
              cache_dir: str | None,
              ours_build: dict[str, Any] | None, flavor_choice: str, build: bool = True,
              progress: Callable[[Any], None] | None = None, device_id: int | None = None) -> Candidate:
    """One TensorRT engine for the whole model: built (timed) where a TensorRT flavor imports and
    ``build`` (always where it can run), run where TensorRT executes, with H2D / compute / D2H
    timed by CUDA events."""
    c = Candidate("trt-whole")
    try:
        flavor = load_flavor(flavor_choice)
    except TensorRTUnavailableError as e:
        c.reason = str(e) if str(e).startswith("no TensorRT") else f"no TensorRT flavor importable: {e}"
        return c
    blocker = whole_model_blocker(capability_plan)
    if blocker:
        c.reason = blocker
        return c
    runs_here, why = (False, "no CUDA device") if cuda_device_count() == 0 else tensorrt_status(device_id or 0)
    model = sess.model
    plan = sess.plan if _is_whole(sess.plan) else build_plan(
        model, [Verdict("tensorrt", None)] * len(model.proto.graph.node), capability_plan.tensorrt,
        target=capability_plan.target)
    if len(plan.segments) != 1:
        c.reason = f"the whole model planned as {len(plan.segments)} segments, not one"
        return c
    if ours_build is not None and plan is sess.plan and ours_build.get("engines"):
        c.build = {**ours_build, "note": "the same engine as trt-backend's single segment"}
    elif build or runs_here:
        try:
            c.build = build_info(plan, {plan.segments[0].id: sess.input_profiles}, build_options, cache_dir, flavor,
                                 progress)
        except TrtBackendError as e:
            c.reason = f"TensorRT could not build the whole model: {e}"
            return c
    if c.build is not None and "skipped" in c.build:
        c.reason = f"the whole-model engine cannot be built: {c.build['skipped']}"
        return c
    engines = (c.build or {}).get("engines") or {}
    if c.build is not None and not engines:
        failures = c.build.get("failures") or [{"message": "no engine"}]
        c.reason = f"TensorRT could not build the whole model: {failures[0]['message']}"
        return c
    if not runs_here:
        built = f" (its engine was built in {c.build['seconds']:.2f} s)" if c.build else ""
        c.reason = (f"no CUDA device: a TensorRT engine cannot execute here{built}" if why == "no CUDA device"
                    else f"TensorRT cannot execute here: {why}{built}")
        return c
    _attach_engine_runner(c, plan.segments[0], engines, flavor, sess.input_profiles, feeds, device_id)
    return c


def _is_whole(plan: Plan) -> bool:
    return len(plan.segments) == 1 and plan.segments[0].backend == "tensorrt"


def _attach_engine_runner(c: Candidate, seg: Segment, engines: Mapping[int, bytes], flavor: Flavor,
                          profiles: Sequence[Profile], feeds: Mapping[str, Any], device_id: int | None = None) -> None:
    t0 = time.perf_counter()
    try:
        runner = TensorRTRunner(seg, engines[seg.id], flavor, profiles, device_id=device_id)
        recorder = PhaseRecorder(runner).install()
    except (TrtBackendError, CudaError) as e:
        c.reason = f"the whole-model engine cannot run here: {e}"
        return
    c.setup_s = time.perf_counter() - t0
    inputs = [feeds[n] for n in seg.inputs]
    c.call = lambda: runner.run(inputs)
    c.output_names = tuple(seg.outputs)
    c.recorders.append(recorder)
    c.phases[0] = recorder
    c.cleanup += [runner.close, recorder.close]
    c.details["timing"] = "host + CUDA events (H2D, compute, D2H)"


__all__ = ["BASELINES", "Candidate", "OURS", "build_info", "first_run", "max_abs_diff",
           "ort_baseline", "provider_problem", "trt_whole", "whole_model_blocker"]

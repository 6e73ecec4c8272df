"""Engines for a whole plan: every TensorRT segment prepared in parallel (bounded threads: its
extraction, precision transform, calibration, cache lookup) and built, one build at a time in the
process (see :data:`trt_backend.tensorrt.flavor.tensorrt_lock`), through the engine cache when one
is given; and the fallback loop that sends the nodes of a segment
TensorRT refuses back to ONNX Runtime, re-plans, and builds again (bounded), so the caller always
ends with a plan whose TensorRT segments all have engines."""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Any, Generic, TypeVar

import onnx

from partitioner import DEFAULT_MIN_SEGMENT_SIZE, Plan, Segment, Verdict, build_plan
from partitioner.cost import BoundaryCost
from partitioner.errors import OptionsError
from partitioner.extract import extract
from partitioner.split import weight_bytes
from plugins import default_registry, rewrite_for_engine
from trt_backend import _progress
from trt_backend.engines import head_start
from trt_backend.engines.builder import (
    BuildOptions,
    HeldWeights,
    ProfilesArg,
    ProfileSpec,
    SegmentEngine,
    SegmentProfiles,
    by_reference,
    compile_segment,
    file_as_is,
    key_material,
    segment_ranges,
)
from trt_backend.engines.cache import EngineCache, TimingCacheFile, cache_key
from trt_backend.engines.config import check_build_options
from trt_backend.engines.memory import EngineFile, build_room
from trt_backend.engines.quantize import SegmentQuantizer
from trt_backend.engines.report import (
    BuildEvent,
    BuildProgress,
    BuildReport,
    BuildResult,
    Demotion,
    SegmentFailure,
    SegmentReport,
)
from trt_backend.engines.targets import build_target
from trt_backend.errors import BuilderCrashError, SegmentBuildError
from trt_backend.tensorrt.flavor import Flavor, load_flavor, register_plugins

log = logging.getLogger(__name__)

Memo = dict[str, tuple[bytes | EngineFile, dict[str, Any]]]
Forms = dict[str, onnx.ModelProto]  # segment key -> the form its engine was built from (fresh builds)
SegmentRewrite = Callable[[onnx.ModelProto], onnx.ModelProto]
T = TypeVar("T")


def build_engines(plan: Plan, profiles: ProfilesArg = (), options: BuildOptions | None = None,
                  cache: EngineCache | None = None, *, flavor: Flavor | str = "auto",
                  progress: BuildProgress | None = None, rewrite: SegmentRewrite | None = None,
                  quantizer: SegmentRewrite | None = None) -> BuildResult:
    """Build every TensorRT segment of ``plan``; segments TensorRT refuses are listed in
    ``report.failures`` (the plan is not changed; see :func:`build_with_fallback`).

    ``profiles``: a list of profiles by tensor name (used for every segment), a mapping segment
    id -> profiles (what profile derivation returns), or a callable plan -> that mapping.
    ``rewrite`` transforms each extracted segment before anything else (plugin substitution);
    it must keep node names, which is how failures are traced back to the plan's nodes.
    ``quantizer`` (int8): inserts each segment's Q/DQ; default a
    :class:`~trt_backend.engines.quantize.SegmentQuantizer` on ``options.calibration_data``."""
    options = options or BuildOptions()
    return _build_round(plan, profiles, options, cache, _flavor(flavor), progress, {}, rewrite,
                        _quantizer(plan, options, quantizer))


def build_with_fallback(plan: Plan, profiles: ProfilesArg = (), options: BuildOptions | None = None,
                        cache: EngineCache | None = None, *, flavor: Flavor | str = "auto",
                        progress: BuildProgress | None = None, rewrite: SegmentRewrite | None = None,
                        min_segment_size: int = DEFAULT_MIN_SEGMENT_SIZE, max_rounds: int = 3,
                        boundary_cost: BoundaryCost | None = BoundaryCost(),
                        quantizer: SegmentRewrite | None = None, max_segment_weights: int | None = None,
                        engine_dir: str | None = None) -> BuildResult:
    """Build, demote what TensorRT refuses, re-plan, repeat. For ``max_rounds`` rounds only the
    nodes TensorRT blamed are demoted; a builder failure that blames no node (an internal
    assertion) is narrowed by bisection (:class:`_Narrowing`, at most
    ``options.max_narrowing_builds`` trial builds in all) to the first node in topological order whose prefix fails, and
    only that node is demoted; past the budget such a segment is demoted whole. After ``max_rounds``
    every failing segment is demoted whole. Each round demotes at least one node, so it ends.
    ``max_segment_weights``: re-plans cut TensorRT segments past that many bytes of weights, as
    the plan given was (see :func:`partitioner.build_plan`). ``engine_dir``: engines are
    streamed into files there (:class:`~trt_backend.engines.memory.EngineFile`; an engine cache
    links them in)."""
    if plan.model is None:
        raise OptionsError("this plan was read from JSON without its model; plan the model again")
    options = options or BuildOptions()
    fl = _flavor(flavor)
    check_build_options(options, fl)
    start = time.perf_counter()
    memo: Memo = {}
    pool = _profile_pool(plan, profiles)
    demoted: list[Demotion] = []
    rounds = 0
    quantize = _quantizer(plan, options, quantizer)
    narrowing = _Narrowing(options, fl, quantize, rewrite, options.max_narrowing_builds)
    narrowed_rounds = 0
    while True:
        rounds += 1
        result = _build_round(plan, profiles if rounds == 1 else pool, options, cache, fl, progress, memo, rewrite,
                              quantize, engine_dir)
        if not result.report.failures:
            break
        verdicts = [Verdict(n.verdict, n.reason) for n in plan.nodes]
        narrowed = False
        for failure in result.report.failures:
            seg = plan.segments[failure.segment]
            blamed = failure.nodes if failure.nodes and rounds - narrowed_rounds <= max_rounds else seg.nodes
            reason = f"TensorRT {failure.stage} failed: {failure.message}"
            if not failure.nodes and failure.stage == "build" and narrowing.left > 0:
                found = narrowing.culprit(plan, seg, _segment_profiles(plan, profiles if rounds == 1 else pool, seg))
                if found is not None:
                    blamed = (found,)
                    reason += (f" (narrowed by bisection: the segment's nodes before it build; "
                               f"{narrowing.builds} trial build(s) so far)")
                    # The failure's text was logged once, when it came (see _collect).
                    log.warning("segment %d: the build failure names no node; bisection blames node %d '%s' (%s): "
                                "it goes to ONNX Runtime and the rest is planned again (the partition's rules "
                                "decide what stays TensorRT)", seg.id, found, plan.nodes[found].name,
                                plan.nodes[found].op_type)
                    narrowed = True
            for i in blamed:
                verdicts[i] = Verdict("onnxruntime", reason)
                node = plan.nodes[i]
                demoted.append(Demotion(i, node.name, node.op_type, reason, rounds, seg.id))
            log.info("segment %d: %d node(s) go to ONNX Runtime (round %d)", seg.id, len(blamed), rounds)
        _progress.progress("round %d: %d segment(s) refused by TensorRT, their nodes go to ONNX Runtime; planning "
                           "again", rounds, len(result.report.failures))
        narrowed_rounds += narrowed  # A round that narrowed does not use up a round: the build budget bounds it.
        plan = build_plan(plan.model, verdicts, plan.tensorrt, min_segment_size, target=plan.target,
                          cost=boundary_cost, max_segment_weights=max_segment_weights)
    report = result.report
    report.demoted, report.rounds, report.seconds = demoted, rounds, time.perf_counter() - start
    report.max_segment_weights = max_segment_weights
    return BuildResult(plan, result.engines, report, result.models)


class _Narrowing:
    """Bisection of a segment TensorRT's builder refuses without naming a node: the longest
    prefix of its nodes, in topological order, that builds is found by binary search (each trial
    a real build of the prefix, whose inputs are the segment's, so the segment's profiles apply;
    results kept by node set), and the node after it is the culprit. Its later nodes are left
    to the next round, which builds them again as segments of their own (and narrows again if
    they fail). ``left`` trial builds remain of the budget; each is logged."""

    def __init__(self, options: BuildOptions, flavor: Flavor, quantize: SegmentRewrite | None,
                 rewrite: SegmentRewrite | None, budget: int) -> None:
        self.options, self.flavor, self.quantize, self.rewrite = options, flavor, quantize, rewrite
        self.left = budget
        self.builds = 0
        self._tried: dict[tuple[int, ...], bool] = {}

    def culprit(self, plan: Plan, seg: Segment, profiles: Sequence[ProfileSpec]) -> int | None:
        """The node of ``seg`` to demote, or None where bisection cannot tell (the budget ran
        out, no prefix builds, not even of one node, while a build of that node's inputs passed
        through fails too, as when the build itself cannot succeed, or the first failing prefix
        ends in a copied constant). Where only the first node's own build fails, it is blamed."""
        assert plan.model is not None
        order = [i for i in plan.model.index.ordered(set(seg.members))]
        lo, hi = 0, len(order)  # prefix of lo nodes builds (0: trivially), of hi fails (the segment)
        while hi - lo > 1:
            if self.left <= 0:
                return None
            mid = (lo + hi) // 2
            if self._builds(plan, order[:mid], profiles, seg.id):
                lo = mid
            else:
                hi = mid
        if lo == 0 and (self.left <= 0 or not self._passes_through(plan, order[0], profiles, seg.id)):
            return None  # Not even its first node builds, nor its inputs alone: a failure of the build, not of a node.
        node = order[hi - 1]
        return node if node in seg.nodes else None

    def _passes_through(self, plan: Plan, first: int, profiles: Sequence[ProfileSpec], segment: int) -> bool:
        """Whether a network of nothing but node ``first``'s inputs passed through (Identity), with
        the same options and profiles, builds: where it does, the builder works and the node is to
        blame (an If holding an LSTM first in its segment; a quantized scalar before a Mul)."""
        assert plan.model is not None
        model = extract(plan.model, [first], name=f"segment_{segment}_inputs")
        graph = model.graph
        if not graph.input:
            return False
        del graph.node[:], graph.output[:], graph.initializer[:], graph.value_info[:]
        for k, vi in enumerate(list(graph.input)):
            graph.node.append(onnx.helper.make_node("Identity", [vi.name], [f"passed_{k}"], name=f"pass_{k}"))
            out = graph.output.add()
            out.CopyFrom(vi)
            out.name = f"passed_{k}"
        return self._trial(model, profiles, plan.model.base_dir, f"the inputs of segment {segment}'s first node, "
                           "passed through,", quantize=None)

    def _builds(self, plan: Plan, nodes: Sequence[int], profiles: Sequence[ProfileSpec], segment: int) -> bool:
        key = tuple(sorted(nodes))
        if key in self._tried:
            return self._tried[key]
        assert plan.model is not None
        model = extract(plan.model, nodes, name=f"segment_{segment}_prefix_{len(nodes)}")
        if self.rewrite is not None:
            model = self.rewrite(model)
        ok = self._trial(model, profiles, plan.model.base_dir, f"the first {len(nodes)} node(s) of segment {segment}",
                         quantize=self.quantize)
        self._tried[key] = ok
        return ok

    def _trial(self, model: onnx.ModelProto, profiles: Sequence[ProfileSpec], weights_dir: str | None, what: str,
               quantize: SegmentRewrite | None) -> bool:
        """One trial build of ``model`` (``what`` it is, in the log), counted against the budget."""
        self.left -= 1
        self.builds += 1
        try:
            compile_segment(model, segment_ranges(model, profiles), self.options, self.flavor, None, quantize,
                            weights_dir=weights_dir)
            ok = True
        except SegmentBuildError as e:
            log.debug("bisection: %s do not build: %s", what, e)
            ok = False
        log.info("bisection build %d: %s %s", self.builds, what, "build" if ok else "fail")
        return ok


class PlanMemo(Generic[T]):
    """``make(plan)`` once per plan. :func:`build_with_fallback` asks for the profiles of every
    plan it re-plans into; its callers derive them (a calibration, a Session) once per plan."""

    def __init__(self, make: Callable[[Plan], T], known: tuple[Plan, T] | None = None) -> None:
        self._make = make
        self._done: dict[int, tuple[Plan, T]] = {}  # The plan is kept: its id stays its own.
        if known is not None:
            self._done[id(known[0])] = known

    def __call__(self, plan: Plan) -> T:
        hit = self._done.get(id(plan))
        if hit is None:
            hit = self._done[id(plan)] = (plan, self._make(plan))
        return hit[1]


def _quantizer(plan: Plan, options: BuildOptions, given: SegmentRewrite | None) -> SegmentRewrite | None:
    if options.precision not in ("int8", "auto") or not options.calibration_data or given is not None:
        return given
    if plan.model is None:
        raise OptionsError("this plan was read from JSON without its model; int8 calibration needs the model")
    return SegmentQuantizer(plan.model, str(options.calibration_data), options.calibration_method,
                            keep_fp32_ops=options.keep_fp32_ops)


def _flavor(flavor: Flavor | str) -> Flavor:
    return flavor if isinstance(flavor, Flavor) else load_flavor(flavor)


def _segment_profiles(plan: Plan, profiles: ProfilesArg, seg: Segment) -> Sequence[ProfileSpec]:
    if callable(profiles):
        profiles = profiles(plan)
    return _pick(profiles, seg)


def _pick(profiles: Any, seg: Segment) -> Sequence[ProfileSpec]:
    if isinstance(profiles, Mapping):
        if profiles and not all(isinstance(k, int) for k in profiles):
            raise OptionsError("profiles: pass a list of profiles (tensor name -> shapes), or a mapping from "
                               "segment id to such a list")
        return list(profiles.get(seg.id, ()))
    return list(profiles)


def _profile_pool(plan: Plan, profiles: ProfilesArg) -> Callable[[Plan], SegmentProfiles] | list[ProfileSpec]:
    """Profiles by tensor name, for segments of re-planned plans (their ids and inputs change)."""
    if callable(profiles):
        return profiles  # type: ignore[return-value]
    if not isinstance(profiles, Mapping):
        return list(profiles)
    pool: list[ProfileSpec] = []
    for seg in plan.tensorrt_segments():
        for k, profile in enumerate(_segment_profiles(plan, profiles, seg)):
            while len(pool) <= k:
                pool.append({})
            pool[k] = {**pool[k], **profile}
    return pool


def _build_round(plan: Plan, profiles: Any, options: BuildOptions, cache: EngineCache | None, flavor: Flavor,
                 progress: BuildProgress | None, memo: Memo, rewrite: SegmentRewrite | None = None,
                 quantize: SegmentRewrite | None = None, engine_dir: str | None = None) -> BuildResult:
    start = time.perf_counter()
    segments = plan.tensorrt_segments()
    report = BuildReport(flavor.target)
    engines: dict[int, bytes | EngineFile] = {}
    forms: Forms = {}
    timing = _timing_cache(options, flavor)
    target = build_target(flavor, options)
    if callable(profiles):
        profiles = profiles(plan)  # once per round: deriving profiles may run the model
    weights_dir = plan.model.base_dir if plan.model is not None else None
    # segments built as they are (fp32) hold the model's large weights by reference, not copies
    held = ({t.name: t for t in plan.model.proto.graph.initializer}
            if plan.model is not None and options.precision in ("fp32", "tf32") and quantize is None else None)
    jobs = []
    for seg in segments:
        model = plan.extract(seg.id, by_reference(held) if held is not None else None)
        if rewrite is not None:
            model = rewrite(model)
        ranges = segment_ranges(model, _pick(profiles, seg))
        key = cache_key(key_material(model, ranges, options, flavor, target, weights_dir=weights_dir,
                                     with_weights=cache is not None, weights=held))  # No cache: this build's memo.
        jobs.append((seg, model, ranges, key))
    head = None
    model_file = None  # the model's file, where the one segment is the whole of it built as it is
    if len(jobs) == 1 and len(plan.segments) == 1 and plan.model is not None and rewrite is None and quantize is None:
        seg, model, ranges, _ = jobs[0]
        # (not within a memory budget: the file is read whole, where the segment's weights go to
        # TensorRT by address)
        model_file = file_as_is(plan.model, model) if options.max_build_memory is None else None
        head = head_start.claim(plan.model, seg, model, ranges, options, flavor, model_file)
        crash = head_start.crash_of(plan.model) \
            if head is None and model_file is not None and options.precision in ("fp32", "tf32") else None
        if crash is not None:  # (the build here hands TensorRT the same file: it would crash this process)
            ops = sorted({n.op_type for n in plan.model.proto.graph.node})
            raise BuilderCrashError(f"{plan.model.source}: {crash}; building it here would end this process the same "
                                    f"way, so nothing was built. Keep the op at fault from TensorRT with --exclude-ops "
                                    f"(the model's ops: {', '.join(ops)}), or report it to NVIDIA with the model")
    workers = max(1, min(_workers(plan, segments, options), len(jobs)))
    if jobs:
        _progress.progress("building %d engine(s) with %s, one at a time (%d segment(s) prepared at once)",
                           len(jobs), flavor.target, workers)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures: dict[Future[tuple[bytes | EngineFile, dict[str, Any], bool]], tuple[Segment, str]] = {}
        for seg, model, ranges, key in jobs:
            path = os.path.join(engine_dir, f"{key}.engine") if engine_dir is not None else None
            fut = pool.submit(_one, model, ranges, key, options, flavor, cache, memo, timing, weights_dir, quantize,
                              held, forms, path, head, model_file)
            futures[fut] = (seg, key)
        pending = set(futures)
        try:
            _drain(futures, pending, plan, report, engines, progress)
        except BaseException:
            for fut in pending:
                fut.cancel()
            raise
        finally:
            if head is not None:  # Its files go, also where the engine came from the cache instead.
                head.remove()
    if timing is not None:
        timing.save()
    report.segments.sort(key=lambda r: r.segment)
    report.failures.sort(key=lambda f: f.segment)
    report.seconds = time.perf_counter() - start
    built = {seg.id: forms[key] for seg, _, _, key in jobs if key in forms and seg.id in engines}
    return BuildResult(plan, engines, report, built)


def _workers(plan: Plan, segments: Sequence[Segment], options: BuildOptions) -> int:
    """Builds at once: the option's, fewer where the memory left (the budget, else what is
    available) holds fewer builds of the largest segment (see :mod:`trt_backend.engines.memory`)."""
    workers = options.workers()
    if workers == 1 or len(segments) < 2 or plan.model is None:
        return workers
    room = build_room(options.max_build_memory, options.workspace_bytes)
    if room is None:
        return workers
    largest = max(weight_bytes(plan.model.index, s.members) for s in segments)
    return room.concurrent(largest, workers)


def _drain(futures: dict[Future[Any], tuple[Segment, str]], pending: set[Future[Any]], plan: Plan,
           report: BuildReport, engines: dict[int, bytes | EngineFile], progress: BuildProgress | None) -> None:
    """Collect finished builds as they come (``pending`` shrinks in place), reporting progress."""
    finished = 0
    while pending:
        done, _ = wait(pending, return_when=FIRST_EXCEPTION)
        pending -= done
        for fut in done:
            seg, key = futures[fut]
            _collect(fut, seg, key, plan, report, engines)
            finished += 1
            row = next((r for r in report.segments if r.segment == seg.id), None)
            status = "failed" if row is None else "cached" if row.cached else "built"
            _progress.progress("engine %d/%d: segment %d %s in %.2f s", finished, len(futures), seg.id,
                               "loaded from the cache" if status == "cached" else status, row.seconds if row else 0.0)
            if progress is not None:
                progress(BuildEvent(seg.id, status, finished, len(futures), row.seconds if row else 0.0))


def _one(model: Any, ranges: Any, key: str, options: BuildOptions, flavor: Flavor, cache: EngineCache | None,
         memo: Memo, timing: TimingCacheFile | None, weights_dir: str | None = None,
         quantize: SegmentRewrite | None = None, held: HeldWeights | None = None,
         forms: Forms | None = None, engine_path: str | None = None,
         head: head_start.HeadStart | None = None, model_file: str | None = None
         ) -> tuple[bytes | EngineFile, dict[str, Any], bool]:
    """(engine, metadata, came from a cache) for one segment; SegmentBuildError propagates.
    ``engine_path``: stream the engine into that file. ``head``: the
    segment's engine, already built from the model's file (:mod:`trt_backend.engines.head_start`);
    ``model_file``: the file the segment is the whole of, built from it (see
    :func:`~trt_backend.engines.builder.file_as_is`)."""
    if key in memo:  # built in an earlier round of the fallback loop
        return memo[key][0], {**memo[key][1], "seconds": 0.0}, True
    t0 = time.perf_counter()

    def build() -> tuple[bytes | EngineFile, dict[str, Any]]:
        if head is not None:  # Built from the file while the model was planned: the same network, options, profiles.
            log.info("%s: engine built from the model file as it is, while the model was planned", head.path)
            built = SegmentEngine(head.take(engine_path), head.layers, head.seconds, options.precision, (), model)
        else:
            # (its TensorRT part one build at a time: see tensorrt_lock)
            built = compile_segment(model, ranges, options, flavor, timing, quantize, weights_dir=weights_dir,
                                    weights=held, engine_path=engine_path, model_file=model_file)
        if forms is not None and built.model is not None:
            forms[key] = built.model
        return built.engine, {"layers": built.layers, "build_seconds": built.seconds, "precision": built.precision,
                              "pinned": list(built.pinned)}

    if cache is None:
        engine, meta = build()
        hit = False
    else:
        entry, hit = cache.get_or_build(key, build, expect={"flavor": flavor.name, "version": flavor.version},
                                        host_code=options.host_code)
        engine, meta = entry.engine, dict(entry.manifest)
    meta = {**meta, "seconds": time.perf_counter() - t0 if hit else meta.get("build_seconds", 0.0)}
    memo[key] = (engine, meta)
    return engine, meta, hit


def _collect(fut: Future[tuple[bytes | EngineFile, dict[str, Any], bool]], seg: Segment, key: str, plan: Plan,
             report: BuildReport, engines: dict[int, bytes | EngineFile]) -> None:
    try:
        engine, meta, hit = fut.result()
    except SegmentBuildError as e:
        members = {plan.nodes[i].name: i for i in seg.members}  # a copy blamed demotes its original
        nodes = tuple(sorted(members[n] for n in e.names if n in members))  # by name: rewrites may add nodes
        report.failures.append(SegmentFailure(seg.id, e.stage, nodes, e.message))
        log.warning("segment %d: TensorRT %s failed: %s", seg.id, e.stage, e.message)
        return
    engines[seg.id] = engine
    report.segments.append(SegmentReport(seg.id, len(seg.nodes), float(meta["seconds"]), len(engine),
                                         int(meta.get("layers", 0)), hit, str(meta.get("precision", "")), key,
                                         tuple(meta.get("pinned") or ())))
    log.info("segment %d of %s: %s, %d bytes, %.2f s", seg.id, plan.model_name, "from cache" if hit else "built",
             len(engine), meta["seconds"])


def _timing_cache(options: BuildOptions, flavor: Flavor) -> TimingCacheFile | None:
    if options.timing_cache is None:
        return None
    if flavor.is_rtx:
        log.warning("timing cache %s ignored: timing caches are no-ops in TensorRT-RTX", options.timing_cache)
        return None
    if not flavor.has("IBuilderConfig.create_timing_cache"):
        log.warning("%s has no timing cache API; %s ignored", flavor.target, options.timing_cache)
        return None
    return TimingCacheFile(options.timing_cache)


def plugin_rewrite(plan: Plan, flavor: Flavor | str = "auto") -> SegmentRewrite | None:
    """The segment rewrite that turns the plan's plugin nodes into plugin ops for the builder
    (registering the plugins with TensorRT first), or None when the plan has none."""
    claimed = {n.name: n.verdict[len("plugin:"):] for n in plan.nodes if n.verdict.startswith("plugin:")}
    if not claimed:
        return None
    flv = _flavor(flavor)
    if flv.is_rtx:
        raise OptionsError(f"the plan puts {len(claimed)} node(s) on plugins, which {flv.target} cannot run; "
                           "plan with --target tensorrt_rtx (or --no-plugins), or build with full TensorRT")

    registry = default_registry()
    register_plugins(flv)

    def rewrite(segment: onnx.ModelProto) -> onnx.ModelProto:
        return rewrite_for_engine(segment, registry, claimed)

    return rewrite



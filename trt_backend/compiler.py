"""The one compile path: plan a model, derive every TensorRT segment's profiles, decide each
segment's precision (fp16/bf16 casts, int8 Q/DQ, the auto plan's choice), build the engines with
the demote-and-replan loop, and return what was (or, without a build, would be) built.

Everything that turns a model into something to run goes through :func:`compile`: a
:class:`~trt_backend.session.session.Session` made from a model, ``trt_backend.build`` (the build
folder), ``export-triton`` and ``serve`` from a model, the accuracy comparison and the precision
search. The result, a :class:`Compiled`, holds per TensorRT segment the very model its engine is
built from; emulation runs that model, and a build folder stores it."""
from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from partitioner import Model, Plan, Verdict, build_plan
from partitioner.cost import si_bytes
from partitioner.errors import OptionsError
from partitioner.model import ModelSource
from partitioner.split import weight_bytes
from trt_backend.artifacts.plan_cache import PlanEntry, plan_entry
from trt_backend.artifacts.saved import check_saved, read_saved, saved_segment_profiles
from trt_backend.engines.builder import BuildOptions, built_form, prepare_segment
from trt_backend.engines.cache import EngineCache
from trt_backend.engines.calibration import data_sha256
from trt_backend.engines.fallback import PlanMemo, build_with_fallback, plugin_rewrite
from trt_backend.engines.memory import EngineFile, build_room, engine_bytes, process_memory
from trt_backend.engines.options import require_calibration
from trt_backend.engines.quantize import SegmentQuantizer
from trt_backend.engines.report import BuildProgress, BuildReport, BuiltSegment
from trt_backend.errors import ProfileError, TensorRTUnavailableError
from trt_backend.gpu.device import check_device, use_device
from trt_backend.ort.probe import opt_shapes, run_failure
from trt_backend.ort.sessions import tapped_session
from trt_backend.ort.threads import use_global_thread_pool
from trt_backend.ort.values import memory_limit
from trt_backend.planning import load_normalized as load_for_planning
from trt_backend.planning import plan_for, sized_options
from trt_backend.profiles import (
    NodeArg,
    Profile,
    check_profile_names,
    complete_profiles,
    derive_profiles,
    graph_inputs,
    node_arg,
    normalize_profiles,
    profiles_from_json,
    profiles_to_json,
    shape_tensor_inputs,
)
from trt_backend.profiles.bounds import DimBounds, valued_tensors
from trt_backend.profiles.derive import Runner
from trt_backend.profiles.given import profile_shapes, profiles_from_feeds
from trt_backend.profiles.node_arg import named_shapes
from trt_backend.session.options import SessionOptions
from trt_backend.tensorrt.flavor import Flavor, load_flavor

log = logging.getLogger(__name__)


@dataclass
class Compiled:
    """What :func:`compile` made: the final plan (after demotions), the input profiles, every
    TensorRT segment as built (:class:`BuiltSegment`), the build report when engines were built,
    and the digest of the calibration data int8 segments were calibrated on."""

    plan: Plan
    input_profiles: list[Profile]
    segments: dict[int, BuiltSegment]
    options: SessionOptions
    report: BuildReport | None = None
    calibration: dict[str, Any] | None = None
    quantizers: dict[tuple[str, str, str], SegmentQuantizer] = field(default_factory=dict, repr=False)

    @property
    def model(self) -> Model:
        assert self.plan.model is not None
        return self.plan.model

    @property
    def segment_profiles(self) -> dict[int, list[Profile]]:
        return {k: s.profiles for k, s in self.segments.items()}

    @property
    def precisions(self) -> dict[int, str]:
        """Precision of each TensorRT segment, by id."""
        return {k: s.precision for k, s in self.segments.items()}

    @property
    def engines(self) -> dict[int, bytes]:
        """Engine bytes by segment id (read from their files where they were streamed to one)."""
        return {k: engine_bytes(s.engine) for k, s in self.segments.items() if s.engine is not None}

    def inputs(self) -> list[NodeArg]:
        return graph_inputs(self.model.proto.graph)

    def outputs(self) -> list[NodeArg]:
        graph, described = self.model.proto.graph, self.model.output_types
        return [node_arg(vi.name, described[k] if len(described) == len(graph.output) else vi.type)
                for k, vi in enumerate(graph.output)]

    def precision_summary(self) -> str:
        """One word when every TensorRT segment computes in the same precision, else per segment."""
        found = sorted(set(self.precisions.values()))
        if not found:
            return "fp32"
        if len(found) == 1:
            return found[0]
        return ", ".join(f"segment {k} {p}" for k, p in sorted(self.precisions.items()))

    def quantizer(self, build: BuildOptions | None = None) -> SegmentQuantizer:
        """The int8 quantizer of the model on ``build``'s calibration data (default the options'):
        segment inputs calibrated as the whole model computes them, in batches of the first
        profile's opt batch. One per data source and method, kept."""
        b = build if build is not None else self.options.build
        return _quantizer(self.model, b, self.input_profiles, self.options, self.quantizers)


def check_feeds(calibration_feeds: Any) -> None:
    """OptionsError unless ``calibration_feeds`` is a list (or tuple) of samples, each a mapping of
    input name -> array (a sample's names and values are held to the model's by its runs)."""
    if isinstance(calibration_feeds, Mapping):
        raise OptionsError("calibration_feeds must be a list of samples, each a mapping of input name -> array, got "
                           "one mapping (give [feeds] for one sample)")
    if not isinstance(calibration_feeds, (list, tuple)):
        raise OptionsError("calibration_feeds must be a list of samples, each a mapping of input name -> array, got "
                           f"{type(calibration_feeds).__name__}")
    wrong = next((f for f in calibration_feeds if not isinstance(f, Mapping)), None)
    if wrong is not None:
        raise OptionsError("calibration_feeds must be a list of samples, each a mapping of input name -> array, got "
                           f"a sample of type {type(wrong).__name__}")


def compile_as_built(model: ModelSource | Model | Plan, profiles: Sequence[Mapping[str, Any]] | None,
                     options: SessionOptions, progress: BuildProgress | None = None,
                     calibration_feeds: Sequence[Mapping[str, Any]] = ()) -> ModelSource | Model | Plan | Compiled:
    """``model`` (a model, or its plan) compiled as ``trt-backend build`` compiles it, its TensorRT
    engines built, where a TensorRT builder is here (TensorRT-RTX builds on the CPU): what
    TensorRT's builder refuses is demoted as a build demotes it, and an emulation runs the forms
    the engines were built from. What ``compare`` judges and ``bench`` times of a model is then
    what a build of it holds (a segment the builder refuses was run as if it had built). Else
    ``model`` as it is. A GPU the options name is checked and made current first, as a Session
    does before it builds; a model file's plan comes from the plan cache where one is kept.
    ``calibration_feeds``: real inputs to derive profiles with (the samples a command runs)."""
    if isinstance(model, Plan) and not model.tensorrt_segments():
        return model
    try:
        load_flavor(options.flavor)
    except TensorRTUnavailableError:
        return model
    if options.device_id is not None and options.emulate is not True:
        check_device(options.device_id)
        use_device(options.device_id)
    return compile(model, profiles, options, build=True, progress=progress, calibration_feeds=calibration_feeds)


def compile(model: ModelSource | Model | Plan, profiles: Sequence[Mapping[str, Any]] | None = None,
            options: SessionOptions | None = None, *, build: bool = True,
            saved_plan: Mapping[str, Any] | str | os.PathLike[str] | None = None,
            calibration_feeds: Sequence[Mapping[str, Any]] = (), engines: Mapping[int, bytes] | None = None,
            progress: BuildProgress | None = None, engine_dir: str | None = None,
            plan_entry: PlanEntry | None = None, before_build: Callable[[Plan], None] | None = None) -> Compiled:
    """Plan ``model`` (a path, a ModelProto, a loaded Model or a Plan), derive the TensorRT
    segments' profiles (``profiles``: the user's, for model inputs; ``saved_plan``: a plan JSON
    whose derived profiles are reused after checking the model still plans the same;
    ``calibration_feeds``: real inputs to derive with), and with ``build`` build every engine
    (``engines`` by segment id: ones already built), demoting what TensorRT refuses and planning
    again. Without ``build``, each segment is put in the form it would be built in (the TensorRT
    parser still decides which nodes stay fp32 in a reduced precision, where one is installed).
    Building, TensorRT segments whose build would not fit the memory budget
    (``options.build.max_build_memory``, default what is available) are cut into pieces that do
    (:mod:`trt_backend.engines.memory`); ``engine_dir``: engines are streamed into files there
    instead of being held in memory (without an engine cache). With ``options.cache_dir`` and a
    model file, the plan and the derived profiles are taken from the plan cache where they were
    kept (:mod:`trt_backend.artifacts.plan_cache`), and kept there otherwise; ``plan_entry``: the
    entry of a model the caller loaded from its file (or took from that entry) itself.
    ``before_build``: called with the plan whose engines are about to be built (once its profiles
    are derived), so a caller can do its own work on that plan while they build (a build folder
    writes its files while a head start's engine builds beside it, see
    :mod:`trt_backend.engines.head_start`); the plan a build ends with may be another (segments
    TensorRT refused are demoted)."""
    opts = options if options is not None else SessionOptions()
    if not isinstance(opts, SessionOptions):
        raise OptionsError(f"options must be a SessionOptions, got {type(opts).__name__}")
    check_feeds(calibration_feeds)
    if profiles is None and calibration_feeds:  # (one spanning the samples' shapes, as the command line makes)
        profiles = profiles_from_feeds(calibration_feeds)
    entry = plan_entry if plan_entry is not None else plan_entry_for(model, profiles, opts)
    if entry is not None and isinstance(model, (str, os.PathLike)):
        model = entry.load() or model
    if isinstance(model, Plan) and model.cached and model.model is not None:
        check_profile_names(profiles, model.model.proto.graph)
    elif not isinstance(model, Plan):  # Types the model does not give are learned at the profiles' shapes.
        model = load_for_planning(model, profile_shapes(profiles), opts.partition.qdq_rewrite)
        check_profile_names(profiles, model.proto.graph)  # Before planning, which can take long.
    elif model.model is not None and profiles is not None:
        load_for_planning(model.model, profile_shapes(profiles))
    loaded = model.model if isinstance(model, Plan) else model
    if loaded is not None and profiles:  # Boundaries priced at the profiles' shapes, in every plan made here.
        opts = dataclasses.replace(opts, partition=sized_options(opts.partition, loaded, profile_shapes(profiles)))
    plan = model if isinstance(model, Plan) else plan_for(model, opts.partition, flavor=opts.flavor,
                                                          oracle=opts.oracle, isolate=opts.isolate_parser)
    if plan.model is None:
        raise OptionsError("this plan was read from JSON without its model; pass the model instead")
    if entry is not None and not plan.cached:
        entry.store(plan)
    planned = plan
    max_weights = _weight_limit(opts, plan) if build else None
    if max_weights is not None:
        plan = _cut_for_memory(plan, opts, max_weights)
    the_model = plan.model
    assert the_model is not None
    _check_precision_plan(opts.build, the_model)
    graph = the_model.proto.graph
    inputs = graph_inputs(graph)
    trt = plan.tensorrt_segments()
    extra = {n for s in trt for n in s.inputs} - {a.name for a in inputs}
    user, overrides = normalize_profiles(profiles, inputs, extra)
    saved = read_saved(saved_plan) if saved_plan is not None else None
    if saved is not None:
        check_saved(saved, plan, user)
        user = user or profiles_from_json(saved.get("input_profiles", []))
    input_profiles = complete_profiles(user, inputs, required=bool(trt))
    if opts.ort.shares_global_pool:  # once the inputs are known good; before any session of ours
        use_global_thread_pool(opts.ort.intra_op_threads, opts.ort.inter_op_threads)

    def calibration_runner(names: Sequence[str]) -> Runner:
        run = tapped_session(the_model, names, opts.ort_for(1), f"calibration model of {the_model.source}")

        def calibration_run(wanted: Sequence[str], feeds: Mapping[str, Any]) -> list[Any]:
            env = run(feeds, wanted)  # one run of the whole model for every tensor wanted
            return [env[n] for n in wanted]

        return calibration_run

    def derive(p: Plan) -> dict[int, list[Profile]]:
        with memory_limit(opts.max_memory):  # calibration data held to the session's limit
            return derive_profiles(the_model, p, inputs, input_profiles, overrides, calibration_runner,
                                   opts.calibration_seed, list(calibration_feeds))

    if saved is not None:
        derived = saved_segment_profiles(saved)
    else:  # Profiles derived before for this plan from the same input profiles are kept with it.
        keep = entry if entry is not None and plan is planned and not calibration_feeds else None
        derivation = {"inputs": profiles_to_json(input_profiles), "overrides": profiles_to_json(overrides),
                      "seed": opts.calibration_seed}
        found = keep.profiles(derivation, plan) if keep is not None else None
        derived = found if found is not None else derive(plan)
        if keep is not None and found is None:
            keep.store_profiles(derivation, derived)
    quantizers: dict[tuple[str, str, str], SegmentQuantizer] = {}
    quantizer = _quantizer(the_model, opts.build, input_profiles, opts, quantizers) if _uses_int8(opts.build) else None
    given: dict[int, bytes | EngineFile] = dict(engines or {})
    report: BuildReport | None = None
    fresh: dict[int, onnx.ModelProto] = {}
    flavor: Flavor | None = None
    if build and trt and any(s.id not in given for s in trt):
        flavor = load_flavor(opts.flavor if opts.flavor != "none" else "auto")
        profiles_of = PlanMemo(derive, (plan, derived))
        cache = EngineCache(opts.cache_dir, allow_host_code=opts.allow_host_code) if opts.cache_dir else None
        rewrite = plugin_rewrite(plan, flavor)
        # (before the build: where a head start builds the model's file, beside it)
        _check_runs_at_max_shapes(the_model, profiles, opts)
        if before_build is not None:
            before_build(plan)
        result = build_with_fallback(plan, profiles_of, opts.build, cache, flavor=flavor,
                                     min_segment_size=opts.partition.min_segment_size,
                                     boundary_cost=opts.partition.boundary_cost, rewrite=rewrite,
                                     progress=progress, quantizer=quantizer, max_segment_weights=max_weights,
                                     engine_dir=engine_dir)
        plan, derived, given, report = result.plan, profiles_of(result.plan), dict(result.engines), result.report
        _check_runs_where_refused(the_model, profiles, report, opts)
        if rewrite is None:  # A plugin rewrite's form runs only in TensorRT: made again below, without it.
            fresh = dict(result.models)
    elif trt and opts.build.precision not in ("fp32", "tf32"):
        flavor = _flavor_if_any(opts)
    rows = {r.segment: r for r in report.segments} if report is not None else {}
    weights_dir = the_model.base_dir
    segments: dict[int, BuiltSegment] = {}
    for seg in plan.tensorrt_segments():
        row = rows.get(seg.id)
        if seg.id in fresh:  # (the form the build made: no second copy of its weights)
            form, precision, pinned = fresh[seg.id], row.precision if row else "fp32", row.pinned if row else ()
        elif row is not None:
            precision, pinned = row.precision, row.pinned
            form = built_form(plan.extract(seg.id), opts.build, precision, pinned, quantizer, weights_dir)
        else:
            prepared = prepare_segment(plan.extract(seg.id), opts.build, flavor, quantizer, weights_dir)
            form, precision, pinned = prepared.model, prepared.precision, prepared.pinned
        segments[seg.id] = BuiltSegment(seg, form, precision, tuple(pinned), derived.get(seg.id, []),
                                        frozenset(shape_tensor_inputs(the_model, seg)), given.get(seg.id))
    calibration = None
    if quantizer is not None and any(s.precision == "int8" for s in segments.values()):
        calibration = {"source": str(opts.build.calibration_data), "method": opts.build.calibration_method,
                       "sha256": data_sha256(str(opts.build.calibration_data))}
    return Compiled(plan, input_profiles, segments, opts, report, calibration, quantizers)


def plan_entry_for(model: ModelSource | Model | Plan, profiles: Sequence[Mapping[str, Any]] | None,
                options: SessionOptions) -> PlanEntry | None:
    """The plan cache entry under ``options.cache_dir`` of planning ``model``: for a model given by
    the path of a file and no oracle of the caller's; else None."""
    if not options.cache_dir or options.oracle is not None or not isinstance(model, (str, os.PathLike)) \
            or not os.path.isfile(model):
        return None
    return plan_entry(options.cache_dir, os.fspath(model), options.partition, options.flavor, profile_shapes(profiles))


def _weight_limit(options: SessionOptions, plan: Plan) -> int | None:
    """The most weights a TensorRT segment may hold to build within the memory budget, or None
    where no segment needs cutting (none past the limit, or no limit known)."""
    if plan.model is None or not plan.tensorrt_segments():
        return None
    room = build_room(options.build.max_build_memory, options.build.workspace_bytes)
    if room is None:
        return None
    limit = room.max_segment_weights
    index = plan.model.index
    if options.build.max_build_memory is None and all(weight_bytes(index, s.members) <= limit
                                                      for s in plan.tensorrt_segments()):
        return None  # No budget given and everything fits what is free: plans stay as planned.
    return limit


def _check_runs_at_max_shapes(model: Model, profiles: Sequence[Mapping[str, Any]] | None,
                              options: SessionOptions) -> None:
    """A ProfileError where the model cannot run at the max shapes of a profile a build is for,
    told by one run of the whole model in ONNX Runtime there: where the graph's position ids may
    reach past their table (:meth:`DimBounds.table_overruns`: GPT-2 given more positions than it
    has), or where indices made from shapes pick from rows the bounds cannot tell
    (:meth:`DimBounds.unproven_gathers`: GPT-2 given a mask shorter than its cache and tokens). A
    folder built for such shapes would fail at every run. Where an If or Loop chooses on input
    values, a failure on random inputs is a warning (real inputs may take another branch), but for
    positions past a table; so is a failure at a node other than the Gathers whose indices the
    bounds cannot size (random values the model does not take). Not run where the model's weights
    would not fit twice (see :func:`_room_to_run`)."""
    shapes = profile_shapes(profiles)
    valued = valued_tensors(model)
    bounds = [DimBounds(model, top) for top in shapes[2::3]]
    overruns = [b.table_overruns() for b in bounds]
    unproven = [b.unproven_gathers(valued) for b in bounds]
    if (not any(overruns) and not any(unproven)) or not _room_to_run(model, options):
        return
    chooser = _branch_on_values(model, valued)
    for k, top in enumerate(shapes[2::3]):
        if not (overruns[k] or unproven[k]):
            continue
        why = run_failure(model, top)
        if why is None:
            continue
        if overruns[k]:
            name, rows, index = overruns[k][0]
            raise ProfileError(f"{model.source}: the model cannot run at the max shapes of profile {k} "
                               f"({named_shapes(top)}): Gather '{name}' indexes {rows} row(s) up to {index} there, "
                               f"and ONNX Runtime fails there: {why}")
        failed = next((name for name in unproven[k] if f"'{name}'" in why), None)
        if failed is not None and chooser is None:
            raise ProfileError(f"{model.source}: the model cannot run at the max shapes of profile {k} "
                               f"({named_shapes(top)}), where Gather '{failed}' picks rows by indices made from "
                               f"the inputs' shapes: ONNX Runtime fails there (on seeded random inputs, as run "
                               f"and compare draw them): {why}")
        log.warning("%s: ONNX Runtime fails at the max shapes of profile %d (%s) on seeded random inputs%s, so real "
                    "inputs may run there (check the folder with trt-backend run DIR --inputs REAL.npz): %s",
                    model.source, k, named_shapes(top),
                    f"; the model's {chooser} chooses on its inputs' values" if chooser is not None else
                    " at a node other than those its shapes index", why)


def _check_runs_where_refused(model: Model, profiles: Sequence[Mapping[str, Any]] | None, report: BuildReport,
                              options: SessionOptions) -> None:
    """A ProfileError where TensorRT's builder refused nodes at the shapes a build was made for (a
    Reshape to a fixed size given another batch) and the model cannot run there either, told by
    one run of the whole model in ONNX Runtime at each profile's opt shapes: a folder built for
    them would fail at every run, where a builder's refusal at shapes the model runs at stays a
    demotion. Where an If or Loop chooses on input values, a failure on random inputs is a warning.
    Not run where the model's weights would not fit twice (see :func:`_room_to_run`)."""
    if not profiles or not any(d.reason.startswith("TensorRT build failed") for d in report.demoted) \
            or not _room_to_run(model, options):
        return
    chooser = _branch_on_values(model, valued_tensors(model))
    for k, opt in enumerate(opt_shapes(profile_shapes(profiles))):
        why = run_failure(model, opt)
        if why is not None and chooser is not None:  # (random data may take a branch real data never takes)
            log.warning("%s: ONNX Runtime fails at the opt shapes of profile %d (%s) on seeded random inputs, where "
                        "TensorRT's builder refused nodes too; the model's %s chooses on its inputs' values, so "
                        "real inputs may run there (check the folder with trt-backend run DIR --inputs REAL.npz): "
                        "%s", model.source, k, named_shapes(opt), chooser, why)
        elif why is not None:
            raise ProfileError(f"{model.source}: the model cannot run at the opt shapes of profile {k} "
                               f"({named_shapes(opt)}): TensorRT's builder refused nodes there and ONNX Runtime fails "
                               f"there too (on seeded random inputs, as run and compare draw them): {why}")


def _room_to_run(model: Model, options: SessionOptions) -> bool:
    """Whether the whole model may run in ONNX Runtime beside a build: its weights, held twice
    (its own and ONNX Runtime's), fit the build's memory budget or what is free."""
    try:
        room = build_room(options.build.max_build_memory, 0)
    except OptionsError:
        room = None
    if room is None:
        return False  # (nothing tells what would fit)
    weights = weight_bytes(model.index, range(len(model.proto.graph.node)))
    if 2 * weights > room.room:
        log.info("%s: not run in ONNX Runtime at the profiles' shapes: its %s of weights would not fit the build's "
                 "memory", model.source, si_bytes(weights))
        return False
    return True


def _branch_on_values(model: Model, valued: Collection[str]) -> str | None:
    """The first If or Loop of ``model`` whose condition (or trip count) is computed from its
    inputs' values rather than their shapes (``valued``: its :func:`valued_tensors`), in words;
    None where none is."""
    graph = model.proto.graph
    for i in model.index.order:
        node = graph.node[i]
        if node.op_type in ("If", "Loop") and any(name in valued for name in node.input[:2] if name):
            return f"{node.op_type} '{node.name}'" if node.name else node.op_type
    return None


def _cut_for_memory(plan: Plan, options: SessionOptions, limit: int) -> Plan:
    """``plan`` with TensorRT segments past ``limit`` bytes of weights cut into pieces that fit."""
    assert plan.model is not None
    index = plan.model.index
    over = [s for s in plan.tensorrt_segments() if weight_bytes(index, s.members) > limit]
    if not over:
        return plan
    verdicts = [Verdict(n.verdict, n.reason) for n in plan.nodes]
    cut = build_plan(plan.model, verdicts, plan.tensorrt, options.partition.min_segment_size, target=plan.target,
                     cost=options.partition.boundary_cost, max_segment_weights=limit)
    cut.seconds, cut.oracle_calls, cut.cached = plan.seconds, plan.oracle_calls, plan.cached
    # (said: a cut changes the folder; and the limit follows what this process holds at the time,
    # so the same budget can cut otherwise in another run)
    budget = options.build.max_build_memory
    log.warning("%s: %d TensorRT segment(s) hold more than %s of weights, the most one may to build within %s "
                "(this process holds %s now); cut into %d TensorRT segment(s)", plan.model_name, len(over),
                si_bytes(limit), f"--max-build-memory {si_bytes(budget)}" if budget is not None else
                "the memory free now", si_bytes(process_memory()), len(cut.tensorrt_segments()))
    return cut


def _check_precision_plan(build: BuildOptions, model: Model) -> None:
    """An OptionsError where the precision plan ``auto`` is given names nodes ``model`` does not
    have: it was searched on another model (or this one changed), and would apply to none of its
    segments, which then built in fp32 without a word."""
    plan = build.precision_plan
    if build.precision != "auto" or plan is None:
        return
    names = {n.name for n in model.proto.graph.node}
    foreign = [n for s in plan.segments for n in s.nodes if n not in names]
    if foreign:
        raise OptionsError(f"{model.source}: the precision plan names {len(foreign)} node(s) this model does not have "
                           f"({', '.join(repr(n) for n in foreign[:3])}{', ...' if len(foreign) > 3 else ''}): it "
                           "was searched on another model, or this one changed; search again (--precision auto "
                           "without --precision-plan)")


def _uses_int8(build: BuildOptions) -> bool:
    if build.precision == "int8":
        return True
    plan = build.precision_plan
    return build.precision == "auto" and plan is not None and any(s.precision == "int8" for s in plan.segments)


def _quantizer(model: Model, build: BuildOptions, input_profiles: Sequence[Profile], options: SessionOptions,
               kept: dict[tuple[str, str, str], SegmentQuantizer]) -> SegmentQuantizer:
    require_calibration("int8", build.calibration_data)
    key = (str(build.calibration_data), build.calibration_method, ",".join(build.keep_fp32_ops))
    if key not in kept:
        batches = {n: tp.opt[0] for n, tp in (input_profiles[0] if input_profiles else {}).items() if len(tp.opt) > 0}
        ranges = [{n: (tp.min, tp.opt, tp.max) for n, tp in p.items()} for p in input_profiles]
        kept[key] = SegmentQuantizer(model, key[0], build.calibration_method, batches, options.ort_for(1),
                                     options.calibration_seed, keep_fp32_ops=build.keep_fp32_ops, ranges=ranges)
    return kept[key]


def _flavor_if_any(options: SessionOptions) -> Flavor | None:
    """The TensorRT flavor whose parser decides which nodes a reduced precision keeps fp32, or
    None when none is installed (the form is then the transform alone)."""
    try:
        return load_flavor(options.flavor if options.flavor != "none" else "auto")
    except TensorRTUnavailableError:
        return None


"""The stitched inference session: plan the model, derive every TensorRT segment's profiles,
make one runner per segment (once), then run segments in order with tensors routed by name."""
from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import onnx

from partitioner import (
    Model,
    Plan,
    Segment,
)
from partitioner.errors import OptionsError
from partitioner.model import ModelSource
from partitioner.weights import tensor_array
from trt_backend.engines.builder import (
    BuildOptions,
    segment_precision,
    weights_for_transform,
)
from trt_backend.engines.cache import EngineCache
from trt_backend.engines.emulation import emulation_ort_options, segment_emulation
from trt_backend.engines.fallback import PlanMemo, build_with_fallback, plugin_rewrite
from trt_backend.engines.precision_plan import PrecisionPlan
from trt_backend.engines.quantize import SegmentQuantizer, require_calibration
from trt_backend.engines.report import BuildReport
from trt_backend.errors import DeviceError, PrecisionError, TensorRTUnavailableError
from trt_backend.gpu.device import (
    BufferPool,
    DeviceArray,
    Stream,
    check_device,
    device_of,
    use_device,
)
from trt_backend.gpu.ort_cuda_runner import OrtCudaRunner, cuda_provider_available
from trt_backend.gpu.status import make_tensorrt_runner, tensorrt_status
from trt_backend.ort.sessions import tapped_session
from trt_backend.ort.threads import use_global_thread_pool
from trt_backend.ort.values import memory_limit, to_numpy
from trt_backend.planning import load as load_for_planning
from trt_backend.planning import plan_for
from trt_backend.profiles import Profile, profiles_from_json
from trt_backend.runners.base import SegmentRunner
from trt_backend.runners.ort import EmulatedTensorRTRunner, OnnxRuntimeRunner
from trt_backend.session.artifacts import BuiltFolder, is_build_folder, open_folder
from trt_backend.session.derive import Runner, derive_profiles, shape_tensor_inputs
from trt_backend.session.feeds import FeedValidator, NodeArg, node_arg
from trt_backend.session.given import (
    check_profile_names,
    complete_profiles,
    normalize_profiles,
)
from trt_backend.session.options import RunOptions, SessionOptions, is_ort_run_options
from trt_backend.session.saved import (
    SessionPlan,
    check_saved,
    read_saved,
    saved_segment_profiles,
)
from trt_backend.session.seal import sign_key as read_sign_key

log = logging.getLogger(__package__)  # "trt_backend.session": the stage's logger, as users see it


@dataclass(frozen=True)
class Step:
    """One segment run of a schedule: what it reads, writes, and what can be dropped after it."""

    runner: SegmentRunner
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    free: tuple[str, ...]


_DEFAULT_RUN = RunOptions()


def _folder_precision(options: SessionOptions, manifest: Mapping[str, Any]) -> SessionOptions:
    """A build folder's precision (and precision plan) for a session that set none, so emulated
    segments compute as the folder's engines do. int8 emulation needs the calibration data,
    which a folder does not hold: without it in ``options``, the segments emulate in fp32."""
    built = manifest.get("build_options", {})
    precision = built.get("precision", "fp32")
    if options.build.precision != "fp32" or precision in ("fp32", "tf32"):
        return options
    plan = None
    if precision == "auto" and manifest.get("precision_plan"):
        plan = PrecisionPlan.from_dict(manifest["precision_plan"])
    uses_int8 = precision == "int8" or (plan is not None and any(s.precision == "int8" for s in plan.segments))
    if uses_int8 and not options.build.calibration_data:
        log.warning("the build folder's engines are int8; emulated without its calibration data (give "
                    "calibration_data), its segments compute in fp32")
        return options
    build = dataclasses.replace(options.build, precision=precision, precision_plan=plan,
                                keep_fp32_ops=tuple(built.get("keep_fp32_ops") or options.build.keep_fp32_ops))
    return dataclasses.replace(options, build=build)


class Session:
    """Runs a whole model, TensorRT and ONNX Runtime segments stitched; onnxruntime-like API."""

    def __init__(self, model: ModelSource | Model | Plan, profiles: Sequence[Mapping[str, Any]] | None = None,
                 options: SessionOptions | None = None, *, plan: Mapping[str, Any] | str | os.PathLike[str] | None = None,
                 calibration_feeds: Sequence[Mapping[str, Any]] = (), engines: Mapping[int, bytes] | None = None) -> None:
        """``plan``: a plan JSON (dict, text or path) written by an earlier session, whose derived
        profiles are reused after checking the model still plans the same. ``calibration_feeds``:
        real inputs to derive profiles with where random data would not do. ``engines``: built
        engines by segment id (``trt-backend build`` artifacts); missing ones are built when
        TensorRT executes here. ``model`` may be a ``trt-backend build`` folder (as
        :meth:`load`, which can also rebuild)."""
        self.options = options if options is not None else SessionOptions()
        if not isinstance(self.options, SessionOptions):
            raise OptionsError(f"options must be a SessionOptions, got {type(self.options).__name__}")
        self.folder_manifest: dict[str, Any] | None = None  # the build folder's manifest, when made from one
        if self.options.device_id is not None and self.options.emulate is not True:
            check_device(self.options.device_id)  # before any planning: a GPU that is not here is the first error
        # the GPU everything of this session lives on once it uses one (None: the current device)
        self.device_id: int | None = None
        if is_build_folder(model):
            if profiles is not None or plan is not None or engines is not None:
                raise OptionsError(f"{os.fspath(model)}: a build folder brings its own profiles, plan and engines; "
                                   "give none of them")
            built = self._open_folder(model, self.options)
            model, plan, engines = built.plan, built.manifest["plan"], built.engines
            self.folder_manifest = built.manifest
            self.options = _folder_precision(self.options, built.manifest)
        if not isinstance(model, Plan) and profiles is not None:
            model = load_for_planning(model)  # (profile names checked before planning, which can take long)
            check_profile_names(profiles, model.proto.graph)
        base = model if isinstance(model, Plan) else self.make_plan(model, self.options)
        if base.model is None:
            raise OptionsError("this plan was read from JSON without its model; pass the model instead")
        self.model: Model = base.model
        graph = self.model.proto.graph
        self._inputs = [node_arg(vi.name, vi.type) for vi in graph.input]
        self._outputs = [node_arg(vi.name, vi.type) for vi in graph.output]
        trt = base.tensorrt_segments()
        extra = {n for s in trt for n in s.inputs} - {a.name for a in self._inputs}
        user, overrides = normalize_profiles(profiles, self._inputs, extra)
        saved = read_saved(plan) if plan is not None else None
        if saved is not None:
            check_saved(saved, base, user)
            user = user or profiles_from_json(saved.get("input_profiles", []))
        input_profiles = complete_profiles(user, self._inputs, required=bool(trt))
        shape_tensors = {s.id: frozenset(shape_tensor_inputs(self.model, s)) for s in trt}
        ort_opts = self.options.ort
        if ort_opts.shares_global_pool:  # once the inputs are known good; before our sessions
            use_global_thread_pool(ort_opts.intra_op_threads, ort_opts.inter_op_threads)

        def derive(p: Plan) -> dict[int, list[Profile]]:
            with memory_limit(self.options.max_memory):  # calibration data held to the session's limit
                return derive_profiles(self.model, p, self._inputs, input_profiles, overrides, self._calibration_runner,
                                       self.options.calibration_seed, list(calibration_feeds))

        derived = saved_segment_profiles(saved) if saved is not None else derive(base)
        self._quantizers: dict[tuple[str, str], SegmentQuantizer] = {}
        self._opt_batches = {n: tp.opt[0] for n, tp in (input_profiles[0] if input_profiles else {}).items()
                             if len(tp.opt) > 0}
        emulate = self._decide_emulation(trt)
        self.build_report: BuildReport | None = None  # set when this session built engines
        engine_map = dict(engines or {})
        if not emulate and any(s.id not in engine_map for s in trt):
            base, derived, engine_map = self._build_engines(base, derived, derive)
            trt = base.tensorrt_segments()
            shape_tensors = {s.id: frozenset(shape_tensor_inputs(self.model, s)) for s in trt}
        self.emulated_precisions: dict[int, str] = {}  # emulated TensorRT segment -> precision it computes in
        self.runners = self._make_runners(base, emulate, derived, shape_tensors, engine_map)
        self.plan = SessionPlan.of(base, executors=[r.executor for r in self.runners],
                                   input_profiles=input_profiles, segment_profiles=derived)
        self._validator = FeedValidator(self._inputs, self._outputs, input_profiles)
        self._constants = {t.name: tensor_array(t, self.model.base_dir) for t in graph.initializer
                           if t.name in {o.name for o in graph.output}}
        self._schedules: dict[tuple[str, ...], tuple[Step, ...]] = {}
        self._lock = threading.Lock()

    @classmethod
    def load(cls, folder: str | os.PathLike[str], options: SessionOptions | None = None, *,
             rebuild: bool = False, sign_key: str | bytes | None = None) -> Session:
        """A session from a ``trt-backend build`` folder, using its engines and saved profiles: no
        planning, no calibration, no build. On another TensorRT version or GPU: ArtifactError, or
        with ``rebuild`` a session that builds fresh engines. ``sign_key`` (or the options' own,
        or ``TRT_BACKEND_SIGN_KEY``): the folder must be signed with it (SignatureError)."""
        opts = options if options is not None else SessionOptions()
        if sign_key is not None:
            opts = dataclasses.replace(opts, sign_key=sign_key)
        built = cls._open_folder(folder, opts, rebuild)
        sess = cls(built.plan, None, opts, plan=built.manifest["plan"], engines=built.engines)
        sess.folder_manifest = built.manifest
        return sess

    @staticmethod
    def _open_folder(folder: str | os.PathLike[str], options: SessionOptions, rebuild: bool = False) -> BuiltFolder:
        executes = options.emulate is False or (options.emulate is not True
                                                 and tensorrt_status(options.device_id or 0)[0])
        if executes and options.device_id is not None:
            use_device(options.device_id)  # the folder's engines are checked against this GPU's SM
        return open_folder(folder, executes=executes, rebuild=rebuild, sign_key=read_sign_key(options.sign_key))

    # ------------------------------------------------------------ construction helpers

    @staticmethod
    def make_plan(model: ModelSource | Model, options: SessionOptions | None = None) -> Plan:
        """Plan ``model`` as a Session with ``options`` would (a Session also accepts the result)."""
        opts = options if options is not None else SessionOptions()
        return plan_for(model, opts.partition, flavor=opts.flavor, oracle=opts.oracle, isolate=opts.isolate_parser)

    def _build_engines(self, plan: Plan, derived: dict[int, list[Profile]],
                       derive: Callable[[Plan], dict[int, list[Profile]]],
                       ) -> tuple[Plan, dict[int, list[Profile]], dict[int, bytes]]:
        """Engines for every TensorRT segment (when the given ones lack any, all are built, through
        the cache when there is one); segments TensorRT refuses are demoted and re-planned."""
        if self.options.device_id is not None:
            use_device(self.options.device_id)  # full TensorRT builds for (and on) the current device
        profiles_of = PlanMemo(derive, (plan, derived))
        cache = EngineCache(self.options.cache_dir, allow_host_code=self.options.allow_host_code) \
            if self.options.cache_dir else None
        quantizer = self.quantizer() if self.options.build.precision == "int8" else None
        result = build_with_fallback(plan, profiles_of, self.options.build, cache,
                                     min_segment_size=self.options.partition.min_segment_size,
                                     boundary_cost=self.options.partition.boundary_cost, rewrite=plugin_rewrite(plan),
                                     quantizer=quantizer)
        self.build_report = result.report
        return result.plan, profiles_of(result.plan), dict(result.engines)

    def _make_runners(self, plan: Plan, emulate: bool, derived: dict[int, list[Profile]],
                      shape_tensors: dict[int, frozenset[str]], engines: dict[int, bytes]) -> list[SegmentRunner]:
        ort_opts = self.options.ort_for(len(plan.segments))
        gpu = not emulate and bool(plan.tensorrt_segments())
        device_kw: dict[str, Any] = {}
        cuda_ort = False
        if gpu:
            self.device_id = device = self.options.device_id
            self._stream, self._pool = Stream(device), BufferPool(device)
            device_kw = {"pool": self._pool, "stream": self._stream, "outputs_on_device": True,
                         "allow_host_code": self.options.allow_host_code, "device_id": device}
            cuda_ort = cuda_provider_available()
        runners: list[SegmentRunner] = []
        weights = self.model.base_dir  # external data locations of every segment are relative to it
        for seg in plan.segments:
            proto = plan.extract(seg.id)
            if seg.backend != "tensorrt":
                if cuda_ort:
                    runners.append(OrtCudaRunner(seg, proto, ort_opts, self._stream,
                                                 device_id=device if device is not None else 0, weights_dir=weights))
                else:
                    runners.append(OnnxRuntimeRunner(seg, proto, ort_opts, weights_dir=weights))
            elif emulate:
                emulated = self._emulated_precision(seg, proto)
                opts = emulation_ort_options(ort_opts) if emulated is not proto else ort_opts
                runners.append(EmulatedTensorRTRunner(seg, emulated, opts, derived[seg.id], shape_tensors[seg.id],
                                                      weights_dir=weights))
            else:
                runners.append(make_tensorrt_runner(seg, engines.get(seg.id), derived[seg.id], shape_tensors[seg.id],
                                                    **device_kw))
        return runners

    def _emulated_precision(self, seg: Segment, proto: onnx.ModelProto) -> onnx.ModelProto:
        """An emulated TensorRT segment computes in the precision its engine would be built in
        (the same ONNX-level transform the builder applies), so emulation shows its error."""
        build = self.options.build
        self.emulated_precisions[seg.id] = "fp32"
        precision = segment_precision(proto, build)[0]
        if precision not in ("fp32", "tf32"):  # (external weights read in, as the builder does)
            proto, kept = weights_for_transform(proto, self.model.base_dir, f"segment {seg.id}")
            if kept is not None:
                log.warning("%s; emulating it in fp32, as the builder would build it", kept)
                return proto
        if precision not in ("fp16", "bf16", "int8"):
            if precision == "tf32":
                log.warning("segment %d: tf32 is a TensorRT builder flag; emulated, it computes in fp32", seg.id)
            return proto

        try:
            emulated = segment_emulation(proto, build, self.quantizer() if precision == "int8" else None)
        except PrecisionError as e:
            log.warning("segment %d: %s; emulating it in fp32, as the builder would build it", seg.id, e)
            return proto
        self.emulated_precisions[seg.id] = emulated.precision
        return emulated.model

    def quantizer(self, build: BuildOptions | None = None) -> SegmentQuantizer:
        """The int8 quantizer of this session's model on ``build``'s calibration data (default the
        session's): segment inputs calibrated as the whole model computes them, batches of the
        first profile's opt batch. One per data source and method, kept."""
        b = build if build is not None else self.options.build
        require_calibration("int8", b.calibration_data)
        key = (str(b.calibration_data), b.calibration_method)
        if key not in self._quantizers:
            self._quantizers[key] = SegmentQuantizer(self.model, key[0], b.calibration_method, self._opt_batches,
                                                     self.options.ort_for(1), self.options.calibration_seed)
        return self._quantizers[key]

    def _decide_emulation(self, trt: list[Segment]) -> bool:
        if not trt or self.options.emulate is True:
            return True
        ok, why = tensorrt_status(self.options.device_id or 0)
        if ok:
            return False
        if self.options.emulate is False:
            raise TensorRTUnavailableError(f"cannot execute segment {trt[0].id} on TensorRT: {why}; use emulate=True "
                                           "(or 'auto') to run it through ONNX Runtime")
        log.warning("TensorRT cannot execute here (%s); running %d TensorRT segment(s) of %s emulated through "
                    "ONNX Runtime", why, len(trt), self.model.source)
        return True

    def _calibration_runner(self, names: Sequence[str]) -> Runner:
        run = tapped_session(self.model, names, self.options.ort_for(1), f"calibration model of {self.model.source}")

        def calibration_run(wanted: Sequence[str], feeds: Mapping[str, Any]) -> list[Any]:
            env = run(feeds, wanted)  # one run of the whole model for every tensor wanted
            return [env[n] for n in wanted]

        return calibration_run

    # ------------------------------------------------------------ onnxruntime-like API

    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    @property
    def segment_executors(self) -> list[str]:
        """Executor of each segment, in plan order: "tensorrt", "emulated" or "onnxruntime"."""
        return [r.executor for r in self.runners]

    @property
    def input_profiles(self) -> list[Profile]:
        return self.plan.input_profiles

    @property
    def segment_profiles(self) -> dict[int, list[Profile]]:
        return self.plan.segment_profiles

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: RunOptions | None = None) -> list[Any]:
        """Outputs (numpy arrays; lists for sequences) for ``output_names`` (None: all, in graph
        order). Everything is validated before any segment runs. ``run_options``: a
        :class:`RunOptions` (or, as with onnxruntime, an ``onnxruntime.RunOptions``, which is
        handed to every ONNX Runtime segment run)."""
        run = self._run_options(run_options)
        names = self._validator.output_names(output_names)
        feeds = self._validator.validate(input_feed)
        if self.device_id is not None:  # every thread that runs this session runs it on its GPU
            use_device(self.device_id)
            self._check_feed_devices(feeds)
        env: dict[str, Any] = dict(self._constants)
        env.update(feeds)
        with memory_limit(self.options.max_memory):  # host buffers of outputs held to the session's limit
            for step in self.schedule(names):
                inputs = [env[n] for n in step.inputs]
                values = step.runner.run(inputs) if run.ort is None else step.runner.run(inputs, run.ort)
                env.update(zip(step.outputs, values))
                for n in step.free:
                    del env[n]
        on_device = self.options.outputs_on_device if run.outputs_on_device is None else run.outputs_on_device
        if on_device:
            return [env[n] for n in names]
        return [env[n].to_host() if hasattr(env[n], "to_host") else to_numpy(env[n]) for n in names]

    def _check_feed_devices(self, feeds: Mapping[str, Any]) -> None:
        for name, value in feeds.items():
            if isinstance(value, DeviceArray):
                where = value.device_id if value.device_id is not None else device_of(value.ptr)
                if where is not None and where != self.device_id:
                    raise DeviceError(f"input '{name}' is on GPU {where}; this session runs on GPU {self.device_id} "
                                      f"(move it there, or feed a host array)")

    @staticmethod
    def _run_options(given: Any) -> RunOptions:
        if given is None:
            return _DEFAULT_RUN
        if isinstance(given, RunOptions):
            return given
        if is_ort_run_options(given):
            return RunOptions(ort=given)
        raise OptionsError(f"run_options must be a trt_backend RunOptions or an onnxruntime.RunOptions, "
                           f"got {type(given).__name__}")

    def replace_runner(self, index: int, runner: SegmentRunner) -> SegmentRunner:
        """Put ``runner`` in place of segment ``index``'s runner (same segment, same inputs and
        outputs: e.g. the segment in another precision); returns the one it replaces, not closed.
        Schedules made with the old runner are dropped; runs already going finish with it."""
        with self._lock:
            if not isinstance(index, int) or not 0 <= index < len(self.runners):
                raise OptionsError(f"no segment runner {index!r}: this Session has {len(self.runners)} (0..."
                                   f"{len(self.runners) - 1})")
            old = self.runners[index]
            if (runner.segment.id, runner.input_names, runner.output_names) != (old.segment.id, old.input_names,
                                                                                  old.output_names):
                raise OptionsError(f"{runner.label} cannot replace {old.label}: another segment or other "
                                   "inputs/outputs")
            self.runners[index] = runner
            self._schedules.clear()
        return old

    def schedule(self, output_names: Sequence[str] | None = None) -> tuple[Step, ...]:
        """The segment runs needed for ``output_names``, and after which run each intermediate
        is dropped (once its last reader ran, or at once if nothing needs it)."""
        names = self._validator.output_names(output_names)
        with self._lock:
            cached = self._schedules.get(names)
            if cached is None:
                cached = self._schedules[names] = self._make_schedule(names)
        return cached

    def _make_schedule(self, names: tuple[str, ...]) -> tuple[Step, ...]:
        needed = set(names)
        chosen: list[SegmentRunner] = []
        for runner in reversed(self.runners):
            if needed.intersection(runner.output_names):
                chosen.append(runner)
                needed.update(runner.input_names)
        chosen.reverse()
        last: dict[str, int] = {}
        for k, runner in enumerate(chosen):
            for n in runner.output_names:
                last[n] = k
            for n in runner.input_names:
                if n in last:
                    last[n] = k
        keep = set(names)
        steps: list[Step] = []
        for k, runner in enumerate(chosen):
            free = tuple(n for n, at in last.items() if at == k and n not in keep)
            steps.append(Step(runner, runner.input_names, runner.output_names, free))
        return tuple(steps)

    # ------------------------------------------------------------ reporting

    def summary(self) -> list[str]:
        """One line per segment: id, backend, executor, node count, inputs -> outputs."""
        lines = []
        for seg, executor in zip(self.plan.segments, self.segment_executors):
            lines.append(f"segment {seg.id}: {seg.backend:<11} executor {executor:<11} {len(seg.nodes):>5} node(s)  "
                         f"{', '.join(seg.inputs)} -> {', '.join(seg.outputs)}")
        return lines

    def close(self) -> None:
        for r in self.runners:
            r.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        counts = {e: self.segment_executors.count(e) for e in dict.fromkeys(self.segment_executors)}
        return f"<Session {self.model.source}: {len(self.runners)} segment(s) {counts}>"

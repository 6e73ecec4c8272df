"""The stitched inference session: a compiled model (:func:`trt_backend.compiler.compile`, or a
build folder read back), one runner per segment made once, then segments run in order with
tensors routed by name."""
from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from partitioner import Model, Plan
from partitioner.errors import OptionsError
from partitioner.model import ModelSource
from partitioner.weights import tensor_array
from trt_backend.artifacts.read import is_build_folder, open_build, same_profiles
from trt_backend.artifacts.saved import SessionPlan
from trt_backend.artifacts.seal import sign_key as read_sign_key
from trt_backend.compiler import Compiled, compile
from trt_backend.engines.builder import BuildOptions
from trt_backend.engines.quantize import SegmentQuantizer
from trt_backend.engines.report import BuildProgress, BuildReport
from trt_backend.errors import DeviceError, TensorRTUnavailableError
from trt_backend.gpu.device import check_device, current_device, device_of, use_device
from trt_backend.gpu.memory import DeviceArray
from trt_backend.ort.values import memory_limit, to_numpy
from trt_backend.planning import plan_for
from trt_backend.profiles import NodeArg, Profile, shape_tensor_inputs
from trt_backend.profiles.given import profile_shapes
from trt_backend.runners.base import SegmentRunner
from trt_backend.runners.factory import RunnerFactory
from trt_backend.session.feeds import FeedValidator
from trt_backend.session.options import RunOptions, SessionOptions, is_ort_run_options
from trt_backend.tensorrt.flavor import load_flavor

log = logging.getLogger(__package__)  # "trt_backend.session": the stage's logger, as users see it


@dataclass(frozen=True)
class Step:
    """One segment run of a schedule: what it reads, writes, and what can be dropped after it."""

    runner: SegmentRunner
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    free: tuple[str, ...]


_DEFAULT_RUN = RunOptions()
_DEFAULT_RUNNERS = RunnerFactory()


class Session:
    """Runs a whole model, TensorRT and ONNX Runtime segments stitched; onnxruntime-like API."""

    def __init__(self, model: ModelSource | Model | Plan | Compiled,
                 profiles: Sequence[Mapping[str, Any]] | None = None,
                 options: SessionOptions | None = None, *,
                 plan: Mapping[str, Any] | str | os.PathLike[str] | None = None,
                 calibration_feeds: Sequence[Mapping[str, Any]] = (), engines: Mapping[int, bytes] | None = None,
                 runners: RunnerFactory | None = None, progress: BuildProgress | None = None) -> None:
        """``model``: a model (path, ModelProto, Model or Plan), a ``trt-backend build`` folder
        (as :meth:`load`), or a :class:`~trt_backend.compiler.Compiled`. A model is compiled
        (:func:`trt_backend.compiler.compile`) with ``profiles`` and ``options``: engines are built
        where TensorRT executes here, otherwise every TensorRT segment is put in the form it would
        be built in and emulated through ONNX Runtime, as planned: ``planned_only`` is then True (a
        segment TensorRT's builder would refuse is emulated too; a build, or :func:`trt_backend.compare`,
        demotes it to ONNX Runtime). ``plan``: a plan JSON (dict, text or path)
        written earlier (``Session.plan.to_json()``), whose derived profiles are reused after checking the model
        still plans the same. ``calibration_feeds``: real inputs to derive profiles with where
        random data would not do. ``engines``: built engines by segment id. ``runners``: the
        :class:`~trt_backend.runners.factory.RunnerFactory` that makes the runners."""
        self.options = options if options is not None else SessionOptions()
        if not isinstance(self.options, SessionOptions):
            raise OptionsError(f"options must be a SessionOptions, got {type(self.options).__name__}")
        self._factory = runners if runners is not None else _DEFAULT_RUNNERS
        self.folder_manifest: dict[str, Any] | None = None  # the build folder's manifest, when made from one
        if self.options.device_id is not None and self.options.emulate is not True:
            check_device(self.options.device_id)  # before any planning: a GPU that is not here is the first error
        # the GPU everything of this session lives on once it uses one (None: the current device)
        self.device_id: int | None = None
        executes = self._executes()
        if isinstance(model, Compiled):
            compiled = model
        elif is_build_folder(model):
            if plan is not None or engines is not None:
                raise OptionsError(f"{os.fspath(model)}: a build folder brings its own profiles, plan and engines; "
                                   "give none of them")
            compiled = self._open(model, executes)
            if profiles is not None and not same_profiles(profiles, self.folder_manifest):
                raise OptionsError(f"{os.fspath(model)}: profiles other than the ones it was built with would change "
                                   "what was built; a build folder runs as it was built (give none, or its own)")
        else:
            self._require_tensorrt()  # Before planning and building: nothing could run them.
            if executes and self.options.device_id is not None:
                use_device(self.options.device_id)  # full TensorRT builds for (and on) the current device
            compiled = compile(model, profiles, self.options, build=executes, saved_plan=plan,
                               calibration_feeds=calibration_feeds, engines=engines, progress=progress)
        self._start(compiled, executes)

    def planned_why(self) -> str:
        """What running TensorRT segments as planned, not built, means here (see ``planned_only``)."""
        try:
            load_flavor(self.options.flavor)
        except TensorRTUnavailableError:
            return "no TensorRT builder here to build them: a segment its builder would refuse is emulated too"
        return ("not built: a segment TensorRT's builder would refuse is emulated too; `trt-backend build` and "
                "`compare` build and demote it")

    @classmethod
    def load(cls, folder: str | os.PathLike[str], options: SessionOptions | None = None, *,
             rebuild: bool = False, sign_key: str | bytes | None = None,
             runners: RunnerFactory | None = None) -> Session:
        """A session from a ``trt-backend build`` folder, using its engines and saved profiles: no
        planning, no calibration, no build; emulated, its segments run the models the engines
        were built from. On another TensorRT version or GPU: ArtifactError, or with ``rebuild`` a
        session that builds fresh engines. ``sign_key`` (or the options' own, or
        ``TRT_BACKEND_SIGN_KEY``): the folder must be signed with it (SignatureError)."""
        opts = options if options is not None else SessionOptions()
        if not isinstance(opts, SessionOptions):
            raise OptionsError(f"options must be a SessionOptions, got {type(opts).__name__}")
        if sign_key is not None:
            opts = dataclasses.replace(opts, sign_key=sign_key)
        self = cls.__new__(cls)
        self.options = opts
        self._factory = runners if runners is not None else _DEFAULT_RUNNERS
        self.folder_manifest = None
        self.device_id = None
        if opts.device_id is not None and opts.emulate is not True:
            check_device(opts.device_id)
        executes = self._executes()
        self._start(self._open(folder, executes, rebuild), executes)
        return self

    def _open(self, folder: str | os.PathLike[str], executes: bool, rebuild: bool = False) -> Compiled:
        if executes and self.options.device_id is not None:
            use_device(self.options.device_id)  # the folder's engines are checked against this GPU's SM
        built = open_build(folder, self.options, executes=executes, rebuild=rebuild,
                           sign_key=read_sign_key(self.options.sign_key))
        self.folder_manifest = built.manifest
        self.options = built.compiled.options
        return built.compiled

    def _executes(self) -> bool:
        """Whether TensorRT segments are to execute here (else they are emulated): emulate=False
        says yes, and :meth:`_require_tensorrt` then names why they cannot where they cannot."""
        self._why_not = ""
        if self.options.emulate is True:
            return False
        ok, why = self._factory.executes(self.options.device_id)
        self._why_not = "" if ok else why
        return ok or self.options.emulate is False

    def _require_tensorrt(self) -> None:
        if self._why_not and self.options.emulate is False:
            raise TensorRTUnavailableError(f"cannot execute TensorRT segments: {self._why_not}; use emulate=True "
                                           "(or 'auto') to run them through ONNX Runtime")

    def _start(self, compiled: Compiled, executes: bool) -> None:
        if compiled.plan.tensorrt_segments():
            self._require_tensorrt()
        self.compiled = compiled
        self.model: Model = compiled.model
        graph = self.model.proto.graph
        self._inputs = compiled.inputs()
        self._outputs = compiled.outputs()
        trt = compiled.plan.tensorrt_segments()
        emulate = not executes or not trt
        # TensorRT segments emulated as planned, never built (a model, not a folder, and nothing to
        # execute them): one TensorRT's builder refuses is emulated too, where a build demotes it.
        self.planned_only = not executes and bool(trt) and compiled.report is None and self.folder_manifest is None
        if not executes and trt and self.options.emulate == "auto":
            log.warning("TensorRT cannot execute here (%s); running %d TensorRT segment(s) of %s emulated through "
                        "ONNX Runtime%s", self._why_not, len(trt), self.model.source,
                        f" as planned ({self.planned_why()})" if self.planned_only else "")
        self.build_report: BuildReport | None = compiled.report
        if not emulate:
            # device_id None is the device current now, pinned: threads start on GPU 0, and each
            # run makes this one current, so everything of the session stays on one GPU
            self.device_id = self.options.device_id if self.options.device_id is not None else current_device()
            use_device(self.device_id)
        cache_dir = self.options.cache_dir
        made = self._factory.make(compiled.plan, compiled.segments, self.options.ort_for(len(compiled.plan.segments)),
                                  emulate=emulate, weights_dir=self.model.base_dir, device_id=self.device_id,
                                  allow_host_code=self.options.allow_host_code,
                                  runtime_cache_dir=os.path.join(cache_dir, "runtime") if cache_dir else None,
                                  lean_runtime=self.options.lean_runtime)
        self._made = made
        self.runners = made.runners
        # emulated TensorRT segment -> the precision it computes in (what its engine was built in)
        self.emulated_precisions: dict[int, str] = dict(made.precisions)
        self.plan = SessionPlan.of(compiled.plan, executors=[r.executor for r in self.runners],
                                   input_profiles=compiled.input_profiles,
                                   segment_profiles=compiled.segment_profiles)
        fed = {a.name for a in self._inputs}
        read_as_shapes = frozenset(n for seg in compiled.plan.tensorrt_segments()
                                   for n in shape_tensor_inputs(self.model, seg) if n in fed)
        self._validator = FeedValidator(self._inputs, self._outputs, compiled.input_profiles,
                                        frozenset(t.name for t in graph.initializer), shape_tensors=read_as_shapes)
        self._constants = {t.name: tensor_array(t, self.model.base_dir) for t in graph.initializer
                           if t.name in {o.name for o in graph.output}}
        # Outputs a run would hand back as an array it did not make: the caller's own input, or the
        # session's constant. Each run returns a copy of those.
        self._aliased = frozenset(self._constants) | ({a.name for a in self._inputs} & {a.name for a in self._outputs})
        self._schedules: dict[tuple[str, ...], tuple[Step, ...]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------ construction helpers

    @staticmethod
    def make_plan(model: ModelSource | Model, options: SessionOptions | None = None,
                  profiles: Sequence[Mapping[str, Any]] | None = None) -> Plan:
        """Plan ``model`` as a Session with ``options`` (and ``profiles``: the types shape inference
        cannot give are learned at their shapes) would (a Session also accepts the result)."""
        opts = options if options is not None else SessionOptions()
        return plan_for(model, opts.partition, flavor=opts.flavor, oracle=opts.oracle, isolate=opts.isolate_parser,
                        shapes=profile_shapes(profiles))

    def quantizer(self, build: BuildOptions | None = None) -> SegmentQuantizer:
        """The int8 quantizer of this session's model (see :meth:`Compiled.quantizer`)."""
        return self.compiled.quantizer(build)

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
        """Outputs (numpy arrays; lists for sequences) for ``output_names`` (None or empty: all, in graph
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
        steps = self._schedules.get(names) or self.schedule(names)
        if self.options.max_memory is None:
            self._run_steps(steps, env, run)
        else:
            with memory_limit(self.options.max_memory):  # host buffers of outputs held to the session's limit
                self._run_steps(steps, env, run)
        on_device = self.options.outputs_on_device if run.outputs_on_device is None else run.outputs_on_device
        if on_device:
            return [env[n] for n in names]
        out = [env[n].to_host() if hasattr(env[n], "to_host") else to_numpy(env[n]) for n in names]
        if self._aliased:  # an output that is an input or an initializer: a copy, as ONNX Runtime returns one
            out = [v.copy() if n in self._aliased and isinstance(v, np.ndarray) else v for n, v in zip(names, out)]
        return out

    @staticmethod
    def _run_steps(steps: Sequence[Step], env: dict[str, Any], run: RunOptions) -> None:
        for step in steps:
            inputs = [env[n] for n in step.inputs]
            values = step.runner.run(inputs) if run.ort is None else step.runner.run(inputs, run.ort)
            env.update(zip(step.outputs, values))
            for n in step.free:
                del env[n]

    def check_feeds(self, input_feed: Mapping[str, Any]) -> dict[str, Any]:
        """``input_feed`` checked as :meth:`run` checks it (names, dtypes, ranks, fixed dims, the
        profiles), normalised; a :class:`~trt_backend.errors.FeedError` naming what is wrong."""
        return self._validator.validate(input_feed)

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
        """Close the runners, then the GPU streams and buffer pool: every device buffer is freed
        (device outputs still held are freed when dropped)."""
        made = getattr(self, "_made", None)
        if made is not None:
            made.close(self.runners)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        counts = {e: self.segment_executors.count(e) for e in dict.fromkeys(self.segment_executors)}
        return f"<Session {self.model.source}: {len(self.runners)} segment(s) {counts}>"


def load(folder: str | os.PathLike[str], options: SessionOptions | None = None, *, rebuild: bool = False,
         sign_key: str | bytes | None = None) -> Session:
    """A Session from a build folder (see :meth:`Session.load`)."""
    return Session.load(folder, options, rebuild=rebuild, sign_key=sign_key)

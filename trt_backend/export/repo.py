"""A build as a Triton Inference Server model repository: one composing model per segment (a
``tensorrt_plan`` model holding the engines, or an ``onnxruntime`` model, with Triton's TensorRT
execution accelerator for TensorRT segments whose engines Triton's TensorRT backend cannot load),
and one ``ensemble`` model named after the model whose steps run the segments in plan order.

:func:`triton_repo` decides everything and holds it in memory (``--dry-run`` prints it);
:func:`trt_backend.export.write.write_repo` writes it."""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import onnx

from partitioner import Segment
from partitioner.errors import OptionsError
from partitioner.options_check import number_option
from trt_backend._files import follow_umask
from trt_backend.errors import ExportError
from trt_backend.engines.precision import fp32_subgraphs
from trt_backend.tensorrt.flavor import JIT_PLUGINS
from trt_backend.export.batching import check_batching
from trt_backend.export.observe import learn_ranks
from trt_backend.export.scalars import scalar_io, wrap_scalars
from trt_backend.export.source import DEFAULT_TARGET, ExportSource
from trt_backend.export.triton import (
    ENSEMBLE,
    KIND_CPU,
    KIND_GPU,
    ONNXRUNTIME,
    TENSORRT_PLAN,
    EnsembleStep,
    ModelConfig,
    TensorConfig,
    tensor_config,
)
from trt_backend.profiles import Profile, TensorProfile
from trt_backend.profiles.derive import shape_tensor_inputs

VERSION = "1"
CONFIG = "config.pbtxt"
SEGMENT_ONNX = "segment.onnx"  # beside a plan: the segment it was built from (checkers, users)
PLAN, ONNX = "plan", "onnx"
TRT_FORMATS = (PLAN, ONNX)
INSTANCE_KINDS = ("cpu", "gpu")
AOT_PLUGINS = JIT_PLUGINS[1]  # TensorRT whose Python plugins embed an ahead-of-time kernel in the engine


@dataclass(frozen=True)
class TritonOptions:
    """How to export: ``name`` of the ensemble (default: the model's file name), ``max_batch_size``
    (0: no batching, full shapes), instances per composing model, where ONNX Runtime segments run,
    and ``trt_format`` for TensorRT segments (None: a plan where Triton's TensorRT backend can
    load the engines, else ONNX with Triton's TensorRT execution accelerator)."""

    name: str | None = None
    max_batch_size: int = 0
    trt_instances: int = 1
    ort_instances: int = 1
    ort_kind: str = "gpu"
    trt_format: str | None = None

    def __post_init__(self) -> None:
        number_option(self.max_batch_size, "max_batch_size", whole=True, low=0)
        for what in ("trt_instances", "ort_instances"):
            number_option(getattr(self, what), what, whole=True, low=1)
        if self.ort_kind not in INSTANCE_KINDS:
            raise OptionsError(f"ort_kind must be one of {', '.join(INSTANCE_KINDS)}, got {self.ort_kind!r}")
        if self.trt_format is not None and self.trt_format not in TRT_FORMATS:
            raise OptionsError(f"trt_format must be one of {', '.join(TRT_FORMATS)}, got {self.trt_format!r}")
        if self.name is not None and not valid_name(self.name):
            raise OptionsError(f"model name {self.name!r}: use letters, digits, '_', '-' and '.' (a folder name)")


@dataclass
class RepoFile:
    """A file (or, for ``folder``, a folder that ``write`` fills) of the repository."""

    path: str  # relative to the repository, '/'-separated
    data: bytes | None = None
    write: Callable[[str], None] | None = None  # writes the file or folder at the path given
    folder: bool = False
    note: str = ""

    def write_to(self, root: str) -> None:
        target = os.path.join(root, *self.path.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if self.data is not None:
            with open(target, "wb") as f:
                f.write(self.data)
        elif self.write is not None:
            self.write(target)


@dataclass
class ComposingModel:
    """One segment as a Triton model: ``form`` is ``plan`` (``tensorrt_plan``) or ``onnx``
    (``onnxruntime``, with the TensorRT accelerator when ``segment_backend`` is tensorrt)."""

    segment: int
    segment_backend: str
    form: str
    config: ModelConfig
    files: list[RepoFile]
    tensors: dict[str, str] = field(default_factory=dict)  # model input/output name -> ensemble tensor
    note: str = ""


@dataclass
class TritonRepo:
    """The whole repository, decided and held in memory."""

    name: str
    models: list[ComposingModel]
    ensemble: ModelConfig
    notes: list[str] = field(default_factory=list)

    def configs(self) -> dict[str, str]:
        """Model name -> config.pbtxt text, the ensemble last."""
        out = {m.config.name: m.config.render() for m in self.models}
        out[self.ensemble.name] = self.ensemble.render()
        return out

    def files(self) -> list[RepoFile]:
        out: list[RepoFile] = []
        for m in self.models:
            out.append(RepoFile(f"{m.config.name}/{CONFIG}", m.config.render().encode()))
            out += m.files
        out.append(RepoFile(f"{self.ensemble.name}/{CONFIG}", self.ensemble.render().encode()))
        out.append(RepoFile(f"{self.ensemble.name}/{VERSION}", folder=True, write=_make_dir,
                            note="empty: Triton needs a version folder for an ensemble"))
        return out

    def tree(self, root: str) -> list[str]:
        """The repository's files, one per line, as ``--dry-run`` prints them."""
        lines = [f"{root.rstrip('/')}/"]
        for f in sorted(self.files(), key=lambda f: f.path):
            size = f" ({len(f.data)} bytes)" if f.data is not None else ""
            slash = "/" if f.folder else ""
            note = f"  {f.note}" if f.note else ""
            lines.append(f"  {f.path}{slash}{size}{note}")
        return lines


def _make_dir(path: str) -> None:
    os.makedirs(path, exist_ok=True)


_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def valid_name(name: str) -> bool:
    return bool(_NAME.match(name)) and name not in (".", "..")


def model_name(text: str) -> str:
    """``text`` as a Triton model (folder) name."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", text).strip(".")
    return name or "model"


# ---------------------------------------------------------------- deciding


def triton_repo(source: ExportSource, options: TritonOptions | None = None) -> TritonRepo:
    """Decide the repository for ``source``: every segment's model, config and files, the
    ensemble, and notes for the summary. ExportError for what Triton cannot take as asked."""
    opts = options or TritonOptions()
    name = opts.name or model_name(source.name)
    batch = opts.max_batch_size
    notes: list[str] = []
    learned, contradicted = learn_ranks(source)
    if learned:
        notes.append(f"the rank of {', '.join(learned)} (unknown from the model's types) "
                     "was learned by running the model")
    if contradicted:
        notes.append(f"model output(s) {'; '.join(contradicted)} when the model ran: written with the rank it "
                     "computed and every dim -1")
    if batch:
        check_batching(source, batch)
    models = [_segment_model(source, seg, f"{name}_{seg.id}_{'trt' if seg.backend == 'tensorrt' else 'ort'}",
                             opts, first=k == 0) for k, seg in enumerate(source.plan.segments)]
    notes += [m.note for m in models if m.note]
    onnx_trt = [m.segment for m in models if m.segment_backend == "tensorrt" and m.form == ONNX and not m.note]
    if onnx_trt:
        why = ("asked for with --trt-format onnx" if opts.trt_format == ONNX else _no_plan_reason(source))
        notes.append(f"TensorRT segment(s) {', '.join(map(str, onnx_trt))} exported as ONNX Runtime models with "
                     f"Triton's TensorRT execution accelerator: {why}")
    pinned = [k for k in onnx_trt
              if _kept_fp32(source, k) and source.segment_precisions.get(k, source.precision) == "fp16"]
    if pinned:
        notes.append(f"TensorRT segment(s) {', '.join(map(str, pinned))} keep nodes in fp32 in fp16 (pinned, or inside "
                     "If/Loop/Scan subgraphs): exported without the accelerator's precision_mode FP16, which would let "
                     "TensorRT lower them too; the segment models' fp16 casts carry what was reduced")
    unmatched = sorted({source.segment_precisions.get(k, source.precision) for k in onnx_trt} & {"bf16", "tf32"})
    if unmatched:
        notes.append(f"the build's precision {', '.join(unmatched)} has no counterpart in the TensorRT accelerator's "
                     "precision_mode (FP32, FP16, INT8): its segments keep their bf16 casts, the rest runs in FP32")
    plans = [m.segment for m in models if m.form == PLAN]
    if plans:
        notes.append(f"TensorRT segment(s) {', '.join(map(str, plans))} exported as TensorRT plans (built with "
                     f"{source.runtime}); each keeps its {SEGMENT_ONNX} beside the plan")
    ensemble = _ensemble(source, name, models, batch, notes)
    return TritonRepo(name, models, ensemble, notes)


def _no_plan_reason(source: ExportSource) -> str:
    if source.is_rtx:
        return (f"its engines were built with {source.runtime}, and Triton's TensorRT backend is full TensorRT, "
                "which cannot load TensorRT-RTX engines")
    if not source.engines:
        return "the build has no engines"
    return "the build has no engine for it"


def _form(source: ExportSource, seg: Segment, opts: TritonOptions) -> str:
    if seg.backend != "tensorrt":
        return ONNX
    plan_possible = bool(source.engines.get(seg.id)) and not source.is_rtx
    plugins = source.plugin_nodes(seg.id)
    if plugins:
        node, plugin = plugins[0]
        if opts.trt_format == ONNX:
            raise ExportError(f"segment {seg.id} holds plugin node '{node}' ({plugin}): Triton runs it only as a "
                              "TensorRT plan (the plugin travels in the engine); drop --trt-format onnx")
        if not plan_possible:
            raise ExportError(f"segment {seg.id} holds plugin node '{node}' ({plugin}), which Triton runs only as a "
                              f"TensorRT plan, but {_no_plan_reason(source)}; build it with full TensorRT")
        version = _version(source.runtime)
        if version is not None and version < AOT_PLUGINS:
            raise ExportError(f"segment {seg.id} holds plugin node '{node}' ({plugin}), built with {source.runtime}: "
                              "before TensorRT 10.9 the plugin runs through Python, which Triton's TensorRT backend "
                              "cannot call; build with TensorRT >= 10.9 (the plugin's ahead-of-time kernel is then "
                              "inside the engine)")
        return PLAN
    if opts.trt_format == PLAN and not plan_possible:
        raise ExportError(f"--trt-format plan: segment {seg.id} cannot be a plan: {_no_plan_reason(source)}; "
                          "export it as ONNX (--trt-format onnx, or leave --trt-format out)")
    if opts.trt_format == ONNX:
        return ONNX
    return PLAN if plan_possible else ONNX


def _version(runtime: str | None) -> tuple[int, ...] | None:
    """``"tensorrt 10.13.0.35"`` -> (10, 13)."""
    m = re.match(r"\S+ (\d+)\.(\d+)", runtime or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _io(proto: onnx.ModelProto, seg: Segment, seg_inputs: list[str], names: dict[str, str], batched: bool,
        shape_tensors: set[str]) -> tuple[list[TensorConfig], list[TensorConfig]]:
    """The model's inputs and outputs (``names``: segment tensor -> model-side name)."""
    ins = {vi.name: vi for vi in proto.graph.input}
    outs = {vi.name: vi for vi in proto.graph.output}
    missing = [n for n in seg_inputs if names[n] not in ins] + [n for n in seg.outputs if names[n] not in outs]
    if missing:
        raise ExportError(f"segment {seg.id}'s model lacks tensor(s) {', '.join(missing)} "
                          "of the plan; rebuild the folder")
    inputs = [tensor_config(ins[names[n]], batched=batched, what=f"segment {seg.id} input",
                            is_shape_tensor=n in shape_tensors) for n in seg_inputs]
    outputs = [tensor_config(outs[names[n]], batched=batched, what=f"segment {seg.id} output") for n in seg.outputs]
    return inputs, outputs


def _segment_model(source: ExportSource, seg: Segment, name: str, opts: TritonOptions, *,
                   first: bool) -> ComposingModel:
    form = _form(source, seg, opts)
    batch = opts.max_batch_size
    proto = source.segment_models[seg.id]
    seg_inputs = list(seg.inputs)
    names = {n: n for n in seg_inputs + list(seg.outputs)}
    notes: list[str] = []
    why_onnx: list[str] = []
    if not seg_inputs:  # constants only: Triton schedules a step when its inputs arrive, so give it one
        trigger = _trigger(source, seg)
        proto = _with_input(proto, trigger)
        seg_inputs, names[trigger.name] = [trigger.name], trigger.name
        notes.append(f"segment {seg.id} computes constants only; it takes model input '{trigger.name}' (unused) so "
                     "that Triton runs it")
        why_onnx.append("it reads no tensor")
    scalar_in, scalar_out = scalar_io(proto, seg_inputs, seg.outputs) if not batch else ([], [])
    if scalar_in or scalar_out:
        why_onnx.append(f"its engine reads or writes scalar(s) {', '.join(repr(n) for n in scalar_in + scalar_out)}, "
                        "which Triton's configuration cannot declare")
        proto, renamed = wrap_scalars(proto, scalar_in, scalar_out)
        names.update(renamed)
    if why_onnx and form == PLAN:
        if opts.trt_format == PLAN or source.plugin_nodes(seg.id):
            raise ExportError(f"segment {seg.id} cannot be a plan: {'; '.join(why_onnx)}")
        form = ONNX
        notes.append(f"segment {seg.id} exported as ONNX, not as a plan: {'; '.join(why_onnx)}")
    note = "; ".join(notes)
    shape_tensors: set[str] = set()
    if form == PLAN and source.plan.model is not None:
        shape_tensors = shape_tensor_inputs(source.plan.model, seg)
    inputs, outputs = _io(proto, seg, seg_inputs, names, batch > 0, shape_tensors)
    config = ModelConfig(name=name, max_batch_size=batch, inputs=inputs, outputs=outputs,
                         dynamic_batching=first and batch > 0)
    files: list[RepoFile] = []
    if form == PLAN:
        config.platform = TENSORRT_PLAN
        config.instance_kind, config.instance_count = KIND_GPU, opts.trt_instances
        config.instance_profiles = tuple(str(k) for k in range(max(1, len(source.segment_profiles.get(seg.id, [])))))
        engines = source.engines[seg.id]
        for k, (target, engine) in enumerate(engines.items()):
            filename = "model.plan" if k == 0 else f"model_sm{target.replace('.', '')}.plan"
            if k == 0:
                config.default_model_filename = filename
            if target != DEFAULT_TARGET:
                config.cc_model_filenames[target] = filename
            gpu = f"compute capability {target}" if target else "the build's default GPU target"
            files.append(RepoFile(f"{name}/{VERSION}/{filename}", engine, note=f"engine for {gpu}"))
        files.append(_onnx_file(f"{name}/{VERSION}", SEGMENT_ONNX, proto, source.external_weights, as_folder=False,
                                note="the segment the engine was built from"))
    else:
        config.backend = ONNXRUNTIME
        if seg.backend == "tensorrt":
            config.instance_kind, config.instance_count = KIND_GPU, opts.trt_instances
            config.tensorrt_accelerator, missed = _accelerator(source, seg)
            if missed:
                note = "; ".join(n for n in (note, f"segment {seg.id}: {missed}") if n)
        else:
            config.instance_kind = KIND_GPU if opts.ort_kind == "gpu" else KIND_CPU
            config.instance_count = opts.ort_instances
        files.append(_onnx_file(f"{name}/{VERSION}", "model.onnx", proto, source.external_weights, as_folder=True))
    tensors = {names[n]: n for n in seg_inputs + list(seg.outputs)}
    return ComposingModel(seg.id, seg.backend, form, config, files, tensors, note)


def _trigger(source: ExportSource, seg: Segment) -> onnx.ValueInfoProto:
    model = source.plan.model
    graph_inputs = list(model.proto.graph.input) if model is not None else []
    if not graph_inputs:
        raise ExportError(f"segment {seg.id} reads no tensor and the model has no input to schedule it by")
    return graph_inputs[0]


def _with_input(proto: onnx.ModelProto, vi: onnx.ValueInfoProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    copy.graph.input.add().CopyFrom(vi)
    return copy


def _kept_fp32(source: ExportSource, segment_id: int) -> bool:
    """Whether a segment keeps nodes in fp32 that its precision's flag would let TensorRT lower:
    nodes pinned to fp32, or the bodies of its If/Loop/Scan nodes (the reduced precisions do not
    reach into them, see :func:`trt_backend.engines.precision.fp32_subgraphs`)."""
    model = source.segment_models.get(segment_id)
    return bool(source.segment_pinned.get(segment_id)) or (model is not None and bool(fp32_subgraphs(model)))


def _accelerator(source: ExportSource, seg: Segment) -> tuple[dict[str, str], str | None]:
    """Parameters of Triton's TensorRT execution accelerator (ONNX Runtime's TensorRT EP): the
    segment's derived profiles, so the EP builds once for the whole range instead of per shape
    (for a shape tensor the EP reads the profile as its values, as TensorRT takes them); and why
    they are left out, where a profile cannot be written in the EP's ``name:dims,...`` lists (a
    name holding ':' or ',', as tf2onnx names every tensor, or a scalar)."""
    params: dict[str, str] = {}
    profiles: list[Profile] = source.segment_profiles.get(seg.id, [])
    names = [n for n in seg.inputs if all(n in p for p in profiles)]
    points = [[(n, _profile_point(p[n])) for n in names] for p in profiles]
    odd = next((n for n in names if ":" in n or "," in n), None)
    scalar = next((n for prof in points for n, pt in prof if not (pt and all(len(d) > 0 for d in pt))), None)
    missed = None
    if profiles and names and (odd is not None or scalar is not None):
        why = f"input '{odd}' has ':' or ',' in its name" if odd is not None else f"input '{scalar}' is a scalar"
        missed = (f"its TensorRT accelerator is given no profiles ({why}, which ONNX Runtime's TensorRT provider "
                  "cannot read in its name:dims lists): it builds an engine for each new input shape instead")
    usable = bool(profiles) and bool(names) and missed is None and \
        all(pt and all(min(d, default=0) >= 0 for d in pt) for prof in points for _, pt in prof)
    if usable:
        for key, pick in (("trt_profile_min_shapes", 0), ("trt_profile_opt_shapes", 1), ("trt_profile_max_shapes", 2)):
            params[key] = ",".join(f"{n}:{'x'.join(str(d) for d in pt[pick])}" for prof in points for n, pt in prof)
    # the segment model is the built form (fp16 casts, or Q/DQ with an fp16 remainder): the
    # accelerator builds it in the same precision
    mode = {"fp16": "FP16", "int8": "INT8"}.get(source.segment_precisions.get(seg.id, source.precision))
    if mode == "FP16" and _kept_fp32(source, seg.id):
        mode = None  # FP16 would let TensorRT lower the pinned nodes too; the form's casts carry the fp16 part
    if mode is not None:
        params["precision_mode"] = mode
    return params, missed


def _profile_point(tp: TensorProfile) -> tuple[tuple[int, ...], ...]:
    return tp.values if tp.values is not None else (tp.min, tp.opt, tp.max)


def _onnx_file(where: str, filename: str, proto: onnx.ModelProto, external: bool, *, as_folder: bool,
               note: str = "") -> RepoFile:
    """An ONNX model file in folder ``where``; with ``external`` weights: for ONNX Runtime models
    (``as_folder``) Triton's folder form ``<filename>/model.onnx`` + ``model.onnx.data``, beside a
    plan ``<filename>`` + ``<filename>.data``."""
    if not external:
        return RepoFile(f"{where}/{filename}", proto.SerializeToString(), note=note)

    def write(path: str) -> None:
        copy = onnx.ModelProto()
        copy.CopyFrom(proto)  # save_model with external data rewrites the proto it is given
        if as_folder:
            os.makedirs(path, exist_ok=True)
            target, location = os.path.join(path, "model.onnx"), "model.onnx.data"
        else:
            target, location = path, os.path.basename(path) + ".data"
        onnx.save_model(copy, target, save_as_external_data=True, all_tensors_to_one_file=True, location=location,
                        size_threshold=1024)
        data = os.path.join(os.path.dirname(target), location)
        if os.path.exists(data):  # There is no data file when every weight is small.
            follow_umask(data)  # ONNX writes its data files 0600.

    if as_folder:
        return RepoFile(f"{where}/{filename}", write=write, folder=True,
                        note="holds model.onnx + model.onnx.data (external weights)")
    return RepoFile(f"{where}/{filename}", write=write, note=f"+ {filename}.data (external weights)")


def _ensemble(source: ExportSource, name: str, models: list[ComposingModel], batch: int,
              notes: list[str]) -> ModelConfig:
    graph = source.plan.model.proto.graph if source.plan.model is not None else None
    if graph is None:
        raise ExportError("the build's plan has no model")
    consumers: dict[str, TensorConfig] = {}
    producers: dict[str, TensorConfig] = {}
    for m in models:
        for t in m.config.inputs:
            tensor = m.tensors[t.name]
            consumers.setdefault(tensor, TensorConfig(tensor, t.data_type, t.dims))
        for t in m.config.outputs:
            tensor = m.tensors[t.name]
            producers[tensor] = TensorConfig(tensor, t.data_type, t.dims)
    inputs, unused = [], []
    for vi in graph.input:
        if vi.name in consumers:
            t = consumers[vi.name]
            inputs.append(TensorConfig(t.name, t.data_type, t.dims))
        else:
            unused.append(vi.name)
    if unused:
        notes.append(f"model input(s) {', '.join(unused)} feed no segment; the ensemble leaves them out "
                     "(Triton refuses unused ensemble inputs)")
    outputs = []
    for vi in {v.name: v for v in graph.output}.values():  # (an output the model lists twice: once)
        if vi.name not in producers:
            raise ExportError(f"model output '{vi.name}' is not computed by any segment (a model input or a constant "
                              "passed through); a Triton ensemble can only return what a step produces")
        t = producers[vi.name]
        outputs.append(TensorConfig(t.name, t.data_type, t.dims))
    steps = [EnsembleStep(m.config.name, {t.name: m.tensors[t.name] for t in m.config.inputs},
                          {t.name: m.tensors[t.name] for t in m.config.outputs}) for m in models]
    io = {vi.name for vi in list(graph.input) + list(graph.output)}
    wrapped = sorted({t for m in models for k, t in m.tensors.items() if k != t and t in io})
    if wrapped:
        notes.append(f"model input/output scalar(s) {', '.join(wrapped)} travel as shape [1] (Triton's configuration "
                     "cannot declare a scalar without batching): send and read them as [1]")
    return ModelConfig(name=name, platform=ENSEMBLE, max_batch_size=batch, inputs=inputs, outputs=outputs, steps=steps)

"""An independent checker of a Triton model repository. It knows nothing of trt-backend's plans:
it reads only the repository folder, parses every ``config.pbtxt`` with Triton's own generated
schema (``tritonclient.grpc.model_config_pb2``), applies the rules Triton's model repository
manager applies when it loads an ensemble (as in triton-inference-server/core's
``model_config_utils.cc`` ``ValidateEnsembleSchedulingConfig``/``ValidateIOShape`` and
``ensemble_utils.cc`` ``ValidateEnsembleConfig``), and then executes the ensemble step by step on
the CPU: ``onnxruntime`` models through ONNX Runtime, ``tensorrt_plan`` models through the
``segment.onnx`` kept beside the plan (no GPU here to run the engine itself)."""
from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

NUMPY = {"TYPE_BOOL": np.bool_, "TYPE_UINT8": np.uint8, "TYPE_UINT16": np.uint16, "TYPE_UINT32": np.uint32,
         "TYPE_UINT64": np.uint64, "TYPE_INT8": np.int8, "TYPE_INT16": np.int16, "TYPE_INT32": np.int32,
         "TYPE_INT64": np.int64, "TYPE_FP16": np.float16, "TYPE_FP32": np.float32, "TYPE_FP64": np.float64,
         "TYPE_STRING": np.object_}


class RepoInvalid(AssertionError):
    """The repository breaks a rule Triton applies at load time (the message says which)."""


@dataclass
class RepoModel:
    name: str
    folder: str
    config: Any  # mc.ModelConfig

    @property
    def versions(self) -> list[str]:
        return sorted(d for d in os.listdir(self.folder) if d.isdigit() and os.path.isdir(os.path.join(self.folder, d)))

    @property
    def version_dir(self) -> str:
        return os.path.join(self.folder, self.versions[-1])


def load_repo(repo: str) -> dict[str, RepoModel]:
    """Every model of ``repo``, its config parsed with Triton's schema (a syntax or field error
    raises text_format.ParseError)."""
    models = {}
    for name in sorted(os.listdir(repo)):
        folder = os.path.join(repo, name)
        path = os.path.join(folder, "config.pbtxt")
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            config = text_format.Parse(f.read(), mc.ModelConfig())
        if config.name != name:
            raise RepoInvalid(f"{path}: name '{config.name}' differs from its folder '{name}'")
        models[name] = RepoModel(name, folder, config)
    return models


def _type(t: Any) -> str:
    return mc.DataType.Name(t.data_type)


def _as_seen(io: Any) -> Any:
    """The dims an ensemble's own input or output is checked against its steps by: its reshape's
    where it has one (as Triton's ensemble validation reads them)."""
    return io.reshape.shape if io.HasField("reshape") else io.dims


def _full(dims: Any, batching: bool) -> tuple[int, ...]:
    return ((-1,) if batching else ()) + tuple(dims)


def _check_io(model: RepoModel) -> None:
    c = model.config
    for io in list(c.input) + list(c.output):
        where = f"model '{model.name}' tensor '{io.name}'"
        if not io.name:
            raise RepoInvalid(f"model '{model.name}': a tensor without a name")
        if io.data_type == mc.TYPE_INVALID:
            raise RepoInvalid(f"{where}: must specify data_type")
        if len(io.dims) == 0:
            raise RepoInvalid(f"{where}: must specify dims")
        if any(d < 1 and d != -1 for d in io.dims):
            raise RepoInvalid(f"{where}: dims must be >= 1 or -1, got {list(io.dims)}")
        if io.HasField("reshape"):
            shape = list(io.reshape.shape)
            if any(d < 1 and d != -1 for d in shape):
                raise RepoInvalid(f"{where}: reshape dims must be >= 1 or -1, got {shape}")
            if not shape and c.max_batch_size == 0:
                raise RepoInvalid(f"{where}: an empty reshape needs a model that batches")
            if -1 not in shape and -1 not in io.dims and math.prod(shape) != math.prod(io.dims):
                raise RepoInvalid(f"{where}: reshape {shape} holds another number of elements than dims "
                                  f"{list(io.dims)}")
        if io.is_shape_tensor and c.platform != "tensorrt_plan":
            raise RepoInvalid(f"{where}: shape tensors are only supported for TensorRT plans")


def _onnx_path(model: RepoModel) -> str:
    """The ONNX file Triton's onnxruntime backend loads (a folder ``model.onnx/`` holds
    ``model.onnx``), every external-data file it references checked present and large enough."""
    path = os.path.join(model.version_dir, model.config.default_model_filename or "model.onnx")
    if os.path.isdir(path):
        path = os.path.join(path, "model.onnx")
    return _check_onnx_file(model, path)


def _check_onnx_file(model: RepoModel, path: str) -> str:
    if not os.path.isfile(path):
        raise RepoInvalid(f"model '{model.name}': {path} is missing")
    proto = onnx.load(path, load_external_data=False)
    for t in proto.graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        data = os.path.join(os.path.dirname(path), info["location"])
        if not os.path.isfile(data):
            raise RepoInvalid(f"model '{model.name}': weights file {data} of '{t.name}' is missing")
        end = int(info.get("offset", 0)) + int(info.get("length", 0))
        if os.path.getsize(data) < end:
            raise RepoInvalid(f"model '{model.name}': {data} is shorter than '{t.name}' needs")
    return path


def executable_path(model: RepoModel) -> str:
    """What the checker runs for ``model``: an onnxruntime model's file, a plan's segment.onnx."""
    c = model.config
    if c.platform == "tensorrt_plan":
        return _check_onnx_file(model, os.path.join(model.version_dir, "segment.onnx"))
    return _onnx_path(model)


def _check_files(model: RepoModel) -> None:
    c = model.config
    if not model.versions:
        raise RepoInvalid(f"model '{model.name}': no version folder")
    if c.platform == "tensorrt_plan":
        names = {c.default_model_filename or "model.plan", *c.cc_model_filenames.values()}
        for n in sorted(names):
            if not os.path.isfile(os.path.join(model.version_dir, n)):
                raise RepoInvalid(f"model '{model.name}': plan {n} is missing from {model.version_dir}")
        if any(g.kind != mc.ModelInstanceGroup.KIND_GPU for g in c.instance_group):
            raise RepoInvalid(f"model '{model.name}': a TensorRT plan runs on KIND_GPU instances only")
        executable_path(model)
    elif c.backend == "onnxruntime" or c.platform == "onnxruntime_onnx":
        _onnx_path(model)
    else:
        raise RepoInvalid(f"model '{model.name}': platform '{c.platform}' backend '{c.backend}' is not one this "
                          "checker knows")


def check_repo(repo: str) -> tuple[dict[str, RepoModel], RepoModel]:
    """Every load-time rule; returns the models and the (single) ensemble."""
    models = load_repo(repo)
    ensembles = [m for m in models.values() if m.config.platform == "ensemble"]
    if len(ensembles) != 1:
        raise RepoInvalid(f"{repo}: expected one ensemble, found {[m.name for m in ensembles]}")
    ens = ensembles[0]
    ec = ens.config
    if not ens.versions:
        raise RepoInvalid(f"ensemble '{ens.name}': no version folder")
    if len(ec.instance_group) or ec.HasField("optimization") or len(ec.model_warmup):
        raise RepoInvalid(f"ensemble '{ens.name}': instance_group, optimization and model_warmup are not allowed")
    if not ec.ensemble_scheduling.step:
        raise RepoInvalid(f"ensemble '{ens.name}': must specify 'step'")
    _check_io(ens)
    batching = ec.max_batch_size > 0
    # tensor -> (data type, full dims, who said so)
    known: dict[str, tuple[str, tuple[int, ...], str]] = {}

    def consistent(tensor: str, dtype: str, dims: tuple[int, ...], who: str) -> None:
        if tensor in known:
            d0, f0, w0 = known[tensor]
            if (d0, f0) != (dtype, dims):
                raise RepoInvalid(f"ensemble tensor '{tensor}': {d0} {list(f0)} from {w0} but {dtype} {list(dims)} "
                                  f"from {who}")
        else:
            known[tensor] = (dtype, dims, who)

    for io in ec.input:  # (an ensemble's own tensors by their reshape where they have one; its steps' by dims)
        consistent(io.name, _type(io), _full(_as_seen(io), batching), f"ensemble input of '{ens.name}'")
    for io in ec.output:
        consistent(io.name, _type(io), _full(_as_seen(io), batching), f"ensemble output of '{ens.name}'")
    produced: dict[str, int] = {}
    ensemble_inputs = {io.name for io in ec.input}
    for k, step in enumerate(ec.ensemble_scheduling.step):
        if step.model_name not in models:
            raise RepoInvalid(f"ensemble step {k}: model '{step.model_name}' is not in the repository")
        if not step.input_map or not step.output_map:
            raise RepoInvalid(f"ensemble step {k}: must specify 'input_map' and 'output_map'")
        m = models[step.model_name]
        c = m.config
        _check_io(m)
        _check_files(m)
        if batching and c.max_batch_size != 0 and c.max_batch_size < ec.max_batch_size:
            raise RepoInvalid(f"ensemble allows batch {ec.max_batch_size} but '{m.name}' only {c.max_batch_size}")
        if not batching and c.max_batch_size != 0:
            raise RepoInvalid(f"ensemble does not batch but '{m.name}' has max_batch_size {c.max_batch_size}")
        mb = c.max_batch_size > 0
        inputs = {io.name: io for io in c.input}
        outputs = {io.name: io for io in c.output}
        for key in step.input_map:
            if key not in inputs:
                raise RepoInvalid(f"step {k}: maps to non-existing input '{key}' of '{m.name}'")
        for name, io in inputs.items():
            if name not in step.input_map and not io.optional:
                raise RepoInvalid(f"step {k}: input '{name}' of '{m.name}' is not mapped to any ensemble tensor")
            if name in step.input_map:
                consistent(step.input_map[name], _type(io), _full(io.dims, mb), f"input '{name}' of '{m.name}'")
        for key, tensor in step.output_map.items():
            if key not in outputs:
                raise RepoInvalid(f"step {k}: maps from non-existing output '{key}' of '{m.name}'")
            if tensor in produced or tensor in ensemble_inputs:
                raise RepoInvalid(f"ensemble tensor '{tensor}' can appear in an output map only once "
                                  f"(steps {produced.get(tensor, 'input')} and {k})")
            produced[tensor] = k
            consistent(tensor, _type(outputs[key]), _full(outputs[key].dims, mb), f"output '{key}' of '{m.name}'")
    ready = set(ensemble_inputs)
    consumed = {t for s in ec.ensemble_scheduling.step for t in s.input_map.values()}
    for name in ensemble_inputs - consumed:
        raise RepoInvalid(f"ensemble input '{name}' is not used")
    pending = list(ec.ensemble_scheduling.step)
    while pending:
        runnable = [s for s in pending if set(s.input_map.values()) <= ready]
        if not runnable:
            raise RepoInvalid(f"steps {[s.model_name for s in pending]} never get all their inputs")
        for s in runnable:
            ready |= set(s.output_map.values())
            pending.remove(s)
    for io in ec.output:
        if io.name not in ready:
            raise RepoInvalid(f"ensemble output '{io.name}' is not written")
    for tensor in produced:
        if tensor not in consumed and tensor not in {io.name for io in ec.output}:
            raise RepoInvalid(f"ensemble tensor '{tensor}' is unused")
    return models, ens


def _reshaped(value: np.ndarray, io: Any, batching: bool, shape: Any) -> np.ndarray:
    """``value`` given ``shape`` (a config's dims or reshape, without the batch), its batch kept."""
    lead = value.shape[:1] if batching else ()
    return value.reshape(lead + tuple(int(d) for d in shape))


def _check_value(value: np.ndarray, io: Any, batching: bool, max_batch: int, who: str, dims: Any = None) -> None:
    dims = _full(io.dims if dims is None else dims, batching)
    if value.dtype != np.dtype(NUMPY[_type(io)]):
        raise RepoInvalid(f"{who} '{io.name}': got {value.dtype}, config says {_type(io)}")
    if len(value.shape) != len(dims) or any(d != -1 and d != s for d, s in zip(dims, value.shape)):
        raise RepoInvalid(f"{who} '{io.name}': shape {value.shape} does not fit dims {list(dims)}")
    if batching and not 1 <= value.shape[0] <= max_batch:
        raise RepoInvalid(f"{who} '{io.name}': batch {value.shape[0]} outside 1..{max_batch}")


def run_ensemble(repo: str, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Check ``repo``, then execute its ensemble on ``feeds`` step by step (in data-flow order),
    every value checked against the config of the model that reads or writes it."""
    models, ens = check_repo(repo)
    ec = ens.config
    batching = ec.max_batch_size > 0
    values: dict[str, np.ndarray] = {}
    for io in ec.input:
        _check_value(np.asarray(feeds[io.name]), io, batching, ec.max_batch_size, "ensemble input")
        values[io.name] = np.asarray(feeds[io.name])
    so = ort.SessionOptions()
    so.log_severity_level = 3
    pending = list(ec.ensemble_scheduling.step)
    while pending:
        step = next(s for s in pending if set(s.input_map.values()) <= values.keys())
        pending.remove(step)
        m = models[step.model_name]
        c = m.config
        mb = c.max_batch_size > 0
        sess = ort.InferenceSession(executable_path(m), so, providers=["CPUExecutionProvider"])
        feed = {}
        for io in c.input:
            v = values[step.input_map[io.name]]
            _check_value(v, io, mb, c.max_batch_size or 1, f"model '{m.name}' input")
            feed[io.name] = _reshaped(v, io, mb, io.reshape.shape) if io.HasField("reshape") else v
        names = [io.name for io in c.output]
        for io, v in zip(c.output, sess.run(names, feed)):
            if io.HasField("reshape"):  # the model's shape is the reshape's: Triton's view is dims
                _check_value(v, io, mb, c.max_batch_size or 1, f"model '{m.name}' output", dims=io.reshape.shape)
                v = _reshaped(v, io, mb, io.dims)
            _check_value(v, io, mb, c.max_batch_size or 1, f"model '{m.name}' output")
            if io.name in step.output_map:
                values[step.output_map[io.name]] = v
    return {io.name: values[io.name] for io in ec.output}

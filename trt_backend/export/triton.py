"""Triton Inference Server model configurations: the fields this exporter writes, held as data and
rendered in protobuf text format (``config.pbtxt``, message ``inference.ModelConfig`` of Triton's
``model_config.proto``). Nothing here knows plans or segments; :mod:`trt_backend.export.repo` fills
these in. The tests parse every rendered config with Triton's own generated schema."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import onnx

from trt_backend.errors import ExportError

ENSEMBLE = "ensemble"
TENSORRT_PLAN = "tensorrt_plan"
ONNXRUNTIME = "onnxruntime"
KIND_GPU, KIND_CPU = "KIND_GPU", "KIND_CPU"

# ONNX element type -> Triton data type (model_config.proto's DataType)
DATA_TYPES: dict[int, str] = {
    onnx.TensorProto.BOOL: "TYPE_BOOL", onnx.TensorProto.UINT8: "TYPE_UINT8", onnx.TensorProto.UINT16: "TYPE_UINT16",
    onnx.TensorProto.UINT32: "TYPE_UINT32", onnx.TensorProto.UINT64: "TYPE_UINT64", onnx.TensorProto.INT8: "TYPE_INT8",
    onnx.TensorProto.INT16: "TYPE_INT16", onnx.TensorProto.INT32: "TYPE_INT32", onnx.TensorProto.INT64: "TYPE_INT64",
    onnx.TensorProto.FLOAT16: "TYPE_FP16", onnx.TensorProto.FLOAT: "TYPE_FP32", onnx.TensorProto.DOUBLE: "TYPE_FP64",
    onnx.TensorProto.STRING: "TYPE_STRING", onnx.TensorProto.BFLOAT16: "TYPE_BF16",
}


@dataclass(frozen=True)
class TensorConfig:
    """One model input or output: ``dims`` without the batch dim when the model batches, -1 where
    a dim varies. ``reshape``: the shape the model itself gives the tensor (without the batch
    dim), where it differs from ``dims``: a tensor whose only dim is the batch is ``dims [1]``
    reshaped to ``[]``, as Triton's model configuration declares one (``dims`` must not be empty)."""

    name: str
    data_type: str
    dims: tuple[int, ...]
    is_shape_tensor: bool = False
    reshape: tuple[int, ...] | None = None


@dataclass(frozen=True)
class EnsembleStep:
    """One step of an ensemble: model input/output name -> ensemble tensor name."""

    model_name: str
    input_map: Mapping[str, str]
    output_map: Mapping[str, str]


@dataclass
class ModelConfig:
    """The fields of ``inference.ModelConfig`` this exporter writes."""

    name: str
    platform: str | None = None
    backend: str | None = None
    max_batch_size: int = 0
    inputs: list[TensorConfig] = field(default_factory=list)
    outputs: list[TensorConfig] = field(default_factory=list)
    instance_kind: str | None = None
    instance_count: int = 1
    instance_profiles: tuple[str, ...] = ()
    default_model_filename: str | None = None
    cc_model_filenames: dict[str, str] = field(default_factory=dict)
    dynamic_batching: bool = False
    tensorrt_accelerator: dict[str, str] | None = None  # onnxruntime + TensorRT execution accelerator
    steps: list[EnsembleStep] = field(default_factory=list)

    def render(self) -> str:
        return render_config(self)


def tensor_config(vi: onnx.ValueInfoProto, *, batched: bool, what: str, is_shape_tensor: bool = False) -> TensorConfig:
    """A model input/output from an ONNX value: its Triton type and dims (-1 where not a fixed
    size; without the leading batch dim when ``batched``). ExportError for what Triton's model
    configuration cannot declare."""
    if not vi.type.HasField("tensor_type"):
        raise ExportError(f"{what} '{vi.name}' is a {vi.type.WhichOneof('value') or 'value of unknown type'}, not a "
                          "tensor; a Triton model configuration declares tensors only, as inputs, outputs and what "
                          "an ensemble passes between its models (an ONNX Runtime model's sequence or map output, "
                          "such as skl2onnx's ZipMap, has no Triton type: export the model without it)")
    tt = vi.type.tensor_type
    if tt.elem_type not in DATA_TYPES:
        name = onnx.TensorProto.DataType.Name(tt.elem_type) if tt.elem_type else "unknown"
        raise ExportError(f"{what} '{vi.name}' has element type {name}, which Triton has no data type for")
    if not tt.HasField("shape"):
        raise ExportError(f"{what} '{vi.name}' has no known rank; Triton's configuration needs the rank of every "
                          "model input and output")
    dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1 for d in tt.shape.dim)
    if batched and len(dims) == 1:  # [batch]: Triton sees [batch, 1], the model gets its [batch]
        return TensorConfig(vi.name, DATA_TYPES[tt.elem_type], (1,), is_shape_tensor, reshape=())
    if batched:
        dims = dims[1:]
    if not dims:
        raise ExportError(f"{what} '{vi.name}' is a scalar; Triton's configuration cannot declare one in a model "
                          f"{'whose batch dim is its only dim' if batched else 'without batching'} (dims must not "
                          "be empty)")
    return TensorConfig(vi.name, DATA_TYPES[tt.elem_type], dims, is_shape_tensor)


# ---------------------------------------------------------------- protobuf text format


def quote(text: str) -> str:
    """A protobuf text-format string literal."""
    out = []
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\{ord(ch):03o}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _dims(dims: Sequence[int]) -> str:
    return "[ " + ", ".join(str(d) for d in dims) + " ]" if dims else "[ ]"


def _tensors(key: str, tensors: Sequence[TensorConfig]) -> list[str]:
    if not tensors:
        return []
    items = []
    for t in tensors:
        body = [f"    name: {quote(t.name)}", f"    data_type: {t.data_type}", f"    dims: {_dims(t.dims)}"]
        if t.reshape is not None:
            body.append(f"    reshape: {{ shape: {_dims(t.reshape)} }}")
        if t.is_shape_tensor:
            body.append("    is_shape_tensor: true")
        items.append("  {\n" + "\n".join(body) + "\n  }")
    return [f"{key} [\n" + ",\n".join(items) + "\n]"]


def _map(key: str, entries: Mapping[str, str], indent: str) -> list[str]:
    return [f"{indent}{key} {{ key: {quote(k)} value: {quote(v)} }}" for k, v in entries.items()]


def render_config(c: ModelConfig) -> str:
    """``c`` as ``config.pbtxt`` text."""
    lines = [f"name: {quote(c.name)}"]
    if c.platform:
        lines.append(f"platform: {quote(c.platform)}")
    if c.backend:
        lines.append(f"backend: {quote(c.backend)}")
    lines.append(f"max_batch_size: {c.max_batch_size}")
    if c.default_model_filename:
        lines.append(f"default_model_filename: {quote(c.default_model_filename)}")
    lines += _map("cc_model_filenames", c.cc_model_filenames, "")
    lines += _tensors("input", c.inputs)
    lines += _tensors("output", c.outputs)
    if c.instance_kind:
        group = [f"    count: {c.instance_count}", f"    kind: {c.instance_kind}"]
        if c.instance_profiles:
            group.append("    profile: [ " + ", ".join(quote(p) for p in c.instance_profiles) + " ]")
        lines.append("instance_group [\n  {\n" + "\n".join(group) + "\n  }\n]")
    if c.dynamic_batching:
        lines.append("dynamic_batching { }")
    if c.tensorrt_accelerator is not None:
        acc = ['        name: "tensorrt"'] + _map("parameters", c.tensorrt_accelerator, "        ")
        lines.append("optimization {\n  execution_accelerators {\n    gpu_execution_accelerator: [\n      {\n"
                     + "\n".join(acc) + "\n      }\n    ]\n  }\n}")
    if c.steps:
        steps = []
        for s in c.steps:
            body = [f"      model_name: {quote(s.model_name)}", "      model_version: -1"]
            body += _map("input_map", s.input_map, "      ") + _map("output_map", s.output_map, "      ")
            steps.append("    {\n" + "\n".join(body) + "\n    }")
        lines.append("ensemble_scheduling {\n  step [\n" + ",\n".join(steps) + "\n  ]\n}")
    return "\n".join(lines) + "\n"

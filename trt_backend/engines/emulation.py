"""The model ONNX Runtime runs to emulate, on CPU, a TensorRT segment in the precision its engine
is built in, so that ``compare`` and the precision search measure the error the engine will have
(apart from TensorRT's own fusions and kernel choices).

- fp16 and bf16: the transformed segment widened back to fp32, every 16-bit tensor rounded
  through its 16-bit type where an op makes it (a Cast there and back after each op that
  computes), weights keeping their 16-bit values: what the engine holds between layers, computed
  with fp32 accumulation as TensorRT's kernels do. (Not the 16-bit model itself: ONNX Runtime's
  CPU provider runs ops it has no fp16 kernel for in fp32 between casts it inserts, then removes
  the cast pairs between two such ops, so (x + 1000) - 1000 came back exact in "fp16"; and it has
  almost no bf16 kernels.)
- int8 (int8 with fp16 for the rest, :mod:`trt_backend.engines.quantize`): the segment with its
  Q/DQ and its fp16 remainder, widened and rounded as fp16 is; ONNX Runtime runs Q/DQ as the
  rounding and clipping they describe. A DequantizeLinear's output is not rounded to fp16: TensorRT
  fuses the DQ into the int8 kernel that reads it (int32 accumulation, rescaled in fp32), so the
  dequantized values are never held in 16 bits; what that kernel makes is rounded like any fp16 op's.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from partitioner.graph import fresh_name
from trt_backend.engines.builder import BuildOptions, segment_precision
from trt_backend.engines.precision import LOW_TYPES, PrecisionResult, apply_precision
from trt_backend.engines.quantize import int8_or_fp16
from trt_backend.ort.options import OrtOptions

BF16, F32 = TensorProto.BFLOAT16, TensorProto.FLOAT
# Ops whose outputs hold only values of their inputs (or their negation, or max of them): a bf16
# input makes a bf16-exact output, so no rounding is needed after them.
_EXACT = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Concat", "Split",
                    "Slice", "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Pad", "MaxPool", "Relu",
                    "Neg", "Abs", "Max", "Min", "Where", "DepthToSpace", "SpaceToDepth", "ReduceMax", "ReduceMin",
                    "Cast", "CastLike", "Constant", "ConstantOfShape", "Shape", "Size"})
# Ops TensorRT fuses into the kernel reading their output: nothing holds it in 16 bits.
_FUSED = frozenset({"DequantizeLinear"})

Quantizer = Callable[..., onnx.ModelProto]  # (segment[, nodes to leave float]) -> segment with Q/DQ


@dataclass(frozen=True)
class Emulation:
    """What an emulated segment runs: ``model`` (for ONNX Runtime CPU) and the ``precision`` it
    stands for ("fp32" when the transform failed and the builder would build fp32 too)."""

    model: onnx.ModelProto
    precision: str


def bf16_as_fp32(model: onnx.ModelProto) -> onnx.ModelProto:
    """A bf16-transformed model computing in fp32, every bf16 tensor rounded through bf16 where
    an op makes it: the numbers a bf16 engine would hold between layers, on kernels ONNX Runtime
    has."""
    return rounded_in_fp32(model, BF16)


def rounded_in_fp32(model: onnx.ModelProto, low: int) -> onnx.ModelProto:
    """A model transformed to ``low`` (fp16 or bf16) computing in fp32, every ``low`` tensor
    rounded through ``low`` where an op makes it (a Cast there and back, which ONNX Runtime keeps)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    inferred = onnx.shape_inference.infer_shapes(model).graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*inferred.input, *inferred.value_info, *inferred.output)
             if v.type.WhichOneof("value") == "tensor_type"}
    types.update({t.name: t.data_type for t in g.initializer})
    names = {n for node in g.node for n in (*node.input, *node.output)} | set(types)
    for t in g.initializer:
        if t.data_type == low:
            t.CopyFrom(_widened(t, t.name))
    nodes: list[onnx.NodeProto] = []
    for node in g.node:
        for a in node.attribute:
            if a.name == "value" and a.type == onnx.AttributeProto.TENSOR and a.t.data_type == low:
                a.t.CopyFrom(_widened(a.t, a.t.name))
        after: list[onnx.NodeProto] = []
        cast_to_low = node.op_type == "Cast" and any(a.name == "to" and a.i == low for a in node.attribute)
        for k, name in enumerate(node.output):
            if not name or types.get(name) != low or (node.op_type in _EXACT | _FUSED and not cast_to_low):
                continue
            rounded = fresh_name(f"{name}_low", names)
            if cast_to_low:  # the model's own rounding: keep it, then widen its result
                node.output[k] = rounded
            else:
                raw = fresh_name(f"{name}_fp32", names)
                node.output[k] = raw
                after.append(helper.make_node("Cast", [raw], [rounded], to=low, name=fresh_name(f"{raw}_round", names)))
            after.append(helper.make_node("Cast", [rounded], [name], to=F32,
                                          name=fresh_name(f"{rounded}_widen", names)))
        nodes.append(node)
        nodes.extend(after)
    nodes = _boundary_keeps_low(g, nodes, low, names)
    del g.node[:]
    g.node.extend(nodes)
    for v in g.value_info:
        if v.type.tensor_type.elem_type == low:
            v.type.tensor_type.elem_type = F32
    return out


def _boundary_keeps_low(g: onnx.GraphProto, nodes: list[onnx.NodeProto], low: int, names: set[str]
                        ) -> list[onnx.NodeProto]:
    """Graph inputs and outputs already in ``low`` (a model exported in fp16) keep their dtype:
    widened by a Cast after the input, narrowed by one before the output."""
    renames: dict[str, str] = {}
    head: list[onnx.NodeProto] = []
    for v in g.input:
        if v.type.tensor_type.elem_type == low:
            renames[v.name] = fresh_name(f"{v.name}_wide", names)
            head.append(helper.make_node("Cast", [v.name], [renames[v.name]], to=F32,
                                         name=fresh_name(f"{v.name}_widen", names)))
    tail: list[onnx.NodeProto] = []
    for v in g.output:
        if v.type.tensor_type.elem_type == low and v.name not in renames:
            renames[v.name] = fresh_name(f"{v.name}_wide", names)
            tail.append(helper.make_node("Cast", [renames[v.name]], [v.name], to=low,
                                         name=fresh_name(f"{v.name}_narrow", names)))
    if not renames:
        return nodes
    for node in nodes:
        node.input[:] = [renames.get(n, n) for n in node.input]
        node.output[:] = [renames.get(n, n) for n in node.output]
    return head + nodes + tail


def _widened(tensor: TensorProto, name: str) -> TensorProto:
    return numpy_helper.from_array(np.asarray(numpy_helper.to_array(tensor)).astype(np.float32), name)


def emulation_model(segment: onnx.ModelProto, precision: str, keep_fp32_ops: tuple[str, ...],
                    quantizer: Quantizer | None = None, keep_fp32_nodes: Iterable[str] = ()) -> Emulation:
    """The model that emulates ``segment`` built in ``precision`` (``quantizer``: int8's Q/DQ
    insertion, required for int8; ``keep_fp32_nodes``: nodes pinned to fp32, left out of the
    transform or the quantization). Raises PrecisionError when the transform fails."""
    pinned = tuple(keep_fp32_nodes)
    if precision == "int8":
        if quantizer is None:
            raise ValueError("int8 emulation needs a quantizer")  # An internal call error, not a user's.
        quantized = quantizer(segment, pinned) if pinned else quantizer(segment)
        precision = int8_or_fp16(quantized, segment)
        if precision == "fp32":  # (nothing reduced: built as it is, see builder.prepared_segment)
            return Emulation(segment, "fp32")
        return Emulation(rounded_in_fp32(quantized, TensorProto.FLOAT16), precision)
    if precision not in ("fp16", "bf16"):
        return Emulation(segment, "fp32")
    result: PrecisionResult = apply_precision(segment, precision, keep_fp32_ops, pinned)
    return Emulation(rounded_in_fp32(result.model, LOW_TYPES[precision]), precision)


def segment_emulation(segment: onnx.ModelProto, options: BuildOptions, quantizer: Quantizer | None = None
                      ) -> Emulation:
    """The emulation of ``segment`` as ``options`` would build it (auto: its plan's precision and
    pinned nodes)."""
    precision, pinned = segment_precision(segment, options)
    return emulation_model(segment, precision, options.keep_fp32_ops, quantizer, pinned)


def emulation_of(model: onnx.ModelProto, precision: str) -> onnx.ModelProto:
    """What ONNX Runtime runs to emulate an engine built from ``model`` (a built form: casts for
    fp16/bf16, Q/DQ and an fp16 remainder for int8) in ``precision``: the same model, every 16-bit
    tensor rounded where an op makes it, computed in fp32 (see the module's notes)."""
    if precision in ("fp16", "int8"):
        return rounded_in_fp32(model, TensorProto.FLOAT16)
    if precision == "bf16":
        return rounded_in_fp32(model, BF16)
    return model


# Ops whose arithmetic ONNX Runtime replaces with its own fused integer kernels above "basic"
QUANTIZATION_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
                              "QLinearMatMul", "MatMulInteger", "ConvInteger"})


def is_quantized(model: onnx.ModelProto) -> bool:
    """Whether the main graph of ``model`` holds quantization ops (:data:`QUANTIZATION_OPS`)."""
    return any(n.op_type in QUANTIZATION_OPS for n in model.graph.node)


def reference_ort_options(model: onnx.ModelProto, options: OrtOptions) -> OrtOptions:
    """ONNX Runtime settings of a reference run of ``model``: for a quantized model graph
    optimisations off, so that the reference computes its quantization as ONNX defines it (as
    TensorRT does), not with ONNX Runtime's fused int8 kernels (above "basic") or its Q/DQ
    propagation and pair removal ("basic" already moves outputs by a quantization step); else
    ``options`` as they are."""
    return replace(options, graph_optimization_level="disable") if is_quantized(model) else options


def emulation_ort_options(options: OrtOptions, model: onnx.ModelProto | None = None) -> OrtOptions:
    """ONNX Runtime settings for a segment emulated in reduced precision: graph optimisations at
    most "basic". Measured, onnxruntime 1.32 on x86-64: at "extended" and above ONNX Runtime fuses
    Q/DQ around MatMul/Conv into its own int8 kernels, whose u8s8 arithmetic saturates (a two-MatMul
    int8 graph came back 0.64 off where the Q/DQ arithmetic it describes, and "basic", are 0.03
    off): that is not what TensorRT computes. (And at "all" the session of the fp16 form of a ViT
    segment crashes in native code while it is made.) Emulation measures numbers, not speed. A
    quantized ``model`` runs as its reference does (:func:`reference_ort_options`): optimisations off."""
    if model is not None and is_quantized(model):
        return reference_ort_options(model, options)
    if options.graph_optimization_level in ("disable", "basic"):
        return options
    return replace(options, graph_optimization_level="basic")

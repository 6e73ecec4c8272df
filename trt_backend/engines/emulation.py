"""The model ONNX Runtime runs to emulate, on CPU, a TensorRT segment in the precision its engine
is built in, so that ``compare`` and the precision search measure the error the engine will have
(apart from TensorRT's own fusions and kernel choices).

- fp16: the transformed segment as is. ONNX Runtime's CPU provider computes ops it has no fp16
  kernel for in fp32 between casts it inserts itself: every tensor is still rounded through fp16.
- bf16: ONNX Runtime's CPU kernels have almost no bfloat16, so the transformed segment is widened
  back to fp32 with every bf16 tensor rounded through bf16 where it is made (Cast to bf16 and
  back after each op that computes), weights keep their bf16 values.
- int8: the segment with its Q/DQ (:mod:`trt_backend.engines.quantize`); ONNX Runtime runs Q/DQ
  as the rounding and clipping they describe.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from partitioner.graph import fresh_name
from trt_backend.engines.precision import PrecisionResult, apply_precision
from trt_backend.ort.options import OrtOptions

BF16, F32 = TensorProto.BFLOAT16, TensorProto.FLOAT
# Ops whose outputs hold only values of their inputs (or their negation, or max of them): a bf16
# input makes a bf16-exact output, so no rounding is needed after them.
_EXACT = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Concat", "Split",
                    "Slice", "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Pad", "MaxPool", "Relu",
                    "Neg", "Abs", "Max", "Min", "Where", "DepthToSpace", "SpaceToDepth", "ReduceMax", "ReduceMin",
                    "Cast", "CastLike", "Constant", "ConstantOfShape", "Shape", "Size"})

Quantizer = Callable[[onnx.ModelProto], onnx.ModelProto]


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
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    inferred = onnx.shape_inference.infer_shapes(model).graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*inferred.input, *inferred.value_info, *inferred.output)
             if v.type.WhichOneof("value") == "tensor_type"}
    types.update({t.name: t.data_type for t in g.initializer})
    names = {n for node in g.node for n in (*node.input, *node.output)} | set(types)
    for t in g.initializer:
        if t.data_type == BF16:
            t.CopyFrom(_widened(t, t.name))
    nodes: list[onnx.NodeProto] = []
    for node in g.node:
        for a in node.attribute:
            if a.name == "value" and a.type == onnx.AttributeProto.TENSOR and a.t.data_type == BF16:
                a.t.CopyFrom(_widened(a.t, a.t.name))
        after: list[onnx.NodeProto] = []
        cast_to_bf16 = node.op_type == "Cast" and any(a.name == "to" and a.i == BF16 for a in node.attribute)
        for k, name in enumerate(node.output):
            if not name or types.get(name) != BF16 or (node.op_type in _EXACT and not cast_to_bf16):
                continue
            rounded = fresh_name(f"{name}_bf16", names)
            if cast_to_bf16:  # the model's own rounding: keep it, then widen its result
                node.output[k] = rounded
            else:
                raw = fresh_name(f"{name}_fp32", names)
                node.output[k] = raw
                after.append(helper.make_node("Cast", [raw], [rounded], to=BF16, name=fresh_name(f"{raw}_round", names)))
            after.append(helper.make_node("Cast", [rounded], [name], to=F32, name=fresh_name(f"{rounded}_widen", names)))
        nodes.append(node)
        nodes.extend(after)
    del g.node[:]
    g.node.extend(nodes)
    for v in (*g.value_info, *g.input, *g.output):
        if v.type.tensor_type.elem_type == BF16:
            v.type.tensor_type.elem_type = F32
    return out


def _widened(tensor: TensorProto, name: str) -> TensorProto:
    return numpy_helper.from_array(np.asarray(numpy_helper.to_array(tensor)).astype(np.float32), name)


def emulation_model(segment: onnx.ModelProto, precision: str, keep_fp32_ops: tuple[str, ...],
                    quantizer: Quantizer | None = None) -> Emulation:
    """The model that emulates ``segment`` built in ``precision`` (``quantizer``: int8's Q/DQ
    insertion, required for int8). Raises PrecisionError when the transform fails."""
    if precision == "int8":
        if quantizer is None:
            raise ValueError("int8 emulation needs a quantizer")  # (an internal call error, not a user's)
        return Emulation(quantizer(segment), "int8")
    if precision not in ("fp16", "bf16"):
        return Emulation(segment, "fp32")
    result: PrecisionResult = apply_precision(segment, precision, keep_fp32_ops)
    model = bf16_as_fp32(result.model) if precision == "bf16" else result.model
    return Emulation(model, precision)


def emulation_ort_options(options: OrtOptions) -> OrtOptions:
    """ONNX Runtime settings for a segment emulated in reduced precision: graph optimisations at
    most "extended". (Measured, onnxruntime 1.32: at "all" the session of the fp16 form of a ViT
    segment crashes in native code while it is made; "extended" loads it. Emulation measures
    numbers, not speed.)"""
    if options.graph_optimization_level != "all":
        return options
    return replace(options, graph_optimization_level="extended")

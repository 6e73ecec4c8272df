"""A Resize node inside a model: its constant inputs, the plugin predicate and a native stand-in.

The predicate answers "can the plugin run this node?" with a reason when it cannot: the
attributes, the input dtype and rank, constant-ness of roi/scales/sizes (they fix the output
shape), their lengths, and whether the output shape can be written as a TensorRT shape
expression."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from partitioner.model import Model
from partitioner.standin import Replacement

from .spec import (
    ONNX_DTYPES,
    Dim,
    ResizeParams,
    SpecError,
    make_params,
    read_attributes,
)

MAX_DYADIC_SHIFT = 16


def default_opset(model: Model) -> int:
    for o in model.proto.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    raise SpecError("the model imports no default-domain opset")


def constant(model: Model, name: str) -> np.ndarray | None:
    """Value of ``name`` when it is an initializer or a Constant node's output, else None."""
    index = model.index
    if name in index.initializer_protos and name not in index.graph_inputs:
        return numpy_helper.to_array(index.initializer_protos[name])
    producer = index.producer.get(name)
    if producer is None:
        return None
    node = model.proto.graph.node[producer]
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
        return None
    for attr in node.attribute:
        value = helper.get_attribute_value(attr)
        if attr.name == "value":
            return numpy_helper.to_array(value)
        if attr.name in ("value_float", "value_floats", "value_int", "value_ints"):
            return np.asarray(value)
    return None


def tensor_shape(model: Model, name: str) -> tuple[int, list[Dim]] | None:
    """(elem_type, dims) of a tensor, or None when its type or rank is unknown."""
    tp = model.index.types.get(name)
    if tp is None or tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return None
    dims: list[Dim] = []
    for d in tp.tensor_type.shape.dim:
        dims.append(int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None))
    return int(tp.tensor_type.elem_type), dims


@dataclass(frozen=True)
class ResizeNode:
    """A Resize node resolved against its model: attributes, input shape, plugin parameters."""

    node: onnx.NodeProto
    version: int
    in_shape: tuple[Dim, ...]
    elem_type: int
    params: ResizeParams


def _optional_input(node: onnx.NodeProto, k: int) -> str:
    return node.input[k] if len(node.input) > k else ""


def resolve(node: onnx.NodeProto, model: Model) -> ResizeNode:
    """The plugin's view of ``node``; :class:`SpecError` with the reason when it cannot run it."""
    opset = default_opset(model)
    attrs = read_attributes(node, opset)
    typed = tensor_shape(model, node.input[0])
    if typed is None:
        raise SpecError(f"dtype or rank of input '{node.input[0]}' is unknown")
    elem_type, in_shape = typed
    if elem_type not in ONNX_DTYPES:
        name = onnx.helper.tensor_dtype_to_np_dtype(elem_type).name if elem_type else "unknown"
        raise SpecError(f"input dtype {name}: the plugin kernel has float32, float16 and bfloat16 paths only")
    roles = {"scales": 1} if attrs.version == 10 else {"roi": 1, "scales": 2, "sizes": 3}
    values: dict[str, Any] = {}
    for role, k in roles.items():
        name = _optional_input(node, k)
        if not name:
            values[role] = None
            continue
        value = constant(model, name)
        unused = role == "roi" and attrs.coordinate_mode != "tf_crop_and_resize"
        if value is None and not unused:
            raise SpecError(f"{role} '{name}' is computed at run time; the plugin needs it constant "
                            "(it fixes the output shape and is baked into the kernel)")
        values[role] = value
    params = make_params(attrs, in_shape, values.get("roi"), values.get("scales"), values.get("sizes"))
    _check_shape_expressible(params, in_shape)
    _check_declared_output(model, node, params, in_shape)
    return ResizeNode(node, attrs.version, tuple(in_shape), elem_type, params)


def dyadic_shift(scale: float) -> int | None:
    """m when ``scale == 2**-m`` exactly (0 < m <= 16), else None."""
    for m in range(1, MAX_DYADIC_SHIFT + 1):
        if scale == 2.0 ** -m:
            return m
    return None


def _check_shape_expressible(params: ResizeParams, in_shape: list[Dim]) -> None:
    """A dynamic input length needs an exact integer rule for the output length: floor(s*n) is
    n*k for an integer scale k and n >> m for a scale 2**-m; other scales need a static length."""
    for d, size in enumerate(in_shape):
        scale = params.scales[d]
        if params.sizes[d] >= 0 or scale == 1.0 or isinstance(size, int):
            continue
        if scale == int(scale) or dyadic_shift(scale) is not None:
            continue
        raise SpecError(f"axis {d} has a dynamic length and scale {scale:g}: floor({scale:g} x n) has no exact "
                        "TensorRT shape expression (use sizes, a static length, or an integer or 1/2^k scale)")


def _check_declared_output(model: Model, node: onnx.NodeProto, params: ResizeParams, in_shape: list[Dim]) -> None:
    declared = tensor_shape(model, node.output[0])
    if declared is None:
        return
    ours = params.output_shape(in_shape)
    if len(declared[1]) != len(ours):
        raise SpecError(f"inconsistent output rank: declared {len(declared[1])}, input rank {len(ours)}")
    for d, (a, b) in enumerate(zip(declared[1], ours)):
        if isinstance(a, int) and isinstance(b, int) and a != b:
            raise SpecError(f"inconsistent output shape: axis {d} is declared {a} but scales/sizes give {b}")


def check(node: onnx.NodeProto, model: Model) -> str | None:
    """None when the plugin can run ``node``, else the reason."""
    try:
        resolve(node, model)
    except SpecError as e:
        return str(e)
    return None


def params(node: onnx.NodeProto, model: Model) -> ResizeParams:
    return resolve(node, model).params


def stand_in(node: onnx.NodeProto, model: Model) -> Replacement | None:
    """A native Resize (nearest, asymmetric, floor) with the same output shape and dtype: the
    parser validates the claimed node's neighbours with it in the node's place."""
    try:
        r = resolve(node, model)
    except SpecError:
        return None
    p, rank = r.params, r.params.rank
    out = p.output_shape(r.in_shape)
    prefix = f"{node.name}::standin"
    inits: list[onnx.TensorProto] = []
    attrs: dict[str, Any] = {"mode": "nearest"}
    if r.version > 10:
        attrs.update(coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    if all(isinstance(d, int) for d in list(r.in_shape) + out) and r.version > 10:
        inits.append(numpy_helper.from_array(np.array(out, np.int64), f"{prefix}.sizes"))
        inputs = [node.input[0], "", "", f"{prefix}.sizes"]
    elif all(p.sizes[d] < 0 or isinstance(r.in_shape[d], int) for d in range(rank)):
        # floor(n * (out + 0.5) / n) == out whatever the rounding; other axes keep their scale
        scales = [p.scales[d] if p.sizes[d] < 0 else (out[d] + 0.5) / r.in_shape[d] for d in range(rank)]
        inits.append(numpy_helper.from_array(np.array(scales, np.float32), f"{prefix}.scales"))
        inputs = [node.input[0], f"{prefix}.scales"] if r.version == 10 else [node.input[0], "", f"{prefix}.scales"]
    else:
        return None  # sizes on a dynamic length: no constant stand-in (the caller cuts the node out)
    if r.version == 11:  # roi and scales are required inputs in Resize-11
        inits.append(numpy_helper.from_array(np.zeros(0, np.float32), f"{prefix}.empty"))
        inputs = [name or f"{prefix}.empty" for name in inputs[:3]] + inputs[3:]
    return Replacement((helper.make_node("Resize", inputs, [node.output[0]], name=prefix, **attrs),), tuple(inits))

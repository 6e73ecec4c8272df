"""Constant shape arithmetic evaluated for shape inference.

Exporters compute shapes from constants with ops ONNX's data propagation has no rule for: torch's
attention export slices a shape up to ``Reshape(Mod(c1, c2), c3)``, and the Slice's end, the
Concat of the new shape and the rank of the Reshape after it then stay unknown (a ViT's 28 tensors
per model). :func:`fold_for_inference` evaluates such constant-only nodes (every input an
initializer of the model, a ``Constant`` or another folded node's output) for a handful of ops
whose ONNX semantics are plain integer or float arithmetic, and returns a copy of the model with
those nodes replaced by initializers holding their values: shape inference over that copy knows
what the model computes. The model itself is not changed; its nodes stay as they are."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

MAX_ELEMENTS = 4096  # values larger than this are not shape arithmetic: left to the model
_Values = dict[str, np.ndarray]


def fold_for_inference(proto: onnx.ModelProto) -> onnx.ModelProto | None:
    """A copy of ``proto`` with its foldable constant-only nodes replaced by initializers, or None
    where none folds. Only nodes of the default domain in :data:`FOLDERS`, with every input known
    and small, no subgraph, and no graph output among their outputs, are folded."""
    graph = proto.graph
    values = constant_values(graph)
    outputs = {vi.name for vi in graph.output}
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    folded: set[int] = set()
    for k, node in enumerate(graph.node):
        if any(o in outputs for o in node.output):
            continue
        result = fold_node(node, values, opset)
        if result is None:
            continue
        for name, value in zip([o for o in node.output if o], result):
            values[name] = value
        folded.add(k)
    if not folded:
        return None
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    del out.graph.node[:]
    out.graph.node.extend(n for k, n in enumerate(graph.node) if k not in folded)
    names = [o for k in sorted(folded) for o in graph.node[k].output if o]
    out.graph.initializer.extend(numpy_helper.from_array(np.asarray(values[name]), name) for name in names)
    return out


def constant_values(graph: onnx.GraphProto) -> _Values:
    """The values of ``graph``'s small initializers held in the model (not those that are graph
    inputs too: those can be fed otherwise)."""
    values: _Values = {}
    for t in graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL and _small(t.dims):
            try:
                values[t.name] = numpy_helper.to_array(t)
            except (ValueError, TypeError, KeyError):
                continue
    for vi in graph.input:
        values.pop(vi.name, None)
    return values


def fold_node(node: onnx.NodeProto, values: Mapping[str, np.ndarray], opset: int) -> list[np.ndarray] | None:
    """What ``node`` computes from ``values`` (each of its inputs among them), one array per named
    output, where it is in :data:`FOLDERS` (default domain, no subgraph) and its results are small;
    else None."""
    fold = FOLDERS.get(node.op_type)
    if fold is None or node.domain not in ("", "ai.onnx") \
            or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return None
    if any(name and name not in values for name in node.input):
        return None
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    args = [values[name] if name else None for name in node.input]
    try:
        with np.errstate(all="ignore"):
            result = fold(args, attrs, opset)
    except (ValueError, TypeError, IndexError, KeyError, OverflowError, ZeroDivisionError):
        return None
    if result is None or len(result) != len([o for o in node.output if o]) or any(not _small(r.shape) for r in result):
        return None
    return result


def _small(dims: Sequence[int]) -> bool:
    n = 1
    for d in dims:
        n *= int(d)
    return n <= MAX_ELEMENTS


def _same(args: Sequence[Any], count: int) -> bool:
    """``count`` inputs, all given, of one dtype (as ONNX's elementwise ops require)."""
    return len(args) == count and all(a is not None for a in args) and len({a.dtype for a in args}) == 1


def _constant(args: Sequence[Any], attrs: Mapping[str, Any], opset: int) -> list[np.ndarray] | None:
    if "value" in attrs:
        return [numpy_helper.to_array(attrs["value"])]
    if "value_int" in attrs:
        return [np.array(attrs["value_int"], dtype=np.int64)]
    if "value_ints" in attrs:
        return [np.array(list(attrs["value_ints"]), dtype=np.int64)]
    if "value_float" in attrs:
        return [np.array(attrs["value_float"], dtype=np.float32)]
    if "value_floats" in attrs:
        return [np.array(list(attrs["value_floats"]), dtype=np.float32)]
    return None  # (sparse or string values: not shape arithmetic)


def _arith(op: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., list[np.ndarray] | None]:
    def fold(args: Sequence[Any], attrs: Mapping[str, Any], opset: int) -> list[np.ndarray] | None:
        if not _same(args, 2) or args[0].dtype.kind not in "iuf":
            return None
        return [np.asarray(op(args[0], args[1])).astype(args[0].dtype)]
    return fold


def _div(args: Sequence[Any], attrs: Mapping[str, Any], opset: int) -> list[np.ndarray] | None:
    if not _same(args, 2) or args[0].dtype.kind not in "iuf":
        return None
    a, b = np.broadcast_arrays(args[0], args[1])
    if a.dtype.kind == "f":
        return [np.asarray(a / b).astype(a.dtype)]
    if np.any(b == 0):
        return None
    q = np.floor_divide(a, b)
    q = q + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0)))  # ONNX's integer Div truncates toward zero
    return [np.asarray(q).astype(a.dtype)]


def _mod(args: Sequence[Any], attrs: Mapping[str, Any], opset: int) -> list[np.ndarray] | None:
    if not _same(args, 2) or args[0].dtype.kind not in "iuf":
        return None
    a, b = args
    if a.dtype.kind in "iu" and np.any(b == 0):
        return None
    if int(attrs.get("fmod", 0)) == 1:
        return [np.asarray(np.fmod(a, b)).astype(a.dtype)]
    if a.dtype.kind == "f":
        return None  # (fmod=0 on floats is not valid ONNX)
    return [np.asarray(np.mod(a, b)).astype(a.dtype)]  # the sign of the divisor, as ONNX says


def _identity(args: Sequence[Any], attrs: Mapping[str, Any], opset: int) -> list[np.ndarray] | None:
    return [args[0]] if len(args) == 1 and args[0] is not None else None


def _reshape(args: Sequence[Any], attrs: Mapping[str, Any], opset: int) -> list[np.ndarray] | None:
    if len(args) != 2 or args[1] is None or args[1].dtype != np.int64 or args[1].ndim != 1:
        return None
    data, shape = args[0], [int(d) for d in args[1]]
    allow_zero = int(attrs.get("allowzero", 0)) == 1
    if not allow_zero:
        if any(d == 0 and k >= data.ndim for k, d in enumerate(shape)):
            return None
        shape = [data.shape[k] if d == 0 else d for k, d in enumerate(shape)]
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        return None
    return [np.reshape(data, shape)]


def _concat(args: Sequence[Any], attrs: Mapping[str, Any], opset: int) -> list[np.ndarray] | None:
    if not args or any(a is None for a in args) or len({a.dtype for a in args}) != 1 or "axis" not in attrs:
        return None
    return [np.concatenate(list(args), axis=int(attrs["axis"]))]


def _axes(args: Sequence[Any], attrs: Mapping[str, Any], opset: int) -> list[int] | None:
    """The axes of Squeeze/Unsqueeze: an attribute before opset 13, an input from it on."""
    if opset >= 13:
        return [int(a) for a in args[1]] if len(args) > 1 and args[1] is not None else None
    return [int(a) for a in attrs["axes"]] if "axes" in attrs else None


def _unsqueeze(args: Sequence[Any], attrs: Mapping[str, Any], opset: int) -> list[np.ndarray] | None:
    axes = _axes(args, attrs, opset)
    if not args or args[0] is None or not axes:
        return None
    rank = args[0].ndim + len(axes)
    normal = [a + rank if a < 0 else a for a in axes]
    if len(set(normal)) != len(normal) or any(not 0 <= a < rank for a in normal):
        return None
    return [np.expand_dims(args[0], tuple(sorted(normal)))]


def _squeeze(args: Sequence[Any], attrs: Mapping[str, Any], opset: int) -> list[np.ndarray] | None:
    if not args or args[0] is None:
        return None
    axes = _axes(args, attrs, opset)
    if axes is None:
        return [np.squeeze(args[0])]
    normal = [a + args[0].ndim if a < 0 else a for a in axes]
    if any(not 0 <= a < args[0].ndim or args[0].shape[a] != 1 for a in normal):
        return None
    return [np.squeeze(args[0], axis=tuple(normal))]


def _cast(args: Sequence[Any], attrs: Mapping[str, Any], opset: int) -> list[np.ndarray] | None:
    if len(args) != 1 or args[0] is None or "to" not in attrs:
        return None
    try:
        target = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(attrs["to"])))
    except (KeyError, TypeError, ValueError):
        return None
    x = args[0]
    if target.kind not in "iufb" or x.dtype.kind not in "iufb":
        return None
    if target.kind in "iu" and x.dtype.kind == "f" and not np.all(np.isfinite(x)):
        return None
    if target.kind in "iu" and x.dtype.kind in "iuf":
        info = np.iinfo(target)
        if np.any(x < info.min) or np.any(x > info.max):
            return None  # (out of range: what the runtime makes of it is not ONNX's to say)
    return [x.astype(target)]


def _gather(args: Sequence[Any], attrs: Mapping[str, Any], opset: int) -> list[np.ndarray] | None:
    if len(args) != 2 or any(a is None for a in args) or args[1].dtype.kind not in "i":
        return None
    data, indices = args
    axis = int(attrs.get("axis", 0))
    if not -data.ndim <= axis < data.ndim:
        return None
    size = data.shape[axis]
    if np.any(indices < -size) or np.any(indices >= size):
        return None
    return [np.take(data, indices, axis=axis)]


def _shape(args: Sequence[Any], attrs: Mapping[str, Any], opset: int) -> list[np.ndarray] | None:
    if len(args) != 1 or args[0] is None:
        return None
    dims = list(args[0].shape)
    start, end = int(attrs.get("start", 0)), attrs.get("end")
    return [np.array(dims[start:] if end is None else dims[start:int(end)], dtype=np.int64)]


# op type -> its evaluation: (inputs, attributes, default-domain opset) -> outputs, or None where
# it cannot be said exactly (the node is then left to the model)
FOLDERS: dict[str, Callable[[Sequence[Any], Mapping[str, Any], int], list[np.ndarray] | None]] = {
    "Constant": _constant, "Identity": _identity, "Add": _arith(np.add), "Sub": _arith(np.subtract),
    "Mul": _arith(np.multiply), "Div": _div, "Mod": _mod, "Reshape": _reshape, "Concat": _concat,
    "Unsqueeze": _unsqueeze, "Squeeze": _squeeze, "Cast": _cast, "Gather": _gather, "Shape": _shape,
}

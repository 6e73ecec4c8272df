"""Upper bounds of data-dependent dims, from what the graph guarantees.

How many boxes survive NonMaxSuppression, how many elements NonZero finds, depends on the data,
so what a calibration run happened to see is no profile for them: the next image may keep more
boxes. The graph bounds them all the same: NonZero finds at most as many elements as its input
holds, NonMaxSuppression keeps at most ``batches x classes x min(boxes, max_output_boxes_per_class)``,
TopK ``k``, Compress and Unique what they were given; and what flows from them keeps such a bound
through elementwise ops, Gather, RoiAlign, Concat, Slice, Transpose, Squeeze/Unsqueeze, Flatten,
Reshape (dims it copies), TopK, MatMul and Split. :class:`DimBounds` walks back from a tensor's dim
to a model input (bounded by its profile's max), a static dim, or such an op; where the walk finds
nothing, the caller falls back to what calibration saw, widened (see ``derive.OBSERVED_WIDEN``)."""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from partitioner import Model

# Ops whose output dims follow their inputs' dims one for one (broadcast where several).
ELEMENTWISE = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Mod", "Where", "And", "Or", "Xor", "Not",
    "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal",
    "Floor", "Ceil", "Round", "Sign", "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Sigmoid", "HardSigmoid", "Tanh",
    "Erf", "Sin", "Cos", "Softplus", "Softsign", "Clip", "Cast", "CastLike", "Identity", "Dropout", "Softmax",
    "LogSoftmax", "Hardmax", "IsNaN", "IsInf", "Gelu", "HardSwish", "Mish", "BitShift", "LayerNormalization",
    "BatchNormalization", "InstanceNormalization", "LpNormalization", "CumSum", "ThresholdedRelu",
})
DATA_DEPENDENT = frozenset({"NonZero", "NonMaxSuppression", "Compress", "Unique"})
_MAX_DEPTH = 400  # a walk this long gives up (deep plain chains end at inputs or static dims long before)

Bound = tuple[int | None, bool]  # (upper bound or None, whether a data-dependent op lies on the way)


class DimBounds:
    """Upper bounds of ``model``'s tensor dims; model inputs bounded by ``input_max`` (their
    profile's max shapes)."""

    def __init__(self, model: Model, input_max: Mapping[str, Sequence[int]]) -> None:
        self.model = model
        self.input_max = {k: tuple(v) for k, v in input_max.items()}
        self._memo: dict[tuple[str, int], Bound] = {}
        self._consts: dict[str, np.ndarray | None] = {}
        self._tainted: frozenset[str] | None = None

    def bound(self, tensor: str, dim: int, depth: int = 0) -> Bound:
        """(upper bound of ``tensor``'s dim ``dim`` or None, whether it depends on the data)."""
        rank = self.rank(tensor)
        if rank is None or not -rank <= dim < rank:
            return None, False
        dim %= rank
        key = (tensor, dim)
        if key not in self._memo:
            self._memo[key] = (None, False) if depth > _MAX_DEPTH else self._bound(tensor, dim, depth + 1)
        return self._memo[key]

    # ------------------------------------------------------------------ what is known without walking

    def rank(self, tensor: str) -> int | None:
        tp = self.model.index.types.get(tensor)
        if tp is None or tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
            value = self.const(tensor)
            return None if value is None else value.ndim
        return len(tp.tensor_type.shape.dim)

    def static(self, tensor: str, dim: int) -> int | None:
        tp = self.model.index.types.get(tensor)
        if tp is not None and tp.WhichOneof("value") == "tensor_type" and tp.tensor_type.HasField("shape"):
            d = tp.tensor_type.shape.dim[dim]
            if d.WhichOneof("value") == "dim_value":
                return int(d.dim_value)
        value = self.const(tensor)
        return None if value is None else int(value.shape[dim])

    def const(self, tensor: str) -> np.ndarray | None:
        """The value of an initializer or a Constant node's output, else None."""
        if tensor not in self._consts:
            value = None
            if tensor in self.model.index.initializers:
                init = next((t for t in self.model.proto.graph.initializer if t.name == tensor), None)
                value = numpy_helper.to_array(init) if init is not None and init.data_location != \
                    onnx.TensorProto.EXTERNAL and init.ByteSize() < 1 << 16 else None  # (shape-like values are small)
            else:
                i = self.model.index.producer.get(tensor)
                node = self.model.proto.graph.node[i] if i is not None else None
                if node is not None and node.op_type == "Constant":
                    attr = next((a for a in node.attribute if a.name == "value"), None)
                    if attr is not None:
                        value = numpy_helper.to_array(attr.t)
            self._consts[tensor] = value
        return self._consts[tensor]

    # ------------------------------------------------------------------ values of shape-like tensors

    def value_bounds(self, tensor: str, depth: int = 0) -> list[Bound] | None:
        """Per element of a small integer tensor computed from shapes (Shape, then Gather, Slice,
        Concat, Cast, Squeeze/Unsqueeze, Reshape, Identity of it, and constants): the bound of
        its value, as :meth:`bound` gives it for the dim it copies. None where another op
        computes it (its values are then only observed)."""
        if depth > _MAX_DEPTH:
            return None
        c = self.const(tensor)
        if c is not None:
            return [(int(v), False) for v in c.reshape(-1)] if c.dtype.kind in "iu" and c.ndim <= 1 else None
        i = self.model.index.producer.get(tensor)
        if i is None:
            return None
        node = self.model.proto.graph.node[i]
        op, ins = node.op_type, list(node.input)
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if op == "Shape":
            rank = self.rank(ins[0])
            if rank is None:
                return None
            start, end = int(attrs.get("start", 0)), int(attrs.get("end", rank))
            return [self.bound(ins[0], d) for d in range(rank)[slice(start, end)]]
        if op in ("Cast", "Identity", "Squeeze", "Unsqueeze", "Reshape", "Flatten"):
            return self.value_bounds(ins[0], depth + 1) if ins and ins[0] else None
        if op == "Concat":
            parts = [self.value_bounds(t, depth + 1) for t in ins if t]
            return None if any(p is None for p in parts) else [e for p in parts if p is not None for e in p]
        if op == "Gather" and len(ins) > 1:
            data, idx = self.value_bounds(ins[0], depth + 1), self.const(ins[1])
            if data is None or idx is None or idx.dtype.kind not in "iu":
                return None
            try:
                return [data[int(k)] for k in idx.reshape(-1)]
            except IndexError:
                return None
        if op in ("Add", "Mul", "Sub", "Max", "Min") and len(ins) == 2:
            return _arith(op, self.value_bounds(ins[0], depth + 1), self.value_bounds(ins[1], depth + 1),
                          self.const(ins[1]))
        if op == "Slice":
            data = self.value_bounds(ins[0], depth + 1)
            args = self._slice_args(ins, 1)
            if data is None or args is None or list(args) != [0] or args[0][2] == 0:
                return None
            return data[slice(*args[0])]  # ONNX clamps as Python does
        return None

    def _slice_args(self, ins: Sequence[str], rank: int) -> dict[int, tuple[int, int, int]] | None:
        """A Slice's constant (start, end, step) per axis it slices; None where they are not constants."""
        starts = self.const(ins[1]) if len(ins) > 1 and ins[1] else None
        ends = self.const(ins[2]) if len(ins) > 2 and ins[2] else None
        axes = self.const(ins[3]) if len(ins) > 3 and ins[3] else None
        steps = self.const(ins[4]) if len(ins) > 4 and ins[4] else None
        if starts is None or ends is None or ends.size != starts.size:
            return None
        axis_list = [int(a) % max(rank, 1) for a in axes.reshape(-1)] if axes is not None else list(range(starts.size))
        step_list = [int(v) for v in steps.reshape(-1)] if steps is not None else [1] * starts.size
        if len(axis_list) != starts.size or len(step_list) != starts.size:
            return None
        return {axis: (int(st), int(en), step) for axis, st, en, step
                in zip(axis_list, starts.reshape(-1), ends.reshape(-1), step_list)}

    def _slice_length(self, ins: Sequence[str], dim: int, rank: int) -> int | None:
        """The most a Slice can keep of axis ``dim`` from its constant starts/ends alone (both
        >= 0, step 1), whatever its input's length: ``end - start``. None where they do not say."""
        args = self._slice_args(ins, rank)
        if args is None or dim not in args:
            return None
        start, end, step = args[dim]
        if start < 0 or end < 0 or step != 1:
            return None
        return max(0, end - start)

    # ------------------------------------------------------------------ the walk

    def _bound(self, tensor: str, dim: int, depth: int) -> Bound:
        fixed = self.static(tensor, dim)
        if fixed is not None:
            return fixed, False
        if tensor in self.input_max:
            shape = self.input_max[tensor]
            return (int(shape[dim]), False) if dim < len(shape) else (None, False)
        i = self.model.index.producer.get(tensor)
        if i is None:
            return None, False
        node = self.model.proto.graph.node[i]
        op = node.op_type
        ins = list(node.input)
        rank = self.rank(tensor) or 0
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        def b(t: str, d: int) -> Bound:
            return self.bound(t, d, depth) if t else (None, False)

        if op in ELEMENTWISE:
            return _largest([b(t, dim - (rank - r)) for t in ins if t and (r := self.rank(t)) is not None
                             and dim - (rank - r) >= 0 and self.static(t, dim - (rank - r)) != 1]
                            or [(1, False)])
        if op == "Gather":
            axis = int(attrs.get("axis", 0)) % max(self.rank(ins[0]) or 1, 1)
            r_idx = self.rank(ins[1])
            if r_idx is None:
                return None, False
            if dim < axis:
                return b(ins[0], dim)
            if dim < axis + r_idx:
                return b(ins[1], dim - axis)
            return b(ins[0], dim - r_idx + 1)
        if op == "GatherElements":
            return b(ins[1], dim)
        if op == "RoiAlign":
            return b(ins[1], 0) if dim == 0 else b(ins[0], 1) if dim == 1 else (None, False)
        if op == "Concat":
            axis = int(attrs.get("axis", 0)) % max(rank, 1)
            parts = [b(t, dim) for t in ins if t]
            if dim != axis:
                return _largest(parts)
            if any(p[0] is None for p in parts):
                return None, any(p[1] for p in parts)
            return sum(p[0] for p in parts if p[0] is not None), any(p[1] for p in parts)
        if op == "Slice":
            within = b(ins[0], dim)  # (a slice holds at most what its input held)
            cut = self._slice_length(ins, dim, rank)
            if cut is not None and (within[0] is None or cut < within[0]):
                return cut, within[1]  # keep[:100]: at most 100 whatever the input held
            return within
        if op == "Split":
            return b(ins[0], dim)  # (a piece holds at most what its input held)
        if op == "Transpose":
            perm = attrs.get("perm") or list(reversed(range(rank)))
            return b(ins[0], int(perm[dim]))
        if op in ("Squeeze", "Unsqueeze"):
            return self._squeeze(op, ins, attrs, dim, rank, b)
        if op == "Flatten":
            axis = int(attrs.get("axis", 1)) % max(self.rank(ins[0]) or 1, 1)
            r_in = self.rank(ins[0]) or 0
            return _product([b(ins[0], d) for d in (range(axis) if dim == 0 else range(axis, r_in))])
        if op in ("ScatterElements", "ScatterND", "Scatter"):
            return b(ins[0], dim)  # the data's shape
        if op == "ConstantOfShape":  # its dims are its input's values
            values = self.value_bounds(ins[0], depth) if ins and ins[0] else None
            return values[dim] if values is not None and dim < len(values) else (None, False)
        if op == "Reshape":
            target = self.const(ins[1]) if len(ins) > 1 else None
            if target is not None and dim < target.size and int(target.reshape(-1)[dim]) == 0 \
                    and not attrs.get("allowzero", 0):
                return b(ins[0], dim)  # 0 copies the input's dim
            if target is not None and dim < target.size and int(target.reshape(-1)[dim]) == -1:
                # the inferred dim: the input's elements over the other (given) dims
                others = [int(v) for k, v in enumerate(target.reshape(-1)) if k != dim]
                in_rank = self.rank(ins[0])
                if in_rank is None or any(v <= 0 for v in others):
                    return None, False
                dims = [b(ins[0], d) for d in range(in_rank)]
                through = any(t for _, t in dims)
                if any(v is None for v, _ in dims):
                    return None, through
                return -(-math.prod(v for v, _ in dims if v is not None) // max(1, math.prod(others))), through
            return None, False
        if op == "MatMul":
            ra, rb = self.rank(ins[0]), self.rank(ins[1])
            if ra is None or rb is None:
                return None, False
            if dim == rank - 1:
                return b(ins[1], rb - 1)
            if dim == rank - 2 and ra >= 2:
                return b(ins[0], ra - 2)
            return _largest([b(t, dim - (rank - r)) for t, r in ((ins[0], ra), (ins[1], rb)) if dim - (rank - r) >= 0])
        if op == "TopK":
            axis = int(attrs.get("axis", -1)) % max(rank, 1)
            within = b(ins[0], dim)
            if dim != axis:
                return within
            k = self.const(ins[1])
            if k is not None and within[0] is not None:
                return min(int(k.reshape(-1)[0]), within[0]), within[1]
            return within
        if op == "NonZero":
            if dim == 0:
                return self.rank(ins[0]), True
            r_in = self.rank(ins[0]) or 0
            return _product([b(ins[0], d) for d in range(r_in)])[0], True
        if op == "NonMaxSuppression":
            if dim == 1:
                return 3, True
            batches, classes, spatial = b(ins[1], 0)[0], b(ins[1], 1)[0], b(ins[1], 2)[0]
            per_class = spatial
            mopc = self.const(ins[2]) if len(ins) > 2 and ins[2] else None
            if mopc is not None and mopc.size and per_class is not None:
                per_class = min(per_class, max(0, int(mopc.reshape(-1)[0])))
            if None in (batches, classes, per_class):
                return None, True
            return int(batches * classes * per_class), True  # type: ignore[operator]
        if op == "Compress":
            along, r_data = attrs.get("axis"), self.rank(ins[0])
            if along is not None and r_data is not None:
                return b(ins[0], dim)[0], dim == int(along) % r_data  # (other dims are the input's)
            return _product([b(ins[0], d) for d in range(r_data or 0)])[0], True
        if op == "Unique":  # every output holds at most as many entries as the input
            return _product([b(ins[0], d) for d in range(self.rank(ins[0]) or 0)])[0], True
        return None, self._after_data_dependent(tensor)  # an op without a rule here: no bound

    def _after_data_dependent(self, tensor: str) -> bool:
        """Whether a data-dependent op (NonZero, NonMaxSuppression...) is among ``tensor``'s
        producers' ancestors: then its unknown dims may depend on the data."""
        if self._tainted is None:
            index, nodes = self.model.index, self.model.proto.graph.node
            tainted: set[str] = set()
            for i in index.order:
                node = nodes[i]
                if node.op_type in DATA_DEPENDENT or any(t in tainted for t in index.reads[i]):
                    tainted.update(o for o in node.output if o)
            self._tainted = frozenset(tainted)
        return tensor in self._tainted

    def _squeeze(self, op: str, ins: list[str], attrs: Mapping[str, Any], dim: int, rank: int,
                 walk: Callable[[str, int], Bound]) -> Bound:
        axes_value = self.const(ins[1]) if len(ins) > 1 and ins[1] else None
        given = axes_value.reshape(-1).tolist() if axes_value is not None else list(attrs.get("axes") or [])
        axes = [int(a) for a in given]
        if not axes:
            return None, False
        if op == "Unsqueeze":
            axes = sorted(a % rank for a in axes)
            if dim in axes:
                return 1, False
            return walk(ins[0], dim - sum(a < dim for a in axes))
        r_in = self.rank(ins[0])
        if r_in is None:
            return None, False
        kept = [d for d in range(r_in) if d not in {a % r_in for a in axes}]
        return walk(ins[0], kept[dim]) if dim < len(kept) else (None, False)


def _largest(bounds: Sequence[Bound]) -> Bound:
    """The bound of a dim that equals (or broadcasts from) each of ``bounds``' dims."""
    if not bounds or any(v is None for v, _ in bounds):
        return None, any(d for _, d in bounds)
    return max(v for v, _ in bounds if v is not None), any(d for _, d in bounds)


def _product(bounds: Sequence[Bound]) -> Bound:
    if any(v is None for v, _ in bounds):
        return None, any(d for _, d in bounds)
    return math.prod(v for v, _ in bounds if v is not None), any(d for _, d in bounds)


def _arith(op: str, a: list[Bound] | None, b: list[Bound] | None, b_const: np.ndarray | None) -> list[Bound] | None:
    """Upper bounds of ``a op b`` per element (values that count things: non-negative), with
    numpy's broadcasting of a one-element side; None where the bound does not follow."""
    if a is None or b is None or (len(a) != len(b) and 1 not in (len(a), len(b))):
        return None
    n = max(len(a), len(b))
    out: list[Bound] = []
    for k in range(n):
        (x, tx), (y, ty) = a[k if len(a) > 1 else 0], b[k if len(b) > 1 else 0]
        through = tx or ty
        if op == "Min":
            known = [v for v in (x, y) if v is not None]
            out.append((min(known) if known else None, through))
        elif x is None or y is None:
            out.append((None, through))
        elif op == "Add":
            out.append((x + y, through))
        elif op == "Max":
            out.append((max(x, y), through))
        elif op == "Mul":
            out.append((x * y, through) if x >= 0 and y >= 0 else (None, through))
        else:  # Sub: only a constant subtrahend is exact (a bound minus a bound says nothing)
            exact = b_const is not None and b_const.size in (1, n)
            out.append((x - y, through) if exact else (None, through))
    return out


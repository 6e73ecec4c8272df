"""The rules of :mod:`trt_backend.profiles.bounds`, one per op: how an output dim (or a
shape tensor's values) of a node is bounded by its inputs' dims and values.

A rule gets the node as a :class:`Site` and answers at once (a :data:`Bound`), or with a
:class:`Need`: the dims and values it needs and how their bounds make its own. It never walks
the graph itself: :class:`~trt_backend.profiles.bounds.DimBounds` resolves every need with an
explicit stack, so no rule recurses."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

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

Bound = tuple[int | None, bool]  # Upper bound or None, whether a data-dependent op lies on the way.
ValueBounds = list[Bound] | None  # per element of a shape-like tensor; None: not computed from shapes
UNKNOWN: Bound = (None, False)

# What a rule may ask for: ("dim", tensor, axis) -> Bound, or ("value", tensor, 0) -> ValueBounds.
Query = tuple[str, str, int]


def dim(tensor: str, axis: int) -> Query:
    return ("dim", tensor, axis)


def value(tensor: str) -> Query:
    return ("value", tensor, 0)


@dataclass(frozen=True)
class Need:
    """A rule's answer when it depends on other tensors: what it needs, and how the results
    (in the order asked) make its own."""

    queries: tuple[Query, ...]
    combine: Callable[[list[Any]], Any]


class GraphFacts(Protocol):
    """What a rule may read of the graph without walking it."""

    def rank(self, tensor: str) -> int | None: ...

    def static(self, tensor: str, axis: int) -> int | None: ...

    def const(self, tensor: str) -> np.ndarray | None: ...


@dataclass(frozen=True)
class Site:
    """A node as a rule sees it: the op, its inputs, its attributes, and (for dim rules) the
    output axis asked about and the output's rank."""

    facts: GraphFacts
    op: str
    ins: list[str]
    attrs: dict[str, Any]
    axis: int = 0
    rank: int = 0
    out: int = 0  # which of the node's outputs is asked about

    def rank_of(self, tensor: str) -> int | None:
        return self.facts.rank(tensor) if tensor else None

    def const(self, tensor: str) -> np.ndarray | None:
        return self.facts.const(tensor) if tensor else None

    def input(self, k: int) -> str:
        return self.ins[k] if k < len(self.ins) else ""


DimRule = Callable[[Site], Bound | Need]
ValueRule = Callable[[Site], ValueBounds | Need]


def follow(tensor: str, axis: int) -> Bound | Need:
    """The bound of ``tensor``'s dim ``axis`` as it is (a dim copied one for one)."""
    return Need((dim(tensor, axis),), _first) if tensor else UNKNOWN


def _first(results: list[Any]) -> Any:
    return results[0]


def slice_args(site: Site, rank: int) -> dict[int, tuple[int, int, int]] | None:
    """A Slice's constant (start, end, step) per axis it slices; None where they are not constants."""
    starts, ends, axes, steps = (site.const(site.input(k)) for k in range(1, 5))
    if starts is None or ends is None or ends.size != starts.size:
        return None
    axis_list = [int(a) % max(rank, 1) for a in axes.reshape(-1)] if axes is not None else list(range(starts.size))
    step_list = [int(v) for v in steps.reshape(-1)] if steps is not None else [1] * starts.size
    if len(axis_list) != starts.size or len(step_list) != starts.size:
        return None
    return {axis: (int(st), int(en), step) for axis, st, en, step
            in zip(axis_list, starts.reshape(-1), ends.reshape(-1), step_list)}


# ---------------------------------------------------------------------- combining bounds

def _largest(bounds: Sequence[Bound]) -> Bound:
    """The bound of a dim that equals (or broadcasts from) each of ``bounds``' dims."""
    if not bounds or any(v is None for v, _ in bounds):
        return None, any(d for _, d in bounds)
    return max(v for v, _ in bounds if v is not None), any(d for _, d in bounds)


def _product(bounds: Sequence[Bound]) -> Bound:
    if any(v is None for v, _ in bounds):
        return None, any(d for _, d in bounds)
    return math.prod(v for v, _ in bounds if v is not None), any(d for _, d in bounds)


def _all_dims(tensor: str, rank: int | None, combine: Callable[[list[Bound]], Any]) -> Any:
    """``combine`` of the bounds of every dim of ``tensor`` (rank unknown: combine of none)."""
    return Need(tuple(dim(tensor, d) for d in range(rank or 0)), combine)


# ---------------------------------------------------------------------- dim rules, one per op

def _elementwise(s: Site) -> Bound | Need:
    wanted = []
    for t in s.ins:
        r = s.rank_of(t) if t else None
        if r is None:
            continue
        d = s.axis - (s.rank - r)
        if d >= 0 and s.facts.static(t, d) != 1:  # A dim of 1 broadcasts: it bounds nothing.
            wanted.append(dim(t, d))
    return Need(tuple(wanted), _largest) if wanted else (1, False)


def _gather(s: Site) -> Bound | Need:
    axis = int(s.attrs.get("axis", 0)) % max(s.rank_of(s.ins[0]) or 1, 1)
    r_idx = s.rank_of(s.input(1))
    if r_idx is None:
        return UNKNOWN
    if s.axis < axis:
        return follow(s.ins[0], s.axis)
    if s.axis < axis + r_idx:
        return follow(s.ins[1], s.axis - axis)
    return follow(s.ins[0], s.axis - r_idx + 1)


def _roi_align(s: Site) -> Bound | Need:
    if s.axis == 0:
        return follow(s.input(1), 0)
    return follow(s.ins[0], 1) if s.axis == 1 else UNKNOWN


def _concat(s: Site) -> Bound | Need:
    axis = int(s.attrs.get("axis", 0)) % max(s.rank, 1)
    parts = tuple(dim(t, s.axis) for t in s.ins if t)
    if s.axis != axis:
        return Need(parts, _largest)

    def total(found: list[Bound]) -> Bound:
        through = any(p[1] for p in found)
        if any(p[0] is None for p in found):
            return None, through
        return sum(p[0] for p in found if p[0] is not None), through
    return Need(parts, total)


def _slice(s: Site) -> Bound | Need:
    args = slice_args(s, s.rank)
    cut = None
    if args is not None and s.axis in args:
        start, end, step = args[s.axis]
        if start >= 0 and end >= 0 and step == 1:
            cut = max(0, end - start)  # keep[:100]: at most 100 whatever the input held

    def kept(found: list[Bound]) -> Bound:
        within = found[0]  # A slice holds at most what its input held.
        if cut is not None and (within[0] is None or cut < within[0]):
            return cut, within[1]
        return within
    return Need((dim(s.ins[0], s.axis),), kept)


def _same_as_first_input(s: Site) -> Bound | Need:
    """Split's pieces hold at most what their input held; Scatter* keep their data's shape."""
    return follow(s.ins[0], s.axis)


def _transpose(s: Site) -> Bound | Need:
    perm = s.attrs.get("perm") or list(reversed(range(s.rank)))
    return follow(s.ins[0], int(perm[s.axis]))


def _squeeze_axes(s: Site) -> list[int]:
    given = s.const(s.input(1))
    return [int(a) for a in (given.reshape(-1).tolist() if given is not None else list(s.attrs.get("axes") or []))]


def _unsqueeze(s: Site) -> Bound | Need:
    axes = sorted(a % s.rank for a in _squeeze_axes(s))
    if not axes:
        return UNKNOWN
    if s.axis in axes:
        return 1, False
    return follow(s.ins[0], s.axis - sum(a < s.axis for a in axes))


def _squeeze(s: Site) -> Bound | Need:
    axes, r_in = _squeeze_axes(s), s.rank_of(s.ins[0])
    if not axes or r_in is None:
        return UNKNOWN
    kept = [d for d in range(r_in) if d not in {a % r_in for a in axes}]
    return follow(s.ins[0], kept[s.axis]) if s.axis < len(kept) else UNKNOWN


def _flatten(s: Site) -> Bound | Need:
    """[product of the dims before ``axis``, product of the rest]; ``axis`` may be the rank (all
    in the first: HF's attention mask, ``Flatten(axis=2)`` of [B, T], is [B * T, 1])."""
    r_in = s.rank_of(s.ins[0])
    if r_in is None:
        return UNKNOWN
    axis = int(s.attrs.get("axis", 1))
    axis = axis + r_in if axis < 0 else axis
    if not 0 <= axis <= r_in:
        return UNKNOWN
    return Need(tuple(dim(s.ins[0], d) for d in (range(axis) if s.axis == 0 else range(axis, r_in))), _product)


def _constant_of_shape(s: Site) -> Bound | Need:
    """Its dims are its input's values."""
    if not s.input(0):
        return UNKNOWN

    def at(found: list[Any]) -> Bound:
        values = found[0]
        return values[s.axis] if values is not None and s.axis < len(values) else UNKNOWN
    return Need((value(s.ins[0]),), at)


def _reshape(s: Site) -> Bound | Need:
    target = s.const(s.input(1))
    if target is None and len(s.ins) > 1:  # a target computed from shapes: its element, where positive
        return Need((value(s.ins[1]),), lambda found: _computed_target(found[0], s.axis))
    if target is None or s.axis >= target.size:
        return UNKNOWN
    wanted = [int(v) for v in target.reshape(-1)]
    if wanted[s.axis] == 0 and not s.attrs.get("allowzero", 0):
        return follow(s.ins[0], s.axis)  # 0 copies the input's dim
    if wanted[s.axis] != -1:
        return UNKNOWN
    # the inferred dim: the input's elements over the other (given) dims
    others = [v for k, v in enumerate(wanted) if k != s.axis]
    in_rank = s.rank_of(s.ins[0])
    if in_rank is None or any(v <= 0 for v in others):
        return UNKNOWN

    def inferred(found: list[Bound]) -> Bound:
        total = _product(found)
        if total[0] is None:
            return total
        return -(-total[0] // max(1, math.prod(others))), total[1]
    return _all_dims(s.ins[0], in_rank, inferred)


def _computed_target(found: ValueBounds, axis: int) -> Bound:
    """A Reshape's dim from the bound of its computed target's element (``[-1, seq]`` made from
    the input's Shape): that bound where it is 1 or more; unknown where it may be 0 (copy the
    input's dim) or -1 (inferred), or is not known."""
    if found is None or axis >= len(found):
        return UNKNOWN
    bound, through = found[axis]
    return (bound, through) if bound is not None and bound >= 1 else (None, through)


def _expand(s: Site) -> Bound | Need:
    """The broadcast of the input's dim and the target shape's element: a constant element
    other than 1 is the dim; otherwise the larger of the two."""
    r_in = s.rank_of(s.ins[0])
    if r_in is None or not s.input(1):
        return UNKNOWN
    d_in = s.axis - (s.rank - r_in)  # < 0: the input broadcasts as 1 there.
    shape = s.const(s.ins[1])
    if shape is not None:
        k = s.axis - (s.rank - shape.size)
        element = int(shape.reshape(-1)[k]) if k >= 0 else 1
        if element != 1:
            return element, False
        return follow(s.ins[0], d_in) if d_in >= 0 else (1, False)

    def broadcast(found: list[Any]) -> Bound:
        values = found[0]
        if values is None:
            return UNKNOWN
        k = s.axis - (s.rank - len(values))
        element = values[k] if k >= 0 else (1, False)
        return _largest([element, found[1]]) if d_in >= 0 else element
    return Need((value(s.ins[1]),) + ((dim(s.ins[0], d_in),) if d_in >= 0 else ()), broadcast)


def _matmul(s: Site) -> Bound | Need:
    a, b = s.ins[0], s.ins[1]
    ra, rb = s.rank_of(a), s.rank_of(b)
    if ra is None or rb is None:
        return UNKNOWN
    if s.axis == s.rank - 1:
        return follow(b, rb - 1)
    if s.axis == s.rank - 2 and ra >= 2:
        return follow(a, ra - 2)
    batch = tuple(dim(t, s.axis - (s.rank - r)) for t, r in ((a, ra), (b, rb)) if s.axis - (s.rank - r) >= 0)
    return Need(batch, _largest)


def _topk(s: Site) -> Bound | Need:
    axis = int(s.attrs.get("axis", -1)) % max(s.rank, 1)
    if s.axis != axis:
        return follow(s.ins[0], s.axis)
    k = s.const(s.input(1))

    def at_most_k(found: list[Bound]) -> Bound:
        within = found[0]
        if k is not None and within[0] is not None:
            return min(int(k.reshape(-1)[0]), within[0]), within[1]
        return within
    return Need((dim(s.ins[0], s.axis),), at_most_k)


def _det(s: Site) -> Bound | Need:
    """Det of ``[*, M, M]`` is ``[*]``: the leading dims are the input's."""
    return follow(s.ins[0], s.axis)


def _if(s: Site) -> Bound:
    """An If's output dim as its branches declare their outputs: the size both give (shape
    inference gives it already); where they give different sizes, the branch the data takes
    decides: data-dependent, at most the larger; else (a branch leaves it open) unknown."""
    sizes = []
    for branch in ("then_branch", "else_branch"):
        graph = s.attrs.get(branch)
        if graph is None or s.out >= len(graph.output):
            return UNKNOWN
        declared = graph.output[s.out].type.tensor_type
        if not declared.HasField("shape") or s.axis >= len(declared.shape.dim) \
                or not declared.shape.dim[s.axis].HasField("dim_value"):
            return UNKNOWN
        sizes.append(int(declared.shape.dim[s.axis].dim_value))
    return (sizes[0], False) if sizes[0] == sizes[1] else (max(sizes), True)


def _non_zero(s: Site) -> Bound | Need:
    r_in = s.rank_of(s.ins[0])
    if s.axis == 0:
        return r_in, True
    return _all_dims(s.ins[0], r_in, lambda found: (_product(found)[0], True))


def _non_max_suppression(s: Site) -> Bound | Need:
    if s.axis == 1:
        return 3, True
    mopc = s.const(s.input(2))
    scores = s.input(1)

    def kept(found: list[Bound]) -> Bound:
        batches, classes, per_class = found[0][0], found[1][0], found[2][0]
        if mopc is not None and mopc.size and per_class is not None:
            per_class = min(per_class, max(0, int(mopc.reshape(-1)[0])))
        if batches is None or classes is None or per_class is None:
            return None, True
        return int(batches * classes * per_class), True
    return Need((dim(scores, 0), dim(scores, 1), dim(scores, 2)), kept)


def _compress(s: Site) -> Bound | Need:
    along, r_data = s.attrs.get("axis"), s.rank_of(s.ins[0])
    if along is not None and r_data is not None:
        dependent = s.axis == int(along) % r_data  # Other dims are the input's.
        return Need((dim(s.ins[0], s.axis),), lambda found: (found[0][0], dependent))
    return _all_dims(s.ins[0], r_data, lambda found: (_product(found)[0], True))


def _unique(s: Site) -> Bound | Need:
    """Every output holds at most as many entries as the input."""
    return _all_dims(s.ins[0], s.rank_of(s.ins[0]), lambda found: (_product(found)[0], True))


DIM_RULES: dict[str, DimRule] = {
    **{op: _elementwise for op in ELEMENTWISE},
    "Gather": _gather,
    "GatherElements": lambda s: follow(s.input(1), s.axis),
    "RoiAlign": _roi_align,
    "Concat": _concat,
    "Slice": _slice,
    "Split": _same_as_first_input,
    "Transpose": _transpose,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Flatten": _flatten,
    "Scatter": _same_as_first_input,
    "ScatterElements": _same_as_first_input,
    "ScatterND": _same_as_first_input,
    "ConstantOfShape": _constant_of_shape,
    "Reshape": _reshape,
    "Expand": _expand,
    "MatMul": _matmul,
    "TopK": _topk,
    "Det": _det,
    "NonZero": _non_zero,
    "NonMaxSuppression": _non_max_suppression,
    "If": _if,
    "Compress": _compress,
    "Unique": _unique,
}


# ---------------------------------------------------------------------- value rules (shape tensors)

def _shape_values(s: Site) -> ValueBounds | Need:
    rank = s.rank_of(s.ins[0])
    if rank is None:
        return None
    start, end = int(s.attrs.get("start", 0)), int(s.attrs.get("end", rank))
    return Need(tuple(dim(s.ins[0], d) for d in range(rank)[slice(start, end)]), list)


def _passed_values(s: Site) -> ValueBounds | Need:
    """Cast, Identity, Squeeze/Unsqueeze, Reshape, Flatten of a shape tensor keep its values."""
    return Need((value(s.ins[0]),), _first) if s.ins and s.ins[0] else None


def _concat_values(s: Site) -> ValueBounds | Need:
    def joined(parts: list[ValueBounds]) -> ValueBounds:
        return None if any(p is None for p in parts) else [e for p in parts if p is not None for e in p]
    return Need(tuple(value(t) for t in s.ins if t), joined)


def _gather_values(s: Site) -> ValueBounds | Need:
    if len(s.ins) < 2:
        return None
    idx = s.const(s.ins[1])
    if idx is None or idx.dtype.kind not in "iu":
        return None

    def picked(found: list[ValueBounds]) -> ValueBounds:
        data = found[0]
        if data is None or idx is None:
            return None
        try:
            return [data[int(k)] for k in idx.reshape(-1)]
        except IndexError:
            return None
    return Need((value(s.ins[0]),), picked)


def _arith_values(s: Site) -> ValueBounds | Need:
    if len(s.ins) != 2:
        return None
    b_const = s.const(s.ins[1])
    return Need((value(s.ins[0]), value(s.ins[1])), lambda found: _arith(s.op, found[0], found[1], b_const))


def _slice_values(s: Site) -> ValueBounds | Need:
    args = slice_args(s, 1)
    if args is None or list(args) != [0] or args[0][2] == 0:
        return None
    start, end, step = args[0]
    # ONNX clamps as Python does.
    return Need((value(s.ins[0]),), lambda found: None if found[0] is None else found[0][slice(start, end, step)])


VALUE_RULES: dict[str, ValueRule] = {
    "Shape": _shape_values,
    **{op: _passed_values for op in ("Cast", "Identity", "Squeeze", "Unsqueeze", "Reshape", "Flatten")},
    "Concat": _concat_values,
    "Gather": _gather_values,
    **{op: _arith_values for op in ("Add", "Mul", "Sub", "Max", "Min")},
    "Slice": _slice_values,
}


def _arith(op: str, a: ValueBounds, b: ValueBounds, b_const: np.ndarray | None) -> ValueBounds:
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

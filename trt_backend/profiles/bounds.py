"""Upper bounds of data-dependent dims, from what the graph guarantees.

How many boxes survive NonMaxSuppression, how many elements NonZero finds, depends on the data,
so what a calibration run happened to see is no profile for them: the next image may keep more
boxes. The graph bounds them all the same: NonZero finds at most as many elements as its input
holds, NonMaxSuppression keeps at most ``batches x classes x min(boxes, max_output_boxes_per_class)``,
TopK ``k``, Compress and Unique what they were given; and what flows from them keeps such a bound
through the ops that have a rule in :mod:`~trt_backend.profiles.bound_rules` (elementwise ops,
Gather, Concat, Slice, Reshape, Expand, MatMul, TopK...).
:class:`DimBounds` walks back from a tensor's dim to a model input (bounded by its profile's max),
a static dim, or such an op; where the walk finds nothing, the caller falls back to what
calibration saw, widened (see ``derive.OBSERVED_WIDEN``).

Each op's rule answers at once or names the dims (and shape-tensor values) it needs and how to
combine their bounds; :class:`DimBounds` resolves those needs with an explicit stack, so a walk
up a graph of any depth uses no Python recursion."""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from partitioner import Model
from trt_backend.profiles.bound_rules import (
    DATA_DEPENDENT,
    DIM_RULES,
    ELEMENTWISE,
    UNKNOWN,
    VALUE_RULES,
    Bound,
    Need,
    Query,
    Site,
    ValueBounds,
    dim,
    follow,
    value,
)

__all__ = ["Bound", "DATA_DEPENDENT", "DimBounds", "ELEMENTWISE", "valued_tensors"]

# Ops an index passes through unchanged on its way from a Range to a Gather (moved, repeated, retyped).
_MOVES = frozenset({"Unsqueeze", "Squeeze", "Reshape", "Flatten", "Cast", "Identity", "Expand", "Transpose", "Tile",
                    "Slice"})
MAX_INDEX_STEPS = 32


def valued_tensors(model: Model) -> frozenset[str]:
    """The tensors of ``model`` whose values depend on its inputs' values, not only on their
    shapes and constants: Shape and Size read only their input's shape, unless a data-dependent op
    (NonZero, NonMaxSuppression...) made that shape."""
    index, nodes = model.index, model.proto.graph.node
    valued = {vi.name for vi in model.proto.graph.input} - index.initializers
    data_shaped: set[str] = set()  # tensors whose shape what a data-dependent op found decides
    for i in index.order:
        node, reads = nodes[i], index.reads[i]
        outputs = [o for o in node.output if o]
        if node.op_type in ("Shape", "Size"):
            if any(t in data_shaped for t in reads):
                valued.update(outputs)
            continue
        if node.op_type in DATA_DEPENDENT or any(t in data_shaped for t in reads):
            data_shaped.update(outputs)
        if node.op_type in DATA_DEPENDENT or any(t in valued for t in reads):
            valued.update(outputs)
    return frozenset(valued)


class DimBounds:
    """Upper bounds of ``model``'s tensor dims; model inputs bounded by ``input_max`` (their
    profile's max shapes)."""

    def __init__(self, model: Model, input_max: Mapping[str, Sequence[int]]) -> None:
        self.model = model
        self.input_max = {k: tuple(v) for k, v in input_max.items()}
        self._memo: dict[Query, Any] = {}
        self._consts: dict[str, np.ndarray | None] = {}
        self._shapes: dict[str, tuple[int | None, ...] | None] = {}
        self._tainted: frozenset[str] | None = None

    def bound(self, tensor: str, axis: int) -> Bound:
        """(upper bound of ``tensor``'s dim ``axis`` or None, whether it depends on the data)."""
        rank = self.rank(tensor)
        if rank is None or not -rank <= axis < rank:
            return UNKNOWN
        result: Bound = self._solve(dim(tensor, axis % rank))
        return result

    def value_bounds(self, tensor: str) -> list[Bound] | None:
        """Per element of a small integer tensor computed from shapes (Shape, then Gather, Slice,
        Concat, Cast, Squeeze/Unsqueeze, Reshape, Identity, arithmetic of it, and constants):
        the bound of its value, as :meth:`bound` gives it for the dim it copies. None where
        another op computes it (its values are then only observed)."""
        result: ValueBounds = self._solve(value(tensor))
        return result

    def index_bound(self, tensor: str) -> int | None:
        """Upper bound of every element of an integer tensor of indices made from shapes, as
        position ids are: a Range (step 1 or more) up to a limit computed from shapes, moved
        (Unsqueeze, Reshape, Cast, Expand...), offset (Add) and scaled (Mul, by non-negative
        bounds) by shape-computed values or other such indices; a constant's or a shape-computed
        tensor's own bound. None where another op makes it. (A walk of at most
        :data:`MAX_INDEX_STEPS` steps: indices are a few ops long, and a longer chain is not one.)"""
        return self._index_max(tensor, [MAX_INDEX_STEPS])

    def _index_max(self, tensor: str, budget: list[int]) -> int | None:
        budget[0] -= 1
        if budget[0] < 0:
            return None
        top = self._max_value(tensor)
        if top is not None:
            return top
        node = self._producer(tensor)
        if node is None:
            return None
        if node.op_type in _MOVES and node.input:
            return self._index_max(node.input[0], budget)
        if node.op_type == "Range" and len(node.input) == 3:
            step, limit = self.const(node.input[2]), self._max_value(node.input[1])
            if step is None or step.size != 1 or step.dtype.kind not in "iu" or int(step.reshape(-1)[0]) < 1 \
                    or limit is None:
                return None
            return limit - 1
        if node.op_type in ("Add", "Mul") and len(node.input) == 2:
            a = self._index_max(node.input[0], budget)
            b = self._index_max(node.input[1], budget) if a is not None else None
            if a is None or b is None:
                return None
            if node.op_type == "Add":
                return a + b
            return a * b if a >= 0 and b >= 0 else None
        return None

    def _max_value(self, tensor: str) -> int | None:
        """The largest element of a constant integer tensor, or the bound of every element of a
        tensor computed from shapes (:meth:`value_bounds`, none of them data-dependent)."""
        c = self.const(tensor)
        if c is not None:
            return int(c.max()) if c.dtype.kind in "iu" and c.size else None
        found = self.value_bounds(tensor)
        if not found or any(v is None or through for v, through in found):
            return None
        return max(int(v) for v, _ in found if v is not None)

    def table_overruns(self) -> list[tuple[str, int, int]]:
        """(node name, rows, index bound) of each Gather whose indices, made from shapes
        (:meth:`index_bound`), may reach past the rows it gathers from at the bounded shapes: of a
        constant table (position ids past a model's largest position), or of a tensor whose dim
        the graph bounds (a mask given fewer positions than the ids that pick from it)."""
        index, out = self.model.index, []
        for k, node in enumerate(self.model.proto.graph.node):
            if node.op_type != "Gather" or len(node.input) < 2:
                continue
            top = self.index_bound(node.input[1])  # (first: most indices are data, and the walk stops there)
            if top is None:
                continue
            data, axis = node.input[0], next((int(a.i) for a in node.attribute if a.name == "axis"), 0)
            if data in index.initializer_protos:
                dims = list(index.initializer_protos[data].dims)
                rows = int(dims[axis]) if -len(dims) <= axis < len(dims) else None
            else:  # (an upper bound of its rows: indices past it pass the rows it has too)
                found, through = self.bound(data, axis)
                rows = found if not through else None
            if rows is None:
                continue
            if top >= rows:
                out.append((node.name or f"node {k}", rows, top))
        return out

    def unproven_gathers(self, valued: Collection[str] | None = None) -> list[str]:
        """The Gathers (by name) whose indices are made from shapes (neither a constant nor
        computed from an input's values: a Range up to a dim, offsets and strides of dims) where
        the bounds tell neither those indices' largest nor the rows they pick from: GPT-2's mask,
        flattened to a length the graph infers (Reshape's -1), indexed by positions counted from
        the cache and the tokens. Whether such indices stay within their rows at given shapes only
        a run tells (see :meth:`table_overruns` for the ones the bounds decide). ``valued``: the
        model's :func:`valued_tensors`, where the caller has them."""
        nodes, out = self.model.proto.graph.node, []
        valued = valued if valued is not None else valued_tensors(self.model)
        for k, node in enumerate(nodes):
            if node.op_type != "Gather" or len(node.input) < 2 or node.input[1] in valued \
                    or self.const(node.input[1]) is not None:
                continue
            data, axis = node.input[0], next((int(a.i) for a in node.attribute if a.name == "axis"), 0)
            if self.index_bound(node.input[1]) is not None and self._rows_told(data, axis):
                continue  # (decided by table_overruns)
            out.append(node.name or f"node {k}")
        return out

    def _rows_told(self, data: str, axis: int) -> bool:
        """Whether the rows a Gather picks from ``data`` along ``axis`` are known (a constant's) or
        bounded without the data (what :meth:`table_overruns` compares its indices with)."""
        if data in self.model.index.initializer_protos:
            return True
        found, through = self.bound(data, axis)
        return found is not None and not through

    # ------------------------------------------------------------------ what is known without walking

    def rank(self, tensor: str) -> int | None:
        dims = self._dims(tensor)
        return None if dims is None else len(dims)

    def static(self, tensor: str, axis: int) -> int | None:
        dims = self._dims(tensor)
        return None if dims is None else dims[axis]

    def _dims(self, tensor: str) -> tuple[int | None, ...] | None:
        """``tensor``'s dims as its type declares them (None where symbolic or unknown), else
        a constant's; None where its rank is unknown. Read once per tensor."""
        if tensor not in self._shapes:
            tp = self.model.index.types.get(tensor)
            if tp is not None and tp.WhichOneof("value") == "tensor_type" and tp.tensor_type.HasField("shape"):
                self._shapes[tensor] = tuple(int(d.dim_value) if d.WhichOneof("value") == "dim_value" else None
                                             for d in tp.tensor_type.shape.dim)
            else:
                c = self.const(tensor)
                self._shapes[tensor] = None if c is None else tuple(int(n) for n in c.shape)
        return self._shapes[tensor]

    def const(self, tensor: str) -> np.ndarray | None:
        """The value of an initializer or a Constant node's output, else None."""
        if tensor not in self._consts:
            found = None
            index = self.model.index
            if tensor in index.initializers:
                init = index.initializer_protos.get(tensor)
                found = numpy_helper.to_array(init) if init is not None and init.data_location != \
                    onnx.TensorProto.EXTERNAL and init.ByteSize() < 1 << 16 else None  # Shape-like values are small.
            else:
                i = index.producer.get(tensor)
                node = self.model.proto.graph.node[i] if i is not None else None
                if node is not None and node.op_type == "Constant":
                    attr = next((a for a in node.attribute if a.name == "value"), None)
                    if attr is not None:
                        found = numpy_helper.to_array(attr.t)
            self._consts[tensor] = found
        return self._consts[tensor]

    def after_data_dependent(self, tensor: str) -> bool:
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

    # ------------------------------------------------------------------ the walk

    def _solve(self, root: Query) -> Any:
        """Resolve ``root`` and everything it needs, deepest first, with an explicit stack."""
        memo = self._memo
        waiting: dict[Query, Need] = {}
        stack = [root]
        while stack:
            q = stack[-1]
            if q in memo:
                stack.pop()
                continue
            need = waiting.get(q)
            if need is None:
                step = self._step(q)
                if not isinstance(step, Need):
                    memo[q] = step
                    stack.pop()
                    continue
                waiting[q] = step
                # A query already waiting lower on the stack would be a cycle: it is answered unknown below.
                stack.extend(d for d in reversed(step.queries) if d not in memo and d not in waiting)
                continue
            stack.pop()
            del waiting[q]
            memo[q] = need.combine([memo.get(d, _unknown(d)) for d in need.queries])
        return memo[root]

    def _step(self, q: Query) -> Any:
        """What is known of ``q`` at once, or the rule's :class:`Need`."""
        kind, tensor, axis = q
        if kind == "value":
            return self._value_step(tensor)
        rank = self.rank(tensor)
        if rank is None or not -rank <= axis < rank:
            return UNKNOWN
        if axis < 0:
            return follow(tensor, axis % rank)
        fixed = self.static(tensor, axis)
        if fixed is not None:
            return fixed, False
        if tensor in self.input_max:
            shape = self.input_max[tensor]
            return (int(shape[axis]), False) if axis < len(shape) else UNKNOWN
        node = self._producer(tensor)
        if node is None:
            return UNKNOWN
        rule = DIM_RULES.get(node.op_type)
        if rule is None:  # an op without a rule: no bound
            return None, self.after_data_dependent(tensor)
        out = list(node.output).index(tensor)
        return rule(Site(self, node.op_type, list(node.input), _attrs(node), axis, rank, out))

    def _value_step(self, tensor: str) -> Any:
        c = self.const(tensor)
        if c is not None:
            return [(int(v), False) for v in c.reshape(-1)] if c.dtype.kind in "iu" and c.ndim <= 1 else None
        node = self._producer(tensor)
        rule = VALUE_RULES.get(node.op_type) if node is not None else None
        if node is None or rule is None:
            return None
        return rule(Site(self, node.op_type, list(node.input), _attrs(node)))

    def _producer(self, tensor: str) -> onnx.NodeProto | None:
        i = self.model.index.producer.get(tensor)
        return self.model.proto.graph.node[i] if i is not None else None


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _unknown(q: Query) -> Any:
    return UNKNOWN if q[0] == "dim" else None

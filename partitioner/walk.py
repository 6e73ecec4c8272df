"""Types shape inference leaves unknown past ops it has no rule for, found by a walk of the graph.

ONNX's Reshape before opset 14 has an inference rule for a constant target shape only. Paddle2ONNX
writes its reshapes with a target computed from the input's own shape
(``Reshape(x, Concat(Slice(Shape(x), 0, 2), [-1]))``), so shape inference types nothing after
the first of them: a recogniser's whole attention stack (125 tensors in PP-OCRv4's) stayed untyped,
and loading ran the model in ONNX Runtime to learn those types. Yet the output's rank is the
target's length, which inference does know, and its dims follow from the target's values where
they are built from dims and constants. A Loop's final loop-carried values are left without a
shape too (their shapes may change from one iteration to the next), though each is either the
value the Loop starts from (no iteration) or what the body's last iteration made: where those
two have one element type and rank, so has the value, with the dims the two share.

:func:`types_past_inference` walks the graph in order once: such a Reshape gets the rank of its
target, with each dim as the target says it (a dim of a tensor read by ``Shape``, through
``Slice``, ``Gather``, ``Concat``, ``Unsqueeze``, ``Squeeze``, ``Cast``, ``Identity``, integer
``Add``, ``Sub`` and ``Mul``, constants and what :mod:`partitioner.folding` computes of them,
each as ONNX defines it; ``0`` copies the input's dim, ``-1`` is what the element count leaves
where every dim involved is a number), else unknown; such a Loop's value gets the type its start
and its body's output share; every other node that inference left untyped and whose inputs are
now typed is typed by ONNX's own rule for its op (``onnx.shape_inference.infer_node_outputs``).
Shape inference then runs again over the model with those types (the caller's part), so what it
computes beyond the walk joins them. The walk runs before folding: where it types everything,
the folded copy and its inference are not needed."""
from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from partitioner.folding import constant_values, fold_node

# A value of shape arithmetic: per element, a number, a dim name or unknown (None); and whether it
# is a scalar (a Gather of one index) rather than a 1-D tensor.
Dim = int | str | None
_Value = tuple[list[Dim], bool]

MAX_ELEMENTS = 64  # a shape, not data: longer values are not followed as dims
# Integer arithmetic on dims (what a number of elements or a merged dim is made of): exact where
# both sides are numbers, unknown otherwise.
_ARITHMETIC: dict[str, Callable[[int, int], int]] = {"Add": operator.add, "Sub": operator.sub, "Mul": operator.mul}
_SHAPE_OPS = {"Shape", "Slice", "Gather", "Concat", "Unsqueeze", "Squeeze", "Cast", "Identity", *_ARITHMETIC}
_DEFAULT = ("", "ai.onnx")
_INT64_MAX = 2**63 - 1


def types_past_inference(inferred: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """The types of node outputs ``inferred`` (a model shape inference ran over, its value_info
    written) leaves without a dtype or rank, found past its run-time Reshapes (before opset 14)
    and its Loops (see the module's docstring); empty where it has neither, or nothing is found."""
    opset = next((o.version for o in inferred.opset_import if o.domain in _DEFAULT), 0)
    graph = inferred.graph
    if opset >= 14 and not any(n.op_type == "Loop" and n.domain in _DEFAULT for n in graph.node):
        return {}
    types: dict[str, onnx.TypeProto] = {}
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        if is_typed(vi.type):
            types[vi.name] = vi.type
    for t in graph.initializer:  # (typed by their dims, held or not: shape inference runs over weightless copies)
        types.setdefault(t.name, onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims)))
    constants = constant_values(graph)
    values: dict[str, _Value] = {name: v for name, a in constants.items() if (v := _constant_value(a)) is not None}
    found: dict[str, onnx.TypeProto] = {}
    for node in graph.node:
        if node.domain not in _DEFAULT:
            continue
        folded = fold_node(node, constants, opset)  # (constant arithmetic, as partitioner.folding does it)
        if folded is not None:
            for name, array in zip([o for o in node.output if o], folded):
                constants[name] = array
                if (v := _constant_value(array)) is not None:
                    values[name] = v
        elif node.op_type in _SHAPE_OPS and node.output and (v := _shape_value(node, values, types, opset)) is not None:
            values[node.output[0]] = v
        outs = [o for o in node.output if o]
        if not outs or all(o in types for o in outs) or any(i and i not in types for i in node.input):
            continue
        if node.op_type == "Loop":
            out = _loop_types(node, types)
        elif any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            continue
        elif node.op_type == "Reshape" and opset < 14 and len(node.input) == 2 and node.input[1] not in constants:
            tp = _reshape_type(types[node.input[0]], types[node.input[1]], values.get(node.input[1]))
            out = {outs[0]: tp} if tp is not None else {}
        else:
            out = _node_types(node, types, constants, inferred.opset_import)
        for name, tp in out.items():
            if name not in types and is_typed(tp):
                types[name] = found[name] = tp
    return found


def _loop_types(node: onnx.NodeProto, types: Mapping[str, onnx.TypeProto]) -> dict[str, onnx.TypeProto]:
    """The types of a Loop's final loop-carried values that its start (the node's input) and its
    body's output (the body as inference typed it) agree on in element type and rank, with the
    dims they share (see the module's docstring)."""
    body = next((a.g for a in node.attribute if a.name == "body" and a.type == onnx.AttributeProto.GRAPH), None)
    if body is None:
        return {}
    out: dict[str, onnx.TypeProto] = {}
    for k, (start, name) in enumerate(zip(node.input[2:], node.output)):
        if not name or not start or start not in types or k + 1 >= len(body.output):
            continue
        a, b = types[start], body.output[k + 1].type
        if a.WhichOneof("value") != "tensor_type" or not is_typed(b) or b.WhichOneof("value") != "tensor_type" \
                or a.tensor_type.elem_type != b.tensor_type.elem_type:
            continue
        dims_a, dims_b = _dims(a), _dims(b)
        if dims_a is None or dims_b is None or len(dims_a) != len(dims_b):
            continue
        shared = [x if x == y else None for x, y in zip(dims_a, dims_b)]
        out[name] = onnx.helper.make_tensor_type_proto(a.tensor_type.elem_type, shared)
    return out


def is_typed(tp: onnx.TypeProto) -> bool:
    """Whether ``tp`` gives a dtype and a rank (a tensor), or is a non-tensor type."""
    kind = tp.WhichOneof("value")
    if kind is None:
        return False
    return kind != "tensor_type" or (bool(tp.tensor_type.elem_type) and tp.tensor_type.HasField("shape"))


def _constant_value(array: np.ndarray) -> _Value | None:
    if array.dtype not in (np.int64, np.int32) or array.ndim > 1 or array.size > MAX_ELEMENTS:
        return None
    return [int(v) for v in array.reshape(-1)], array.ndim == 0


def _dims(tp: onnx.TypeProto) -> list[Dim] | None:
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.WhichOneof("value") == "dim_value" else (d.dim_param or None)
            for d in tp.tensor_type.shape.dim]


def _ints(value: _Value | None) -> list[int] | None:
    if value is None or any(not isinstance(d, int) for d in value[0]):
        return None
    return [int(d) for d in value[0] if isinstance(d, int)]


def _shape_value(node: onnx.NodeProto, values: Mapping[str, _Value], types: Mapping[str, onnx.TypeProto],
                 opset: int) -> _Value | None:
    """What ``node`` (of :data:`_SHAPE_OPS`) computes, element by element, or None where it cannot
    be said from ``values`` (and, for Shape, the types of what it reads), or where its attributes
    are not what ONNX says they are."""
    try:
        return _evaluate(node, values, types, opset)
    except (ValueError, TypeError, IndexError):
        return None


def _evaluate(node: onnx.NodeProto, values: Mapping[str, _Value], types: Mapping[str, onnx.TypeProto],
              opset: int) -> _Value | None:
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    args = [values.get(name) if name else None for name in node.input]
    op = node.op_type
    if op == "Shape":
        tp = types.get(node.input[0]) if node.input else None
        dims = _dims(tp) if tp is not None else None
        if dims is None:
            return None
        end = attrs.get("end")
        return dims[int(attrs.get("start", 0)):None if end is None else int(end)], False
    if not args or args[0] is None:
        return None
    elements, scalar = args[0]
    if op in ("Identity", "Cast"):
        return (elements, scalar) if op == "Identity" or int(attrs.get("to", 0)) in (
            onnx.TensorProto.INT64, onnx.TensorProto.INT32) else None
    if op == "Concat":
        if int(attrs.get("axis", -1)) not in (0, -1) or any(a is None or a[1] for a in args):
            return None
        return [d for a in args if a is not None for d in a[0]], False
    if op == "Unsqueeze":
        return (elements, False) if scalar else None
    if op == "Squeeze":
        return (elements, True) if not scalar and len(elements) == 1 else None
    if op == "Gather":
        index = _ints(args[1]) if len(args) > 1 else None
        if scalar or int(attrs.get("axis", 0)) != 0 or index is None or len(index) != 1:
            return None
        k = index[0] + len(elements) if index[0] < 0 else index[0]
        return ([elements[k]], args[1] is not None and args[1][1]) if 0 <= k < len(elements) else None
    if op == "Slice":
        return _slice(elements, scalar, node.input, values, attrs, opset)
    if op in _ARITHMETIC and len(args) == 2 and args[1] is not None:
        other, other_scalar = args[1]
        if len(elements) != len(other) and not (scalar or other_scalar):
            return None
        pairs = zip(elements * len(other) if scalar else elements, other * len(elements) if other_scalar else other)
        return [_int64(_ARITHMETIC[op](a, b)) if isinstance(a, int) and isinstance(b, int) else None
                for a, b in pairs], scalar and other_scalar
    return None


def _slice(elements: list[Dim], scalar: bool, inputs: Sequence[str], values: Mapping[str, _Value],
           attrs: Mapping[str, object], opset: int) -> _Value | None:
    """A Slice of a 1-D value along its one axis with step 1 (ONNX's bounds then are Python's)."""
    if scalar:
        return None
    if opset < 10:
        starts, ends, axes, steps = attrs.get("starts"), attrs.get("ends"), attrs.get("axes"), None
    else:
        given = [_ints(values.get(name)) if name else None for name in inputs] + [None] * 5
        starts, ends, axes, steps = given[1:5]
        if any(k < len(inputs) and inputs[k] and given[k] is None for k in (3, 4)):
            return None  # (axes or steps computed at run time)
    if not isinstance(starts, list) or not isinstance(ends, list) or len(starts) != 1 or len(ends) != 1:
        return None
    if (axes is not None and axes not in ([0], [-1])) or (steps is not None and steps != [1]):
        return None
    return elements[int(starts[0]):int(ends[0])], False


def _reshape_type(data: onnx.TypeProto, target: onnx.TypeProto, value: _Value | None) -> onnx.TypeProto | None:
    """A Reshape's output type from its input's type and its target's type and value (see the
    module's docstring), or None where the target's length is not known."""
    if data.WhichOneof("value") != "tensor_type" or not data.tensor_type.elem_type:
        return None
    length = _dims(target)
    if value is not None and not value[1]:
        wanted: list[Dim] = list(value[0])
    elif length is not None and len(length) == 1 and isinstance(length[0], int):
        wanted = [None] * length[0]
    else:
        return None
    have = _dims(data)
    out: list[Dim] = []
    for k, d in enumerate(wanted):
        if d == 0:
            out.append(have[k] if have is not None and k < len(have) else None)
        elif isinstance(d, int) and d < 0:
            out.append(None)
        else:
            out.append(d)
    if wanted.count(-1) == 1 and have is not None and all(isinstance(d, int) and d > 0 for d in have):
        k = wanted.index(-1)
        others = out[:k] + out[k + 1:]
        if all(isinstance(d, int) and d > 0 for d in others):
            total = math.prod(int(d) for d in have if isinstance(d, int))
            rest = math.prod(int(d) for d in others if isinstance(d, int))
            if total % rest == 0:
                out[k] = total // rest
    out = [d if not isinstance(d, int) or 0 <= d <= _INT64_MAX else None for d in out]
    return onnx.helper.make_tensor_type_proto(data.tensor_type.elem_type, out)


def _int64(value: int) -> int | None:
    """``value`` where an int64 holds it (what ONNX Runtime computes otherwise wraps), else unknown."""
    return value if -_INT64_MAX - 1 <= value <= _INT64_MAX else None


def _node_types(node: onnx.NodeProto, types: Mapping[str, onnx.TypeProto], constants: Mapping[str, np.ndarray],
                opset_import: Sequence[onnx.OperatorSetIdProto]) -> dict[str, onnx.TypeProto]:
    """ONNX's own inference of one node from its inputs' types (and constant inputs), or nothing
    where it has no rule or fails."""
    version = next((o.version for o in opset_import if o.domain in _DEFAULT), 0)
    try:
        schema = onnx.defs.get_schema(node.op_type, version, node.domain)
        return onnx.shape_inference.infer_node_outputs(
            schema, node, {i: types[i] for i in node.input if i},
            {i: numpy_helper.from_array(constants[i], i) for i in node.input if i in constants},
            opset_imports=list(opset_import))
    except (onnx.defs.SchemaError, onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError,
            ValueError, TypeError, KeyError):
        return {}

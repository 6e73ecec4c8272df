"""What never goes to TensorRT, whatever its parser says: a reason per node, or None."""
from __future__ import annotations

from collections.abc import Collection

import onnx

from partitioner.graph import GraphIndex, subgraphs
from partitioner.weights import TRT_MAX_ELEMENTS

ML_DOMAINS = frozenset({"ai.onnx.ml", "ai.onnx.preview.training", "ai.onnx.training"})
STANDARD_DOMAINS = frozenset({"", "ai.onnx"})
SEQUENCE_OPS = frozenset({
    "SequenceConstruct", "SequenceAt", "SequenceInsert", "SequenceErase", "SequenceLength",
    "SequenceEmpty", "SplitToSequence", "ConcatFromSequence", "SequenceMap",
    "Optional", "OptionalGetElement", "OptionalHasElement",
})
_UNSUPPORTED_DTYPES: dict[int, str] = {
    onnx.TensorProto.STRING: "string",
    onnx.TensorProto.COMPLEX64: "complex64",
    onnx.TensorProto.COMPLEX128: "complex128",
    # TensorRT has no float64: its parser takes a double tensor and computes it in float32, so an
    # engine would return float32 where the model says float64 and compute with a 24-bit mantissa
    # what the model computes with 53 (scikit-learn models converted with DoubleTensorType).
    onnx.TensorProto.DOUBLE: "float64",
}
_WHY_NOT = {"float64": "which TensorRT does not compute in (its parser would compute it in float32)"}

# Element types TensorRT's parser makes a network input of as they are (it reads a double input as
# float, which the rules above keep from it, and refuses the rest: unsigned ints but uint8, int16,
# the float8 kinds but e4m3fn, ...).
INPUT_DTYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                          onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.BOOL,
                          onnx.TensorProto.INT32, onnx.TensorProto.INT64})


def type_problem(tp: onnx.TypeProto | None) -> str | None:
    """Why a value of this type cannot cross into TensorRT, or None."""
    if tp is None:
        return None
    kind = tp.WhichOneof("value")
    if kind in ("sequence_type", "map_type", "optional_type", "sparse_tensor_type"):
        return kind.replace("_type", "").replace("sparse_tensor", "sparse tensor")
    if kind == "tensor_type" and tp.tensor_type.elem_type in _UNSUPPORTED_DTYPES:
        return _UNSUPPORTED_DTYPES[tp.tensor_type.elem_type]
    return None


def _elements(dims: list[int]) -> int:
    count = 1
    for d in dims:
        count *= int(d)
    return count


def huge_tensors(index: GraphIndex) -> dict[str, int]:
    """Tensors known in full to hold more than 2^31-1 elements (initializers by their dims,
    others by a fully static inferred shape), with their element counts: one pass."""
    out: dict[str, int] = {}
    for name, init in index.initializer_protos.items():
        if (n := _elements(list(init.dims))) > TRT_MAX_ELEMENTS:
            out[name] = n
    for name in index.types:
        if name in out:
            continue
        dims = index.dims_of(name)  # (read once per tensor; the cost model reads the same)
        if dims and min(dims) >= 0 and (n := _elements(list(dims))) > TRT_MAX_ELEMENTS:
            out[name] = n
    return out


def _too_many_elements(node: onnx.NodeProto, huge: dict[str, int]) -> str | None:
    """TensorRT tensors hold at most 2^31-1 elements: a node touching a bigger one stays out."""
    for name in list(node.input) + list(node.output):
        if name in huge:
            return (f"tensor '{name}' has {huge[name]} elements, more than the {TRT_MAX_ELEMENTS} (2^31-1) a "
                    "TensorRT tensor can hold")
    return None


class Rules:
    """Static exclusions: non-tensor values, string/complex dtypes, ONNX-ML and unknown domains,
    and the user's own exclusions by op type or node name."""

    def __init__(self, *, exclude_ops: Collection[str] = (), exclude_nodes: Collection[str] = (),
                 functions: Collection[onnx.FunctionProto] = ()) -> None:
        self.exclude_ops = frozenset(exclude_ops)
        self.exclude_nodes = frozenset(exclude_nodes)
        # the model's local functions by (domain, name): a node calling one is judged by its body too
        self.functions = {(f.domain, f.name): f for f in functions}
        self.local_functions = frozenset(self.functions)
        # (index, its tensors of a type TensorRT cannot hold with why, its huge tensors), made once
        self._found: tuple[GraphIndex, dict[str, str], dict[str, int]] | None = None

    def check(self, node: onnx.NodeProto, index: GraphIndex) -> str | None:
        """Reason this main-graph node must run in ONNX Runtime, or None if TensorRT may try it."""
        if node.name in self.exclude_nodes:
            return f"excluded by user (node name '{node.name}')"
        if node.op_type in self.exclude_ops:
            return f"excluded by user (op type {node.op_type})"
        reason = self.op_problem(node)
        if reason:
            return reason
        if self._found is None or self._found[0] is not index:
            bad = {name: p for name, tp in index.types.items() if (p := type_problem(tp))}
            self._found = (index, bad, huge_tensors(index))
        _, bad, huge = self._found
        if bad:
            for name in list(node.input) + list(node.output):
                if name in bad:
                    why = _WHY_NOT.get(bad[name], "which TensorRT cannot hold")
                    return f"tensor '{name}' is a {bad[name]} value, {why}"
        for sub in subgraphs(node):
            reason = self._body_problem(sub)
            if reason:
                return f"{node.op_type} body: {reason}"
        function = self.functions.get((node.domain, node.op_type))
        if function is not None:
            reason = self._body_problem(function)
            if reason:
                return f"local function '{node.op_type}': {reason}"
        return _too_many_elements(node, huge) if huge else None

    def op_problem(self, node: onnx.NodeProto) -> str | None:
        """Why ``node``'s op never goes to TensorRT (its domain, a sequence op), whatever the types
        of its tensors; None if TensorRT may try it."""
        domain = node.domain
        if (domain, node.op_type) in self.local_functions:
            return None
        if domain in ML_DOMAINS:
            return f"{domain} operators are not TensorRT operators"
        if domain not in STANDARD_DOMAINS:
            return f"custom domain '{domain}' is unknown to TensorRT"
        if node.op_type in SEQUENCE_OPS:
            return f"{node.op_type} works on sequence/optional values, which TensorRT cannot hold"
        return None

    def _body_problem(self, graph: onnx.GraphProto | onnx.FunctionProto, depth: int = 0) -> str | None:
        """Why a subgraph or a local function's body keeps its node on ONNX Runtime (an op the user
        excluded, one TensorRT never takes, a type it cannot hold), looking into the subgraphs and
        functions it calls in turn (to a depth of 32: a function that calls itself, which ONNX
        forbids, ends there)."""
        vis = {vi.name: vi.type for vi in list(graph.value_info)
               + (list(graph.input) + list(graph.output) if isinstance(graph, onnx.GraphProto) else [])}
        for node in graph.node:
            if node.op_type in self.exclude_ops:
                return f"contains {node.op_type}, excluded by user"
            reason = self.op_problem(node)
            if reason:
                return f"node '{node.name or node.op_type}': {reason}"
            for name in list(node.input) + list(node.output):
                problem = type_problem(vis.get(name)) if name else None
                if problem:
                    return f"tensor '{name}' is a {problem} value"
            for sub in subgraphs(node):
                reason = self._body_problem(sub, depth + 1)
                if reason:
                    return reason
            called = self.functions.get((node.domain, node.op_type))
            if called is not None and depth < 32:
                reason = self._body_problem(called, depth + 1)
                if reason:
                    return reason
        return None


def types_planning_reads(index: GraphIndex, names: Collection[str], rules: Rules) -> list[str]:
    """Of the tensors ``names``, those whose types planning can read: a tensor whose producer,
    or a node that reads it, is a node TensorRT may try (one ``rules.op_problem`` does not send
    to ONNX Runtime) or has one upstream, or from which such a node can be reached. Any other
    tensor is written and read only by nodes that run on ONNX Runtime in the first ONNX Runtime
    group of every plan (nothing TensorRT may take comes before them), and nothing TensorRT may
    take depends on it: no verdict, size estimate or segment boundary reads its type."""
    nodes = index.graph.node
    candidate = [rules.op_problem(node) is None for node in nodes]
    upstream = [False] * len(nodes)  # a candidate, or reads what one of them computed
    for i in index.order:
        upstream[i] = candidate[i] or any(upstream[p] for name in index.reads[i]
                                          if (p := index.producer.get(name)) is not None)
    downstream = [False] * len(nodes)  # a candidate, or feeds one
    for i in reversed(index.order):
        downstream[i] = candidate[i] or any(downstream[c] for c in index.successors(i))
    out = []
    for name in names:
        p = index.producer.get(name)
        if (p is not None and upstream[p]) or any(upstream[c] or downstream[c] for c in index.consumers.get(name, ())):
            out.append(name)
    return out

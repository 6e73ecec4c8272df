"""Read-only index over a graph: producers, consumers, implicit (outer-scope) inputs,
topological order and known value types. Built once per model; O(nodes + edges)."""
from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import onnx

from partitioner.errors import InvalidModelError

_UNREAD: Any = object()  # A tensor whose dims were not read yet.


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """Graph-valued attributes of a node (If branches, Loop/Scan bodies), in attribute order."""
    out: list[onnx.GraphProto] = []
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            out.append(attr.g)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            out.extend(attr.graphs)
    return out


def outer_scope_refs(graph: onnx.GraphProto) -> list[str]:
    """Names a subgraph reads from enclosing scopes, in first-use order."""
    defined = {i.name for i in graph.input}
    defined.update(t.name for t in graph.initializer)
    defined.update(t.values.name for t in graph.sparse_initializer)
    refs: list[str] = []
    seen: set[str] = set()

    def use(name: str) -> None:
        if name and name not in defined and name not in seen:
            seen.add(name)
            refs.append(name)

    for node in graph.node:
        for name in node.input:
            use(name)
        for sub in subgraphs(node):
            for name in outer_scope_refs(sub):
                use(name)
        defined.update(o for o in node.output if o)
    return refs


def node_reads(node: onnx.NodeProto) -> list[str]:
    """Every tensor a node reads: explicit inputs, then outer-scope refs of its subgraphs."""
    reads: list[str] = []
    seen: set[str] = set()
    for name in node.input:
        if name and name not in seen:
            seen.add(name)
            reads.append(name)
    for sub in subgraphs(node):
        for name in outer_scope_refs(sub):
            if name not in seen:
                seen.add(name)
                reads.append(name)
    return reads


@dataclass
class GraphIndex:
    """Dependency structure of a main graph. Node ids are indices into ``graph.node``."""

    graph: onnx.GraphProto
    reads: list[list[str]] = field(default_factory=list)
    writes: list[tuple[str, ...]] = field(default_factory=list)  # writes[i]: node i's named outputs
    producer: dict[str, int] = field(default_factory=dict)
    consumers: dict[str, list[int]] = field(default_factory=dict)
    graph_inputs: list[str] = field(default_factory=list)
    initializers: set[str] = field(default_factory=set)
    graph_outputs: list[str] = field(default_factory=list)
    types: dict[str, onnx.TypeProto] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)
    position: list[int] = field(default_factory=list)  # position[i]: node i's place in ``order``
    value_infos: dict[str, onnx.ValueInfoProto] = field(default_factory=dict)
    initializer_protos: dict[str, onnx.TensorProto] = field(default_factory=dict)
    sparse_initializer_protos: dict[str, onnx.SparseTensorProto] = field(default_factory=dict)
    # tensor -> its dims as the types say (-1 symbolic, -2 unknown; None: no shape), read once
    dims: dict[str, tuple[int, ...] | None] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def build(cls, graph: onnx.GraphProto, where: str = "model") -> GraphIndex:
        index = cls(graph=graph)
        index.graph_inputs = [i.name for i in graph.input]
        index.initializers = {t.name for t in graph.initializer}
        index.initializers.update(t.values.name for t in graph.sparse_initializer)
        index.graph_outputs = [o.name for o in graph.output]
        if len(set(index.graph_inputs)) != len(index.graph_inputs):
            dup = _first_duplicate(index.graph_inputs)
            raise InvalidModelError(f"{where}: graph input '{dup}' is declared twice")
        sources = set(index.graph_inputs) | index.initializers
        for i, node in enumerate(graph.node):
            index.reads.append(node_reads(node))
            index.writes.append(tuple(o for o in node.output if o))
            for out in index.writes[i]:
                if out in index.producer:
                    other = graph.node[index.producer[out]]
                    raise InvalidModelError(
                        f"{where}: tensor '{out}' is produced twice, by node {index.producer[out]} "
                        f"'{other.name}' ({other.op_type}) and node {i} '{node.name}' ({node.op_type})")
                if out in sources:
                    raise InvalidModelError(
                        f"{where}: node {i} '{node.name}' ({node.op_type}) writes tensor '{out}', "
                        "which is already a graph input or initializer")
                index.producer[out] = i
        for i, reads in enumerate(index.reads):
            for name in reads:
                if name not in index.producer and name not in sources:
                    node = graph.node[i]
                    raise InvalidModelError(
                        f"{where}: node {i} '{node.name}' ({node.op_type}) reads tensor '{name}', "
                        "which no node, graph input or initializer defines")
                index.consumers.setdefault(name, []).append(i)
        for name in index.graph_outputs:
            if name not in index.producer and name not in sources:
                raise InvalidModelError(f"{where}: graph output '{name}' is not produced by any node")
        index.refresh_types()
        index.order = index._topological_order(where)
        index.position = [0] * len(index.order)
        for pos, i in enumerate(index.order):
            index.position[i] = pos
        index.initializer_protos = {t.name: t for t in graph.initializer}
        index.sparse_initializer_protos = {t.values.name: t for t in graph.sparse_initializer}
        return index

    def refresh_types(self) -> None:
        """Re-read value types from the graph (after shape inference rewrote its value_info)."""
        graph = self.graph
        self.types = {}
        self.dims = {}
        for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
            if vi.type.WhichOneof("value") is not None:
                self.types[vi.name] = vi.type
        for t in graph.initializer:
            if t.name not in self.types:
                self.types[t.name] = onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims))
        self.value_infos = {vi.name: vi for vi in graph.value_info}

    def dims_of(self, name: str) -> tuple[int, ...] | None:
        """``name``'s dims as its type says: a size, -1 for a named (symbolic) dim, -2 for one
        nothing knows (unnamed, or named ``unk__`` by shape inference); None without a shape."""
        found: tuple[int, ...] | None = self.dims.get(name, _UNREAD)
        if found is _UNREAD:
            tp = self.types.get(name)
            if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
                found = None
            else:
                out = []
                for d in tp.tensor_type.shape.dim:
                    which = d.WhichOneof("value")
                    if which == "dim_value" and d.dim_value >= 0:
                        out.append(d.dim_value)
                    elif which == "dim_param" and d.dim_param and not d.dim_param.startswith("unk__"):
                        out.append(-1)
                    else:
                        out.append(-2)
                found = tuple(out)
            self.dims[name] = found
        return found

    def ordered(self, nodes: Iterable[int]) -> list[int]:
        """``nodes`` in execution order."""
        return sorted(set(nodes), key=self.position.__getitem__)

    def _topological_order(self, where: str) -> list[int]:
        """Kahn's algorithm, lowest node index first among ready nodes (deterministic)."""
        n = len(self.graph.node)
        pending = [0] * n
        for i, reads in enumerate(self.reads):
            pending[i] = sum(1 for name in reads if name in self.producer)
        ready = [i for i in range(n) if pending[i] == 0]
        heapq.heapify(ready)
        order: list[int] = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for out in self.writes[i]:
                for c in self.consumers.get(out, ()):
                    pending[c] -= 1
                    if pending[c] == 0:
                        heapq.heappush(ready, c)
        if len(order) != n:
            stuck = sorted(set(range(n)) - set(order))
            names = ", ".join(f"{i} '{self.graph.node[i].name}' ({self.graph.node[i].op_type})" for i in stuck[:5])
            raise InvalidModelError(f"{where}: the graph has a cycle through nodes {names}"
                                    + (f" and {len(stuck) - 5} more" if len(stuck) > 5 else ""))
        return order

    def successors(self, i: int) -> list[int]:
        out: set[int] = set()
        for name in self.writes[i]:
            out.update(self.consumers.get(name, ()))
        return sorted(out)


def _first_duplicate(names: list[str]) -> str:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return ""


def fresh_name(base: str, taken: set[str]) -> str:
    """``base``, or ``base_1``, ``base_2``... the first not in ``taken``; added to ``taken``."""
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name

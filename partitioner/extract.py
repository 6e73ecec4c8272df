"""Cut a set of main-graph nodes out as a standalone, checker-valid ModelProto."""
from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import onnx

from partitioner.graph import GraphIndex, subgraphs
from partitioner.model import Model, fitting_ir_version
from partitioner.rules import INPUT_DTYPES


def boundary(index: GraphIndex, nodes: Collection[int], copies: Collection[int] = (),
             shared: Collection[int] = ()) -> tuple[list[str], list[str]]:
    """(inputs, outputs) of a node set: tensors it reads from outside (initializers excluded,
    graph inputs included) in first-read order, and tensors it produces that are read outside it
    or are graph outputs, in production order.

    ``copies``: constant-only nodes of other segments copied in; they are read from like members
    but produce no outputs. ``shared``: nodes every other reader has its own copy of; their
    tensors are outputs only when they are graph outputs.

    Every node of the graph has the graph's own interface, as TensorRT's parser makes a network
    of the model's file: the graph's inputs in its order, and its outputs in its order. An input
    no node reads is one too where it is a tensor of a type TensorRT holds (the parser makes a
    network input of it, and keeps it in the engine; see :func:`_held_input`)."""
    members = set(nodes)
    shared_set = set(shared)
    ordered = index.ordered(members)
    inside = index.ordered(members | set(copies)) if copies else ordered
    produced: set[str] = set()
    for i in inside:
        produced.update(index.writes[i])
    graph_inputs = set(index.graph_inputs)
    inputs: list[str] = []
    seen: set[str] = set()
    for i in inside:
        for name in index.reads[i]:
            if name in produced or name in seen:
                continue
            if name in index.initializers and name not in graph_inputs:
                continue
            seen.add(name)
            inputs.append(name)
    graph_outputs = set(index.graph_outputs)
    outputs: list[str] = []
    for i in ordered:
        for name in index.writes[i]:
            if name in graph_outputs or (i not in shared_set
                                         and any(c not in members for c in index.consumers.get(name, ()))):
                outputs.append(name)
    if not outputs:  # a dead-end group: expose what nothing inside reads
        outputs = [o for i in ordered for o in index.writes[i]
                   if not any(c in members for c in index.consumers.get(o, ()))]
    elif len(members) == len(index.reads):  # the whole graph (every output one of the graph's)
        read = set(inputs)
        inputs = [n for n in index.graph_inputs if n in read or _held_input(index, n)]
        written = set(outputs)
        outputs = [n for n in dict.fromkeys(index.graph_outputs) if n in written]
    return inputs, outputs


def _held_input(index: GraphIndex, name: str) -> bool:
    """Whether graph input ``name``, which no node reads, is a network input of the engine TensorRT
    builds of the model's file, as the file types it: a tensor of a type the parser takes as it is
    (``INPUT_DTYPES``), not an initializer."""
    tp = index.types.get(name)
    return (name not in index.initializers and tp is not None and tp.WhichOneof("value") == "tensor_type"
            and tp.tensor_type.elem_type in INPUT_DTYPES)


def _value_info(name: str, tp: onnx.TypeProto | None) -> onnx.ValueInfoProto:
    vi = onnx.ValueInfoProto()
    vi.name = name
    if tp is not None:
        vi.type.CopyFrom(tp)
    return vi


def _used_functions(model: onnx.ModelProto, nodes: Sequence[onnx.NodeProto]) -> list[onnx.FunctionProto]:
    by_key = {(f.domain, f.name): f for f in model.functions}
    if not by_key:
        return []
    wanted: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    # node lists still to look through: functions calling functions are walked with a stack
    pending: list[Sequence[onnx.NodeProto]] = [nodes]
    while pending:
        for node in pending.pop():
            key = (node.domain, node.op_type)
            if key in by_key and key not in seen:
                seen.add(key)
                wanted.append(key)
                pending.append(by_key[key].node)
            pending.extend(sub.node for sub in subgraphs(node))
    return [by_key[k] for k in sorted(wanted)]


def constant_only(index: GraphIndex, candidates: Sequence[bool]) -> frozenset[int]:
    """Nodes (among ``candidates``) that read only initializers or other such nodes, and feed
    something: their values never depend on a model input."""
    graph_inputs = set(index.graph_inputs)
    out: set[int] = set()
    for i in index.order:
        if not candidates[i] or not index.successors(i):
            continue
        if all((name in index.initializers and name not in graph_inputs) or index.producer.get(name) in out
               for name in index.reads[i]):
            out.add(i)
    return frozenset(out)


def copies_for(index: GraphIndex, nodes: Sequence[int], lazy: frozenset[int]) -> tuple[int, ...]:
    """The ``lazy`` (constant-only) nodes outside ``nodes`` whose values ``nodes`` read, directly
    or through other such nodes, ascending: copied into the group, so that no boundary carries a
    value that does not depend on a model input."""
    members = set(nodes)
    out: set[int] = set()
    stack = [name for i in nodes for name in index.reads[i]]
    while stack:
        p = index.producer.get(stack.pop())
        if p is None or p in members or p in out or p not in lazy:
            continue
        out.add(p)
        stack.extend(index.reads[p])
    return tuple(sorted(out))


def extract(model: Model, nodes: Collection[int], *, name: str,
            inputs: Sequence[str] | None = None, outputs: Sequence[str] | None = None,
            initializer: Callable[[onnx.TensorProto], onnx.TensorProto | None] | None = None) -> onnx.ModelProto:
    """A standalone model of ``nodes`` (indices into the main graph), in topological order.

    Only the initializers it reads are carried (outer-scope reads of subgraphs included); every
    boundary tensor gets value_info with dtype and (symbolic) shape where known; empty optional
    inputs (``""``) stay as they are; local functions it calls come along. ``initializer(t)``
    gives what to carry instead of a copy of ``t`` (None: the copy), e.g. a reference to where
    its bytes are, so weights need not be copied into every segment."""
    index = model.index
    src = model.proto
    if inputs is None or outputs is None:
        b_in, b_out = boundary(index, nodes)
        inputs = b_in if inputs is None else inputs
        outputs = b_out if outputs is None else outputs
    ordered = index.ordered(nodes)
    node_protos = [src.graph.node[i] for i in ordered]

    read: set[str] = set()
    for i in ordered:
        read.update(index.reads[i])
    out = onnx.ModelProto()
    graph = out.graph
    graph.name = name
    graph.node.extend(node_protos)
    input_set = set(inputs)
    used = sorted(read - input_set)
    carried = [index.initializer_protos[n] for n in used if n in index.initializer_protos]
    if initializer is None:
        graph.initializer.extend(carried)
    else:
        for t in carried:
            new = initializer(t)
            graph.initializer.add().CopyFrom(t) if new is None else graph.initializer.append(new)
    graph.sparse_initializer.extend(index.sparse_initializer_protos[n] for n in used
                                    if n in index.sparse_initializer_protos)
    graph.input.extend(_value_info(n, index.types.get(n)) for n in inputs)
    graph.output.extend(_value_info(n, index.types.get(n)) for n in outputs)
    boundary_names = input_set | set(outputs)
    internal = [o for p in node_protos for o in p.output if o and o not in boundary_names]
    graph.value_info.extend(index.value_infos[o] for o in internal if o in index.value_infos)

    out.opset_import.extend(src.opset_import)
    out.functions.extend(_used_functions(src, node_protos))
    out.producer_name = "trt-backend"
    out.domain = src.domain
    out.model_version = src.model_version
    out.ir_version = src.ir_version
    out.ir_version = fitting_ir_version(out, model.max_ir_version)
    return out

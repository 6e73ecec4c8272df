"""Native stand-ins for plugin-claimed nodes, so the parser still validates their neighbours.

A claimed node never reaches the TensorRT parser (a parser that knows the plugin's op may abort
the process). To check that the nodes around it still parse as one network, the claimed node is
replaced by a native stand-in with the same output shape and dtype (offered by the plugin), or,
when the plugin offers none, cut out: its outputs become network inputs of the same type."""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import onnx

from partitioner.model import Model, normalize

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Replacement:
    """Nodes (and their initializers) that produce a claimed node's outputs natively."""

    nodes: tuple[onnx.NodeProto, ...]
    initializers: tuple[onnx.TensorProto, ...] = ()


@dataclass
class StandInModel:
    """The model with claimed nodes replaced. ``origin[k]`` is the original index of node k
    (a stand-in node maps to the node it stands in for); ``dropped`` lists original nodes left
    out because they fed claimed nodes only (e.g. the Constant holding Resize scales)."""

    model: Model
    origin: list[int]
    dropped: set[int] = field(default_factory=set)


def _constant_only(model: Model) -> set[int]:
    """Nodes whose values depend on no graph input (Constant, and what reads only constants)."""
    index = model.index
    inputs = set(index.graph_inputs)
    const: set[int] = set()
    for i in index.order:
        if all((n in index.initializers and n not in inputs) or index.producer.get(n) in const for n in index.reads[i]):
            const.add(i)
    return const


def _unread_constants(model: Model, kept: list[onnx.NodeProto], candidates: set[int]) -> set[int]:
    """Constant-only nodes (among ``candidates``) whose outputs nothing kept reads any more."""
    graph = model.proto.graph
    outputs = set(model.index.graph_outputs)
    dropped: set[int] = set()
    while True:
        read = {n for node in kept for n in node.input if n}
        read |= {n for i in candidates - dropped for n in graph.node[i].input if n}
        more = {i for i in candidates - dropped
                if not any(o in read or o in outputs for o in graph.node[i].output if o)}
        if not more:
            return dropped
        dropped |= more


def build_standin_model(model: Model, claims: Mapping[int, object]) -> StandInModel:
    """A normalized copy of ``model`` with each claimed node (index -> its plugin claim)
    replaced by the plugin's stand-in, or cut out when the plugin offers none. A claim offers
    one through a ``stand_in(node, model)`` method returning a :class:`Replacement` or None."""
    graph = model.proto.graph
    claimed = set(claims)
    nodes: list[tuple[int, onnx.NodeProto]] = []
    inits: list[onnx.TensorProto] = []
    cut_outputs: list[str] = []
    for i, node in enumerate(graph.node):
        if i not in claimed:
            nodes.append((i, node))
            continue
        make = getattr(claims[i], "stand_in", None)
        replacement = make(node, model) if callable(make) else None
        if replacement is None:
            cut_outputs.extend(o for o in node.output if o)
            continue
        for k, sub in enumerate(replacement.nodes):
            copy = onnx.NodeProto()
            copy.CopyFrom(sub)
            copy.name = copy.name or f"{node.name}::standin{k}"
            nodes.append((i, copy))
        inits.extend(replacement.initializers)
    const = _constant_only(model) - claimed
    dropped = _unread_constants(model, [n for i, n in nodes if i not in const], const)
    out = onnx.ModelProto()
    out.CopyFrom(model.proto)
    del out.graph.node[:]
    out.graph.node.extend(n for i, n in nodes if i not in dropped)
    origin = [i for i, _ in nodes if i not in dropped]
    out.graph.initializer.extend(inits)
    used = {n for node in out.graph.node for n in node.input if n}
    keep = [t for t in out.graph.initializer if t.name in used or t.name in model.index.graph_inputs]
    del out.graph.initializer[:]
    out.graph.initializer.extend(keep)
    for name in cut_outputs:
        vi = out.graph.input.add()
        vi.name = name
        tp = model.index.types.get(name)
        if tp is not None:
            vi.type.CopyFrom(tp)
    known = set(cut_outputs)
    kept_vi = [vi for vi in out.graph.value_info if vi.name not in known]
    del out.graph.value_info[:]
    out.graph.value_info.extend(kept_vi)
    standin = normalize(out, name=f"{model.source} (plugin stand-ins)", base_dir=model.base_dir,
                        max_ir_version=model.max_ir_version)
    if len(standin.proto.graph.node) != len(origin):
        raise RuntimeError("stand-in model lost or gained nodes during normalization")
    return StandInModel(standin, origin, dropped)

"""The engine build's copy of a TensorRT segment: plugin-claimed nodes become plugin nodes.

The emulated path (ONNX Runtime) keeps the original nodes; only the copy handed to full
TensorRT's parser is rewritten. A rewritten node has the plugin's op type and namespace
(``domain`` and the ``plugin_namespace`` attribute the parser reads), the plugin's fields as
attributes, ``aot=1`` to ask for the ahead-of-time implementation, and reads only the data
input (roi/scales/sizes are folded into the fields; constants left unread are pruned)."""
from __future__ import annotations

from collections.abc import Mapping

import onnx
from onnx import helper

from partitioner.capability import PLUGIN_PREFIX
from partitioner.errors import OptionsError
from partitioner.model import Model, load_model
from partitioner.plan import Plan

from .registry import Registry


def claimed_nodes(plan: Plan, segment_id: int) -> dict[str, str]:
    """Node name -> plugin name for the plugin nodes of one segment of ``plan``."""
    seg = plan.segments[segment_id]
    return {plan.nodes[i].name: plan.nodes[i].verdict[len(PLUGIN_PREFIX):]
            for i in seg.nodes if plan.nodes[i].verdict.startswith(PLUGIN_PREFIX)}


def rewrite_for_engine(segment: onnx.ModelProto | Model, registry: Registry,
                       nodes: Mapping[str, str] | None = None, *, aot: bool = True) -> onnx.ModelProto:
    """A copy of ``segment`` with its plugin nodes rewritten to plugin ops. ``nodes`` maps node
    name -> plugin name (see :func:`claimed_nodes`); None rewrites every node a plugin claims."""
    model = load_model(segment)
    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto)
    graph = proto.graph
    namespaces: set[str] = set()
    for k, node in enumerate(model.proto.graph.node):
        if nodes is None:
            record = registry.for_node(node, model)
        elif node.name in nodes:
            record = registry.get(nodes[node.name])
            claim = record.claim(node, model)
            if not claim.claimed:
                raise OptionsError(f"plugin {record.name} cannot take node '{node.name}' in this segment: "
                                   f"{claim.reason or 'not its op'}")
        else:
            record = None
        if record is None:
            continue
        attrs = dict(record.params(node, model).to_attributes())
        attrs["plugin_namespace"] = record.plugin_namespace
        attrs["aot"] = int(aot)
        new = helper.make_node(record.plugin_op, [node.input[0]], list(node.output), name=node.name,
                               domain=record.plugin_namespace, **attrs)
        graph.node[k].CopyFrom(new)
        namespaces.add(record.plugin_namespace)
    missing = [n for n in (nodes or {}) if n not in {x.name for x in model.proto.graph.node}]
    if missing:
        raise OptionsError(f"plugin node(s) {', '.join(missing)} are not in this segment")
    _prune(graph)
    have = {o.domain for o in proto.opset_import}
    proto.opset_import.extend(helper.make_opsetid(ns, 1) for ns in sorted(namespaces - have))
    return proto


def _prune(graph: onnx.GraphProto) -> None:
    """Drop Constant nodes and initializers that nothing reads any more."""
    outputs = {o.name for o in graph.output}
    while True:
        read = {n for node in graph.node for n in node.input if n} | outputs
        dead = [k for k, node in enumerate(graph.node)
                if node.op_type == "Constant" and not any(o in read for o in node.output)]
        if not dead:
            break
        for k in reversed(dead):
            del graph.node[k]
    read = {n for node in graph.node for n in node.input if n} | outputs | {i.name for i in graph.input}
    keep = [t for t in graph.initializer if t.name in read]
    del graph.initializer[:]
    graph.initializer.extend(keep)

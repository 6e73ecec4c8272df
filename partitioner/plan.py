"""The plan: segments and per-node verdicts, built from a model, serializable as JSON."""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from partitioner.capability import (
    CapabilityOracle,
    CapabilityStats,
    PluginClaim,
    Verdict,
    assess,
)
from partitioner.cost import BoundaryCost
from partitioner.errors import OptionsError
from partitioner.graph import subgraphs
from partitioner.extract import boundary, extract
from partitioner.model import Model, ModelSource, load_model
from partitioner.options_check import keyword_checked, number_option
from partitioner.partition import DEFAULT_MIN_SEGMENT_SIZE, partition
from partitioner.rules import Rules

log = logging.getLogger(__name__)

TARGETS = ("tensorrt", "tensorrt_rtx")


@keyword_checked
@dataclass(frozen=True)
class PartitionOptions:
    """How to cut a model. Exclusions send nodes to ONNX Runtime whatever TensorRT says."""

    exclude_ops: tuple[str, ...] = ()
    exclude_nodes: tuple[str, ...] = ()
    min_segment_size: int = DEFAULT_MIN_SEGMENT_SIZE
    max_oracle_calls: int = 1000
    # plugins offered what TensorRT's parser rejects; None: the ones the caller ships, resolved by it
    # (trt_backend offers every plugin it ships, from every door; the partitioner alone has none), ()
    # for none
    plugins: tuple[PluginClaim, ...] | None = None
    plugin_ops: tuple[str, ...] = ()  # op types offered to plugins before the parser (comparisons)
    target: str | None = None  # runtime the plan is for: "tensorrt" | "tensorrt_rtx"; None: the parser's flavor
    # the price of a segment boundary (partitioner.cost); None: TensorRT groups are never demoted for it
    boundary_cost: BoundaryCost | None = BoundaryCost()
    # how Q/DQ TensorRT refuses for its form is rewritten (partitioner.qdq): "exact" (float nodes,
    # int8 lost there) or "int8" (re-quantized to symmetric int8, int8 kept)
    qdq_rewrite: str = "exact"

    def __post_init__(self) -> None:
        for f in ("exclude_ops", "exclude_nodes", "plugins", "plugin_ops"):
            value = getattr(self, f)
            if value is None and f == "plugins":
                continue
            try:
                value = (value,) if isinstance(value, str) else tuple(value)
            except TypeError:
                raise OptionsError(f"{f} must be a list, got {type(value).__name__}") from None
            wrong = next((v for v in value if not isinstance(v, str)), None) if f != "plugins" else None
            if wrong is not None:
                raise OptionsError(f"{f} must list names (str), got {type(wrong).__name__} {wrong!r}")
            # (names of a set: the same ones in another order are the same options, and the same plan)
            object.__setattr__(self, f, value if f == "plugins" else tuple(sorted(set(value))))
        for f in ("min_segment_size", "max_oracle_calls"):
            value = getattr(self, f)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise OptionsError(f"{f} must be a whole number >= 0, got {value!r}")
        if self.qdq_rewrite not in ("exact", "int8"):
            raise OptionsError(f"qdq_rewrite must be 'exact' or 'int8', got {self.qdq_rewrite!r}")


@dataclass(frozen=True)
class Segment:
    id: int
    backend: str  # "tensorrt" | "onnxruntime"
    nodes: tuple[int, ...]  # indices into the original graph.node, ascending
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    # constant-only nodes (ascending) of other segments whose values this one reads: it computes
    # its own copies, so no constant-only value crosses a segment boundary
    copies: tuple[int, ...] = ()

    @property
    def members(self) -> tuple[int, ...]:
        """Every node the segment's model holds: its own and the copies, ascending."""
        return tuple(sorted(self.nodes + self.copies)) if self.copies else self.nodes

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "backend": self.backend, "nodes": list(self.nodes)}
        if self.copies:  # absent when empty: plans without shared constants are as before
            d["copies"] = list(self.copies)
        d["inputs"], d["outputs"] = list(self.inputs), list(self.outputs)
        return d


@dataclass(frozen=True)
class NodeInfo:
    index: int
    name: str
    op_type: str
    segment: int
    verdict: str
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "op_type": self.op_type, "segment": self.segment,
                "verdict": self.verdict, "reason": self.reason}


@dataclass
class Plan:
    """Segments in execution order and a verdict per node. ``model`` is the normalized model
    the plan was made from (absent for a plan read back from JSON). ``cost``: how its boundaries
    are priced, in the partition and in its report (the partition's boundary cost, with the
    sizes of the dims the shapes it was planned at fix; None: the defaults)."""

    model_name: str
    tensorrt: str | None
    segments: list[Segment]
    nodes: list[NodeInfo]
    model: Model | None = field(default=None, repr=False, compare=False)
    seconds: float = field(default=0.0, compare=False)
    oracle_calls: int = field(default=0, compare=False)
    cached: bool = field(default=False, compare=False)  # taken from a plan cache, not planned (no parser calls)
    target: str | None = None  # runtime the plan is for ("tensorrt" | "tensorrt_rtx"); plugins depend on it
    learned: dict[str, str] = field(default_factory=dict)  # tensor -> how its type was learned (not inferred)
    rewritten: dict[str, str] = field(default_factory=dict)  # original node name -> what a rewrite made of it
    cost: BoundaryCost | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"model": self.model_name, "tensorrt": self.tensorrt, "target": self.target}
        if self.learned:  # Absent where shape inference knew every type: such plans are unchanged.
            d["learned_types"] = dict(self.learned)
        if self.rewritten:  # Absent where nothing was rewritten: such plans are unchanged.
            d["rewritten"] = dict(self.rewritten)
        d["segments"] = [s.to_dict() for s in self.segments]
        d["nodes"] = [n.to_dict() for n in self.nodes]
        return d

    def to_json(self) -> str:
        """Deterministic JSON: one segment or node per line."""
        d = self.to_dict()
        head = {k: v for k, v in d.items() if k not in ("segments", "nodes")}
        lines = ["{" + json.dumps(head)[1:-1] + ","]
        for key in ("segments", "nodes"):
            items = [" " + json.dumps(x) for x in d[key]]
            lines.append(f' "{key}": [')
            lines.append(",\n".join(items))
            lines.append(" ]" + ("," if key == "segments" else ""))
        lines.append("}")
        return "\n".join(lines) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        segments = [Segment(s["id"], s["backend"], tuple(s["nodes"]), tuple(s["inputs"]), tuple(s["outputs"]),
                            tuple(s.get("copies", ()))) for s in data["segments"]]
        nodes = [NodeInfo(n["index"], n["name"], n["op_type"], n["segment"], n["verdict"], n["reason"])
                 for n in data["nodes"]]
        return cls(data["model"], data.get("tensorrt"), segments, nodes, target=data.get("target"),
                   learned=dict(data.get("learned_types", {})), rewritten=dict(data.get("rewritten", {})))

    def extract(self, segment_id: int,
                initializer: Callable[[onnx.TensorProto], onnx.TensorProto | None] | None = None) -> onnx.ModelProto:
        """The segment as a standalone ModelProto (needs the plan's model), copies included;
        ``initializer``: see :func:`partitioner.extract.extract`."""
        if self.model is None:
            raise OptionsError("this plan was read from JSON without its model; plan the model again")
        seg = self.segments[segment_id]
        return extract(self.model, seg.members, name=f"segment_{seg.id}", inputs=seg.inputs, outputs=seg.outputs,
                       initializer=initializer)

    def tensorrt_segments(self) -> list[Segment]:
        return [s for s in self.segments if s.backend == "tensorrt"]


def validate_options(model: Model, options: PartitionOptions) -> None:
    if not isinstance(options, PartitionOptions):
        raise OptionsError(f"partition options must be a PartitionOptions, got {type(options).__name__}")
    number_option(options.min_segment_size, "min segment size", whole=True, low=1)
    number_option(options.max_oracle_calls, "max oracle calls", whole=True, low=1)
    in_model = {n.op_type for n in model.proto.graph.node}
    for op in options.exclude_ops:
        if op not in in_model and not onnx.defs.has(op) and not any(onnx.defs.has(op, d) for d in ("ai.onnx.ml",)):
            raise OptionsError(f"unknown op type '{op}' in exclusions: not an ONNX operator and not in the model")
    if options.target is not None and options.target not in TARGETS:
        raise OptionsError(f"unknown target '{options.target}'; choose one of {', '.join(TARGETS)}")
    if options.plugin_ops and not options.plugins:
        raise OptionsError("plugin ops were forced but no plugins are enabled")
    for op in options.plugin_ops:
        if not any(getattr(p, "op_type", op) == op for p in options.plugins or ()):
            raise OptionsError(f"no plugin covers op type '{op}' (forced plugin ops)")
    names = {n.name for n in model.proto.graph.node}
    for name in options.exclude_nodes:
        if name not in names:
            holder = _holder_of(model.proto.graph, name)
            if holder is not None:
                raise OptionsError(f"node '{name}' of {model.source} is inside the subgraph of {holder}, which runs "
                                   f"whole where the node holding it runs: exclude that node instead (node exclusions)")
            raise OptionsError(f"no node named '{name}' in {model.source} (node exclusions)")


def _holder_of(graph: onnx.GraphProto, name: str) -> str | None:
    """The main-graph node (``'If_1' (If), its then_branch``) whose subgraphs hold a node named
    ``name``, nested ones included; None where none does. A walk with its own stack."""
    for top in graph.node:
        todo = [(a.name, g) for a in top.attribute  # (named: the message says which branch)
                for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs))]
        while todo:
            attr, body = todo.pop()
            for node in body.node:
                if node.name == name:
                    return f"'{top.name}' ({top.op_type}), its {attr}"
                todo.extend((attr, g) for g in subgraphs(node))
    return None


def plan_model(source: ModelSource | Model, oracle: CapabilityOracle | None,
               options: PartitionOptions | None = None, *, max_ir_version: int | None = None) -> Plan:
    """Load/normalize, assess capability, partition: the whole planning pipeline.
    ``max_ir_version``: see :func:`partitioner.model.load_model`."""
    start = time.perf_counter()
    options = options or PartitionOptions()
    model = load_model(source, max_ir_version=max_ir_version)
    verdicts, stats = assess_model(model, oracle, options)
    plan = build_plan(model, verdicts, oracle.target if oracle is not None else None, options.min_segment_size,
                      target=plan_target(options, oracle), cost=options.boundary_cost)
    plan.seconds = time.perf_counter() - start
    plan.oracle_calls = stats.oracle_calls
    log.info("planned %s: %d segment(s), %d parser call(s), %.3f s", model.source, len(plan.segments),
             stats.oracle_calls, plan.seconds)
    return plan


def assess_model(model: Model, oracle: CapabilityOracle | None,
                 options: PartitionOptions) -> tuple[list[Verdict], CapabilityStats]:
    """Capability verdicts before partitioning (options validated first)."""
    validate_options(model, options)
    rules = Rules(exclude_ops=options.exclude_ops, exclude_nodes=options.exclude_nodes,
                  functions=model.proto.functions)
    stats = CapabilityStats()
    verdicts = assess(model, oracle, rules=rules, plugins=options.plugins or (),
                      max_iterations=options.max_oracle_calls, stats=stats, plugin_ops=options.plugin_ops,
                      target=plan_target(options, oracle))
    return verdicts, stats


def plan_target(options: PartitionOptions, oracle: CapabilityOracle | None) -> str | None:
    """The runtime a plan is for: the option, else the flavor of the parser that judges it."""
    if options.target is not None or oracle is None:
        return options.target
    flavor = oracle.target.split()[0] if oracle.target else None
    return flavor if flavor in TARGETS else None


def build_plan(model: Model, verdicts: Sequence[Verdict], tensorrt: str | None,
               min_segment_size: int = DEFAULT_MIN_SEGMENT_SIZE, *, target: str | None = None,
               cost: BoundaryCost | None = BoundaryCost(), max_segment_weights: int | None = None) -> Plan:
    """Partition given verdicts into a :class:`Plan` (no parser involved); TensorRT segments
    whose weights pass ``max_segment_weights`` bytes are cut (see :func:`partitioner.partition.partition`)."""
    groups, final = partition(model.index, verdicts, min_segment_size, cost, max_segment_weights=max_segment_weights)
    segments: list[Segment] = []
    segment_of = [0] * len(final)
    shared = {i for g in groups for i in g.copies}  # every reader outside their segment copies these
    for sid, g in enumerate(groups):
        inputs, outputs = boundary(model.index, g.nodes, g.copies, shared)
        segments.append(Segment(sid, g.backend, tuple(sorted(g.nodes)), tuple(inputs), tuple(outputs), g.copies))
        for i in g.nodes:
            segment_of[i] = sid
    nodes = [NodeInfo(i, n.name, n.op_type, segment_of[i], final[i].backend, final[i].reason)
             for i, n in enumerate(model.proto.graph.node)]
    return Plan(model.source, tensorrt, segments, nodes, model=model, target=target, learned=dict(model.learned),
                rewritten=dict(model.rewritten), cost=cost)

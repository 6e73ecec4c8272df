"""Per-node capability: static rules, then a TensorRT parser oracle re-asked piece by piece,
then plugin claims. The result is data: a :class:`Verdict` per node with a reason."""
from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import onnx

from .extract import boundary, extract
from .model import Model
from .rules import Rules

log = logging.getLogger(__name__)

TENSORRT = "tensorrt"
ONNXRUNTIME = "onnxruntime"
PLUGIN_PREFIX = "plugin:"


@dataclass(frozen=True)
class Verdict:
    """Where a node runs and, when it falls back to ONNX Runtime, why."""

    backend: str  # "tensorrt" | "plugin:<name>" | "onnxruntime"
    reason: str | None = None

    @property
    def on_tensorrt(self) -> bool:
        return self.backend == TENSORRT or self.backend.startswith(PLUGIN_PREFIX)


@dataclass(frozen=True)
class Piece:
    nodes: tuple[int, ...]  # indices into the queried model's node list
    verified: bool


@dataclass(frozen=True)
class QueryResult:
    """A parser's answer about one standalone model (``supports_model_v2`` semantics)."""

    supported: bool
    pieces: tuple[Piece, ...] = ()
    errors: dict[int, str] = field(default_factory=dict)  # queried node index -> message


@runtime_checkable
class CapabilityOracle(Protocol):
    """Answers whether TensorRT can parse a standalone ONNX model, and which parts of it."""

    @property
    def target(self) -> str:
        """The runtime the answers hold for, e.g. ``"tensorrt_rtx 1.7.1"``."""
        ...

    def query(self, model: onnx.ModelProto) -> QueryResult: ...


@dataclass(frozen=True)
class Claim:
    claimed: bool
    reason: str | None = None


@runtime_checkable
class PluginClaim(Protocol):
    """A plugin's say on a node TensorRT's parser rejected (the registry lives in ``plugins``)."""

    @property
    def name(self) -> str: ...

    def claim(self, node: onnx.NodeProto, model: Model) -> Claim: ...


@dataclass
class CapabilityStats:
    oracle_calls: int = 0
    iteration_limit_hit: bool = False


def assess(model: Model, oracle: CapabilityOracle | None, *, rules: Rules | None = None,
           plugins: Sequence[PluginClaim] = (), max_iterations: int = 1000,
           stats: CapabilityStats | None = None) -> list[Verdict]:
    """A verdict for every main-graph node of ``model``.

    ``oracle=None`` skips the parser (every rule-passing node is taken as TensorRT-capable);
    useful only for planning what-ifs. The parser is asked about all rule-passing nodes at once,
    then every piece it did not verify is cut out and asked about alone (a fresh network and
    parser per question, inside the oracle), at most ``max_iterations`` questions in all."""
    index = model.index
    rules = rules or Rules(local_functions={(f.domain, f.name) for f in model.proto.functions})
    stats = stats if stats is not None else CapabilityStats()
    n = len(model.proto.graph.node)
    verdicts: list[Verdict | None] = [None] * n
    candidates: list[int] = []
    for i in index.order:
        reason = rules.check(model.proto.graph.node[i], index)
        if reason:
            verdicts[i] = Verdict(ONNXRUNTIME, reason)
        else:
            candidates.append(i)
    if oracle is None:
        for i in candidates:
            verdicts[i] = Verdict(TENSORRT)
    elif candidates:
        _ask_parser(model, oracle, candidates, verdicts, max_iterations, stats)
    if plugins:
        _plugin_claims(model, plugins, verdicts)
    return [v if v is not None else Verdict(ONNXRUNTIME, "no verdict") for v in verdicts]


def _ask_parser(model: Model, oracle: CapabilityOracle, candidates: list[int],
                verdicts: list[Verdict | None], max_iterations: int, stats: CapabilityStats) -> None:
    index = model.index
    work: deque[tuple[int, ...]] = deque([tuple(candidates)])
    while work:
        piece = work.popleft()
        if stats.oracle_calls >= max_iterations:
            stats.iteration_limit_hit = True
            for i in piece:
                verdicts[i] = Verdict(ONNXRUNTIME, f"capability check stopped after {max_iterations} parser calls")
            continue
        untyped = _untyped_inputs(model, piece)
        if untyped:
            rest = tuple(i for i in piece if i not in untyped)
            for i, reason in untyped.items():
                verdicts[i] = Verdict(ONNXRUNTIME, reason)
            if rest:
                work.append(rest)
            continue
        sub = extract(model, piece, name=f"capability_query_{stats.oracle_calls}")
        stats.oracle_calls += 1
        result = oracle.query(sub)
        if result.supported:
            for i in piece:
                verdicts[i] = Verdict(TENSORRT)
            continue
        local = index.ordered(piece)  # sub's node k is local[k]
        rejected: set[int] = set()
        for k, message in result.errors.items():
            if 0 <= k < len(local):
                verdicts[local[k]] = Verdict(ONNXRUNTIME, f"TensorRT parser: {message}")
                rejected.add(local[k])
        covered: set[int] = set()
        for p in result.pieces:
            nodes = tuple(local[k] for k in p.nodes if 0 <= k < len(local) and local[k] not in rejected)
            covered.update(nodes)
            if not nodes:
                continue
            if p.verified:
                for i in nodes:
                    verdicts[i] = Verdict(TENSORRT)
            elif len(nodes) < len(piece):
                work.append(nodes)
            else:  # the parser repeated the question without naming a culprit: no progress possible
                for i in nodes:
                    verdicts[i] = Verdict(ONNXRUNTIME, "TensorRT parser rejected this group without naming a node")
        leftover = tuple(i for i in local if i not in covered and i not in rejected)
        if leftover and len(leftover) < len(piece):
            work.append(leftover)
        else:
            for i in leftover:
                verdicts[i] = Verdict(ONNXRUNTIME, "TensorRT parser left this node out of every supported subgraph")


def _untyped_inputs(model: Model, piece: tuple[int, ...]) -> dict[int, str]:
    """Nodes of ``piece`` reading a boundary tensor whose dtype or rank is unknown, with the
    reason: a TensorRT network input needs both."""
    inputs, _ = boundary(model.index, piece)
    problems = {name: p for name in inputs if (p := _input_problem(name, model.index.types.get(name)))}
    if not problems:
        return {}
    out: dict[int, str] = {}
    for i in piece:
        for name in model.index.reads[i]:
            if name in problems:
                out.setdefault(i, problems[name])
    return out


def _input_problem(name: str, tp: onnx.TypeProto | None) -> str | None:
    if tp is None or tp.WhichOneof("value") != "tensor_type" or tp.tensor_type.elem_type == 0:
        return f"dtype of input '{name}' is unknown after shape inference"
    if not tp.tensor_type.HasField("shape"):
        return f"rank of input '{name}' is unknown (a TensorRT input needs a known rank)"
    return None


def _plugin_claims(model: Model, plugins: Sequence[PluginClaim], verdicts: list[Verdict | None]) -> None:
    for i, verdict in enumerate(verdicts):
        if verdict is None or verdict.on_tensorrt or (verdict.reason or "").startswith("excluded by user"):
            continue
        node = model.proto.graph.node[i]
        for plugin in plugins:
            claim = plugin.claim(node, model)
            if claim.claimed:
                verdicts[i] = Verdict(PLUGIN_PREFIX + plugin.name)
                break

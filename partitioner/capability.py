"""Per-node capability: static rules, then a TensorRT parser oracle re-asked piece by piece,
then plugin claims. The result is data: a :class:`Verdict` per node with a reason."""
from __future__ import annotations

import logging
from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import onnx

from partitioner.extract import boundary, constant_only, copies_for, extract
from partitioner.graph import GraphIndex
from partitioner.model import Model
from partitioner.rules import Rules
from partitioner.weights import stand_in

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
    unnamed: str | None = None  # an error the parser gave without naming its node
    blamed_ops: tuple[str, ...] = ()  # the op types that error names (the op whose importer failed)


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
           stats: CapabilityStats | None = None, plugin_ops: Collection[str] = (),
           target: str | None = None) -> list[Verdict]:
    """A verdict for every main-graph node of ``model``.

    ``oracle=None`` skips the parser (every rule-passing node is taken as TensorRT-capable);
    useful only for planning what-ifs. The parser is asked about all rule-passing nodes at once,
    then every piece it did not verify is cut out and asked about alone (a fresh network and
    parser per question, inside the oracle), at most ``max_iterations`` questions in all.

    Plugins claim what the parser rejected; nodes of ``plugin_ops`` types are offered to them
    first and never reach the parser when claimed. Claimed nodes' neighbours are parsed again
    with native stand-ins in their place. A plugin whose ``target_problem(target)`` names a
    problem (the target runtime cannot run it) leaves only a note on the ONNX Runtime reason."""
    index = model.index
    if hasattr(oracle, "weights_dir"):  # an oracle that reads weights: from the model's folder
        setattr(oracle, "weights_dir", model.base_dir)  # noqa: B010 - the oracle protocol does not declare it
    rules = rules or Rules(functions=model.proto.functions)
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
    forced: dict[int, PluginClaim] = {}
    usable = [p for p in plugins if _target_problem(p, target) is None]
    if usable and plugin_ops:
        forced = _forced_claims(model, usable, candidates, set(plugin_ops))
        candidates = [i for i in candidates if i not in forced]
    if oracle is None:
        for i in candidates:
            verdicts[i] = Verdict(TENSORRT)
    elif candidates:
        _ask_parser(model, oracle, candidates, verdicts, max_iterations, stats)
    claimed = dict(forced)
    if plugins:
        claimed.update(_plugin_claims(model, plugins, verdicts, target))
    for i, plugin in forced.items():
        verdicts[i] = Verdict(PLUGIN_PREFIX + plugin.name)
    if claimed and oracle is not None:
        _validate_with_standins(model, oracle, claimed, verdicts, max_iterations, stats)
    return [v if v is not None else Verdict(ONNXRUNTIME, "no verdict") for v in verdicts]


def _ask_parser(model: Model, oracle: CapabilityOracle, candidates: list[int],
                verdicts: list[Verdict | None], max_iterations: int, stats: CapabilityStats) -> None:
    """Verdicts of ``candidates`` by the parser: the whole set asked first, then what it names or
    leaves out, piece by piece. Constant-only nodes (values from initializers alone: an axes
    Constant) are not judged on their own: a question carries a copy of those its nodes read, as
    a segment does (:func:`partitioner.extract.copies_for`), so that an Unsqueeze reads its axes
    from a constant and not from a network input (which TensorRT refuses: "axis is not a
    constant"); they take TensorRT's verdict, and the partition places each with its first
    consumer. One the parser itself names is judged as named, copied no more, and the question
    asked again without it (its readers then read its value as an input, as they would from an
    ONNX Runtime segment: a weight's DequantizeLinear with a nonzero zero point)."""
    index = model.index
    wanted = set(candidates)
    lazy = set(constant_only(index, [i in wanted for i in range(len(index.graph.node))]))
    for i in lazy:
        verdicts[i] = Verdict(TENSORRT)
    asked = tuple(i for i in candidates if i not in lazy)
    work: deque[tuple[int, ...]] = deque([asked] if asked else [])
    while work:
        piece = work.popleft()
        if stats.oracle_calls >= max_iterations:
            stats.iteration_limit_hit = True
            for i in piece:
                verdicts[i] = Verdict(ONNXRUNTIME, f"capability check stopped after {max_iterations} parser calls")
            continue
        copies = copies_for(index, piece, frozenset(lazy))
        inputs, outputs = boundary(index, piece, copies)
        untyped = _untyped_inputs(model, piece, inputs)
        if untyped:
            rest = tuple(i for i in piece if i not in untyped)
            for i, reason in untyped.items():
                verdicts[i] = Verdict(ONNXRUNTIME, reason)
            if rest:
                work.append(rest)
            continue
        sub = extract(model, (*piece, *copies), name=f"capability_query_{stats.oracle_calls}", inputs=inputs,
                      outputs=outputs, initializer=stand_in if getattr(oracle, "takes_stand_ins", False) else None)
        stats.oracle_calls += 1
        result = oracle.query(sub)
        if result.supported:
            for i in piece:
                verdicts[i] = Verdict(TENSORRT)
            continue
        local = index.ordered((*piece, *copies))  # sub's node k is local[k]
        rejected: set[int] = set()
        for k, message in result.errors.items():
            if 0 <= k < len(local):
                # (a reason that names its source already, as the oracle's own refusals of nodes whose
                # build crashes TensorRT's builder do, is kept as it is)
                said = message if message.startswith("TensorRT") else f"TensorRT parser: {message}"
                verdicts[local[k]] = Verdict(ONNXRUNTIME, said)
                rejected.add(local[k])
        refused_copies = rejected & set(copies)
        if refused_copies:  # judged as named: asked again without them, their values read as inputs
            lazy -= refused_copies
            work.appendleft(piece)
            continue
        covered: set[int] = set(copies)
        for p in result.pieces:
            nodes = tuple(local[k] for k in p.nodes if 0 <= k < len(local) and local[k] not in rejected
                          and local[k] not in copies)
            covered.update(nodes)
            if not nodes:
                continue
            if p.verified:
                for i in nodes:
                    verdicts[i] = Verdict(TENSORRT)
            elif len(nodes) < len(piece):
                work.append(nodes)
            elif len(nodes) > 1:  # the parser repeated the question without naming a culprit: asked apart
                work.extend(_apart(index, nodes, result.blamed_ops))
            else:
                said = f"TensorRT parser: {result.unnamed}" if result.unnamed else \
                    "TensorRT parser rejected it without naming a node"
                verdicts[nodes[0]] = Verdict(ONNXRUNTIME, said)
        leftover = tuple(i for i in local if i not in covered and i not in rejected)  # (copies: covered)
        if leftover and len(leftover) < len(piece):
            work.append(leftover)
        elif len(leftover) > 1 and result.unnamed:  # refused whole, naming no node: asked apart
            work.extend(_apart(index, leftover, result.blamed_ops))
        else:
            said = f"TensorRT parser: {result.unnamed}" if result.unnamed else \
                "TensorRT parser left this node out of every supported subgraph"
            for i in leftover:
                verdicts[i] = Verdict(ONNXRUNTIME, said)


def _apart(index: GraphIndex, nodes: tuple[int, ...], blamed_ops: Collection[str]) -> list[tuple[int, ...]]:
    """Questions that find the culprit of a group the parser rejected without naming a node
    (``nodes``, in order, more than one). Where its error names an op whose importer failed
    (``blamed_ops``), each node of that op alone and the rest of the group (a group of such nodes
    only is asked half by half); else the group in two halves, each asked again and halved in turn
    while it is refused so: a culprit in as many questions as halvings."""
    ops = set(blamed_ops)
    suspects = [i for i in nodes if index.graph.node[i].op_type in ops]
    if suspects and len(suspects) < len(nodes):
        alone = set(suspects)
        return [*((i,) for i in suspects), tuple(i for i in nodes if i not in alone)]
    half = len(nodes) // 2
    return [nodes[:half], nodes[half:]]


def _untyped_inputs(model: Model, piece: tuple[int, ...], inputs: Sequence[str]) -> dict[int, str]:
    """Nodes of ``piece`` reading a boundary tensor (one of ``inputs``) whose dtype or rank is
    unknown, with the reason: a TensorRT network input needs both."""
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


def _forced_claims(model: Model, plugins: Sequence[PluginClaim], candidates: list[int],
                   ops: set[str]) -> dict[int, PluginClaim]:
    """Nodes of the forced op types that a plugin claims, kept from the parser."""
    out: dict[int, PluginClaim] = {}
    for i in candidates:
        node = model.proto.graph.node[i]
        if node.op_type in ops:
            plugin = next((p for p in plugins if p.claim(node, model).claimed), None)
            if plugin is not None:
                out[i] = plugin
    return out


def _target_problem(plugin: PluginClaim, target: str | None) -> str | None:
    problem = getattr(plugin, "target_problem", None)
    return problem(target) if callable(problem) and target is not None else None


def _plugin_claims(model: Model, plugins: Sequence[PluginClaim], verdicts: list[Verdict | None],
                   target: str | None) -> dict[int, PluginClaim]:
    """Claims on the nodes TensorRT's parser rejected: verdict ``plugin:<name>``, or, where the
    target cannot run the plugin, a note on the ONNX Runtime reason; a refusal's reason too."""
    claimed: dict[int, PluginClaim] = {}
    for i, verdict in enumerate(verdicts):
        if verdict is None or verdict.on_tensorrt or not (verdict.reason or "").startswith("TensorRT parser"):
            continue
        node = model.proto.graph.node[i]
        notes = []
        for plugin in plugins:
            claim = plugin.claim(node, model)
            problem = _target_problem(plugin, target)
            if claim.claimed and problem is None:
                verdicts[i] = Verdict(PLUGIN_PREFIX + plugin.name)
                claimed[i] = plugin
                break
            if claim.claimed:
                notes.append(f"plugin {plugin.name} covers it, but {problem}")
            elif claim.reason:
                notes.append(f"plugin {plugin.name} declined: {claim.reason}")
        else:
            if notes:
                verdicts[i] = Verdict(ONNXRUNTIME, "; ".join([verdict.reason or ""] + notes))
    return claimed


def _validate_with_standins(model: Model, oracle: CapabilityOracle, claimed: dict[int, PluginClaim],
                            verdicts: list[Verdict | None], max_iterations: int, stats: CapabilityStats) -> None:
    """Parse the TensorRT-bound nodes again with each claimed node replaced by a native stand-in,
    so the claimed node's neighbours are validated together; demote what the parser rejects."""
    from partitioner.errors import TrtBackendError
    from partitioner.standin import build_standin_model

    try:
        standin = build_standin_model(model, claimed)
    except (TrtBackendError, RuntimeError) as e:
        log.warning("%s: plugin stand-in model failed (%s); plugin claims dropped", model.source, e)
        for i, plugin in claimed.items():
            verdicts[i] = Verdict(ONNXRUNTIME, f"plugin {plugin.name}: could not validate its neighbours ({e})")
        return
    origin = standin.origin
    on_trt = [k for k in standin.model.index.order if (v := verdicts[origin[k]]) is not None and v.on_tensorrt]
    local: list[Verdict | None] = [None] * len(origin)
    _ask_parser(standin.model, oracle, on_trt, local, max_iterations, stats)
    for k in on_trt:
        v = local[k]
        if v is None or v.on_tensorrt:
            continue
        i = origin[k]
        if i in claimed:
            verdicts[i] = Verdict(ONNXRUNTIME, f"plugin {claimed[i].name}: native stand-in rejected ({v.reason})")
        else:
            verdicts[i] = Verdict(ONNXRUNTIME, f"{v.reason} (parsed next to plugin stand-ins)")

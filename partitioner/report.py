"""Human-readable views of a :class:`Plan`: a fallback census, a text summary, a model
annotated for Netron, and atomic file writes for all of them."""
from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import onnx

from partitioner.capability import ONNXRUNTIME, PLUGIN_PREFIX
from partitioner.cost import BoundaryCost, crossing_tensors, dim_names, si_bytes, tally
from partitioner.errors import OptionsError
from partitioner.plan import Plan, Segment
from partitioner.qdq import rewrite_summary

log = logging.getLogger(__name__)

META_PREFIX = "trt_backend."
META_KEYS = tuple(META_PREFIX + k for k in ("segment", "backend", "verdict", "reason", "copied_into"))
BACKEND_LABELS = {"tensorrt": "TensorRT", "onnxruntime": "ONNX Runtime"}
BACKEND_ORDER = {"tensorrt": 0, "onnxruntime": 1}
ELLIPSIS = "…"
REASON_WIDTH = 100
OPS_WIDTH = 60


@dataclass(frozen=True)
class CensusRow:
    """Fallback nodes of one op type: ``count`` in all, the main ``reason`` (the most frequent
    refusal by TensorRT or a rule; a demotion by size or boundary price only when there is no
    such refusal), and the ``others`` with their node counts, refusals first."""

    op_type: str
    count: int
    reason: str | None
    others: tuple[tuple[str | None, int], ...] = ()

    @property
    def reasons(self) -> tuple[tuple[str | None, int], ...]:
        """Every reason with its node count, the main one first."""
        return ((self.reason, self.count - sum(n for _, n in self.others)),) + self.others


SECONDARY = ("demoted:", "constant-only node placed")  # what the partition decided, not a refusal
_GROUP_SIZE = re.compile(r"^demoted: TensorRT group of \d+ node\(s\) is below")
_NODE_REF = re.compile(r" \(node \d+ '[^']*'\)")
_EXCLUDED_NODE = re.compile(r"^excluded by user \(node name '[^']*'\)$")


def reason_kind(reason: str | None) -> str | None:
    """``reason`` without what varies from node to node of one cause (a group's size, a boundary
    estimate, the node a parser message names), so the census counts causes."""
    if reason is None:
        return None
    reason = _NODE_REF.sub("", reason)
    reason = _GROUP_SIZE.sub("demoted: TensorRT group is below", reason)
    reason = _EXCLUDED_NODE.sub("excluded by user (by node name)", reason)
    if reason.startswith("demoted: its TensorRT group does not pay for its boundaries"):
        return "demoted: its TensorRT group does not pay for its boundaries"
    return reason


def is_refusal(reason: str | None) -> bool:
    """A reason TensorRT or a rule gave (not a demotion the partition made by size or price)."""
    return reason is not None and not reason.startswith(SECONDARY)


def census(plan: Plan) -> list[CensusRow]:
    """Nodes left to ONNX Runtime, one row per op type, most frequent first; within a row the
    refusals come before the demotions by size or boundary price."""
    by_op: dict[str, dict[str | None, list[str | None]]] = {}
    for n in plan.nodes:
        if n.verdict == ONNXRUNTIME:
            by_op.setdefault(n.op_type, {}).setdefault(reason_kind(n.reason), []).append(n.reason)
    rows = []
    for op, kinds in by_op.items():
        # A cause is shown as its nodes give it when they all give it alike, else without the parts that vary.
        reasons = {(raw[0] if len(set(raw)) == 1 else kind): len(raw) for kind, raw in kinds.items()}
        ordered = sorted(reasons.items(), key=lambda kv: (not is_refusal(kv[0]), -kv[1], kv[0] or ""))
        (main, _), others = ordered[0], tuple(ordered[1:])
        rows.append(CensusRow(op, sum(reasons.values()), main, others))
    rows.sort(key=lambda r: (-r.count, r.op_type))
    return rows


def backend_label(backend: str) -> str:
    if backend.startswith(PLUGIN_PREFIX):
        return f"plugin {backend[len(PLUGIN_PREFIX):]}"
    return BACKEND_LABELS.get(backend, backend)


def op_counts(plan: Plan, segment: Segment) -> list[tuple[str, int]]:
    """(op type, count) of a segment's nodes, most frequent first, then by name."""
    counts = Counter(plan.nodes[i].op_type for i in segment.nodes)
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def format_ops(counts: Sequence[tuple[str, int]], width: int = OPS_WIDTH) -> str:
    """``Conv x12, Relu x12, Add x4 …`` cut at a whole entry to fit ``width`` characters."""
    text = ""
    for k, (op, n) in enumerate(counts):
        part = f"{op} x{n}"
        candidate = part if not text else f"{text}, {part}"
        more = k + 1 < len(counts)
        if len(candidate) + (2 if more else 0) > width:
            return clip(f"{text} {ELLIPSIS}" if text else part, width)
        text = candidate
    return text


def clip(text: str, width: int) -> str:
    """``text`` on one line, at most ``width`` characters, ending in an ellipsis when cut."""
    one_line = " ".join(text.split())
    if len(one_line) <= width:
        return one_line
    return one_line[: max(width - 1, 0)].rstrip() + ELLIPSIS


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], right: Sequence[bool]) -> list[str]:
    """Aligned text table; ``right`` marks right-aligned (numeric) columns. No trailing spaces."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[k]) for r in cells) for k in range(len(headers))]
    lines = []
    for r in cells:
        parts = [c.rjust(w) if right[k] else c.ljust(w) for k, (c, w) in enumerate(zip(r, widths))]
        lines.append(("  " + "  ".join(parts)).rstrip())
    return lines


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def header_line(plan: Plan, origin: str | None = None) -> str:
    """The plan's one-line header; ``origin`` says where a plan not planned here comes from (a
    build folder's), in place of how long planning took."""
    target = f"TensorRT target {plan.tensorrt}" if plan.tensorrt else "no TensorRT parser"
    per_backend = Counter(s.backend for s in plan.segments)
    order = sorted(per_backend, key=lambda b: (BACKEND_ORDER.get(b, len(BACKEND_ORDER)), b))
    split = ", ".join(f"{per_backend[b]} {backend_label(b)}" for b in order)
    plugins = sum(1 for n in plan.nodes if n.verdict.startswith(PLUGIN_PREFIX))
    parts = [f"model {plan.model_name}", target, plural(len(plan.nodes), "node"),
             plural(len(plan.segments), "segment") + (f" ({split})" if split else "")]
    if plugins:
        parts.append(plural(plugins, "plugin node"))
    if origin is not None:
        parts.append(origin)
    elif plan.cached:
        parts.append(f"plan from the plan cache, loaded in {plan.seconds:.3f} s")
    else:
        parts.append(f"planned in {plan.seconds:.3f} s ({plural(plan.oracle_calls, 'parser call')})")
    return " | ".join(parts)


@dataclass(frozen=True)
class Crossing:
    """Tensors handed from one segment to another per run, and their bytes (estimated with
    :class:`BoundaryCost`'s sizes: those of named dims the shapes given fix, stand-ins for the rest
    of the symbolic dims and for unknown ones)."""

    tensors: int
    bytes: float
    unknown: int  # tensors of unknown size, not in ``bytes``
    symbolic_dim: int
    given: tuple[tuple[str, int], ...] = ()  # named dims of crossing tensors sized by the shapes given
    stand_ins: tuple[str, ...] = ()  # which stand-ins they needed: "symbolic", "unknown"
    unknown_dim: int = 64
    inferred: bool = False  # some sized as shape inference sizes them at the shapes given
    stood: int = 0  # tensors sized with the unknown-dim stand-in

    def describe(self) -> str:
        sizes = [f"at the shapes given: {', '.join(f'{k}={v}' for k, v in self.given)}"] if self.given else []
        if self.inferred:
            sizes.append("at the shapes given, as shape inference sizes them" if not self.given else
                         "the other dims as shape inference sizes them there")
        if "symbolic" in self.stand_ins:
            sizes.append(f"{'other ' if self.given else ''}symbolic dims counted as {self.symbolic_dim}")
        if "unknown" in self.stand_ins:
            sizes.append(f"unknown dims counted as {self.unknown_dim}"
                         + (f" in {self.stood} of the {plural(self.tensors, 'tensor')}" if self.stood else ""))
        if self.unknown:
            sizes.append(f"{self.unknown} of unknown size not counted")
        return (f"Boundaries: {plural(self.tensors, 'tensor')} handed between segments per run, "
                f"{si_bytes(self.bytes)}" + (f" ({'; '.join(sizes)})" if sizes else ""))


def boundary_crossing(plan: Plan, cost: BoundaryCost | None = None) -> Crossing | None:
    """What crosses segment boundaries per run (None: a plan read without its model), sized with
    ``cost`` (default: the plan's own, see :class:`~partitioner.plan.Plan`)."""
    if plan.model is None:
        return None
    cost = cost or plan.cost or BoundaryCost()
    index = plan.model.index
    group_of = [n.segment for n in plan.nodes]
    copied = frozenset(i for s in plan.segments for i in s.copies)
    crossing = list(crossing_tensors(index, group_of, copied))
    tensors, total, unknown = tally(index, crossing, cost)
    given: set[tuple[str, int]] = set()
    stand_ins: set[str] = set()
    inferred = False
    stood = 0
    for name in crossing:
        dims, names = index.dims_of(name) or (), dim_names(index, name) or ()
        sized = cost.tensor_dims.get(name)
        if sized is not None and len(sized) == len(dims) and min(dims, default=0) < 0:
            inferred = True  # (sized as shape inference sizes it at the shapes given)
            continue
        stood += any(d < -1 for d in dims)
        for k, d in enumerate(dims):
            named = names[k] if k < len(names) else None
            if d == -1 and named is not None and named in cost.sizes:
                given.add((named, cost.sizes[named]))
            elif d < 0:
                stand_ins.add("symbolic" if d == -1 else "unknown")
    return Crossing(tensors, total, unknown, cost.symbolic_dim, tuple(sorted(given)), tuple(sorted(stand_ins)),
                    cost.unknown_dim, inferred, stood)


def summary(plan: Plan, cost: BoundaryCost | None = None, origin: str | None = None, verbose: bool = False,
            listed: Collection[int] = ()) -> str:
    """The plan as a CLI prints it: header (``origin``: see :func:`header_line`), segment table,
    what crosses its boundaries (priced as the plan was, or with ``cost``, see
    :func:`boundary_crossing`), fallback census. ``verbose`` (``-v``): also every boundary tensor
    with the segments it goes between, and every node on ONNX Runtime with its whole reason (the
    census's reasons are cut to a column), each reason once over the nodes it holds for; ``listed``:
    nodes the caller lists itself (a folder's build demotions), left out."""
    lines = [header_line(plan, origin), "", "Segments"]
    seg_rows = [(s.id, backend_label(s.backend), len(s.nodes), len(s.inputs), len(s.outputs),
                 format_ops(op_counts(plan, s))) for s in plan.segments]
    lines += table(("id", "backend", "nodes", "inputs", "outputs", "ops"), seg_rows,
                   (True, False, True, True, True, False))
    crossing = boundary_crossing(plan, cost)
    if crossing is not None:
        lines += ["", crossing.describe()]
        if verbose:
            lines += _boundary_lines(plan)
    rows = census(plan)
    lines += ["", f"Fallback census ({plural(sum(r.count for r in rows), 'node')} on ONNX Runtime)"]
    if rows:
        cells: list[tuple[object, ...]] = []
        for r in rows:
            if not r.others:
                cells.append((r.op_type, r.count, clip(r.reason or "-", REASON_WIDTH)))
                continue
            for k, (reason, n) in enumerate(r.reasons):  # Several causes: each with its node count.
                cells.append((r.op_type if k == 0 else "", r.count if k == 0 else "",
                              clip(f"{n}: {reason or '-'}", REASON_WIDTH)))
        lines += table(("op", "count", "reason"), cells, (False, True, False))
    else:
        lines.append("  none: every node runs in TensorRT")
    if verbose and rows:
        lines += _node_lines(plan, frozenset(listed))
    if plan.rewritten:
        lines += ["", "Q/DQ rewritten"] + [f"  {line}" for line in rewrite_summary(plan.rewritten)]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _node_lines(plan: Plan, listed: frozenset[int]) -> list[str]:
    """Every node on ONNX Runtime (but ``listed``), under its whole reason, each reason once."""
    backend = {seg.id: seg.backend for seg in plan.segments}
    by_reason: dict[str, list[str]] = {}
    for n in plan.nodes:
        if backend.get(n.segment) != "tensorrt" and n.index not in listed:
            by_reason.setdefault(n.reason or "-", []).append(f"    {n.name} ({n.op_type})")
    if not by_reason:
        return []
    return ["", "Nodes on ONNX Runtime"] + [line for reason, nodes in by_reason.items()
                                            for line in (f"  {reason}:", *nodes)]


def _boundary_lines(plan: Plan) -> list[str]:
    """Each tensor handed between segments, with the segment making it and those reading it."""
    assert plan.model is not None
    index = plan.model.index
    group_of = [n.segment for n in plan.nodes]
    copied = frozenset(i for s in plan.segments for i in s.copies)
    out = []
    for name in sorted(crossing_tensors(index, group_of, copied)):
        made = group_of[index.producer[name]]
        readers = sorted({group_of[c] for c in index.consumers.get(name, ()) if group_of[c] != made})
        out.append(f"  {name}: segment {made} -> {', '.join(f'segment {r}' for r in readers)}")
    return out


def annotate(plan: Plan) -> onnx.ModelProto:
    """Copy of the plan's model whose nodes carry their segment, backend, verdict and reason
    as ``trt_backend.*`` metadata_props (Netron shows them in the node panel); a constant-only
    node copied into other segments also carries ``copied_into`` (their ids, comma-separated)."""
    if plan.model is None:
        raise OptionsError("this plan was read from JSON without its model; plan the model again to annotate it")
    proto = onnx.ModelProto()
    proto.CopyFrom(plan.model.proto)
    graph_nodes = proto.graph.node
    copied_into: dict[int, list[str]] = {}
    for seg in plan.segments:
        for i in seg.copies:
            copied_into.setdefault(i, []).append(str(seg.id))
    for info in plan.nodes:
        node = graph_nodes[info.index]
        values = {"segment": str(info.segment), "backend": plan.segments[info.segment].backend,
                  "verdict": info.verdict}
        if info.reason is not None:
            values["reason"] = info.reason
        if info.index in copied_into:
            values["copied_into"] = ",".join(copied_into[info.index])
        kept = [(p.key, p.value) for p in node.metadata_props if p.key not in META_KEYS]
        del node.metadata_props[:]
        for key, value in kept + [(META_PREFIX + k, v) for k, v in values.items()]:
            entry = node.metadata_props.add()
            entry.key, entry.value = key, value
    return proto



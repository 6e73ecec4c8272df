"""The result of ``--precision auto`` (:mod:`trt_backend.accuracy.auto_precision`): the precision
of every TensorRT segment, the nodes pinned to fp32 in it with the error that pinned them, and the
log of the search. Segments are matched by their nodes' names (a re-plan keeps names, not ids), so
``build`` applies a plan made earlier without searching again; it travels in ``BuildOptions``,
its JSON in the build manifest."""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from trt_backend.errors import PrecisionError

PLAN_FORMAT = 1


@dataclass(frozen=True)
class PinnedNode:
    """A node kept in fp32: its name, op type, the tensor whose error pinned it and that error in
    units of the tolerance (> 1: beyond it), in the round it was pinned."""

    node: str
    op_type: str
    tensor: str
    error: float
    round: int


@dataclass(frozen=True)
class SegmentPrecision:
    precision: str
    nodes: tuple[str, ...]  # names of the segment's nodes (how a segment is found again)
    pinned: tuple[PinnedNode, ...] = ()
    reduced: int = 0  # nodes computing in reduced precision (lowered or reading Q/DQ)
    segment: int = -1  # its id in the plan the search ran on (for reading; matching is by names)

    @property
    def pinned_names(self) -> tuple[str, ...]:
        return tuple(p.node for p in self.pinned)

    def words(self) -> str:
        """Its precision and pins as a user reads them: the first six pins with the error that
        pinned each, or a bisected tail as its first and last node."""
        tails = {p.tensor for p in self.pinned}
        head = f"{self.precision}, {self.reduced}/{len(self.nodes)} node(s) reduced, {len(self.pinned)} pinned to fp32"
        if len(self.pinned) > 6 and len(tails) == 1 and next(iter(tails)).startswith("(the last"):
            return f"{head}: {self.pinned[0].node} ... {self.pinned[-1].node} {next(iter(tails))}"  # one bisected tail
        pins = ", ".join(f"{p.node} ({p.op_type}, " + (p.tensor[1:-1] if p.tensor.startswith("(") else
                                                       f"{p.error:.3g} x tolerance") + ")" for p in self.pinned[:6])
        more = f" and {len(self.pinned) - 6} more" if len(self.pinned) > 6 else ""
        return head + (f": {pins}{more}" if self.pinned else "")


@dataclass(frozen=True)
class PrecisionPlan:
    """Per TensorRT segment, its precision and pinned nodes; what the search did and found."""

    segments: tuple[SegmentPrecision, ...]
    atol: float
    rtol: float
    allowed: tuple[str, ...]
    rounds: tuple[str, ...] = ()  # one line per round: what was measured and decided
    seconds: float = 0.0
    worst: Mapping[str, float] = field(default_factory=dict)  # output -> error / tolerance at the end
    # Nodes a build ran on ONNX Runtime after the search (TensorRT's builder refused them): the
    # search measured ``rounds`` and ``worst`` with them in TensorRT segments (see :meth:`after_build`).
    moved: tuple[str, ...] = ()
    # --atol-of-range: each output's atol at least this x its largest magnitude on the reference,
    # and the atol that came to per output (where above ``atol``)
    atol_of_range: float | None = None
    atols: Mapping[str, float] = field(default_factory=dict)

    def tolerance_words(self) -> str:
        """The tolerance the search held the outputs to: "atol 0.001, rtol 0.001", with the atol
        each output was given where --atol-of-range raised it."""
        if not self.atol_of_range:
            return f"atol {self.atol:g}, rtol {self.rtol:g}"
        raised = [f"'{n}' {a:.3g}" for n, a in self.atols.items() if a > self.atol]
        shown = ", ".join(raised[:4]) + (f" and {len(raised) - 4} more" if len(raised) > 4 else "")
        return (f"atol {self.atol:g} or {self.atol_of_range:g} x each output's largest magnitude"
                + (f" ({shown})" if raised else "") + f", rtol {self.rtol:g}")

    def after_build(self, moved: Sequence[str]) -> PrecisionPlan:
        """This plan as a build that moved the nodes ``moved`` to ONNX Runtime records it: the
        search's entries as they were (a rebuild from them moves the same nodes), and what moved."""
        return replace(self, moved=tuple(dict.fromkeys((*self.moved, *moved)))) if moved else self

    def moved_line(self) -> str | None:
        """What a build moved after the search, in words (None: nothing)."""
        if not self.moved:
            return None
        names = ", ".join(self.moved[:6]) + (f" and {len(self.moved) - 6} more" if len(self.moved) > 6 else "")
        return (f"searched before the build: TensorRT's builder then refused {len(self.moved)} node(s) ({names}), "
                "which run on ONNX Runtime; the errors above were measured with them in TensorRT segments "
                "(compare the folder to measure what was built)")

    def for_segment(self, node_names: Iterable[str]) -> SegmentPrecision | None:
        """The entry whose nodes overlap ``node_names`` most (None: no overlap, built fp32)."""
        names = set(node_names)
        best, overlap = None, 0
        for entry in self.segments:
            k = len(names.intersection(entry.nodes))
            if k > overlap:
                best, overlap = entry, k
        return best

    def to_dict(self) -> dict[str, Any]:
        return {"format": PLAN_FORMAT, "atol": self.atol, "rtol": self.rtol, "allowed": list(self.allowed),
                "seconds": round(self.seconds, 3), "worst": dict(self.worst), "rounds": list(self.rounds),
                **({"moved_after_search": list(self.moved)} if self.moved else {}),
                **({"atol_of_range": self.atol_of_range, "atols": dict(self.atols)} if self.atol_of_range else {}),
                "segments": [{"segment": s.segment, "precision": s.precision, "reduced": s.reduced,
                              "nodes": list(s.nodes),
                              "pinned": [p.__dict__ for p in s.pinned]} for s in self.segments]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "precision plan") -> PrecisionPlan:
        if "precision_plan" in data:  # a build manifest's build options, or a build manifest
            data = data["precision_plan"]
        elif isinstance(data.get("build_options"), Mapping) and "precision_plan" in data["build_options"]:
            data = data["build_options"]["precision_plan"]
        try:
            if data.get("format") != PLAN_FORMAT:
                raise KeyError("format")
            segments = tuple(SegmentPrecision(str(s["precision"]), tuple(s["nodes"]),
                                              tuple(PinnedNode(**p) for p in s["pinned"]), int(s.get("reduced", 0)),
                                              int(s.get("segment", -1)))
                             for s in data["segments"])
            of_range = data.get("atol_of_range")
            return cls(segments, float(data["atol"]), float(data["rtol"]), tuple(data["allowed"]),
                       tuple(data.get("rounds", ())), float(data.get("seconds", 0.0)), dict(data.get("worst", {})),
                       tuple(data.get("moved_after_search", ())), float(of_range) if of_range is not None else None,
                       {str(k): float(v) for k, v in (data.get("atols") or {}).items()})
        except (KeyError, TypeError, ValueError) as e:
            raise PrecisionError(f"{where}: not a format-{PLAN_FORMAT} precision plan ({e})") from None

    def lines(self) -> list[str]:
        """What a user reads: per segment its precision and pins."""
        return [f"segment {s.segment if s.segment >= 0 else k}: {s.words()}" for k, s in enumerate(self.segments)]


def read_precision_plan(source: str | os.PathLike[str] | Mapping[str, Any]) -> PrecisionPlan:
    """A precision plan from its JSON, a file holding it, a build manifest, or a build folder."""
    if isinstance(source, Mapping):
        return PrecisionPlan.from_dict(source)
    path = os.fspath(source)
    if os.path.isdir(path):
        path = os.path.join(path, "manifest.json")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise PrecisionError(f"cannot read precision plan {path}: {e}") from None
    if not isinstance(data, dict):
        raise PrecisionError(f"{path}: not a precision plan")
    return PrecisionPlan.from_dict(data, path)


def pinned_of(plan: PrecisionPlan | None, node_names: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """(precision, pinned node names) a segment of ``node_names`` is built in under ``plan``: the
    precision of the entry it overlaps most, and kept in fp32 every node the plan pinned, every
    node of another entry of another precision, and, in a reduced precision, every node no entry
    holds (a segment the partition merged since the search, or grew by nodes that ran on ONNX
    Runtime then): what the search measured, never lower."""
    entry = plan.for_segment(node_names) if plan is not None else None
    if plan is None or entry is None:
        return "fp32", ()
    names = set(node_names)  # (an entry can match segments the plan's one was cut into since)
    pinned = [n for e in plan.segments for n in e.pinned_names if n in names]
    pinned += [n for e in plan.segments if e is not entry and e.precision != entry.precision
               for n in e.nodes if n in names]
    if entry.precision not in ("fp32", "tf32"):
        held = {n for e in plan.segments for n in e.nodes}
        pinned += [n for n in node_names if n not in held]
    return entry.precision, tuple(dict.fromkeys(pinned))


def subgraphs_words(held: Mapping[str, Any], unreduced: bool = False) -> str:
    """:func:`trt_backend.engines.precision.fp32_subgraphs` in words (here, where a build's
    summary reads it before onnx loads); ``unreduced``: of a segment the precision asked reduced
    nothing of."""
    where = f"the {held['inner']} node(s) inside its {' and '.join(held['ops'])} subgraphs"
    if unreduced:
        return f"{where} compute in fp32 (the reduced precisions do not reach into subgraphs)"
    return f"{where} compute in fp32: reduced precision applies outside them"


def unreduced_words(asked: str) -> str:
    """A segment built in fp32 where ``asked`` (fp16, bf16, int8) was asked lowered none of its
    nodes (a build folder's segment entry records it under ``unreduced``), in words."""
    return f"{asked} asked: none of its nodes computes in a reduced precision"


def qdq_words(counts: Mapping[str, int]) -> str:
    """Counts of Q/DQ nodes by the type they quantize to (``trt_backend.engines.quantize.qdq_types``,
    as a build folder's segment entry records them under ``qdq_types``) as words, the most used
    first: "int8", "int8 and int32", "uint8, int8 and int32"."""
    names = sorted(counts, key=lambda k: (-counts[k], k))
    if len(names) < 2:
        return names[0] if names else "?"
    return ", ".join(names[:-1]) + " and " + names[-1]

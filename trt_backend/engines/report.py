"""What a build did: per-segment rows, failures, demotions, progress events (plain data)."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from partitioner import Plan, Segment
from trt_backend.engines.memory import EngineFile
from trt_backend.profiles.profile import Profile


@dataclass(frozen=True)
class SegmentReport:
    """One TensorRT segment's engine: build (or cache load) seconds, size, network layers."""

    segment: int
    nodes: int
    seconds: float
    engine_bytes: int
    layers: int  # layers of the parsed network, before TensorRT's fusions
    cached: bool
    precision: str
    key: str | None = None
    pinned: tuple[str, ...] = ()  # nodes kept fp32: the precision plan's, and those TensorRT refused in ``precision``


@dataclass(frozen=True)
class SegmentFailure:
    """A segment TensorRT would not parse or build; ``nodes`` are the blamed original node
    indices (empty when TensorRT named none)."""

    segment: int
    stage: str  # "parse" | "build"
    nodes: tuple[int, ...]
    message: str


@dataclass(frozen=True)
class Demotion:
    """A node sent back to ONNX Runtime after a failed build, and why; ``segment`` is the id
    of the segment it was in, in the plan of that round."""

    node: int
    name: str
    op_type: str
    reason: str
    round: int
    segment: int | None = None


@dataclass(frozen=True)
class DemotionGroup:
    """The nodes one failed segment sent back to ONNX Runtime in one round, with the one reason
    TensorRT gave (as a manifest's ``demoted`` entries hold them: dicts of :class:`Demotion`)."""

    round: int
    segment: int | None  # None: a manifest written before demotions named their segment.
    reason: str
    nodes: tuple[Mapping[str, Any], ...]

    def ops(self, width: int = 60) -> str:
        """``Conv x26, Relu x26, Concat x8 …`` of the group's nodes, cut to ``width``."""
        counts = sorted(Counter(str(d.get("op_type")) for d in self.nodes).items(), key=lambda kv: (-kv[1], kv[0]))
        text = ""
        for op, n in counts:
            part = f"{op} x{n}"
            if text and len(text) + len(part) + 4 > width:
                return text + " …"
            text = f"{text}, {part}" if text else part
        return text

    def line(self) -> str:
        """One line: where the nodes were, how many of which ops, and the reason, once."""
        where = f"segment {self.segment}" if self.segment is not None else "a segment"
        count = len(self.nodes)
        return (f"demoted {count} node{'s' if count != 1 else ''} of {where} (round {self.round}: {self.ops()}) to "
                f"ONNX Runtime: {self.reason}")

    def node_lines(self) -> list[str]:
        """One line per node (``--verbose``)."""
        return [f"node {d.get('node')} '{d.get('name')}' ({d.get('op_type')})" for d in self.nodes]


def group_demotions(demoted: Sequence[Mapping[str, Any]]) -> list[DemotionGroup]:
    """Demotions (dicts of :class:`Demotion`) grouped by round, segment and reason, in the order
    they happened."""
    groups: dict[tuple[int, int | None, str], list[Mapping[str, Any]]] = {}
    for d in demoted:
        key = (int(d.get("round") or 1), d.get("segment"), str(d.get("reason") or ""))
        groups.setdefault(key, []).append(d)
    return [DemotionGroup(r, seg, reason, tuple(nodes)) for (r, seg, reason), nodes in groups.items()]


def demotion_lines(demoted: Sequence[Mapping[str, Any]], verbose: bool = False) -> list[str]:
    """One line per segment TensorRT refused (per round), its reason once; ``verbose`` lists
    every node under it."""
    lines = []
    groups = group_demotions(demoted)
    for g in groups:
        lines.append(g.line())
        if verbose:
            lines += ["  " + n for n in g.node_lines()]
    if groups and not verbose:
        lines.append(f"({sum(len(g.nodes) for g in groups)} demoted node(s) in all; -v lists them)")
    return lines



@dataclass(frozen=True)
class BuildEvent:
    """Progress: one segment finished (``status`` built | cached | failed), ``done`` of ``total``."""

    segment: int
    status: str
    done: int
    total: int
    seconds: float


BuildProgress = Callable[[BuildEvent], None]


@dataclass
class BuiltSegment:
    """One TensorRT segment as built: ``model`` is the model its engine is (or would be) built
    from, in ``precision`` with ``pinned`` nodes kept fp32 (casts for fp16/bf16, Q/DQ for int8);
    ``engine`` None where none was built (emulation runs ``model``)."""

    segment: Segment
    model: Any  # onnx.ModelProto
    precision: str
    pinned: tuple[str, ...]
    profiles: list[Profile]
    shape_tensors: frozenset[str]
    engine: bytes | EngineFile | None = None  # A file for builds streamed into a folder.


@dataclass
class BuildReport:
    flavor: str
    segments: list[SegmentReport] = field(default_factory=list)
    failures: list[SegmentFailure] = field(default_factory=list)
    demoted: list[Demotion] = field(default_factory=list)
    rounds: int = 1
    seconds: float = 0.0  # wall time of the whole build, all rounds
    # The most weights a TensorRT segment could hold to build within the memory budget: the limit
    # the build held segments to, where a budget was given or what was free was too little for a
    # segment as planned (see :mod:`trt_backend.engines.memory`); None where it held them to none.
    max_segment_weights: int | None = None

    @property
    def build_seconds(self) -> float:
        """Sum of per-segment build seconds (can exceed wall time: segments are prepared in parallel)."""
        return sum(s.seconds for s in self.segments)

    def to_dict(self) -> dict[str, Any]:
        return {"flavor": self.flavor, "rounds": self.rounds, "seconds": self.seconds,
                "max_segment_weights": self.max_segment_weights, "segments": [asdict(s) for s in self.segments],
                "failures": [asdict(f) for f in self.failures],
                "demoted": [asdict(d) for d in self.demoted]}

    def table(self) -> str:
        """A fixed-width text table (the CLI prints it)."""
        lines = [f"{'segment':>7} {'nodes':>6} {'seconds':>8} {'engine bytes':>13} {'layers':>7} "
                 f"{'precision':>9}  source"]
        for s in sorted(self.segments, key=lambda r: r.segment):
            lines.append(f"{s.segment:>7} {s.nodes:>6} {s.seconds:>8.2f} {s.engine_bytes:>13} {s.layers:>7} "
                         f"{s.precision:>9}  {'cache' if s.cached else 'built'}")
        for d in self.demoted:
            lines.append(f"demoted node {d.node} ({d.op_type} '{d.name}') in round {d.round}: {d.reason}")
        return "\n".join(lines)


@dataclass
class BuildResult:
    """The plan the engines belong to, engines by segment id, and the report."""

    plan: Plan
    engines: dict[int, bytes | EngineFile]
    report: BuildReport
    # segment id -> the form its engine was built from, for engines built in this call (a cached
    # engine's form is made again: see :func:`trt_backend.engines.builder.built_form`)
    models: dict[int, Any] = field(default_factory=dict)


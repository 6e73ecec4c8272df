"""What a build did: per-segment rows, failures, demotions, progress events (plain data)."""
from __future__ import annotations

from collections.abc import Callable
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
    pinned: tuple[str, ...] = ()  # nodes kept fp32 because TensorRT refused them in ``precision``


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
    """A node sent back to ONNX Runtime after a failed build, and why."""

    node: int
    name: str
    op_type: str
    reason: str
    round: int


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
    engine: bytes | EngineFile | None = None  # (a file for builds streamed into a folder)


@dataclass
class BuildReport:
    flavor: str
    segments: list[SegmentReport] = field(default_factory=list)
    failures: list[SegmentFailure] = field(default_factory=list)
    demoted: list[Demotion] = field(default_factory=list)
    rounds: int = 1
    seconds: float = 0.0  # wall time of the whole build, all rounds

    @property
    def build_seconds(self) -> float:
        """Sum of per-segment build seconds (exceeds wall time when segments build in parallel)."""
        return sum(s.seconds for s in self.segments)

    def to_dict(self) -> dict[str, Any]:
        return {"flavor": self.flavor, "rounds": self.rounds, "seconds": self.seconds,
                "segments": [asdict(s) for s in self.segments], "failures": [asdict(f) for f in self.failures],
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

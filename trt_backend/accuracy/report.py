"""The result of an accuracy comparison: per output errors and verdicts, and, when asked, the
segment a divergence starts in. Its JSON holds the keys scripts read (``passed``, ``atol``,
``rtol``, ``outputs[].{name, max_abs_error, max_rel_error, passed}``, ``localization.{segment,
backend, nodes, own_error}``) and adds more beside them; a number that is not finite (an
error that could not be measured, e.g. shapes that differ) is written as null."""
from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class TensorError:
    """Errors of one tensor (worst over the iterations compared). ``required_*`` is the
    tolerance that would pass under the chosen error statistic, as Polygraphy prints it
    ("Minimum Required Tolerance"). Non-finite values equal in both runs (NaN against NaN, inf
    against the same inf) are ``nonfinite_matched`` and count as equal; any other NaN/inf
    disagreement is ``nonfinite_mismatched`` and fails the tensor whatever the tolerance: its
    max errors and required tolerances are then inf (an element's error is unbounded), and
    ``finite_max_abs_error`` is the largest over the elements finite on both sides."""

    max_abs_error: float
    max_rel_error: float
    mean_abs_error: float
    median_abs_error: float
    required_atol: float
    required_rtol: float
    passed: bool
    nonfinite_matched: int = 0
    nonfinite_mismatched: int = 0
    note: str | None = None  # why it could not be compared (shape or dtype mismatch)
    differing: int | None = None  # judged by equality (integers, booleans): elements that differ; None: by tolerance
    finite_max_abs_error: float | None = None  # with NaN/inf mismatches: the max over elements finite on both sides

    @staticmethod
    def worst(errors: list[TensorError]) -> TensorError:
        notes = [e.note for e in errors if e.note]

        def top(name: str) -> float:
            return max(float(getattr(e, name)) for e in errors)

        return TensorError(top("max_abs_error"), top("max_rel_error"), top("mean_abs_error"), top("median_abs_error"),
                           top("required_atol"), top("required_rtol"), passed=all(e.passed for e in errors),
                           nonfinite_matched=max(e.nonfinite_matched for e in errors),
                           nonfinite_mismatched=max(e.nonfinite_mismatched for e in errors),
                           note=notes[0] if notes else None,
                           differing=(sum(e.differing or 0 for e in errors)
                                      if any(e.differing is not None for e in errors) else None),
                           finite_max_abs_error=max((e.finite_max_abs_error for e in errors
                                                     if e.finite_max_abs_error is not None), default=None))


@dataclass(frozen=True)
class OutputReport:
    """One model output: errors against the reference and the tolerance it was held to."""

    name: str
    error: TensorError
    atol: float
    rtol: float
    failed_iterations: int = 0
    elements: int = -1  # elements of the reference compared over every comparison (-1: not counted)
    finite_elements: int = -1  # those of them not NaN/inf in the reference (-1: not counted)
    value_range: tuple[float, float] | None = None  # finite reference values, low..high
    compared_text: str = ""  # what was compared, in words

    @property
    def compared(self) -> bool:
        """False when the reference held nothing to compare in every comparison: an empty output,
        or one NaN/inf in every element (NaN against NaN compares nothing)."""
        return self.elements != 0 and self.finite_elements != 0

    @property
    def passed(self) -> bool:
        return self.error.passed and self.compared

    def to_dict(self) -> dict[str, Any]:
        e = self.error
        return {"name": self.name, "max_abs_error": e.max_abs_error, "max_rel_error": e.max_rel_error,
                "passed": e.passed, "atol": self.atol, "rtol": self.rtol, "mean_abs_error": e.mean_abs_error,
                "median_abs_error": e.median_abs_error, "required_atol": e.required_atol,
                "required_rtol": e.required_rtol, "failed_iterations": self.failed_iterations,
                "nonfinite_matched": e.nonfinite_matched, "nonfinite_mismatched": e.nonfinite_mismatched,
                "note": e.note, "elements": self.elements, "finite_elements": self.finite_elements,
                "compared": self.compared, "compared_by": "tolerance" if e.differing is None else "equality",
                "differing_elements": e.differing, "finite_max_abs_error": e.finite_max_abs_error,
                "value_range": list(self.value_range) if self.value_range is not None else None}


@dataclass(frozen=True)
class SegmentComparison:
    """One segment during localisation. ``stitched_error``: worst abs error of its outputs in the
    stitched run (its own error plus what it inherited); ``own_error``: the same when it runs
    alone on the reference's values of its inputs."""

    id: int
    backend: str
    executor: str
    precision: str
    nodes: tuple[int, ...]
    outputs: tuple[str, ...]
    stitched_error: float
    stitched_passed: bool
    own_error: float
    own_passed: bool
    tensors: tuple[dict[str, Any], ...] = ()  # per output tensor: name, stitched and own errors

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["nodes"], d["outputs"], d["tensors"] = list(self.nodes), list(self.outputs), list(self.tensors)
        return d


@dataclass(frozen=True)
class Localization:
    """The segment a divergence starts in: the first, in run order, whose outputs in the stitched
    run exceed the tolerance (``reason`` says when none does alone and the one with the largest
    own error is named instead)."""

    segment: SegmentComparison
    node_names: tuple[str, ...]
    op_types: tuple[str, ...]
    iteration: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        s = self.segment
        return {"segment": s.id, "backend": s.backend, "nodes": list(s.nodes), "own_error": s.own_error,
                "executor": s.executor, "precision": s.precision, "stitched_error": s.stitched_error,
                "own_passed": s.own_passed, "node_names": list(self.node_names), "op_types": list(self.op_types),
                "outputs": list(s.outputs), "tensors": list(s.tensors), "iteration": self.iteration,
                "reason": self.reason}


@dataclass
class ComparisonReport:
    """What :func:`trt_backend.compare` found; truthy when every output passed."""

    passed: bool
    atol: float
    rtol: float
    outputs: list[OutputReport]
    localization: Localization | None = None
    error_stat: str = "elemwise"
    precision: str = "fp32"
    iterations: int = 0  # comparisons made (data points x iterations per point)
    seed: int = 0
    points: list[dict[str, list[int]]] = field(default_factory=list)  # input shapes generated
    executors: list[str] = field(default_factory=list)
    segments: list[SegmentComparison] | None = None  # filled by localisation
    skipped_outputs: list[str] = field(default_factory=list)  # outputs not compared (none today: every kind is)
    inference_ms: dict[str, float] = field(default_factory=dict)  # mean per runner
    model: str = ""
    notes: list[str] = field(default_factory=list)  # what the verdict rests on, or does not
    tasks: list[Any] = field(default_factory=list)  # task checks (:class:`~trt_backend.accuracy.tasks.TaskResult`)
    atol_of_range: float | None = None  # each output's atol raised to this x its largest reference magnitude

    def __bool__(self) -> bool:
        return self.passed

    @property
    def failed_outputs(self) -> list[str]:
        return [o.name for o in self.outputs if not o.passed]

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "passed": self.passed, "atol": self.atol, "rtol": self.rtol,
            "outputs": [o.to_dict() for o in self.outputs],
            "localization": self.localization.to_dict() if self.localization else None,
            "schema_version": SCHEMA_VERSION, "model": self.model, "error_stat": self.error_stat,
            "precision": self.precision, "iterations": self.iterations, "seed": self.seed, "points": self.points,
            "executors": self.executors, "skipped_outputs": self.skipped_outputs, "inference_ms": self.inference_ms,
            "segments": [s.to_dict() for s in self.segments] if self.segments is not None else None,
            "notes": self.notes, "compared_outputs": sum(o.compared for o in self.outputs),
            "tasks": [t.to_dict() for t in self.tasks], "atol_of_range": self.atol_of_range,
        }
        finite: dict[str, Any] = _finite(d)
        return finite

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def lines(self) -> list[str]:
        """A human-readable report, one line per output then localisation."""
        out = [f"{'output':<28} {'max abs':>10} {'max rel':>10} {'atol':>8} {'rtol':>8}  "
               f"{'needs (' + self.error_stat + ')':<30} verdict"]
        for o in self.outputs:
            e = o.error
            needs = f"abs={e.required_atol:.3g} or rel={e.required_rtol:.3g}"
            tolerances = f"{o.atol:>8.2g} {o.rtol:>8.2g}"
            if e.differing is not None:  # integers and booleans: equal or not, no tolerance
                needs = f"equal: {e.differing} of {o.elements} differ" if o.elements >= 0 else \
                    f"equal: {e.differing} differ"
                tolerances = f"{'-':>8} {'-':>8}"
            verdict = "PASSED" if o.passed else "FAILED"
            extra = []
            if e.nonfinite_mismatched:
                finite = f" (elements finite on both sides: max abs {e.finite_max_abs_error:.3g})" \
                    if e.finite_max_abs_error is not None else ""
                extra.append(f"{e.nonfinite_mismatched} NaN/inf mismatch(es): no tolerance passes{finite}")
                needs = "no tolerance passes"
            if e.nonfinite_matched:
                extra.append(f"{e.nonfinite_matched} NaN/inf equal in both")
            if e.note:
                extra.append(e.note)
            if o.failed_iterations:
                extra.append(f"failed {o.failed_iterations}/{self.iterations} iteration(s)")
            if not o.compared:
                verdict = "NOT COMPARED"
            if o.compared_text:
                extra.append(o.compared_text)
            out.append(f"{o.name:<28} {e.max_abs_error:>10.3g} {e.max_rel_error:>10.3g} {tolerances}  "
                       f"{needs:<30} {verdict}" + (f" ({'; '.join(extra)})" if extra else ""))
        for name in self.skipped_outputs:
            out.append(f"{name:<28} not compared (not a tensor)")
        if self.tasks:
            out.append("task checks:")
            out += ["  " + t.line() for t in self.tasks]
        if self.segments is not None:
            out.append("segments (stitched error = own + inherited; own = run alone on reference inputs):")
            for s in self.segments:
                out.append(f"  segment {s.id:>3} {s.backend:<11} {s.executor:<11} {s.precision:<5} "
                           f"{len(s.nodes):>5} node(s)"
                           f"  stitched {s.stitched_error:.3g} {'ok' if s.stitched_passed else 'DIVERGES'}"
                           f"  own {s.own_error:.3g} {'ok' if s.own_passed else 'EXCEEDS'}")
        loc = self.localization
        if loc is not None:
            s = loc.segment
            # The nodes that compute first: Identity, Reshape and their kind move values without error.
            pairs = list(zip(loc.node_names, loc.op_types))
            computing = [(n, t) for n, t in pairs if t not in _PASS_THROUGH] or pairs
            names = ", ".join(f"{n} ({t})" for n, t in computing[:8])
            census = Counter(loc.op_types).most_common(6)
            more = (f" and {len(s.nodes) - min(8, len(computing))} more: "
                    + ", ".join(f"{t} x{c}" for t, c in census)) if len(s.nodes) > 8 else ""
            out.append(f"first diverging segment: {s.id} ({s.backend}, executor {s.executor}, {s.precision}): "
                       f"own error {s.own_error:.3g}, stitched error {s.stitched_error:.3g} [{loc.reason}]")
            out.append(f"  nodes: {names}{more}")
        elif self.segments is not None:
            out.append("no segment diverges from the reference")
        for note in self.notes:
            out.append(f"note: {note}")
        compared = sum(o.compared for o in self.outputs)
        if self.outputs and not compared:
            verdict = ("NOTHING COMPARED (every output was empty, or NaN/inf in every element, on every input: "
                       "give inputs that produce finite values)")
        elif self.passed:
            verdict = ("PASSED" if compared == len(self.outputs)
                       else f"PASSED ({compared} of {len(self.outputs)} output(s) compared)")
        else:
            failed_tasks = sum(not t.passed for t in self.tasks)
            verdict = f"FAILED ({len(self.failed_outputs)} of {len(self.outputs)} output(s)" + (
                f", {failed_tasks} of {len(self.tasks)} task check(s))" if failed_tasks else ")")
        atol = f"atol {self.atol:g}" + (f" or {self.atol_of_range:g} x each output's largest magnitude"
                                         if self.atol_of_range else "")
        out.append(f"{verdict} | {self.iterations} comparison(s), {self.error_stat} error, {atol}, "
                   f"rtol {self.rtol:g}, precision {self.precision}")
        return out


_PASS_THROUGH = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Shape", "Gather",
                           "Concat", "Slice", "Constant", "ConstantOfShape", "Cast", "Expand"})


def _finite(value: Any) -> Any:
    """JSON has no NaN or inf: write them as null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value

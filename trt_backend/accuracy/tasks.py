"""Task checks: whether the session gives the same *answer* as the reference, beside the numeric
error. A detector whose boxes move by a pixel, or a classifier whose logits move by 1e-2, can
fail any absolute tolerance and still give every user the same result; these checks say so.

- ``top1[:OUT]``: per row, the arg-max over the last axis agrees (classification). An output of
  one score a row (a last axis of 1: a binary classifier's probability) has no class to pick: the
  check says NOT COMPARED there (its arg-max would agree whatever the scores).
- ``argmax-sequence[:OUT][;time=AXIS][;blank=ID]``: per sequence, the greedy token sequence
  agrees: the arg-max over the last axis along the sequence axis (``time=``, default 1: outputs
  laid out [batch, time, classes]; 0 for [time, batch, classes]), repeats merged and the blank
  token (``blank=``, default 0) dropped, as CTC decoding does (text recognition, speech). The
  report line names the axis and the blank it used.
- ``boxes:BOXES,SCORES[,CLASSES]``: detections (boxes as x1, y1, x2, y2) with a score at or above
  the threshold (``score=``, default 0.3) match one to one when their IoU reaches ``iou=``
  (default 0.5) and their classes agree; the agreement is matched / max(ours, reference).

A spec is ``KIND[:OUTPUTS][@MIN][;key=value...]``, e.g. ``top1:logits@0.99`` or
``boxes:boxes,scores,labels@0.95;score=0.25``. ``MIN`` (default 1.0) is the agreement the check
needs to pass; a check that had nothing to look at (no rows, no detection on either side) says
so and does not pass."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from partitioner.options_check import number_option
from trt_backend.errors import OptionsError

KINDS = ("top1", "argmax-sequence", "boxes")


@dataclass(frozen=True)
class TaskCheck:
    """One task check (see the module doc); ``outputs`` empty: the first output it can use."""

    kind: str
    outputs: tuple[str, ...] = ()
    minimum: float = 1.0
    score: float = 0.3
    iou: float = 0.5
    time: int = 1  # argmax-sequence: the sequence axis
    blank: int = 0  # argmax-sequence: the CTC blank token

    @classmethod
    def parse(cls, spec: str | TaskCheck) -> TaskCheck:
        if isinstance(spec, TaskCheck):
            return spec
        if not isinstance(spec, str) or not spec.strip():
            raise OptionsError(f"a task check is KIND[:OUTPUTS][@MIN][;key=value], got {spec!r}")
        head, *options = [p.strip() for p in spec.split(";")]
        minimum = 1.0
        if "@" in head:
            head, low = head.rsplit("@", 1)
            minimum = _fraction(low, spec)
        kind, _, names = head.partition(":")
        if kind not in KINDS:
            raise OptionsError(f"unknown task check {kind!r} in {spec!r}; choose one of {', '.join(KINDS)}")
        outputs = tuple(n.strip() for n in names.split(",") if n.strip())
        kw: dict[str, Any] = {}
        takes = {"boxes": ("score", "iou"), "argmax-sequence": ("time", "blank")}.get(kind, ())
        for option in options:
            key, _, value = option.partition("=")
            if key not in takes:
                raise OptionsError(f"task check {spec!r}: unknown option {option!r} (boxes takes score= and iou=, "
                                   "argmax-sequence time= and blank=)")
            kw[key] = _fraction(value, spec) if kind == "boxes" else \
                number_option(value, f"task check {spec!r}: {key}", low=0, whole=True, text=True)
        if kind == "boxes" and len(outputs) not in (2, 3):
            raise OptionsError(f"task check {spec!r}: boxes names its outputs: boxes:BOXES,SCORES[,CLASSES]")
        if kind != "boxes" and len(outputs) > 1:
            raise OptionsError(f"task check {spec!r}: {kind} looks at one output")
        return cls(kind, outputs, minimum, **kw)

    @property
    def label(self) -> str:
        return f"{self.kind}" + (f":{','.join(self.outputs)}" if self.outputs else "")


@dataclass
class TaskResult:
    """A task check over every comparison: units that agree of units compared (rows, or
    detections), and whether that reaches the check's minimum."""

    check: TaskCheck
    agreed: float = 0.0
    total: int = 0
    note: str = ""
    details: list[str] = field(default_factory=list)

    @property
    def agreement(self) -> float:
        return self.agreed / self.total if self.total else 0.0

    @property
    def passed(self) -> bool:
        return self.total > 0 and self.agreement >= self.check.minimum - 1e-12

    def line(self) -> str:
        unit = {"boxes": "detection(s)", "argmax-sequence": "sequence(s)"}.get(self.check.kind, "row(s)")
        if not self.total:
            return f"{self.check.label:<28} nothing to check ({self.note or 'no ' + unit}): NOT COMPARED"
        verdict = "PASSED" if self.passed else "FAILED"
        if self.check.kind == "argmax-sequence":
            unit += f" (time axis {self.check.time}, blank {self.check.blank})"
        return (f"{self.check.label:<28} agreement {self.agreement:.4f} over {self.total} {unit} "
                f"(needs {self.check.minimum:g}) {verdict}" + (f" ({self.note})" if self.note else ""))

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.check.label, "kind": self.check.kind, "agreement": self.agreement,
                "units": self.total, "minimum": self.check.minimum, "passed": self.passed, "note": self.note}


def run_checks(checks: Sequence[TaskCheck], ours: Sequence[Mapping[str, Any]], ref: Sequence[Mapping[str, Any]],
               output_names: Sequence[str]) -> list[TaskResult]:
    """Each check over every comparison (``ours[k]`` against ``ref[k]``)."""
    results = []
    for check in checks:
        result = TaskResult(check)
        names = check.outputs or _default_output(check, ref, output_names)
        missing = [n for n in names if n not in output_names]
        if missing:
            raise OptionsError(f"task check {check.label}: the model has no output {', '.join(missing)} "
                               f"(outputs: {', '.join(output_names)})")
        for a, b in zip(ours, ref):
            if check.kind == "boxes":
                _boxes(result, [np.asarray(a[n]) for n in names], [np.asarray(b[n]) for n in names])
            else:
                _rows(result, _as_rows(a[names[0]]), _as_rows(b[names[0]]))
        results.append(result)
    return results


def _as_rows(value: Any) -> np.ndarray:
    """An output as rows of scores: a sequence of maps (ZipMap's label -> probability, one map a
    row) becomes one row per map, its scores in the order of the labels; anything else as it is."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(m, Mapping) for m in value):
        labels = sorted(value[0])
        if all(sorted(m) == labels for m in value):
            return np.array([[m[k] for k in labels] for m in value], dtype=np.float64)
    return np.asarray(value)


def _default_output(check: TaskCheck, ref: Sequence[Mapping[str, Any]], names: Sequence[str]) -> tuple[str, ...]:
    if check.kind == "boxes":
        raise OptionsError("task check boxes names its outputs: boxes:BOXES,SCORES[,CLASSES]")
    need = 2 if check.kind == "top1" else 3
    for name in names:
        values = [r.get(name) for r in ref]
        if all(isinstance(v, np.ndarray) and v.dtype.kind == "f" and v.ndim >= need and v.shape[-1] > 1
               for v in values):
            return (name,)
    raise OptionsError(f"task check {check.kind}: no float output of rank >= {need} with more than one class "
                       f"(its last axis) to check; name one ({check.kind}:OUTPUT)")


def _rows(result: TaskResult, ours: np.ndarray, ref: np.ndarray) -> None:
    if ours.shape != ref.shape:
        result.note = f"shape {ours.shape} vs reference {ref.shape}"
        return
    if ref.ndim < 2 or ref.size == 0:
        return
    if ref.shape[-1] == 1:  # (a score per row, no classes: its arg-max is 0 whatever the score)
        result.note = f"one score a row (shape {ref.shape}): no class to pick"
        return
    a, b = np.argmax(ours, axis=-1), np.argmax(ref, axis=-1)
    if result.check.kind == "top1":
        rows_a, rows_b = a.reshape(-1), b.reshape(-1)
        result.agreed += float(np.sum(rows_a == rows_b))
        result.total += rows_b.size
        return
    axis = result.check.time
    if axis >= a.ndim:
        result.note = f"time axis {axis}, but the tokens of shape {ref.shape} have {a.ndim} axes"
        return
    rows_a = np.moveaxis(a, axis, -1).reshape(-1, a.shape[axis])
    rows_b = np.moveaxis(b, axis, -1).reshape(-1, b.shape[axis])
    for x, y in zip(rows_a, rows_b):
        same = _collapse(x, result.check.blank) == _collapse(y, result.check.blank)
        result.agreed += float(same)
        result.total += 1


def _collapse(tokens: np.ndarray, blank: int = 0) -> tuple[int, ...]:
    """Greedy CTC: repeats merged, blanks dropped."""
    out: list[int] = []
    last = -1
    for t in tokens.tolist():
        if t != last and t != blank:
            out.append(int(t))
        last = t
    return tuple(out)


def _boxes(result: TaskResult, ours: list[np.ndarray], ref: list[np.ndarray]) -> None:
    names = result.check.outputs

    def detections(values: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        for k, (name, value) in enumerate(zip(names, values)):
            if value.dtype.kind not in "biuf" or (k == 0 and value.size % 4):
                what = ("boxes (4 numbers each)", "scores", "classes")[k]
                raise OptionsError(f"task check {result.check.label}: output '{name}' ({value.dtype}, shape "
                                   f"{value.shape}) cannot be read as {what}")
        boxes = values[0].reshape(-1, 4).astype(np.float64)
        scores = values[1].reshape(-1).astype(np.float64)
        classes = values[2].reshape(-1) if len(values) > 2 else np.zeros(len(scores), np.int64)
        if not (len(boxes) == len(scores) == len(classes)):
            raise OptionsError(f"task check {result.check.label}: {len(boxes)} boxes, {len(scores)} scores and "
                               f"{len(classes)} classes do not line up")
        keep = scores >= result.check.score
        return np.concatenate([boxes[keep], scores[keep, None]], axis=1), classes[keep]

    (a, ca), (b, cb) = detections(ours), detections(ref)
    if not len(a) and not len(b):
        result.note = result.note or f"no detection scored >= {result.check.score:g} on either side"
        return
    taken = np.zeros(len(a), bool)
    matched = 0
    for j in np.argsort(-b[:, 4]):  # the reference's detections, best first, each to its best free match
        best, at = result.check.iou, -1
        for i in range(len(a)):
            if taken[i] or ca[i] != cb[j]:
                continue
            v = _iou(a[i, :4], b[j, :4])
            if v >= best:
                best, at = v, i
        if at >= 0:
            taken[at] = True
            matched += 1
    result.agreed += matched
    result.total += max(len(a), len(b))


def _iou(p: np.ndarray, q: np.ndarray) -> float:
    w = max(0.0, min(p[2], q[2]) - max(p[0], q[0]))
    h = max(0.0, min(p[3], q[3]) - max(p[1], q[1]))
    inter = w * h
    union = (p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def _fraction(text: str, spec: str) -> float:
    return number_option(text, f"task check {spec!r}: the fraction", low=0.0, high=1.0, text=True)

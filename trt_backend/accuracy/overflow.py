"""Activations a reduced precision cannot hold.

An fp16 engine holds every tensor between layers in fp16, whose largest value is 65504: a trained
model whose activations grow past it (a LayerNorm's sum of squares, a detector's logits) turns
them into inf, then nan or a saturated result further on, often with finite outputs that are
simply wrong. bf16 has fp32's range and overflows only where fp32 nearly does.

:func:`range_overflows` finds where that starts in an emulated Session: the whole model runs once
in ONNX Runtime (fp32) with every tensor of the reduced-precision segments as outputs, then each
such segment's emulation runs alone on the fp32 values of its inputs with all its tensors as
outputs. A tensor that holds inf/nan where fp32 holds finite values, or values clamped at the
reduced type's limit where fp32 does not, is reported, the first one per segment in node order.
fp32 magnitudes that stand in for infinity, as attention masks use them, are left out: from 1e9
on for fp16, which clips them on purpose, and past bf16's largest finite value for bf16 (float32's
own minimum and maximum, which a mask computed outside the segment hands it, round to infinity
there, as a mask should). Where such a mask does harm (a row masked whole: a softmax of -inf
alone is nan), the tensor it harms is reported. It costs
one run of each (and their sessions), so the ``run`` and ``compare`` commands call it once, on
one input, when a segment was emulated in fp16 or bf16 (or int8, whose remainder is fp16)."""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from trt_backend.engines.emulation import emulation_ort_options
from trt_backend.engines.precision import SENTINEL
from trt_backend.errors import SegmentLoadError, SegmentRunError
from trt_backend.ort.sessions import ort_errors, ort_session, tapped_session
from trt_backend.runners.base import EMULATED
from trt_backend.runners.ort import EmulatedTensorRTRunner
from trt_backend.session.session import Session

log = logging.getLogger(__name__)

# The largest finite value of each reduced type (int8 engines compute their remainder in fp16).
LIMITS = {"fp16": 65504.0, "int8": 65504.0, "bf16": 3.3895313892515355e38}
_TYPE = {"fp16": "fp16", "int8": "fp16", "bf16": "bf16"}


@dataclass(frozen=True)
class Overflow:
    """The first tensor of ``segment`` (emulated in ``precision``) that left the type's range."""

    segment: int
    precision: str
    tensor: str
    node: str
    op: str
    count: int  # elements inf/nan (or clamped at the limit) where fp32 is finite
    elements: int
    fp32_max: float  # the largest |value| fp32 gave this tensor
    wide_inputs: tuple[tuple[str, float], ...] = ()  # inputs of the node fp32 holds beyond the limit
    # where the tensor stays within the range in fp32: what its inputs hold in the reduced type that
    # fp32 does not (flushed to 0, integers that differ), in words
    causes: tuple[str, ...] = ()

    def message(self) -> str:
        kind = _TYPE[self.precision]
        limit = LIMITS[self.precision]
        end = ("; the results after it are not to be trusted. Build this model in fp32, or with --precision auto, "
               "which keeps in fp32 the nodes where an output's error starts")
        head = f"segment {self.segment} ({self.precision}): tensor '{self.tensor}' (node '{self.node}', {self.op})"
        if self.wide_inputs or self.fp32_max >= limit:
            fed = "".join(f"; its input '{n}' reaches {v:.4g} in fp32" for n, v in self.wide_inputs)
            return (f"{head} leaves {kind}'s range (largest finite {limit:.6g}): {self.count} of {self.elements} "
                    f"element(s) are inf/nan or clamped where fp32 holds finite values (largest |fp32| "
                    f"{self.fp32_max:.4g}){fed}{end}")
        why = "; ".join(self.causes) if self.causes else \
            "none of its inputs leaves the range in fp32: the difference is in what it computes from them"
        return (f"{head} is inf/nan or clamped in {self.count} of {self.elements} element(s) in {kind} where fp32 "
                f"holds finite values within {kind}'s range (largest |fp32| {self.fp32_max:.4g}): {why}{end}")


def reduced_segments(sess: Session) -> dict[int, str]:
    """Segment id -> precision of each segment emulated in fp16, bf16 or int8."""
    return {sid: p for sid, p in sess.compiled.precisions.items() if p in LIMITS} \
        if EMULATED in sess.segment_executors else {}


def range_overflows(sess: Session, feeds: Mapping[str, Any]) -> list[Overflow]:
    """Where the emulated reduced-precision segments of ``sess`` leave their type's range on
    ``feeds`` (one per segment, the first tensor in node order); empty when none does, or when
    a run this check needs fails (the run or comparison itself reports such failures)."""
    reduced = reduced_segments(sess)
    runners = [r for r in sess.runners if r.segment.id in reduced and isinstance(r, EmulatedTensorRTRunner)]
    if not runners:
        return []
    taps: list[str] = []
    for r in runners:
        taps.extend(r.input_names)
        taps.extend(o for node in r.model.graph.node for o in node.output if o)
    known = {n for node in sess.model.proto.graph.node for n in node.output} | \
        {i.name for i in sess.model.proto.graph.input}
    wanted = [n for n in dict.fromkeys(taps) if n in known]
    try:
        reference = tapped_session(sess.model, wanted, sess.options.ort_for(1), "fp32 reference of the range check")
        ref = reference(feeds, wanted)
    except (SegmentLoadError, SegmentRunError) as e:
        log.debug("range check skipped: %s", e)
        return []
    found = []
    for r in runners:
        hit = _segment_overflow(r, reduced[r.segment.id], ref, sess)
        if hit is not None:
            found.append(hit)
    return found


def _segment_overflow(runner: EmulatedTensorRTRunner, precision: str, ref: Mapping[str, Any],
                      sess: Session) -> Overflow | None:
    model: onnx.ModelProto = runner.model
    if any(not isinstance(ref.get(n), np.ndarray) for n in runner.input_names):
        return None
    proto = onnx.ModelProto()
    proto.CopyFrom(model)
    have = {o.name for o in proto.graph.output}
    order: list[tuple[str, onnx.NodeProto]] = []
    for node in proto.graph.node:
        for name in node.output:
            if name and name in ref:  # Tensors the fp32 model also has, by name.
                order.append((name, node))
                if name not in have:
                    proto.graph.output.add().name = name
                    have.add(name)
    if not order:
        return None
    try:
        session = ort_session(proto, emulation_ort_options(sess.options.ort_for(1)),
                              f"segment {runner.segment.id} tapped for the range check",
                              weights_dir=sess.model.base_dir)
        names = [o.name for o in session.get_outputs()]
        values = dict(zip(names, session.run(names, {n: ref[n] for n in runner.input_names})))
    except SegmentLoadError as e:
        log.debug("range check of segment %d skipped: %s", runner.segment.id, e)
        return None
    except ort_errors() as e:
        log.debug("range check of segment %d skipped: %s", runner.segment.id, e)
        return None
    limit = LIMITS[precision]
    producers = {o: n for n in sess.model.proto.graph.node for o in n.output}  # The model's own nodes.
    for name, node in order:
        low, high = values.get(name), ref.get(name)
        if not (isinstance(low, np.ndarray) and isinstance(high, np.ndarray)) or low.shape != high.shape \
                or low.dtype.kind != "f" or high.dtype.kind != "f" or not low.size:
            continue
        # inf/nan where fp32 is finite, or held at the limit where fp32 is not (a clamp); fp32
        # magnitudes from SENTINEL on are stand-ins for infinity (masks), which fp16 may clip, and
        # for bf16 those past its limit (float32's min and max, which round to infinity in bf16)
        # (a tensor the built form keeps in fp32, a Paddle BatchNormalization's variance of 1e8, holds
        # such values as they are: only a reduced-precision one can be clamped)
        reduced = low.dtype.itemsize < 4
        # compared in fp32 (a model stored in fp16 gives fp16 on both sides: the limits overflow it)
        low, high = low.astype(np.float32), high.astype(np.float32)
        magnitude = np.abs(high)
        fine = np.isfinite(high) & ((magnitude < SENTINEL) if limit < SENTINEL else (magnitude <= limit))
        clamped = (np.abs(low) >= limit) & ((magnitude < limit / 2) | (magnitude > limit * 1.001)) \
            if reduced else np.zeros(low.shape, bool)
        lost = fine & (~np.isfinite(low) | clamped)
        count = int(lost.sum())
        if count:
            source = producers.get(name, node)
            wide = tuple((n, _largest(ref[n])) for n in source.input
                         if isinstance(ref.get(n), np.ndarray) and ref[n].dtype.kind == "f"
                         and ref[n].size and _largest(ref[n]) >= limit)
            return Overflow(runner.segment.id, precision, name, source.name or "(unnamed)", source.op_type, count,
                            int(low.size), _largest(high), wide,
                            () if wide else _causes(source, values, ref, _TYPE[precision]))
    return None


_SMALLEST = {"fp16": float(np.finfo(np.float16).smallest_subnormal), "bf16": 9.2e-41}


def _causes(node: onnx.NodeProto, low: Mapping[str, Any], high: Mapping[str, Any], kind: str) -> tuple[str, ...]:
    """What ``node``'s inputs hold in the reduced run (``low``) that fp32 (``high``) does not:
    values flushed to 0 (a log's argument, a divisor), integers or booleans that differ (an index
    or a mask computed from reduced values), inf/nan fp32 does not hold."""
    out = []
    for n in dict.fromkeys(node.input):
        a, b = low.get(n), high.get(n)
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.shape != b.shape or not a.size:
            continue
        if a.dtype.kind == "f" and b.dtype.kind == "f":
            a32, b32 = a.astype(np.float32), b.astype(np.float32)
            flushed = int(np.count_nonzero((a32 == 0) & (b32 != 0) & np.isfinite(b32)))
            if flushed:
                tiny = float(np.abs(b32[(a32 == 0) & (b32 != 0) & np.isfinite(b32)]).min())
                out.append(f"its input '{n}' is 0 in {kind} in {flushed} element(s) where fp32 holds values down to "
                           f"{tiny:.3g} ({kind} flushes magnitudes below {_SMALLEST[kind]:.3g} to 0)")
            bad = int(np.count_nonzero(~np.isfinite(a32) & np.isfinite(b32)))
            if bad:
                out.append(f"its input '{n}' is inf/nan in {kind} in {bad} element(s) where fp32 is finite")
        elif a.dtype.kind in "biu" and a.dtype == b.dtype:
            differ = int(np.count_nonzero(a != b))
            if differ:
                out.append(f"its input '{n}' ({a.dtype}) differs from fp32's in {differ} of {a.size} element(s): an "
                           f"index or a mask computed from {kind} values")
    return tuple(out)


def _largest(x: np.ndarray) -> float:
    finite = np.abs(x[np.isfinite(x)])
    return float(finite.max()) if finite.size else 0.0

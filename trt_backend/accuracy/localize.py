"""Localisation: which segment does a divergence start in?

The reference runs the whole model once with every segment boundary tensor marked as an output.
Our segments run in order twice over: stitched (each on what the segments before it produced,
as the Session runs them) and alone (each on the reference's values of its inputs). The first
segment whose stitched outputs exceed the tolerance is named; its error alone tells its own
error from the one it inherited."""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from partitioner.model import Model
from trt_backend.accuracy.numeric import tensor_error
from trt_backend.accuracy.options import CompareOptions
from trt_backend.accuracy.polygraphy_glue import host, side_errors
from trt_backend.accuracy.report import Localization, SegmentComparison, TensorError
from trt_backend.engines.emulation import reference_ort_options
from trt_backend.errors import ReferenceRunError, SegmentLoadError, SegmentRunError
from trt_backend.ort.options import OrtOptions
from trt_backend.ort.sessions import tapped_session
from trt_backend.runners.base import SegmentRunner
from trt_backend.session.session import Session

log = logging.getLogger(__name__)

Values = dict[str, Any]


def boundary_names(runners: Sequence[SegmentRunner]) -> list[str]:
    """Every tensor a segment reads or writes, in run order, once."""
    names: dict[str, None] = {}
    for r in runners:
        names.update(dict.fromkeys(r.input_names))
        names.update(dict.fromkeys(r.output_names))
    return list(names)


def reference_with_boundaries(model: Model, names: Sequence[str],
                              options: OrtOptions) -> Callable[[Mapping[str, Any]], Values]:
    """ONNX Runtime on the whole (normalized) model with ``names`` added to its outputs; returns
    a function from feeds to the value of every output and every feed by name."""
    try:
        run = tapped_session(model, names, reference_ort_options(model.proto, options),
                             f"reference of {model.source} with segment boundaries as outputs")
    except SegmentLoadError as e:
        raise ReferenceRunError(str(e)) from None
    wanted = list(dict.fromkeys([o.name for o in model.proto.graph.output] + list(names)))

    def reference(feeds: Mapping[str, Any]) -> Values:
        try:
            return run(feeds, wanted)
        except SegmentRunError as e:
            raise ReferenceRunError(f"the reference with segment boundaries as outputs failed: {e}") from None

    return reference


def _stitched(runners: Sequence[SegmentRunner], feeds: Mapping[str, Any], fallback: Values) -> Values:
    env: Values = dict(feeds)
    for r in runners:
        env.update(zip(r.output_names, r.run([env[n] if n in env else fallback[n] for n in r.input_names])))
    return env


def _errors(values: Mapping[str, Any], ref: Values, options: CompareOptions) -> dict[str, TensorError]:
    """Each value of ``values`` against the reference's, by the output check's rule: tensors as
    tensors, sequences, maps and string tensors as :func:`side_errors` judges them (a segment
    making ZipMap's maps read "0 ok" where the output table measured their error); a value the
    reference lacks is left out."""
    out: dict[str, TensorError] = {}
    for name, value in values.items():
        if name not in ref:
            continue
        x, y = host(value), host(ref.get(name))
        if isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and x.dtype != object and y.dtype != object:
            atol, rtol = options.tolerance_for(name)
            out[name] = tensor_error(x, y, atol, rtol, options.error_stat, options.error_quantile)
        else:
            out[name] = side_errors(name, x, y, options)
    return out


def _worst(errors: Mapping[str, TensorError]) -> tuple[float, bool]:
    if not errors:
        return 0.0, True
    return max(e.max_abs_error for e in errors.values()), all(e.passed for e in errors.values())


def segment_reports(session: Session, feeds: Mapping[str, Any], options: CompareOptions,
                    reference: Callable[[Mapping[str, Any]], Values],
                    precisions: Mapping[int, str]) -> list[SegmentComparison]:
    """Stitched and own errors of every segment of ``session`` on ``feeds``."""
    ref = reference(feeds)
    runners = list(session.runners)
    ours = _stitched(runners, feeds, ref)
    reports = []
    for r in runners:
        seg = r.segment
        stitched = _errors({n: ours[n] for n in r.output_names}, ref, options)
        alone = dict(zip(r.output_names, r.run([ref[n] for n in r.input_names])))
        own = _errors(alone, ref, options)
        s_err, s_ok = _worst(stitched)
        o_err, o_ok = _worst(own)
        tensors = tuple({"name": n, "stitched_error": stitched[n].max_abs_error, "stitched_passed": stitched[n].passed,
                         "own_error": own[n].max_abs_error if n in own else None,
                         "own_passed": own[n].passed if n in own else None} for n in stitched)
        reports.append(SegmentComparison(seg.id, seg.backend, r.executor, precisions.get(seg.id, "fp32"),
                                         tuple(seg.nodes),
                                     tuple(r.output_names), s_err, s_ok, o_err, o_ok, tensors))
        log.info("segment %d (%s): stitched error %.3g, own error %.3g", seg.id, seg.backend, s_err, o_err)
    return reports


def blame(reports: Sequence[SegmentComparison], graph: onnx.GraphProto, iteration: int,
          failed: bool) -> Localization | None:
    """The first segment whose stitched outputs exceed the tolerance; failing that, when the
    comparison ``failed``, the one with the largest own error. None when nothing diverges."""
    worst_own = max(reports, key=lambda s: s.own_error, default=None)
    first = next((s for s in reports if not s.stitched_passed), None)
    if first is not None:
        if not first.own_passed:
            reason = "first segment whose outputs exceed the tolerance; alone on reference inputs it exceeds it too"
        else:
            culprit = worst_own if worst_own is not None and worst_own.own_error > 0 else None
            reason = ("first segment whose outputs exceed the tolerance; alone on reference inputs it stays within "
                      "it, so the divergence is inherited or amplified"
                      + (f" (largest own error: segment {culprit.id}, {culprit.own_error:.3g})" if culprit else ""))
        chosen = first
    elif failed and worst_own is not None and worst_own.own_error > 0:
        chosen = worst_own
        reason = "no segment's outputs exceed the tolerance alone: segment with the largest own error"
    else:
        return None
    nodes = [graph.node[i] for i in chosen.nodes]
    return Localization(chosen, tuple(n.name for n in nodes), tuple(n.op_type for n in nodes), iteration, reason)

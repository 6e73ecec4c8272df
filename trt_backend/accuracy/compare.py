"""``trt_backend.compare``: a model through our stitched Session against ONNX Runtime on the whole
model, with Polygraphy's Comparator, and (when asked) the segment a divergence starts in.

(The function lives here, not in ``trt_backend/compare.py``: a submodule of that name would
replace the function ``trt_backend.compare`` on the package once anything imported it.)"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from partitioner import Model, Plan
from partitioner.errors import OptionsError
from partitioner.model import ModelSource
from trt_backend.accuracy.localize import (
    blame,
    boundary_names,
    reference_with_boundaries,
    segment_reports,
)
from trt_backend.accuracy.options import CompareOptions
from trt_backend.accuracy.polygraphy_glue import (
    generate_feeds,
    profile_points,
    run_comparison,
)
from trt_backend.accuracy.report import ComparisonReport, OutputReport, TensorError
from trt_backend.artifacts.read import is_build_folder
from trt_backend.errors import ReferenceRunError, SegmentLoadError
from trt_backend.ort.options import OrtOptions
from trt_backend.ort.sessions import ort_session
from trt_backend.planning import load_normalized
from trt_backend.profiles import Profile
from trt_backend.profiles.given import profile_shapes
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

log = logging.getLogger(__name__)

__all__ = ["compare"]


def compare(model: ModelSource | Model | Plan | Any, options: CompareOptions | None = None, *,
            profiles: Sequence[Mapping[str, Any]] | None = None, session_options: SessionOptions | None = None,
            feeds: Sequence[Mapping[str, Any]] | None = None, **overrides: Any) -> ComparisonReport:
    """Compare ``model`` run by a :class:`~trt_backend.Session` with ONNX Runtime running the
    whole model in fp32 (the reference), on seeded random inputs at the profiles' opt shapes (or
    given ``feeds``). ``model`` may be a model, a build folder (compared as it was built: its
    segment models, in the precision its engines were built in) or a ready Session. What is
    compared is what the session runs: its precision comes from ``session_options.build`` (the
    same compile path a build takes) or the folder, never from the comparison's options. Options
    come as a :class:`CompareOptions` or as its fields by keyword: ``compare(m, atol=1e-2)``.

    Raises :class:`~trt_backend.errors.ReferenceRunError` when the reference cannot
    run the model, ``OptionsError`` for bad options; a mismatch is a report with
    ``passed`` False, not an exception."""
    opts = _options(options, overrides)
    if isinstance(model, Session):
        if profiles is not None or session_options is not None:
            raise OptionsError("a ready Session brings its own profiles and options; pass the model instead")
        sess, owned = model, False
        reference = reference_session(sess.model, sess.options.ort_for(len(sess.runners) + 1))
    else:
        so = session_options if session_options is not None else SessionOptions()
        if not isinstance(so, SessionOptions):
            raise OptionsError(f"session_options must be a SessionOptions, got {type(so).__name__}")
        if is_build_folder(model):  # its engines, plan and profiles: no plan, calibration or build
            sess, owned = Session(model, profiles, so), True
            reference = reference_session(sess.model, so.ort_for(len(sess.runners) + 1))
        else:
            plan = model if isinstance(model, Plan) else Session.make_plan(model, so, profiles)
            # The reference first: a model ONNX Runtime cannot load is reported as such, not as a
            # failure to derive profiles. Q/DQ re-quantized to int8 is measured against the model
            # as it was (the exact rewrite: the original's numerics).
            original = plan.model
            if so.partition.qdq_rewrite != "exact" and plan.rewritten and not isinstance(model, (Plan, Model)):
                original = load_normalized(model, profile_shapes(profiles))
            reference = reference_session(original, so.ort_for(len(plan.segments) + 1))
            sess, owned = Session(plan, profiles, so), True
    try:
        return _compare(sess, reference, opts, feeds)
    finally:
        if owned:
            sess.close()


def _options(options: CompareOptions | None, overrides: Mapping[str, Any]) -> CompareOptions:
    if options is not None and not isinstance(options, CompareOptions):
        raise OptionsError(f"options must be a CompareOptions, got {type(options).__name__}")
    if not overrides:
        return options if options is not None else CompareOptions()
    if options is not None:
        raise OptionsError("pass either a CompareOptions or its fields as keywords, not both")
    try:
        return CompareOptions(**overrides)
    except TypeError as e:
        raise OptionsError(f"compare(): {e}") from None


def reference_session(model: Model | None, options: OrtOptions) -> Any:
    """ONNX Runtime on the whole normalized model (same tensor names as the plan; IR version
    fitted so the runtime accepts it). ReferenceRunError when it cannot load."""
    if model is None:
        raise OptionsError("this plan was read from JSON without its model; pass the model instead")
    what = f"the reference (ONNX Runtime on the whole model {model.source})"
    try:
        return ort_session(model.proto, options, what, weights_dir=model.base_dir)
    except SegmentLoadError as e:
        raise ReferenceRunError(str(e)) from None


def _feed_points(feeds: Sequence[Mapping[str, Any]]) -> list[dict[str, list[int]]]:
    points: list[dict[str, list[int]]] = []
    for feed in feeds:
        shapes = {n: list(np.shape(v)) for n, v in feed.items() if isinstance(v, np.ndarray)}
        if shapes not in points:
            points.append(shapes)
    return points


def _compare(sess: Session, reference: Any, opts: CompareOptions, feeds: Sequence[Mapping[str, Any]] | None) -> ComparisonReport:
    outputs = sess.get_outputs()
    opts.check_output_names([a.name for a in outputs])
    names = [a.name for a in outputs]  # (sequences, maps and optionals are compared by side_errors)
    skipped: list[str] = []
    precisions = {r.segment.id: sess.compiled.precisions.get(r.segment.id, "fp32") for r in sess.runners}
    if feeds is None:
        input_profiles: list[Profile] = sess.input_profiles
        points = profile_points(input_profiles, opts.shapes, opts.all_profile_shapes)
        data = generate_feeds(sess.get_inputs(), points, opts.seed, opts.iterations)
    else:
        if isinstance(feeds, Mapping):
            feeds = [feeds]
        data = [dict(f) for f in feeds]
        if not data:
            raise OptionsError("feeds is empty: give at least one dict of input name -> array")
    errors, timing = run_comparison(sess, reference, data, names, opts)
    reports = []
    for name in names:
        per_iteration = [it[name] for it in errors]
        atol, rtol = opts.tolerance_for(name)
        reports.append(OutputReport(name, TensorError.worst(per_iteration), atol, rtol,
                                    sum(not e.passed for e in per_iteration)))
    passed = all(r.passed for r in reports)
    report = ComparisonReport(passed, opts.atol, opts.rtol, reports, error_stat=opts.error_stat,
                              precision=sess.compiled.precision_summary(), iterations=len(data), seed=opts.seed,
                              points=_feed_points(data), executors=list(sess.segment_executors),
                              skipped_outputs=skipped, inference_ms=timing, model=str(sess.model.source))
    if opts.localize == "always" or (opts.localize == "mismatch" and not passed):
        first_bad = next((i for i, it in enumerate(errors) if not all(e.passed for e in it.values())), 0)
        ort_opts = sess.options.ort_for(len(sess.runners) + 1)
        run_reference = reference_with_boundaries(sess.model, boundary_names(sess.runners), ort_opts)
        report.segments = segment_reports(sess, data[first_bad], opts, run_reference, precisions)
        report.localization = blame(report.segments, sess.model.proto.graph, first_bad, not passed)
    return report

"""``trt_backend.compare``: a model through our stitched Session against ONNX Runtime on the whole
model, with Polygraphy's Comparator, and (when asked) the segment a divergence starts in.

(The function lives here, not in ``trt_backend/compare.py``: a submodule of that name would
replace the function ``trt_backend.compare`` on the package once anything imported it.)"""
from __future__ import annotations

import dataclasses
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
from trt_backend.engines.builder import (
    BuildOptions,
    segment_precision,
    weights_for_transform,
)
from trt_backend.engines.emulation import emulation_ort_options, segment_emulation
from trt_backend.errors import PrecisionError, ReferenceRunError, SegmentLoadError
from trt_backend.ort.options import OrtOptions
from trt_backend.ort.sessions import ort_session
from trt_backend.profiles import Profile
from trt_backend.runners.base import EMULATED
from trt_backend.runners.ort import EmulatedTensorRTRunner
from trt_backend.session.artifacts import is_build_folder
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

log = logging.getLogger(__name__)

__all__ = ["compare", "lower_precision"]


def compare(model: ModelSource | Model | Plan | Any, options: CompareOptions | None = None, *,
            profiles: Sequence[Mapping[str, Any]] | None = None, session_options: SessionOptions | None = None,
            feeds: Sequence[Mapping[str, Any]] | None = None, **overrides: Any) -> ComparisonReport:
    """Compare ``model`` run by a :class:`~trt_backend.Session` with ONNX Runtime running the
    whole model (the reference), on seeded random inputs at the profiles' opt shapes (or given
    ``feeds``). ``model`` may be a ready Session (its own profiles and options apply). Options
    come as a :class:`CompareOptions` or as its fields by keyword: ``compare(m, atol=1e-2)``.

    Raises :class:`~trt_backend.errors.ReferenceRunError` when the reference cannot
    run the model, ``OptionsError`` for bad options; a mismatch is a report with
    ``passed`` False, not an exception. A Session passed in is left as it came (the precision
    transform applies for the comparison only)."""
    opts = _options(options, overrides)
    if isinstance(model, Session):
        if profiles is not None or session_options is not None:
            raise OptionsError("a ready Session brings its own profiles and options; pass the model instead")
        sess, owned = model, False
        precision = effective_precision(opts, sess.options.build)
        reference = reference_session(sess.model, sess.options.ort_for(len(sess.runners) + 1))
    else:
        so = session_options if session_options is not None else SessionOptions()
        if not isinstance(so, SessionOptions):
            raise OptionsError(f"session_options must be a SessionOptions, got {type(so).__name__}")
        precision = effective_precision(opts, so.build)
        if precision[0] != "fp32":  # the GPU path builds its engines in it
            build = dataclasses.replace(so.build, precision=precision[0], keep_fp32_ops=precision[1])
            so = dataclasses.replace(so, build=build)
        if is_build_folder(model):  # its engines, plan and profiles: no plan, calibration or build
            sess, owned = Session(model, profiles, so), True
            reference = reference_session(sess.model, so.ort_for(len(sess.runners) + 1))
        else:
            plan = model if isinstance(model, Plan) else Session.make_plan(model, so)
            # The reference first: a model ONNX Runtime cannot load is reported as such, not as a
            # failure to derive profiles.
            reference = reference_session(plan.model, so.ort_for(len(plan.segments) + 1))
            sess, owned = Session(plan, profiles, so), True
    before = list(sess.runners)
    try:
        return _compare(sess, reference, dataclasses.replace(opts, precision=precision[0],
                                                             keep_fp32_ops=precision[1]), feeds)
    finally:
        if owned:
            sess.close()
        else:  # a caller's Session leaves as it came (precision runners swapped back)
            for i, runner in enumerate(before):
                if sess.runners[i] is not runner:
                    sess.replace_runner(i, runner).close()


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


def effective_precision(opts: CompareOptions, build: BuildOptions) -> tuple[str, tuple[str, ...]]:
    """The precision to compare in: ``opts.precision``, or, left at fp32, the one the session's
    ``BuildOptions`` ask for (so emulated and built segments agree). Both set and different:
    OptionsError."""
    built = build.precision
    if opts.precision != "fp32":
        if built not in ("fp32", opts.precision):
            raise OptionsError(f"precision {opts.precision} asked for, but the session's BuildOptions say {built}")
        return opts.precision, opts.keep_fp32_ops
    return built, tuple(build.keep_fp32_ops)


def lower_precision(sess: Session, precision: str, keep_fp32_ops: Sequence[str]) -> dict[int, str]:
    """Apply the ONNX-level ``precision`` transform to every emulated TensorRT segment of
    ``sess`` (as the engine builder does before a build); returns the precision each segment
    computes in. A segment whose transform fails stays fp32, with a warning, as in a build.
    Segments running as TensorRT engines keep what they were built with, which must match."""
    done = {r.segment.id: "fp32" for r in sess.runners}
    build = sess.options.build
    wanted = build if precision == build.precision else dataclasses.replace(
        build, precision=precision, keep_fp32_ops=tuple(keep_fp32_ops), precision_plan=None)
    built = {row.segment: row.precision for row in sess.build_report.segments} if sess.build_report else {}
    for i, r in enumerate(list(sess.runners)):
        if r.segment.backend != "tensorrt":
            continue
        if r.executor != EMULATED:
            asked = build.precision
            if asked != precision:
                raise OptionsError(f"{r.label} runs an engine built in {asked}, not {precision}; pass the model "
                                   f"instead of the Session (compare builds its engines in {precision})")
            done[r.segment.id] = built.get(r.segment.id, asked)
            continue
        if precision in ("fp32", "tf32"):
            if precision == "tf32":
                log.warning("%s: tf32 is a TensorRT builder flag; emulated, the segment computes in fp32", r.label)
            continue
        proto = sess.plan.extract(r.segment.id)
        if segment_precision(proto, wanted)[0] in ("fp32", "tf32"):
            continue
        proto, kept = weights_for_transform(proto, sess.model.base_dir, r.label)  # (from the model's folder)
        if kept is not None:
            log.warning("%s stays fp32: %s", r.label, kept)
            continue
        try:
            quantizer = sess.quantizer(wanted) if segment_precision(proto, wanted)[0] == "int8" else None
            emulated = segment_emulation(proto, wanted, quantizer)
        except PrecisionError as e:
            log.warning("%s stays fp32: %s", r.label, e)
            continue
        runner = EmulatedTensorRTRunner(r.segment, emulated.model,
                                        emulation_ort_options(sess.options.ort_for(len(sess.runners))),
                                        r.profiles, r.shape_tensors, weights_dir=sess.model.base_dir)
        sess.replace_runner(i, runner)
        done[r.segment.id] = emulated.precision
    return done


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
    precisions = lower_precision(sess, opts.precision, opts.keep_fp32_ops)
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
                              precision=opts.precision, iterations=len(data), seed=opts.seed,
                              points=_feed_points(data), executors=list(sess.segment_executors),
                              skipped_outputs=skipped, inference_ms=timing, model=str(sess.model.source))
    if opts.localize == "always" or (opts.localize == "mismatch" and not passed):
        first_bad = next((i for i, it in enumerate(errors) if not all(e.passed for e in it.values())), 0)
        ort_opts = sess.options.ort_for(len(sess.runners) + 1)
        run_reference = reference_with_boundaries(sess.model, boundary_names(sess.runners), ort_opts)
        report.segments = segment_reports(sess, data[first_bad], opts, run_reference, precisions)
        report.localization = blame(report.segments, sess.model.proto.graph, first_bad, not passed)
    return report

"""``trt_backend.compare``: a model through our stitched Session against ONNX Runtime on the whole
model, with Polygraphy's Comparator, and (when asked) the segment a divergence starts in.

(The function lives here, not in ``trt_backend/compare.py``: a submodule of that name would
replace the function ``trt_backend.compare`` on the package once anything imported it.)"""
from __future__ import annotations

import dataclasses
import logging
import os
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
from trt_backend.accuracy.options import DEFAULT_TOLERANCE, CompareOptions
from trt_backend.accuracy.overflow import range_overflows, reduced_segments
from trt_backend.accuracy.polygraphy_glue import (
    SavedReference,
    generate_feeds,
    profile_points,
    run_comparison,
)
from trt_backend.accuracy.report import ComparisonReport, OutputReport, TensorError
from trt_backend.accuracy.tasks import run_checks
from trt_backend.artifacts.read import REFERENCE_KEY, is_build_folder
from trt_backend.artifacts.references import weights_dir
from trt_backend.engines.emulation import is_quantized, reference_ort_options
from trt_backend.engines.precision import fp32_subgraphs, stored_reduced, unreduced
from trt_backend.engines.precision_plan import PrecisionPlan, qdq_words, subgraphs_words, unreduced_words
from trt_backend.engines.quantize import qdq_types
from trt_backend.compiler import compile_as_built
from trt_backend.errors import ReferenceRunError, SegmentLoadError
from trt_backend.ort.options import OrtOptions
from trt_backend.ort.sessions import ort_session, runs_whole
from trt_backend.planning import as_written, load_normalized
from trt_backend.profiles import Profile
from trt_backend.profiles.given import profile_shapes, profiles_from_feeds
from trt_backend.profiles.node_arg import node_arg
from trt_backend.session.feeds import check_samples, write_run
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

log = logging.getLogger(__name__)

__all__ = ["compare"]


def compare(model: ModelSource | Model | Plan | Any, options: CompareOptions | None = None, *,
            profiles: Sequence[Mapping[str, Any]] | None = None, session_options: SessionOptions | None = None,
            feeds: Sequence[Mapping[str, Any]] | None = None,
            reference_outputs: Sequence[Mapping[str, Any]] | None = None,
            save_outputs: str | None = None, **overrides: Any) -> ComparisonReport:
    """Compare ``model`` run by a :class:`~trt_backend.Session` with ONNX Runtime running the
    whole model in fp32 (the reference), on seeded random inputs at the profiles' opt shapes (or
    given ``feeds``). ``model`` may be a model, a build folder (compared as it was built: its
    segment models, in the precision its engines were built in) or a ready Session. What is
    compared is what the session runs: its precision comes from ``session_options.build`` (the
    same compile path a build takes) or the folder, never from the comparison's options. Options
    come as a :class:`CompareOptions` or as its fields by keyword: ``compare(m, atol=1e-2)``.

    ``reference_outputs`` (one mapping per feed, e.g. from :func:`~trt_backend.session.feeds.read_run`
    of a run saved on a GPU machine) replace ONNX Runtime as the reference; ``save_outputs``
    writes the feeds and the session's outputs to that ``.npz`` (:func:`~trt_backend.session.feeds.write_run`).

    Raises :class:`~trt_backend.errors.ReferenceRunError` when the reference cannot
    run the model, ``OptionsError`` for bad options; a mismatch is a report with
    ``passed`` False, not an exception."""
    opts = _options(options, overrides)
    feeds = _feed_list(feeds)
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
            reference = reference_session(folder_reference(os.fspath(model), sess) or sess.model,
                                          so.ort_for(len(sess.runners) + 1))
        else:
            plan = model if isinstance(model, Plan) else Session.make_plan(model, so, profiles)
            # (real samples derive the TensorRT segments' profiles: random data may be values the
            # model refuses)
            samples = [] if feeds is None else [feeds] if isinstance(feeds, Mapping) else list(feeds)
            if feeds is not None and plan.model is not None:
                # The samples held to the model's inputs first, as the CLI holds them (a wrong dtype
                # or name named as such, not as a failure of the profile derivation they feed); and
                # without profiles, one spanning their shapes, as the CLI makes.
                index = plan.model.index
                fed = [node_arg(n, index.types.get(n)) for n in index.graph_inputs if n not in index.initializers]
                source = os.fspath(model) if isinstance(model, (str, os.PathLike)) else None
                untied = check_samples(fed, samples, "feeds", runs=None if source is None else
                                       (lambda feed: runs_whole(source, feed)))
                if profiles is None:
                    profiles = profiles_from_feeds(samples)
                    if untied and not isinstance(model, Plan):  # (names the samples contradict: loaded again
                        plan = Session.make_plan(model, so, profiles)  # at their shapes, which drops them)
            # The reference first: a model ONNX Runtime cannot load is reported as such, not as a
            # failure to derive profiles. Q/DQ re-quantized to int8 is measured against the model
            # as it was (the exact rewrite: the original's numerics).
            original = plan.model
            if original is not None:
                original = as_written(model, original, so.partition.qdq_rewrite, profile_shapes(profiles)) or original
            reference = reference_session(original, so.ort_for(len(plan.segments) + 1))
            sess, owned = Session(compile_as_built(plan, profiles, so, calibration_feeds=samples), profiles, so,
                                  calibration_feeds=samples), True
    if reference_outputs is not None:
        if feeds is None or len(list(feeds)) != len(reference_outputs):
            raise OptionsError("reference_outputs need the feeds they were made from, one feed per set of outputs")
        reference = SavedReference(sess.get_inputs(), sess.get_outputs(), reference_outputs)
    opts, searched = _searched_rule(sess, opts)
    try:
        return _compare(sess, reference, opts, feeds, save_outputs, searched)
    finally:
        if owned:
            sess.close()


def _searched_rule(sess: Session, opts: CompareOptions) -> tuple[CompareOptions, list[str]]:
    """A build folder made with ``--precision auto`` is judged by the rule its precision plan
    was searched with (atol, rtol and --atol-of-range) where ``opts`` give none of their own (the
    defaults, no per-output tolerances, ``folder_rule`` left True: the command line sets it False
    where a tolerance flag is given): its search held it to that, and compare at the defaults
    FAILED a folder that met it. Returns the options and a note saying which rule judged and why."""
    recorded = (sess.folder_manifest or {}).get("precision_plan")
    if not recorded:
        return opts, []
    plan = PrecisionPlan.from_dict(recorded)
    rule = plan.tolerance_words()
    if opts.folder_rule and (opts.atol, opts.rtol, opts.atol_of_range) == (DEFAULT_TOLERANCE, DEFAULT_TOLERANCE, None) \
            and not opts.output_tolerances:
        if (plan.atol, plan.rtol, plan.atol_of_range) == (opts.atol, opts.rtol, None):
            return opts, []
        return dataclasses.replace(opts, atol=plan.atol, rtol=plan.rtol, atol_of_range=plan.atol_of_range), \
            [f"judged by the tolerance the folder's precision plan was searched with ({rule}); give --atol, "
             "--rtol or --atol-of-range to judge by another (in Python, CompareOptions(folder_rule=False))"]
    return opts, [f"the folder's precision plan was searched with {rule}; judged here by the tolerance given"]


def _feed_list(feeds: Any) -> list[Mapping[str, Any]] | None:
    """``feeds`` (a dict of input name -> array, or a list of them) as a list; OptionsError for
    anything else."""
    if feeds is None:
        return None
    if isinstance(feeds, Mapping):
        return [feeds]
    if isinstance(feeds, (str, bytes)) or not isinstance(feeds, Sequence):
        raise OptionsError(f"feeds must be a dict of input name -> array, or a list of them, got "
                           f"{type(feeds).__name__}")
    wrong = next((f for f in feeds if not isinstance(f, Mapping)), None)
    if wrong is not None:
        raise OptionsError(f"feeds must be a list of dicts of input name -> array, got {type(wrong).__name__} "
                           f"{wrong!r:.80} in it")
    return list(feeds)


def folder_reference(folder: str, sess: Session) -> Model | None:
    """The model a build folder is measured against where it is not the folder's own model: the
    one before its Q/DQ were re-quantized to int8 (``--qdq-rewrite int8``), which the folder
    keeps beside it. None: the folder's own model is the reference."""
    entry = (sess.folder_manifest or {}).get(REFERENCE_KEY)
    if not entry:
        return None
    return load_normalized(os.path.join(folder, os.path.basename(entry["file"])), qdq_rewrite="exact",
                           base_dir=weights_dir(sess.folder_manifest or {}) or folder)


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
        return ort_session(model.proto, reference_ort_options(model.proto, options), what, weights_dir=model.base_dir)
    except SegmentLoadError as e:
        raise ReferenceRunError(str(e)) from None


def _notes(sess: Session, reports: Sequence[OutputReport], saved: bool = False) -> list[str]:
    """What a verdict rests on where it says less than it seems: outputs with nothing to compare,
    and a comparison that cannot differ (TensorRT segments emulated in fp32 against the same
    ONNX Runtime: it checks the partition and the stitching, not TensorRT's numbers). ``saved``:
    the reference is outputs saved from another run, of which neither holds."""
    notes = [(f"output '{r.name}' was empty on every input: not compared (give inputs that produce some)"
              if r.elements == 0 else f"output '{r.name}' was NaN/inf in every element of the reference on every "
              "input: not compared (give inputs that produce finite values)") for r in reports if not r.compared]
    executors = sess.segment_executors
    fp32 = all(p in ("fp32", "tf32") for p in sess.compiled.precisions.values())
    lowered_none = _unreduced(sess)
    for k, built in sorted(sess.compiled.segments.items()):
        held = fp32_subgraphs(built.model) if built.precision not in ("fp32", "tf32") or k in lowered_none else {}
        said = [unreduced_words(lowered_none[k])] if k in lowered_none else []
        if held:  # (a reduced precision's label would say the whole segment computes in it)
            said.append(subgraphs_words(held, k in lowered_none))
        if said:
            notes.append(f"segment {k} ({built.precision}): {'; '.join(said)}")
    requantized = bool((sess.folder_manifest or {}).get(REFERENCE_KEY)) or (
        sess.folder_manifest is None and sess.options.partition.qdq_rewrite != "exact" and bool(sess.model.rewritten))
    if requantized:
        notes.append("the model's Q/DQ were re-quantized to symmetric int8 (--qdq-rewrite int8); the reference is the "
                     "model as written: the comparison measures that re-quantization")
    if is_quantized(sess.model.proto) and not saved:  # (as reference_ort_options decides)
        notes.append("the reference computes the model's quantization as ONNX defines it (ONNX Runtime with graph "
                     "optimisations off); at its default level ONNX Runtime runs such a model through its "
                     "own fused quantized kernels, whose numbers can differ")
    if not sess.plan.tensorrt_segments() and not saved:
        notes.append("the plan has no TensorRT segment: ONNX Runtime ran the whole model on both sides, so the "
                     "comparison is equal by construction" + (f" (the precision asked for, "
                     f"{sess.options.build.precision}, applies to TensorRT segments only)"
                     if sess.options.build.precision not in ("fp32", "tf32") else ""))
    elif "emulated" in executors and "tensorrt" not in executors and fp32 and not requantized and not saved:
        low = [k for k in ("fp16", "bf16") if stored_reduced(sess.model.proto).get(k)]
        quantized = is_quantized(sess.model.proto)
        kinds = qdq_words(qdq_types(sess.model.proto)) if quantized else ""
        tf32 = "tf32" in sess.compiled.precisions.values()
        how = (f"as built, {kinds} at the model's own Q/DQ as ONNX defines it," if quantized else
               f"with no precision reduced (in the model's own {' and '.join(low)} types)" if low else
               "in fp32 (TF32's rounding of Conv and MatMul inputs happens in a GPU's kernels only, so tf32 is not "
               "emulated)" if tf32 else "in fp32")
        notes.append(f"TensorRT segments ran emulated {how} through ONNX Runtime, as the reference does: the "
                     "comparison checks the partition and stitching (equal by construction otherwise), not "
                     "TensorRT's kernels; " + ("compare on a GPU to measure those" if quantized or tf32 or lowered_none
                                               else "build in a reduced precision, or compare on a GPU, to measure "
                                               "those"))
    return notes


def _unreduced(sess: Session) -> dict[int, str]:
    """The TensorRT segments built in fp32 where a reduced precision was asked (fp16, bf16, int8:
    the build folder's, or the session's options), each with the precision asked: it lowered none
    of their nodes (their float arithmetic inside If/Loop/Scan bodies, or none at all; not a model
    stored in fp16, which computes in its own types)."""
    manifest = sess.folder_manifest
    asked = (manifest.get("build") or {}).get("precision") if manifest is not None else sess.options.build.precision
    return {k: str(asked) for k, built in sess.compiled.segments.items()
            if unreduced(asked, built.precision, built.model)}


def _precision_compared(sess: Session) -> str:
    """The precision the report names: the built one, and where a tf32 build ran emulated, that
    what ran was fp32 (nothing on a CPU rounds as TF32 does)."""
    summary = sess.compiled.precision_summary()
    executors = {seg.id: e for seg, e in zip(sess.plan.segments, sess.segment_executors)}
    emulated_tf32 = any(p == "tf32" and executors.get(k) == "emulated" for k, p in sess.compiled.precisions.items())
    if emulated_tf32:
        return f"{summary} (tf32 emulated as fp32)"
    stored = sorted({k for built in sess.compiled.segments.values() if built.precision in ("fp32", "tf32")
                     for k in stored_reduced(built.model) if k != "fp32"})
    if stored:
        return f"{summary} (computing in the model's own {' and '.join(stored)} types)"
    lowered_none = _unreduced(sess)
    if lowered_none and len(lowered_none) == len(sess.compiled.segments):
        return f"{summary} ({next(iter(lowered_none.values()))} asked: none of its segments' nodes computes in it)"
    return summary


def _feed_points(feeds: Sequence[Mapping[str, Any]]) -> list[dict[str, list[int]]]:
    points: list[dict[str, list[int]]] = []
    for feed in feeds:
        shapes = {n: list(np.shape(v)) for n, v in feed.items() if isinstance(v, np.ndarray)}
        if shapes not in points:
            points.append(shapes)
    return points


def _compare(sess: Session, reference: Any, opts: CompareOptions, feeds: Sequence[Mapping[str, Any]] | None,
             save_outputs: str | None = None, first_notes: Sequence[str] = ()) -> ComparisonReport:
    outputs = sess.get_outputs()
    opts.check_output_names([a.name for a in outputs])
    # (each output once, where the model lists one twice; sequences, maps and optionals are compared by side_errors)
    names = list(dict.fromkeys(a.name for a in outputs))
    skipped: list[str] = []
    precisions = {r.segment.id: sess.compiled.precisions.get(r.segment.id, "fp32") for r in sess.runners}
    if feeds is None:
        input_profiles: list[Profile] = sess.input_profiles
        points = profile_points(input_profiles, opts.shapes, opts.all_profile_shapes)
        data = generate_feeds(sess.get_inputs(), points, opts.seed, opts.iterations, opts.val_range, opts.int_range)
    else:
        if isinstance(feeds, Mapping):
            feeds = [feeds]
        if not feeds:
            raise OptionsError("feeds is empty: give at least one dict of input name -> array")
        # Checked as a run checks them, before either side runs: names, dtypes, ranks, profiles.
        data = [sess.check_feeds(f) for f in feeds]
    if isinstance(reference, SavedReference) and reference.unsaved:
        skipped = [n for n in names if n in reference.unsaved]
        names = [n for n in names if n not in reference.unsaved]
    run = run_comparison(sess, reference, data, names, opts)
    left = write_run(save_outputs, data, run.ours) if save_outputs is not None else []
    errors, judged = run.errors, run.options
    reports = []
    for name in names:
        per_iteration = [it[name] for it in errors]
        atol, rtol = judged.tolerance_for(name)
        s = run.seen[name]
        reports.append(OutputReport(name, TensorError.worst(per_iteration), atol, rtol,
                                    sum(not e.passed for e in per_iteration), elements=s.elements,
                                    finite_elements=s.finite,
                                    value_range=(s.low, s.high) if s.low <= s.high else None,
                                    compared_text=s.describe()))
    tasks = run_checks(opts.checks, run.ours, run.reference, names)
    compared = [r for r in reports if r.compared]
    passed = bool(compared) and all(r.error.passed for r in reports) and all(t.passed for t in tasks)
    notes = [*first_notes, *_notes(sess, reports, saved=isinstance(reference, SavedReference))]
    if skipped:
        notes.append(f"{', '.join(map(repr, skipped))}: not in the saved outputs (an .npz holds tensors: sequences "
                     "and maps are not saved), so not compared")
    if left:
        notes.append(f"{', '.join(map(repr, left))}: compared, but not saved in {save_outputs} (an .npz holds "
                     "tensors: sequences and maps are not saved)")
    overridden = [n for n in opts.output_tolerances if n in run.seen and run.seen[n].by_equality]
    if overridden:
        notes.append(f"{', '.join(map(repr, overridden))} held integers or booleans: judged by equality, so the "
                     "tolerance given for them did not apply (a task check such as top1@0.99 judges agreement)")
    if opts.atol_of_range:
        notes.append(f"atol of each output: at least {opts.atol_of_range:g} x the largest magnitude the reference "
                     "gave it (the atol column shows what applied)")
    report = ComparisonReport(passed, opts.atol, opts.rtol, reports, error_stat=opts.error_stat,
                              atol_of_range=opts.atol_of_range,
                              precision=_precision_compared(sess), iterations=len(data), seed=opts.seed,
                              points=_feed_points(data), executors=list(sess.segment_executors),
                              skipped_outputs=skipped, inference_ms=run.timing, model=str(sess.model.source),
                              notes=notes, tasks=tasks)
    first_bad = _worst_comparison(errors)
    if reduced_segments(sess):  # activations the reduced precision cannot hold: said, not left to guess
        for overflow in range_overflows(sess, data[first_bad]):
            report.notes.append(overflow.message())
    if opts.localize == "always" or (opts.localize == "mismatch" and not passed):
        ort_opts = sess.options.ort_for(len(sess.runners) + 1)
        run_reference = reference_with_boundaries(sess.model, boundary_names(sess.runners), ort_opts)
        report.segments = segment_reports(sess, data[first_bad], judged, run_reference, precisions)
        report.localization = blame(report.segments, sess.model.proto.graph, first_bad, not passed)
        if len(data) > 1:
            shapes = ", ".join(f"{n} {'x'.join(map(str, np.shape(v))) or 'scalar'}" for n, v in data[first_bad].items()
                               if hasattr(v, "shape"))
            report.notes.append(f"segments localized on comparison {first_bad + 1} of {len(data)} ({shapes}): the one "
                                "where the output failing most errs most")
    return report


def _worst_comparison(errors: Sequence[Mapping[str, Any]]) -> int:
    """The comparison to localize and to look for range overflows on: where the first output that
    fails somewhere has its largest error (the error its row reports); the first without one."""
    failing = next((name for it in errors for name, e in it.items() if not e.passed), None)
    if failing is None:
        return 0
    def size(k: int) -> float:
        e = errors[k].get(failing)
        value = float(e.max_abs_error) if e is not None else -1.0
        return value if value == value else float("inf")  # (NaN: unbounded)
    return max(range(len(errors)), key=size)

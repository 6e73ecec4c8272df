"""Error statistics in plain numpy, with the semantics of Polygraphy's simple compare function
(``SimpleCompareFunc``: absolute difference, relative difference against the reference with
zeros nudged by machine epsilon, the elemwise/max/mean/median/quantile checks), and NaN/inf
handled before either.

Model outputs are compared by Polygraphy itself. Localisation compares every segment boundary
tensor twice, where Polygraphy's function formats its (muted) log lines eagerly and that
dominated the time (a 17-segment SqueezeNet: 0.8 s of 0.9 s); this module computes the same
numbers without it. ``tests/trt_backend/accuracy/test_numeric.py`` holds both to agreement."""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from trt_backend.accuracy.report import TensorError
from trt_backend.ort.values import is_ml_dtype

EPSILON = 2.220446049250313e-16  # what Polygraphy adds to zeros of the reference
_INF = float("inf")
_WIDEN = {np.dtype(np.float16): np.float32, np.dtype(np.int8): np.int32, np.dtype(np.uint8): np.int32,
          np.dtype(np.int16): np.int32, np.dtype(np.uint16): np.int32, np.dtype(np.uint32): np.int64}


def is_float(arr: Any) -> bool:
    return isinstance(arr, np.ndarray) and (arr.dtype.kind in "fc" or arr.dtype.name.startswith(("float", "bfloat")))


def compared_for_equality(ref: Any) -> bool:
    """Whether a reference value is judged by equality rather than by tolerances: integers and
    booleans (class ids, token ids, arg-max and top-k indices, counts, masks). Their values are
    labels, not measurements: index 5 against 3 is as wrong as 5 against 4000, so no atol or rtol
    (nor ``atol_of_range``) applies to them, in ``compare`` and in ``--precision auto`` alike; the
    error reported is how many elements differ. A model whose answer may change (an arg-max over
    near-ties) is judged by a task check (``top1@0.99``, ``argmax-sequence``) instead."""
    return isinstance(ref, np.ndarray) and ref.dtype.kind in "biu"


def differing(ours: Any, ref: Any) -> int | None:
    """How many elements of ``ours`` differ from ``ref`` (None: shapes differ)."""
    x, y = np.asarray(ours), np.asarray(ref)
    if x.shape != y.shape:
        return None
    return int(np.count_nonzero(x != y))


def mask_nonfinite(ours: Any, ref: Any) -> tuple[Any, Any, int, int]:
    """(ours, ref, matched, mismatched). NaN against NaN and inf against the same inf are equal;
    every other place where either is NaN/inf is a mismatch no tolerance forgives. Both kinds are
    zeroed in copies so the error statistics describe the finite values; the mismatch count
    fails the tensor on its own."""
    if not (is_float(ours) and is_float(ref)) or ours.shape != ref.shape:
        return ours, ref, 0, 0
    finite_a, finite_b = np.isfinite(ours), np.isfinite(ref)
    if finite_a.all() and finite_b.all():
        return ours, ref, 0, 0
    matched = (np.isnan(ours) & np.isnan(ref)) | (np.isinf(ours) & (ours == ref))
    touched = ~(finite_a & finite_b)
    a, b = ours.copy(), ref.copy()
    a[touched] = 0
    b[touched] = 0
    n_matched = int(np.count_nonzero(matched))
    return a, b, n_matched, int(np.count_nonzero(touched)) - n_matched


def prepare_pair(ours: Any, ref: Any) -> tuple[Any, Any, int, int]:
    """:func:`mask_nonfinite`, then booleans as int32: the same differences Polygraphy takes
    from booleans (xor, divided by the reference), and no crash in its quantile on booleans."""
    a, b, matched, mismatched = mask_nonfinite(ours, ref)
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == np.bool_ and b.dtype == np.bool_:
        a, b = a.astype(np.int32), b.astype(np.int32)
    return a, b, matched, mismatched


def _widen(arr: np.ndarray) -> np.ndarray:
    if is_ml_dtype(arr.dtype):  # (bfloat16, float8: compared in float32)
        return arr.astype(np.float32)
    wider = _WIDEN.get(arr.dtype)
    return arr.astype(wider) if wider is not None else arr


def _failed(value: float, tol: float) -> bool:
    return bool(np.isnan(value)) or value > tol


def tensor_error(ours: np.ndarray, ref: np.ndarray, atol: float, rtol: float, error_stat: str = "elemwise",
                 quantile: float = 0.99) -> TensorError:
    """Errors of ``ours`` against ``ref`` and the verdict at (atol, rtol) for ``error_stat``;
    integers and booleans by equality (:func:`compared_for_equality`), with the same statistics."""
    if ours.shape != ref.shape:
        return TensorError(_INF, _INF, _INF, _INF, _INF, _INF, False,
                           note=f"shape {ours.shape} vs reference {ref.shape}: not comparable")
    by_equality = compared_for_equality(ref)
    x, y, matched, mismatched = prepare_pair(ours, ref)
    if x.size == 0:
        return TensorError(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, mismatched == 0, matched, mismatched,
                           differing=0 if by_equality else None)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        absdiff = np.abs(_widen(x) - _widen(y))
        base = _widen(y).copy()
        if is_float(base):
            base[base == 0] += EPSILON
        reldiff = np.true_divide(absdiff, np.abs(base))
        stats = {"max": (float(np.max(absdiff)), float(np.max(reldiff))),
                 "mean": (float(np.mean(absdiff, dtype=np.float32)), float(np.mean(reldiff, dtype=np.float32))),
                 "median": (float(np.median(absdiff)), float(np.median(reldiff)))}
        if error_stat == "quantile":
            stats["quantile"] = (float(np.quantile(absdiff, quantile)), float(np.quantile(reldiff, quantile)))
        if by_equality:  # every element equal, whatever the tolerance and statistic
            need = stats["max" if error_stat == "elemwise" else error_stat]
            passed = differing(ours, ref) == 0
        elif error_stat == "elemwise":
            bad = (np.greater(absdiff, atol) | np.isnan(absdiff)) & (np.greater(reldiff, rtol) | np.isnan(reldiff))
            passed = not bool(np.any(bad))
            need = stats["max"]
        else:
            need = stats[error_stat]
            passed = not (_failed(need[0], atol) and _failed(need[1], rtol))
    return tidy(TensorError(stats["max"][0], stats["max"][1], stats["mean"][0], stats["median"][0], need[0], need[1],
                            passed and mismatched == 0, matched, mismatched,
                            differing=differing(ours, ref) if by_equality else None))


def tolerance_ratio(ours: Any, ref: Any, atol: float, rtol: float) -> float:
    """The one error rule, as a number: the worst element's error in units of the tolerance under
    Polygraphy's elementwise check, which :func:`tensor_error` (and so ``compare``) applies. An
    element passes where its absolute error is within ``atol`` *or* its relative error (against
    the reference, zeros nudged by :data:`EPSILON`) within ``rtol``, so its ratio is the smaller of
    abs/atol and rel/rtol, and a tensor passes exactly when the ratio is <= 1. NaN against NaN and
    equal infinities count as equal; any other non-finite mismatch, or a shape mismatch, is inf."""
    if ours is None and ref is None:
        return 0.0
    x, y = np.asarray(ours), np.asarray(ref)
    if x.shape != y.shape:
        return _INF
    if x.dtype.kind not in "fcbiu" or y.dtype.kind not in "fcbiu":  # Strings, objects: equal or not.
        return 0.0 if np.array_equal(x, y) else _INF
    if not x.size:
        return 0.0
    if compared_for_equality(y):
        return 0.0 if np.array_equal(x, y) else _INF
    a, b = _widen(x).astype(np.float64), _widen(y).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        absdiff = np.abs(a - b)
        base = np.where(b == 0, EPSILON, np.abs(b))
        rel = absdiff / base
        by_abs = absdiff / atol if atol > 0 else np.where(absdiff == 0, 0.0, _INF)
        by_rel = rel / rtol if rtol > 0 else np.where(rel == 0, 0.0, _INF)
        r = np.minimum(by_abs, by_rel)
    r = np.where(same, 0.0, np.where(np.isnan(r), _INF, r))
    return float(r.max())


def tidy(error: TensorError) -> TensorError:
    """A max absolute error of 0 makes every error 0 (Polygraphy gets NaN there from integer 0/0
    and from the mean of an empty tensor); any other NaN statistic reads as inf (unbounded). With
    NaN/inf mismatches (masked out of the statistics), the max errors and the tolerances needed are
    inf, the max over the finite elements kept beside them."""
    if error.nonfinite_mismatched:
        finite = tidy(dataclasses.replace(error, nonfinite_mismatched=0))
        return dataclasses.replace(finite, max_abs_error=_INF, max_rel_error=_INF, required_atol=_INF,
                                   required_rtol=_INF, nonfinite_mismatched=error.nonfinite_mismatched,
                                   finite_max_abs_error=finite.max_abs_error)
    if error.max_abs_error == 0:
        return dataclasses.replace(error, max_rel_error=0.0, mean_abs_error=0.0, median_abs_error=0.0,
                                   required_atol=0.0, required_rtol=0.0)

    def fix(v: float) -> float:
        return _INF if math.isnan(v) else v

    need_rel = 0.0 if error.required_atol == 0 else fix(error.required_rtol)
    return dataclasses.replace(error, max_abs_error=fix(error.max_abs_error), max_rel_error=fix(error.max_rel_error),
                               mean_abs_error=fix(error.mean_abs_error), median_abs_error=fix(error.median_abs_error),
                               required_atol=fix(error.required_atol), required_rtol=need_rel)

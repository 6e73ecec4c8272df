"""The numpy error statistics used by localisation agree with Polygraphy's simple compare function
(what the model outputs are checked with): same numbers, same verdicts, for every error statistic,
float/half/integer/boolean tensors, zeros in the reference, NaN/inf, shape mismatches; integers and
booleans pass only where every element is equal, under every statistic and tolerance (Polygraphy's
mean/median/quantile checks let differing integers through)."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from trt_backend.accuracy.numeric import compared_for_equality, tensor_error
from trt_backend.accuracy.options import ERROR_STATS, CompareOptions
from trt_backend.accuracy.polygraphy_glue import compare_func, compare_tensors


def _cases() -> list[tuple[str, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((3, 50)).astype(np.float32)
    ref[0, :5] = 0  # relative error against zeros: Polygraphy's epsilon
    near = ref + (1e-4 * rng.standard_normal(ref.shape)).astype(np.float32)
    far = ref.copy()
    far[1, 3] += 0.5
    nonfinite_ref = ref.copy()
    nonfinite_ref[2, :3] = [np.nan, np.inf, -np.inf]
    nonfinite_ours = near.copy()
    nonfinite_ours[2, :4] = [np.nan, np.inf, 1.0, np.nan]
    ints = rng.integers(0, 3, (4, 6))
    ints_off = ints.copy()
    ints_off[0, 0] += 1
    return [("close", near, ref), ("one far", far, ref), ("same", ref.copy(), ref),
            ("half", near.astype(np.float16), ref.astype(np.float16)), ("nonfinite", nonfinite_ours, nonfinite_ref),
            ("ints equal", ints.copy(), ints), ("ints off", ints_off, ints),
            ("bools", rng.random(10) > 0.5, rng.random(10) > 0.5), ("empty", np.zeros((0, 3), np.float32),
                                                                     np.zeros((0, 3), np.float32)),
            ("shapes", ref[:2], ref)]


def _close(a: float, b: float) -> bool:
    return (math.isinf(a) and math.isinf(b)) or math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-12)


@pytest.mark.parametrize("stat", ERROR_STATS)
@pytest.mark.parametrize("tol", [1e-5, 1e-3, 0.1])
def test_numpy_statistics_match_polygraphy(stat: str, tol: float) -> None:
    options = CompareOptions(atol=tol, rtol=tol, error_stat=stat)
    func = compare_func(options)
    for label, ours, ref in _cases():
        theirs = compare_tensors({"t": ours}, {"t": ref}, func, options)["t"]
        mine = tensor_error(ours, ref, tol, tol, stat)
        if compared_for_equality(ref):  # integers and booleans: equal or not, under every statistic
            assert mine.passed == bool(np.array_equal(ours, ref)), (label, mine)
            assert mine.differing == (0 if mine.passed else int(np.count_nonzero(ours != ref))), (label, mine)
            assert not theirs.passed or mine.passed or stat in ("mean", "median", "quantile"), (label, theirs)
        else:
            assert mine.passed == theirs.passed, (label, mine, theirs)
            assert mine.differing is None
        for f in ("max_abs_error", "max_rel_error", "mean_abs_error", "median_abs_error", "required_atol",
                  "required_rtol", "nonfinite_matched", "nonfinite_mismatched"):
            assert _close(getattr(mine, f), getattr(theirs, f)), (label, f, mine, theirs)
        assert (mine.note is None) == (theirs.note is None), label


def test_identical_tensors_have_no_relative_error() -> None:
    ints = np.array([0, 1, 0, 2])
    err = tensor_error(ints, ints.copy(), 0, 0)
    assert err.passed and err.max_rel_error == 0 and err.required_rtol == 0
    assert dataclasses.asdict(err)["max_abs_error"] == 0

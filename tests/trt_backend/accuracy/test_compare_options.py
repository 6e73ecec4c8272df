"""Comparison options without running anything: tolerance parsing and validation, NaN/inf masking,
the shape points a profile gives, and the report's JSON (its keys, no NaN in it)."""
from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from partitioner.errors import OptionsError
from trt_backend.accuracy.numeric import mask_nonfinite
from trt_backend.accuracy.options import CompareOptions, parse_tolerance
from trt_backend.accuracy.polygraphy_glue import profile_points
from trt_backend.accuracy.report import ComparisonReport, OutputReport, TensorError
from trt_backend.profiles import TensorProfile
from trt_backend.session.options import SessionOptions


def test_parse_tolerance() -> None:
    assert parse_tolerance("logits:1e-2,1e-3") == ("logits", 0.01, 0.001)
    assert parse_tolerance("scope/a:b:0,0.5") == ("scope/a:b", 0.0, 0.5)  # the last colon separates


@pytest.mark.parametrize("text", ["logits", "logits:1e-2", "logits:a,b", ":1,1", "x:1,2,3", "x:-1,0", "x:nan,0",
                                  "x:inf,0", "x:1e-3;1e-3"])
def test_malformed_tolerances_are_options_errors(text: str) -> None:
    with pytest.raises(OptionsError, match="tolerance|atol|rtol"):
        CompareOptions(tolerances=[text])


@pytest.mark.parametrize("kwargs, match", [
    ({"atol": "abc"}, "atol must be a finite number >= 0"), ({"rtol": -1}, "rtol must be a finite number >= 0"),
    ({"atol": True}, "atol must be a finite number >= 0"), ({"error_stat": "p99"}, "unknown error statistic"),
    ({"iterations": 0}, "iterations must be a whole number >= 1"), ({"iterations": "two"}, "whole number"),
    ({"iterations": 1.5}, "whole number"), ({"seed": -1}, "seed must be a whole number >= 0"),
    ({"localize": "sometimes"}, "localize must be"),
    ({"error_quantile": 1.5}, "error_quantile"), ({"tolerances": {"y": (1e-3,)}}, r"must be \(atol, rtol\)"),
    ({"shapes": {"x": "1x3"}}, "sequence of dims"),
])
def test_bad_options(kwargs, match) -> None:
    with pytest.raises(OptionsError, match=match):
        CompareOptions(**kwargs)


def test_precision_is_the_sessions_not_the_comparisons() -> None:
    """CompareOptions has no precision or keep_fp32_ops: both live in BuildOptions (given flat to
    SessionOptions), validated there."""
    for name in ("precision", "keep_fp32_ops"):
        with pytest.raises(OptionsError, match=f"CompareOptions has no option '{name}'"):
            kwargs: dict[str, Any] = {name: "fp16" if name == "precision" else ("Softmax",)}
            CompareOptions(**kwargs)
    with pytest.raises(OptionsError, match="unknown precision 'int4'"):
        SessionOptions(precision="int4")
    so = SessionOptions(precision="fp16", keep_fp32_ops=["Softmax"])
    assert so.build.precision == "fp16" and so.build.keep_fp32_ops == ("Softmax",)


def test_one_keep_fp32_op_as_text_is_one_op() -> None:
    assert SessionOptions(keep_fp32_ops="Softmax").build.keep_fp32_ops == ("Softmax",)


def test_option_values_are_normalised() -> None:
    # values as text (as a config file or the CLI hands them over), not the declared types
    given: dict[str, Any] = dict(atol="1e-2", rtol=0, tolerances={"y": ("0.5", 0)}, iterations="3", localize=True,
                                 shapes={"x": [1, 2]})
    opts = CompareOptions(**given)
    assert (opts.atol, opts.rtol, opts.iterations, opts.localize) == (0.01, 0.0, 3, "mismatch")
    assert opts.tolerance_for("y") == (0.5, 0.0) and opts.tolerance_for("z") == (0.01, 0.0)
    assert opts.shapes == {"x": (1, 2)}
    with pytest.raises(OptionsError, match=r"unknown output\(s\) 'y'.*outputs are: a, b"):
        opts.check_output_names(["a", "b"])


def test_nonfinite_masking() -> None:
    ours = np.array([np.nan, np.inf, -np.inf, 1.0, np.nan, 2.0, np.inf], np.float32)
    ref = np.array([np.nan, np.inf, -np.inf, 1.5, 3.0, np.nan, -np.inf], np.float32)
    a, b, matched, mismatched = mask_nonfinite(ours, ref)
    assert (matched, mismatched) == (3, 3)
    assert np.isfinite(a).all() and np.isfinite(b).all()
    assert a[3] == 1.0 and b[3] == 1.5  # finite places untouched
    assert np.isnan(ours[0])  # the inputs are not modified
    ints = np.arange(3)
    assert mask_nonfinite(ints, ints) == (ints, ints, 0, 0)


def test_profile_points() -> None:
    tp = TensorProfile((1, 3), (2, 3), (4, 3))
    shape = TensorProfile((1,), (1,), (1,), values=((1,), (2,), (8,)))
    profiles = [{"x": tp, "n": shape}, {"x": TensorProfile((2, 3), (2, 3), (2, 3))}]
    assert profile_points(profiles, None, False) == [({"x": (2, 3), "n": (1,)}, {"n": (2,)}), ({"x": (2, 3)}, {})]
    every = profile_points(profiles, None, True)
    assert [p[0]["x"] for p in every] == [(1, 3), (2, 3), (4, 3), (2, 3)]
    assert profile_points(profiles, {"x": (3, 3)}, False) == [({"x": (3, 3)}, {})]
    assert profile_points([], None, False) == [({}, {})]


def test_report_json_has_the_issue_keys_and_no_nan() -> None:
    good = TensorError(1e-4, 2e-4, 1e-5, 1e-5, 1e-4, 2e-4, True)
    bad = TensorError(math.inf, math.inf, math.inf, math.inf, math.inf, math.inf, False, note="shape (2,) vs (3,)")
    report = ComparisonReport(False, 1e-3, 1e-3,
                              [OutputReport("a", good, 1e-3, 1e-3), OutputReport("b", bad, 1e-3, 1e-3, 1)],
                              iterations=1)
    data = json.loads(report.to_json())
    assert {"passed", "atol", "rtol", "outputs", "localization"} <= set(data)
    assert data["passed"] is False and data["localization"] is None
    assert {"name", "max_abs_error", "max_rel_error", "passed"} <= set(data["outputs"][0])
    assert data["outputs"][1]["max_abs_error"] is None and data["outputs"][1]["note"].startswith("shape")
    assert not report and report.failed_outputs == ["b"]
    text = "\n".join(report.lines())
    assert "FAILED (1 of 2 output(s))" in text and "shape (2,) vs (3,)" in text

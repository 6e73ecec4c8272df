"""The one numeric-option check: what it takes, and the one error naming option, expectation and value."""
from __future__ import annotations

import numpy as np
import pytest

from partitioner import BoundaryCost, OptionsError
from partitioner.options_check import number_option
from trt_backend.bench.timing import TimingConfig
from trt_backend.engines.builder import BuildOptions
from trt_backend.errors import BenchOptionsError
from trt_backend.ort.options import OrtOptions


def test_numbers_within_bounds_come_back_typed() -> None:
    assert number_option(3, "n", whole=True, low=1) == 3
    assert number_option(np.int64(4), "n", whole=True, low=0, high=5) == 4
    assert type(number_option(np.int64(4), "n", whole=True)) is int
    assert number_option(2, "x", low=0.0) == 2.0 and type(number_option(2, "x")) is float
    assert number_option(" 1e-3 ", "atol", low=0.0, text=True) == 0.001
    assert number_option("7", "--threads", whole=True, low=0, text=True) == 7
    assert number_option(0.5, "f", low=0.0, high=1.0) == 0.5


@pytest.mark.parametrize("value, kwargs, message", [
    (0, dict(whole=True, low=1), "n must be a whole number >= 1, got 0"),
    (6, dict(whole=True, low=0, high=5), "n must be a whole number in 0..5, got 6"),
    (True, dict(whole=True), "n must be a whole number, got True"),
    (2.0, dict(whole=True), "n must be a whole number, got 2.0"),
    ("3", dict(whole=True), "n must be a whole number, got '3'"),
    ("3.5", dict(whole=True, text=True), "n must be a whole number, got '3.5'"),
    (float("nan"), dict(low=0.0), "n must be a finite number >= 0, got nan"),
    (float("inf"), dict(), "n must be a finite number, got inf"),
    (0.0, dict(above=0.0), "n must be a finite number > 0, got 0.0"),
    (1.5, dict(low=0.0, high=1.0), r"n must be a finite number in [0, 1], got 1.5"),
    ("abc", dict(text=True), "n must be a finite number, got 'abc'"),
    (None, dict(low=0.0), "n must be a finite number >= 0, got None"),
])
def test_anything_else_is_one_error_naming_option_expectation_and_value(value, kwargs, message) -> None:
    with pytest.raises(OptionsError) as e:
        number_option(value, "n", **kwargs)
    assert str(e.value) == message


def test_the_options_classes_use_it() -> None:
    with pytest.raises(OptionsError, match=r"^boundary cost device_gbps must be a finite number > 0, got 0$"):
        BoundaryCost(device_gbps=0)
    with pytest.raises(OptionsError, match=r"^builder optimisation level must be a whole number in 0..5, got 9$"):
        BuildOptions(builder_optimization_level=9)
    with pytest.raises(OptionsError, match=r"^intra_op_threads must be a whole number >= 0, got -1$"):
        OrtOptions(intra_op_threads=-1)
    with pytest.raises(BenchOptionsError, match=r"^--warmup-ms must be a finite number >= 0, got -5.0$"):
        TimingConfig(warmup_s=-0.005)


def test_every_options_class_names_an_option_it_does_not_have() -> None:
    """Python's TypeError ("unexpected keyword argument") from BuildOptions and its like, where
    SessionOptions answered with an OptionsError listing its options: now all answer alike."""
    import trt_backend
    from partitioner import PartitionOptions
    from trt_backend.accuracy.auto_precision import AutoOptions
    from trt_backend.serve.options import ServeOptions

    for cls in (trt_backend.BuildOptions, trt_backend.CompareOptions, trt_backend.OrtOptions, PartitionOptions,
                AutoOptions, ServeOptions, trt_backend.BenchOptions, trt_backend.SessionOptions):
        with pytest.raises(OptionsError, match=rf"{cls.__name__} has no option 'workspace_mbx' \(its"):
            cls(workspace_mbx=256)  # type: ignore[call-arg]

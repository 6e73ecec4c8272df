"""The Resize kernel source compiled for the host (g++) against ONNX Runtime's Resize on CPU:
a broad random subset, every Resize case of the ONNX backend node suite, float16/bfloat16
conversions, and the AOT-specialised source. ``benchmarks/device/resize_kernel_check.py`` runs more."""
from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest

from plugins.resize import host
from plugins.resize.aot import KERNEL_NAME, aot_source
from plugins.resize.check import (
    Tally,
    backend_resize_cases,
    check_backend_case,
    compare,
    random_cases,
)
from plugins.resize.spec import kernel_source


@pytest.fixture(scope="module", autouse=True)
def compiler() -> None:
    if host.compiler() is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have g++ to check the Resize kernel on the host")
        pytest.skip("no C++ compiler (g++) to build the Resize kernel for the host")


def test_per_element_math_is_host_device_code() -> None:
    src = kernel_source()
    assert "#define RZ_HD __host__ __device__ static inline" in src
    for fn in ("rz_coordinate", "rz_nearest", "rz_axis_setup", "rz_axis_tap", "rz_output_element"):
        assert "RZ_HD " in src.split(fn + "(")[0].rsplit("\n", 1)[-1], fn


def test_random_combinations_match_onnx_runtime() -> None:
    tally = Tally()
    for case in random_cases(160, seed=7):
        compare(case, tally)
    assert tally.failed == [] and tally.refused_by_spec == []
    assert tally.passed >= 150  # the rest are layouts ONNX Runtime itself refuses (e.g. cubic on 3-D)


def test_random_float16_combinations_match_onnx_runtime() -> None:
    tally = Tally()
    for case in random_cases(60, seed=11):
        compare(case, tally, "float16")
    assert tally.failed == [] and tally.passed >= 55


def test_every_backend_suite_resize_case() -> None:
    results = {c.name: check_backend_case(c) for c in backend_resize_cases()}
    assert len(results) == 39
    assert all(ort for _, ort in results.values())
    # Where the suite's expected outputs differ, ONNX Runtime differs from them the same way:
    # align_corners with a fractional output length (the spec uses in*scale, ONNX Runtime the
    # integer length), and one case off by 1.1e-5 on values up to 16 (float32 rounding).
    assert sorted(n for n, (ref, _) in results.items() if not ref) == [
        "test_resize_downsample_scales_cubic_align_corners", "test_resize_downsample_scales_linear_align_corners",
        "test_resize_upsample_scales_cubic_align_corners"]


def test_half_conversions_are_exact() -> None:
    lib = host.library()
    bits = np.arange(65536, dtype=np.uint16)
    ours = np.array([lib.rz_host_half_to_float(int(b)) for b in bits], np.float32)
    theirs = bits.view(np.float16).astype(np.float32)
    same = (ours == theirs) | (np.isnan(ours) & np.isnan(theirs))
    assert same.all()
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.standard_normal(4000).astype(np.float32) * 10.0 ** rng.integers(-9, 6, 4000),
                             np.array([0.0, -0.0, 65504, 65519.99, 65520, 1e-8, 2.0 ** -25, 3 * 2.0 ** -26,
                                       np.inf, -np.inf], np.float32)]).astype(np.float32)
    ours16 = np.array([lib.rz_host_float_to_half(float(v)) for v in values], np.uint16)
    with np.errstate(over="ignore"):
        assert (ours16 == values.astype(np.float16).view(np.uint16)).all()


def _bf16_reference(x: np.ndarray) -> np.ndarray:
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def test_bfloat16_path() -> None:
    lib = host.library()
    values = np.random.default_rng(1).standard_normal(2000).astype(np.float32)
    ours = np.array([lib.rz_host_float_to_bf16(float(v)) for v in values], np.uint16)
    assert (ours == _bf16_reference(values)).all()
    case = next(c for c in random_cases(50, seed=3) if c.attrs["mode"] == "linear" and c.opset >= 13)
    x = case.input()
    bits = _bf16_reference(x)
    got = host.run_bfloat16(case.params(), bits)
    want = host.run(case.params(), (bits.astype(np.uint32) << 16).view(np.float32))
    assert got.shape == want.shape
    np.testing.assert_allclose((got.astype(np.uint32) << 16).view(np.float32), want, rtol=1e-2, atol=1e-2)


def test_aot_source_bakes_the_parameters_in() -> None:
    for case in list(random_cases(40, seed=5))[:40:10]:
        params = case.params()
        src = aot_source(params, "float32")
        assert f"__global__ void {KERNEL_NAME}(" in src
        lib = host.compile_library(src)
        x = case.input()
        out_shape = params.output_shape(x.shape)
        y = np.empty(out_shape, np.float32)
        dims_in = (ctypes.c_int * params.rank)(*x.shape)
        dims_out = (ctypes.c_int * params.rank)(*out_shape)
        lib.rz_host_aot.restype = ctypes.c_longlong
        lib.rz_host_aot(ctypes.c_void_p(x.ctypes.data), dims_in, dims_out, ctypes.c_void_p(y.ctypes.data))
        np.testing.assert_array_equal(y, host.run(params, x))

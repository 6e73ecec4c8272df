"""NVRTC (cuda-python + the nvidia-cuda-nvrtc wheel) compiles the Resize kernel to PTX for every
architecture plugins target, on a machine without a GPU."""
from __future__ import annotations

import os

import pytest

from plugins import nvrtc
from plugins.resize.aot import KERNEL_NAME, aot_source
from plugins.resize.check import random_cases
from plugins.resize.spec import kernel_source


@pytest.fixture(scope="module", autouse=True)
def nvrtc_here() -> tuple[int, int]:
    try:
        return nvrtc.version()
    except nvrtc.NvrtcUnavailableError as e:
        if os.environ.get("CI"):
            pytest.fail(f"CI must install cuda-python and nvidia-cuda-nvrtc: {e}")
        pytest.skip(f"NVRTC cannot be imported: {e}")


@pytest.mark.parametrize("arch", nvrtc.ARCHITECTURES)
def test_generic_kernel_compiles(arch: str) -> None:
    ptx = nvrtc.compile_ptx(kernel_source(), arch)
    assert nvrtc.ptx_target(ptx) == arch
    assert nvrtc.ptx_entries(ptx) == ["trt_backend_resize"]
    assert b"fma.rn.f32" not in ptx  # --fmad=false: coordinates round as on the host


@pytest.mark.parametrize("arch", nvrtc.ARCHITECTURES)
def test_aot_kernels_compile(arch: str) -> None:
    cases = [c for c in random_cases(30, seed=2)][:3]
    for dtype, case in zip(("float32", "float16", "bfloat16"), cases):
        ptx = nvrtc.compile_ptx(aot_source(case.params(), dtype), arch, name="resize_aot.cu")
        assert nvrtc.ptx_target(ptx) == arch
        assert KERNEL_NAME in nvrtc.ptx_entries(ptx)


def test_compile_errors_carry_the_log() -> None:
    with pytest.raises(nvrtc.NvrtcCompileError, match="kernel.cu"):
        nvrtc.compile_ptx("extern \"C\" __global__ void k() { undeclared(); }", "sm_80")

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


def test_ptx_newer_than_the_driver_is_named_with_both_versions() -> None:
    """NVRTC writes the PTX ISA of its own CUDA version; a driver of an older CUDA cannot
    JIT-compile it (an engine carrying it would fail to load on that GPU). Checked before the PTX
    goes into an engine, naming both versions and what to install."""
    ptx = nvrtc.compile_ptx(kernel_source(), "sm_75")
    major, minor = nvrtc.version()
    isa = nvrtc.ptx_isa(ptx)
    assert isa is not None and isa >= (8, 0)
    with pytest.raises(nvrtc.PtxTooNewError,
                       match=rf"NVRTC wrote PTX ISA {isa[0]}\.{isa[1]}, which needs .*; this driver "
                                                   r"supports CUDA 12\.4 \(PTX ISA up to 8\.4\): update the driver, or "
                                                   r"install the NVRTC of CUDA 12\.4 or older \(pip install "
                                                   r"'nvidia-cuda-nvrtc-cu12<=12\.4\.99'\)"):
        nvrtc.check_ptx_for_driver(ptx, 12040)
    nvrtc.check_ptx_for_driver(ptx, major * 1000 + minor * 10)  # its own CUDA's driver takes it
    nvrtc.check_ptx_for_driver(ptx, 99000)  # a driver newer than the table takes everything
    nvrtc.check_ptx_for_driver(b".version 8.4\n.target sm_75\n", 12040)

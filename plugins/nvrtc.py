"""NVRTC through cuda-python: CUDA C to PTX on a machine without a GPU (cuda-python and the
``nvidia-cuda-nvrtc`` wheel; both load on first use)."""
from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from partitioner.errors import TrtBackendError

log = logging.getLogger(__name__)

# The architectures plugin kernels are checked for (Turing to Hopper).
ARCHITECTURES = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90")
# --fmad=false: no fused multiply-add contraction, so coordinates round as on the host and in
# ONNX Runtime (a nearest index decided one ulp differently is a whole pixel off).
DEFAULT_OPTIONS = ("--std=c++17", "--fmad=false")


class NvrtcUnavailableError(TrtBackendError):
    """cuda-python's NVRTC bindings, or the NVRTC library, cannot be loaded."""


class NvrtcCompileError(TrtBackendError):
    """NVRTC rejected the source; the message holds its log."""


def _bindings() -> Any:
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        try:
            from cuda import nvrtc  # type: ignore[no-redef]  # cuda-python < 12.6
        except ImportError as e:
            raise NvrtcUnavailableError(f"cuda-python with NVRTC is not installed ({e}); "
                                        "pip install cuda-python nvidia-cuda-nvrtc") from None
    return nvrtc


def _check(nvrtc: Any, result: Any, what: str) -> None:
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise NvrtcCompileError(f"NVRTC {what} failed: {result}")


def version() -> tuple[int, int]:
    """The NVRTC library's (major, minor)."""
    nvrtc = _bindings()
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except (RuntimeError, OSError) as e:  # the bindings import, the library does not load
        raise NvrtcUnavailableError(f"NVRTC library not loadable: {e}") from None
    _check(nvrtc, err, "version query")
    return int(major), int(minor)


def compile_ptx(source: str, arch: str = "sm_75", *, name: str = "kernel.cu",
                options: Sequence[str] = DEFAULT_OPTIONS) -> bytes:
    """PTX for ``arch`` (``sm_XX`` or ``compute_XX``: PTX targets the virtual architecture)."""
    nvrtc = _bindings()
    virtual = "compute_" + arch.split("_", 1)[1]
    try:
        err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    except (RuntimeError, OSError) as e:
        raise NvrtcUnavailableError(f"NVRTC library not loadable: {e}") from None
    _check(nvrtc, err, "program creation")
    try:
        opts = [f"--gpu-architecture={virtual}".encode()] + [o.encode() for o in options]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            text = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, text)
            raise NvrtcCompileError(f"NVRTC could not compile {name} for {arch}:\n"
                                    + text.decode(errors="replace").rstrip("\0 \n"))
        err, size = nvrtc.nvrtcGetPTXSize(prog)
        _check(nvrtc, err, "PTX size query")
        ptx = b" " * size
        (err,) = nvrtc.nvrtcGetPTX(prog, ptx)
        _check(nvrtc, err, "PTX retrieval")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return ptx.rstrip(b"\0")


def ptx_entries(ptx: bytes) -> list[str]:
    """Names of the kernels (``.entry``) a PTX module defines."""
    return [m.decode() for m in re.findall(rb"\.entry\s+(\w+)", ptx)]


def ptx_target(ptx: bytes) -> str | None:
    match = re.search(rb"^\.target\s+(\w+)", ptx, re.M)
    return match.group(1).decode() if match else None

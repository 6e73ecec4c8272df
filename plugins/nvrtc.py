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


class PtxTooNewError(TrtBackendError):
    """NVRTC wrote PTX of an ISA newer than this machine's CUDA driver can JIT-compile."""


# The newest PTX ISA version a CUDA driver of each version JIT-compiles (the PTX ISA document's
# release notes). NVRTC writes the ISA of its own CUDA version, so PTX from the NVRTC wheel of a
# newer CUDA than the driver's fails to load (CUDA_ERROR_UNSUPPORTED_PTX_VERSION).
PTX_ISA_OF_CUDA = {(11, 0): (7, 0), (11, 1): (7, 1), (11, 2): (7, 2), (11, 3): (7, 3), (11, 4): (7, 4),
                   (11, 5): (7, 5), (11, 6): (7, 6), (11, 7): (7, 7), (11, 8): (7, 8), (12, 0): (8, 0),
                   (12, 1): (8, 1), (12, 2): (8, 2), (12, 3): (8, 3), (12, 4): (8, 4), (12, 5): (8, 5),
                   (12, 6): (8, 5), (12, 7): (8, 6), (12, 8): (8, 7), (12, 9): (8, 8), (13, 0): (9, 0),
                   (13, 1): (9, 1), (13, 2): (9, 2)}


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


def ptx_isa(ptx: bytes) -> tuple[int, int] | None:
    """The PTX ISA version a module declares (``.version 9.0``)."""
    match = re.search(rb"^\.version\s+(\d+)\.(\d+)", ptx, re.M)
    return (int(match.group(1)), int(match.group(2))) if match else None


def driver_cuda_version() -> int | None:
    """The installed driver's CUDA version as CUDA writes it (12040: 12.4); None without one."""
    try:
        from cuda.bindings import driver
        err, version = driver.cuDriverGetVersion()
    except (ImportError, RuntimeError, OSError):
        return None
    return int(version) if int(err) == 0 and int(version) > 0 else None


def check_ptx_for_driver(ptx: bytes, driver_version: int | None = None) -> None:
    """PtxTooNewError when the driver (``driver_version``, default: this machine's; none: nothing
    to check) cannot JIT-compile ``ptx``'s ISA, naming both versions and what to install."""
    version = driver_version if driver_version is not None else driver_cuda_version()
    isa = ptx_isa(ptx)
    if not version or isa is None:
        return
    cuda = (version // 1000, (version % 1000) // 10)
    known = sorted(PTX_ISA_OF_CUDA)
    if cuda > known[-1]:
        return  # a driver newer than this table JIT-compiles every ISA in it
    supported = PTX_ISA_OF_CUDA.get(cuda) or PTX_ISA_OF_CUDA[max((k for k in known if k <= cuda), default=known[0])]
    if isa <= supported:
        return
    needed = min((k for k, v in PTX_ISA_OF_CUDA.items() if v >= isa), default=None)
    need = f"a CUDA {needed[0]}.{needed[1]} driver" if needed else "a newer driver"
    wheel = "nvidia-cuda-nvrtc" if cuda[0] >= 13 else f"nvidia-cuda-nvrtc-cu{cuda[0]}"
    raise PtxTooNewError(f"NVRTC wrote PTX ISA {isa[0]}.{isa[1]}, which needs {need}; this driver supports CUDA "
                         f"{cuda[0]}.{cuda[1]} (PTX ISA up to {supported[0]}.{supported[1]}): update the driver, or "
                         f"install the NVRTC of CUDA {cuda[0]}.{cuda[1]} or older "
                         f"(pip install '{wheel}<={cuda[0]}.{cuda[1]}.99')")


def ptx_target(ptx: bytes) -> str | None:
    match = re.search(rb"^\.target\s+(\w+)", ptx, re.M)
    return match.group(1).decode() if match else None

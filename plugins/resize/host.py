"""The Resize kernel source compiled for the host with g++ and called through ctypes.

This is the plugin's host reference: the very per-element functions the GPU runs, built at
first use into a temporary folder (no build step at install). Needs a C++ compiler (``g++`` or
``$CXX``); :class:`HostCompilerError` says so when there is none."""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

import numpy as np

from plugins.errors import HostCompilerError

from .spec import DTYPE_CODES, ResizeParams, kernel_source

MAX_RANK = 8


class RzParams(ctypes.Structure):
    """Mirror of ``struct RzParams`` in kernel.cu (field order and types must match)."""

    _fields_ = [(name, ctypes.c_int) for name in
                ("rank", "mode", "ctm", "nearest_mode", "exclude_outside", "antialias", "dtype", "reserved")]
    _fields_ += [("cubic_a", ctypes.c_float), ("extrapolation", ctypes.c_float),
                 ("in_dims", ctypes.c_longlong * MAX_RANK), ("out_dims", ctypes.c_longlong * MAX_RANK),
                 ("scales", ctypes.c_float * MAX_RANK), ("roi_start", ctypes.c_float * MAX_RANK),
                 ("roi_end", ctypes.c_float * MAX_RANK)]


def compiler() -> str | None:
    """The C++ compiler to use, or None."""
    return shutil.which(os.environ.get("CXX", "g++"))


@functools.lru_cache(maxsize=8)
def compile_library(source: str) -> ctypes.CDLL:
    cxx = compiler()
    if cxx is None:
        raise HostCompilerError("no C++ compiler found (set CXX or install g++) to build the Resize host kernel")
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    folder = tempfile.mkdtemp(prefix="trt_backend_resize_")
    src, lib = os.path.join(folder, "kernel.cpp"), os.path.join(folder, f"resize_{digest}.so")
    with open(src, "w", encoding="utf-8") as f:
        f.write(source)
    # -ffp-contract=off: no fused multiply-add, so coordinates round exactly as ONNX Runtime's do
    cmd = [cxx, "-x", "c++", "-std=c++17", "-O2", "-fPIC", "-shared", "-ffp-contract=off", src, "-o", lib]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise HostCompilerError(f"g++ failed on the Resize kernel:\n{proc.stderr[-4000:]}")
    dll = ctypes.CDLL(lib)
    dll.rz_host_resize.argtypes = [ctypes.POINTER(RzParams), ctypes.c_void_p, ctypes.c_void_p]
    dll.rz_host_resize.restype = ctypes.c_longlong
    dll.rz_host_params_size.restype = ctypes.c_longlong
    dll.rz_host_float_to_half.argtypes = [ctypes.c_float]
    dll.rz_host_float_to_half.restype = ctypes.c_ushort
    dll.rz_host_float_to_bf16.argtypes = [ctypes.c_float]
    dll.rz_host_float_to_bf16.restype = ctypes.c_ushort
    dll.rz_host_half_to_float.argtypes = [ctypes.c_ushort]
    dll.rz_host_half_to_float.restype = ctypes.c_float
    if dll.rz_host_params_size() != ctypes.sizeof(RzParams):
        raise HostCompilerError("RzParams layout differs between kernel.cu and host.py")
    return dll


def library() -> ctypes.CDLL:
    """The compiled host kernel (built once per process)."""
    return compile_library(kernel_source())


def make_struct(params: ResizeParams, in_shape: Sequence[int], dtype: np.dtype) -> RzParams:
    """The kernel's parameter block for one call on an input of ``in_shape``."""
    rank = len(in_shape)
    if rank != params.rank or not 1 <= rank <= MAX_RANK:
        raise ValueError(f"input rank {rank} does not match the Resize parameters (rank {params.rank})")
    out_shape = params.output_shape(in_shape)
    p = RzParams()
    p.rank, p.mode, p.ctm, p.nearest_mode = rank, params.mode, params.ctm, params.nearest_mode
    p.exclude_outside, p.antialias = params.exclude_outside, params.antialias
    p.dtype = DTYPE_CODES[np.dtype(dtype).name]
    p.cubic_a, p.extrapolation = params.cubic_a, params.extrapolation
    for d in range(rank):
        p.in_dims[d], p.out_dims[d] = int(in_shape[d]), int(out_shape[d])
        p.scales[d] = params.scales[d]
        p.roi_start[d], p.roi_end[d] = params.roi[d], params.roi[rank + d]
    return p


def run(params: ResizeParams, x: np.ndarray) -> np.ndarray:
    """Resize ``x`` (float32, float16 or bfloat16-as-uint16 with ``view``) on the host."""
    x = np.ascontiguousarray(x)
    dtype = x.dtype
    p = make_struct(params, x.shape, dtype)
    y = np.empty(params.output_shape(x.shape), dtype)
    if y.size:
        library().rz_host_resize(ctypes.byref(p), x.ctypes.data, y.ctypes.data)
    return y


def run_bfloat16(params: ResizeParams, bits: np.ndarray) -> np.ndarray:
    """Resize bfloat16 data given as uint16 bit patterns; returns uint16 bit patterns."""
    x = np.ascontiguousarray(bits, dtype=np.uint16)
    p = make_struct(params, x.shape, np.dtype(np.float32))
    p.dtype = DTYPE_CODES["bfloat16"]
    y = np.empty(params.output_shape(x.shape), np.uint16)
    if y.size:
        library().rz_host_resize(ctypes.byref(p), x.ctypes.data, y.ctypes.data)
    return y

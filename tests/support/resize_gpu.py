"""Launch the Resize plugin kernel on a real GPU: NVRTC-compiled, launched through the CUDA driver
API (cuda-python) exactly as the plugin's just-in-time path (``generic``) and TensorRT's AOT path
(``aot``) launch it. Used by the GPU tests and by ``benchmarks/device/resize_gpu_check.py``,
which compares many more cases with the host build. Needs cuda-python and nvidia-cuda-nvrtc."""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from plugins.nvrtc import compile_ptx
from plugins.resize.aot import BLOCK_SIZE, KERNEL_NAME, aot_source
from plugins.resize.tensorrt import _launch_generic


def ok(result: tuple) -> Any:
    from cuda.bindings import driver

    if result[0] != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver call failed: {result[0]}")
    return result[1] if len(result) == 2 else result[1:]


class Device:
    def __init__(self) -> None:
        from cuda.bindings import driver

        self.d = driver
        ok(driver.cuInit(0) + (None,))
        dev = ok(driver.cuDeviceGet(0))
        self.ctx = ok(driver.cuDevicePrimaryCtxRetain(dev))
        ok(driver.cuCtxSetCurrent(self.ctx) + (None,))
        name = ok(driver.cuDeviceGetName(64, dev))
        attr = driver.CUdevice_attribute
        major = ok(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
        minor = ok(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
        label = bytes(name).split(b"\0")[0].decode()
        self.name = f"{label} (sm_{major}{minor})"

    def upload(self, a: np.ndarray) -> int:
        ptr = ok(self.d.cuMemAlloc(max(a.nbytes, 1)))
        ok(self.d.cuMemcpyHtoD(ptr, a.ctypes.data, a.nbytes) + (None,))
        return int(ptr)

    def download(self, ptr: int, like: np.ndarray) -> np.ndarray:
        ok(self.d.cuCtxSynchronize() + (None,))
        ok(self.d.cuMemcpyDtoH(like.ctypes.data, ptr, like.nbytes) + (None,))
        return like

    def free(self, *ptrs: int) -> None:
        for p in ptrs:
            ok(self.d.cuMemFree(p) + (None,))


def generic(dev: Device, params, x: np.ndarray, dtype: str) -> np.ndarray:
    y = np.empty(params.output_shape(x.shape), x.dtype)
    xp, yp = dev.upload(x), dev.upload(y)
    _launch_generic(params, dtype, x.shape, xp, yp, 0)
    out = dev.download(yp, y)
    dev.free(xp, yp)
    return out


def aot(dev: Device, params, x: np.ndarray) -> np.ndarray:
    d = dev.d
    ptx = compile_ptx(aot_source(params, "float32"), "sm_75", name="resize_aot.cu")
    module = ok(d.cuModuleLoadData(ptx + b"\0"))
    function = ok(d.cuModuleGetFunction(module, KERNEL_NAME.encode()))
    out_shape = params.output_shape(x.shape)
    y = np.empty(out_shape, np.float32)
    xp, yp = dev.upload(x), dev.upload(y)
    n = int(np.prod(out_shape))
    lengths = [ctypes.c_int(v) for v in list(x.shape) + list(out_shape) + [n]]
    args = [ctypes.c_void_p(xp), *lengths, ctypes.c_void_p(yp)]
    pointers = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
    grid = max(1, (n + BLOCK_SIZE - 1) // BLOCK_SIZE)
    ok(d.cuLaunchKernel(function, grid, 1, 1, BLOCK_SIZE, 1, 1, 0, d.CUstream(0), ctypes.addressof(pointers), 0)
       + (None,))
    out = dev.download(yp, y)
    dev.free(xp, yp)
    ok(d.cuModuleUnload(module) + (None,))
    return out

"""The Resize plugin kernel on a real GPU: NVRTC-compiled, launched through the CUDA driver API
(cuda-python) exactly as the plugin's just-in-time path and TensorRT's AOT path launch it, and
compared with the host build (g++) of the same source, which matches ONNX Runtime on CPU.

    python benchmarks/resize_gpu_check.py [--count 300] [--aot 30]

Needs a CUDA device, cuda-python, nvidia-cuda-nvrtc and g++; prints passed/total per path."""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from plugins.nvrtc import compile_ptx
from plugins.resize import host
from plugins.resize.aot import BLOCK_SIZE, KERNEL_NAME, aot_source
from plugins.resize.check import random_cases
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--aot", type=int, default=30)
    args = ap.parse_args(argv)
    dev = Device()
    print(f"device: {dev.name}")
    start = time.perf_counter()
    cases = [c for c in random_cases(args.count, seed=21)]
    totals: dict[str, list[int]] = {}
    worst: dict[str, float] = {}
    for k, case in enumerate(cases):
        params = case.params()
        x = case.input()
        ref = host.run(params, x)
        for dtype, xin in (("float32", x), ("float16", x.astype(np.float16))):
            if dtype == "float16" and k % 3:
                continue
            got = generic(dev, params, xin, dtype)
            want = ref if dtype == "float32" else host.run(params, xin)
            err = float(np.max(np.abs(got.astype(np.float32) - want.astype(np.float32)))) if got.size else 0.0
            tally = totals.setdefault(f"generic {dtype}", [0, 0])
            tally[1] += 1
            tally[0] += err <= (1e-6 if dtype == "float32" else 1e-3)
            worst[f"generic {dtype}"] = max(worst.get(f"generic {dtype}", 0.0), err)
        if k < args.aot:
            got = aot(dev, params, x)
            err = float(np.max(np.abs(got - ref))) if got.size else 0.0
            tally = totals.setdefault("aot float32", [0, 0])
            tally[1] += 1
            tally[0] += err <= 1e-6
            worst["aot float32"] = max(worst.get("aot float32", 0.0), err)
    for key, (passed, total) in totals.items():
        print(f"{key}: {passed}/{total} match the host build (max abs difference {worst[key]:.3g})")
    big = next(c for c in random_cases(200, seed=21) if c.attrs["mode"] == "linear")
    params = big.params()
    x = np.random.default_rng(0).standard_normal(big.shape).astype(np.float32)
    t = time.perf_counter()
    for _ in range(20):
        generic(dev, params, x, "float32")
    print(f"20 generic launches incl. copies: {1000 * (time.perf_counter() - t) / 20:.2f} ms each; "
          f"all checks in {time.perf_counter() - start:.1f} s")
    return 0 if all(p == t for p, t in totals.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

"""The Resize plugin kernel on a real GPU: NVRTC-compiled, launched through the CUDA driver API
(cuda-python) exactly as the plugin's just-in-time path and TensorRT's AOT path launch it, and
compared with the host build (g++) of the same source, which matches ONNX Runtime on CPU.

    python benchmarks/device/resize_gpu_check.py [--count 300] [--aot 30]

Needs a CUDA device, cuda-python, nvidia-cuda-nvrtc and g++; prints passed/total per path and
exits 1 when any case differs."""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from plugins.resize import host
from plugins.resize.check import random_cases
from tests.support.resize_gpu import Device, aot, generic


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

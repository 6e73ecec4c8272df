"""The Resize plugin kernel, compiled for the host with g++, against ONNX Runtime's Resize on CPU.

    python benchmarks/device/resize_kernel_check.py [--count 600] [--seed 0] [--fp16 200]

Random attribute/shape combinations over opsets 10-19 (modes, coordinate transformations,
nearest modes, cubic_coeff_a, exclude_outside, antialias, axes, keep_aspect_ratio_policy,
roi/extrapolation, scales or sizes, ranks 2-5) until --count of them ran in ONNX Runtime
(combinations ONNX Runtime refuses are counted apart), then every Resize case of the ONNX
backend node suite, against ONNX Runtime and against the suite's expected outputs.
fp32 tolerance: absolute 1e-5. Exit status 1 on any mismatch with ONNX Runtime."""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from plugins.resize.check import (
    ATOL,
    Tally,
    backend_resize_cases,
    check_backend_case,
    compare,
    random_case,
)


def random_tally(count: int, seed: int, dtype: str) -> Tally:
    import numpy as np

    rng = np.random.default_rng(seed)
    tally, k = Tally(), 0
    while tally.total < count:
        compare(random_case(k, rng), tally, dtype)
        k += 1
    return tally


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=600, help="combinations ONNX Runtime runs (default 600)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fp16", type=int, default=200, help="float16 combinations (tolerance 2e-3)")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    fp32 = random_tally(args.count, args.seed, "float32")
    print(f"random fp32 combinations: {fp32.passed}/{fp32.total} passed (atol {ATOL:g}); "
          f"{fp32.refused_by_ort} more refused by ONNX Runtime; {fp32.masked} compared with ONNX Runtime's "
          f"misplaced NHWC extrapolation values masked")
    for line in fp32.failed[:20]:
        print("  FAIL", line)
    fp16 = random_tally(args.fp16, args.seed + 1, "float16") if args.fp16 else Tally()
    if args.fp16:
        print(f"random fp16 combinations: {fp16.passed}/{fp16.total} passed (atol/rtol 2e-3 against fp32 ONNX Runtime)")
        for line in fp16.failed[:20]:
            print("  FAIL", line)
    cases = backend_resize_cases()
    results = [(c.name, *check_backend_case(c)) for c in cases]
    ort_ok = sum(1 for _, _, o in results if o)
    ref_ok = sum(1 for _, r, _ in results if r)
    print(f"ONNX backend node suite, Resize cases: {ort_ok}/{len(results)} match ONNX Runtime, "
          f"{ref_ok}/{len(results)} match the suite's expected outputs (atol {ATOL:g})")
    for name, ref, ort in results:
        if not (ref and ort):
            print(f"  {name}: expected outputs {'ok' if ref else 'differ'}, ONNX Runtime {'ok' if ort else 'differs'}")
    total = fp32.total + fp16.total + len(results)
    passed = fp32.passed + fp16.passed + ort_ok
    print(f"passed/total against ONNX Runtime: {passed}/{total} in {time.perf_counter() - start:.1f} s")
    return 0 if passed == total else 1


if __name__ == "__main__":
    sys.exit(main())

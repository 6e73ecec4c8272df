"""What ``trt_backend.compare`` costs and finds, on CPU with TensorRT segments emulated: wall time
of a plain comparison (planning, profiles, reference and Polygraphy run included), of the same
with localisation always on, and the fp16 comparison's worst error and first diverging segment.
Target: localisation at most triples the plain comparison's time. A report: exits 0 either way.

    python benchmarks/compare_time.py [--only REGEX] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable
from typing import Any

import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.support.graphs import conv_chain  # noqa: E402
from trt_backend.accuracy.compare import compare  # noqa: E402
from trt_backend.session.options import SessionOptions  # noqa: E402

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def light(name: str) -> Callable[[], Any]:
    return lambda: os.path.join(LIGHT, f"light_{name}.onnx")


CUT = {"exclude_ops": ("Concat",), "min_segment_size": 1}
CHAIN_PROFILE = [{"x": ((1, 32, 64, 64), (4, 32, 64, 64), (4, 32, 64, 64))}]
# name, model factory, extra session options, profiles
CASES: list[tuple[str, Callable[[], Any], dict[str, Any], Any]] = [
    ("resnet50", light("resnet50"), {}, None),
    ("densenet121", light("densenet121"), {}, None),
    ("inception_v1, Concat on ORT", light("inception_v1"), CUT, None),
    ("squeezenet, Concat on ORT", light("squeezenet"), CUT, None),
    ("conv_chain x5 (9 segments)", lambda: conv_chain(5, 32, 64), {}, CHAIN_PROFILE),
]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def measure(name: str, make: Callable[[], Any], extra: dict[str, Any], profiles: Any) -> dict[str, Any]:
    so = SessionOptions(emulate=True, **extra)
    model = make()
    plain_s, plain = timed(lambda: compare(model, profiles=profiles, session_options=so))
    loc_s, loc = timed(lambda: compare(model, profiles=profiles, session_options=so, localize="always"))
    so16 = SessionOptions(emulate=True, precision="fp16", **extra)  # compare checks the session's precision
    fp16_s, fp16 = timed(lambda: compare(model, profiles=profiles, session_options=so16, atol=1e-5, rtol=1e-5,
                                         localize=True))
    culprit = fp16.localization.segment if fp16.localization else None
    return {"case": name, "segments": len(plain.executors), "passed": plain.passed,
            "max_abs_error": max(o.error.max_abs_error for o in plain.outputs), "compare_s": plain_s,
            "localize_s": loc_s, "localize_ratio": loc_s / plain_s, "fp16_s": fp16_s,
            "fp16_max_abs_error": max(o.error.max_abs_error for o in fp16.outputs),
            "fp16_first_diverging": None if culprit is None else
            {"segment": culprit.id, "backend": culprit.backend, "own_error": culprit.own_error},
            "segments_without_error": sum(s.own_error == 0 for s in (loc.segments or []))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run the cases whose name matches this regular expression")
    parser.add_argument("--json", help="write the rows as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    rows = [measure(*case) for case in CASES if not args.only or re.search(args.only, case[0])]
    print(f"{'case':<30} {'segs':>4} {'fp32 err':>9} {'compare s':>9} {'+localize s':>11} {'ratio':>5} "
          f"{'fp16 err':>9}  fp16 first diverging")
    for r in rows:
        first = r["fp16_first_diverging"]
        where = ("none" if first is None
                 else f"segment {first['segment']} ({first['backend']}, own {first['own_error']:.3g})")
        print(f"{r['case']:<30} {r['segments']:>4} {r['max_abs_error']:>9.2g} {r['compare_s']:>9.3f} "
              f"{r['localize_s']:>11.3f} {r['localize_ratio']:>5.2f} {r['fp16_max_abs_error']:>9.2g}  {where}")
    for r in rows:
        verdict = "PASS" if r["localize_ratio"] <= 3.0 else "FAIL"
        print(f"{verdict} {r['case']}: localisation costs {r['localize_ratio']:.2f}x the plain comparison "
              "(target <= 3)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

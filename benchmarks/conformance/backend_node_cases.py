"""ONNX backend node cases: ONNX Runtime CPU alone vs trt_backend.onnx_backend (device "CPU", TensorRT
segments emulated), in the same run. Prints passed / errored / mismatched for both, the cases
where they differ, and the TensorRT share (nodes placed in TensorRT segments over all nodes of
the cases that pass through trt_backend).

    python benchmarks/conformance/backend_node_cases.py [--filter REGEX] [--every N] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.support.onnx_backend_cases import ERRORED, MISMATCHED, PASSED, load_cases, run_ort, run_ours


@dataclass
class Tally:
    counts: dict[str, int] = field(default_factory=lambda: {PASSED: 0, ERRORED: 0, MISMATCHED: 0})
    seconds: float = 0.0

    def add(self, verdict: str, seconds: float) -> None:
        self.counts[verdict] += 1
        self.seconds += seconds

    def line(self, name: str, total: int) -> str:
        c = self.counts
        return (f"{name:<24} passed {c[PASSED]:>5} / {total}   errored {c[ERRORED]:>4}   mismatched "
                f"{c[MISMATCHED]:>4}   {self.seconds:7.1f} s")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--filter", help="only cases whose name matches this regular expression")
    ap.add_argument("--every", type=int, default=1, help="take every N-th case (a quick subset)")
    ap.add_argument("--json", help="write per-case results to this file")
    ap.add_argument("--show", type=int, default=20, help="list up to N cases where the two differ")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    cases = load_cases(args.filter, args.every)
    ort_t, our_t = Tally(), Tally()
    trt_nodes = all_nodes = 0
    rows: list[dict[str, Any]] = []
    for k, case in enumerate(cases):
        t0 = time.perf_counter()
        ort_v, ort_why = run_ort(case)
        t1 = time.perf_counter()
        our_v, our_why, (on_trt, nodes) = run_ours(case)
        t2 = time.perf_counter()
        ort_t.add(ort_v, t1 - t0)
        our_t.add(our_v, t2 - t1)
        if our_v == PASSED:
            trt_nodes += on_trt
            all_nodes += nodes
        rows.append({"case": case.name, "ort": ort_v, "ort_why": ort_why, "ours": our_v, "ours_why": our_why,
                     "tensorrt_nodes": on_trt, "nodes": nodes})
        if (k + 1) % 200 == 0:
            print(f"... {k + 1}/{len(cases)}", file=sys.stderr, flush=True)
    print(f"ONNX backend node cases: {len(cases)} (onnx {onnx.__version__})")
    import onnxruntime

    print(ort_t.line(f"onnxruntime {onnxruntime.__version__} CPU", len(cases)))
    print(our_t.line("trt_backend CPU", len(cases)))
    share = trt_nodes / all_nodes if all_nodes else 0.0
    print(f"TensorRT share (passing cases): {trt_nodes} / {all_nodes} nodes = {share:.1%}")
    differ = [r for r in rows if r["ort"] != r["ours"]]
    print(f"cases judged differently: {len(differ)}")
    for r in differ[:args.show]:
        print(f"  {r['case']}: onnxruntime {r['ort']}, trt_backend {r['ours']}: {r['ours_why'] or r['ort_why']}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"cases": len(cases), "onnxruntime": ort_t.counts, "trt_backend": our_t.counts,
                       "tensorrt_share": share, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

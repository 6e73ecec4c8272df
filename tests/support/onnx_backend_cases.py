"""ONNX backend node cases: ONNX Runtime CPU alone vs trt_backend.onnx_backend (device "CPU", TensorRT
segments emulated), in the same run. Prints passed / errored / mismatched for both, the cases
where they differ, and the TensorRT share (nodes placed in TensorRT segments over all nodes of
the cases that pass through trt_backend).

    python benchmarks/backend_node_cases.py [--filter REGEX] [--every N] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

PASSED, ERRORED, MISMATCHED = "passed", "errored", "mismatched"


def convert(value: Any) -> Any:
    """Case data as runtimes take it: TensorProto -> array, numpy scalar -> 0-d array."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, list):
        return [convert(v) for v in value]
    return value


def load_cases(pattern: str | None = None, every: int = 1) -> list[Any]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    if pattern:
        cases = [c for c in cases if re.search(pattern, c.name)]
    return cases[::every]


def data_sets(case: Any) -> list[tuple[list[Any], list[Any]]]:
    return [([convert(v) for v in ins], [convert(v) for v in outs]) for ins, outs in case.data_sets]


def compare(expected: Sequence[Any], got: Sequence[Any], case: Any) -> str | None:
    """None when ``got`` matches as the ONNX backend test runner judges it, else why not."""
    from onnx.backend.test.runner import Runner

    try:
        Runner.assert_similar_outputs(list(expected), list(got), rtol=case.rtol, atol=case.atol)
    except (AssertionError, TypeError, ValueError, IndexError) as e:
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return None


def _feed_names(model: onnx.ModelProto) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [vi.name for vi in model.graph.input if vi.name not in inits]


def run_ort(case: Any) -> tuple[str, str | None]:
    import onnxruntime as ort

    try:
        sess = ort.InferenceSession(case.model.SerializeToString(), providers=["CPUExecutionProvider"])
        names = _feed_names(case.model)
        for ins, outs in data_sets(case):
            got = sess.run(None, dict(zip(names, ins)))
            why = compare(outs, got, case)
            if why:
                return MISMATCHED, why
    except Exception as e:  # noqa: BLE001 - any failure of the runtime is an "errored" case
        return ERRORED, f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    return PASSED, None


def run_ours(case: Any) -> tuple[str, str | None, tuple[int, int]]:
    from trt_backend import onnx_backend as backend

    placed = (0, 0)
    try:
        rep = backend.prepare(case.model, "CPU")
        plan = rep.plan
        on_trt = sum(len(s.nodes) for s in plan.segments if s.backend == "tensorrt")
        placed = (on_trt, len(plan.nodes))
        for ins, outs in data_sets(case):
            got = list(rep.run(ins))
            why = compare(outs, got, case)
            if why:
                return MISMATCHED, why, placed
    except Exception as e:  # noqa: BLE001
        return ERRORED, f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}", placed
    return PASSED, None, placed


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

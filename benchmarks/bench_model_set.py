"""`trt-backend bench` over a model set: the ONNX light models plus generated transformer and
detection graphs; writes a markdown table of latencies and each baseline's ratio to ours.

    python benchmarks/bench_model_set.py [--only REGEX] [--duration-s 1] [--rounds 2] \\
        [--baselines ort-cpu,ort-cuda,ort-trt,trt-whole] [--emulate] [--out bench.md] [--json-dir DIR]

Ratios are ours / baseline of median host latency (below 1: trt-backend is faster). On a CPU-only
machine TensorRT segments run emulated through ONNX Runtime, so ``ours / ort-cpu`` measures the
stitching overhead (target: <= 1.05 for single-segment models)."""
from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.support.graphs import detection_model, transformer_model  # noqa: E402
from trt_backend.bench.candidates import BASELINES  # noqa: E402
from trt_backend.bench.loop import BenchOptions, run_bench  # noqa: E402
from trt_backend.bench.report import BenchResult  # noqa: E402
from trt_backend.bench.timing import TimingConfig  # noqa: E402
from trt_backend.session.options import SessionOptions  # noqa: E402

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
LIGHT_MODELS = ("resnet50", "squeezenet", "shufflenet", "inception_v1", "inception_v2", "densenet121",
                "bvlc_alexnet", "zfnet512", "vgg19")


def light(name: str) -> Callable[[], Any]:
    return lambda: os.path.join(LIGHT, f"light_{name}.onnx")


# name, model (path or ModelProto) factory, profiles, run shapes
CASES: list[tuple[str, Callable[[], Any], list[dict[str, Any]] | None, dict[str, tuple[int, ...]]]] = [
    *[(n, light(n), None, {}) for n in LIGHT_MODELS],
    ("transformer block d256 h8", lambda: transformer_model(256, 8),
     [{"x": ((1, 1, 256), (4, 128, 256), (4, 256, 256))}], {"x": (4, 128, 256)}),
    ("detection heads + NMS/TopK/Loop", lambda: detection_model(3, 8),
     [{"feats": ((1, 1, 8), (1, 1000, 8), (2, 2000, 8))}], {"feats": (1, 1000, 8)}),
]


_SHORT = (("not available in this onnxruntime build", "EP not in this onnxruntime build"),
          ("no CUDA device", "no CUDA device"), ("not TensorRT-supported", "not all nodes TensorRT-supported"),
          ("could not build", "TensorRT build failed"), ("no TensorRT", "no TensorRT installed"))


def short_reason(reason: str) -> str:
    """A table-cell form of an unavailability reason (the full text is listed under the table)."""
    for needle, short in _SHORT:
        if needle in reason:
            return short
    return reason if len(reason) <= 48 else reason[:45] + "..."


def _cell(result: BenchResult, name: str) -> str:
    try:
        r = result.runner(name)
    except KeyError:
        return "-"
    if not r.available or r.latency is None:
        return f"n/a: {short_reason(r.reason or '')}"
    return f"{r.latency.median:.2f} ms ({r.ours_ratio:.3f})" if r.ours_ratio is not None else f"{r.latency.median:.2f}"


def markdown(rows: Sequence[tuple[str, BenchResult | str]], baselines: Sequence[str], header: str) -> str:
    cols = ["model", "segments", "trt-backend median", *[f"{b} median (ours/{b})" for b in baselines], "stitching"]
    lines = [header, "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for name, res in rows:
        if isinstance(res, str):
            lines.append(f"| {name} | error: {res} |" + " |" * (len(cols) - 2))
            continue
        ours = res.runner("trt-backend")
        over = ours.extra.get("overhead_ms")
        med = f"{ours.latency.median:.2f} ms" if ours.latency else "-"
        share = f"{over:.3f} ms ({over / ours.latency.mean:.1%})" if over is not None and ours.latency else "-"
        lines.append(f"| {name} | {res.plan.get('summary', '')} | {med} | "
                     + " | ".join(_cell(res, b) for b in baselines) + f" | {share} |")
    reasons = {f"{r.name}: {r.reason}" for _, res in rows if not isinstance(res, str)
               for r in res.runners if not r.available}
    if reasons:
        lines += ["", "Unavailable runners, in full:", *sorted(f"- {r}" for r in reasons)]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="only cases whose name matches this regular expression")
    ap.add_argument("--warmup-ms", type=float, default=200)
    ap.add_argument("--duration-s", type=float, default=1.0)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2, help="alternating blocks per runner (default 2)")
    ap.add_argument("--baselines", default=",".join(BASELINES))
    ap.add_argument("--emulate", action="store_true", help="emulate TensorRT segments even where TensorRT runs")
    ap.add_argument("--threads", type=int, default=0, help="ONNX Runtime intra-op threads (0: default)")
    ap.add_argument("--no-build", action="store_true", help="skip TensorRT engine builds")
    ap.add_argument("--out", help="write the markdown table here (it is printed either way)")
    ap.add_argument("--json-dir", help="write each model's bench JSON into this folder")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    baselines = tuple(b.strip() for b in args.baselines.split(",") if b.strip())
    timing = TimingConfig(args.warmup_ms / 1000, args.duration_s, args.iterations, args.rounds)
    so = SessionOptions(emulate=True if args.emulate else "auto", intra_op_threads=args.threads)
    if args.json_dir:
        os.makedirs(args.json_dir, exist_ok=True)
    rows: list[tuple[str, BenchResult | str]] = []
    for name, factory, profiles, shapes in CASES:
        if args.only and not re.search(args.only, name):
            continue
        start = time.perf_counter()
        print(f"{name} ...", file=sys.stderr, flush=True)
        options = BenchOptions(shapes=shapes, profiles=profiles, baselines=baselines, timing=timing,
                               build=not args.no_build)
        try:
            result = run_bench(factory(), options, so)
        except Exception as e:  # noqa: BLE001 - one failing model must not hide the others' numbers
            rows.append((name, f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"))
            continue
        rows.append((name, result))
        print(f"{name}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
        if args.json_dir:
            slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")
            with open(os.path.join(args.json_dir, f"{slug}.json"), "w", encoding="utf-8") as f:
                f.write(result.to_json() + "\n")
    import onnxruntime

    header = (f"trt-backend bench, model set: onnxruntime {onnxruntime.__version__}, {os.cpu_count()} CPUs, "
              f"warm-up {args.warmup_ms:g} ms, >= {args.duration_s:g} s and >= {args.iterations} runs per runner in "
              f"{args.rounds} round(s). Cells: median host latency (ours / baseline, median; below 1: ours faster).")
    table = markdown(rows, baselines, header)
    print(table)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(table + "\n")
    return 0 if all(not isinstance(r, str) for _, r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

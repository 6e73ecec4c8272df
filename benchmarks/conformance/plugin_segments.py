"""Segment counts with and without plugins, on models whose Resize nodes TensorRT rejects.

    python benchmarks/conformance/plugin_segments.py [--json OUT.json]

Each model is planned with the installed TensorRT flavor's parser three ways: with plugins for
target ``tensorrt`` (full TensorRT runs the Resize plugin), for target ``tensorrt_rtx`` (no
plugin support), and with ``--no-plugins``; plus ``--plugin-ops Resize`` on a model whose
Resize TensorRT runs natively. A report, not a test: it prints PASS/FAIL lines and exits 0."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from partitioner import PartitionOptions, Plan, plan_model
from plugins import default_registry
from tests.support.resize_models import MODELS
from trt_backend.data.demo import DEMO_PATH
from trt_backend.tensorrt.oracle import ParserOracle

VARIANTS: dict[str, dict[str, Any]] = {
    "plugins, target tensorrt": {"target": "tensorrt"},
    "plugins, target tensorrt_rtx": {"target": "tensorrt_rtx"},
    "no plugins": {"target": "tensorrt", "plugins": False},
}


def describe(plan: Plan) -> dict[str, Any]:
    trt = sum(1 for s in plan.segments if s.backend == "tensorrt")
    return {"segments": len(plan.segments), "tensorrt_segments": trt,
            "onnxruntime_nodes": sum(1 for n in plan.nodes if n.verdict == "onnxruntime"),
            "plugin_nodes": sum(1 for n in plan.nodes if n.verdict.startswith("plugin:")),
            "parser_calls": plan.oracle_calls, "seconds": round(plan.seconds, 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", metavar="OUT.json")
    args = ap.parse_args(argv)
    oracle = ParserOracle()
    registry = default_registry()
    models: dict[str, Any] = {"demo.onnx": DEMO_PATH, **{k: f() for k, f in MODELS.items() if k != "native_upsample"}}
    results: dict[str, dict[str, dict[str, Any]]] = {}
    print(f"parser: {oracle.target}")
    print(f"{'model':<20} {'variant':<30} {'segments':>8} {'TRT segs':>8} {'ORT nodes':>9} {'plugin nodes':>12}")
    for name, model in models.items():
        results[name] = {}
        for variant, how in VARIANTS.items():
            opts = PartitionOptions(plugins=registry.claims() if how.get("plugins", True) else (), target=how["target"])
            start = time.perf_counter()
            row = describe(plan_model(model, oracle, opts))
            row["seconds"] = round(time.perf_counter() - start, 3)
            results[name][variant] = row
            print(f"{name:<20} {variant:<30} {row['segments']:>8} {row['tensorrt_segments']:>8} "
                  f"{row['onnxruntime_nodes']:>9} {row['plugin_nodes']:>12}")
    native = MODELS["native_upsample"]()
    for variant, ops in (("native Resize", ()), ("--plugin-ops Resize", ("Resize",))):
        row = describe(plan_model(native, oracle, PartitionOptions(plugins=registry.claims(), target="tensorrt",
                                                                   plugin_ops=ops)))
        results.setdefault("native_upsample", {})[variant] = row
        print(f"{'native_upsample':<20} {variant:<30} {row['segments']:>8} {row['tensorrt_segments']:>8} "
              f"{row['onnxruntime_nodes']:>9} {row['plugin_nodes']:>12}")
    ok = all(r["plugins, target tensorrt"]["segments"] == 1 for k, r in results.items() if k != "native_upsample")
    fewer = all(r["plugins, target tensorrt_rtx"]["segments"] > 1 for k, r in results.items() if k != "native_upsample")
    print(f"{'PASS' if ok else 'FAIL'}: with plugins (target tensorrt) every model plans as one TensorRT segment")
    print(f"{'PASS' if fewer else 'FAIL'}: without plugin support (target tensorrt_rtx) every model is cut")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"parser": oracle.target, "models": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

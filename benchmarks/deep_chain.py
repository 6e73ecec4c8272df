"""Deep graphs through the CLI, each command a fresh process (start-up included): ``inspect`` of a
6,020-node chain (target <= 2 s), and ``run``, ``build`` and ``compare`` of
``models.deep_chain(N)`` (default 60,000 nodes), whose TensorRT head's input is bounded by
walking the whole chain. Wall and CPU seconds and peak RSS per command; a command that fails
(a RecursionError included) is shown with its last error line. A report: it exits 0 either way.

    python benchmarks/deep_chain.py [--nodes 60000] [--repeat 3] [--skip-deep]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.installed import as_installed  # noqa: E402
from tests.support.chains import DEEP_CHAIN_EXCLUDE, deep_chain, long_chain  # noqa: E402

_WRAP = """
import resource, subprocess, sys, time, json
t0 = time.perf_counter()
p = subprocess.run(sys.argv[1:], capture_output=True, text=True)
dt = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": p.returncode, "seconds": dt, "cpu": ru.ru_utime + ru.ru_stime, "peak_kib": ru.ru_maxrss,
                  "err": p.stderr[-2000:]}))
"""


def measure(argv: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", _WRAP, *argv], capture_output=True, text=True, env=env, cwd=ROOT)
    return json.loads(proc.stdout)


def row(name: str, results: list[dict]) -> str:
    if any(r["rc"] != 0 for r in results):
        last = next(r for r in results if r["rc"] != 0)["err"].strip().splitlines()
        return f"{name:<34} failed (exit {results[0]['rc']}): {last[-1] if last else ''}"
    wall = statistics.median(r["seconds"] for r in results)
    cpu = statistics.median(r["cpu"] for r in results)
    peak = max(r["peak_kib"] for r in results) / 2**20
    runs = ", ".join(f"{r['seconds']:.2f}" for r in results)
    return f"{name:<34} {wall:>8.2f} {cpu:>8.2f} {peak:>9.2f}   runs {runs}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=60_000, help="nodes of the deep chain (default 60000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of the inspect step (median)")
    ap.add_argument("--skip-deep", action="store_true", help="only the 6,020-node inspect")
    args = ap.parse_args()
    as_installed()  # (bytecode compiled, and the first runs done, as a user has them)
    py = [sys.executable, "-m", "trt_backend"]
    checks = []
    print(f"{'command':<34} {'wall s':>8} {'cpu s':>8} {'peak GiB':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        chain = os.path.join(tmp, "chain_6020.onnx")
        onnx.save(long_chain(6020), chain)
        results = [measure([*py, "inspect", chain]) for _ in range(args.repeat)]
        print(row("inspect chain_6020", results))
        if all(r["rc"] == 0 for r in results):
            wall = statistics.median(r["seconds"] for r in results)
            checks.append(("6,020-node chain inspected in <= 2 s", wall <= 2.0, f"{wall:.2f} s"))
        if not args.skip_deep:
            path = os.path.join(tmp, f"deep_{args.nodes}.onnx")
            onnx.save(deep_chain(args.nodes), path)
            flags = ["--exclude-ops", ",".join(DEEP_CHAIN_EXCLUDE)]
            folder = os.path.join(tmp, "built")
            steps = [
                ("run", [*py, "run", path, "--shapes", "x:3x64", *flags]),
                ("build", [*py, "build", path, "-o", folder, "--min-shapes", "x:1x64", "--opt-shapes", "x:2x64",
                           "--max-shapes", "x:4x64", *flags]),
                ("compare (the folder)", [*py, "compare", folder]),
            ]
            total = cpu = 0.0
            ok = True
            for name, argv in steps:
                r = measure(argv)
                print(row(f"{name} deep_chain({args.nodes})", [r]))
                ok = ok and r["rc"] == 0
                total, cpu = total + r["seconds"], cpu + r["cpu"]
            checks.append((f"run, build and compare of a {args.nodes}-node chain", ok,
                           f"{total:.1f} s wall, {cpu:.1f} s CPU in all"))
    print()
    for what, good, got in checks:
        print(f"{'PASS' if good else 'FAIL'}  {what}: {got}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A model past protobuf's 2 GiB (weights in external data) through inspect, an emulated run and
an RTX ahead-of-time build, each in a fresh child process: wall time and peak RSS per step.

The model (generated once into ``--cache``, default ``~/.cache/trt-backend-large``, weights
written a chunk at a time, never held whole) is :func:`tests.support.external_mlp.write_mlp`: MatMul+Add+Gelu
blocks of ``[N, hidden] x [hidden, hidden]`` with a Det block TensorRT refuses in the middle
(three segments), ``N`` dynamic. Default: hidden 4096, 48 blocks, 3.0 GiB of fp32 weights.

Steps (a child each; peak RSS from ``getrusage(RUSAGE_CHILDREN)`` of a fresh wrapper process):
  inspect    ``python -m trt_backend inspect MODEL``
  reference  whole-model ONNX Runtime from the path, batch 4 (outputs saved for the check)
  run        ``Session(MODEL, profile, emulate=True)`` and one run at batch 4
  build      ``trt_backend.build(MODEL, DIR)`` with a 1..8 batch profile (TensorRT-RTX ahead of
             time, no GPU), ``--max-workers`` segment builds at a time, the default memory budget
  build SIZE the same with ``max_build_memory=SIZE`` (``--max-build-memory``, default 4G): segments
             cut to build within it
  folder     each build folder run emulated (its segment models through ONNX Runtime) at batch 4,
             against the whole-model reference
  by reference  with ``--by-reference``, a third build of the default budget with
             ``weights_by_reference`` (the folder refers to the data file instead of copying it),
             its folder run the same way; both folders' sizes

Targets: inspect peak RSS <= 1.25x the weight bytes; emulated session <= 1.6x; the build folder
<= 1.1x the weight bytes plus engines; the default build <= 1.6x the weights; the budgeted build
within its budget; with ``--by-reference``, that folder at most its engines plus 1% of the weight
bytes; outputs equal whole-model ONNX Runtime at 1e-5.

    python benchmarks/large_model.py [--hidden 4096] [--blocks 48] [--cache DIR] [--skip-build]
        [--build-precision fp16] [--max-build-memory 4G] [--by-reference]

``--hidden 2048`` (0.75 GiB) runs the same code paths in a quarter of the time and memory; give
``--max-build-memory`` in proportion (1G) there.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from tests.support.external_mlp import write_mlp  # noqa: E402
from trt_backend.ort.sizes import parse_size  # noqa: E402

GIB = 2**30
BATCH = 4

_RUN = f"""
import sys, numpy as np
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session
model, hidden, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
x = np.random.default_rng(7).standard_normal(({BATCH}, hidden)).astype(np.float32)
s = Session(model, [{{"x": ((1, hidden), ({BATCH}, hidden), (8, hidden))}}], SessionOptions(emulate=True))
np.save(out, s.run(None, {{"x": x}})[0])
print("executors", s.segment_executors)
"""

_REFERENCE = f"""
import sys, numpy as np, onnxruntime as ort
model, hidden, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
x = np.random.default_rng(7).standard_normal(({BATCH}, hidden)).astype(np.float32)
s = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
np.save(out, s.run(None, {{"x": x}})[0])
"""

_RUN_FOLDER = f"""
import sys, numpy as np
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session
folder, hidden, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
x = np.random.default_rng(7).standard_normal(({BATCH}, hidden)).astype(np.float32)
s = Session.load(folder, SessionOptions(emulate=True))
np.save(out, s.run(None, {{"x": x}})[0])
"""

_WRAP = """
import resource, subprocess, sys, time, json
t0 = time.perf_counter()
p = subprocess.run(sys.argv[1:], capture_output=True, text=True)
dt = time.perf_counter() - t0
print(json.dumps({"rc": p.returncode, "seconds": dt, "peak_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                  "out": p.stdout[-3000:], "err": p.stderr[-3000:]}))
"""


def measure(argv: list[str]) -> dict:
    """Run ``argv`` in a fresh wrapper; its wall time and peak RSS (the wrapper's children only)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", _WRAP, *argv], capture_output=True, text=True, env=env, cwd=ROOT)
    result = json.loads(proc.stdout)
    if result["rc"] != 0:
        raise SystemExit(f"{' '.join(argv[:4])}... failed ({result['rc']}):\n{result['err']}")
    return result


def ensure_model(cache: str, hidden: int, blocks: int) -> tuple[str, int]:
    path = os.path.join(cache, f"mlp_h{hidden}_b{blocks}.onnx")
    data = path + ".data"
    if not (os.path.exists(path) and os.path.exists(data)):
        os.makedirs(cache, exist_ok=True)
        t0 = time.perf_counter()
        write_mlp(path, hidden, blocks)
        print(f"generated {path} in {time.perf_counter() - t0:.1f} s")
    return path, os.path.getsize(data)


def folder_bytes(folder: str) -> tuple[int, int]:
    """(bytes of every file, bytes of the files with no other link: what the folder adds on disk)."""
    total = own = 0
    for name in os.listdir(folder):
        st = os.stat(os.path.join(folder, name))
        total += st.st_size
        own += st.st_size if st.st_nlink == 1 else 0
    return total, own


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--blocks", type=int, default=48)
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/trt-backend-large"))
    ap.add_argument("--max-workers", type=int, default=1, help="segment builds at a time (memory: ~2x a segment each)")
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--max-build-memory", default="4G", help="budget of the second build (default 4G)")
    ap.add_argument("--build-precision", default="fp32", help="precision of the build step (fp16: each segment's "
                    "external weights read in and converted, up to 1.75 GiB a segment)")
    ap.add_argument("--by-reference", action="store_true",
                    help="a third build with weights_by_reference: the folder refers to the weights, no copy")
    args = ap.parse_args()
    model, weights = ensure_model(args.cache, args.hidden, args.blocks)
    print(f"model {model}: {os.path.getsize(model)} bytes of protobuf, {weights / GIB:.2f} GiB of weights "
          f"({weights} bytes) in {os.path.basename(model)}.data; batch dynamic 1..8, runs at {BATCH}\n")
    py = sys.executable
    rows = []
    with tempfile.TemporaryDirectory(dir=args.cache) as tmp:
        r = measure([py, "-m", "trt_backend", "inspect", model])
        rows.append(("inspect", r))
        print(r["out"].strip().splitlines()[0])
        ref, ours = os.path.join(tmp, "ref.npy"), os.path.join(tmp, "ours.npy")
        rows.append(("reference (ORT, whole model)", measure([py, "-c", _REFERENCE, model, str(args.hidden), ref])))
        r = measure([py, "-c", _RUN, model, str(args.hidden), ours])
        rows.append(("run (emulated Session)", r))
        err = float(np.max(np.abs(np.load(ours).astype(np.float64) - np.load(ref).astype(np.float64))))
        size = ref_size = None
        built_peaks: dict[str, float] = {}
        errors = {"emulated Session": err}
        if not args.skip_build:
            h = args.hidden
            builds = [("", ""), (args.max_build_memory, "")] + ([("", "ref")] if args.by_reference else [])
            for budget, by_ref in builds:
                out = os.path.join(tmp, "built")
                label = f"build (RTX AOT, {args.build_precision}" + (f", max {budget})" if budget else
                                                                     ", by reference)" if by_ref else ")")
                r = measure([py, "-c", _BUILD, model, out, str(h), str(args.max_workers), args.build_precision, budget,
                             by_ref])
                rows.append((label, r))
                if not by_ref:
                    built_peaks[budget] = r["peak_kib"] * 1024
                manifest = json.load(open(os.path.join(out, "manifest.json")))
                print(f"{label}: " + ", ".join(
                    f"segment {s['id']} {s.get('precision')} {s['engine_bytes'] / GIB:.2f} GiB"
                    for s in manifest["segments"] if s["engine"]))
                trt_segments = sum(1 for s in manifest["segments"] if s["engine"])
                if not by_ref:
                    built_peaks[budget + ":segments"] = trt_segments
                folder_out = os.path.join(tmp, "folder.npy")
                rows.append(("  its folder run (emulated)", measure([py, "-c", _RUN_FOLDER, out, str(h), folder_out])))
                errors[label] = float(np.max(np.abs(np.load(folder_out).astype(np.float64)
                                                    - np.load(ref).astype(np.float64))))
                if by_ref:
                    ref_size = folder_bytes(out)[0]
                elif not budget:
                    size = folder_bytes(out)
                    engines = sum(s["engine_bytes"] or 0 for s in manifest["segments"])
                shutil.rmtree(out)
    print(f"\n{'step':<36} {'wall s':>8} {'peak RSS GiB':>13} {'x weights':>10}")
    for name, r in rows:
        peak = r["peak_kib"] * 1024
        print(f"{name:<36} {r['seconds']:>8.1f} {peak / GIB:>13.2f} {peak / weights:>10.2f}")
    peaks = {name: r["peak_kib"] * 1024 / weights for name, r in rows}
    checks = [("inspect peak RSS <= 1.25x weights", peaks["inspect"] <= 1.25, f"{peaks['inspect']:.2f}x"),
              ("emulated session peak RSS <= 1.6x weights", peaks["run (emulated Session)"] <= 1.6,
               f"{peaks['run (emulated Session)']:.2f}x")]
    checks += [(f"{what}: max abs error vs whole-model ONNX Runtime <= 1e-5", e <= 1e-5, f"{e:.3g}")
               for what, e in errors.items()]
    if built_peaks:
        default = built_peaks[""] / weights
        checks.append(("default build peak RSS <= 1.6x weights", default <= 1.6, f"{default:.2f}x"))
        limit = parse_size(args.max_build_memory)
        assert limit is not None, "--max-build-memory is given (the build was run with it)"
        within = built_peaks[args.max_build_memory]
        checks.append((f"build with --max-build-memory {args.max_build_memory}: peak RSS within it", within <= limit,
                       f"{within / GIB:.2f} GiB, {built_peaks[args.max_build_memory + ':segments']} TensorRT segments "
                       f"(default build: {built_peaks[':segments']})"))
    if size is not None:
        total, own = size
        folder_limit = 1.1 * weights + engines
        print(f"\nbuild folder: {total / GIB:.2f} GiB in all ({engines / GIB:.2f} GiB engines; files with another "
              f"hard link: {(total - own) / GIB:.2f} GiB); new on disk {own / GIB:.2f} GiB")
        checks.append(("build folder <= 1.1x weights + engines", total <= folder_limit,
                       f"{total / GIB:.2f} GiB vs {folder_limit / GIB:.2f} GiB"))
        if ref_size is not None:
            print(f"build folder by reference: {ref_size / GIB:.2f} GiB in all ({(ref_size - engines) / 2**20:.2f} MiB "
                  "besides the engines)")
            checks.append(("build folder by reference <= engines + 1% of the weights",
                           ref_size <= engines + 0.01 * weights,
                           f"{ref_size / GIB:.2f} GiB, engines {engines / GIB:.2f} GiB"))
    print()
    for what, ok, got in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {what}: {got}")
    return 0


_BUILD = """
import sys
from trt_backend.engines.builder import BuildOptions
from trt_backend.artifacts.write import build as build_folder_build
from trt_backend.session.options import SessionOptions
model, out, h, workers, precision, budget, ref = (sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
                                                  sys.argv[5], sys.argv[6], sys.argv[7])
build = BuildOptions(max_workers=workers, precision=precision, max_build_memory=budget or None)
m = build_folder_build(model, out, [{"x": ((1, h), (4, h), (8, h))}],
                       SessionOptions(build=build, flavor="tensorrt_rtx", weights_by_reference=ref == "ref"))
print("engines", [s["engine_bytes"] for s in m["segments"]], "build_seconds", m["build_seconds"])
"""


if __name__ == "__main__":
    raise SystemExit(main())

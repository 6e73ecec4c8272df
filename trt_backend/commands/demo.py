"""``trt-backend demo``: the main job end to end on the bundled demo model: plan, build the
engines, load the build into a session, run it and check it against ONNX Runtime."""
from __future__ import annotations

import argparse
import os

import numpy as np

from partitioner import PartitionOptions
from partitioner.report import summary
from trt_backend._files import output_problem, write_atomic, write_picture
from trt_backend.artifacts.write import build
from trt_backend.data.demo import DEMO_PATH
from trt_backend.errors import OutputError
from trt_backend.ort.threads import inference_session
from trt_backend.planning import make_plan
from trt_backend.session.feeds import random_feeds
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

PROFILE = [{"image": ((1, 3, 32, 32), (4, 3, 32, 32), (8, 3, 32, 32))}]


def register(p: argparse.ArgumentParser) -> None:
    """Arguments of `trt-backend demo` (the CLI names it and gives its one-line help)."""
    p.description = ("Plan the bundled demo model (a classifier whose Resize mode TensorRT "
                   "rejects), build its TensorRT engines, load the build into a session, run it "
                   "and compare with ONNX Runtime.")
    p.add_argument("--out", metavar="DIR",
                   help="where to write (default: trt-backend/demo in the user's cache folder, $XDG_CACHE_HOME or "
                        "~/.cache)")
    p.add_argument("--flavor", choices=("auto", "tensorrt", "tensorrt_rtx"), default="auto")
    p.set_defaults(func=handle)


def default_out() -> str:
    """Where the demo writes without --out: trt-backend/demo in the user's cache folder
    ($XDG_CACHE_HOME, else ~/.cache), never the current folder."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "trt-backend", "demo")


def handle(args: argparse.Namespace) -> int:
    out = args.out if args.out is not None else default_out()
    where = f"--out {out}" if args.out is not None else f"the demo's folder {out} (--out DIR chooses another)"
    problem = output_problem(out, folder=True, make_parents=True)  # --out itself was checked by the CLI
    if problem:
        raise OutputError(f"cannot write {where}: {problem}")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot write {where}: {e.strerror or e}") from None
    print(f"writing to {out}")
    print(f"1. plan the demo model ({DEMO_PATH})")
    plan = make_plan(DEMO_PATH, PartitionOptions(), flavor=args.flavor)
    print(summary(plan))
    write_atomic(os.path.join(out, "plan.json"), plan.to_json())
    write_picture(plan, os.path.join(out, "partition.html"))
    build_dir = os.path.join(out, "build")
    print(f"\n2. build engines for its TensorRT segments into {build_dir} (batch 1..8)")
    manifest = build(DEMO_PATH, build_dir, PROFILE, SessionOptions(flavor=args.flavor))
    for seg in manifest["segments"]:
        if seg["engine"]:
            print(f"   segment {seg['id']}: {seg['engine']} {seg['engine_bytes']} bytes in "
                  f"{seg['build_seconds']:.2f} s ({manifest['tensorrt']}, target {manifest['gpu_target']})")
    print("\n3. load the build and run a batch of 4")
    sess = Session.load(build_dir, SessionOptions(emulate="auto", flavor=args.flavor))
    for line in sess.summary():
        print("   " + line)
    feeds = random_feeds(sess.get_inputs(), {"image": (4, 3, 32, 32)}, seed=0)  # as `run` feeds it
    probs, scores, classes = sess.run(None, feeds)

    ref = inference_session(DEMO_PATH).run(None, feeds)
    diff = float(np.max(np.abs(probs - ref[0])))
    same = bool(np.array_equal(classes, ref[2]))
    print(f"   top classes per image: {classes.tolist()}")
    print(f"   against whole-model ONNX Runtime: max |probs difference| {diff:.2e}, same top classes: {same}")
    emulated = sess.segment_executors.count("emulated")
    if emulated:
        print(f"   ({emulated} TensorRT segment(s) ran emulated through ONNX Runtime: no usable GPU and TensorRT "
              "runtime here; the engines above are what a GPU machine runs)")
    print(f"\nwrote {os.path.join(out, 'plan.json')}, {os.path.join(out, 'partition.html')} and {build_dir}{os.sep}")
    return 0 if diff < 1e-4 and same else 1

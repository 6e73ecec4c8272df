"""``trt-backend demo``: the main job end to end on the bundled demo model."""
from __future__ import annotations

import argparse
import os

from partitioner import PartitionOptions
from partitioner.picture import write_picture
from partitioner.report import summary, write_atomic

from ..demo import DEMO_PATH
from ..planning import make_plan
from .inspect import export_segments


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("demo", help="plan (and run) the bundled demo model",
                       description="Plan the bundled demo model (a classifier whose Resize mode TensorRT "
                                   "rejects), write its plan, picture and segments.")
    p.add_argument("--out", default="trt-backend-demo", metavar="DIR", help="where to write (default ./trt-backend-demo)")
    p.add_argument("--flavor", choices=("auto", "tensorrt", "tensorrt_rtx"), default="auto")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print(f"demo model: {DEMO_PATH}")
    plan = make_plan(DEMO_PATH, PartitionOptions(), flavor=args.flavor)
    print(summary(plan))
    os.makedirs(args.out, exist_ok=True)
    write_atomic(os.path.join(args.out, "plan.json"), plan.to_json())
    write_picture(plan, os.path.join(args.out, "partition.html"))
    export_segments(plan, os.path.join(args.out, "segments"))
    print(f"wrote {args.out}/plan.json, {args.out}/partition.html and {len(plan.segments)} segment models "
          f"in {args.out}/segments/")
    return 0

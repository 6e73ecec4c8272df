"""``trt-backend inspect``: plan a model and show what runs where."""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile

from partitioner import OptionsError, Plan
from partitioner.report import annotate, summary
from trt_backend._files import save_model_with_data, write_atomic, write_picture
from trt_backend.commands._args import add_partition_arguments, partition_options
from trt_backend.planning import make_plan


def register(p: argparse.ArgumentParser) -> None:
    """Arguments of `trt-backend inspect` (the CLI names it and gives its one-line help)."""
    p.description = ("Plan MODEL and print its segments and the fallback census.")
    p.add_argument("model", help="ONNX model file")
    p.add_argument("--json", metavar="PLAN.json", help="write the plan as JSON")
    p.add_argument("--export-segments", metavar="DIR", help="write segment_<id>.onnx per segment into DIR")
    p.add_argument("--annotated", metavar="OUT.onnx", help="write the model with each node's segment in metadata_props")
    p.add_argument("--picture", metavar="OUT.svg|OUT.html", help="draw the segments coloured by backend")
    add_partition_arguments(p)
    p.set_defaults(func=handle)


def check_output_paths(args: argparse.Namespace) -> None:
    """Fail before planning, not after, on outputs that cannot be written."""
    for flag, path in (("--json", args.json), ("--annotated", args.annotated), ("--picture", args.picture)):
        if path:
            folder = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(folder):
                raise OptionsError(f"{flag} {path}: folder {folder} does not exist")
            if os.path.isdir(path):
                raise OptionsError(f"{flag} {path}: is a directory")
    if args.picture and not args.picture.lower().endswith((".svg", ".html", ".htm")):
        raise OptionsError(f"--picture {args.picture}: use a .svg or .html file name")
    if args.export_segments and os.path.exists(args.export_segments) and not os.path.isdir(args.export_segments):
        raise OptionsError(f"--export-segments {args.export_segments}: exists and is not a directory")


def export_segments(plan: Plan, folder: str) -> list[str]:
    """Write every segment model; into a fresh temp folder renamed into place when ``folder`` is new."""
    fresh = not os.path.exists(folder)
    target = tempfile.mkdtemp(prefix=".segments-", dir=os.path.dirname(os.path.abspath(folder))) if fresh else folder
    written = []
    weights = plan.model.base_dir if plan.model is not None else None
    try:
        for seg in plan.segments:
            path = os.path.join(target, f"segment_{seg.id}.onnx")
            save_model_with_data(plan.extract(seg.id), path, weights)
            written.append(os.path.join(folder, f"segment_{seg.id}.onnx"))
        if fresh:
            os.replace(target, folder)
    except BaseException:
        if fresh:
            shutil.rmtree(target, ignore_errors=True)
        raise
    return written


def handle(args: argparse.Namespace) -> int:
    check_output_paths(args)
    plan = make_plan(args.model, partition_options(args), flavor=args.flavor, isolate=args.isolate)
    print(summary(plan))
    if args.json:
        write_atomic(args.json, plan.to_json())
        print(f"plan written to {args.json}")
    if args.export_segments:
        files = export_segments(plan, args.export_segments)
        print(f"{len(files)} segment model(s) written to {args.export_segments}")
    if args.annotated:
        save_model_with_data(annotate(plan), args.annotated, plan.model.base_dir if plan.model else None)
        print(f"annotated model written to {args.annotated}")
    if args.picture:
        write_picture(plan, args.picture)
        print(f"picture written to {args.picture}")
    return 0

"""``trt-backend inspect``: plan a model and show what runs where."""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from typing import Any

from partitioner import OptionsError, PartitionOptions, Plan
from partitioner.partition import DEFAULT_MIN_SEGMENT_SIZE
from partitioner.picture import write_picture
from partitioner.report import annotate, summary
from plugins import default_registry
from trt_backend._files import save_model_atomic, write_atomic
from trt_backend.planning import make_plan
from trt_backend.session.session import SessionOptions


def split_list(value: str) -> tuple[str, ...]:
    items = tuple(v.strip() for v in value.split(",") if v.strip())
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return items


def positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{value}'") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {n}")
    return n


def add_partition_arguments(p: argparse.ArgumentParser) -> None:
    """Options every planning command shares."""
    p.add_argument("--exclude-ops", type=split_list, default=(), metavar="A,B",
                   help="op types that always run in ONNX Runtime")
    p.add_argument("--exclude-nodes", type=split_list, default=(), metavar="N1,N2",
                   help="node names that always run in ONNX Runtime")
    p.add_argument("--min-segment-size", type=positive_int, default=DEFAULT_MIN_SEGMENT_SIZE, metavar="N",
                   help=f"smallest TensorRT segment, in nodes (default {DEFAULT_MIN_SEGMENT_SIZE}; "
                        "a segment holding a Conv/MatMul/Gemm-like op is always kept)")
    p.add_argument("--flavor", choices=("auto", "tensorrt", "tensorrt_rtx"), default="auto",
                   help="TensorRT whose parser decides capability (auto: tensorrt, else tensorrt_rtx)")
    p.add_argument("--isolate", action="store_true",
                   help="run the TensorRT parser in a child process (survives parser crashes)")
    p.add_argument("--target", choices=("tensorrt", "tensorrt_rtx"), default=None,
                   help="runtime the plan is for (default: the installed flavor); plugins need full TensorRT")
    p.add_argument("--no-plugins", action="store_true",
                   help="use no plugins: what TensorRT rejects goes to ONNX Runtime")
    p.add_argument("--plugin-ops", type=split_list, default=(), metavar="A,B",
                   help="op types given to their plugin even where TensorRT has a native layer (comparisons)")


def add_cpu_session_arguments(p: argparse.ArgumentParser) -> None:
    """How the ONNX Runtime sessions of the segments share the CPU (run, bench)."""
    p.add_argument("--thread-pool", choices=("session", "global"), default="session",
                   help="ONNX Runtime intra-op pools: one per segment session (default, ONNX Runtime's own), or "
                        "one global pool they all share (fewer thread wake-ups between segments on CPU)")
    p.add_argument("--share-arena", action="store_true",
                   help="segment sessions allocate from one CPU arena: what one frees, the next reuses")


def cpu_session_options(args: argparse.Namespace) -> dict[str, Any]:
    """The SessionOptions fields of :func:`add_cpu_session_arguments`."""
    return {"thread_pool": args.thread_pool, "share_arena": args.share_arena}


def partition_options(args: argparse.Namespace) -> PartitionOptions:

    registry = None if args.no_plugins else default_registry()
    if registry is not None and args.plugin_ops:
        registry.select(args.plugin_ops)  # an unknown op type fails here, with the ones covered
    return PartitionOptions(exclude_ops=tuple(args.exclude_ops), exclude_nodes=tuple(args.exclude_nodes),
                            min_segment_size=args.min_segment_size,
                            plugins=registry.claims() if registry is not None else (),
                            plugin_ops=tuple(args.plugin_ops), target=args.target)


def session_options(args: argparse.Namespace, **extra: Any) -> Any:
    """SessionOptions from the shared planning flags (plus ``extra`` fields)."""

    po = partition_options(args)
    return SessionOptions(flavor=args.flavor, exclude_ops=po.exclude_ops, exclude_nodes=po.exclude_nodes,
                          min_segment_size=po.min_segment_size, plugins=po.plugins, plugin_ops=po.plugin_ops,
                          target=po.target, isolate_parser=args.isolate, **extra)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("inspect", help="plan a model: which nodes run in TensorRT, which in ONNX Runtime",
                       description="Plan MODEL and print its segments and the fallback census.")
    p.add_argument("model", help="ONNX model file")
    p.add_argument("--json", metavar="PLAN.json", help="write the plan as JSON")
    p.add_argument("--export-segments", metavar="DIR", help="write segment_<id>.onnx per segment into DIR")
    p.add_argument("--annotated", metavar="OUT.onnx", help="write the model with each node's segment in metadata_props")
    p.add_argument("--picture", metavar="OUT.svg|OUT.html", help="draw the segments coloured by backend")
    add_partition_arguments(p)
    p.set_defaults(func=run)


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
    try:
        for seg in plan.segments:
            path = os.path.join(target, f"segment_{seg.id}.onnx")
            save_model_atomic(plan.extract(seg.id), path)
            written.append(os.path.join(folder, f"segment_{seg.id}.onnx"))
        if fresh:
            os.replace(target, folder)
    except BaseException:
        if fresh:
            shutil.rmtree(target, ignore_errors=True)
        raise
    return written


def run(args: argparse.Namespace) -> int:
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

        save_model_atomic(annotate(plan), args.annotated)
        print(f"annotated model written to {args.annotated}")
    if args.picture:
        write_picture(plan, args.picture)
        print(f"picture written to {args.picture}")
    return 0

"""``trt-backend build``: plan, derive profiles, build every TensorRT segment, write a folder
that ``trt_backend.load`` (or ``Session.load``) runs without building."""
from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from partitioner import OptionsError
from trt_backend.artifacts.write import build
from trt_backend.commands._args import (
    add_build_memory_argument,
    add_device_argument,
    add_memory_argument,
    add_partition_arguments,
    add_precision_arguments,
    add_shape_arguments,
    add_sign_key_argument,
    cli_profiles,
    max_memory,
    session_options,
)
from trt_backend.commands._precision import (
    add_auto_arguments,
    build_fields,
    options_with,
)
from trt_backend.engines.report import BuildEvent
from trt_backend.ort.values import memory_limit


def register(p: argparse.ArgumentParser) -> None:
    """Arguments of `trt-backend build` (the CLI names it and gives its one-line help)."""
    p.description = ("Plan MODEL, derive every TensorRT segment's profiles, build its engines "
                   "(TensorRT-RTX builds ahead of time on a machine without a GPU) and write "
                   "DIR/manifest.json, the segment models and the engines.")
    p.add_argument("model", help="ONNX model file")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="folder to write (replaced atomically)")
    add_shape_arguments(p, "build for")
    add_precision_arguments(p)
    add_auto_arguments(p)
    p.add_argument("--cache-dir", metavar="DIR", help="engine and build cache: the same model file built with the same options is a copy of the "
                        "earlier folder (DIR/builds); otherwise unchanged segments are not rebuilt")
    p.add_argument("--workspace-mb", type=int, default=None, metavar="MB", help="builder workspace limit")
    p.add_argument("--compute-capabilities", default=None, metavar="SM80,SM86",
                   help="TensorRT-RTX: GPUs to build for ahead of time (default: the builder's choice)")
    add_device_argument(p)
    add_memory_argument(p)
    add_build_memory_argument(p)
    add_sign_key_argument(p, signs=True)
    add_partition_arguments(p)
    p.set_defaults(func=handle)


def _progress(e: BuildEvent) -> None:
    """One line per finished segment on stderr: builds of big models take minutes."""
    print(f"  [{e.done}/{e.total}] segment {e.segment} {e.status} in {e.seconds:.2f} s", file=sys.stderr, flush=True)


def handle(args: argparse.Namespace) -> int:
    with memory_limit(max_memory(args)):  # every tensor this command allocates, held to --max-memory
        return _handle(args)


def _handle(args: argparse.Namespace) -> int:
    profiles = cli_profiles(args.min_shapes, args.opt_shapes, args.max_shapes, args.shapes)
    so = session_options(args)
    kw: dict[str, Any] = build_fields(args, args.model, profiles or None, so)
    if args.workspace_mb is not None:
        if args.workspace_mb <= 0:
            raise OptionsError(f"--workspace-mb must be positive, got {args.workspace_mb}")
        kw["workspace_bytes"] = args.workspace_mb << 20
    if args.compute_capabilities:
        kw["compute_capabilities"] = tuple(c.strip() for c in args.compute_capabilities.split(",") if c.strip())
    options = dataclasses.replace(options_with(so, kw), cache_dir=args.cache_dir)
    manifest = build(args.model, args.output, profiles or None, options, progress=_progress)
    segs = manifest["segments"]
    engines = [s for s in segs if s["engine"]]
    cached = " (a copy of an earlier build: build cache hit)" if manifest.get("build_cache", {}).get("hit") else ""
    print(f"model {args.model} | {manifest['tensorrt']} | target {manifest['gpu_target']} | {len(segs)} segment(s), "
          f"{len(engines)} engine(s) | {manifest['build_seconds']:.2f} s{cached}")
    for s in segs:
        what = (f"engine {s['engine']} {s['engine_bytes']} bytes, built in {s['build_seconds']:.2f} s"
                if s["engine"] else "runs in ONNX Runtime")
        precision = f" {s['precision']}" if s.get("precision") else ""
        print(f"  segment {s['id']}: {s['backend']:<11}{precision} {s['model']}  {what}")
    for d in manifest["demoted"]:
        print(f"  demoted node {d['node']} '{d['name']}' ({d['op_type']}): {d['reason']}")
    signed = ", signed with HMAC-SHA256" if "signature" in manifest else ""
    print(f"wrote {args.output}/manifest.json (digest {manifest['digest'][:19]}...{signed})")
    return 0

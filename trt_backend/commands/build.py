"""``trt-backend build``: plan, derive profiles, build every TensorRT segment, write a folder
that ``trt_backend.load`` (or ``Session.load``) runs without building."""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from trt_backend._files import write_atomic
from trt_backend.artifacts.write import build
from trt_backend.commands._args import (
    add_build_memory_argument,
    add_builder_arguments,
    add_device_argument,
    add_memory_argument,
    add_partition_arguments,
    add_precision_arguments,
    add_shape_arguments,
    add_sign_key_argument,
    builder_fields,
    max_memory,
    sample_profiles,
    read_samples,
    session_options,
)
from trt_backend.commands._shapes import cli_profiles
from trt_backend.commands._build_hit import lookup_index, print_build, remember_in_index
from trt_backend.commands._precision import (
    add_auto_arguments,
    build_fields,
    options_with,
)
from trt_backend.engines.report import group_demotions
from partitioner.errors import OptionsError
from trt_backend._lazy import lazy_module
from trt_backend.errors import TrtBackendError
from trt_backend.ort.values import memory_limit

log = logging.getLogger(__name__)
# Loaded for the range check of a reduced build with real data only.
_calibration = lazy_module("trt_backend.engines.calibration")
_read = lazy_module("trt_backend.artifacts.read")
_overflow = lazy_module("trt_backend.accuracy.overflow")
_session = lazy_module("trt_backend.session.session")
_options = lazy_module("trt_backend.session.options")


def register(p: argparse.ArgumentParser) -> None:
    """Arguments of `trt-backend build` (the CLI names it and gives its one-line help)."""
    p.description = ("Plan MODEL, derive every TensorRT segment's profiles, build its engines "
                   "(TensorRT-RTX builds ahead of time on a machine without a GPU) and write "
                   "DIR/manifest.json, the segment models and the engines.")
    p.add_argument("model", help="ONNX model file")
    p.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="folder to write (replaced atomically; a second build into it meanwhile is refused)")
    p.add_argument("--report", metavar="FILE.json", default=None,
                   help="write what was built as JSON: per segment precision, seconds, engine bytes; demotions "
                        "with their reasons")
    add_shape_arguments(p, "build for")
    add_precision_arguments(p)
    add_auto_arguments(p)
    p.add_argument("--inputs", metavar="FILE.npz|DIR",
                   help="real inputs: --precision auto validates on them (default: the calibration data's first "
                        "batches, else seeded random data); without shapes, one profile spans their shapes")
    p.add_argument("--cache-dir", metavar="DIR",
                   help="engine and build cache: the same model file built with the same options is a copy of the "
                        "earlier folder (DIR/builds); otherwise unchanged segments are not rebuilt")
    add_builder_arguments(p)
    add_device_argument(p)
    add_memory_argument(p)
    add_build_memory_argument(p)
    add_sign_key_argument(p, signs=True)
    p.add_argument("--weights-by-reference", action="store_true",
                   help="refer to the model's weights where they are (its data files, and weights inside the .onnx "
                        "by their offsets) instead of copying them into DIR; DIR then loads while they are unchanged")
    add_partition_arguments(p)
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    with memory_limit(max_memory(args)):  # every tensor this command allocates, held to --max-memory
        return _handle(args)


def _manifest_stamp(folder: str) -> tuple[int, int, int] | None:
    """Which manifest ``folder`` holds now (inode, size, time), None where it holds none."""
    try:
        st = os.stat(os.path.join(folder, "manifest.json"))
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _handle(args: argparse.Namespace) -> int:
    before = _manifest_stamp(args.output)
    try:
        return _build(args)
    except KeyboardInterrupt as e:  # (a Ctrl-C, or SIGTERM, which the CLI raises as one)
        now = _manifest_stamp(args.output)  # another manifest: this build's folder, committed whole by one rename
        if now is not None and now != before:
            raise type(e)(f"{str(e) or 'interrupted'} after {args.output} was written whole (its manifest is "
                          f"sealed; trt-backend inspect {args.output} shows it)") from None
        raise


def _build(args: argparse.Namespace) -> int:
    if args.shapes and (args.min_shapes or args.opt_shapes or args.max_shapes):
        raise OptionsError("--shapes builds one fixed profile; --min/--opt/--max-shapes build ranges: give one or "
                           "the other (a build keeps no shape to run at)")
    profiles = cli_profiles(args.min_shapes, args.opt_shapes, args.max_shapes, args.shapes)
    so = session_options(args)
    builder = builder_fields(args)  # Checked before a precision search, which can take minutes.
    feeds = read_samples(args.inputs, args.model) if args.inputs else None
    if not profiles:  # Real samples (and calibration data) and no profile: one spanning their shapes, as run,
        profiles = sample_profiles(feeds or [], args)  # compare and bench make.
    kw: dict[str, Any] = {**build_fields(args, args.model, profiles or None, so, feeds), **builder}
    options = dataclasses.replace(options_with(so, kw), cache_dir=args.cache_dir)
    manifest = build(args.model, args.output, profiles or None, options, calibration_feeds=feeds or ())
    if args.cache_dir and getattr(args, "build_line", None):  # The next same command finds it before loading.
        index = args.build_index or lookup_index(args.build_line, read=True)[1]
        if index is not None:
            remember_in_index(args.cache_dir, index, manifest)
    print_build(args.model, args.output, manifest, bool(args.verbose))
    _check_range(args, manifest, feeds)
    if args.report:
        write_atomic(args.report, json.dumps(build_report(manifest, args.output), indent=1) + "\n")
        print(f"wrote {args.report}")
    return 0


def _check_range(args: argparse.Namespace, manifest: Mapping[str, Any], feeds: list[dict[str, Any]] | None) -> None:
    """Where the folder's segments compute in fp16, bf16 or int8 (whose remainder is fp16) and
    real data is at hand (the first --inputs sample, else the first of the calibration data), a
    warning for each segment whose activations leave the reduced type's range on it
    (:func:`trt_backend.accuracy.overflow.range_overflows`, as ``run`` and ``compare`` warn): an
    fp16 cast after a sum of squares that reaches 1.7e5 turned every answer of a classifier into
    the same class, and the build said nothing. Best effort: a sample the folder's profiles do
    not take is no check (``compare DIR --inputs`` measures the folder on any)."""
    if not any(s.get("precision") in ("fp16", "bf16", "int8") for s in manifest.get("segments", ())):
        return
    sample, where = (feeds[0], f"--inputs {args.inputs}") if feeds else _calibration_sample(args, manifest)
    if sample is None:
        return
    try:
        with _session.Session.load(args.output, _options.SessionOptions(emulate=True)) as sess:
            overflows = _overflow.range_overflows(sess, sample)
    except (TrtBackendError, OSError, ValueError) as e:
        log.debug("no range check of %s on %s: %s", args.output, where, e)
        return
    for overflow in overflows:
        log.warning("on %s: %s", where, overflow.message())


def _calibration_sample(args: argparse.Namespace, manifest: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The first batch of the calibration data's first file at the batch of the folder's first
    profile's opt shapes (a file's leading dim counts the samples it stacks, as calibration
    re-batches them), and where it came from; None without calibration files."""
    source = getattr(args, "calibration_data", None)
    if not source or source == "random":
        return None, ""
    profiles = _read.recorded_profiles(manifest)
    opt = {n: tp.opt for n, tp in profiles[0].items()} if profiles else {}
    try:
        files = _calibration.calibration_files(str(source))
        with np.load(files[0]) as data:
            return {name: data[name][:opt[name][0] if opt.get(name) else 1] if data[name].ndim else data[name]
                    for name in data.files}, files[0]
    except (OSError, ValueError, TrtBackendError) as e:
        log.debug("no calibration sample for a range check: %s", e)
        return None, ""


def build_report(manifest: Mapping[str, Any], folder: str) -> dict[str, Any]:
    """What a build made, for ``--report``: per segment its backend, node count, precision,
    build seconds and engine bytes (and nodes kept fp32), and the demotions grouped by segment
    with their reasons."""
    planned = {int(s["id"]): s for s in manifest["plan"]["segments"]}
    segments = []
    for s in manifest["segments"]:
        seg = planned.get(int(s["id"]), {})
        entry: dict[str, Any] = {"id": s["id"], "backend": s["backend"], "nodes": len(seg.get("nodes", ())),
                                 "model": s["model"]}
        if s.get("engine"):
            entry.update(precision=s.get("precision"), seconds=s.get("build_seconds"), engine=s["engine"],
                         engine_bytes=s.get("engine_bytes"), engine_sha256=s.get("engine_sha256"),
                         pinned=list(s.get("pinned") or ()))
        segments.append(entry)
    demoted = [{"round": g.round, "segment": g.segment, "reason": g.reason,
                "nodes": [{"node": d.get("node"), "name": d.get("name"), "op_type": d.get("op_type")} for d in g.nodes]}
               for g in group_demotions(manifest.get("demoted") or ())]
    return {"folder": folder, "model": manifest.get("model"), "tensorrt": manifest.get("tensorrt"),
            "gpu_target": manifest.get("gpu_target"), "seconds": manifest.get("build_seconds"),
            "build_cache_hit": bool(manifest.get("build_cache", {}).get("hit")),
            "precision": manifest.get("build", {}).get("summary"), "build_options": manifest.get("build_options"),
            "manifest_digest": manifest.get("digest"), "segments": segments, "demoted": demoted}

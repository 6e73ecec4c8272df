"""``trt-backend compare``: outputs of a model run by trt-backend against ONNX Runtime on the whole
model (Polygraphy's Comparator), per-output tolerances, and the segment a divergence starts in.

Exit status: 0 every output passed; 1 a mismatch (the report says which outputs, the JSON is
written with ``"passed": false``); bad input (unknown output in --tolerance, malformed numbers,
a model the reference cannot run) also exits 1 through the CLI's error path: one line
``trt-backend: error: ...`` on stderr, no report and no JSON written."""
from __future__ import annotations

import argparse
import os

from partitioner import OptionsError
from trt_backend._files import write_atomic
from trt_backend.accuracy.compare import compare
from trt_backend.accuracy.options import DEFAULT_TOLERANCE, ERROR_STATS, CompareOptions
from trt_backend.commands._args import (
    add_build_memory_argument,
    add_data_arguments,
    add_device_argument,
    add_memory_argument,
    add_partition_arguments,
    add_precision_arguments,
    add_shape_arguments,
    add_sign_key_argument,
    is_folder_arg,
    max_memory,
    sample_profiles,
    check_model_samples,
    read_samples,
    refuse_build_flags,
    session_options,
    random_ranges,
)
from trt_backend.commands._shapes import cli_profiles, parse_shapes
from trt_backend.commands._precision import (
    add_auto_arguments,
    build_fields,
    options_with,
)
from trt_backend.ort.values import memory_limit
from trt_backend.session.feeds import read_run


def register(p: argparse.ArgumentParser) -> None:
    """Arguments of `trt-backend compare` (the CLI names it and gives its one-line help)."""
    p.description = ("Run MODEL through trt-backend (TensorRT segments, emulated without a GPU, and "
                   "ONNX Runtime segments) and through ONNX Runtime alone on seeded random inputs at "
                   "the profiles' opt shapes, compare every output with Polygraphy, and optionally "
                   "name the segment a divergence starts in. Exit 0: every output (and task check) passes; "
                   "1: the outputs differ, or nothing could be compared; 2: the tool failed (one "
                   "'trt-backend: error:' line, no JSON).")
    p.add_argument("model", help="ONNX model file, or a folder written by trt-backend build")
    add_shape_arguments(p, "compare at")
    p.add_argument("--all-profile-shapes", action="store_true",
                   help="compare at the min, opt and max shapes of every profile (default: opt shapes)")
    # (None: not given; a folder built with --precision auto is then judged by the rule it was searched with)
    p.add_argument("--atol", default=None, metavar="A",
                   help=f"absolute tolerance (default {DEFAULT_TOLERANCE:g}, or an auto folder's searched rule)")
    p.add_argument("--rtol", default=None, metavar="R",
                   help=f"relative tolerance (default {DEFAULT_TOLERANCE:g}, or an auto folder's searched rule)")
    p.add_argument("--tolerance", action="append", default=[], metavar="OUT:ATOL,RTOL",
                   help="tolerances of one output (repeatable), e.g. --tolerance logits:1e-2,1e-3")
    p.add_argument("--error-stat", default="elemwise", metavar="|".join(ERROR_STATS),
                   help="error statistic held to the tolerance (default elemwise: every element within atol or rtol)")
    p.add_argument("--error-quantile", default="0.99", metavar="Q", help="quantile for --error-stat quantile")
    p.add_argument("--atol-of-range", default=None, metavar="F",
                   help="each output's atol at least F x the largest |value| the reference gave it (e.g. 1e-3 "
                        "for box coordinates in pixels); the rtol stays")
    p.add_argument("--check", action="append", default=[], metavar="KIND[:OUTPUTS][@MIN]",
                   help="a task check beside the numbers (repeatable): top1[:OUT], argmax-sequence[:OUT] or "
                        "boxes:BOXES,SCORES[,CLASSES][;score=0.3;iou=0.5]; @MIN the agreement needed (default 1)")
    add_data_arguments(p, saves=True)
    p.add_argument("--iterations", default="1", metavar="N", help="inputs per shape point (default 1)")
    p.add_argument("--seed", default="0", metavar="S", help="seed of the random inputs (default 0)")
    add_precision_arguments(p, "TensorRT segments (emulated through ONNX Runtime without a GPU)")
    add_auto_arguments(p, tolerances=False)
    p.add_argument("--emulate", action="store_true",
                   help="run TensorRT segments through ONNX Runtime even where TensorRT could run them")
    p.add_argument("--localize", action="store_true",
                   help="on a mismatch, name the first diverging segment (its nodes, backend, own error)")
    p.add_argument("--localize-always", action="store_true",
                   help="localise even when every output passes (per-segment error table)")
    p.add_argument("--json", metavar="OUT.json", help="write the report as JSON")
    add_device_argument(p)
    add_memory_argument(p)
    add_build_memory_argument(p)
    add_sign_key_argument(p)
    add_partition_arguments(p)
    p.set_defaults(func=handle, error_exit=2)


def _check_out_path(path: str | None, flag: str) -> None:
    if path is None:
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise OptionsError(f"cannot write {flag} {path}: no folder {directory}")


def handle(args: argparse.Namespace) -> int:
    with memory_limit(max_memory(args)):  # every tensor this command allocates, held to --max-memory
        return _handle(args)


def _handle(args: argparse.Namespace) -> int:
    given = any(v is not None for v in (args.atol, args.rtol, args.atol_of_range)) or bool(args.tolerance)
    args.atol = str(DEFAULT_TOLERANCE) if args.atol is None else args.atol
    args.rtol = str(DEFAULT_TOLERANCE) if args.rtol is None else args.rtol
    if is_folder_arg(args):  # First: a flag that would change what was built is the error to report.
        refuse_build_flags(args, args.model)
    profiles = cli_profiles(args.min_shapes, args.opt_shapes, args.max_shapes, args.shapes)
    options = CompareOptions(atol=args.atol, rtol=args.rtol, tolerances=tuple(args.tolerance),
                             error_stat=args.error_stat, error_quantile=args.error_quantile,
                             iterations=args.iterations, seed=args.seed,
                             shapes=parse_shapes(args.shapes) if args.shapes else None,
                             all_profile_shapes=args.all_profile_shapes,
                             localize="always" if args.localize_always else "mismatch" if args.localize else "off",
                             atol_of_range=args.atol_of_range, checks=tuple(args.check), folder_rule=not given,
                             **random_ranges(args))
    feeds, reference = None, None
    if args.load_outputs:
        if args.inputs:
            raise OptionsError("--load-outputs brings the inputs its outputs were made from; give it without --inputs")
        feeds, reference = read_run(args.load_outputs)
        check_model_samples(args.model, feeds, f"--load-outputs {args.load_outputs}")
    elif args.inputs:
        feeds = read_samples(args.inputs, args.model, shapes=args.shapes)
    for path, flag in ((args.json, "--json"), (args.save_outputs, "--save-outputs")):
        _check_out_path(path, flag)
    so = session_options(args, emulate=True if args.emulate else "auto", calibration_seed=options.seed)
    if is_folder_arg(args):  # Its own profiles: --shapes picks the shape to compare at within them.
        profiles = []
    else:
        if not profiles:  # Real samples (and calibration data) and no profile: one spanning their shapes.
            profiles = sample_profiles(feeds or [], args)
        so = options_with(so, build_fields(args, args.model, profiles or None, so, feeds))
    report = compare(args.model, options, profiles=profiles or None, session_options=so, feeds=feeds,
                     reference_outputs=reference, save_outputs=args.save_outputs)
    executors = report.executors
    print(f"model {args.model} | {len(executors)} segment(s): "
          + ", ".join(f"{e} x{executors.count(e)}" for e in dict.fromkeys(executors))
          + " | reference: "
            f"{'outputs saved in ' + args.load_outputs if args.load_outputs else 'ONNX Runtime, whole model'}"
          + f" | inputs{' from ' + (args.inputs or args.load_outputs) if feeds is not None else ''}: "
          + "; ".join(", ".join(f"{n}:{'x'.join(map(str, s)) or '[]'}" for n, s in p.items()) for p in report.points))
    for line in report.lines():
        print(line)
    if args.json:
        write_atomic(args.json, report.to_json() + "\n")
        print(f"wrote {args.json}")
    return 0 if report.passed else 1

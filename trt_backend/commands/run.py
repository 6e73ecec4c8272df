"""``trt-backend run``: run a model through the stitched session once and show what came out and
which executor ran each segment."""
from __future__ import annotations

import argparse
import io
import logging
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from trt_backend._files import write_atomic
from trt_backend._lazy import lazy_module
from trt_backend.artifacts.read import is_build_folder
from trt_backend.commands._args import (
    sample_profiles,
    read_samples,
    add_build_memory_argument,
    add_cpu_session_arguments,
    add_device_argument,
    add_memory_argument,
    add_partition_arguments,
    add_precision_arguments,
    add_range_arguments,
    add_shape_arguments,
    add_sign_key_argument,
    is_folder_arg,
    max_memory,
    ort_options,
    random_ranges,
    refuse_build_flags,
    session_options,
)
from trt_backend.commands._shapes import cli_profiles, parse_shapes
from trt_backend.commands._precision import (
    add_auto_arguments,
    build_fields,
    options_with,
)
from trt_backend.errors import FeedError
from trt_backend.ort.threads import thread_pool_mode
from trt_backend.ort.values import memory_limit
from trt_backend.session.feeds import random_feeds, storable
from trt_backend.session.session import Session

log = logging.getLogger(__name__)
_overflow = lazy_module("trt_backend.accuracy.overflow")


def stats_line(value: Any) -> str:
    """Shape, dtype and summary numbers of an output (for reports)."""
    if isinstance(value, list):
        kinds = {"map" if isinstance(v, dict) else "tensor" for v in value}
        return f"sequence of {len(value)} {kinds.pop() if len(kinds) == 1 else 'value'}(s)"
    if isinstance(value, dict):
        return f"map of {len(value)} entr{'y' if len(value) == 1 else 'ies'}"
    if value is None:
        return "empty optional"
    arr = np.asarray(value)
    text = f"shape {tuple(arr.shape)} {arr.dtype}"
    if arr.size and arr.dtype.kind in "biuf":
        a = arr.astype(np.float64)
        text += f"  min {a.min():.6g} max {a.max():.6g} mean {a.mean():.6g}"
    elif arr.size and all(isinstance(x, str) for x in arr.flat):
        first = list(dict.fromkeys(arr.flat))
        text += f"  strings, {len(first)} distinct: " + ", ".join(repr(x[:20]) for x in first[:4]) + \
            (", ..." if len(first) > 4 else "")
    return text


TENSORS_WIDTH = 60  # characters of boundary tensor names shown per side of a segment


def tensor_list(names: Sequence[str], verbose: bool | int = False, width: int = TENSORS_WIDTH) -> tuple[str, bool]:
    """``names`` joined, or, when longer than ``width`` (and not ``verbose``), the first few and
    how many more; and whether it was cut."""
    text = ", ".join(names)
    if verbose or len(text) <= width:
        return text, False
    shown: list[str] = []
    for name in names:
        if shown and len(", ".join(shown + [name])) > width - 24:
            break
        shown.append(name)
    return f"{', '.join(shown)}, … {len(names) - len(shown)} more ({len(names)} tensors)", True


def register(p: argparse.ArgumentParser) -> None:
    """Arguments of `trt-backend run` (the CLI names it and gives its one-line help)."""
    p.description = ("Plan MODEL, derive every TensorRT segment's profiles, run it once on the "
                   "given (or seeded random) inputs, and print each output's shape, dtype and "
                   "stats and which executor ran each segment.")
    p.add_argument("model", help="ONNX model file, or a folder written by trt-backend build")
    add_shape_arguments(p, "run with")
    p.add_argument("--inputs", metavar="IN.npz", help="inputs by name (default: seeded random data)")
    p.add_argument("--outputs", metavar="OUT.npz", help="write the outputs here, by name")
    p.add_argument("--emulate", action="store_true",
                   help="run TensorRT segments through ONNX Runtime even where TensorRT could run them")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    add_range_arguments(p)
    add_precision_arguments(p, "TensorRT segments (built, or emulated through ONNX Runtime without a GPU)")
    add_auto_arguments(p)
    add_cpu_session_arguments(p)
    p.add_argument("--plan-json", metavar="PLAN.json", help="write the plan with executors and profiles as JSON")
    p.add_argument("--saved-plan", metavar="PLAN.json", help="reuse the profiles of a plan JSON written earlier")
    add_device_argument(p)
    add_memory_argument(p)
    add_build_memory_argument(p)
    add_sign_key_argument(p)
    add_partition_arguments(p)
    p.set_defaults(func=handle)


def _run_shapes(args: argparse.Namespace, sess: Session) -> dict[str, tuple[int, ...]]:
    if args.shapes:
        return dict(parse_shapes(args.shapes))
    if sess.input_profiles:
        return {n: tp.opt for n, tp in sess.input_profiles[0].items()}
    return {}


def handle(args: argparse.Namespace) -> int:
    with memory_limit(max_memory(args)):  # every tensor this command allocates, held to --max-memory
        return _handle(args)


def _handle(args: argparse.Namespace) -> int:
    if is_folder_arg(args):  # First: a flag that would change what was built is the error to report.
        refuse_build_flags(args, args.model)
    profiles = cli_profiles(args.min_shapes, args.opt_shapes, args.max_shapes, args.shapes)
    ranges = random_ranges(args)
    given: dict[str, Any] | None = None
    if args.inputs:
        inputs = read_samples(args.inputs, args.model, shapes=args.shapes)
        if len(inputs) != 1:
            raise FeedError(f"--inputs {args.inputs}: holds {len(inputs)} input sets; run takes one (compare and "
                            "bench take several)")
        given = inputs[0]
    if not profiles and not is_build_folder(args.model):  # Real samples (and calibration data), no profile: theirs.
        profiles = sample_profiles([given] if given is not None else [], args)
    options = session_options(args, emulate=True if args.emulate else "auto", calibration_seed=args.seed,
                              ort=ort_options(args))
    given_model = None if is_build_folder(args.model) else profiles or None
    options = options_with(options, build_fields(args, args.model, given_model, options)) \
        if args.precision != "fp32" or args.calibration_data else options
    start = time.perf_counter()
    # A build folder brings its profiles: --shapes then only shape the random inputs.
    # (real samples derive the TensorRT segments' profiles: random data may be values the model refuses)
    sess = Session(args.model, given_model, options, plan=args.saved_plan,
                   calibration_feeds=[given] if given is not None and given_model is not None else ())
    made = time.perf_counter() - start
    if given is not None:
        try:  # (before anything is printed: a sample outside the profiles is this command's error)
            sess.check_feeds(given)
        except FeedError as e:
            raise FeedError(f"--inputs {args.inputs}: {e}") from None
        feeds = given
        source = args.inputs
    else:
        feeds = random_feeds(sess.get_inputs(), _run_shapes(args, sess), args.seed, **ranges)
        source = f"random, seed {args.seed}"
    plan = sess.plan
    print(f"model {args.model} | TensorRT target {plan.tensorrt or 'none'} | {len(plan.nodes)} nodes | "
          f"{len(plan.segments)} segment(s) | session made in {made:.3f} s")
    cut = False
    for seg, executor in zip(plan.segments, sess.segment_executors):
        ins, cut_in = tensor_list(seg.inputs, args.verbose)
        outs, cut_out = tensor_list(seg.outputs, args.verbose)
        cut = cut or cut_in or cut_out
        print(f"  segment {seg.id}: {seg.backend:<11} executor {executor:<11} {len(seg.nodes):>5} node(s)  "
              f"{ins} -> {outs}")
    if cut:
        print("  (boundary tensors cut short; -v lists them all)")
    if sess.emulated_precisions:
        print("  emulated in: " + ", ".join(f"segment {k} {p}" for k, p in sess.emulated_precisions.items()))
    if sess.planned_only and options.emulate is True:  # (with emulate "auto" the session's warning said so)
        print(f"  TensorRT segments emulated as planned ({sess.planned_why()})")
    start = time.perf_counter()
    outputs = sess.run(None, feeds)
    took = time.perf_counter() - start
    if _overflow.reduced_segments(sess):  # activations the reduced precision cannot hold: said, not left to guess
        for overflow in _overflow.range_overflows(sess, feeds):
            log.warning("%s", overflow.message())
    print(f"inputs ({source}):")
    for name, value in feeds.items():
        print(f"  {name}: {stats_line(value)}")
    print(f"outputs (ran in {took * 1000:.2f} ms):")
    names = [a.name for a in sess.get_outputs()]
    for name, value in zip(names, outputs):
        print(f"  {name}: {stats_line(value)}")
    executors = sess.segment_executors
    print("executors: " + ", ".join(f"{e} x{executors.count(e)}" for e in dict.fromkeys(executors)))
    if "onnxruntime" in executors or "emulated" in executors:
        pools = {"global": "one global thread pool", "session": "a thread pool each"}[thread_pool_mode()]
        arenas = "one shared arena" if options.ort.share_arena else "an arena each"
        print(f"ONNX Runtime CPU sessions: {pools}, {arenas}")
    if args.outputs:
        _save_outputs(args.outputs, names, outputs)
    if args.plan_json:
        write_atomic(args.plan_json, plan.to_json())
        print(f"wrote {args.plan_json}")
    return 0


def _save_outputs(path: str, names: list[str], outputs: list[Any]) -> None:
    tensors = {n: a for n, v in zip(names, outputs) if (a := storable(v)) is not None}  # (strings as unicode)
    skipped = [n for n in names if n not in tensors]
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FeedError(f"cannot write outputs to {path}: no folder {directory}")
    buffer = io.BytesIO()
    np.savez(buffer, **tensors)  # type: ignore[arg-type]
    write_atomic(path, buffer.getvalue())
    left = f"; not saved (an .npz holds tensors, not sequences or maps): {', '.join(skipped)}" if skipped else ""
    print(f"wrote {path} ({len(tensors)} output(s)){left}")

"""``trt-backend bench``: time the stitched session against ONNX Runtime (CPU, CUDA, TensorRT EPs)
and a whole-model TensorRT engine, in one run on the same inputs, with trtexec's statistics,
a per-segment breakdown, build times apart from inference, JSON and a plot."""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import IO, Any

from partitioner.options_check import number_option
from trt_backend._files import write_atomic
from trt_backend.artifacts.read import is_build_folder
from trt_backend.bench.candidates import BASELINES
from trt_backend.bench.loop import BenchOptions, run_bench
from trt_backend.bench.report import write_plot
from trt_backend.bench.timing import ProgressEvent, TimingConfig
from trt_backend.commands._args import (
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
    sample_profiles,
    read_samples,
    refuse_build_flags,
    session_options,
)
from trt_backend.commands._shapes import cli_profiles, parse_shapes
from trt_backend.commands._precision import add_auto_arguments, build_fields, options_with
from trt_backend.errors import BenchOptionsError
from trt_backend.ort.values import memory_limit

PROGRESS_AFTER_S = 2.0  # runs shorter than this print no progress


def register(p: argparse.ArgumentParser) -> None:
    """Arguments of `trt-backend bench` (the CLI names it and gives its one-line help)."""
    p.description = ("Time MODEL through trt-backend (TensorRT segments emulated where TensorRT cannot execute) "
                   "and through the baselines, on the same inputs: warm-up by time, then at least --iterations "
                   "runs and --duration-s seconds per runner (trtexec's rule). Prints latency min/max/mean/"
                   "median/p90/p95/p99 (nearest-rank percentiles), throughput, each baseline's ratio to ours, "
                   "ours per segment, and engine build and cache-load times apart from inference.")
    p.add_argument("model", help="ONNX model file, or a folder written by trt-backend build (its engines "
                                 "measured as built: nothing planned, calibrated or built)")
    add_shape_arguments(p, "run with")
    p.add_argument("--inputs", metavar="FILE.npz|DIR", help="real inputs to time with (an .npz of arrays by input "
                   "name; the first sample of several) instead of seeded random data")
    add_precision_arguments(p, "TensorRT engine builds and of the TensorRT EP")
    add_auto_arguments(p)  # (--precision auto searches the plan it builds with, as run and compare do)
    p.add_argument("--warmup-ms", default="200", metavar="MS",
                   help="warm-up time per runner (default 200; 0: one untimed call)")
    p.add_argument("--duration-s", default="3", metavar="S", help="minimum timed seconds per runner (default 3)")
    p.add_argument("--iterations", default="10", metavar="N", help="minimum timed runs per runner (default 10)")
    p.add_argument("--rounds", default="3", metavar="N",
                   help="split each runner's time into N blocks that alternate between runners, so drift of a "
                        "busy machine hits all alike (default 3; 1: trtexec's single block)")
    p.add_argument("--baselines", default=",".join(BASELINES), metavar="A,B",
                   help=f"comma-separated, from {', '.join(BASELINES)}; 'none' for none (default: all)")
    p.add_argument("--emulate", action="store_true",
                   help="run TensorRT segments through ONNX Runtime even where TensorRT could run them")
    p.add_argument("--threads", default="0", metavar="N", help="ONNX Runtime intra-op threads, every runner "
                                                               "(default 0: ONNX Runtime's choice)")
    add_cpu_session_arguments(p)
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    add_range_arguments(p)
    p.add_argument("--no-build", action="store_true", help="do not build TensorRT engines (no build times)")
    p.add_argument("--cache-dir", metavar="DIR", help="engine cache to build through (default: a temporary one)")
    p.add_argument("--json", metavar="OUT.json", help="write every number as JSON")
    p.add_argument("--plot", metavar="OUT.png", help="draw the latency distribution per runner (needs matplotlib)")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    add_device_argument(p)
    add_memory_argument(p)
    add_build_memory_argument(p)
    add_sign_key_argument(p)
    add_partition_arguments(p)
    p.set_defaults(func=handle)


def _number(text: str, flag: str, kind: type = float) -> Any:
    return number_option(text, flag, whole=kind is int, text=True, error=BenchOptionsError)


def _baselines(text: str) -> tuple[str, ...]:
    items = tuple(b.strip() for b in text.split(",") if b.strip())
    return () if items in ((), ("none",)) else items


def _check_outputs(args: argparse.Namespace) -> None:
    """Fail before timing, not after, on outputs that cannot be written."""
    for flag, path in (("--json", args.json), ("--plot", args.plot)):
        if path:
            folder = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(folder):
                raise BenchOptionsError(f"{flag} {path}: folder {folder} does not exist")
            if os.path.isdir(path):
                raise BenchOptionsError(f"{flag} {path}: is a directory")
    if args.plot:
        try:
            import matplotlib  # noqa: F401  (checked now: a long run should not end in an import error)
        except ImportError:
            raise BenchOptionsError("--plot needs matplotlib (pip install matplotlib)") from None


def options_from_args(args: argparse.Namespace) -> tuple[BenchOptions, Any]:
    timing = TimingConfig(warmup_s=_number(args.warmup_ms, "--warmup-ms") / 1000,
                          duration_s=_number(args.duration_s, "--duration-s"),
                          min_iterations=_number(args.iterations, "--iterations", int),
                          rounds=_number(args.rounds, "--rounds", int))
    threads = number_option(args.threads, "--threads", whole=True, low=0, text=True, error=BenchOptionsError)
    if is_folder_arg(args):  # First: a flag that would change what was built is the error to report.
        refuse_build_flags(args, args.model)
    profiles = cli_profiles(args.min_shapes, args.opt_shapes, args.max_shapes, args.shapes)
    if is_build_folder(args.model) and not (args.min_shapes or args.opt_shapes or args.max_shapes):
        profiles = []  # a build folder brings its profiles: --shapes only shapes the inputs
    shapes = parse_shapes(args.shapes) if args.shapes else {}
    feeds = None
    if args.inputs:
        samples = read_samples(args.inputs, args.model, shapes=args.shapes)
        feeds = samples[0]
        if len(samples) > 1:
            print(f"--inputs {args.inputs}: {len(samples)} samples; bench times the first", file=sys.stderr)
    if not profiles and not is_build_folder(args.model):
        profiles = sample_profiles([feeds] if feeds is not None else [], args)
    options = BenchOptions(shapes=shapes, profiles=profiles or None, baselines=_baselines(args.baselines),
                           timing=timing, build=not args.no_build, seed=args.seed, feeds=feeds, **random_ranges(args))
    session = session_options(args, emulate=True if args.emulate else "auto", calibration_seed=args.seed,
                              ort=ort_options(args, intra_op_threads=threads), cache_dir=args.cache_dir)
    if not is_build_folder(args.model):
        session = options_with(session, build_fields(args, args.model, profiles or None, session,
                                                     [feeds] if feeds is not None else None))
    return options, session


class ProgressPrinter:
    """Progress on stderr once a run has lasted :data:`PROGRESS_AFTER_S`: one rewritten line on
    a terminal, a line per finished block (and every 5 s) otherwise."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()
        self.last = 0.0
        self.dirty = False

    def __call__(self, e: ProgressEvent) -> None:
        now = time.perf_counter() - self.start
        if now < PROGRESS_AFTER_S:
            return
        rounds = f" round {e.round + 1}/{e.rounds}" if e.rounds > 1 else ""
        if e.phase == "build":
            text = f"bench: {e.runner}: building TensorRT engines, {e.iterations}/{e.target_iterations} done"
        elif e.phase == "warmup":
            text = f"bench: {e.runner}{rounds}: warming up"
        elif e.phase == "timed":
            text = (f"bench: {e.runner}{rounds}: {e.elapsed_s:.1f}/{e.target_s:g} s, "
                    f"{e.iterations}/{e.target_iterations}+ runs")
        else:
            text = f"bench: {e.runner}{rounds}: {e.iterations} timed runs done"
        if self.tty:
            self.stream.write("\r\033[K" + text)
            self.dirty = True
        elif e.phase in ("done", "build") or now - self.last >= 5.0:
            self.stream.write(text + "\n")
            self.last = now
        self.stream.flush()

    def finish(self) -> None:
        if self.dirty:
            self.stream.write("\r\033[K")
            self.stream.flush()


def handle(args: argparse.Namespace) -> int:
    with memory_limit(max_memory(args)):  # every tensor this command allocates, held to --max-memory
        return _handle(args)


def _handle(args: argparse.Namespace) -> int:
    options, session = options_from_args(args)
    _check_outputs(args)
    printer = None if args.no_progress or args.quiet else ProgressPrinter()  # -q: no progress lines
    try:
        result = run_bench(args.model, options, session, printer)
    finally:
        if printer is not None:
            printer.finish()
    print(result.table())
    if args.json:
        write_atomic(args.json, result.to_json() + "\n")
        print(f"wrote {args.json}")
    if args.plot:
        write_plot(result, args.plot)
        print(f"wrote {args.plot}")
    return 0

"""Argument groups the subcommands share, and the options they turn into."""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from partitioner import BoundaryCost, OptionsError, PartitionOptions, TrtBackendError
from partitioner.options_check import number_option
from partitioner.partition import DEFAULT_MIN_SEGMENT_SIZE
from partitioner.qdq import QDQ_REWRITES
from trt_backend._files import output_problem
from trt_backend._lazy import lazy_module
from trt_backend.errors import OutputError
from trt_backend.ort.sizes import parse_size

if TYPE_CHECKING:
    from trt_backend.ort.options import OrtOptions

log = logging.getLogger(__name__)

# What only some commands' flags need (a session's options, precisions, ONNX Runtime's settings)
# loads when those flags are added or read: ``inspect`` of a model takes none of them.
_options = lazy_module("trt_backend.engines.options")
_ort_options = lazy_module("trt_backend.ort.options")
_session_options = lazy_module("trt_backend.session.options")
_planning = lazy_module("trt_backend.planning")  # (it loads onnx: not before a command plans)
_feeds = lazy_module("trt_backend.session.feeds")
_given = lazy_module("trt_backend.profiles.given")
_sessions = lazy_module("trt_backend.ort.sessions")
_shapes = lazy_module("trt_backend.commands._shapes")
_read = lazy_module("trt_backend.artifacts.read")  # (a folder's manifest: read where a build flag is given)
_precision_plan = lazy_module("trt_backend.engines.precision_plan")
_calibration = lazy_module("trt_backend.engines.calibration")  # (--calibration-data's files: their shapes)

# Every flag that names something a command writes: its argparse dest -> (flag, what it is: a
# "file", a "folder" replaced or filled whole, a "tree" (a folder made with its parents), or
# "either"). The CLI checks them all before a command starts (:func:`check_output_paths`), so
# no run ends in "cannot write".
OUTPUT_PATHS: dict[str, tuple[str, str]] = {
    "json": ("--json", "file"), "outputs": ("--outputs", "file"), "picture": ("--picture", "file"),
    "annotated": ("--annotated", "file"), "plan_json": ("--plan-json", "file"), "plot": ("--plot", "file"),
    "report": ("--report", "file"), "timing_cache": ("--timing-cache", "file"),
    "save_outputs": ("--save-outputs", "either"),
    "export_segments": ("--export-segments", "folder"), "output": ("-o", "folder"), "out": ("--out", "tree"),
    "cache_dir": ("--cache-dir", "tree"),
}


def check_output_paths(args: argparse.Namespace) -> None:
    """One OutputError for the first output path of ``args`` that cannot be written (its folder
    missing or taking no new files, a folder given for a file or the other way round)."""
    for dest, (flag, kind) in OUTPUT_PATHS.items():
        path = getattr(args, dest, None)
        if not isinstance(path, str) or not path:
            continue
        problem = output_problem(path, folder=kind in ("folder", "tree"), make_parents=kind == "tree")
        if problem and not (kind == "either" and problem in ("is a folder", "exists and is not a folder")):
            raise OutputError(f"cannot write {flag} {path}: {problem}")


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
                        "a segment holding a Conv/MatMul/Gemm-like op is always kept; 1 keeps every segment "
                        "TensorRT takes, the boundary price included)")
    p.add_argument("--launch-cost-us", type=float, default=BoundaryCost().launch_us, metavar="US",
                   help="price of one hand-over between segments, in microseconds: a TensorRT segment without "
                        "a heavy op whose estimated saving is below its boundaries' price goes to ONNX Runtime "
                        f"(default {BoundaryCost().launch_us:g})")
    p.add_argument("--no-boundary-cost", action="store_true",
                   help="keep every TensorRT segment whatever its boundaries cost (the size rule still applies)")
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
    p.add_argument("--qdq-rewrite", choices=QDQ_REWRITES, default="exact",
                   help="asymmetric Q/DQ TensorRT refuses (ONNX Runtime's default quantizer writes it): 'exact' "
                        "rewrites it into float arithmetic (ONNX's numerics; TensorRT then computes it in float), "
                        "'int8' re-quantizes it to symmetric int8 (int8 kept; measure it with compare)")


def add_cpu_session_arguments(p: argparse.ArgumentParser) -> None:
    """How the ONNX Runtime sessions of the segments share the CPU (run, bench)."""
    p.add_argument("--thread-pool", choices=_ort_options.THREAD_POOLS, default="session",
                   help="ONNX Runtime intra-op pools: one per segment session (default, ONNX Runtime's own), or "
                        "one global pool they all share (fewer thread wake-ups between segments on CPU)")
    p.add_argument("--share-arena", action="store_true",
                   help="segment sessions allocate from one CPU arena: what one frees, the next reuses")


def add_device_argument(p: argparse.ArgumentParser) -> None:
    """``--device N``: the GPU a session runs (or a build builds) on (run, bench, compare, build)."""
    p.add_argument("--device", type=int, default=None, metavar="N",
                   help="GPU index everything of the session lives on: engines, streams, buffers, CUDA-EP "
                        "sessions, outputs (default: GPU 0 where a GPU is used; ignored with --emulate)")


def ort_options(args: argparse.Namespace, *, intra_op_threads: int = 0) -> OrtOptions:
    """ONNX Runtime settings from :func:`add_cpu_session_arguments`."""
    return _ort_options.OrtOptions(intra_op_threads=intra_op_threads, thread_pool=args.thread_pool,
                                   share_arena=args.share_arena)


def partition_options(args: argparse.Namespace) -> PartitionOptions:
    """The partition options of a command line, as the Python door resolves the same fields
    (:func:`trt_backend.planning.with_shipped_plugins`: every shipped plugin unless --no-plugins)."""
    resolved: PartitionOptions = _planning.with_shipped_plugins(PartitionOptions(
        exclude_ops=tuple(args.exclude_ops), exclude_nodes=tuple(args.exclude_nodes),
        min_segment_size=args.min_segment_size,
        boundary_cost=None if args.no_boundary_cost else BoundaryCost(launch_us=args.launch_cost_us),
        plugins=() if args.no_plugins else None, plugin_ops=tuple(args.plugin_ops), target=args.target,
        qdq_rewrite=args.qdq_rewrite))
    return resolved


# Flags only a build reads that set no session option (its profiles, a saved plan, the precision
# search's candidates): given on a build folder, each is refused as changing what was built.
BUILD_ONLY_FLAGS: dict[str, tuple[Any, str]] = {
    "min_shapes": ([], "--min-shapes"), "opt_shapes": ([], "--opt-shapes"), "max_shapes": ([], "--max-shapes"),
    "saved_plan": (None, "--saved-plan"), "allow": (("fp16", "bf16", "int8"), "--allow"),
}


def add_builder_arguments(p: argparse.ArgumentParser) -> None:
    """The TensorRT builder knobs trtexec users reach for (each a :class:`BuildOptions` field;
    :func:`builder_fields` reads them)."""
    g = p.add_argument_group("TensorRT builder")
    g.add_argument("--workspace-mb", type=int, default=None, metavar="MB",
                   help="workspace memory pool limit (trtexec --memPoolSize=workspace:MB)")
    g.add_argument("--builder-optimization-level", type=int, default=None, metavar="0..5",
                   help="how long the builder searches for faster kernels (trtexec --builderOptimizationLevel; "
                        "TensorRT's default 3)")
    g.add_argument("--max-aux-streams", type=int, default=None, metavar="N",
                   help="auxiliary streams an engine may run layers on in parallel (trtexec --maxAuxStreams)")
    g.add_argument("--timing-cache", default=None, metavar="FILE",
                   help="kernel timing cache: read, then saved merged (trtexec --timingCacheFile; full TensorRT "
                        "only: TensorRT-RTX has none)")
    g.add_argument("--hardware-compatibility", choices=_options.HARDWARE_LEVELS, default="none",
                   help="engines that run on other GPUs than the one building them (trtexec "
                        "--hardwareCompatibilityLevel)")
    g.add_argument("--version-compatible", action="store_true",
                   help="engines later TensorRT versions can run (trtexec --versionCompatible)")
    g.add_argument("--include-lean-runtime", action="store_true",
                   help="with --version-compatible: embed the lean runtime in each engine (host code: loading it "
                        "then needs allow_host_code); default: excluded (trtexec --excludeLeanRuntime)")
    g.add_argument("--compute-capabilities", default=None, metavar="SM80,SM86",
                   help="TensorRT-RTX: GPUs to build for ahead of time (default: the builder's choice)")


def builder_fields(args: argparse.Namespace) -> dict[str, Any]:
    """BuildOptions fields of the flags :func:`add_builder_arguments` adds, checked in one
    OptionsError naming the flag."""
    fields: dict[str, Any] = {}
    if args.workspace_mb is not None:
        fields["workspace_bytes"] = number_option(args.workspace_mb, "--workspace-mb", whole=True, low=0) << 20
    if args.builder_optimization_level is not None:
        fields["builder_optimization_level"] = number_option(args.builder_optimization_level,
                                                             "--builder-optimization-level", whole=True, low=0, high=5)
    if args.max_aux_streams is not None:
        fields["max_aux_streams"] = number_option(args.max_aux_streams, "--max-aux-streams", whole=True, low=0)
    if args.timing_cache:
        fields["timing_cache"] = args.timing_cache
    if args.hardware_compatibility != "none":
        fields["hardware_compatibility"] = args.hardware_compatibility
    if args.include_lean_runtime and not args.version_compatible:
        raise OptionsError("--include-lean-runtime applies to version-compatible engines: add --version-compatible")
    if args.version_compatible:
        fields["version_compatible"] = True
        fields["exclude_lean_runtime"] = not args.include_lean_runtime
    if args.compute_capabilities:
        fields["compute_capabilities"] = tuple(c.strip() for c in args.compute_capabilities.split(",") if c.strip())
    return fields


class Explicit(argparse.Action):
    """Stores the value as argparse's default action does, and records that the flag was given
    (``args.explicit``): on a build folder a flag given at its default value still asks for that
    value (``--precision fp32`` of an fp16 folder), where a flag left out asks for nothing."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.explicit = {*getattr(namespace, "explicit", ()), self.dest}


def refuse_build_flags(args: argparse.Namespace, folder: str, allow: tuple[str, ...] = ()) -> None:
    """One OptionsError naming the first flag given that would change what ``folder`` was built
    with, by the rule the Python door follows (:func:`trt_backend.artifacts.read.refused_on_folder`):
    planning, partition and build flags pass at their defaults or equal to the folder's own setting;
    run-time flags (threads, device, seeds, inputs, --shapes within its profiles) and the option
    fields in ``allow`` always do. Commands call it before reading anything else of their flags."""
    manifest = _folder_manifest(folder)
    shapes = ("min_shapes", "opt_shapes", "max_shapes")
    recorded = any(getattr(args, a, None) for a in shapes) and _read.same_profiles(_given_profiles(args), manifest)
    for attr, (default, flag) in BUILD_ONLY_FLAGS.items():
        value = getattr(args, attr, default)
        if recorded and attr in shapes:
            continue  # (the profiles the folder records: they change nothing)
        if value != default and not (isinstance(default, tuple) and tuple(value) == default):
            raise _read.refusal(folder, flag)
    build: dict[str, Any] = {"precision": getattr(args, "precision", "fp32"),
                             "calibration_method": getattr(args, "calibration_method", "minmax")}
    for name in ("keep_fp32_ops", "calibration_data"):
        if getattr(args, name, None) is not None:
            build[name] = tuple(args.keep_fp32_ops) if name == "keep_fp32_ops" else args.calibration_data
    if getattr(args, "precision_plan", None) and "precision_plan" not in allow:
        build["precision_plan"] = _precision_plan.read_precision_plan(args.precision_plan)
    if hasattr(args, "workspace_mb"):
        build.update(builder_fields(args))
    if getattr(args, "max_build_memory", None) is not None:
        build["max_build_memory"] = parse_size(args.max_build_memory, "--max-build-memory")
    try:  # (as a BuildOptions holds them, where they make one: sizes and names normalized)
        made = _options.BuildOptions(**build)
        build = {name: getattr(made, name) for name in build}
    except TrtBackendError:
        pass  # (precision 'auto' without its plan, say: judged as given)
    given = _session_options.SessionOptions(
        partition=partition_options(args) if hasattr(args, "exclude_ops") else None,
        flavor=getattr(args, "flavor", "auto"), isolate_parser=bool(getattr(args, "isolate", False)))
    _read.refused_on_folder(given, folder, manifest, build=build, skip=allow,
                            explicit=frozenset(getattr(args, "explicit", ())))


def _given_profiles(args: argparse.Namespace) -> list[dict[str, Any]] | None:
    """The profiles --min/--opt/--max-shapes give; None where they do not make any."""
    try:
        return _shapes.cli_profiles(args.min_shapes, args.opt_shapes, args.max_shapes)
    except TrtBackendError:
        return None


def _folder_manifest(folder: str) -> dict[str, Any] | None:
    """``folder``'s manifest; None where it cannot be read (opening the folder names that problem)."""
    try:
        with open(os.path.join(folder, _read.MANIFEST), encoding="utf-8") as f:
            manifest = json.load(f)
        if isinstance(manifest, dict):
            _read.check_manifest_shape(manifest, folder)
    except (OSError, ValueError, RecursionError, TrtBackendError):  # (the folder's opening says what is wrong)
        return None
    return manifest if isinstance(manifest, dict) else None


def is_folder_arg(args: argparse.Namespace) -> bool:
    model = getattr(args, "model", None)
    return isinstance(model, str) and os.path.isdir(model)


def session_options(args: argparse.Namespace, **extra: Any) -> Any:
    """SessionOptions from the shared flags (plus ``extra`` fields), with --max-memory, --sign-key
    and --device where the command has them: the one place every command that makes a session
    gets its options from. On a build folder (``args.model``), flags that would change what was
    built are refused (:func:`refuse_build_flags`) and the folder's own plan and build apply."""
    extra.setdefault("max_memory", max_memory(args))
    if getattr(args, "max_build_memory", None) is not None:  # Refused below on a build folder.
        extra.setdefault("max_build_memory", parse_size(args.max_build_memory, "--max-build-memory"))
    if getattr(args, "sign_key", None) is not None:
        extra.setdefault("sign_key", args.sign_key)
    if getattr(args, "device", None) is not None:
        extra.setdefault("device_id", args.device)
    if getattr(args, "weights_by_reference", False):  # build's: the folder refers to the weights, no copy
        extra.setdefault("weights_by_reference", True)
    if is_folder_arg(args):
        refuse_build_flags(args, args.model)
        extra.pop("max_build_memory", None)
        return _session_options.SessionOptions(**extra)
    return _session_options.SessionOptions(partition=partition_options(args), flavor=args.flavor,
                                           isolate_parser=args.isolate, **extra)


def max_memory(args: argparse.Namespace) -> int | None:
    """Bytes of ``--max-memory`` (None when not given); a malformed size is an OptionsError."""
    return parse_size(getattr(args, "max_memory", None), "--max-memory")


def add_memory_argument(p: argparse.ArgumentParser) -> None:
    """``--max-memory SIZE``: the largest tensor the command may allocate (besides free memory)."""
    p.add_argument("--max-memory", default=None, metavar="SIZE",
                   help="refuse any input, calibration or output tensor larger than SIZE (e.g. 8G, 512M; "
                        "tensors larger than the memory available are always refused)")


def add_build_memory_argument(p: argparse.ArgumentParser) -> None:
    """``--max-build-memory SIZE``: the memory TensorRT builds may take (commands that build)."""
    p.add_argument("--max-build-memory", default=None, metavar="SIZE",
                   help="memory the engine builds may take (e.g. 4G): TensorRT segments whose weights and workspace "
                        "would need more are cut into the fewest pieces that fit, at the cheapest boundaries, and "
                        "fewer builds run at once (default: the memory available when the builds start)")


def add_sign_key_argument(p: argparse.ArgumentParser, signs: bool = False) -> None:
    """``--sign-key KEY|@FILE``: sign a build folder (build) or require its signature (the rest)."""
    what = ("sign the folder's manifest (HMAC-SHA256) with this key" if signs else
            "a build folder must be signed with this key (HMAC-SHA256)")
    p.add_argument("--sign-key", default=None, metavar="KEY|@FILE",
                   help=f"{what}; @FILE reads the key from a file (default: $TRT_BACKEND_SIGN_KEY when set)")


def add_shape_arguments(p: argparse.ArgumentParser, what: str) -> None:
    """``--shapes`` and the repeatable ``--min/--opt/--max-shapes`` that :func:`cli_profiles` reads."""
    p.add_argument("--shapes", metavar="x:1x3x224x224,...",
                   help=f"input shapes to {what} (and, without --min/--opt/--max-shapes, a fixed profile)")
    for which in ("min", "opt", "max"):
        p.add_argument(f"--{which}-shapes", action="append", default=[], metavar="x:1x3x224x224,...",
                       help=f"{which} shapes of a profile (repeat all three for several profiles)")


def add_precision_arguments(p: argparse.ArgumentParser, what: str = "TensorRT segments") -> None:
    """``--precision`` and int8's ``--calibration-data``/``--calibration-method``."""
    p.add_argument("--precision", default="fp32", action=Explicit, metavar="|".join(_options.PRECISIONS),
                   help=f"precision of the {what} (fp16/bf16: an ONNX-level transform; int8: calibrated Q/DQ; "
                        "default fp32)")
    p.add_argument("--calibration-data", metavar="FILE.npz|DIR|random", default=None,
                   help="int8: one array per model input, samples stacked on the batch dim (or a folder of such "
                        "files); 'random' for a smoke test (not a calibration)")
    p.add_argument("--calibration-method", choices=_options.CALIBRATION_METHODS, default="minmax",
                   help="int8: how activation ranges are chosen from the calibration data (default minmax)")
    p.add_argument("--keep-fp32-ops", type=split_list, default=None, metavar="OP,OP",
                   help="fp16/bf16/int8: op types kept in fp32 (replaces the default list: normalizations, "
                        "Softmax, LogSoftmax and reductions)")


def precision_fields(args: argparse.Namespace) -> dict[str, Any]:
    """BuildOptions fields from :func:`add_precision_arguments`."""
    keep = getattr(args, "keep_fp32_ops", None)
    _options.validate_precision(args.precision, keep or ())
    fields: dict[str, Any] = {"precision": args.precision}
    if keep is not None:
        fields["keep_fp32_ops"] = tuple(keep)
    if args.calibration_data is not None:
        fields["calibration_data"] = args.calibration_data
        fields["calibration_method"] = args.calibration_method
        if args.calibration_data == "random" and args.precision == "int8":
            print("calibration data: random (a smoke test of the int8 path; its scales are not a calibration)",
                  file=sys.stderr)
    return fields


def add_data_arguments(p: argparse.ArgumentParser, saves: bool = False) -> None:
    """Real inputs instead of random ones (``--inputs``), and the ranges random data is drawn
    from; with ``saves`` also ``--save-outputs``/``--load-outputs`` (compare)."""
    p.add_argument("--inputs", metavar="FILE.npz|DIR",
                   help="real inputs: an .npz of arrays by input name (one sample; or <k>/<name> for several), or a "
                        "folder of such files (samples of different shapes in separate files)")
    add_range_arguments(p)
    if saves:
        p.add_argument("--save-outputs", metavar="RUN.npz",
                       help="write the inputs and trt-backend's outputs here (compare them elsewhere with "
                            "--load-outputs)")
        p.add_argument("--load-outputs", metavar="RUN.npz",
                       help="compare against the outputs saved in RUN.npz (on its inputs) "
                            "instead of running ONNX Runtime")


def add_range_arguments(p: argparse.ArgumentParser) -> None:
    """``--val-range``/``--int-range``: the ranges random inputs are drawn from (run, bench,
    compare; :func:`random_ranges` reads them)."""
    p.add_argument("--val-range", action="append", default=[], metavar="[NAME:]LO,HI",
                   help="random float inputs drawn uniformly from [LO, HI) (default 0,1); repeat with NAME: per input")
    p.add_argument("--int-range", action="append", default=[], metavar="[NAME:]LO,HI",
                   help="random integer inputs drawn uniformly from LO..HI, both included (default 0,2, or the rows "
                        "of a table the model indexes with the input); repeat with NAME: per input")


def random_ranges(args: argparse.Namespace) -> dict[str, Any]:
    """``val_range`` and ``int_range`` from :func:`add_range_arguments`'s flags."""
    return {"val_range": _range_flags(args.val_range, float, "--val-range"),
            "int_range": _range_flags(args.int_range, int, "--int-range")}


def _range_flags(texts: Sequence[str], kind: type, flag: str) -> Any:
    """``--val-range``/``--int-range`` values: one (lo, hi) for all inputs, or by input name."""
    if not texts:
        return None
    named: dict[str, tuple[Any, Any]] = {}
    whole = None
    for text in texts:
        name, sep, rest = text.rpartition(":")
        parts = [p.strip() for p in (rest if sep else text).split(",")]
        try:
            lo, hi = (kind(float(parts[0])), kind(float(parts[1]))) if len(parts) == 2 else (None, None)
        except ValueError:
            lo = hi = None
        if lo is None or hi is None:
            raise OptionsError(f"{flag} {text!r}: write [NAME:]LOW,HIGH, e.g. {flag} image:-1,1")
        if sep:
            named[name] = (lo, hi)
        else:
            whole = (lo, hi)
    if named and whole is not None:
        raise OptionsError(f"{flag}: give one range for every input, or ranges by NAME:, not both")
    return named or whole


def read_samples(path: str, model: str, what: str = "--inputs", shapes: str | None = None) -> list[dict[str, Any]]:
    """The samples of ``--inputs PATH``, held to the inputs of ``model`` (a model file, or a build
    folder's model) as a run checks feeds (names, dtypes, ranks, fixed and shared dims) before
    anything is loaded or made: one line naming the file, through every command, with or without
    profiles given, for a folder as for a model file. A sample outside the profiles is the
    session's to name (``Session.check_feeds``). ``shapes``: the command's ``--shapes``, which
    samples of other shapes contradict (a folder's run took the samples' and dropped them)."""
    feeds = _feeds.read_feeds(path, what)
    check_model_samples(model, feeds, f"{what} {path}")
    given = _shapes.parse_shapes(shapes) if shapes else {}
    for k, feed in enumerate(feeds):
        for name, shape in given.items():
            got = getattr(feed.get(name), "shape", None)
            if got is not None and tuple(got) != tuple(shape):
                sample = f" (sample {k})" if len(feeds) > 1 else ""
                raise OptionsError(f"{what} {path}{sample}: input '{name}' is {'x'.join(map(str, got)) or 'a scalar'}, "
                                   f"--shapes gives {'x'.join(map(str, shape)) or 'a scalar'}: the samples run at "
                                   "their own shapes (give --shapes only to shape random inputs, or "
                                   "--min/--opt/--max-shapes for a profile spanning the samples)")
    return feeds


def check_model_samples(model: str, feeds: Sequence[Mapping[str, Any]], where: str) -> None:
    """``feeds`` held to the inputs of ``model`` as :func:`read_samples` holds them (``where``:
    what they came from), and to a build folder's profiles, which it brings. Nothing is checked
    where the model file cannot be read by its inputs' bytes alone: loading it then says what is
    wrong (and a folder's profiles where its manifest cannot be read: opening it says why)."""
    folder = _read.is_build_folder(model)
    inputs = _feeds.model_file_inputs(os.path.join(model, _read.MODEL_FILE) if folder else model)
    if inputs is None:
        return
    profiles = _read.recorded_profiles(_folder_manifest(model)) if folder else []
    # (a model file's dim names a sample contradicts hold where ONNX Runtime does not run it so; a
    # folder's are those it was built with)
    runs = None if folder else (lambda feed: bool(_sessions.runs_whole(model, feed)))
    _feeds.check_samples(inputs, feeds, where, profiles, runs)


def sample_profiles(feeds: Sequence[Mapping[str, Any]], args: argparse.Namespace | None = None
                    ) -> list[dict[str, Any]]:
    """For samples of a model file given with ``--inputs`` and no profile (held to the model's
    inputs by :func:`read_samples` first, so that a missing input is named as missing and a
    wrong rank as a wrong rank), and the files of ``--calibration-data`` where ``args`` asks for
    int8 (or auto) with them: one profile spanning their shapes
    (:func:`trt_backend.profiles.given.profiles_from_feeds`); none without either."""
    source = getattr(args, "calibration_data", None)
    calibration = _calibration.calibration_shapes(source) if source and source != "random" and getattr(
        args, "precision", "fp32") in ("int8", "auto") else []
    model = getattr(args, "model", None)
    inputs = _feeds.model_file_inputs(model) if calibration and isinstance(model, str) and os.path.isfile(model) \
        else None
    if inputs is not None:  # (an array naming no input is the calibration data's error, which names its file)
        calibration = [{n: shape for n, shape in c.items() if n in {a.name for a in inputs}} for c in calibration]
    # A calibration file's leading dim counts the samples it stacks (re-batched to the profile's
    # opt batch), not a batch the engine runs at: it spans the other dims only, its batch the
    # samples' (1 without any).
    def batch(name: str) -> int:
        lead = [int(f[name].shape[0]) for f in feeds if name in f and len(getattr(f[name], "shape", ())) >= 1]
        return lead[0] if lead else 1

    shaped = [{name: SimpleNamespace(shape=(batch(name), *shape[1:]) if shape else shape)
               for name, shape in sample.items()} for sample in calibration]
    profiles = _given.profiles_from_feeds([*feeds, *shaped]) if feeds or shaped else []
    if shaped and profiles:
        made = ", ".join(f"{n} {'x'.join(map(str, p['min'])) or 'scalar'}" + (
            f"..{'x'.join(map(str, p['max']))}" if p["max"] != p["min"] else "") for n, p in profiles[0].items())
        log.warning("no profile given: one made from the shapes of %s (%s), its batch %s; give "
                    "--min/--opt/--max-shapes for others", "the calibration data and --inputs" if feeds else
                    "the calibration data", made, "the samples'" if feeds else "1")
    return profiles

"""The ``trt-backend`` command line. Each subcommand lives in ``trt_backend.commands.<name>``,
whose ``register(parser)`` adds its arguments and points the parser at its ``handle(args)``;
only the subcommand being run is imported. User errors print one line and exit 1 (compare: 2);
a closed stdout ends quietly; every output path is checked before the work starts."""
from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import io
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any, NoReturn

from trt_backend._lazy import lazy_module
from trt_backend._progress import PROGRESS, ClearingStream, ProgressHandler
from trt_backend.commands import _class_code
from trt_backend.errors import TrtBackendError

_args = lazy_module("trt_backend.commands._args")  # Loaded after a build the index answers: not at all.
_argv = lazy_module("trt_backend.commands._argv")
_build_hit = lazy_module("trt_backend.commands._build_hit")
_head_start = lazy_module("trt_backend.commands._head_start")  # build only
_early_engine = lazy_module("trt_backend.engines.head_start")
_early_parse = lazy_module("trt_backend.tensorrt.early_parse")  # inspect only

COMMANDS = {  # name -> one-line help, in --help order; module trt_backend.commands.<name with "-" as "_">
    "inspect": "plan a model: which nodes run in TensorRT, which in ONNX Runtime",
    "run": "run a model once: TensorRT segments (emulated without a GPU) + ONNX Runtime",
    "build": "build engines for every TensorRT segment into a folder",
    "bench": "benchmark the stitched session against ONNX Runtime and whole-model TensorRT",
    "compare": "compare trt-backend's outputs with ONNX Runtime on the whole model",
    "serve": "serve a build folder on Ray Serve: replicas, batching, HTTP and a Python handle",
    "demo": "plan, build and run the bundled demo model",
    "export-triton": "write a Triton Inference Server model repository (an ensemble) from a build",
}


# Set by script_main while it holds Python's garbage collector off until the command's modules are loaded.
_collector_held = False

VERBOSITY_HELP = ("more logging: -v info (and every demoted node, every boundary tensor), -vv debug",
                  "only results and errors: no progress lines, no warnings")


def _verbosity(p: argparse.ArgumentParser, after: bool) -> None:
    """``-v``/``-q`` before the subcommand, and again after it (kept apart, then added up)."""
    suffix = "_after" if after else ""
    p.add_argument("-v", "--verbose", action="count", default=0, dest="verbose" + suffix, help=VERBOSITY_HELP[0])
    p.add_argument("-q", "--quiet", action="store_true", dest="quiet" + suffix, help=VERBOSITY_HELP[1])


class _Parser(argparse.ArgumentParser):
    """argparse's parser, but a command line it refuses (an unknown option, a missing argument) is
    one line on stderr, naming where the usage is, instead of the whole usage block; exit 2, as
    argparse tools exit (for ``compare``, 1 would read as "the outputs differ")."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (usage: {self.prog} -h)\n")

    def _print_message(self, message: str, file: Any = None) -> None:
        """As argparse's, but the help written to a stdout that cannot take it (a full device, a
        reader gone) is not dropped in silence (argparse drops it): it ends the command as a
        failed write of any output does."""
        if message and file is not None and file is sys.stdout:
            file.write(message)
        else:
            super()._print_message(message, file)

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """As argparse's, but options no parser knows are refused by the command's own parser, so
        the line names that command's usage (argparse's top-level parser names its own)."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            sub = getattr(parsed, "_command_parser", None)
            (sub if isinstance(sub, argparse.ArgumentParser) else self).error(
                f"unrecognized arguments: {' '.join(extra)}")
        return parsed


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``command`` (a subcommand name), only that subcommand's module is
    imported and given its arguments (the others are listed by name and help only), so a
    command starts without loading what the others need."""
    # (no abbreviations: "inspect --precision fp16" read as --precision-plan fp16, a file it could not read)
    parser = _Parser(prog="trt-backend", description="TensorRT engines with ONNX Runtime fallback.", allow_abbrev=False)
    _verbosity(parser, after=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, text in COMMANDS.items():
        p = sub.add_parser(name, help=text, allow_abbrev=False)
        p.set_defaults(_command_parser=p)
        _verbosity(p, after=True)
        if command is None or name == command:
            # An import error is raised, not reported as a bad command.
            importlib.import_module(f"trt_backend.commands.{name.replace('-', '_')}").register(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _run(argv)
    except (KeyboardInterrupt, ImportError) as e:  # (before a command's own handling: its modules load, its arguments)
        return _interrupted(e)
    except SystemExit:  # --help or a usage error, printed: a stdout that cannot take it ends it as a command's end
        try:
            if sys.stdout is not None:
                sys.stdout.flush()
        except OSError as e:
            raise SystemExit(_unwritten(e)) from None
        raise


def _unwritten(e: OSError, error_exit: int = 1) -> int:
    """A write failed outside the command's own checks: a reader gone from stdout ends quietly
    (exit 141), anything else (stdout on a full device) is one line and ``error_exit``."""
    if isinstance(e, BrokenPipeError):
        return _closed_stdout()
    _drop_stdout()
    where = f"{e.filename}: " if e.filename else "cannot write its output: "
    _error(f"{where}{e.strerror or e}")
    return error_exit


def _interrupted(e: BaseException) -> int:
    """A Ctrl-C or SIGTERM, or an import one cut short, said in one line: exit 130 or 143. Any
    other failed import is raised again."""
    interrupt = _interrupt_in(e)
    if interrupt is None:
        raise e
    _error(str(interrupt) or "interrupted", prefix="trt-backend: ")
    return 143 if isinstance(interrupt, _Terminated) else 130


def _interrupt_in(e: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM that cut short the import that failed with ``e`` (a native
    extension's says "initialization failed"), if one did."""
    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


class _Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, ``timeout``, a CI job cancelled), raised where the command is, as a
    Ctrl-C is: what it had half-written (a build's staging folder, its lock) is removed on the way
    out, where the default action would end the process there and then. Exit status 143."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise _Terminated("terminated")


def _run(argv: Sequence[str] | None) -> int:
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
    _own_stderr()  # (before a build's thread may point descriptor 2 elsewhere: our lines keep theirs)
    _own_stdout()
    args_list = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in args_list if not a.startswith("-")), None)
    build_index = None
    if command == "build" and any(a.startswith("--cache-dir") for a in args_list):
        answered, build_index = _build_from_index(args_list)
        if answered:
            return 0
    if command == "inspect":
        _start_early_parse(args_list)  # TensorRT's parser asked about the file while onnx and the model load.
    if command != "build":
        return _main(args_list, command, None)
    _head_start.start_from_argv(args_list)  # The engine of a model TensorRT takes whole, while it is planned.
    try:
        return _main(args_list, command, build_index)
    finally:
        _early_engine.discard()  # A head start the build did not take (an error, or another plan).


# inspect's options that take a value and its flags, less --isolate (which plans in a child of its
# own): a command line with any other option starts no early parse
_INSPECT_VALUES = frozenset({
    "--cache-dir", "--json", "--export-segments", "--annotated", "--picture", "--precision-plan", "--shapes",
    "--min-shapes", "--opt-shapes", "--max-shapes", "--sign-key", "--exclude-ops", "--exclude-nodes",
    "--min-segment-size", "--launch-cost-us", "--flavor", "--target", "--plugin-ops", "--qdq-rewrite"})
_INSPECT_FLAGS = frozenset({"--no-boundary-cost", "--no-plugins"})


def _start_early_parse(argv: Sequence[str]) -> None:
    """For ``inspect MODEL`` of a model file: a child process asks TensorRT's parser about it while
    this one loads (:mod:`trt_backend.tensorrt.early_parse`, which says where one starts and where
    the planner takes its answer)."""
    line = _argv.scan(argv, "inspect", _INSPECT_VALUES, _INSPECT_FLAGS)
    model = next((value for name, value in line or () if name is None), None)
    flavor = next((value for name, value in reversed(line or ()) if name == "--flavor"), "auto")
    if model is not None and os.path.isfile(model):
        _early_parse.fork_question(model, flavor)


def _main(args_list: list[str], command: str | None, build_index: str | None) -> int:
    parser = build_parser(command if command in COMMANDS else None)
    try:
        args = parser.parse_args(args_list)
    except OSError as e:  # (the help, written to a stdout that cannot take it: see _Parser._print_message)
        return _unwritten(e)
    _modules_loaded()
    if command == "build":  # The build records its line in its cache's index (the key, where it was made).
        args.build_line, args.build_index = args_list, build_index
    args.verbose = args.verbose + getattr(args, "verbose_after", 0)
    args.quiet = (args.quiet or getattr(args, "quiet_after", False)) and not args.verbose
    level = logging.ERROR if args.quiet else logging.WARNING if args.verbose == 0 else \
        logging.INFO if args.verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    for root_handler in logging.getLogger().handlers:  # (basicConfig's, or a caller's: each line one line)
        if type(root_handler.formatter) is logging.Formatter or root_handler.formatter is None:
            fmt = root_handler.formatter._fmt if root_handler.formatter is not None else None
            root_handler.setFormatter(_OneLineFormatter(fmt))
    error_exit = int(getattr(args, "error_exit", 1))  # Compare: 2, kept apart from its 1 for "outputs differ".
    handler, streams = _show_progress(args), (sys.stdout, sys.stderr)
    try:
        _args.check_output_paths(args)  # Before any work: a run must not end in "cannot write".
        rc = int(args.func(args) or 0)
        if sys.stdout is not None:  # (None: the shell closed it, `>&-`, and print() writes nothing)
            sys.stdout.flush()  # A closed stdout shows here, inside the handling below.
        return rc
    except TrtBackendError as e:
        _error(str(e))
        return error_exit
    except MemoryError:  # an allocation past what the checks foresaw (numpy's, ONNX Runtime's)
        _error("out of memory: an allocation failed (the memory available, a container's limit or `ulimit -v` "
               "allows less); give smaller shapes or inputs, or --max-memory to be told before")
        return error_exit
    except OSError as e:  # a write that failed outside our own checks: stdout on a full disk or /dev/full
        return _unwritten(e, error_exit)
    except (KeyboardInterrupt, ImportError) as e:  # (a command may say what it had finished: see build)
        return _interrupted(e)
    finally:
        _stop_progress(handler, streams)


def _drop_stdout() -> None:
    """What stdout still holds, dropped, where writing it failed (a full device): the exit's flush
    would fail on it again, in Python's "Exception ignored" lines."""
    try:
        sys.stdout = open(os.devnull, "w")
    except OSError:
        sys.stdout = None  # type: ignore[assignment]


# the variables OpenBLAS reads its thread count from, in its order
_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def script_main() -> NoReturn:
    """The ``trt-backend`` script and ``python -m trt_backend``: :func:`main`, in a process that
    starts and ends faster than Python's defaults let it.

    Python's garbage collector is held off while the command's modules load (onnx, numpy, ours):
    they make some 50,000 objects that live as long as the process, and collecting scanned them
    again and again (~20 ms); once loaded they are frozen (``gc.freeze``: left out of every later
    collection) and the collector runs as usual. The process ends without tearing the
    interpreter down: Python's own exit frees onnx's, numpy's and TensorRT's objects one by one
    and unloads their libraries, which took ~0.1 s, as long as an ``inspect`` of a small model
    spends planning. What that exit does for the program runs first: the atexit callbacks
    (temporary folders, logging handlers, multiprocessing children) and the flush of stdout and
    stderr. While a thread that is not a daemon still runs, Python's exit, which waits for it,
    is taken instead.

    numpy's BLAS (OpenBLAS) starts a thread per CPU when numpy loads; the command line does no
    linear algebra in numpy (ONNX Runtime and TensorRT compute), and on a machine of few CPUs
    starting those threads competed with the engine build running beside the import (~40 ms
    of a build's 0.45 s on 2 CPUs). The process loads it with one thread unless the environment
    already says how many (``OPENBLAS_NUM_THREADS``, ``GOTO_NUM_THREADS`` or ``OMP_NUM_THREADS``)
    or numpy is loaded already.

    The dataclasses the command makes as it loads take their methods' compiled code from the
    run before (:mod:`trt_backend.commands._class_code`; ~45 ms of a ``build`` command's start)."""
    global _collector_held
    if "numpy" not in sys.modules and not any(v in os.environ for v in _BLAS_THREADS):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    if gc.isenabled():
        gc.disable()
        _collector_held = True
    _class_code.use()
    atexit.register(_class_code.save)
    rc = main()
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(rc)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # (None: closed by the shell before the process started)
                stream.flush()
        except (OSError, ValueError):  # Closed or gone: nothing more can reach it.
            pass
    os._exit(rc)


def _own_stdout() -> None:
    """Python's stdout on a copy of file descriptor 1, as :func:`_own_stderr` does for stderr, so
    that what TensorRT's native code prints to descriptor 1 while it parses or builds (TensorRT-RTX
    prints some parser warnings there) can go to the debug log
    (:func:`trt_backend.tensorrt.flavor.native_stderr`) without our results. Once per process; a
    stdout that is not descriptor 1 is left as it is."""
    try:
        if sys.stdout is None or sys.stdout.fileno() != 1:
            return
        sys.stdout.flush()
        copy = os.dup(1)
    except (OSError, ValueError, AttributeError):
        return
    sys.stdout = open(copy, "w", encoding=sys.stdout.encoding, errors=sys.stdout.errors,
                      buffering=1 if sys.stdout.isatty() else -1)


def _own_stderr() -> None:
    """Python's stderr (log lines, progress, errors) on a copy of file descriptor 2, so that while
    an engine builds, what TensorRT's native code writes to descriptor 2 itself can go to the debug
    log (:func:`trt_backend.tensorrt.flavor.native_stderr`) without taking our own lines with it.
    Once per process, kept (a logging handler made meanwhile writes to it); a stderr that is not
    descriptor 2 (a test's capture, a caller's own stream) is left as it is."""
    try:
        if sys.stderr is None or sys.stderr.fileno() != 2:
            return
        sys.stderr.flush()
        copy = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no usable descriptor 2: nothing to keep apart
        return
    sys.stderr = open(copy, "w", encoding=sys.stderr.encoding, errors=sys.stderr.errors,
                      buffering=1)


def _modules_loaded() -> None:
    """The command's modules are loaded: freeze what they made and let the collector run again,
    where :func:`script_main` held it off (a caller of :func:`main` keeps its collector as it is)."""
    global _collector_held
    if _collector_held:
        _collector_held = False
        gc.freeze()
        gc.enable()


def _build_from_index(args_list: list[str]) -> tuple[bool, str | None]:
    """``build --cache-dir`` answered from the build cache's index before the build command and
    what it needs are loaded (:mod:`trt_backend.commands._build_hit`): (answered, the index key
    the usual path records for the next time, or None when this command line has none)."""
    call, index = _build_hit.lookup_index(args_list)
    if call is None or index is None:
        return False, None
    try:
        manifest = _build_hit.restore_indexed(call, index)
    except (TrtBackendError, OSError) as e:  # The usual path meets the same problem and says it.
        logging.getLogger(__name__).debug("build index: %s", e)
        return False, index
    if manifest is None:
        return False, index
    verbose = any(a in ("-v", "--verbose", "-vv", "-vvv") for a in args_list)
    _build_hit.print_build(call.model, call.output, manifest, verbose)
    sys.stdout.flush()
    return True, index


# Control characters a message may carry from a model's own names (a newline, a terminal escape):
# written escaped, so that an error is one line and a name cannot restyle or rewrite the terminal.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)} | {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}


def one_line(text: str) -> str:
    """``text`` with its control characters escaped (``\\n``, ``\\x1b``)."""
    return text.translate(_CONTROLS)


class _OneLineFormatter(logging.Formatter):
    """Log records as one line each, their control characters escaped (see :func:`one_line`)."""

    def format(self, record: logging.LogRecord) -> str:
        return one_line(super().format(record))


def _error(message: str, prefix: str = "trt-backend: error: ") -> None:
    try:
        print(prefix + one_line(message), file=sys.stderr, flush=True)
    except (OSError, ValueError):  # Stderr closed as well: the exit code says it.
        pass


def _closed_stdout() -> int:
    """The reader of stdout went away (``trt-backend inspect MODEL | head -1``): end quietly,
    with the exit code a tool killed by SIGPIPE has in a shell (128 + 13). Python would otherwise
    print a traceback, and an error at exit when it flushes stdout again: point stdout at
    /dev/null instead."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass  # Not a real file: nothing will be flushed at exit.
    return 128 + int(getattr(signal, "SIGPIPE", 13))


def _show_progress(args: argparse.Namespace) -> ProgressHandler | None:
    """Progress lines on stderr (not with -q; with -v they come as INFO log lines instead)."""
    logger = logging.getLogger(PROGRESS)
    if args.quiet or args.verbose:
        logger.propagate = True
        return None
    handler = ProgressHandler(sys.stderr)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    if handler.tty:
        sys.stdout = ClearingStream(sys.stdout, handler)  # type: ignore[assignment]
        sys.stderr = ClearingStream(sys.stderr, handler)  # type: ignore[assignment]
    return handler


def _stop_progress(handler: ProgressHandler | None, streams: tuple[Any, Any]) -> None:
    if handler is None:
        return
    handler.close()
    logger = logging.getLogger(PROGRESS)
    logger.removeHandler(handler)
    logger.propagate = True
    logger.setLevel(logging.NOTSET)
    sys.stdout, sys.stderr = streams


if __name__ == "__main__":  # pragma: no cover
    script_main()

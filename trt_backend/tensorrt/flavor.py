"""Which TensorRT is here: ``tensorrt`` (preferred) or ``tensorrt_rtx``, imported on first use."""
from __future__ import annotations

import gc
import importlib
import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from trt_backend._lazy import lazy_module
from trt_backend.errors import TensorRTUnavailableError

_plugins = lazy_module("plugins")  # (registered with full TensorRT only, where an engine or a build needs them)

log = logging.getLogger(__name__)

FLAVORS = ("tensorrt", "tensorrt_rtx")


# The features trt-backend asks a TensorRT about (:meth:`Flavor.has`): what a process that has
# imported it tells another that has not (:func:`described`, :func:`adopt`).
FEATURES = ("Builder.build_serialized_network_to_stream", "BuilderFlag.FP16", "BuilderFlag.TF32",
            "ComputeCapability", "ComputeCapability.SM75", "IBuilderConfig.create_timing_cache",
            "IBuilderConfig.set_compute_capability", "IRuntimeConfig.create_runtime_cache",
            "NetworkDefinitionCreationFlag.STRONGLY_TYPED", "OnnxParser.load_model_proto",
            "Runtime.engine_host_code_allowed", "Runtime.get_engine_validity", "get_nv_onnx_parser_version")


@dataclass(frozen=True)
class Flavor:
    name: str  # "tensorrt" | "tensorrt_rtx"
    version: str
    module: ModuleType
    # Where another process described this TensorRT (:func:`adopt`): its parser's version and its
    # answers about :data:`FEATURES`, so that they are known here before the module is imported.
    described: tuple[str, tuple[tuple[str, bool], ...]] | None = None

    @property
    def target(self) -> str:
        return f"{self.name} {self.version}"

    @property
    def is_rtx(self) -> bool:
        return self.name == "tensorrt_rtx"

    def has(self, dotted: str) -> bool:
        """Feature detection by attribute path, e.g. ``has("INetworkDefinition.add_plugin_v3")``."""
        if self.described is not None and dotted in dict(self.described[1]):
            return dict(self.described[1])[dotted]
        obj: Any = self.module
        for part in dotted.split("."):
            if not hasattr(obj, part):
                return False
            obj = getattr(obj, part)
        return True

    @property
    def strongly_typed_only(self) -> bool:
        """True where weak typing is gone (TensorRT 11, TensorRT-RTX): no ``BuilderFlag.FP16``."""
        return not self.has("BuilderFlag.FP16")

    @property
    def parser_version(self) -> str:
        """The ONNX parser's version where the module reports it, else the module version."""
        if self.described is not None:
            return self.described[0]
        if self.has("get_nv_onnx_parser_version"):
            return str(self.module.get_nv_onnx_parser_version())
        return self.version


def network_flags(flavor: Flavor) -> int:
    """Strongly typed networks where weak typing still exists (TensorRT 10); 0 elsewhere. The
    builder and the capability oracle both use it, so the parser judges the network that is built."""
    trt = flavor.module
    if not flavor.strongly_typed_only and flavor.has("NetworkDefinitionCreationFlag.STRONGLY_TYPED"):
        return 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    return 0


_cache: dict[str, Flavor] = {}


def load_flavor(choice: str = "auto") -> Flavor:
    """Import a TensorRT flavor: ``"auto"`` tries ``tensorrt`` then ``tensorrt_rtx``."""
    if choice not in ("auto",) + FLAVORS:
        raise TensorRTUnavailableError(f"unknown TensorRT flavor '{choice}'; choose auto, tensorrt or tensorrt_rtx")
    names = FLAVORS if choice == "auto" else (choice,)
    errors: list[str] = []
    for name in names:
        if name in _cache:
            return _cache[name]
        try:
            module = importlib.import_module(name)
            version = str(module.__version__)
        except (ImportError, OSError, AttributeError) as e:  # OSError: wheel present, libs missing
            if isinstance(e.__cause__ or e.__context__, KeyboardInterrupt):
                raise KeyboardInterrupt from None  # (a Ctrl-C during the import: not a missing TensorRT)
            errors.append(f"{name}: {e}")
            continue
        _cache[name] = Flavor(name, version, module)
        return _cache[name]
    raise TensorRTUnavailableError("no TensorRT flavor importable (" + "; ".join(errors) + "); install "
                                   "'tensorrt' (GPU) or 'tensorrt-rtx-cu13' (CPU-capable parser/builder)")


def described(flavor: Flavor) -> list[Any]:
    """``flavor`` as JSON-able values another process can :func:`adopt`: its name, version,
    parser version and answers about :data:`FEATURES`."""
    return [flavor.name, flavor.version, flavor.parser_version, [[f, flavor.has(f)] for f in FEATURES]]


def adopt(choice: str, description: Any) -> bool:
    """Take the TensorRT another process of this machine imported for ``choice`` (the same
    environment: it is the one :func:`load_flavor` would import here), as :func:`described`
    describes it, without importing it: its module loads where something first asks more of it
    than the description holds. False, and nothing taken, where one is loaded already or the
    description is not one or not of ``choice``."""
    try:
        name, version, parser, answers = description
        features = tuple((str(f), bool(v)) for f, v in answers)
    except (TypeError, ValueError):
        return False
    if name not in FLAVORS or choice not in ("auto", name) or _cache or name in sys.modules \
            or {f for f, _ in features} != set(FEATURES):
        return False
    _cache[name] = Flavor(str(name), str(version), lazy_module(name), (str(parser), features))
    return True


# Messages that only say this machine has no usable CUDA driver or device (a CPU-only build
# machine). A builder failure reports them beside its real reason; they do not explain it.
_NO_DEVICE_MESSAGES = ("cudaError 35", "cudaError 100", "CUDA driver version is insufficient",
                       "no CUDA-capable device")


def failure_reasons(messages: list[str] | tuple[str, ...]) -> list[str]:
    """``messages`` TensorRT gave with a failure, less those that only say no CUDA driver or device
    is usable, unless nothing else is left (then that is the reason); each once, in order."""
    once = list(dict.fromkeys(m.strip() for m in messages if m.strip()))
    relevant = [m for m in once if not any(n in m for n in _NO_DEVICE_MESSAGES)]
    for m in once:
        if relevant and m not in relevant:
            log.debug("TensorRT, beside the failure: %s", m)
    return relevant or once


# One logger per flavor per process: TensorRT warns when a builder gets a logger other than the
# first one it saw, and messages arrive on the thread that called into TensorRT, so per-call
# quieting and capturing are thread-local instead of per-logger.
_shared: dict[str, Any] = {}
_shared_lock = threading.Lock()
_local = threading.local()
_LOGGER_SWAP_NOTICE = "logger passed into createInfer"
# warnings about what we asked for on purpose: int8 segments carry fp16 Q/DQ scales (int8 with
# fp16 for the rest), which TensorRT-RTX keeps as fp32, the same values
_EXPECTED_NOTICES = ("Converting conv activation scales to fp32", "Converting conv weight scales to fp32")


def shared_logger(flavor: Flavor) -> Any:
    """The process-wide TensorRT ILogger of ``flavor``, forwarding to ``logging``; see
    :func:`captured_messages` and :func:`quiet_messages` for per-thread control."""
    with _shared_lock:
        if flavor.name not in _shared:
            _shared[flavor.name] = _make_shared(flavor)
        return _shared[flavor.name]


# One thread in TensorRT at a time, process-wide (reentrant). TensorRT calls a logger while it
# holds locks of its own, and the Python logger needs the GIL, which most binding calls keep while
# they wait for those locks: with two threads in TensorRT, one can hold the GIL waiting for
# TensorRT's lock while the other holds that lock waiting for the GIL, and the process hangs
# (seen: two segment builds at once; a build beside the planner's parser questions; a builder
# made while another thread's builder logged). Waiting for this lock releases the GIL.
# Every parse, build and engine load of trt-backend's, and the release of what they made, is
# inside it (running an engine is not: its enqueue does not log).
# So engines build one at a time in the process with every flavor, as trtexec, Polygraphy and
# Torch-TensorRT build them (full TensorRT times tactics on the GPU while it builds: two builds at
# once would also skew each other's timings); a segment's other work (its precision transform,
# calibration, cache lookups) goes on in parallel beside a build.
# While a thread holds it, Python's cyclic garbage collector is off: a collection runs in whichever
# thread allocates, with the GIL, and releasing a TensorRT object it finds (a parser or builder in
# a reference cycle) waits for TensorRT's lock, which the holder may have while it waits for the
# GIL to log (seen: the main thread collecting inside ThreadPoolExecutor.submit while a worker
# made a builder). What trt-backend makes it releases inside the lock itself.


class _TensorRTLock:
    """A reentrant lock that turns the cyclic collector off while held (see above)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0  # the holder's nesting (only the holder reads or writes it)
        self._collector_was_on = False

    def __enter__(self) -> None:
        self._lock.acquire()
        self._depth += 1
        if self._depth == 1:
            self._collector_was_on = gc.isenabled()
            gc.disable()

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0 and self._collector_was_on:
            gc.enable()
        self._lock.release()


tensorrt_lock = _TensorRTLock()


_waits = threading.local()


@contextmanager
def tensorrt_entered() -> Iterator[None]:
    """Inside :data:`tensorrt_lock`; the seconds this thread waited for it are added to
    :func:`waited_for_tensorrt` (a segment's build time leaves out the wait for another's build)."""
    start = time.perf_counter()
    with tensorrt_lock:
        _waits.seconds = getattr(_waits, "seconds", 0.0) + time.perf_counter() - start
        yield


def waited_for_tensorrt() -> float:
    """Seconds this thread has waited for :data:`tensorrt_lock` in :func:`tensorrt_entered`."""
    return float(getattr(_waits, "seconds", 0.0))


def create_builder(flavor: Flavor, logger: Any) -> Any:
    """``trt.Builder(logger)`` inside :data:`tensorrt_lock` (its caller holds it too while it uses
    the builder)."""
    with tensorrt_lock:
        return flavor.module.Builder(logger)


def python_logger_made() -> bool:
    """Whether this process has made the shared Python logger (:func:`shared_logger`) yet. Until
    then TensorRT's global logger (the first one it was given) is not ours in Python, and a build
    with a native logger, into memory, never waits for the GIL: it may run outside
    :data:`tensorrt_lock` (the head start's build does)."""
    with _shared_lock:
        return bool(_shared)


def _make_shared(flavor: Flavor) -> Any:
    trt = flavor.module
    pylog = logging.getLogger("trt_backend.tensorrt")
    sev = trt.ILogger.Severity
    # TensorRT's INFO is a build diary (memory stats, phase timings): DEBUG here.
    mapping = {sev.INTERNAL_ERROR: logging.CRITICAL, sev.ERROR: logging.ERROR, sev.WARNING: logging.WARNING,
               sev.INFO: logging.DEBUG, sev.VERBOSE: logging.DEBUG}

    class _SharedBridge(trt.ILogger):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)

        def log(self, severity: Any, msg: str) -> None:
            level = mapping.get(severity, logging.INFO)
            sink: list[str] | None = getattr(_local, "capture", None)
            if sink is not None and level >= logging.ERROR:
                sink.append(str(msg))
                level = logging.INFO  # Collected: whoever captures them reports them, once.
            if getattr(_local, "quiet", 0) or _LOGGER_SWAP_NOTICE in msg or any(n in msg for n in _EXPECTED_NOTICES):
                level = logging.DEBUG
            pylog.log(level, "%s", msg)

    return _SharedBridge()


@contextmanager
def captured_messages() -> Iterator[list[str]]:
    """Collect the error messages the shared logger receives on this thread meanwhile (logged at
    INFO only: the caller reports them)."""
    previous = getattr(_local, "capture", None)
    sink: list[str] = []
    _local.capture = sink
    try:
        yield sink
    finally:
        _local.capture = previous


@contextmanager
def quiet_messages() -> Iterator[None]:
    """Log everything the shared logger receives on this thread at DEBUG (expected complaints)."""
    _local.quiet = getattr(_local, "quiet", 0) + 1
    try:
        yield
    finally:
        _local.quiet -= 1


_native_lock = threading.Lock()
_native: dict[str, Any] = {"depth": 0, "saved": -1, "sink": None, "saved_out": -1}


def _stdout_elsewhere() -> bool:
    """Whether Python's stdout writes somewhere else than descriptor 1 (the CLI gives it its own
    copy): only then is descriptor 1 captured too, so a program's own prints are never taken."""
    try:
        return sys.stdout is not None and sys.stdout.fileno() != 1
    except (OSError, ValueError, AttributeError):  # (a stream with no descriptor: a test's capture)
        return False


@contextmanager
def native_stderr() -> Iterator[None]:
    """While inside, what native code writes straight to file descriptor 2 (TensorRT's parser,
    Myelin's "Internal Error" lines: outside TensorRT's logger, so beyond ``-q``) goes to the
    debug log instead of the user's terminal. Its logger's messages are reported where they
    belong, once. Process-wide and nested across threads: the first to enter redirects, the last
    to leave restores and logs what came. Python's own stderr writes in the meantime land there
    too, unless sys.stderr writes elsewhere than descriptor 2 (the CLI gives it its own copy)."""
    with _native_lock:
        if _native["depth"] == 0:
            try:
                sys.stderr.flush()
                saved = os.dup(2)
            except (OSError, ValueError):  # no usable fd 2 (embedded interpreters): nothing to capture
                saved = -1
            if saved >= 0:
                sink = tempfile.TemporaryFile()
                os.dup2(sink.fileno(), 2)
                _native.update(saved=saved, sink=sink)
                if _stdout_elsewhere():  # (TensorRT-RTX prints some parser warnings to descriptor 1)
                    try:
                        sys.stdout.flush()
                        _native["saved_out"] = os.dup(1)
                        os.dup2(sink.fileno(), 1)
                    except (OSError, ValueError):
                        _native["saved_out"] = -1
        _native["depth"] += 1
    try:
        yield
    finally:
        with _native_lock:
            _native["depth"] -= 1
            if _native["depth"] == 0 and _native["saved"] >= 0:
                os.dup2(_native["saved"], 2)
                os.close(_native["saved"])
                if _native["saved_out"] >= 0:
                    os.dup2(_native["saved_out"], 1)
                    os.close(_native["saved_out"])
                    _native["saved_out"] = -1
                sink = _native["sink"]
                _native.update(saved=-1, sink=None)
                sink.seek(0)
                text = sink.read().decode(errors="replace").strip()
                sink.close()
                if text:
                    log.debug("TensorRT wrote to stderr (or stdout): %s", text)


def version_tuple(version: str) -> tuple[int, ...]:
    """``"10.13.0.35"`` -> (10, 13, 0, 35): the numbers before the first part that is not one."""
    out = []
    for part in version.split("."):
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


_registered: set[str] = set()
# TensorRT versions whose Python plugins run just in time, through Python, from the engine: an
# engine holding one deserializes only where the plugin is registered in that process (from 10.9
# the plugin's ahead-of-time kernel is in the engine).
JIT_PLUGINS = ((10, 6), (10, 9))


def register_plugins(flv: Flavor) -> None:
    """Register the shipped plugins with ``flv``'s TensorRT (full TensorRT: its plugin registry is
    per process), once."""
    with tensorrt_lock:
        if flv.target not in _registered:
            _plugins.register_with(flv.module)
            _registered.add(flv.target)


def plugins_for_engine(flv: Flavor, engine: bytes) -> bool:
    """Register the shipped plugins before ``engine`` is deserialized where it needs them: full
    TensorRT of the just-in-time plugin versions (:data:`JIT_PLUGINS`), an engine that names a
    plugin of ours (its namespace, which TensorRT serializes to find the plugin's creator when it
    loads). Whether they were registered."""
    if flv.is_rtx or not JIT_PLUGINS[0] <= version_tuple(flv.version)[:2] < JIT_PLUGINS[1]:
        return False
    if not any(f"{r.plugin_namespace}".encode() in engine for r in _plugins.default_registry().records):
        return False
    register_plugins(flv)
    return True


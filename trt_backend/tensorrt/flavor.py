"""Which TensorRT is here: ``tensorrt`` (preferred) or ``tensorrt_rtx``, imported on first use."""
from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from trt_backend.errors import TensorRTUnavailableError

log = logging.getLogger(__name__)

FLAVORS = ("tensorrt", "tensorrt_rtx")


@dataclass(frozen=True)
class Flavor:
    name: str  # "tensorrt" | "tensorrt_rtx"
    version: str
    module: ModuleType

    @property
    def target(self) -> str:
        return f"{self.name} {self.version}"

    @property
    def is_rtx(self) -> bool:
        return self.name == "tensorrt_rtx"

    def has(self, dotted: str) -> bool:
        """Feature detection by attribute path, e.g. ``has("INetworkDefinition.add_plugin_v3")``."""
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
            errors.append(f"{name}: {e}")
            continue
        _cache[name] = Flavor(name, version, module)
        return _cache[name]
    raise TensorRTUnavailableError("no TensorRT flavor importable (" + "; ".join(errors) + "); install "
                                   "'tensorrt' (GPU) or 'tensorrt-rtx-cu13' (CPU-capable parser/builder)")


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


_builder_lock = threading.Lock()


def create_builder(flavor: Flavor, logger: Any) -> Any:
    """``trt.Builder(logger)``, one thread at a time. Making a builder takes a lock inside
    TensorRT and may log through ``logger`` (a Python callback, which needs the GIL) while
    holding it, and the binding keeps the GIL while it waits for that lock: two threads making
    builders at once deadlock (seen with parallel segment builds). Waiting here releases the GIL."""
    with _builder_lock:
        return flavor.module.Builder(logger)


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

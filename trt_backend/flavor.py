"""Which TensorRT is here: ``tensorrt`` (preferred) or ``tensorrt_rtx``, imported on first use."""
from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from partitioner.errors import TrtBackendError

log = logging.getLogger(__name__)

FLAVORS = ("tensorrt", "tensorrt_rtx")


class TensorRTUnavailableError(TrtBackendError):
    """No usable TensorRT flavor could be imported."""


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


def make_logger(flavor: Flavor, *, quiet: bool = False) -> Any:
    """A TensorRT ILogger forwarding to Python ``logging`` (logger ``trt_backend.tensorrt``).
    ``quiet`` logs everything at DEBUG: capability queries expect the parser to complain."""
    trt = flavor.module
    pylog = logging.getLogger("trt_backend.tensorrt")
    sev = trt.ILogger.Severity
    mapping = {sev.INTERNAL_ERROR: logging.CRITICAL, sev.ERROR: logging.ERROR, sev.WARNING: logging.WARNING,
               sev.INFO: logging.INFO, sev.VERBOSE: logging.DEBUG}

    class _Bridge(trt.ILogger):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)

        def log(self, severity: Any, msg: str) -> None:
            pylog.log(logging.DEBUG if quiet else mapping.get(severity, logging.INFO), "%s", msg)

    return _Bridge()

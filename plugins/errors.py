"""The plugins' own exceptions, in a module that imports nothing heavy, so that
``trt_backend.errors`` can name them without loading onnx or numpy."""
from __future__ import annotations

from partitioner.errors import TrtBackendError


class SpecError(ValueError):
    """A Resize node the plugin cannot take; the message is the reason."""


class HostCompilerError(TrtBackendError):
    """The kernel source could not be compiled for the host."""

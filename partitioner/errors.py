"""User-facing exceptions. Everything a user can cause derives from :class:`TrtBackendError`;
anything else escaping the library is a bug in it."""
from __future__ import annotations


class TrtBackendError(Exception):
    """Root of every error a user can cause (bad model, bad options, bad feeds)."""


class ModelLoadError(TrtBackendError):
    """The model could not be read: missing file, not ONNX, truncated, missing external data."""


class InvalidModelError(TrtBackendError):
    """The model was read but is structurally unusable: cycle, duplicate names, empty graph..."""


class OptionsError(TrtBackendError):
    """An option or argument is invalid (unknown op type in exclusions, bad size, ...)."""


class ModelTooLargeError(TrtBackendError):
    """A model (or segment) exceeds protobuf's 2 GiB limit for one serialized message."""

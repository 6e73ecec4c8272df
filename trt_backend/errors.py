"""Every exception a user of trt_backend can catch, in one place.

The roots live in ``partitioner.errors`` (the lowest layer) and are re-exported here with the
plugins' own errors; everything trt_backend raises for a user's mistake derives from
:class:`TrtBackendError`, and the CLI prints it in one line."""
from __future__ import annotations

from collections.abc import Sequence

from partitioner.errors import (
    InvalidModelError,
    ModelLoadError,
    ModelTooLargeError,
    OptionsError,
    TrtBackendError,
)
from plugins.errors import HostCompilerError, SpecError
from plugins.nvrtc import NvrtcCompileError, NvrtcUnavailableError, PtxTooNewError


class ProfileError(OptionsError):
    """Profiles are missing, malformed, stale, or a shape falls outside them."""


class MissingProfileError(ProfileError):
    """A dynamic model input feeding the TensorRT part of a model has no profile."""


class CalibrationError(ProfileError):
    """Profiles could not be derived by running the model (e.g. random data it cannot take)."""


class CalibrationDataError(OptionsError):
    """int8 calibration data is missing, unreadable, or does not fit the model's inputs (names,
    dtypes, shapes, empty, NaN/inf)."""


class MemoryLimitError(OptionsError):
    """A tensor asked for would need more memory than this machine has available."""


class OutputError(OptionsError):
    """An output path cannot be written: its folder is missing or takes no new files, it is a
    folder where a file is asked for (or the other way round), or another process is writing it."""


class FeedError(TrtBackendError):
    """Feeds or requested outputs do not fit the model (names, types, dtypes, shapes)."""


class ArtifactError(TrtBackendError):
    """A build folder is missing, edited, corrupt or was built for another runtime or GPU."""


class SignatureError(ArtifactError):
    """A build folder is unsigned, or signed with another key, where a signing key is required."""


class WeightsReferenceError(ArtifactError):
    """A build folder that refers to its model's weights instead of copying them (built with
    ``weights_by_reference``) cannot use them: a file it refers to is missing, or its size,
    modification time or structure is not what the folder was built with."""


class ExportError(TrtBackendError):
    """A build cannot be exported as asked (e.g. a Triton model repository): names the segment or
    tensor that prevents it and why."""


class ReferenceRunError(TrtBackendError):
    """The reference (ONNX Runtime on the whole model) cannot load or run the model, so there is
    nothing to compare against."""


class ComparisonError(TrtBackendError):
    """Polygraphy refused the comparison (its comparator could not take the outputs); the message is its own."""


class PrecisionError(TrtBackendError):
    """The precision transform produced an invalid model (the segment can still build in fp32)."""


class PrecisionSearchError(TrtBackendError):
    """``--precision auto`` cannot meet the tolerance: an output differs from the reference even in
    fp32 (nondeterministic ops)."""


class SegmentLoadError(TrtBackendError):
    """A segment's runtime refused the segment (e.g. ONNX Runtime cannot load the model)."""


class SegmentRunError(TrtBackendError):
    """A segment failed while running (e.g. ONNX Runtime rejected the data)."""


class PlotError(OptionsError):
    """The plot cannot be drawn (matplotlib missing) or written."""


class BenchOptionsError(OptionsError):
    """A benchmark setting is invalid (durations, iterations, baseline names, shapes)."""


class TensorRTUnavailableError(TrtBackendError):
    """No usable TensorRT flavor could be imported."""


class CudaError(TrtBackendError):
    """A CUDA runtime call failed (no driver, no device, out of memory...)."""


class DeviceError(CudaError):
    """A session was asked for a GPU that does not exist here (or for one where there is none),
    or was handed a device array that lives on another GPU."""


class RequestError(TrtBackendError):
    """A served request cannot be read (body, dtype, shape) or was refused by the session; the
    message is one line (HTTP 400)."""


class ServeError(TrtBackendError):
    """Serving cannot start: Ray Serve is missing, or a deployment did not come up."""


class EngineCacheError(TrtBackendError):
    """The cache directory cannot be used, or an entry may not be loaded (host code)."""


class ParserCrashError(TrtBackendError):
    """The TensorRT parser died in the child process while checking the model."""


class BuilderCrashError(TrtBackendError):
    """TensorRT's builder crashed (a signal) building the model in a child process, where the
    build in this process would be the same build: nothing was built."""


class SegmentBuildError(TrtBackendError):
    """TensorRT would not parse or build a segment. ``nodes`` index the segment model's nodes
    TensorRT blamed (empty when it named none)."""

    def __init__(self, stage: str, nodes: Sequence[int], message: str, names: Sequence[str] = ()) -> None:
        super().__init__(f"TensorRT {stage} failed: {message}")
        self.stage = stage
        self.nodes = tuple(nodes)
        self.names = tuple(names)  # the blamed nodes' names (unique in normalized models)
        self.message = message


__all__ = [
    "ArtifactError",
    "BenchOptionsError",
    "BuilderCrashError",
    "CalibrationDataError",
    "CalibrationError",
    "ComparisonError",
    "CudaError",
    "DeviceError",
    "EngineCacheError",
    "ExportError",
    "FeedError",
    "HostCompilerError",
    "InvalidModelError",
    "MissingProfileError",
    "ModelLoadError",
    "MemoryLimitError",
    "ModelTooLargeError",
    "NvrtcCompileError",
    "NvrtcUnavailableError",
    "OptionsError",
    "OutputError",
    "ParserCrashError",
    "PlotError",
    "PrecisionError",
    "PrecisionSearchError",
    "ProfileError",
    "PtxTooNewError",
    "ReferenceRunError",
    "RequestError",
    "SegmentBuildError",
    "SegmentLoadError",
    "SegmentRunError",
    "ServeError",
    "SignatureError",
    "SpecError",
    "TensorRTUnavailableError",
    "TrtBackendError",
    "WeightsReferenceError",
]

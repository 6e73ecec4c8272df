"""Segment runners on ONNX Runtime: an ONNX Runtime segment, and a TensorRT segment emulated."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import onnx

from partitioner import Segment
from trt_backend.errors import SegmentRunError
from trt_backend.ort.options import OrtOptions
from trt_backend.ort.sessions import first_line, ort_errors, ort_session, quiet_run
from trt_backend.ort.values import NO_NUMPY_TYPES, shape_of, to_ort_value
from trt_backend.profiles import Profile
from trt_backend.profiles.node_arg import named_shapes
from trt_backend.runners.base import EMULATED, ONNXRUNTIME, SegmentRunner


class OnnxRuntimeRunner(SegmentRunner):
    """A segment run by an ONNX Runtime session created once, here."""

    executor: ClassVar[str] = ONNXRUNTIME

    def __init__(self, segment: Segment, model: onnx.ModelProto, options: OrtOptions,
                 profiles: Sequence[Profile] = (), shape_tensors: frozenset[str] = frozenset(), *,
                 weights_dir: str | None = None) -> None:
        super().__init__(segment, profiles, shape_tensors)
        self.model = model  # what runs (a precision search taps its tensors)
        self._session = ort_session(model, options, f"segment {segment.id} ({segment.backend})",
                                    weights_dir=weights_dir)
        ios = list(self._session.get_inputs()) + list(self._session.get_outputs())
        # ``run`` takes numpy arrays or OrtValues and hands numpy out without copying; dtypes
        # numpy lacks (bfloat16, float8, int4...) need OrtValues in and out.
        self._ort_values = any(a.type in NO_NUMPY_TYPES for a in ios)

    def run_impl(self, inputs: Sequence[Any], ort_run_options: Any = None) -> list[Any]:
        session = self._session  # One read: close() from another thread cannot pull it away mid-run.
        if session is None:
            raise SegmentRunError(f"{self.label} is closed (its Session was closed, or the runner replaced)")
        inputs = [v.to_host() if hasattr(v, "to_host") else v for v in inputs]  # device arrays: to the CPU
        ort_run_options = ort_run_options if ort_run_options is not None else quiet_run()
        try:
            if self._ort_values:
                feeds = {n: to_ort_value(v) for n, v in zip(self.input_names, inputs)}
                return list(session.run_with_ort_values(self.output_names, feeds, ort_run_options))
            return list(session.run(self.output_names, dict(zip(self.input_names, inputs)), ort_run_options))
        except ort_errors() as e:
            shapes = {name: shape_of(v) or np.shape(v) for name, v in zip(self.input_names, inputs)}
            raise SegmentRunError(f"{self.label} failed on inputs {named_shapes(shapes, most=4)}: "
                                  f"{first_line(e)}") from None

    def close(self) -> None:
        self._session = None


class EmulatedTensorRTRunner(OnnxRuntimeRunner):
    """A TensorRT segment run through ONNX Runtime on CPU, holding the segment to its
    profiles as an engine would."""

    executor: ClassVar[str] = EMULATED

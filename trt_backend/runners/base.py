"""Segment runners. One base class validates in :meth:`SegmentRunner.run` and leaves the work to
:meth:`SegmentRunner.run_impl`; runtimes load when a runner is made, never per run.

Values passed between runners are numpy arrays (ONNX Runtime hands them out without a copy),
``OrtValue`` tensors for dtypes numpy lacks (bfloat16, float8, int4...), lists (sequences) or
None (empty optionals), and on a GPU session device arrays (``__cuda_array_interface__``), whose
shapes count for the choice of profile as host shapes do. The runners that execute on a GPU
subclass :class:`SegmentRunner` and share its profile checks; choosing a runner is above them
all (:class:`trt_backend.runners.factory.RunnerFactory`)."""
from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from partitioner import Segment
from trt_backend.errors import ProfileError
from trt_backend.gpu.memory import as_device_array
from trt_backend.ort.values import shape_of, to_numpy
from trt_backend.profiles import Profile, covering_profile, describe_profile

log = logging.getLogger(__name__)

ONNXRUNTIME, EMULATED, TENSORRT = "onnxruntime", "emulated", "tensorrt"


# ------------------------------------------------------------------ values


# ------------------------------------------------------------------ runners

class SegmentRunner(ABC):
    """Runs one segment. ``run`` checks what it is given (and, for TensorRT-role runners, that
    the shapes fit one of the segment's profiles, as an engine would demand), then calls
    ``run_impl``."""

    executor: ClassVar[str] = "?"

    def __init__(self, segment: Segment, profiles: Sequence[Profile] = (),
                 shape_tensors: frozenset[str] = frozenset()) -> None:
        self.segment = segment
        self.input_names = tuple(segment.inputs)
        self.output_names = tuple(segment.outputs)
        self.profiles = list(profiles)
        self.shape_tensors = shape_tensors
        self._fits: dict[Any, int] = {}  # input shapes (and shape-tensor values) -> fitting profile
        self._fits_by_shapes: dict[tuple[Any, ...], int] = {}  # the same for numpy inputs, by their shapes alone

    def __repr__(self) -> str:
        return f"<{type(self).__name__} segment {self.segment.id} ({self.segment.backend}, {self.executor})>"

    @property
    def label(self) -> str:
        return f"segment {self.segment.id} ({self.segment.backend}, executor {self.executor})"

    def run(self, inputs: Sequence[Any], ort_run_options: Any = None) -> list[Any]:
        """Outputs for ``inputs`` (in ``input_names`` order). ``ort_run_options``: an
        ``onnxruntime.RunOptions`` for runners that run ONNX Runtime (others ignore it)."""
        if len(inputs) != len(self.input_names):
            raise ValueError(f"{self.label}: got {len(inputs)} input(s), expected {len(self.input_names)}")
        inputs = self.stage(inputs)
        if self.profiles:
            self.select_profile(inputs)
        # Runners written before run options existed take the inputs alone.
        outputs = self.run_impl(inputs) if ort_run_options is None else self.run_impl(inputs, ort_run_options)
        if len(outputs) != len(self.output_names):
            raise RuntimeError(f"{self.label}: produced {len(outputs)} output(s), expected {len(self.output_names)}")
        return outputs

    def stage(self, inputs: Sequence[Any]) -> Sequence[Any]:
        """The inputs as :meth:`run_impl` takes them (a runner that needs some on the host moves
        them there here, before the profile is chosen from them)."""
        return inputs

    def select_profile(self, inputs: Sequence[Any]) -> int:
        """Index of the first profile that fits every input; ProfileError when none does."""
        fast = None
        if not self.shape_tensors and all(type(v) is np.ndarray for v in inputs):  # (the serving loop's case)
            fast = tuple(v.shape for v in inputs)
            k = self._fits_by_shapes.get(fast)
            if k is not None:
                return k
        shapes: dict[str, tuple[int, ...]] = {}
        values: dict[str, tuple[int, ...]] = {}
        for name, value in zip(self.input_names, inputs):
            shape = shape_of(value)
            if shape is not None:
                shapes[name] = shape
                if name in self.shape_tensors:
                    view = as_device_array(value)
                    host = view.to_host() if view is not None else np.asarray(to_numpy(value))
                    values[name] = tuple(int(v) for v in host.reshape(-1))
        key = (tuple(shapes.items()), tuple(values.items()))
        k = self._fits.get(key)
        if k is not None:
            return k
        k = covering_profile(self.profiles, shapes, values)
        if k is not None:
            if len(self._fits) < 256:  # a serving loop sees few distinct shapes; bounded all the same
                self._fits[key] = k
                if fast is not None:
                    self._fits_by_shapes[fast] = k
            return k

        def misfits(n: str, p: Profile) -> bool:
            return n in p and (not p[n].covers(shapes[n]) or (n in values and not p[n].covers_values(values[n])))

        def refused_by_all(n: str) -> bool:
            bounding = [p for p in self.profiles if n in p]
            return bool(bounding) and all(misfits(n, p) for p in bounding)

        # name an input no profile takes, if there is one (else the first that some profile refuses)
        name = next((n for n in shapes if refused_by_all(n)), None) \
            or next(n for n in shapes if any(misfits(n, p) for p in self.profiles))
        allowed = "; ".join(f"profile {i}: {describe_profile(p[name])}"
                            for i, p in enumerate(self.profiles) if name in p)
        got = f"shape {shapes[name]}" + (f" and values {values[name]}" if name in values else "")
        if name in values and all(p[name].covers(shapes[name]) for p in self.profiles if name in p):
            raise ProfileError(f"{self.label}: input '{name}' has values {values[name]}, outside those its profiles "
                               f"were built for ({allowed}): TensorRT reads it as a shape, so its values are part of "
                               "the engine's profile; build with inputs (or profile values) that span them")
        raise ProfileError(f"{self.label}: input '{name}' has {got}, outside its profiles ({allowed}). Its shape "
                           f"depends on data or on inputs the profiles do not bound; give '{name}' a profile, e.g. "
                           f"profiles=[{{..., '{name}': (min_shape, opt_shape, max_shape)}}]")

    @abstractmethod
    def run_impl(self, inputs: Sequence[Any], ort_run_options: Any = None) -> list[Any]:
        """Run on validated inputs (in ``input_names`` order); outputs in ``output_names`` order."""

    def close(self) -> None:  # noqa: B027 - optional: runners without resources keep this one
        """Release runtime resources."""



"""An ONNX Runtime segment on the CUDA execution provider, bound with IOBinding to device
buffers on our stream: device inputs are read in place, outputs stay on the device as
:class:`DeviceArray` views of ONNX Runtime's own OrtValues. Needs onnxruntime-gpu and a GPU."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import onnx

from partitioner import Segment
from trt_backend.errors import SegmentLoadError, SegmentRunError
from trt_backend.gpu import device as dev
from trt_backend.ort.options import OrtOptions
from trt_backend.ort.sessions import first_line, ort_errors, ort_session
from trt_backend.ort.values import to_numpy
from trt_backend.profiles import Profile
from trt_backend.runners.base import ONNXRUNTIME, SegmentRunner

# onnxruntime names this module uses (checked by tests/trt_backend/gpu/test_device.py on CPU)
ORT_API = ("InferenceSession.io_binding", "InferenceSession.run_with_iobinding", "IOBinding.bind_input",
           "IOBinding.bind_output", "IOBinding.bind_cpu_input", "IOBinding.get_outputs", "IOBinding.clear_binding_inputs",
           "IOBinding.clear_binding_outputs", "OrtValue.data_ptr", "OrtValue.shape", "OrtValue.element_type",
           "OrtValue.ortvalue_from_numpy", "get_available_providers")


def cuda_provider_available() -> bool:
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


class OrtCudaRunner(SegmentRunner):
    executor: ClassVar[str] = ONNXRUNTIME

    def __init__(self, segment: Segment, model: onnx.ModelProto, options: OrtOptions, stream: dev.Stream,
                 profiles: Sequence[Profile] = (), shape_tensors: frozenset[str] = frozenset(),
                 device_id: int = 0, *, weights_dir: str | None = None) -> None:
        super().__init__(segment, profiles, shape_tensors)
        dev.use_device(device_id)
        if not cuda_provider_available():
            raise SegmentLoadError(f"{self.label}: this onnxruntime has no CUDAExecutionProvider "
                                   "(pip install onnxruntime-gpu)")
        cuda = ("CUDAExecutionProvider", {"device_id": str(device_id), "has_user_compute_stream": "1",
                                          "user_compute_stream": str(stream.ptr)})
        opts = dataclasses.replace(options, providers=(cuda, "CPUExecutionProvider"))
        self._session = ort_session(model, opts, f"segment {segment.id} ({segment.backend})", weights_dir=weights_dir)
        self.stream = stream
        self.device_id = device_id
        self._types = {i.name: i.type for i in self._session.get_inputs()}

    def run_impl(self, inputs: Sequence[Any], ort_run_options: Any = None) -> list[Any]:
        dev.use_device(self.device_id)
        binding = self._session.io_binding()
        held: list[Any] = []
        for name, value in zip(self.input_names, inputs):
            view = dev.as_device_array(value)
            if view is not None:
                binding.bind_input(name, "cuda", self.device_id, view.dtype, list(view.shape), view.ptr)
                held.append(view)
            else:  # host value: ONNX Runtime copies it to the device itself
                arr = np.ascontiguousarray(to_numpy(value))
                held.append(arr)
                binding.bind_cpu_input(name, arr)
        for name in self.output_names:
            binding.bind_output(name, "cuda", self.device_id)
        try:
            self._session.run_with_iobinding(binding, ort_run_options)
        except ort_errors() as e:
            raise SegmentRunError(f"{self.label} failed: {first_line(e)}") from None
        outputs = []
        for value in binding.get_outputs():
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(value.element_type()))
            outputs.append(dev.DeviceArray(value.data_ptr(), tuple(value.shape()), dtype, owner=value,
                                           stream=self.stream, device_id=self.device_id))
        return outputs

    def close(self) -> None:
        self._session = None

"""An ONNX Runtime segment on the CUDA execution provider, on a stream of its own handed to ONNX
Runtime (``user_compute_stream``). Segments whose inputs and outputs are all numeric tensors are
bound with IOBinding: device inputs are read in place (after the stream producing them), outputs
stay on the device as :class:`DeviceArray` views of ONNX Runtime's own OrtValues. Segments with
sequences, maps, optionals or strings run through ``InferenceSession.run`` with host values (ONNX
Runtime moves what its CUDA kernels need), as the CPU path does. Needs onnxruntime-gpu and a GPU.

ONNX Runtime checks: ``get_available_providers()`` lists what the wheel was built with, not what
loads (a CUDA provider whose libraries are missing falls back to the CPU with a printed banner),
so the session's own ``get_providers()`` must hold the CUDA provider and its provider options
the stream; and the Python ``InferenceSession`` re-creates a session without provider options
when a run fails in a provider (its "fallback"), which would drop the stream: it is disabled."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import onnx

from partitioner import Segment
from trt_backend.errors import SegmentLoadError, SegmentRunError
from trt_backend.gpu import device as dev
from trt_backend.gpu import memory as mem
from trt_backend.ort.options import OrtOptions
from trt_backend.ort.sessions import first_line, ort_errors, ort_session
from trt_backend.ort.values import is_ml_dtype, to_numpy, to_ort_value
from trt_backend.profiles import Profile
from trt_backend.runners.base import ONNXRUNTIME, SegmentRunner

# onnxruntime names this module uses (checked by tests/trt_backend/gpu/test_device.py on CPU)
ORT_API = ("InferenceSession.io_binding", "InferenceSession.run_with_iobinding", "InferenceSession.run",
           "InferenceSession.get_providers", "InferenceSession.get_provider_options",
           "InferenceSession.disable_fallback", "IOBinding.bind_input", "IOBinding.bind_output",
           "IOBinding.bind_cpu_input", "IOBinding.get_outputs", "IOBinding.clear_binding_inputs",
           "IOBinding.clear_binding_outputs", "OrtValue.data_ptr", "OrtValue.shape", "OrtValue.element_type",
           "OrtValue.ortvalue_from_numpy", "get_available_providers")
CUDA = "CUDAExecutionProvider"


def cuda_provider_available() -> bool:
    import onnxruntime as ort

    return CUDA in ort.get_available_providers()


def device_bindable(type_text: str) -> bool:
    """Whether an ONNX Runtime input/output of this type (``NodeArg.type``) can be bound to device
    memory: numeric tensors only (not strings, sequences, maps or optionals)."""
    return type_text.startswith("tensor(") and type_text != "tensor(string)"


class OrtCudaRunner(SegmentRunner):
    executor: ClassVar[str] = ONNXRUNTIME

    def __init__(self, segment: Segment, model: onnx.ModelProto, options: OrtOptions, profiles: Sequence[Profile] = (),
                 shape_tensors: frozenset[str] = frozenset(), device_id: int = 0, *, weights_dir: str | None = None,
                 stream: dev.Stream | None = None) -> None:
        super().__init__(segment, profiles, shape_tensors)
        dev.use_device(device_id)
        if not cuda_provider_available():
            raise SegmentLoadError(f"{self.label}: this onnxruntime has no CUDAExecutionProvider "
                                   "(pip install onnxruntime-gpu)")
        self.device_id = device_id
        self._own_stream = stream is None
        self.stream = stream if stream is not None else dev.Stream(device_id)
        self._session: Any = None
        try:
            self._session = self._open(model, options, weights_dir)
        except BaseException:
            self.close()
            raise
        ios = list(self._session.get_inputs()) + list(self._session.get_outputs())
        self.bound = all(device_bindable(a.type) for a in ios)  # else: host values through run()

    def _open(self, model: onnx.ModelProto, options: OrtOptions, weights_dir: str | None) -> Any:
        stream = str(self.stream.ptr)
        cuda = (CUDA, {"device_id": str(self.device_id), "has_user_compute_stream": "1", "user_compute_stream": stream})
        opts = dataclasses.replace(options, providers=(cuda, "CPUExecutionProvider"))
        session = ort_session(model, opts, self.label, weights_dir=weights_dir)
        session.disable_fallback()
        got = list(session.get_providers())
        if CUDA not in got:
            raise SegmentLoadError(f"{self.label}: ONNX Runtime did not give the segment its CUDA provider (it runs on "
                                   f"{', '.join(got)}): the CUDA provider failed to load (CUDA or cuDNN libraries "
                                   "missing or of another version?)")
        given = session.get_provider_options().get(CUDA, {}).get("user_compute_stream")
        if given is not None and str(given) != stream:
            raise SegmentLoadError(f"{self.label}: ONNX Runtime's CUDA provider runs on stream {given}, not the "
                                   f"session's {stream}")
        return session

    def run_impl(self, inputs: Sequence[Any], ort_run_options: Any = None) -> list[Any]:
        session = self._session
        if session is None:
            raise SegmentRunError(f"{self.label} is closed (its Session was closed, or the runner replaced)")
        dev.use_device(self.device_id)
        if not self.bound:
            return self._run_host(session, inputs, ort_run_options)
        binding = session.io_binding()
        held: list[Any] = []
        producers: list[Any] = []  # the streams of device inputs made on others
        try:
            for name, value in zip(self.input_names, inputs):
                view = mem.as_device_array(value)
                if view is not None:
                    if view.stream is not None:
                        self.stream.wait_for(view.stream)  # ONNX Runtime reads it on its stream
                        producers.append(view.stream)
                    # (its element type as ONNX's number: ONNX Runtime converts a numpy dtype by
                    # numpy's type number, which bfloat16, float8 and int4 from ml_dtypes lack;
                    # onnxruntime_pybind_iobinding.cc, IOBinding.bind_input's documentation)
                    binding.bind_input(name, "cuda", self.device_id, onnx.helper.np_dtype_to_tensor_dtype(view.dtype),
                                       list(view.shape), view.ptr)
                    held.append(view)
                else:  # host value: ONNX Runtime copies it to the device itself
                    arr = np.ascontiguousarray(to_numpy(value))
                    if is_ml_dtype(arr.dtype):  # (as an OrtValue of its ONNX type)
                        ort_value = to_ort_value(arr)
                        held.append(ort_value)
                        binding.bind_ortvalue_input(name, ort_value)
                    else:
                        held.append(arr)
                        binding.bind_cpu_input(name, arr)
            for name in self.output_names:
                binding.bind_output(name, "cuda", self.device_id)
            session.run_with_iobinding(binding, ort_run_options)
        except ort_errors() as e:
            raise SegmentRunError(f"{self.label} failed: {first_line(e)}") from None
        for producer in producers:  # their memory is reused there once given back: after these reads
            dev.order_reuse_after(producer, self.stream)
        outputs = []
        for value in binding.get_outputs():
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(value.element_type()))
            outputs.append(mem.DeviceArray(value.data_ptr(), tuple(value.shape()), dtype, owner=value,
                                           stream=self.stream, device_id=self.device_id))
        return outputs

    def _run_host(self, session: Any, inputs: Sequence[Any], ort_run_options: Any) -> list[Any]:
        feeds = {}
        for name, value in zip(self.input_names, inputs):
            view = mem.as_device_array(value)
            feeds[name] = view.to_host() if view is not None else value
        try:
            return list(session.run(self.output_names, feeds, ort_run_options))
        except ort_errors() as e:
            raise SegmentRunError(f"{self.label} failed: {first_line(e)}") from None

    def close(self) -> None:
        self._session = None
        if self._own_stream and self.stream is not None:
            self.stream.close()
            self.stream = None  # type: ignore[assignment]

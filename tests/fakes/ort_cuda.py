"""ONNX Runtime's CUDA execution provider at the GPU boundary, over the contract-strict CUDA fake: a
real ONNX Runtime CPU session computes, and what the CUDA provider would do with device memory
is done on the fake's memory, with its rules.

As ONNX Runtime documents and does it (onnxruntime's Python ``InferenceSession``/``IOBinding``;
the CUDA provider options ``has_user_compute_stream``/``user_compute_stream``; I/O Binding docs):
- the session runs its CUDA work on the ``user_compute_stream`` it was given, so device inputs
  bound with ``bind_input`` are read on that stream (the fake checks the read is ordered after
  their producer) and bound device outputs are written there, in memory ONNX Runtime allocates
  and frees when the OrtValue goes;
- only tensors of numeric types can be bound to device memory: a sequence, map or optional, or a
  string tensor, bound to ``cuda`` fails the run; a host array bound where the model wants a
  sequence fails as an unexpected input type;
- ``get_providers()`` and ``get_provider_options()`` say what the session really got.

Install with :meth:`FakeOrtCuda.install` (``trt_backend.runners.ort_cuda``'s session maker and
its check for the provider)."""
from __future__ import annotations

import ctypes
import dataclasses
import weakref
from typing import Any

import numpy as np
import onnx

from tests.fakes.cuda_runtime import ContractViolation, FakeCudaRuntime

CUDA = "CUDAExecutionProvider"


class FakeOrtCuda:
    def __init__(self, cuda: FakeCudaRuntime) -> None:
        self.cuda = cuda
        self.sessions: list[_Session] = []

    def install(self, monkeypatch: Any) -> FakeOrtCuda:
        from trt_backend.runners import ort_cuda

        monkeypatch.setattr(ort_cuda, "ort_session", self.session)
        monkeypatch.setattr(ort_cuda, "cuda_provider_available", lambda: True)
        return self

    def session(self, model: onnx.ModelProto, options: Any, what: str, *, weights_dir: str | None = None) -> _Session:
        from trt_backend.ort.sessions import ort_session

        cuda_options = next((dict(p[1]) for p in options.providers if isinstance(p, tuple) and p[0] == CUDA), None)
        cpu = ort_session(model, dataclasses.replace(options, providers=("CPUExecutionProvider",)), what,
                          weights_dir=weights_dir)
        s = _Session(self.cuda, cpu, cuda_options)
        self.sessions.append(s)
        return s


class _Session:
    def __init__(self, cuda: FakeCudaRuntime, cpu: Any, cuda_options: dict[str, str] | None) -> None:
        self.cuda, self.cpu, self.cuda_options = cuda, cpu, cuda_options
        self.fallback = True
        self.runs = 0

    def get_inputs(self) -> Any:
        return self.cpu.get_inputs()

    def get_outputs(self) -> Any:
        return self.cpu.get_outputs()

    def get_providers(self) -> list[str]:
        return ([CUDA] if self.cuda_options is not None else []) + ["CPUExecutionProvider"]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {**({CUDA: dict(self.cuda_options)} if self.cuda_options is not None else {}),
                "CPUExecutionProvider": {}}

    def disable_fallback(self) -> None:
        self.fallback = False

    @property
    def stream(self) -> int:
        assert self.cuda_options is not None
        return int(self.cuda_options["user_compute_stream"])

    @property
    def device(self) -> int:
        assert self.cuda_options is not None
        return int(self.cuda_options["device_id"])

    def run(self, output_names: Any, feeds: dict[str, Any], run_options: Any = None) -> list[Any]:
        self.runs += 1
        return self.cpu.run(output_names, feeds, run_options)

    def io_binding(self) -> _Binding:
        return _Binding(self)

    def run_with_iobinding(self, binding: _Binding, run_options: Any = None) -> None:
        types = {a.name: a.type for a in list(self.get_inputs()) + list(self.get_outputs())}
        feeds = {}
        for name, (where, value) in binding.inputs.items():
            if where == "cpu":
                if not types[name].startswith("tensor("):
                    raise RuntimeError(f"Unexpected input data type for '{name}': a tensor, "
                                       f"the model wants {types[name]}")
                feeds[name] = value
                continue
            ptr, shape, dtype = value
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if nbytes:
                self.cuda.device_access(ptr, nbytes, self.stream, False, f"ONNX Runtime reading input '{name}'",
                                        device=self.device)
            raw = ctypes.string_at(ptr, nbytes) if nbytes else b""
            feeds[name] = np.frombuffer(raw, dtype).reshape(shape).copy()
        for name in binding.outputs:
            if not types[name].startswith("tensor(") or types[name] == "tensor(string)":
                raise RuntimeError(f"output '{name}' of type {types[name]} cannot be bound to a CUDA device")
        self.runs += 1
        results = self.cpu.run(list(binding.outputs), feeds, run_options)
        binding.values = [_DeviceValue(self, np.ascontiguousarray(r)) for r in results]


class _Binding:
    def __init__(self, session: _Session) -> None:
        self.session = session
        self.inputs: dict[str, tuple[str, Any]] = {}
        self.outputs: list[str] = []
        self.values: list[_DeviceValue] = []

    def bind_input(self, name: str, device_type: str, device_id: int, element_type: Any, shape: Any,
                   buffer_ptr: int) -> None:
        if device_type != "cuda" or device_id != self.session.device:
            raise ContractViolation(f"bind_input('{name}') on {device_type}:{device_id}; the session is on "
                                    f"cuda:{self.session.device}")
        self.inputs[name] = ("cuda", (int(buffer_ptr), tuple(shape), np.dtype(element_type)))

    def bind_cpu_input(self, name: str, arr: Any) -> None:
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"bind_cpu_input('{name}'): expected a numpy array, got {type(arr).__name__}")
        self.inputs[name] = ("cpu", arr)

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0) -> None:
        self.outputs.append(name)

    def get_outputs(self) -> list[_DeviceValue]:
        return list(self.values)

    def clear_binding_inputs(self) -> None:
        self.inputs.clear()

    def clear_binding_outputs(self) -> None:
        self.outputs.clear()


class _DeviceValue:
    """An OrtValue in (fake) device memory, freed by ONNX Runtime's allocator when dropped."""

    def __init__(self, session: _Session, value: np.ndarray) -> None:
        cuda = session.cuda
        self._shape, self._elem = value.shape, onnx.helper.np_dtype_to_tensor_dtype(value.dtype)
        self._ptr = int(cuda.cudaMalloc(max(1, value.nbytes))[1])
        cuda.device_access(self._ptr, max(1, value.nbytes), session.stream, True, "ONNX Runtime writing an output",
                           device=session.device)
        if value.nbytes:
            ctypes.memmove(self._ptr, value.ctypes.data, value.nbytes)
        weakref.finalize(self, cuda.cudaFree, self._ptr)

    def data_ptr(self) -> int:
        return self._ptr

    def shape(self) -> list[int]:
        return list(self._shape)

    def element_type(self) -> int:
        return int(self._elem)

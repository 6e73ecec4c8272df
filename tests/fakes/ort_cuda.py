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
- ``bind_input``'s element type is a numpy dtype or ONNX's number for the type; a numpy dtype is
  converted by numpy's type number, so ml_dtypes' bfloat16, float8 and int4 fail there, as
  ``bind_cpu_input`` of such an array does (``onnxruntime_pybind_iobinding.cc``:
  "Numpy_type N can't be converted to MLDataType"); an OrtValue of any type binds with
  ``bind_ortvalue_input``;
- outputs live in the provider's arena: an OrtValue dropped gives its memory back at once, with
  no synchronization, and the next output of the session's stream may take it (the CUDA
  provider's BFC arena is stream-ordered on its own stream only), so whoever read it on another
  stream must have ordered the session's stream after that read;
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
from trt_backend.ort.values import to_ort_value

CUDA = "CUDAExecutionProvider"


class FakeOrtCuda:
    def __init__(self, cuda: FakeCudaRuntime) -> None:
        self.cuda = cuda
        self._sessions: list[weakref.ref[_Session]] = []

    @property
    def sessions(self) -> list[_Session]:
        """The sessions made and still alive (a session freed frees its arena)."""
        return [s for s in (ref() for ref in self._sessions) if s is not None]

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
        self._sessions.append(weakref.ref(s))
        return s


class _Arena:
    """The CUDA provider's memory arena: blocks given back are reused at once, unsynchronized;
    freed (cudaFree) when the session goes."""

    def __init__(self, cuda: FakeCudaRuntime) -> None:
        self.cuda = cuda
        self.free: list[tuple[int, int]] = []  # (ptr, size)
        self.closed = False

    def take(self, nbytes: int) -> int:
        size = max(256, -(-nbytes // 256) * 256)
        for k, (ptr, have) in enumerate(self.free):
            if have >= size:
                del self.free[k]
                return ptr
        return int(self.cuda.cudaMalloc(size)[1])

    def give_back(self, ptr: int, nbytes: int) -> None:
        if self.closed:
            self.cuda.cudaFree(ptr)
        else:
            self.free.append((ptr, max(256, -(-nbytes // 256) * 256)))

    def close(self) -> None:
        self.closed = True
        blocks, self.free = self.free, []
        for ptr, _ in blocks:
            self.cuda.cudaFree(ptr)


class _Session:
    def __init__(self, cuda: FakeCudaRuntime, cpu: Any, cuda_options: dict[str, str] | None) -> None:
        self.cuda, self.cpu, self.cuda_options = cuda, cpu, cuda_options
        self.fallback = True
        self.runs = 0
        self.arena = _Arena(cuda)
        weakref.finalize(self, self.arena.close)

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
            if where == "ortvalue":
                feeds[name] = value
                continue
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
            feeds[name] = to_ort_value(np.frombuffer(raw, dtype).reshape(shape).copy())
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
        if isinstance(element_type, (int, np.integer)):  # ONNX's number for the type
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(element_type)))
        else:
            dtype = _numpy_typed(np.dtype(element_type))
        self.inputs[name] = ("cuda", (int(buffer_ptr), tuple(shape), dtype))

    def bind_cpu_input(self, name: str, arr: Any) -> None:
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"bind_cpu_input('{name}'): expected a numpy array, got {type(arr).__name__}")
        _numpy_typed(arr.dtype)
        self.inputs[name] = ("cpu", arr)

    def bind_ortvalue_input(self, name: str, value: Any) -> None:
        import onnxruntime as ort

        if not isinstance(value, ort.OrtValue):
            raise TypeError(f"bind_ortvalue_input('{name}'): expected an OrtValue, got {type(value).__name__}")
        self.inputs[name] = ("ortvalue", value)

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0) -> None:
        self.outputs.append(name)

    def get_outputs(self) -> list[_DeviceValue]:
        return list(self.values)

    def clear_binding_inputs(self) -> None:
        self.inputs.clear()

    def clear_binding_outputs(self) -> None:
        self.outputs.clear()


def _numpy_typed(dtype: np.dtype) -> np.dtype:
    """``dtype`` where ONNX Runtime's numpy conversion takes it (by numpy's type number)."""
    if dtype.type.__module__ != "numpy":
        raise RuntimeError(f"Numpy_type {dtype.num} can't be converted to MLDataType.")
    return dtype


class _DeviceValue:
    """An OrtValue in (fake) device memory of the session's arena, given back when dropped."""

    def __init__(self, session: _Session, value: np.ndarray) -> None:
        cuda = session.cuda
        self._shape, self._elem = value.shape, onnx.helper.np_dtype_to_tensor_dtype(value.dtype)
        self._ptr = session.arena.take(max(1, value.nbytes))
        cuda.device_access(self._ptr, max(1, value.nbytes), session.stream, True, "ONNX Runtime writing an output",
                           device=session.device)
        if value.nbytes:
            ctypes.memmove(self._ptr, value.ctypes.data, value.nbytes)
        weakref.finalize(self, session.arena.give_back, self._ptr, max(1, value.nbytes))

    def data_ptr(self) -> int:
        return self._ptr

    def shape(self) -> list[int]:
        return list(self._shape)

    def element_type(self) -> int:
        return int(self._elem)

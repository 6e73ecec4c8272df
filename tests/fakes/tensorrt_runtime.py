"""A contract-strict fake of TensorRT's runtime (``Runtime``, ``ICudaEngine``, ``IExecutionContext``
and, for TensorRT-RTX, ``IRuntimeConfig``/``IRuntimeCache`` and ``get_engine_validity``) over
:class:`~tests.fakes.cuda_runtime.FakeCudaRuntime`. An engine computes its segment's ONNX model
through ONNX Runtime on the CPU, reading the device memory the code under test bound and
writing outputs where it said, so results are checked for real. Enums, ``nptype`` and the
``IOutputAllocator`` base class are the installed TensorRT-RTX module's own.

Every documented precondition is enforced; a call TensorRT documents as returning false returns
False and logs the error through the runtime's logger (as TensorRT does), and is also recorded
in :attr:`FakeTensorRT.violations`, which a test's teardown asserts empty unless the test
provoked the failure on purpose (:meth:`FakeTensorRT.expect`). Undefined behaviour raises
:class:`~tests.fakes.cuda_runtime.ContractViolation` at once. The rules and their sources:

- ``setOptimizationProfileAsync`` must precede ``setInputShape`` for every dynamic input; it
  returns false for an index out of range; the application must order the enqueue stream after
  the stream the profile was set on (NvInferRuntime.h, ``IExecutionContext::setOptimizationProfileAsync``;
  Polygraphy's ``TrtRunner.set_profile`` fails when it returns false).
- ``setInputShape`` returns false for a name that is not an input, a rank or a fixed dimension
  that disagrees with the engine, or dimensions outside the context's current profile
  (NvInferRuntime.h, ``setInputShape``; shape tensors' values are checked against
  ``getProfileTensorValues`` at enqueue).
- ``setTensorAddress``: false for an unknown name or a device address not 256-byte aligned ("The
  pointer must have at least 256-byte alignment"; a kHOST shape tensor is held to its elements'
  alignment only, since Torch-TensorRT's runtime binds plain numpy buffers there and TensorRT
  takes them); before ``enqueueV3`` each input needs a
  non-null address and each output an address or an ``IOutputAllocator``; a tensor whose
  ``TensorLocation`` is kHOST (shape tensors) takes a host pointer, kDEVICE ones a device buffer
  of sufficient size (NvInferRuntime.h, ``setTensorAddress``). Torch-TensorRT's Python runtime
  hands shape tensors as host (numpy) pointers for the same reason.
- ``IOutputAllocator::reallocateOutputAsync`` is called for an output with an allocator once its
  size is known (size always positive, even for an empty tensor), must return memory of that
  size and alignment, and ``notifyShape`` follows before ``enqueueV3`` returns.
- ``enqueueV3``: the stream must be a live stream of the engine's GPU, which must be current
  (a kernel launch fails on another device's stream: CUDA Programming Guide, "Stream and Event
  Behavior"); one context runs one enqueue at a time (its device memory is reused), so an
  enqueue on a second stream must be ordered after the first; memory bound to tensors must not
  be modified or released before the stream is synchronized (NvInferRuntime.h, ``enqueueV3``).
- TensorRT-RTX compiles a context's kernels when it is created unless the ``IRuntimeConfig`` it
  is created with carries an ``IRuntimeCache`` that already holds them; a serialized cache loads
  only into the same GPU and version (``IRuntimeCache.deserialize``); ``get_engine_validity``
  tells before deserializing whether an engine runs here (TensorRT-RTX Python API).
- A plan built for other compute capabilities, or by another TensorRT version, does not
  deserialize (returns None), except a version-compatible plan on a newer runtime of the same
  major version: one with its lean runtime embedded needs ``engine_host_code_allowed``, one
  without it a runtime from ``Runtime.load_runtime`` (TensorRT developer guide, "Version
  Compatibility")."""
from __future__ import annotations

import ctypes
import json
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, cast

import numpy as np
import onnx

from tests.fakes.cuda_runtime import ContractViolation, FakeCudaRuntime, _covers
from trt_backend.profiles import tensor_profile

MAGIC = b"FAKE-TENSORRT-PLAN\n"
RTX_DEFAULT_SMS = (80, 86, 89, 120)  # TensorRT-RTX builds for these unless told otherwise

_TRT_TYPES: dict[int, str] = {
    onnx.TensorProto.FLOAT: "FLOAT", onnx.TensorProto.FLOAT16: "HALF", onnx.TensorProto.BFLOAT16: "BF16",
    onnx.TensorProto.INT8: "INT8", onnx.TensorProto.INT32: "INT32", onnx.TensorProto.INT64: "INT64",
    onnx.TensorProto.BOOL: "BOOL", onnx.TensorProto.UINT8: "UINT8",
    onnx.TensorProto.FLOAT8E4M3FN: "FP8", onnx.TensorProto.INT4: "INT4",
    onnx.TensorProto.FLOAT4E2M1: "FP4"}
_BITS = {"INT4": 4, "FP4": 4, "FP8": 8, "HALF": 16, "BF16": 16, "INT64": 64}


@dataclass
class FakePlan:
    """What a fake serialized engine holds. ``profiles``: per profile, input name -> (min, opt, max)
    or ``{"min", "opt", "max", "values"}`` (shape tensors: their values' range); ``host_inputs``:
    shape tensors (kHOST); ``sms``: compute capabilities it runs on (RTX); ``version``: the
    TensorRT version that built it; ``activation_bytes``: device memory one context needs per
    profile."""

    model: onnx.ModelProto
    profiles: Sequence[Mapping[str, Any]] = ()
    host_inputs: tuple[str, ...] = ()
    sms: tuple[int, ...] = RTX_DEFAULT_SMS
    version: str = "1.7.0"
    version_compatible: bool = False
    lean_runtime_embedded: bool = False
    activation_bytes: int = 1 << 16
    dtypes: Mapping[str, str] = field(default_factory=dict)

    def serialize(self) -> bytes:
        header = {"profiles": [{n: tensor_profile(v, n).to_dict() for n, v in p.items()} for p in self.profiles],
                  "host_inputs": list(self.host_inputs), "sms": list(self.sms), "version": self.version,
                  "version_compatible": self.version_compatible, "lean": self.lean_runtime_embedded,
                  "activation_bytes": self.activation_bytes, "dtypes": dict(self.dtypes)}
        return MAGIC + json.dumps(header).encode() + b"\n" + self.model.SerializeToString()

    @staticmethod
    def parse(data: bytes) -> tuple[dict[str, Any], onnx.ModelProto] | None:
        data = bytes(data)
        if not data.startswith(MAGIC):
            return None
        header, _, model = data[len(MAGIC):].partition(b"\n")
        return json.loads(header), onnx.load_from_string(model)


class FakeTensorRT:
    """A TensorRT module whose runtime is the fake. ``rtx``: TensorRT-RTX's runtime API (runtime
    configs and caches, engine validity, compile on context creation); ``version``: the runtime's."""

    def __init__(self, cuda: FakeCudaRuntime, *, rtx: bool = True, version: str = "1.7.0") -> None:
        import tensorrt_rtx as real

        self.cuda = cuda
        self.real = real
        self.rtx = rtx
        self.__name__ = "tensorrt_rtx" if rtx else "tensorrt"
        self.__version__ = version
        for name in ("TensorIOMode", "TensorLocation", "DataType", "IOutputAllocator", "ILogger", "Logger", "nptype",
                     "ExecutionContextAllocationStrategy", "EngineValidity", "EngineInvalidityDiagnostics"):
            setattr(self, name, getattr(real, name))
        self.Runtime = type("Runtime", (_RtxRuntime if rtx else _Runtime,), {"trt": self})
        self.ICudaEngine = _RtxEngine if rtx else _Engine
        self.IExecutionContext = _Context
        if rtx:
            self.IRuntimeConfig = _RuntimeConfig
            self.IRuntimeCache = _RuntimeCache
        self.violations: list[str] = []
        self._expected: list[str] = []
        self.contexts_created = 0
        self.context_bytes: list[int] = []  # device memory each context allocated when made
        self.compiles = 0  # TensorRT-RTX kernel compilations (context creations without a warm runtime cache)
        self.lock = threading.Lock()

    def module(self) -> ModuleType:
        return cast(ModuleType, self)  # the fake stands in for the tensorrt module

    def violate(self, logger: Any, message: str) -> bool:
        """Record a documented failure, log it as TensorRT does, and return False."""
        with self.lock:
            self.violations.append(message)
        if logger is not None:
            logger.log(self.real.ILogger.Severity.ERROR, message)
        return False

    def expect(self, fragment: str) -> None:
        """The test provokes a failure whose message contains ``fragment``."""
        self._expected.append(fragment)

    def unexpected(self) -> list[str]:
        return [v for v in self.violations if not any(f in v for f in self._expected)]


class _Runtime:
    trt: FakeTensorRT
    engine_host_code_allowed = False

    def __init__(self, logger: Any, lean_version: str | None = None) -> None:
        self.logger = logger
        self.engine_host_code_allowed = False
        self.lean_version = lean_version  # a lean runtime loaded by load_runtime: the version it deserializes

    def load_runtime(self, path: str) -> _Runtime:
        with open(path, encoding="utf-8") as f:  # the fake lean runtime "library" names its version
            version = f.read().strip()
        return type(self)(self.logger, lean_version=version)

    def _problem(self, header: Mapping[str, Any]) -> str | None:
        trt = self.trt
        sm = trt.cuda.gpus[trt.cuda.current].sm
        if trt.rtx and sm[0] * 10 + sm[1] not in header["sms"]:
            return f"engine built for SM {header['sms']} cannot run on SM {sm[0]}.{sm[1]}"
        here, built = trt.__version__, header["version"]
        if self.lean_version is not None:
            if self.lean_version == built:
                return None
            return f"lean runtime {self.lean_version} cannot load a {built} plan"
        if built == here:
            return None
        if not header["version_compatible"]:
            return f"plan built by TensorRT {built}, this runtime is {here} (not version-compatible)"
        if built.split(".")[0] != here.split(".")[0] or _version(built) > _version(here):
            return f"version-compatible plan of {built} cannot run on {here}"
        if not header["lean"]:
            return f"version-compatible plan of {built} excludes its lean runtime: load it with load_runtime"
        if not self.engine_host_code_allowed:
            return "plan embeds its lean runtime (host code) but engine_host_code_allowed is False"
        return None

    def deserialize_cuda_engine(self, data: Any) -> _Engine | None:
        parsed = FakePlan.parse(data)
        if parsed is None:
            self.trt.violate(self.logger, "deserialize_cuda_engine: not a serialized engine")
            return None
        header, model = parsed
        problem = self._problem(header)
        if problem:
            self.logger.log(self.trt.real.ILogger.Severity.ERROR, problem)
            return None
        return self.trt.ICudaEngine(self.trt, header, model, self.logger, bytes(data))


class _RtxRuntime(_Runtime):
    def get_engine_validity(self, buffer: Any) -> tuple[Any, int]:
        parsed = FakePlan.parse(buffer)
        real = self.trt.real
        if parsed is None:
            return real.EngineValidity.INVALID, int(real.EngineInvalidityDiagnostics.MALFORMED_ENGINE)
        problem = self._problem(parsed[0])
        if problem is None:
            return real.EngineValidity.VALID, 0
        diag = real.EngineInvalidityDiagnostics.UNSUPPORTED_CC if "SM" in problem else \
            real.EngineInvalidityDiagnostics.VERSION_MISMATCH
        return real.EngineValidity.INVALID, int(diag)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


class _Engine:
    def __init__(self, trt: FakeTensorRT, header: Mapping[str, Any], model: onnx.ModelProto, logger: Any,
                 plan: bytes) -> None:
        self.trt, self.model, self.logger = trt, model, logger
        self.device = trt.cuda.current
        self.key = hash(plan)
        self.profiles = [{n: tensor_profile(v, n) for n, v in p.items()} for p in header["profiles"]]
        self.host_inputs = set(header["host_inputs"])
        self.activation_bytes = int(header["activation_bytes"])
        real = trt.real
        self.tensors: dict[str, tuple[Any, str, tuple[int, ...]]] = {}  # name -> (mode, dtype name, dims)
        inits = {t.name for t in model.graph.initializer}
        for vi in model.graph.input:
            if vi.name not in inits:
                self.tensors[vi.name] = (real.TensorIOMode.INPUT, *self._type(vi, header))
        for vi in model.graph.output:
            self.tensors[vi.name] = (real.TensorIOMode.OUTPUT, *self._type(vi, header))
        self.num_io_tensors = len(self.tensors)
        self.num_optimization_profiles = max(1, len(self.profiles))
        self._session: Any = None
        self._session_lock = threading.Lock()

    @staticmethod
    def _type(vi: onnx.ValueInfoProto, header: Mapping[str, Any]) -> tuple[str, tuple[int, ...]]:
        tt = vi.type.tensor_type
        dtype = header["dtypes"].get(vi.name) or _TRT_TYPES[tt.elem_type]
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim)
        return dtype, dims

    def get_tensor_name(self, index: int) -> str:
        return list(self.tensors)[index]

    def get_tensor_mode(self, name: str) -> Any:
        return self.tensors[name][0] if name in self.tensors else self.trt.real.TensorIOMode.NONE

    def get_tensor_dtype(self, name: str) -> Any:
        return getattr(self.trt.real.DataType, self.tensors[name][1])

    def get_tensor_location(self, name: str) -> Any:
        loc = self.trt.real.TensorLocation
        return loc.HOST if name in self.host_inputs else loc.DEVICE

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        return self.tensors[name][2]

    def is_shape_inference_io(self, name: str) -> bool:
        return name in self.host_inputs

    def get_tensor_profile_shape(self, name: str, profile: int) -> list[tuple[int, ...]]:
        p = self.profiles[profile][name]
        return [p.min, p.opt, p.max]

    def create_execution_context(self, arg: Any = None) -> _Context:
        strategy = arg if not isinstance(arg, _RuntimeConfig) else arg.strategy
        return _Context(self, strategy, arg if isinstance(arg, _RuntimeConfig) else None)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        import onnxruntime as ort

        with self._session_lock:
            if self._session is None:
                self._session = ort.InferenceSession(self.model.SerializeToString(), providers=["CPUExecutionProvider"])
        from trt_backend.ort.values import to_numpy, to_ort_value

        outs = [o.name for o in self.model.graph.output]
        values = self._session.run_with_ort_values(outs, {n: to_ort_value(v) for n, v in feeds.items()})
        return [np.asarray(to_numpy(v)) for v in values]


class _RtxEngine(_Engine):
    def create_runtime_config(self) -> _RuntimeConfig:
        return _RuntimeConfig(self.trt)


class _RuntimeCache:
    def __init__(self, trt: FakeTensorRT) -> None:
        self.trt = trt
        self.entries: set[int] = set()

    def serialize(self) -> bytes:
        sm = self.trt.cuda.gpus[self.trt.cuda.current].sm
        return b"FAKE-RUNTIME-CACHE\n" + json.dumps({"sm": list(sm), "version": self.trt.__version__,
                                                      "entries": sorted(self.entries)}).encode()

    def deserialize(self, blob: Any) -> bool:
        data = bytes(blob)
        if not data.startswith(b"FAKE-RUNTIME-CACHE\n"):
            return False
        content = json.loads(data.split(b"\n", 1)[1])
        sm = self.trt.cuda.gpus[self.trt.cuda.current].sm
        if tuple(content["sm"]) != tuple(sm) or content["version"] != self.trt.__version__:
            return False  # another GPU or version: rejected, cache unchanged
        self.entries.update(content["entries"])
        return True


class _RuntimeConfig:
    def __init__(self, trt: FakeTensorRT) -> None:
        self.trt = trt
        self.cache: _RuntimeCache | None = None
        self.strategy: Any = None

    def create_runtime_cache(self) -> _RuntimeCache:
        return _RuntimeCache(self.trt)

    def set_runtime_cache(self, cache: _RuntimeCache) -> bool:
        self.cache = cache
        return True

    def get_runtime_cache(self) -> _RuntimeCache | None:
        return self.cache

    def set_execution_context_allocation_strategy(self, strategy: Any) -> None:
        self.strategy = strategy


class _Context:
    """IExecutionContext (see the module docstring for the rules it holds the caller to)."""

    def __init__(self, engine: _Engine, strategy: Any, config: _RuntimeConfig | None) -> None:
        trt, cuda = engine.trt, engine.trt.cuda
        if cuda.current != engine.device:
            raise ContractViolation(f"create_execution_context on GPU {cuda.current}; the engine lives on GPU "
                                    f"{engine.device}")
        self.engine, self.trt, self.cuda = engine, trt, cuda
        self.logger = engine.logger
        self.profile = 0
        self.profile_stamp: tuple[Any, int] | None = None
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.addresses: dict[str, int] = {}
        self.allocators: dict[str, Any] = {}
        self.inflight: tuple[Any, int] | None = None
        self.enqueues = 0
        with trt.lock:
            trt.contexts_created += 1
            if trt.rtx:
                cache = config.cache if config is not None else None
                if cache is None or engine.key not in cache.entries:
                    trt.compiles += 1
                    if cache is not None:
                        cache.entries.add(engine.key)
        static = strategy is None or strategy == trt.real.ExecutionContextAllocationStrategy.STATIC
        nbytes = engine.activation_bytes * (engine.num_optimization_profiles if static else 1)
        self.memory = int(cuda.cudaMalloc(nbytes)[1])
        trt.context_bytes.append(nbytes)
        weakref.finalize(self, cuda.cudaFree, self.memory)

    def _fail(self, message: str) -> bool:
        return self.trt.violate(self.logger, message)

    @property
    def active_optimization_profile(self) -> int:
        return self.profile

    def set_optimization_profile_async(self, index: int, stream: Any) -> bool:
        if not 0 <= int(index) < self.engine.num_optimization_profiles:
            return self._fail(f"set_optimization_profile_async: profile {index} out of range "
                              f"(0..{self.engine.num_optimization_profiles - 1})")
        s = self.cuda._stream(stream, "set_optimization_profile_async")
        self.profile_stamp, _ = self.cuda._enqueue(s)  # (TensorRT may queue copies on it)
        self.profile = int(index)
        self.shapes.clear()  # shapes are set after the profile, for that profile
        return True

    def set_input_shape(self, name: str, shape: Any) -> bool:
        shape = tuple(int(d) for d in shape)
        entry = self.engine.tensors.get(name)
        if entry is None or entry[0] != self.trt.real.TensorIOMode.INPUT:
            return self._fail(f"set_input_shape: '{name}' is not an input tensor")
        dims = entry[2]
        if len(shape) != len(dims) or any(d != -1 and d != s for d, s in zip(dims, shape)):
            return self._fail(f"set_input_shape: '{name}' {shape} does not match the engine's dimensions {dims}")
        if name not in self.engine.host_inputs and self.engine.profiles:
            p = self.engine.profiles[self.profile].get(name)
            if p is not None and not p.covers(shape):
                return self._fail(f"set_input_shape: '{name}' {shape} is outside optimization profile {self.profile} "
                                  f"(min {p.min}, max {p.max})")
        self.shapes[name] = shape
        return True

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        entry = self.engine.tensors[name]
        if entry[0] == self.trt.real.TensorIOMode.INPUT:
            return self.shapes.get(name, entry[2])
        return tuple(-1 for _ in entry[2])  # known only once computed: an output allocator is told

    def set_tensor_address(self, name: str, ptr: int) -> bool:
        if name not in self.engine.tensors:
            return self._fail(f"set_tensor_address: no I/O tensor '{name}'")
        host = name in self.engine.host_inputs
        if int(ptr) % (8 if host else 256):  # (kHOST: Torch-TensorRT's runtime hands plain numpy pointers)
            return self._fail(f"set_tensor_address: '{name}' address {int(ptr):#x} is not "
                              f"{8 if host else 256}-byte aligned")
        self.addresses[name] = int(ptr)
        return True

    def get_tensor_address(self, name: str) -> int:
        return self.addresses.get(name, 0)

    def set_output_allocator(self, name: str, allocator: Any) -> bool:
        entry = self.engine.tensors.get(name)
        if entry is None or entry[0] != self.trt.real.TensorIOMode.OUTPUT:
            return self._fail(f"set_output_allocator: '{name}' is not an output tensor")
        self.allocators[name] = allocator
        return True

    def infer_shapes(self) -> list[str]:
        return [n for n, e in self.engine.tensors.items()
                if e[0] == self.trt.real.TensorIOMode.INPUT and n not in self.shapes and -1 in e[2]]

    def all_binding_shapes_specified(self) -> bool:
        return not self.infer_shapes()

    # ------------------------------------------------------------------ enqueue

    def execute_async_v3(self, stream: Any) -> bool:
        cuda, engine = self.cuda, self.engine
        if cuda.current != engine.device:
            raise ContractViolation(f"execute_async_v3 with GPU {cuda.current} current; the engine lives on GPU "
                                    f"{engine.device} (its kernels cannot launch there)")
        s = cuda._stream(stream, "execute_async_v3")
        if s.device != engine.device:
            raise ContractViolation(f"execute_async_v3 on a stream of GPU {s.device}; the engine lives on GPU "
                                    f"{engine.device}")
        if not _covers(cuda._join_host(s), self.inflight):
            raise ContractViolation("execute_async_v3: this execution context's previous enqueue (on another stream) "
                                    "may still be running; one context runs one enqueue at a time")
        if not _covers(cuda._join_host(s), self.profile_stamp):
            raise ContractViolation("execute_async_v3: the stream the optimization profile was set on is not "
                                    "synchronized with the enqueue stream")
        feeds = self._read_inputs(stream)
        if not isinstance(feeds, dict):
            return False
        outputs = engine.run(feeds)
        for vi, value in zip(engine.model.graph.output, outputs):
            if not self._write_output(vi.name, value, stream):
                return False
        self.inflight, _ = cuda._enqueue(s)
        self.enqueues += 1
        return True

    def _read_inputs(self, stream: Any) -> Any:
        engine, real = self.engine, self.trt.real
        feeds = {}
        for name, (mode, dtype_name, dims) in engine.tensors.items():
            if mode != real.TensorIOMode.INPUT:
                continue
            shape = self.shapes.get(name, dims)
            if -1 in shape:
                return self._fail(f"execute_async_v3: input '{name}' has no shape (set_input_shape after the profile)")
            ptr = self.addresses.get(name, 0)
            if not ptr:
                return self._fail(f"execute_async_v3: input '{name}' has no address")
            dtype = _np(real, dtype_name)
            nbytes = _nbytes(shape, dtype_name, dtype)
            if name in engine.host_inputs:
                if self.cuda.find(ptr) is not None:
                    raise ContractViolation(f"execute_async_v3: shape tensor '{name}' is bound to device memory "
                                            f"{ptr:#x}; its TensorLocation is kHOST (a host pointer)")
                value = np.frombuffer(ctypes.string_at(ptr, nbytes), dtype).reshape(shape).copy()
                p = engine.profiles[self.profile].get(name) if engine.profiles else None
                if p is not None and p.values is not None and not p.covers_values([int(v) for v in value.reshape(-1)]):
                    return self._fail(f"execute_async_v3: shape tensor '{name}' values {value.tolist()} are outside "
                                      f"profile {self.profile}")
            else:
                self.cuda.device_access(ptr, nbytes, stream, False, f"execute_async_v3 reading input '{name}'",
                                        device=engine.device)
                raw = np.frombuffer(ctypes.string_at(ptr, nbytes), np.uint8) if nbytes else np.zeros(0, np.uint8)
                value = raw.view(dtype).reshape(shape) if nbytes or not shape else np.zeros(shape, dtype)
            feeds[name] = value
        return feeds

    def _write_output(self, name: str, value: np.ndarray, stream: Any) -> bool:
        engine = self.engine
        data = np.ascontiguousarray(value)
        nbytes = data.nbytes
        allocator = self.allocators.get(name)
        ptr = self.addresses.get(name, 0)
        if allocator is not None:
            ptr = int(allocator.reallocate_output_async(name, ptr, max(1, nbytes), 256, int(stream) if stream else 0))
            if not ptr:
                return self._fail(f"execute_async_v3: the output allocator returned no memory for '{name}'")
            if ptr % 256:
                raise ContractViolation(f"reallocate_output_async returned {ptr:#x} for '{name}', not 256-byte aligned")
            self.addresses[name] = ptr
        elif not ptr:
            return self._fail(f"execute_async_v3: output '{name}' has neither an address nor an output allocator")
        self.cuda.device_access(ptr, max(1, nbytes), stream, True, f"execute_async_v3 writing output '{name}'",
                                device=engine.device)
        if nbytes:
            ctypes.memmove(ptr, data.ctypes.data, nbytes)
        if allocator is not None:
            allocator.notify_shape(name, tuple(data.shape))
        return True


def _np(real: Any, dtype_name: str) -> np.dtype[Any]:
    import ml_dtypes

    special = {"BF16": ml_dtypes.bfloat16, "FP8": ml_dtypes.float8_e4m3fn, "INT4": ml_dtypes.int4,
               "FP4": ml_dtypes.float4_e2m1fn}
    return np.dtype(special[dtype_name]) if dtype_name in special else np.dtype(real.nptype(getattr(real.DataType,
                                                                                                      dtype_name)))


def _nbytes(shape: tuple[int, ...], dtype_name: str, dtype: np.dtype[Any]) -> int:
    bits = _BITS.get(dtype_name, 8 * dtype.itemsize)
    return (int(np.prod(shape, dtype=np.int64)) * bits + 7) // 8


def fake_plan(model: onnx.ModelProto, profiles: Sequence[Mapping[str, Any]] = (), **kw: Any) -> bytes:
    return FakePlan(model, profiles, **kw).serialize()

"""A TensorRT segment runner: the engine deserialized once (after TensorRT-RTX's validity check),
contexts pooled per optimization profile (:mod:`trt_backend.runners.tensorrt_contexts`), each
run on the calling thread's stream, inputs bound by address, outputs written by TensorRT into
pool buffers that become the outputs. Written against TensorRT's Python API (names listed in
tensorrt/api_names.py); it needs a GPU, so CI runs it against a contract-strict fake of the
TensorRT and CUDA runtimes (tests/fakes/).

What TensorRT demands, and how it is met (NvInferRuntime.h, ``IExecutionContext``): every input
shape is set after the profile and inside it, every address is non-null and 256-byte aligned
(misaligned or empty device inputs go through a pool buffer), shape tensors are bound as host
memory (device ones are copied to the host first), and every call's result is checked. Device
inputs produced on another stream (the CUDA Array Interface's ``stream``, or another thread's
session stream) are waited for on this run's stream before TensorRT reads them."""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from partitioner import Segment
from trt_backend.errors import CudaError, SegmentLoadError, SegmentRunError
from trt_backend.gpu import device as dev
from trt_backend.gpu import memory as mem
from trt_backend.ort.values import check_allocation, to_numpy
from trt_backend.profiles import Profile
from trt_backend.runners.base import TENSORRT, SegmentRunner
from trt_backend.runners.tensorrt_contexts import (
    ContextPool,
    OutputAllocator,
    PooledContext,
    RuntimeCacheFile,
)
from trt_backend.tensorrt.flavor import Flavor, captured_messages, plugins_for_engine, shared_logger, tensorrt_lock

log = logging.getLogger(__name__)

# TensorRT types numpy lacks, as ml_dtypes names them (sub-byte ones are packed on the device)
_ML_DTYPES = {"BF16": "bfloat16", "FP8": "float8_e4m3fn", "INT4": "int4", "FP4": "float4_e2m1fn",
              "E8M0": "float8_e8m0fnu"}


def engine_dtype(trt: Any, dtype: Any) -> np.dtype[Any] | None:
    """The numpy (or ml_dtypes) type of a TensorRT ``DataType``; None for one it has no match for."""
    for member, name in _ML_DTYPES.items():
        if hasattr(trt.DataType, member) and dtype == getattr(trt.DataType, member):
            import ml_dtypes

            return np.dtype(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, name) else None
    try:
        return np.dtype(trt.nptype(dtype))
    except TypeError:
        return None


class TensorRTRunner(SegmentRunner):
    """Runs one segment's engine. Inputs: numpy arrays, ONNX Runtime CPU values or device arrays
    (``__cuda_array_interface__``, used in place). Outputs: :class:`DeviceArray` when
    ``outputs_on_device`` (each owns its buffer, back to ``pool`` when dropped) else numpy.
    ``streams``: the session's per-thread streams; ``device_id``: the GPU the engine is
    deserialized on and runs on (made current in every run); ``runtime_cache_dir``: where
    TensorRT-RTX's runtime cache is kept; ``lean_runtime``: a lean runtime library to load a
    version-compatible engine built without its own."""

    executor: ClassVar[str] = TENSORRT

    def __init__(self, segment: Segment, engine: bytes, flavor: Flavor, profiles: Sequence[Profile] = (),
                 shape_tensors: frozenset[str] = frozenset(), *, pool: mem.BufferPool | None = None,
                 streams: dev.ThreadStreams | None = None, outputs_on_device: bool = False,
                 allow_host_code: bool = False, device_id: int | None = None, runtime_cache_dir: str | None = None,
                 lean_runtime: str | None = None) -> None:
        super().__init__(segment, profiles, shape_tensors)
        self.trt = flavor.module
        self.device_id = device_id if device_id is not None else dev.current_device()
        dev.use_device(self.device_id)  # the engine's memory goes to the device current while deserializing
        self._own = (pool is None, streams is None)
        self.pool = pool if pool is not None else mem.BufferPool(self.device_id)
        self.streams = streams if streams is not None else dev.ThreadStreams(self.device_id)
        self.outputs_on_device = outputs_on_device
        self._runtime_cache: RuntimeCacheFile | None = None
        self._parent_runtime: Any = None  # the runtime that loaded a lean one (see _load)
        try:
            self._load(flavor, engine, allow_host_code, runtime_cache_dir, lean_runtime)
        except BaseException:
            self.close()
            raise
        # CUDA events recorded on the run's stream at four points of each run when set (bench's
        # phase timing): start, inputs bound (end of H2D), enqueued work done (end of compute),
        # outputs copied (end of D2H).
        self.phase_events: tuple[Any, Any, Any, Any] | None = None

    def _load(self, flavor: Flavor, engine: bytes, allow_host_code: bool, runtime_cache_dir: str | None,
              lean_runtime: str | None) -> None:
        trt = self.trt
        self.logger = shared_logger(flavor)
        with tensorrt_lock:  # (loading logs, as building does: see tensorrt_lock)
            runtime = trt.Runtime(self.logger)
            if flavor.has("Runtime.engine_host_code_allowed"):
                runtime.engine_host_code_allowed = allow_host_code
            if lean_runtime:
                # The runtime that loaded the lean one lives as long as the engine: trtexec keeps it
                # so (samples/common/sampleEngines.h, mParentRuntime), and the bindings' load_runtime
                # keeps no reference to it. The engine is deserialized by the lean runtime, so it is
                # the one allowed host code.
                self._parent_runtime = runtime
                runtime = runtime.load_runtime(lean_runtime)
                if runtime is None:
                    raise SegmentLoadError(f"{self.label}: TensorRT could not load the lean runtime {lean_runtime}")
                if flavor.has("Runtime.engine_host_code_allowed"):
                    runtime.engine_host_code_allowed = allow_host_code
            self._runtime = runtime
            self._check_validity(flavor, engine)
        # (before 10.9 an engine holding a plugin of ours needs it registered here to load: a
        # folder run, a serve replica, a session from Session.load build nothing)
        plugins_for_engine(flavor, engine)
        with tensorrt_lock:
            with captured_messages() as errors:
                self.engine = runtime.deserialize_cuda_engine(engine)
        if self.engine is None:
            raise SegmentLoadError(f"{self.label}: TensorRT could not deserialize the engine: "
                                   f"{'; '.join(errors) or 'built for another TensorRT version or GPU?'}")
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.engine_inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.engine_outputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        missing = set(self.output_names) - set(self.engine_outputs)
        if missing:
            raise SegmentLoadError(f"{self.label}: engine lacks output(s) {sorted(missing)}")
        self.dtypes: dict[str, np.dtype[Any]] = {}
        for n in names:
            dtype = engine_dtype(trt, self.engine.get_tensor_dtype(n))
            if dtype is None:
                raise SegmentLoadError(f"{self.label}: engine tensor '{n}' is {self.engine.get_tensor_dtype(n)}, a "
                                       "type trt-backend cannot exchange (no numpy or ml_dtypes equivalent)")
            self.dtypes[n] = dtype
        self.host_io = {n for n in names if self.engine.get_tensor_location(n) == trt.TensorLocation.HOST}
        if flavor.has("IRuntimeConfig.create_runtime_cache"):
            self._runtime_cache = RuntimeCacheFile(self.engine, engine, runtime_cache_dir)
        self.contexts = ContextPool(self._make_context)

    def _check_validity(self, flavor: Flavor, engine: bytes) -> None:
        """TensorRT-RTX tells before deserializing whether an engine runs on this GPU and runtime
        (``get_engine_validity``); an invalid one is refused with TensorRT's own reasons."""
        if not flavor.has("Runtime.get_engine_validity"):
            return
        trt = self.trt
        validity, diagnostics = self._runtime.get_engine_validity(engine)
        if validity != trt.EngineValidity.INVALID:
            return
        flags = dict(trt.EngineInvalidityDiagnostics.__members__)
        reasons = [name for name, flag in flags.items() if int(diagnostics) & int(flag)]
        raise SegmentLoadError(f"{self.label}: TensorRT-RTX says the engine cannot run on this GPU and runtime "
                               f"({', '.join(reasons) or 'no reason given'}); rebuild it here")

    @property
    def stream(self) -> dev.Stream:
        """This thread's stream (bench's phase timing records its events there)."""
        return self.streams.current()

    def _mark(self, point: int, stream: dev.Stream) -> None:
        if self.phase_events is not None:
            self.phase_events[point].record(stream)

    def _make_context(self, profile: int, stream: dev.Stream) -> PooledContext:
        trt, engine = self.trt, self.engine
        # (inside TensorRT's one-thread lock, as loading: TensorRT-RTX compiles kernels for a new
        # context and logs while it holds its own locks, see tensorrt_lock; threads of a server
        # make their contexts at once)
        with tensorrt_lock, captured_messages() as errors:
            if self._runtime_cache is not None:
                config = self._runtime_cache.config
                if (hasattr(trt, "ExecutionContextAllocationStrategy")
                        and hasattr(config, "set_execution_context_allocation_strategy")):
                    config.set_execution_context_allocation_strategy(
                        trt.ExecutionContextAllocationStrategy.ON_PROFILE_CHANGE)
                ctx = engine.create_execution_context(config)
            elif hasattr(trt, "ExecutionContextAllocationStrategy"):
                ctx = engine.create_execution_context(trt.ExecutionContextAllocationStrategy.ON_PROFILE_CHANGE)
            else:
                ctx = engine.create_execution_context()
        if ctx is None:
            raise SegmentRunError(f"{self.label}: TensorRT could not create an execution context "
                                  f"({'; '.join(errors) or 'out of device memory?'})")
        allocator = OutputAllocator(trt, self.pool)
        for name in self.engine_outputs:
            self._checked(ctx.set_output_allocator(name, allocator.impl), f"set the output allocator of '{name}'", [])
        if profile != 0:
            with captured_messages() as errors:
                ok = ctx.set_optimization_profile_async(profile, stream.ptr)
            self._checked(ok, f"select optimization profile {profile}", errors)
        return PooledContext(ctx, allocator, profile)

    def _checked(self, ok: Any, what: str, errors: list[str]) -> None:
        if not ok:
            raise SegmentRunError(f"{self.label}: TensorRT refused to {what}"
                                  + (f": {'; '.join(errors)}" if errors else ""))

    def stage(self, inputs: Sequence[Any]) -> list[Any]:
        """Shape tensors live in host memory for TensorRT: device ones are copied to the host
        (after the stream producing them), so profiles can be chosen from their values too."""
        out = list(inputs)
        for k, name in enumerate(self.input_names):
            view = mem.as_device_array(out[k]) if name in self.host_io else None
            if view is not None:
                out[k] = view.to_host()
        return out

    def run_impl(self, inputs: Sequence[Any], ort_run_options: Any = None) -> list[Any]:
        dev.use_device(self.device_id)
        stream = self.streams.current()
        profile = self.select_profile(inputs) if self.profiles else 0
        with self.contexts.context(profile, stream) as pc:
            held: list[Any] = []  # host shape tensors and input buffers, until TensorRT has the work queued
            producers: list[Any] = []  # the streams of device inputs made on others
            self._mark(0, stream)
            with captured_messages() as errors:
                for name, value in zip(self.input_names, inputs):
                    self._bind_input(pc.context, name, value, stream, held, errors, profile, producers)
                self._mark(1, stream)
                ok = pc.context.execute_async_v3(stream.ptr)
            self._checked(ok, "run the engine", errors)
            for producer in producers:  # their memory is reused there once given back: after these reads
                dev.order_reuse_after(producer, stream)
            self._mark(2, stream)
            taken = {}
            for name in self.output_names:
                got = pc.allocator.take(name)
                if got is None:
                    raise SegmentRunError(f"{self.label}: TensorRT reported no memory or shape for output '{name}'")
                taken[name] = got
        outputs = [self._output(name, *taken[name], stream) for name in self.output_names]
        self._mark(3, stream)
        if not self.outputs_on_device or self.phase_events is not None:
            stream.synchronize()  # host outputs are complete only now
        return [o.to_numpy() if isinstance(o, _HostOutput) else o for o in outputs]

    def _bind_input(self, ctx: Any, name: str, value: Any, stream: dev.Stream, held: list[Any],
                    errors: list[str], profile: int, producers: list[Any]) -> None:
        dtype = self.dtypes[name]
        if name in self.host_io:  # shape tensors: host memory, read by TensorRT when the work is queued
            arr = mem.aligned_host_copy(np.asarray(to_numpy(value), dtype=dtype))
            held.append(arr)
            self._checked(ctx.set_input_shape(name, arr.shape), f"take input '{name}' of shape {arr.shape} in "
                          f"optimization profile {profile}", errors)
            self._checked(ctx.set_tensor_address(name, arr.ctypes.data), f"take the address of input '{name}'", errors)
            return
        view = mem.as_device_array(value)
        if view is None:
            arr = np.ascontiguousarray(to_numpy(value), dtype=dtype)
            lease = self.pool.lease(mem.packed_nbytes(arr.shape, dtype), stream)
            held.append(lease)
            if arr.size:
                mem.copy_to_device(lease.ptr, arr, stream)
            ptr, shape = lease.ptr, arr.shape
        else:
            if view.dtype != dtype:
                raise SegmentRunError(f"{self.label}: input '{name}' is {view.dtype} on the device, "
                                      f"the engine wants {dtype}")
            if view.device_id is not None and view.device_id != self.device_id:
                raise SegmentRunError(f"{self.label}: input '{name}' is on GPU {view.device_id}, the engine on GPU "
                                      f"{self.device_id}")
            if view.stream is not None:
                stream.wait_for(view.stream)  # The CUDA Array Interface: consumers order after the producer.
                producers.append(view.stream)
            ptr, shape = view.ptr, view.shape
            if not view.size or ptr % mem.ALIGNMENT:
                # TensorRT takes 256-byte aligned, non-null addresses: an empty tensor gets a placeholder
                # (as Torch-TensorRT's runtime binds one), a misaligned view is copied into a pool buffer
                lease = self.pool.lease(max(mem.ALIGNMENT, view.nbytes), stream)
                held.append(lease)
                if view.size:
                    mem.copy_device(lease.ptr, ptr, view.nbytes, stream)
                ptr = lease.ptr
        self._checked(ctx.set_input_shape(name, shape), f"take input '{name}' of shape {tuple(shape)} in "
                      f"optimization profile {profile}", errors)
        self._checked(ctx.set_tensor_address(name, ptr), f"take the address of input '{name}'", errors)

    def _output(self, name: str, lease: mem.Lease, shape: tuple[int, ...], stream: dev.Stream) -> Any:
        dtype = self.dtypes[name]
        if self.outputs_on_device:  # the buffer TensorRT wrote is the output; back to the pool when dropped
            return mem.DeviceArray(lease.ptr, shape, dtype, owner=lease, stream=stream, device_id=self.device_id)
        check_allocation(shape, dtype, f"{self.label}: output '{name}'")
        return _HostOutput(lease, shape, dtype, stream)

    def close(self) -> None:
        cache, self._runtime_cache = self._runtime_cache, None
        if cache is not None and getattr(self, "engine", None) is not None:
            cache.save()
        contexts = getattr(self, "contexts", None)
        if contexts is not None:
            streams = getattr(self, "streams", None)
            if streams is not None:
                # work queued on them may still use the contexts' memory, which their destruction frees
                try:
                    streams.synchronize()
                except CudaError as e:
                    log.warning("%s: its streams could not be synchronized before closing (%s)", self.label, e)
        with tensorrt_lock:  # (released as they were made: inside TensorRT's one-thread lock)
            if contexts is not None:
                contexts.close()
            self.engine = None
            self._runtime = None
            self._parent_runtime = None  # (after the engine and the runtime it loaded)
        if self._own[1]:
            self.streams.close()
        if self._own[0]:
            self.pool.close()
        self._own = (False, False)


class _HostOutput:
    """An output on its way to the host: the copy is queued now, read after the stream is synchronized."""

    def __init__(self, lease: mem.Lease, shape: tuple[int, ...], dtype: np.dtype[Any], stream: dev.Stream) -> None:
        self.lease = lease
        self.shape, self.dtype = shape, dtype
        self.sub_byte = mem.element_bits(dtype) < 8
        self.host = np.empty(mem.packed_nbytes(shape, dtype), np.uint8) if self.sub_byte else np.empty(shape, dtype)
        if self.host.nbytes:
            mem.copy_to_host(self.host, lease.ptr, stream)

    def to_numpy(self) -> np.ndarray:
        self.lease.release()
        return mem.unpack_sub_byte(self.host, self.dtype, self.shape) if self.sub_byte else self.host


def engine_io_summary(engine_bytes: bytes, flavor: Flavor) -> dict[str, Any]:
    """Names, modes and dtypes of an engine's I/O tensors (needs a GPU to deserialize)."""
    trt = flavor.module
    with tensorrt_lock:
        runtime = trt.Runtime(shared_logger(flavor))
        engine = runtime.deserialize_cuda_engine(engine_bytes)
    if engine is None:
        raise SegmentLoadError("TensorRT could not deserialize the engine")
    out = {}
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        out[name] = {"mode": str(engine.get_tensor_mode(name)), "dtype": str(engine.get_tensor_dtype(name)),
                     "shape": tuple(engine.get_tensor_shape(name))}
    return out


__all__ = ["TensorRTRunner", "engine_dtype", "engine_io_summary"]

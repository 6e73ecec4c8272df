"""A TensorRT segment runner: deserialize once, one execution context per thread, inputs bound
by address, ``execute_async_v3`` on our stream, data-dependent output shapes through an
``IOutputAllocator``. Written against TensorRT's Python API (names listed in tensorrt/api_names.py);
it needs a GPU and full TensorRT (or RTX on an RTX-class GPU), so CI never runs it."""
from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from partitioner import Segment
from trt_backend.errors import SegmentLoadError, SegmentRunError
from trt_backend.gpu import device as dev
from trt_backend.ort.values import check_allocation, to_numpy
from trt_backend.profiles import Profile
from trt_backend.runners.base import TENSORRT, SegmentRunner
from trt_backend.tensorrt.flavor import Flavor, shared_logger

log = logging.getLogger(__name__)


def _np_dtype(trt: Any, dtype: Any) -> np.dtype[Any]:
    if dtype == trt.DataType.BF16:
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(trt.nptype(dtype))


class _OutputAllocator:
    """Grows a pooled device buffer per output when TensorRT asks (sizes known only while
    enqueuing for data-dependent outputs: NonZero, NonMaxSuppression...) and records the shape
    TensorRT reports."""

    def __init__(self, trt: Any, pool: dev.BufferPool) -> None:
        outer = self

        class Allocator(trt.IOutputAllocator):  # type: ignore[misc, name-defined]
            def __init__(self) -> None:
                trt.IOutputAllocator.__init__(self)

            def reallocate_output(self, name: str, memory: int, size: int, alignment: int) -> int:
                return outer.reallocate(name, size)

            def reallocate_output_async(self, name: str, memory: int, size: int, alignment: int,
                                        stream: int) -> int:
                return outer.reallocate(name, size)

            def notify_shape(self, name: str, shape: Any) -> None:
                outer.shapes[name] = tuple(int(d) for d in shape)

        self.pool = pool
        self.buffers: dict[str, dev.DeviceBuffer] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.impl = Allocator()

    def reallocate(self, name: str, size: int) -> int:
        buf = self.buffers.get(name)
        if buf is None or buf.capacity < size:
            if buf is not None:
                self.pool.release(buf)
            buf = self.buffers[name] = self.pool.acquire(max(1, size))
        return buf.ptr


class TensorRTRunner(SegmentRunner):
    """Runs one segment's engine. Inputs: numpy arrays, ONNX Runtime CPU values or device arrays
    (``__cuda_array_interface__``, used in place). Outputs: :class:`DeviceArray` when
    ``outputs_on_device`` else numpy. ``device_id``: the GPU the engine is deserialized on and
    runs on (made current in every thread that runs it); None: the thread's current device."""

    executor: ClassVar[str] = TENSORRT

    def __init__(self, segment: Segment, engine: bytes, flavor: Flavor, profiles: Sequence[Profile] = (),
                 shape_tensors: frozenset[str] = frozenset(), *, pool: dev.BufferPool | None = None,
                 stream: dev.Stream | None = None, outputs_on_device: bool = False,
                 allow_host_code: bool = False, device_id: int | None = None) -> None:
        super().__init__(segment, profiles, shape_tensors)
        trt = flavor.module
        self.trt = trt
        self.device_id = device_id
        if device_id is not None:
            dev.use_device(device_id)  # the engine's memory goes to the device current while deserializing
        self.pool = pool or dev.BufferPool(device_id)
        self.stream = stream or dev.Stream(device_id)
        self.outputs_on_device = outputs_on_device
        self._runtime = trt.Runtime(shared_logger(flavor))
        if flavor.has("Runtime.engine_host_code_allowed"):
            self._runtime.engine_host_code_allowed = allow_host_code
        self.engine = self._runtime.deserialize_cuda_engine(engine)
        if self.engine is None:
            raise SegmentLoadError(f"{self.label}: TensorRT could not deserialize the engine "
                                   f"(built for another TensorRT version or GPU?)")
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.engine_inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.engine_outputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        missing = set(self.output_names) - set(self.engine_outputs)
        if missing:
            raise SegmentLoadError(f"{self.label}: engine lacks output(s) {sorted(missing)}")
        self.dtypes = {n: _np_dtype(trt, self.engine.get_tensor_dtype(n)) for n in names}
        self.host_io = {n for n in names if self.engine.get_tensor_location(n) == trt.TensorLocation.HOST}
        self._local = threading.local()
        # CUDA events recorded on the stream at four points of each run when set (bench's phase
        # timing): start, inputs bound (end of H2D), enqueued work done (end of compute),
        # outputs copied (end of D2H).
        self.phase_events: tuple[Any, Any, Any, Any] | None = None

    def _mark(self, point: int) -> None:
        if self.phase_events is not None:
            self.phase_events[point].record(self.stream)

    def _context(self) -> Any:
        """One execution context per thread (contexts are not thread-safe)."""
        ctx = getattr(self._local, "context", None)
        if ctx is None:
            ctx = self.engine.create_execution_context()
            allocator = _OutputAllocator(self.trt, self.pool)
            for name in self.engine_outputs:
                ctx.set_output_allocator(name, allocator.impl)
            self._local.context, self._local.allocator, self._local.profile = ctx, allocator, -1
        return ctx

    def run_impl(self, inputs: Sequence[Any], ort_run_options: Any = None) -> list[Any]:
        if self.device_id is not None:
            dev.use_device(self.device_id)
        ctx = self._context()
        allocator: _OutputAllocator = self._local.allocator
        profile = self.select_profile(inputs) if self.profiles else 0
        if profile != self._local.profile:
            ctx.set_optimization_profile_async(profile, self.stream.handle)
            self._local.profile = profile
        held: list[Any] = []  # keeps host copies and pool buffers alive until the stream is done
        temp: list[dev.DeviceBuffer] = []
        try:
            self._mark(0)
            for name, value in zip(self.input_names, inputs):
                self._bind_input(ctx, name, value, held, temp)
            self._mark(1)
            # outputs: TensorRT asks the allocator for memory once it knows each size (as
            # Polygraphy's runner does), which also covers data-dependent shapes
            if not ctx.execute_async_v3(self.stream.handle):
                raise SegmentRunError(f"{self.label}: TensorRT execution failed (see the TensorRT log)")
            self._mark(2)
            outputs = [self._output(name, allocator) for name in self.output_names]
            self._mark(3)
            self.stream.synchronize()
            return outputs
        finally:
            for buf in temp:
                self.pool.release(buf)

    def _bind_input(self, ctx: Any, name: str, value: Any, held: list[Any], temp: list[dev.DeviceBuffer]) -> None:
        view = dev.as_device_array(value)
        if name in self.host_io:  # shape tensors live on the host
            arr = np.ascontiguousarray(to_numpy(value), dtype=self.dtypes[name])
            held.append(arr)
            ctx.set_input_shape(name, arr.shape)
            ctx.set_tensor_address(name, arr.ctypes.data)
            return
        if view is None:
            arr = np.ascontiguousarray(to_numpy(value), dtype=self.dtypes[name])
            held.append(arr)
            buf = self.pool.acquire(max(1, arr.nbytes))
            temp.append(buf)
            dev.copy_to_device(buf.ptr, arr, self.stream)
            ptr, shape = buf.ptr, arr.shape
        else:
            if view.dtype != self.dtypes[name]:
                raise SegmentRunError(f"{self.label}: input '{name}' is {view.dtype} on the device, "
                                      f"the engine wants {self.dtypes[name]}")
            ptr, shape = view.ptr, view.shape
        ctx.set_input_shape(name, shape)
        ctx.set_tensor_address(name, ptr)

    def _output(self, name: str, allocator: _OutputAllocator) -> Any:
        shape = allocator.shapes[name]
        buf = allocator.buffers[name]
        if self.outputs_on_device:  # hand out a fresh buffer; the allocator's stays for the next run
            out = self.pool.acquire(max(1, int(np.prod(shape, dtype=np.int64)) * self.dtypes[name].itemsize))
            dev.copy_device(out.ptr, buf.ptr, int(np.prod(shape, dtype=np.int64)) * self.dtypes[name].itemsize,
                            self.stream)
            return dev.DeviceArray(out.ptr, shape, self.dtypes[name], owner=out, stream=self.stream,
                                   device_id=self.device_id)
        check_allocation(shape, self.dtypes[name], f"{self.label}: output '{name}'")
        host = np.empty(shape, self.dtypes[name])
        if host.nbytes:
            dev.copy_to_host(host, buf.ptr, self.stream)
        return host

    def close(self) -> None:
        self._local = threading.local()
        self.engine = None
        self._runtime = None


def engine_io_summary(engine_bytes: bytes, flavor: Flavor) -> dict[str, Any]:
    """Names, modes and dtypes of an engine's I/O tensors (needs a GPU to deserialize)."""
    trt = flavor.module
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


__all__ = ["TensorRTRunner", "engine_io_summary"]

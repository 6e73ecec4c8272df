"""A small cuda-python device layer: device queries, streams, events, pooled device buffers,
async copies, and zero-copy views of foreign device arrays (CuPy, PyTorch, pycuda).

cuda-python imports without a driver; every call that needs one raises :class:`CudaError`
with the CUDA error name. Nothing here runs on a machine without a GPU."""
from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from trt_backend.errors import CudaError, DeviceError
from trt_backend.ort.values import check_allocation

log = logging.getLogger(__name__)

# Every cuda.bindings.runtime name used here; tests/trt_backend/gpu/test_device.py checks them
# against the installed cuda-python, so a misspelt name fails CI even without a GPU.
CUDART_API = (
    "cudaGetDeviceCount", "cudaGetDevice", "cudaSetDevice", "cudaDeviceGetAttribute", "cudaDeviceAttr",
    "cudaMalloc", "cudaFree", "cudaMallocHost", "cudaFreeHost", "cudaMemcpyAsync", "cudaMemcpyKind",
    "cudaMemsetAsync", "cudaStreamCreateWithFlags", "cudaStreamNonBlocking", "cudaStreamSynchronize",
    "cudaStreamDestroy", "cudaEventCreate", "cudaEventRecord", "cudaEventSynchronize",
    "cudaEventElapsedTime", "cudaEventDestroy", "cudaStreamWaitEvent", "cudaGetErrorName", "cudaError_t",
    "cudaDriverGetVersion", "cudaRuntimeGetVersion", "cudaPointerGetAttributes", "cudaMemoryType",
)


@functools.lru_cache(maxsize=1)
def cudart() -> ModuleType:
    """cuda-python's runtime bindings (``cuda.bindings.runtime``, or ``cuda.cudart`` before 12.6)."""
    try:
        from cuda.bindings import runtime
        return runtime
    except ImportError:
        try:
            from cuda import cudart as legacy  # type: ignore[attr-defined]
            return legacy  # type: ignore[no-any-return]
        except ImportError:
            raise CudaError("cuda-python is not installed (pip install cuda-python)") from None


def check(result: Any, what: str = "CUDA call") -> Any:
    """Unpack a cuda-python ``(err, *values)`` result, raising :class:`CudaError` on failure."""
    rt = cudart()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != rt.cudaError_t.cudaSuccess:
        name = rt.cudaGetErrorName(err)[1]
        name = name.decode() if isinstance(name, bytes) else str(name)
        raise CudaError(f"{what} failed: {name}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def cuda_device_count() -> int:
    """Usable CUDA devices; 0 without cuda-python, a driver or a device."""
    try:
        rt = cudart()
        err, count = rt.cudaGetDeviceCount()
    except (CudaError, RuntimeError, OSError):
        return 0
    return int(count) if err == rt.cudaError_t.cudaSuccess else 0


def check_device(device_id: int) -> int:
    """``device_id`` if it names a usable CUDA device here, else :class:`DeviceError` saying how
    many there are."""
    count = cuda_device_count()
    if count == 0:
        raise DeviceError(f"device_id {device_id}: no CUDA device is usable here (0 devices: no GPU, driver or "
                          "cuda-python); emulate=True runs TensorRT segments on the CPU and ignores device_id")
    if not 0 <= device_id < count:
        raise DeviceError(f"device_id {device_id} does not exist: this machine has {count} CUDA device(s) "
                          f"(ids 0..{count - 1}; CUDA_VISIBLE_DEVICES renumbers them)")
    return device_id


def use_device(device_id: int) -> None:
    """Make ``device_id``'s primary context current in the calling thread (CUDA keeps the
    current device per thread, so every thread that runs a session calls this first)."""
    check(cudart().cudaSetDevice(device_id), f"make device {device_id} current")


def current_device() -> int:
    return int(check(cudart().cudaGetDevice(), "query the current device"))


def device_of(ptr: int) -> int | None:
    """The device that holds device memory at ``ptr`` (None for host or unregistered memory)."""
    rt = cudart()
    attrs = check(rt.cudaPointerGetAttributes(ptr), "query a device pointer")
    if attrs.type not in (rt.cudaMemoryType.cudaMemoryTypeDevice, rt.cudaMemoryType.cudaMemoryTypeManaged):
        return None
    return int(attrs.device)


def compute_capability(device: int = 0) -> tuple[int, int]:
    rt = cudart()
    major = check(rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr.cudaDevAttrComputeCapabilityMajor, device), "query SM")
    minor = check(rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr.cudaDevAttrComputeCapabilityMinor, device), "query SM")
    return int(major), int(minor)


class Stream:
    """A non-blocking CUDA stream (on ``device_id``; None: the calling thread's current device)."""

    def __init__(self, device_id: int | None = None) -> None:
        rt = cudart()
        if device_id is not None:
            use_device(device_id)
        self.device_id = device_id
        self.handle = check(rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking), "create stream")

    @property
    def ptr(self) -> int:
        return int(self.handle)

    def synchronize(self) -> None:
        check(cudart().cudaStreamSynchronize(self.handle), "synchronize stream")

    def wait(self, event: Event) -> None:
        check(cudart().cudaStreamWaitEvent(self.handle, event.handle, 0), "stream wait event")

    def close(self) -> None:
        if self.handle is not None:
            check(cudart().cudaStreamDestroy(self.handle), "destroy stream")
            self.handle = None


class Event:
    def __init__(self, device_id: int | None = None) -> None:
        if device_id is not None:
            use_device(device_id)
        self.handle = check(cudart().cudaEventCreate(), "create event")

    def record(self, stream: Stream) -> None:
        check(cudart().cudaEventRecord(self.handle, stream.handle), "record event")

    def synchronize(self) -> None:
        check(cudart().cudaEventSynchronize(self.handle), "synchronize event")

    def elapsed_ms(self, start: Event) -> float:
        return float(check(cudart().cudaEventElapsedTime(start.handle, self.handle), "event elapsed time"))

    def close(self) -> None:
        if self.handle is not None:
            check(cudart().cudaEventDestroy(self.handle), "destroy event")
            self.handle = None


@dataclass
class DeviceBuffer:
    """Raw device memory from a :class:`BufferPool` (``capacity`` >= what was asked)."""

    ptr: int
    capacity: int


class BufferPool:
    """Device allocations with reuse: freed buffers go to a free list per power-of-two size class,
    so steady-state inference allocates nothing. Thread-safe. With ``device_id`` every
    allocation is made on that device, whichever device the calling thread had current."""

    def __init__(self, device_id: int | None = None) -> None:
        self.device_id = device_id
        self._free: dict[int, list[DeviceBuffer]] = {}
        self._lock = threading.Lock()
        self.allocated_bytes = 0
        self.allocations = 0

    @staticmethod
    def size_class(nbytes: int) -> int:
        return max(256, 1 << max(0, int(nbytes) - 1).bit_length())

    def acquire(self, nbytes: int) -> DeviceBuffer:
        size = self.size_class(nbytes)
        with self._lock:
            free = self._free.get(size)
            if free:
                return free.pop()
        if self.device_id is not None:
            use_device(self.device_id)
        where = "the device" if self.device_id is None else f"device {self.device_id}"
        ptr = check(cudart().cudaMalloc(size), f"allocate {size} bytes on {where}")
        with self._lock:
            self.allocated_bytes += size
            self.allocations += 1
        return DeviceBuffer(int(ptr), size)

    def release(self, buf: DeviceBuffer) -> None:
        with self._lock:
            self._free.setdefault(buf.capacity, []).append(buf)

    def close(self) -> None:
        with self._lock:
            buffers = [b for free in self._free.values() for b in free]
            self._free.clear()
        if buffers and self.device_id is not None:
            use_device(self.device_id)
        for b in buffers:
            check(cudart().cudaFree(b.ptr), "free device memory")
            self.allocated_bytes -= b.capacity


class DeviceArray:
    """A typed, C-contiguous view of device memory exposing ``__cuda_array_interface__`` (v3),
    so CuPy, PyTorch and Numba take it without a copy."""

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: np.dtype[Any], owner: Any = None,
                 stream: Stream | None = None, device_id: int | None = None) -> None:
        self.ptr = int(ptr)
        self.device_id = device_id  # the GPU it lives on, where known
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.owner = owner  # keeps the memory alive (a pool buffer, a foreign array)
        self.stream = stream

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3,
                "strides": None, "stream": self.stream.ptr if self.stream is not None else None}

    def to_host(self, stream: Stream | None = None) -> np.ndarray:
        check_allocation(self.shape, self.dtype, "a device array copied to the host")
        out = np.empty(self.shape, self.dtype)
        copy_to_host(out, self.ptr, stream)
        if stream is not None:
            stream.synchronize()
        return out


def as_device_array(obj: Any) -> DeviceArray | None:
    """A zero-copy view of ``obj`` if it is a C-contiguous device array (CuPy, PyTorch CUDA
    tensor, pycuda GPUArray, our DeviceArray), else None. Strided device arrays are refused."""
    iface = getattr(obj, "__cuda_array_interface__", None)
    if iface is None:
        return None
    shape = tuple(iface["shape"])
    dtype = np.dtype(iface["typestr"])
    strides = iface.get("strides")
    if strides is not None:
        expected = tuple(int(np.prod(shape[k + 1:], dtype=np.int64)) * dtype.itemsize for k in range(len(shape)))
        if tuple(strides) != expected:
            raise CudaError(f"device array of shape {shape} is not C-contiguous (strides {tuple(strides)}); "
                            "make it contiguous first")
    return DeviceArray(int(iface["data"][0]), shape, dtype, owner=obj, device_id=getattr(obj, "device_id", None))


def copy_to_device(dst_ptr: int, host: np.ndarray, stream: Stream | None = None) -> None:
    rt = cudart()
    src = np.ascontiguousarray(host)
    check(rt.cudaMemcpyAsync(dst_ptr, src.ctypes.data, src.nbytes, rt.cudaMemcpyKind.cudaMemcpyHostToDevice,
                             stream.handle if stream else 0), "copy host to device")
    if stream is None:
        check(rt.cudaStreamSynchronize(0), "synchronize default stream")


def copy_to_host(host: np.ndarray, src_ptr: int, stream: Stream | None = None) -> None:
    rt = cudart()
    if not host.flags["C_CONTIGUOUS"]:
        raise CudaError("host destination must be C-contiguous")
    check(rt.cudaMemcpyAsync(host.ctypes.data, src_ptr, host.nbytes, rt.cudaMemcpyKind.cudaMemcpyDeviceToHost,
                             stream.handle if stream else 0), "copy device to host")
    if stream is None:
        check(rt.cudaStreamSynchronize(0), "synchronize default stream")


def copy_device(dst_ptr: int, src_ptr: int, nbytes: int, stream: Stream | None = None) -> None:
    rt = cudart()
    check(rt.cudaMemcpyAsync(dst_ptr, src_ptr, nbytes, rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice,
                             stream.handle if stream else 0), "copy device to device")

"""Device memory: a pool of buffers reused in stream order, leases that give a buffer back when
the last reference to them goes, typed views exposing the CUDA Array Interface, zero-copy views
of foreign device arrays (CuPy, PyTorch, pycuda) and async copies.

Every address handed to TensorRT must be 256-byte aligned (``IExecutionContext::setTensorAddress``
in NvInferRuntime.h); ``cudaMalloc`` returns at least that, and the pool only hands out whole
allocations. A buffer given back on one stream and taken again on another is ordered after the
first stream's work with an event (PyTorch's caching allocator does the same for a tensor used
on a second stream), so reuse never races with work still queued."""
from __future__ import annotations

import logging
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from trt_backend.errors import CudaError
from trt_backend.gpu import device as _device
from trt_backend.gpu.device import Stream, StreamLike, check, stream_handle, use_device
from trt_backend.ort.values import check_allocation

log = logging.getLogger(__name__)

ALIGNMENT = 256

# ml_dtypes types of fewer than 8 bits: device tensors hold them packed, two to a byte
_SUB_BYTE = ("int4", "uint4", "float4_e2m1fn")


def element_bits(dtype: np.dtype[Any]) -> int:
    return 4 if np.dtype(dtype).name in _SUB_BYTE else 8 * np.dtype(dtype).itemsize


def packed_nbytes(shape: tuple[int, ...], dtype: np.dtype[Any]) -> int:
    """Bytes of a C-contiguous device tensor of ``shape`` and ``dtype`` (sub-byte types packed)."""
    return (int(np.prod(shape, dtype=np.int64)) * element_bits(dtype) + 7) // 8


@dataclass(eq=False)
class DeviceBuffer:
    """Raw device memory from a :class:`BufferPool` (``capacity`` >= what was asked); ``stream``
    is the raw handle of the stream that last used it (None: the legacy default stream)."""

    ptr: int
    capacity: int
    device_id: int | None = None
    stream: Any = None


class BufferPool:
    """Device allocations with reuse: given-back buffers wait in a free list per size class, so
    steady-state inference allocates nothing. Size classes are 256-byte steps up to 4 KiB and
    eight steps per power of two above (at most 1/8 more than asked). Thread-safe. With
    ``device_id`` every allocation is made on that device, whichever device the calling thread
    had current. ``outstanding``: buffers handed out and not given back."""

    def __init__(self, device_id: int | None = None) -> None:
        self.device_id = device_id
        self._free: dict[int, list[DeviceBuffer]] = {}
        # Reentrant: a Lease's finalizer gives its buffer back from whatever the thread was doing
        # when a garbage-collection pass freed it, which may be an allocation inside this lock.
        self._lock = threading.RLock()
        self.allocated_bytes = 0
        self.allocations = 0
        self.outstanding = 0
        self._closed = False

    @staticmethod
    def size_class(nbytes: int) -> int:
        n = max(1, int(nbytes))
        step = ALIGNMENT if n <= 4096 else 1 << (n.bit_length() - 4)
        return -(-n // step) * step

    def acquire(self, nbytes: int, stream: Stream | None = None) -> DeviceBuffer:
        """A buffer of at least ``nbytes``, safe to use on ``stream`` from now on (None: the legacy
        default stream; a reused buffer last used elsewhere is waited for first)."""
        size = self.size_class(nbytes)
        with self._lock:
            if self._closed:
                raise CudaError("the buffer pool is closed (its Session was closed)")
            free = self._free.get(size)
            buf = free.pop() if free else None
            self.outstanding += 1
        try:
            if buf is None:
                buf = self._allocate(size)
            else:
                self._order_after_last_use(buf, stream)
        except BaseException:
            with self._lock:
                self.outstanding -= 1
            raise
        buf.stream = stream_handle(stream) if stream is not None else None
        return buf

    def _allocate(self, size: int) -> DeviceBuffer:
        if self.device_id is not None:
            use_device(self.device_id)
        where = "the device" if self.device_id is None else f"device {self.device_id}"
        ptr = check(_device.cudart().cudaMalloc(size), f"allocate {size} bytes on {where}")
        with self._lock:
            self.allocated_bytes += size
            self.allocations += 1
        return DeviceBuffer(int(ptr), size, self.device_id)

    @staticmethod
    def _order_after_last_use(buf: DeviceBuffer, stream: Stream | None) -> None:
        last = buf.stream
        if stream is None:
            check(_device.cudart().cudaStreamSynchronize(last if last is not None else 0),
                  "wait for a buffer's last use")
        elif last is None or int(last) != int(stream.handle):
            stream.wait_for(last)

    def release(self, buf: DeviceBuffer, stream: Stream | None = None) -> None:
        """Give ``buf`` back; ``stream``: the stream that used it last, if not the one it was taken on."""
        if stream is not None:
            buf.stream = stream.handle
        with self._lock:
            self.outstanding -= 1
            if not self._closed:
                self._free.setdefault(buf.capacity, []).append(buf)
                return
        self._free_now([buf])

    def lease(self, nbytes: int, stream: Stream | None = None) -> Lease:
        """A buffer owned by the returned :class:`Lease`: back to the pool when the lease goes."""
        return Lease(self, self.acquire(nbytes, stream))

    def close(self) -> None:
        """Free every buffer in the free list; buffers still leased are freed when given back."""
        with self._lock:
            self._closed = True
            buffers = [b for free in self._free.values() for b in free]
            self._free.clear()
        self._free_now(buffers)

    def _free_now(self, buffers: list[DeviceBuffer]) -> None:
        if not buffers:
            return
        rt = _device.cudart()
        previous = None
        if self.device_id is not None:
            previous = int(check(rt.cudaGetDevice(), "query the current device"))
            use_device(self.device_id)
        try:
            for b in buffers:
                check(rt.cudaFree(b.ptr), "free device memory")
                with self._lock:
                    self.allocated_bytes -= b.capacity
        finally:
            if previous is not None and previous != self.device_id:
                use_device(previous)  # A buffer may be given back from any thread: leave its device as it was.


class Lease:
    """One pool buffer, held for as long as this object lives: given back to its pool when the
    last reference goes (or at :meth:`release`). Giving back an open pool's buffer makes no CUDA
    call and takes the pool's reentrant lock, so it is safe from a garbage-collection pass in any
    thread, inside the pool's own work too; the pool orders the next use after the last. (A
    closed pool frees the buffer then.)"""

    __slots__ = ("buffer", "_done", "__weakref__")

    def __init__(self, pool: BufferPool, buffer: DeviceBuffer) -> None:
        self.buffer = buffer
        self._done = weakref.finalize(self, pool.release, buffer)
        self._done.atexit = False  # At interpreter exit the driver may already be gone.

    @property
    def ptr(self) -> int:
        return self.buffer.ptr

    @property
    def capacity(self) -> int:
        return self.buffer.capacity

    def release(self) -> None:
        self._done()


class DeviceArray:
    """A typed, C-contiguous view of device memory exposing ``__cuda_array_interface__`` (v3),
    so CuPy, PyTorch and Numba take it without a copy. ``stream``: the stream its data is being
    produced on (a :class:`Stream` or a raw handle; None: ready now); a reader orders its work
    after that stream, as the interface requires of consumers."""

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: np.dtype[Any], owner: Any = None,
                 stream: StreamLike = None, device_id: int | None = None) -> None:
        self.ptr = int(ptr)
        self.device_id = device_id  # the GPU it lives on, where known
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.owner = owner  # keeps the memory alive (a pool lease, a foreign array)
        self.stream = stream

    @property
    def nbytes(self) -> int:
        return packed_nbytes(self.shape, self.dtype)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        handle = stream_handle(self.stream) if self.stream is not None else None
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr if self.size else 0, False),
                "version": 3, "strides": None, "stream": int(handle) if handle else None}

    def to_host(self, stream: StreamLike = None) -> np.ndarray:
        """A host copy, made on ``stream`` (default: the stream the data is produced on), which
        is synchronized before returning."""
        check_allocation(self.shape, self.dtype, "a device array copied to the host")
        out = np.empty(self.shape, self.dtype)
        if not self.size:
            return out
        on = stream if stream is not None else self.stream
        if element_bits(self.dtype) < 8:
            packed = np.empty(self.nbytes, np.uint8)
            copy_to_host(packed, self.ptr, on, sync=True)
            return unpack_sub_byte(packed, self.dtype, self.shape)
        copy_to_host(out, self.ptr, on, sync=True)
        return out


def as_device_array(obj: Any) -> DeviceArray | None:
    """A zero-copy view of ``obj`` if it is a C-contiguous device array (CuPy, PyTorch CUDA
    tensor, pycuda GPUArray, our DeviceArray), else None. Strided and masked device arrays are
    refused. The interface's ``stream`` (v3) is kept: readers order their work after it."""
    if isinstance(obj, DeviceArray):
        return obj
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
    if iface.get("mask") is not None:
        raise CudaError(f"device array of shape {shape} has a mask; masked arrays are not supported")
    stream = iface.get("stream") if int(iface.get("version", 0)) >= 3 else None
    if stream is not None and int(stream) == 0:
        raise CudaError("device array says its stream is 0, which the CUDA Array Interface does not allow "
                        "(1: legacy default stream, 2: per-thread default stream)")
    return DeviceArray(int(iface["data"][0]), shape, dtype, owner=obj, stream=stream,
                       device_id=getattr(obj, "device_id", None))


def aligned_host_copy(arr: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``arr`` at a 256-byte aligned host address (TensorRT takes every
    tensor address, host ones included, at that alignment)."""
    arr = np.asarray(arr)
    block = np.empty(arr.nbytes + ALIGNMENT, np.uint8)
    start = (-block.ctypes.data) % ALIGNMENT
    out = block[start:start + arr.nbytes].view(arr.dtype).reshape(arr.shape)
    out[...] = arr
    return out


def unpack_sub_byte(packed: np.ndarray, dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray:
    """Two 4-bit elements per byte, low bits first, as TensorRT and ONNX store them."""
    n = int(np.prod(shape, dtype=np.int64))
    nibbles = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(-1)[:n].astype(np.uint8)
    if np.dtype(dtype).name == "int4":  # sign-extend to the int8 bits ml_dtypes keeps
        nibbles = np.where(nibbles >= 8, nibbles | 0xF0, nibbles).astype(np.uint8)
    return nibbles.view(dtype).reshape(shape)


def pack_sub_byte(arr: np.ndarray) -> np.ndarray:
    flat = np.ascontiguousarray(arr).reshape(-1).view(np.uint8) & 0x0F
    if flat.size % 2:
        flat = np.concatenate([flat, np.zeros(1, np.uint8)])
    pairs = flat.reshape(-1, 2)
    return (pairs[:, 0] | (pairs[:, 1] << 4)).astype(np.uint8)


def _sync(stream: StreamLike) -> None:
    check(_device.cudart().cudaStreamSynchronize(stream_handle(stream)), "synchronize stream")


def copy_to_device(dst_ptr: int, host: np.ndarray, stream: StreamLike = None) -> None:
    """Queue a host-to-device copy on ``stream`` (None: the legacy default stream, then wait).
    The host data is held until the copy has run (:meth:`Stream.keep`; a raw stream handle is
    waited for): CUDA may read pageable memory after the call returns, and the caller's array,
    or the copy made of it here, may go first."""
    rt = _device.cudart()
    src = np.ascontiguousarray(host)
    if element_bits(src.dtype) < 8:
        src = pack_sub_byte(src)
    check(rt.cudaMemcpyAsync(dst_ptr, src.ctypes.data, src.nbytes, rt.cudaMemcpyKind.cudaMemcpyHostToDevice,
                             stream_handle(stream)), "copy host to device")
    if isinstance(stream, Stream):
        stream.keep(src)
    else:
        _sync(stream)


def copy_to_host(host: np.ndarray, src_ptr: int, stream: StreamLike = None, *, sync: bool = False) -> None:
    """Queue a device-to-host copy on ``stream``; ``host`` holds the data once the stream is
    synchronized (``sync``, or None: the legacy default stream, waited for here)."""
    rt = _device.cudart()
    if not host.flags["C_CONTIGUOUS"]:
        raise CudaError("host destination must be C-contiguous")
    check(rt.cudaMemcpyAsync(host.ctypes.data, src_ptr, host.nbytes, rt.cudaMemcpyKind.cudaMemcpyDeviceToHost,
                             stream_handle(stream)), "copy device to host")
    if sync or stream is None:
        _sync(stream)


def copy_device(dst_ptr: int, src_ptr: int, nbytes: int, stream: StreamLike = None) -> None:
    rt = _device.cudart()
    check(rt.cudaMemcpyAsync(dst_ptr, src_ptr, nbytes, rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice,
                             stream_handle(stream)), "copy device to device")

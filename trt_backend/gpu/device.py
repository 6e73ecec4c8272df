"""A small cuda-python device layer: device queries, the driver check, streams (one per thread)
and events. Device memory is in :mod:`trt_backend.gpu.memory`.

cuda-python imports without a driver; every call that needs one raises :class:`CudaError`
with the CUDA error name. Nothing here runs on a machine without a GPU; tests put a fake of
``cuda.bindings.runtime`` in place of :func:`cudart`.

cuda-python and the driver: a cuda-python runtime of CUDA major N needs a driver of CUDA N or
newer (cuda-python 13 needs an R580 driver). This layer detects a driver that is too old and
says so (:func:`cuda_status`) instead of reporting "no GPU"; it pins nothing, so a machine
with a new driver takes the newest cuda-python."""
from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any

from trt_backend.errors import CudaError, DeviceError

log = logging.getLogger(__name__)

# Every cuda.bindings.runtime name used here and in memory.py; tests/trt_backend/gpu/test_device.py
# checks them against the installed cuda-python, so a misspelt name fails CI even without a GPU.
CUDART_API = (
    "cudaGetDeviceCount", "cudaGetDevice", "cudaSetDevice", "cudaDeviceGetAttribute", "cudaDeviceAttr",
    "cudaMalloc", "cudaFree", "cudaMallocHost", "cudaFreeHost", "cudaMemcpyAsync", "cudaMemcpyKind",
    "cudaMemsetAsync", "cudaStreamCreateWithFlags", "cudaStreamNonBlocking", "cudaStreamSynchronize",
    "cudaStreamDestroy", "cudaEventCreate", "cudaEventCreateWithFlags", "cudaEventDisableTiming", "cudaEventRecord",
    "cudaEventSynchronize", "cudaEventElapsedTime", "cudaEventDestroy", "cudaEventQuery", "cudaStreamWaitEvent",
    "cudaGetErrorName",
    "cudaError_t", "cudaDriverGetVersion", "cudaRuntimeGetVersion", "cudaPointerGetAttributes", "cudaMemoryType",
    "cudaMemGetInfo",
)

# The legacy default stream and the per-thread default stream, as the CUDA Array Interface (v3)
# names them in its "stream" entry (0 is not allowed there: it is ambiguous).
LEGACY_DEFAULT_STREAM, PER_THREAD_DEFAULT_STREAM = 1, 2


# Device nodes an NVIDIA driver makes on Linux (containers included): /dev/dxg under WSL 2,
# /dev/nvmap on Jetson. Without any of them no CUDA call can find a GPU.
DRIVER_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg", "/dev/nvmap")


def driver_absent() -> bool:
    """Whether this is a Linux machine with no NVIDIA driver device node: a question that only
    asks "which GPU is current?" is then answered without loading cuda-python (0.1-0.3 s of a
    command's start-up). Elsewhere, False (cuda-python answers)."""
    return sys.platform.startswith("linux") and not any(os.path.exists(node) for node in DRIVER_NODES)


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


def error_name(err: Any) -> str:
    name = cudart().cudaGetErrorName(err)[1]
    return name.decode() if isinstance(name, bytes) else str(name)


def check(result: Any, what: str = "CUDA call") -> Any:
    """Unpack a cuda-python ``(err, *values)`` result, raising :class:`CudaError` on failure."""
    rt = cudart()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != rt.cudaError_t.cudaSuccess:
        raise CudaError(f"{what} failed: {error_name(err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _version_text(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def cuda_status() -> tuple[int, str]:
    """(usable CUDA devices, why there are none). A driver older than cuda-python's runtime is
    named as such, with both versions, instead of passing for a machine without a GPU."""
    try:
        rt = cudart()
        err, count = rt.cudaGetDeviceCount()
    except (CudaError, RuntimeError, OSError) as e:
        return 0, f"cuda-python cannot be used ({e})"
    if err == rt.cudaError_t.cudaSuccess:
        return (int(count), "") if count else (0, "no CUDA device")
    name = error_name(err)
    if name == "cudaErrorNoDevice":
        return 0, "no CUDA device"
    if name == "cudaErrorInsufficientDriver":
        driver = int(check(rt.cudaDriverGetVersion(), "query the driver version") or 0)
        runtime = int(check(rt.cudaRuntimeGetVersion(), "query the runtime version") or 0)
        if driver == 0:
            return 0, "no CUDA driver is installed"
        return 0, (f"the CUDA driver supports CUDA {_version_text(driver)}, older than cuda-python's runtime "
                   f"(CUDA {_version_text(runtime)}): update the driver, or install a cuda-python of CUDA "
                   f"{driver // 1000} (pip install 'cuda-python<{driver // 1000 + 1}')")
    return 0, f"no CUDA device is usable ({name})"


def cuda_device_count() -> int:
    """Usable CUDA devices; 0 without cuda-python, a driver or a device (see :func:`cuda_status`)."""
    return cuda_status()[0]


def check_device(device_id: int) -> int:
    """``device_id`` if it names a usable CUDA device here, else :class:`DeviceError` saying how
    many there are."""
    count, why = cuda_status()
    if count == 0:
        raise DeviceError(f"device_id {device_id}: no CUDA device is usable here (0 devices: {why}); "
                          "emulate=True runs TensorRT segments on the CPU and ignores device_id")
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


def driver_version() -> int | None:
    """The driver's CUDA version as CUDA writes it (12040: CUDA 12.4); None without a driver."""
    try:
        v = int(check(cudart().cudaDriverGetVersion(), "query the driver version") or 0)
    except (CudaError, RuntimeError, OSError):
        return None
    return v or None


def memory_in_use(device_id: int | None = None) -> int:
    """Bytes of device memory in use on the current device (``cudaMemGetInfo``: total - free)."""
    if device_id is not None:
        use_device(device_id)
    free, total = check(cudart().cudaMemGetInfo(), "query device memory")
    return int(total) - int(free)


StreamLike = Any  # a Stream, a raw cudaStream_t handle (int), or None: the legacy default stream


def stream_handle(stream: StreamLike) -> Any:
    """The raw handle of a :class:`Stream` or a handle given as such (None: the default stream, 0)."""
    if stream is None:
        return 0
    return stream.handle if isinstance(stream, Stream) else stream


class Stream:
    """A non-blocking CUDA stream (on ``device_id``; None: the calling thread's current device).

    Non-blocking: it does not wait for the legacy default stream, so work anyone else queues
    there is ordered against it only through :meth:`wait_for`."""

    def __init__(self, device_id: int | None = None) -> None:
        rt = cudart()
        if device_id is not None:
            use_device(device_id)
        self.device_id = device_id if device_id is not None else current_device()
        self.handle = check(rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking), "create stream")
        self._event: Any = None  # recorded on other streams to order this one after them
        # One event serves every wait_for: its record and the wait that reads it are one step
        # (a stream waits for the event's latest record, so two threads' records between one's
        # record and wait would order that wait after the wrong stream).
        self._waiting = threading.Lock()
        self._kept: list[tuple[Any, Any]] = []  # (event recorded after the work, host object it reads)
        self._spare: list[Any] = []  # events of kept objects released, for the next keep
        self._keeping = threading.Lock()

    @property
    def ptr(self) -> int:
        return int(self.handle)

    def synchronize(self) -> None:
        check(cudart().cudaStreamSynchronize(self.handle), "synchronize stream")
        with self._keeping:
            self._spare.extend(event for event, _ in self._kept)
            self._kept.clear()

    def keep(self, host: Any) -> None:
        """Hold ``host`` (host memory work queued on this stream reads: the source of an
        asynchronous copy from pageable memory) until that work has run. cudaMemcpyAsync may read
        pageable memory after it returns (CUDA Runtime API, "API synchronization behavior": it
        "might be synchronous", the driver "may" stage the copy), so a temporary given to it must
        outlive the copy, not the call. Released once an event recorded after the work has
        completed (checked at each keep) or at :meth:`synchronize`."""
        rt = cudart()
        with self._keeping:
            while self._kept:  # (the oldest first: events on one stream complete in order)
                err = rt.cudaEventQuery(self._kept[0][0])[0]
                if err == rt.cudaError_t.cudaErrorNotReady:
                    break
                check((err,), "query an event")
                self._spare.append(self._kept.pop(0)[0])
            event = self._spare.pop() if self._spare else check(
                rt.cudaEventCreateWithFlags(rt.cudaEventDisableTiming), "create event")
            try:
                check(rt.cudaEventRecord(event, self.handle), "record an event after a copy")
            except CudaError:
                self._spare.append(event)
                raise
            self._kept.append((event, host))

    def wait(self, event: Event) -> None:
        check(cudart().cudaStreamWaitEvent(self.handle, event.handle, 0), "stream wait event")

    def wait_for(self, other: StreamLike) -> None:
        """Order this stream's next work after everything queued so far on ``other`` (a Stream,
        a raw handle, None: the legacy default stream), without blocking the host."""
        handle = stream_handle(other)
        if handle is None or int(handle) == int(self.handle):
            return
        rt = cudart()
        with self._waiting:
            if self._event is None:
                self._event = check(rt.cudaEventCreateWithFlags(rt.cudaEventDisableTiming), "create event")
            check(rt.cudaEventRecord(self._event, handle), "record an event on the producing stream")
            check(rt.cudaStreamWaitEvent(self.handle, self._event, 0), "wait for the producing stream")

    def close(self) -> None:
        if self.handle is not None:
            rt = cudart()
            if self._kept:
                self.synchronize()  # (what it holds is read by work still queued)
            for event in self._spare:
                check(rt.cudaEventDestroy(event), "destroy event")
            self._spare.clear()
            if self._event is not None:
                check(rt.cudaEventDestroy(self._event), "destroy event")
                self._event = None
            check(rt.cudaStreamDestroy(self.handle), "destroy stream")
            self.handle = None


def order_reuse_after(producer: StreamLike, reader: Stream) -> None:
    """Order the next work queued on ``producer`` (the stream an array was made on, where its
    memory is given back and reused: ONNX Runtime's arena, a buffer pool, PyTorch's caching
    allocator) after the reads queued so far on ``reader``. A consumer that reads a tensor on a
    stream of its own calls this once its reads are queued: the producer may free the memory as
    soon as the last reference goes, and the next writer on its stream must not overwrite it
    before those reads have run (TensorRT's enqueueV3: memory released "before stream
    synchronization" is undefined behaviour; PyTorch's ``record_stream`` answers the same need)."""
    handle = stream_handle(producer)
    if handle is None or int(handle) == int(reader.handle):
        return
    rt = cudart()
    event = check(rt.cudaEventCreateWithFlags(rt.cudaEventDisableTiming), "create event")
    try:
        check(rt.cudaEventRecord(event, reader.handle), "record an event after the reads")
        check(rt.cudaStreamWaitEvent(handle, event, 0), "order the producer's stream after the reads")
    finally:
        # (a wait reads the event's record when it is queued: the event may go at once, CUDA
        # Runtime API, cudaStreamWaitEvent)
        check(rt.cudaEventDestroy(event), "destroy event")


class ThreadStreams:
    """One :class:`Stream` per thread that runs work on ``device_id``, made on the thread's first
    use and kept until :meth:`close` (which synchronizes and destroys every one); a thread that has
    ended leaves its stream to the next new thread (work queued on it stays in order), so callers
    that run each call in a fresh thread do not grow streams without bound.

    A stream per thread, as ONNX Runtime gives each concurrent run device streams of its own and
    Torch-TensorRT runs on the caller's current stream (which PyTorch keeps per thread): threads
    never wait for each other's work, and each synchronizes only its own stream when it needs
    results on the host."""

    def __init__(self, device_id: int | None = None) -> None:
        self.device_id = device_id
        self._local = threading.local()
        self._all: list[Stream] = []
        self._users: dict[int, Callable[[], threading.Thread | None]] = {}  # id(stream) -> its thread
        self._lock = threading.Lock()
        self._closed = False

    def current(self) -> Stream:
        stream: Stream | None = getattr(self._local, "stream", None)
        if stream is None:
            with self._lock:
                if self._closed:
                    raise CudaError("the session's streams are closed (its Session was closed)")
                stream = next((s for s in self._all if not _alive(self._users.get(id(s)))), None)
                if stream is None:
                    stream = Stream(self.device_id)
                    self._all.append(stream)
                self._users[id(stream)] = weakref.ref(threading.current_thread())
            self._local.stream = stream
        return stream

    def __len__(self) -> int:
        return len(self._all)

    def synchronize(self) -> None:
        for s in list(self._all):
            s.synchronize()

    def close(self) -> None:
        with self._lock:
            self._closed, streams, self._all = True, self._all, []
            self._users.clear()
        for s in streams:
            s.synchronize()
            s.close()
        self._local = threading.local()


def _alive(user: Callable[[], threading.Thread | None] | None) -> bool:
    thread = user() if user is not None else None
    return thread is not None and thread.is_alive()


class Event:
    def __init__(self, device_id: int | None = None) -> None:
        if device_id is not None:
            use_device(device_id)
        self.handle = check(cudart().cudaEventCreate(), "create event")

    def record(self, stream: StreamLike) -> None:
        check(cudart().cudaEventRecord(self.handle, stream_handle(stream)), "record event")

    def synchronize(self) -> None:
        check(cudart().cudaEventSynchronize(self.handle), "synchronize event")

    def elapsed_ms(self, start: Event) -> float:
        return float(check(cudart().cudaEventElapsedTime(start.handle, self.handle), "event elapsed time"))

    def close(self) -> None:
        if self.handle is not None:
            check(cudart().cudaEventDestroy(self.handle), "destroy event")
            self.handle = None

"""A contract-strict fake of the CUDA runtime as cuda-python exposes it (``cuda.bindings.runtime``),
for tests on machines without a GPU. Install it with ``monkeypatch.setattr(device, "cudart",
lambda: fake)`` (trt_backend.gpu.device); everything above that boundary runs for real.

"Device memory" is host memory at 256-byte aligned addresses, so what the code under test binds
is really read and written. Work is executed when it is queued, and the fake keeps the order
CUDA guarantees with a vector clock per stream: an access to device memory that is not ordered
after the last write to it (or a write not ordered after earlier reads) is a race, and the fake
raises. Copies from the device to host memory land in the host array only once the host has
waited for them (stream or event synchronization), so code that reads a result without
synchronizing reads garbage, as it would on a GPU.

The rules, from CUDA's documentation:
- Streams and events (CUDA Runtime API, "Stream synchronization behavior"; CUDA C++ Programming
  Guide, "Streams" and "Multi-Device System / Stream and Event Behavior"): work in one stream runs
  in order; work in two streams is unordered unless one waits for an event recorded on the other
  (``cudaStreamWaitEvent``) or the host waits (``cudaStreamSynchronize``, ``cudaEventSynchronize``).
  A non-blocking stream (``cudaStreamNonBlocking``) does not synchronize with the legacy default
  stream. ``cudaEventRecord`` fails when event and stream belong to different devices; a copy may
  be queued on a stream of another device, a kernel may not.
- Memory (Runtime API, ``cudaMalloc``/``cudaFree``/``cudaMemcpyAsync``): allocations are aligned to
  at least 256 bytes; an access must lie inside a live allocation; ``cudaFree`` of anything but a
  live allocation's base is an error; ``cudaFree`` waits for the device to be idle. A copy from
  pageable host memory reads its source before it returns; a copy to pageable host memory is
  complete only once its stream is synchronized.
- Devices: the current device is per host thread (``cudaSetDevice``); allocations and streams
  belong to the device current when they were made.
- Ownership: streams the test marks as the user's (:meth:`FakeCudaRuntime.user_stream`, e.g. the
  stream a PyTorch tensor was produced on) must not be destroyed by the code under test; at the
  end every allocation, stream and event the code made must have been released
  (:meth:`FakeCudaRuntime.assert_released`).
- Arrays handed over with the CUDA Array Interface (v3, numba-cuda's "CUDA Array Interface"
  page): ``stream`` names the stream the data is produced on (1: legacy default, 2: per-thread
  default, 0 not allowed, None: ready), and the consumer must order its work after it; a test
  writes such an array on a user stream (:meth:`FakeCudaRuntime.write`), so a consumer that
  does not wait reads it unordered and the fake raises."""
from __future__ import annotations

import bisect
import ctypes
import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np


class ContractViolation(AssertionError):
    """The code under test broke a documented CUDA or TensorRT rule (undefined behaviour on a GPU)."""


Clock = dict  # stream key -> sequence number reached


def _join(a: Clock, b: Clock) -> Clock:
    out = dict(a)
    for k, v in b.items():
        if out.get(k, 0) < v:
            out[k] = v
    return out


def _covers(clock: Clock, stamp: tuple[Any, int] | None) -> bool:
    return stamp is None or clock.get(stamp[0], 0) >= stamp[1]


class _Enum(int):
    """An int with a name, as cuda-python's enum members are."""

    def __new__(cls, value: int, name: str) -> _Enum:
        obj = super().__new__(cls, value)
        obj.name = name  # type: ignore[attr-defined]
        return obj

    def __repr__(self) -> str:
        return f"<{self.name}: {int(self)}>"  # type: ignore[attr-defined]


def _enum(**members: int) -> SimpleNamespace:
    return SimpleNamespace(**{k: _Enum(v, k) for k, v in members.items()})


ERRORS = dict(cudaSuccess=0, cudaErrorInvalidValue=1, cudaErrorMemoryAllocation=2, cudaErrorInsufficientDriver=35,
              cudaErrorNoDevice=100, cudaErrorInvalidDevice=101, cudaErrorInvalidResourceHandle=400,
              cudaErrorNotReady=600)


@dataclass
class FakeGpu:
    sm: tuple[int, int] = (8, 6)
    memory: int = 1 << 30  # bytes


@dataclass
class _Stream:
    key: Any
    device: int
    user: bool = False  # the test's (the user's) stream: the code under test must not destroy it
    clock: Clock = field(default_factory=dict)
    seq: int = 0
    alive: bool = True


@dataclass
class _Event:
    device: int
    clock: Clock | None = None
    alive: bool = True


@dataclass
class _Allocation:
    ptr: int
    size: int
    device: int
    block: np.ndarray
    last_write: tuple[Any, int] | None = None
    reads: list[tuple[Any, int]] = field(default_factory=list)


class FakeCudaRuntime:
    """``cuda.bindings.runtime`` for ``gpus`` fake GPUs (see the module docstring for the rules)."""

    cudaError_t = _enum(**ERRORS)  # cuda-python's names
    cudaMemcpyKind = _enum(cudaMemcpyHostToHost=0, cudaMemcpyHostToDevice=1, cudaMemcpyDeviceToHost=2,
                           cudaMemcpyDeviceToDevice=3, cudaMemcpyDefault=4)
    cudaMemoryType = _enum(cudaMemoryTypeUnregistered=0, cudaMemoryTypeHost=1, cudaMemoryTypeDevice=2,
                           cudaMemoryTypeManaged=3)
    cudaDeviceAttr = _enum(cudaDevAttrComputeCapabilityMajor=75, cudaDevAttrComputeCapabilityMinor=76)
    cudaStreamNonBlocking = 1
    cudaEventDisableTiming = 2

    def __init__(self, gpus: int | list[FakeGpu] = 1, *, driver: int = 13000, runtime: int = 13000) -> None:
        self.gpus = [FakeGpu() for _ in range(gpus)] if isinstance(gpus, int) else list(gpus)
        self.driver, self.runtime = driver, runtime
        self._lock = threading.RLock()
        self._local = threading.local()
        self.allocations: dict[int, _Allocation] = {}
        self._bases: list[int] = []
        self.streams: dict[Any, _Stream] = {}
        self.events: dict[int, _Event] = {}
        self.host_clock: Clock = {}
        self._pending_host: list[tuple[tuple[Any, int], int, bytes]] = []  # (stamp, host address, bytes)
        self._next = 0x1000
        self.mallocs = 0
        self.frees = 0
        self.peak_outstanding = 0

    # ------------------------------------------------------------------ devices

    @property
    def current(self) -> int:
        return getattr(self._local, "device", 0)

    def _ok(self, *values: Any) -> tuple[Any, ...]:
        return (self.cudaError_t.cudaSuccess, *values)

    def _err(self, name: str) -> tuple[Any, ...]:
        return (getattr(self.cudaError_t, name),)

    def cudaGetErrorName(self, err: Any) -> tuple[Any, bytes]:
        names = {v: k for k, v in ERRORS.items()}
        return self.cudaError_t.cudaSuccess, names.get(int(err), "cudaErrorUnknown").encode()

    def cudaGetDeviceCount(self) -> tuple[Any, ...]:
        if self.driver < self.runtime:
            return self.cudaError_t.cudaErrorInsufficientDriver, None
        return self._ok(len(self.gpus)) if self.gpus else (self.cudaError_t.cudaErrorNoDevice, 0)

    def cudaDriverGetVersion(self) -> tuple[Any, ...]:
        return self._ok(self.driver)

    def cudaRuntimeGetVersion(self) -> tuple[Any, ...]:
        return self._ok(self.runtime)

    def cudaSetDevice(self, device: int) -> tuple[Any, ...]:
        if not 0 <= int(device) < len(self.gpus):
            return self._err("cudaErrorInvalidDevice")
        self._local.device = int(device)
        return self._ok()

    def cudaGetDevice(self) -> tuple[Any, ...]:
        return self._ok(self.current)

    def cudaDeviceGetAttribute(self, attr: Any, device: int) -> tuple[Any, ...]:
        if not 0 <= int(device) < len(self.gpus):
            return self._err("cudaErrorInvalidDevice")
        sm = self.gpus[int(device)].sm
        return self._ok(sm[0] if int(attr) == 75 else sm[1])

    def _used(self, device: int) -> int:
        with self._lock:
            return sum(a.size for a in self.allocations.values() if a.device == device)

    def cudaMemGetInfo(self) -> tuple[Any, ...]:
        used = self._used(self.current)
        total = self.gpus[self.current].memory
        return self._ok(total - used, total)

    # ------------------------------------------------------------------ streams, events, ordering

    def _handle(self) -> int:
        with self._lock:
            self._next += 0x100
            return self._next

    def _stream(self, handle: Any, what: str) -> _Stream:
        key: int | tuple[str, int] = int(handle) if handle is not None else 0
        if key in (0, 1, 2):  # the default streams (legacy, per-thread), one per device
            key = ("default", self.current)
            with self._lock:
                return self.streams.setdefault(key, _Stream(key, self.current))
        s = self.streams.get(key)
        if s is None or not s.alive:
            raise ContractViolation(f"{what}: stream {key:#x} does not exist (destroyed, or never created)")
        return s

    def user_stream(self, device: int | None = None) -> int:
        """A stream owned by the test (the user's PyTorch/CuPy stream): the code under test may
        use it, never destroy it."""
        h = self._handle()
        with self._lock:
            self.streams[h] = _Stream(h, self.current if device is None else device, user=True)
        return h

    def cudaStreamCreateWithFlags(self, flags: int) -> tuple[Any, ...]:
        h = self._handle()
        with self._lock:
            self.streams[h] = _Stream(h, self.current)
        return self._ok(h)

    def cudaStreamDestroy(self, handle: Any) -> tuple[Any, ...]:
        s = self._stream(handle, "cudaStreamDestroy")
        if s.user:
            raise ContractViolation(f"cudaStreamDestroy: stream {s.key:#x} belongs to the user (it came with their "
                                    "array); only its owner may destroy it")
        s.alive = False
        return self._ok()

    def _enqueue(self, s: _Stream) -> tuple[tuple[Any, int], Clock]:
        with self._lock:
            s.clock = _join(s.clock, self.host_clock)  # queued after what the host has seen finish
            s.seq += 1
            s.clock[s.key] = s.seq
            return (s.key, s.seq), dict(s.clock)

    def _join_host(self, s: _Stream) -> Clock:
        """The clock work queued on ``s`` now would run after."""
        with self._lock:
            return _join(s.clock, self.host_clock)

    def _observe(self, clock: Clock) -> None:
        with self._lock:
            self.host_clock = _join(self.host_clock, clock)
            done = [p for p in self._pending_host if _covers(self.host_clock, p[0])]
            self._pending_host = [p for p in self._pending_host if not _covers(self.host_clock, p[0])]
        for _, address, data in done:
            ctypes.memmove(address, data, len(data))

    def cudaStreamSynchronize(self, handle: Any) -> tuple[Any, ...]:
        s = self._stream(handle, "cudaStreamSynchronize")
        self._observe(s.clock)
        return self._ok()

    def cudaEventCreate(self) -> tuple[Any, ...]:
        return self.cudaEventCreateWithFlags(0)

    def cudaEventCreateWithFlags(self, flags: int) -> tuple[Any, ...]:
        h = self._handle()
        with self._lock:
            self.events[h] = _Event(self.current)
        return self._ok(h)

    def _event(self, handle: Any, what: str) -> _Event:
        e = self.events.get(int(handle))
        if e is None or not e.alive:
            raise ContractViolation(f"{what}: event {int(handle):#x} does not exist")
        return e

    def cudaEventRecord(self, event: Any, stream: Any) -> tuple[Any, ...]:
        e, s = self._event(event, "cudaEventRecord"), self._stream(stream, "cudaEventRecord")
        if e.device != s.device:
            return self._err("cudaErrorInvalidResourceHandle")  # (event and stream of different devices)
        _, clock = self._enqueue(s)
        e.clock = clock
        return self._ok()

    def cudaStreamWaitEvent(self, stream: Any, event: Any, flags: int = 0) -> tuple[Any, ...]:
        s, e = self._stream(stream, "cudaStreamWaitEvent"), self._event(event, "cudaStreamWaitEvent")
        with self._lock:
            if e.clock is not None:
                s.clock = _join(s.clock, e.clock)
        return self._ok()

    def cudaEventSynchronize(self, event: Any) -> tuple[Any, ...]:
        e = self._event(event, "cudaEventSynchronize")
        if e.clock is not None:
            self._observe(e.clock)
        return self._ok()

    def cudaEventQuery(self, event: Any) -> tuple[Any, ...]:
        """Work runs when it is queued here, so a recorded event has always completed: the query
        says so, and the host has then seen that work finish (as a synchronization would)."""
        e = self._event(event, "cudaEventQuery")
        if e.clock is not None:
            self._observe(e.clock)
        return self._ok()

    def cudaEventElapsedTime(self, start: Any, end: Any) -> tuple[Any, ...]:
        return self._ok(0.01)

    def cudaEventDestroy(self, event: Any) -> tuple[Any, ...]:
        self._event(event, "cudaEventDestroy").alive = False
        return self._ok()

    def device_synchronize(self, device: int) -> None:
        """What an implicitly synchronizing call (``cudaFree``) does: wait for every stream of ``device``."""
        with self._lock:
            streams = [s for s in self.streams.values() if s.device == device]
        for s in streams:
            self._observe(s.clock)

    # ------------------------------------------------------------------ memory

    def cudaMalloc(self, size: int) -> tuple[Any, ...]:
        size = int(size)
        if size <= 0:
            return self._err("cudaErrorInvalidValue")
        gpu = self.gpus[self.current]
        if self._used(self.current) + size > gpu.memory:
            return self._err("cudaErrorMemoryAllocation")
        block = np.zeros(size + 256, np.uint8)
        ptr = (block.ctypes.data + 255) // 256 * 256
        with self._lock:
            self.allocations[ptr] = _Allocation(ptr, size, self.current, block)
            bisect.insort(self._bases, ptr)
            self.mallocs += 1
            self.peak_outstanding = max(self.peak_outstanding, len(self.allocations))
        return self._ok(ptr)

    def cudaFree(self, ptr: Any) -> tuple[Any, ...]:
        ptr = int(ptr)
        a = self.allocations.get(ptr)
        if a is None:
            raise ContractViolation(f"cudaFree({ptr:#x}): not the start of a live allocation (double free?)")
        self.device_synchronize(a.device)  # cudaFree waits for the device to be idle
        with self._lock:
            del self.allocations[ptr]
            self._bases.remove(ptr)
            self.frees += 1
        return self._ok()

    def find(self, ptr: int, nbytes: int = 1) -> _Allocation | None:
        """The live allocation holding ``[ptr, ptr + nbytes)``, None when ``ptr`` is not device memory;
        ContractViolation when the range starts inside one and runs past its end."""
        with self._lock:
            k = bisect.bisect_right(self._bases, int(ptr)) - 1
            a = self.allocations.get(self._bases[k]) if k >= 0 else None
        if a is None or not a.ptr <= ptr < a.ptr + a.size:
            return None
        if ptr + nbytes > a.ptr + a.size:
            raise ContractViolation(f"{nbytes} bytes at {ptr:#x} run past the end of a {a.size}-byte allocation")
        return a

    def _access(self, a: _Allocation, stamp: tuple[Any, int], clock: Clock, write: bool, what: str) -> None:
        with self._lock:
            if a.last_write is not None and not _covers(clock, a.last_write):
                raise ContractViolation(f"{what}: {'writes' if write else 'reads'} device memory at {a.ptr:#x} "
                                        f"while a write queued on another stream may still be running (no event or "
                                        "synchronization orders them)")
            if write:
                racing = [r for r in a.reads if not _covers(clock, r)]
                if racing:
                    raise ContractViolation(f"{what}: overwrites device memory at {a.ptr:#x} that work queued on "
                                            "another stream may still be reading")
                a.last_write, a.reads = stamp, []
            else:
                a.reads = [r for r in a.reads if r[0] != stamp[0]] + [stamp]

    def device_access(self, ptr: int, nbytes: int, stream: Any, write: bool, what: str,
                      device: int | None = None) -> None:
        """Check (and record) an access by work queued on ``stream`` (used by the TensorRT fake)."""
        s = self._stream(stream, what)
        a = self.find(ptr, max(1, nbytes))
        if a is None:
            raise ContractViolation(f"{what}: {ptr:#x} is not device memory (a host address, or freed)")
        if device is not None and a.device != device:
            raise ContractViolation(f"{what}: memory at {ptr:#x} is on GPU {a.device}, the work runs on GPU {device}")
        stamp, clock = self._enqueue(s)
        self._access(a, stamp, clock, write, what)

    def cudaMemcpyAsync(self, dst: Any, src: Any, nbytes: int, kind: Any, stream: Any) -> tuple[Any, ...]:
        dst, src, nbytes, kind = int(dst), int(src), int(nbytes), int(kind)
        s = self._stream(stream, "cudaMemcpyAsync")
        if nbytes == 0:
            return self._ok()
        d, sr = self.find(dst, nbytes), self.find(src, nbytes)
        want_d, want_s = {1: (True, False), 2: (False, True), 3: (True, True)}.get(kind, (None, None))
        if want_d is None or (d is not None) != want_d or (sr is not None) != want_s:
            raise ContractViolation(f"cudaMemcpyAsync kind {kind}: source {src:#x} is {'device' if sr else 'host'} "
                                    f"memory, destination {dst:#x} is {'device' if d else 'host'} memory")
        stamp, clock = self._enqueue(s)
        if sr is not None:
            self._access(sr, stamp, clock, False, "cudaMemcpyAsync")
        if d is not None:
            self._access(d, stamp, clock, True, "cudaMemcpyAsync")
        data = ctypes.string_at(src, nbytes)  # pageable host sources are read before the call returns
        if d is None:  # to pageable host memory: there once the host has waited for this copy
            with self._lock:
                self._pending_host.append((stamp, dst, data))
        else:
            ctypes.memmove(dst, data, nbytes)
        return self._ok()

    def cudaMemsetAsync(self, ptr: Any, value: int, nbytes: int, stream: Any) -> tuple[Any, ...]:
        self.device_access(int(ptr), int(nbytes), stream, True, "cudaMemsetAsync")
        ctypes.memset(int(ptr), int(value), int(nbytes))
        return self._ok()

    def cudaPointerGetAttributes(self, ptr: Any) -> tuple[Any, ...]:
        a = self.find(int(ptr))
        if a is None:
            return self._ok(SimpleNamespace(type=self.cudaMemoryType.cudaMemoryTypeUnregistered, device=-2))
        return self._ok(SimpleNamespace(type=self.cudaMemoryType.cudaMemoryTypeDevice, device=a.device))

    # ------------------------------------------------------------------ what tests use

    def write(self, ptr: int, data: np.ndarray, stream: int) -> None:
        """Device work on ``stream`` writing ``data`` at ``ptr`` (a kernel of the user's, say)."""
        self.device_access(ptr, data.nbytes, stream, True, "a kernel writing device memory")
        ctypes.memmove(ptr, np.ascontiguousarray(data).ctypes.data, data.nbytes)

    def read(self, ptr: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """Device memory as it is now (for assertions; no ordering)."""
        dtype = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return np.frombuffer(ctypes.string_at(ptr, n), dtype).reshape(shape).copy() if n else np.zeros(shape, dtype)

    def outstanding(self, device: int | None = None) -> int:
        with self._lock:
            return sum(1 for a in self.allocations.values() if device is None or a.device == device)

    def live_streams(self) -> list[Any]:
        with self._lock:
            return [s.key for s in self.streams.values() if s.alive and not s.user and not isinstance(s.key, tuple)]

    def live_events(self) -> list[int]:
        with self._lock:
            return [h for h, e in self.events.items() if e.alive]

    def assert_released(self) -> None:
        """Every allocation, stream and event made by the code under test has been released."""
        problems = []
        with self._lock:
            count, size = len(self.allocations), sum(a.size for a in self.allocations.values())
        if count:
            problems.append(f"{count} device allocation(s) never freed ({size} bytes)")
        if self.live_streams():
            problems.append(f"{len(self.live_streams())} stream(s) never destroyed")
        if self.live_events():
            problems.append(f"{len(self.live_events())} event(s) never destroyed")
        if problems:
            raise ContractViolation("; ".join(problems))

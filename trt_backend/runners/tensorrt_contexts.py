"""Execution contexts of one TensorRT engine, pooled by optimization profile, their output
allocators, and TensorRT-RTX's runtime cache file.

Design, as the runtimes this project follows do it:

- A context is fixed to one profile when made and serves one run at a time; a run checks one out
  for its profile and gives it back. Contexts are made only when every one of that profile is
  busy, so there are as many as there are concurrent runs of a profile, not one per thread ever
  seen. ONNX Runtime's TensorRT provider keeps contexts per thread; Torch-TensorRT keeps one
  context per module and re-selects profiles on it; a context per profile avoids re-selecting
  (which "will trigger layer resource updates on the next call", NvInferRuntime.h).
- Each context allocates device memory only for its own profile (``ON_PROFILE_CHANGE``, the
  "profile" strategy of Polygraphy's TrtRunner), not for the largest of all profiles (``STATIC``).
- Outputs are allocated through an ``IOutputAllocator`` from the session's buffer pool, also
  those whose shape depends on data, and the buffer TensorRT wrote becomes the output: no copy
  (Torch-TensorRT's Python runtime clones its allocator's buffer instead).
- TensorRT-RTX compiles kernels when a context is made; one ``IRuntimeConfig`` with one
  ``IRuntimeCache`` per engine makes later contexts reuse them. The cache is loaded from and
  saved to a file per engine in a folder (ONNX Runtime's TensorRT-RTX provider does the same
  with its ``nv_runtime_cache_path`` folder): here ``<cache_dir>/runtime``, written atomically
  under a lock file when the runner closes."""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from trt_backend._files import file_lock, sha256_bytes, write_atomic
from trt_backend.errors import SegmentRunError
from trt_backend.gpu.device import Stream
from trt_backend.gpu.memory import BufferPool, Lease

log = logging.getLogger(__name__)


class OutputAllocator:
    """The buffers one context's outputs are written to, leased from ``pool`` when TensorRT asks
    (``reallocate_output_async``: once each output's size is known, during the enqueue), and the
    shapes it reports. :meth:`take` hands an output's lease to whoever returns it."""

    def __init__(self, trt: Any, pool: BufferPool) -> None:
        outer = self

        class Allocator(trt.IOutputAllocator):  # type: ignore[misc, name-defined]
            def __init__(self) -> None:
                trt.IOutputAllocator.__init__(self)

            def reallocate_output(self, name: str, memory: int, size: int, alignment: int) -> int:
                return outer.reallocate(name, size, alignment)

            def reallocate_output_async(self, name: str, memory: int, size: int, alignment: int,
                                        stream: int) -> int:
                return outer.reallocate(name, size, alignment)

            def notify_shape(self, name: str, shape: Any) -> None:
                outer.shapes[name] = tuple(int(d) for d in shape)

        self.pool = pool
        self.stream: Stream | None = None  # the stream of the run in progress
        self.leases: dict[str, Lease] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.impl = Allocator()

    def reallocate(self, name: str, size: int, alignment: int) -> int:
        lease = self.leases.get(name)
        if lease is None or lease.capacity < size:
            try:
                lease = self.pool.lease(max(1, int(size)), self.stream)
            except Exception as e:  # noqa: BLE001 - TensorRT is told "no memory" (0) and fails the enqueue
                log.error("output '%s': %s", name, e)
                return 0
            self.leases[name] = lease
        return lease.ptr if lease.ptr % max(1, alignment) == 0 else 0

    def begin(self, stream: Stream) -> None:
        self.stream = stream
        self.shapes.clear()

    def take(self, name: str) -> tuple[Lease, tuple[int, ...]] | None:
        lease, shape = self.leases.pop(name, None), self.shapes.get(name)
        return (lease, shape) if lease is not None and shape is not None else None

    def drop(self) -> None:
        self.leases.clear()
        self.shapes.clear()


@dataclass(eq=False)
class PooledContext:
    context: Any
    allocator: OutputAllocator
    profile: int
    stream: Stream | None = None  # the stream of its last run


@dataclass
class ContextPool:
    """Idle contexts per profile; ``make(profile, stream)`` creates one fixed to a profile."""

    make: Callable[[int, Stream], PooledContext]
    idle: dict[int, list[PooledContext]] = field(default_factory=dict)
    made: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _all: list[PooledContext] = field(default_factory=list)

    @contextmanager
    def context(self, profile: int, stream: Stream) -> Iterator[PooledContext]:
        """A context of ``profile`` for one run on ``stream``; its previous run (on another
        stream) is waited for on ``stream`` first: a context runs one enqueue at a time."""
        with self._lock:
            idle = self.idle.get(profile)
            pc = None
            if idle:  # prefer one last used on this stream: no wait at all
                same = [k for k, c in enumerate(idle) if c.stream is stream]
                pc = idle.pop(same[-1] if same else -1)
        if pc is None:
            pc = self.make(profile, stream)
            with self._lock:
                self.made += 1
                self._all.append(pc)
        elif pc.stream is not None and pc.stream is not stream:
            stream.wait_for(pc.stream)
        try:
            pc.allocator.begin(stream)
            yield pc
        finally:
            pc.stream = stream
            pc.allocator.drop()  # Outputs not taken go back to the pool.
            with self._lock:
                self.idle.setdefault(profile, []).append(pc)

    def close(self) -> None:
        with self._lock:
            every, self._all, self.idle = self._all, [], {}
        for pc in every:
            pc.allocator.drop()
            pc.context = None


class RuntimeCacheFile:
    """TensorRT-RTX's runtime cache of one engine: an ``IRuntimeConfig`` whose contexts share
    compiled kernels, loaded from ``folder`` (None: kept in memory only) and saved by :meth:`save`."""

    def __init__(self, engine: Any, engine_bytes: bytes, folder: str | None) -> None:
        self.config = engine.create_runtime_config()
        self.cache = self.config.create_runtime_cache()
        self.path = os.path.join(folder, sha256_bytes(engine_bytes)[:32] + ".rtcache") if folder else None
        if self.path and os.path.exists(self.path):
            with file_lock(self.path + ".lock"):
                with open(self.path, "rb") as f:
                    blob = f.read()
            if not self.cache.deserialize(blob):
                log.info("%s: runtime cache made for another GPU or TensorRT-RTX version; starting afresh", self.path)
        if not self.config.set_runtime_cache(self.cache):
            raise SegmentRunError("TensorRT-RTX refused its runtime cache")

    def save(self) -> None:
        if self.path is None:
            return
        data = bytes(self.cache.serialize())
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with file_lock(self.path + ".lock"):
                write_atomic(self.path, data, durable=False)
        except OSError as e:  # a cache that cannot be written costs time, never a run
            log.warning("could not save the runtime cache %s: %s", self.path, e)



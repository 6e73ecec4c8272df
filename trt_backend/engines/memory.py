"""What a TensorRT build holds in memory, and how a memory budget bounds it.

Measured with TensorRT-RTX 1.7 on CPU (fp32 MLP segments whose weights are in external data):
the parser reads the weights lazily, the builder then holds them, its own copies for the layers
and the engine. Returned as one buffer (``build_serialized_network``) the engine is whole in
memory beside all that: 0.375 GiB of weights peaked 1.2 GiB over the process's baseline.
Streamed to a file as it is written (``build_serialized_network_to_stream``, which
:func:`stream_engine` uses), the same build peaked 0.95 GiB over it, and a 1.5 GiB segment
3.2 GiB: about twice the weights plus 0.2 GiB. A build folder's engines are streamed into the
folder (:class:`EngineFile`) and never held in memory, so peak RSS tracks the largest segment.

A budget (``BuildOptions.max_build_memory``, default the memory available when the builds
start) sets the most weights a segment may hold: (budget - the process's memory now -
workspace - :data:`BUILD_OVERHEAD`) / :data:`BUILD_WEIGHT_FACTOR`; the planner cuts larger
TensorRT segments into pieces that fit (:func:`partitioner.split.split_by_weights`) and as many
builds run at once as fit."""
from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from typing import Any

from partitioner.errors import OptionsError
from trt_backend.ort.sizes import available_memory, proc_bytes

log = logging.getLogger(__name__)

# Peak memory of one segment's build over the process's baseline: BUILD_WEIGHT_FACTOR per byte
# of its weights plus BUILD_OVERHEAD (measured with streamed engines: 2.0x and 0.2 GiB; the
# overhead carries a margin for the network, tactics and allocator slack).
BUILD_WEIGHT_FACTOR = 2.0
BUILD_OVERHEAD = 256 << 20


@dataclass(frozen=True)
class EngineFile:
    """A serialized engine written to ``path`` as it was built, with its SHA-256 and size: the
    bytes are never held in memory. ``len()`` is its size, as for the bytes of an engine."""

    path: str
    sha256: str
    nbytes: int

    def __len__(self) -> int:
        return self.nbytes

    def read(self) -> bytes:
        with open(self.path, "rb") as f:
            return f.read()


def engine_bytes(engine: bytes | EngineFile) -> bytes:
    """The bytes of an engine, read from its file where it was streamed to one."""
    return engine.read() if isinstance(engine, EngineFile) else engine


def stream_engine(trt: Any, builder: Any, network: Any, config: Any, path: str) -> EngineFile | None:
    """Build ``network`` and stream its engine into ``path`` (hashed as it is written); None when
    the build fails (the file is removed)."""

    class Writer(trt.IStreamWriter):  # type: ignore[misc,name-defined]
        def __init__(self, out: Any) -> None:
            trt.IStreamWriter.__init__(self)
            self.out, self.hash, self.size = out, hashlib.sha256(), 0

        def write(self, data: bytes) -> int:
            self.out.write(data)
            self.hash.update(data)
            self.size += len(data)
            return len(data)

    with open(path, "wb") as out:
        writer = Writer(out)
        ok = builder.build_serialized_network_to_stream(network, config, writer)
    if not ok or writer.size == 0:
        os.unlink(path)
        return None
    return EngineFile(path, writer.hash.hexdigest(), writer.size)


def process_memory() -> int:
    """Bytes this process holds now (resident set; 0 where unknown)."""
    return proc_bytes("/proc/self/status", "VmRSS") or 0


@dataclass(frozen=True)
class BuildRoom:
    """Memory one build may take (``room``, bytes over the process's baseline) and the most
    weights a segment may hold to build within it (``max_segment_weights``)."""

    room: int
    workspace: int

    @property
    def max_segment_weights(self) -> int:
        return max(1, int((self.room - self.workspace - BUILD_OVERHEAD) / BUILD_WEIGHT_FACTOR))

    def need(self, weights: int) -> int:
        """Estimated peak memory of building a segment holding ``weights`` bytes."""
        return int(weights * BUILD_WEIGHT_FACTOR) + BUILD_OVERHEAD + self.workspace

    def concurrent(self, largest_weights: int, workers: int) -> int:
        """How many builds of segments up to ``largest_weights`` fit at once (at least one)."""
        return max(1, min(workers, self.room // max(1, self.need(largest_weights))))


def build_room(max_build_memory: int | None, workspace_bytes: int | None) -> BuildRoom | None:
    """The room a budget leaves for builds: ``max_build_memory`` less what the process holds
    now; without a budget, the memory available now. None where neither is known. A budget that
    leaves no room for a build's overhead and workspace is an OptionsError."""
    if max_build_memory is not None:
        held = process_memory()
        room = max_build_memory - held
        least = BUILD_OVERHEAD + (workspace_bytes or 0)
        if room < least:
            raise OptionsError(f"max_build_memory {_gib(max_build_memory)} leaves no room for a build: this process "
                               f"already holds {_gib(held)}, and a build needs {_gib(least)} besides its weights")
    else:
        free = available_memory()
        if free is None:
            return None
        room = free
    return BuildRoom(max(room, 1), workspace_bytes or 0)


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"

"""The choice of runner for each segment of a compiled model, above the runners themselves: ONNX
Runtime (CPU, or the CUDA provider next to TensorRT engines), a TensorRT engine on the GPU, or a
TensorRT segment emulated through ONNX Runtime (its built form, in the precision it was built in).

A :class:`RunnerFactory` is what a Session takes to make its runners; its parts (whether TensorRT
executes here, the TensorRT runner, the per-thread streams and the buffer pool, whether the CUDA
provider is there) are its fields, so a test gives its own instead of patching module globals.
What it makes (:class:`Runners`) owns the streams and the pool: closing it frees every buffer."""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from partitioner import Plan, Segment
from trt_backend.engines.builder import is_held
from trt_backend.engines.emulation import emulation_of, emulation_ort_options, is_quantized
from trt_backend.engines.report import BuiltSegment
from trt_backend.errors import TensorRTUnavailableError
from trt_backend.gpu.device import ThreadStreams
from trt_backend.gpu.memory import BufferPool
from trt_backend.gpu.status import tensorrt_status
from trt_backend.ort.options import OrtOptions
from trt_backend.profiles import Profile
from trt_backend.runners.base import SegmentRunner
from trt_backend.runners.ort import EmulatedTensorRTRunner, OnnxRuntimeRunner
from trt_backend.runners.ort_cuda import OrtCudaRunner, cuda_provider_available
from trt_backend.runners.tensorrt import TensorRTRunner
from trt_backend.tensorrt.flavor import load_flavor

log = logging.getLogger(__name__)


def make_tensorrt_runner(segment: Segment, engine: bytes | None, profiles: Sequence[Profile],
                         shape_tensors: frozenset[str], **kw: Any) -> SegmentRunner:
    """A runner executing ``segment``'s engine on the GPU (see :mod:`trt_backend.runners.tensorrt`)."""
    ok, why = tensorrt_status(kw.get("device_id") or 0)
    if not ok:
        raise TensorRTUnavailableError(f"cannot execute segment {segment.id} on TensorRT: {why}; "
                                       "use emulate=True (or 'auto') to run it through ONNX Runtime")
    if engine is None:
        raise TensorRTUnavailableError(f"segment {segment.id} has no engine")
    return TensorRTRunner(segment, engine, load_flavor("auto"), profiles, shape_tensors, **kw)


@dataclass(frozen=True)
class RunnerFactory:
    """Makes a Session's runners. ``status(device)``: (can TensorRT execute on that GPU, why not);
    ``tensorrt_runner``: makes the runner of a built engine; ``streams``/``pool``: the per-thread
    streams and the buffer pool a GPU session shares; ``cuda_provider``: whether ONNX Runtime's
    CUDA provider is installed (ONNX Runtime segments of a GPU session then stay on the GPU);
    ``ort_cuda_runner``: makes such a segment's runner."""

    status: Callable[[int], tuple[bool, str]] = tensorrt_status
    tensorrt_runner: Callable[..., SegmentRunner] = make_tensorrt_runner
    streams: Callable[[int | None], Any] = ThreadStreams
    pool: Callable[[int | None], Any] = BufferPool
    cuda_provider: Callable[[], bool] = cuda_provider_available
    ort_cuda_runner: Callable[..., SegmentRunner] = OrtCudaRunner

    def executes(self, device_id: int | None) -> tuple[bool, str]:
        """(can TensorRT segments execute here on ``device_id``, why not)."""
        return self.status(device_id or 0)

    def make(self, plan: Plan, built: Mapping[int, BuiltSegment], ort: OrtOptions, *, emulate: bool,
             weights_dir: str | None, device_id: int | None = None, allow_host_code: bool = False,
             runtime_cache_dir: str | None = None, lean_runtime: str | None = None) -> Runners:
        """One runner per segment of ``plan``, in plan order. Emulated TensorRT segments run their
        built form (``built``) through ONNX Runtime in the precision it was built in; with
        ``emulate`` False they run their engines on the GPU ``device_id``, sharing the per-thread
        streams and one buffer pool. ``runtime_cache_dir``: TensorRT-RTX's runtime caches;
        ``lean_runtime``: the lean runtime library version-compatible engines are loaded with."""
        gpu = not emulate and bool(plan.tensorrt_segments())
        out = Runners([], {})
        device_kw: dict[str, Any] = {}
        cuda_ort = False
        if gpu:
            out.streams, out.pool = self.streams(device_id), self.pool(device_id)
            device_kw = {"pool": out.pool, "streams": out.streams, "outputs_on_device": True,
                         "allow_host_code": allow_host_code, "device_id": device_id}
            if runtime_cache_dir is not None:
                device_kw["runtime_cache_dir"] = runtime_cache_dir
            if lean_runtime is not None:
                device_kw["lean_runtime"] = lean_runtime
            cuda_ort = self.cuda_provider()
        try:
            for seg in plan.segments:
                out.runners.append(self._one(plan, seg, built, ort, emulate, weights_dir, device_id, cuda_ort,
                                             out, device_kw))
        except BaseException:
            out.close()
            raise
        return out

    def _one(self, plan: Plan, seg: Segment, built: Mapping[int, BuiltSegment], ort: OrtOptions, emulate: bool,
             weights_dir: str | None, device_id: int | None, cuda_ort: bool, out: Runners,
             device_kw: Mapping[str, Any]) -> SegmentRunner:
        if seg.backend != "tensorrt":
            proto = plan.extract(seg.id)
            if cuda_ort:
                return self.ort_cuda_runner(seg, proto, ort, device_id=device_id if device_id is not None else 0,
                                            weights_dir=weights_dir)
            return OnnxRuntimeRunner(seg, proto, ort, weights_dir=weights_dir)
        b = built[seg.id]
        if emulate:
            if b.precision == "tf32":
                log.warning("segment %d: tf32 is a TensorRT builder flag; emulated, it computes in fp32", seg.id)
            source = b.model
            if any(is_held(t) for t in source.graph.initializer):  # built from weights it held by reference
                source = plan.extract(seg.id)  # (the same segment, as planned, with its weights)
            model = emulation_of(source, b.precision)
            out.precisions[seg.id] = b.precision if b.precision in ("fp16", "bf16", "int8") else "fp32"
            opts = emulation_ort_options(ort, model) if model is not source or is_quantized(model) else ort
            return EmulatedTensorRTRunner(seg, model, opts, b.profiles, b.shape_tensors, weights_dir=weights_dir)
        return self.tensorrt_runner(seg, b.engine, b.profiles, b.shape_tensors, **device_kw)


@dataclass
class Runners:
    """What :meth:`RunnerFactory.make` made: the runners in plan order, the precision each
    emulated TensorRT segment computes in, and the GPU streams and pool (None on CPU).
    :meth:`close` closes the runners, then waits for and destroys the streams, then frees the
    pool's buffers (those still held as outputs are freed when dropped)."""

    runners: list[SegmentRunner]
    precisions: dict[int, str]
    streams: Any = None
    pool: Any = None

    def close(self, runners: Sequence[SegmentRunner] = ()) -> None:
        """Close ``runners`` (default: the ones made) and the GPU resources shared by them."""
        for r in list(runners) or self.runners:
            r.close()
        streams, pool, self.streams, self.pool = self.streams, self.pool, None, None
        if streams is not None:
            streams.close()
        if pool is not None:
            pool.close()

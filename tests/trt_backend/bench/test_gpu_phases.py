"""GPU phase timing of ``trt-backend bench``: real CUDA events split real copies and work on a
stream (GPU). That TensorRTRunner marks its phases in order around its copies and execution is
checked by running it (tests/trt_backend/gpu/test_trt_runner.py)."""
from __future__ import annotations

import numpy as np
import pytest

from trt_backend.bench.gpu_phases import PhaseRecorder
from trt_backend.gpu import device as dev
from trt_backend.gpu import memory as mem


class CopyRunner:
    """TensorRTRunner's sequence on a real stream: H2D per input, 'compute' (device copies of a
    large buffer), D2H per output, each phase marked in ``phase_events``, then synchronize."""

    def __init__(self, pool: mem.BufferPool, nbytes: int) -> None:
        self.stream = dev.Stream()
        self.pool = pool
        self.input_names = ("a", "b")
        self.output_names = ("y",)
        self.inputs = {n: pool.acquire(nbytes, self.stream) for n in self.input_names}
        self.work = pool.acquire(nbytes, self.stream)
        self.phase_events = None

    def _mark(self, point: int) -> None:
        if self.phase_events is not None:
            self.phase_events[point].record(self.stream)

    def run(self, inputs):
        nbytes = inputs[0].nbytes
        self._mark(0)
        for n, v in zip(self.input_names, inputs):
            mem.copy_to_device(self.inputs[n].ptr, v, self.stream)
        self._mark(1)
        for _ in range(20):
            mem.copy_device(self.work.ptr, self.inputs["a"].ptr, nbytes, self.stream)
        self._mark(2)
        host = np.empty(nbytes // 4, np.float32)
        mem.copy_to_host(host, self.work.ptr, self.stream)
        self._mark(3)
        self.stream.synchronize()
        return [host]


@pytest.mark.gpu
def test_cuda_events_split_h2d_compute_d2h() -> None:
    pool = mem.BufferPool()
    x = np.random.default_rng(0).random(16 << 20, dtype=np.float32)  # 64 MiB
    runner = CopyRunner(pool, x.nbytes)
    rec = PhaseRecorder(runner).install()
    try:
        runner.run([x, x])
        rec.recording = True
        for _ in range(3):
            (y,) = runner.run([x, x])
        np.testing.assert_array_equal(y, x)
        assert all(len(v) == 3 for v in rec.samples.values())
        h2d, compute, d2h = (float(np.median(rec.samples[p])) for p in ("h2d", "compute", "d2h"))
        assert h2d > 0 and compute > 0 and d2h > 0
        # two pageable 64 MiB uploads vs one download: both take milliseconds, neither is free
        assert h2d > 0.5 * d2h and h2d + compute + d2h == pytest.approx(float(np.median(rec.totals_ms())), rel=0.5)
    finally:
        rec.close()
        runner.stream.close()
        for buf in (*runner.inputs.values(), runner.work):
            pool.release(buf)
        pool.close()

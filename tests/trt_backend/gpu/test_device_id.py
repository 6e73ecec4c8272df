"""One session per GPU (SessionOptions(device_id=N), --device N).

On CPU: the options, the errors on this machine (no GPU) for real, and the whole Session GPU path
against a fake CUDA runtime with two devices that records which device is current in which
thread when streams, buffers and runs happen (the fake stands only at the CUDA boundary:
cuda-python's runtime module). On a GPU (``gpu`` marker): device 0 for real, and the error for a
device one past the last."""
from __future__ import annotations

import subprocess
import sys
import threading
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest

from tests.helpers import in_threads
from trt_backend.data.demo import DEMO_PATH
from trt_backend.errors import DeviceError, OptionsError
from trt_backend.gpu import device as dev
from trt_backend.ort.options import OrtOptions
from trt_backend.runners.factory import RunnerFactory
from trt_backend.runners.ort import EmulatedTensorRTRunner
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

PROFILE = [{"image": ((1, 3, 32, 32), (2, 3, 32, 32), (4, 3, 32, 32))}]


# ------------------------------------------------------------------ options and errors, for real


@pytest.mark.parametrize("bad", [-1, "1", True, 1.0])
def test_device_id_must_be_a_gpu_index(bad) -> None:
    with pytest.raises(OptionsError, match=r"device_id must be None or a GPU index >= 0, got"):
        SessionOptions(device_id=bad)


def test_no_gpu_here_is_one_clear_error_when_a_gpu_is_asked_for() -> None:
    if dev.cuda_device_count() > 0:
        pytest.skip("this machine has a GPU: see the gpu tests below")  # (never in CI: CI has no GPU)
    with pytest.raises(DeviceError, match=r"device_id 1: no CUDA device is usable here \(0 devices"):
        Session(DEMO_PATH, PROFILE, SessionOptions(device_id=1))
    # an emulated session touches no GPU and ignores device_id
    sess = Session(DEMO_PATH, PROFILE, SessionOptions(device_id=3, emulate=True))
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    want = ort.InferenceSession(DEMO_PATH, providers=["CPUExecutionProvider"]).run(None, {"image": x})
    np.testing.assert_allclose(sess.run(None, {"image": x})[0], want[0], rtol=1e-5, atol=1e-6)
    assert sess.device_id is None


def test_cli_device_without_a_gpu_is_one_line_and_exit_1() -> None:
    if dev.cuda_device_count() > 0:
        pytest.skip("this machine has a GPU")
    proc = subprocess.run([sys.executable, "-m", "trt_backend", "run", DEMO_PATH, "--shapes", "image:1x3x32x32",
                           "--device", "1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trt-backend: error: device_id 1: no CUDA device is usable"), lines
    # --emulate: no GPU is used, --device is ignored
    ok = subprocess.run([sys.executable, "-m", "trt_backend", "run", DEMO_PATH, "--shapes", "image:1x3x32x32",
                         "--device", "1", "--emulate"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "executors: emulated x2, onnxruntime x1" in ok.stdout, ok.stderr


# ------------------------------------------------------------------ a fake CUDA runtime with two GPUs


class FakeCudart:
    """cuda-python's runtime module as far as the device layer uses it, with ``devices`` GPUs:
    the current device is per thread (as in CUDA); allocations and streams remember the device
    current when they were made."""

    class cudaError_t:  # noqa: N801 - cuda-python's names
        cudaSuccess = 0
        cudaErrorInvalidDevice = 101

    class cudaMemoryType:  # noqa: N801
        cudaMemoryTypeHost, cudaMemoryTypeDevice, cudaMemoryTypeManaged = 1, 2, 3

    cudaStreamNonBlocking = 1

    def __init__(self, devices: int) -> None:
        self.devices = devices
        self._local = threading.local()
        self.allocations: dict[int, int] = {}  # ptr -> device
        self.streams: dict[int, int] = {}  # handle -> device
        self._next = 0x1000

    @property
    def current(self) -> int:
        return getattr(self._local, "device", 0)

    def cudaGetDeviceCount(self):  # noqa: N802
        return self.cudaError_t.cudaSuccess, self.devices

    def cudaSetDevice(self, device):  # noqa: N802
        if not 0 <= device < self.devices:
            return (self.cudaError_t.cudaErrorInvalidDevice,)
        self._local.device = device
        return (self.cudaError_t.cudaSuccess,)

    def cudaGetDevice(self):  # noqa: N802
        return self.cudaError_t.cudaSuccess, self.current

    def cudaGetErrorName(self, err):  # noqa: N802
        return self.cudaError_t.cudaSuccess, {101: b"cudaErrorInvalidDevice"}.get(int(err), b"cudaErrorUnknown")

    def _handle(self) -> int:
        self._next += 0x1000
        return self._next

    def cudaStreamCreateWithFlags(self, flags):  # noqa: N802
        h = self._handle()
        self.streams[h] = self.current
        return self.cudaError_t.cudaSuccess, h

    def cudaStreamDestroy(self, h):  # noqa: N802
        return (self.cudaError_t.cudaSuccess,)

    def cudaMalloc(self, size):  # noqa: N802
        p = self._handle()
        self.allocations[p] = self.current
        return self.cudaError_t.cudaSuccess, p

    def cudaFree(self, p):  # noqa: N802
        return (self.cudaError_t.cudaSuccess,)

    def cudaPointerGetAttributes(self, p):  # noqa: N802
        if p in self.allocations:
            return self.cudaError_t.cudaSuccess, SimpleNamespace(type=2, device=self.allocations[p])
        return self.cudaError_t.cudaSuccess, SimpleNamespace(type=1, device=-2)


@pytest.fixture
def two_gpus(monkeypatch):
    fake = FakeCudart(2)
    monkeypatch.setattr(dev, "cudart", lambda: fake)
    return fake


def test_check_device_names_how_many_there_are(two_gpus) -> None:
    assert dev.check_device(1) == 1
    with pytest.raises(DeviceError, match=r"device_id 2 does not exist: this machine has 2 CUDA device\(s\) "
                                          r"\(ids 0\.\.1; CUDA_VISIBLE_DEVICES renumbers them\)"):
        dev.check_device(2)
    two_gpus.devices = 0
    with pytest.raises(DeviceError, match=r"device_id 0: no CUDA device is usable here"):
        dev.check_device(0)


def test_streams_and_pool_buffers_land_on_their_device_from_any_thread(two_gpus) -> None:
    stream, pool = dev.Stream(1), dev.BufferPool(1)
    assert two_gpus.streams[stream.handle] == 1
    got: list[int] = []

    def allocate() -> None:  # a fresh thread starts on device 0, as in CUDA
        got.append(two_gpus.allocations[pool.acquire(1000).ptr])

    t = threading.Thread(target=allocate)
    t.start()
    t.join()
    assert got == [1]
    assert dev.device_of(pool.acquire(10).ptr) == 1 and dev.device_of(0x7) is None


class DeviceRecordingRunner(EmulatedTensorRTRunner):
    """Stands in for the TensorRT runner (engine execution needs a GPU): runs the segment
    emulated and records which device the running thread had current."""

    executor = "tensorrt"

    def __init__(self, segment, engine, profiles, shape_tensors, *, plan, fake, **kw) -> None:
        self.kw, self.fake, self.seen = kw, fake, []
        super().__init__(segment, plan.extract(segment.id), OrtOptions(), profiles, shape_tensors)

    def run_impl(self, inputs, ort_run_options=None):
        self.seen.append((threading.current_thread().name, self.fake.current))
        return super().run_impl(inputs, ort_run_options)


def test_session_on_gpu_1_puts_everything_there_in_every_thread(two_gpus) -> None:
    made: list[DeviceRecordingRunner] = []
    asked: list[int] = []

    def status(device):
        asked.append(device)
        return True, "declared by the test"

    def runner(segment, engine, profiles, shape_tensors, **kw):
        made.append(DeviceRecordingRunner(segment, engine, profiles, shape_tensors, plan=plan, fake=two_gpus, **kw))
        return made[-1]

    plan = Session.make_plan(DEMO_PATH)
    # the real Stream and BufferPool, on the fake CUDA runtime; only TensorRT itself is declared
    runners = RunnerFactory(status=status, tensorrt_runner=runner, cuda_provider=lambda: False)
    sess = Session(plan, PROFILE, SessionOptions(device_id=1), engines={0: b"engine 0", 2: b"engine 2"},
                   runners=runners)
    assert sess.device_id == 1 and set(asked) == {1}
    assert sess.segment_executors == ["tensorrt", "onnxruntime", "tensorrt"]
    assert {r.kw["device_id"] for r in made} == {1}
    assert two_gpus.streams[made[0].kw["stream"].handle] == 1 and made[0].kw["pool"].device_id == 1
    reference = ort.InferenceSession(DEMO_PATH, providers=["CPUExecutionProvider"])

    def serve(seed: int) -> None:
        x = np.random.default_rng(seed).standard_normal((1 + seed % 4, 3, 32, 32)).astype(np.float32)
        for got, want in zip(sess.run(None, {"image": x}), reference.run(None, {"image": x})):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

    assert in_threads(serve, 4) == []
    seen = [s for r in made for s in r.seen]
    assert len({tid for tid, _ in seen}) == 4 and {d for _, d in seen} == {1}  # four threads, each on GPU 1
    # a device array that lives on GPU 0 is refused by name before anything runs
    on_gpu0 = dev.DeviceArray(0x10, (1, 3, 32, 32), np.dtype(np.float32), device_id=0)
    with pytest.raises(DeviceError, match=r"input 'image' is on GPU 0; this session runs on GPU 1"):
        sess.run(None, {"image": on_gpu0})


def test_a_gpu_that_is_not_there_fails_before_planning(two_gpus) -> None:
    with pytest.raises(DeviceError, match=r"device_id 5 does not exist: this machine has 2 CUDA device\(s\)"):
        Session(DEMO_PATH, PROFILE, SessionOptions(device_id=5))


# ------------------------------------------------------------------ on a real GPU


@pytest.mark.gpu
def test_device_0_for_real() -> None:
    count = dev.cuda_device_count()
    assert dev.check_device(0) == 0
    stream, pool = dev.Stream(0), dev.BufferPool(0)
    x = np.arange(4096, dtype=np.float32)
    buf = pool.acquire(x.nbytes)
    dev.copy_to_device(buf.ptr, x, stream)
    assert dev.device_of(buf.ptr) == 0 and dev.current_device() == 0
    np.testing.assert_array_equal(dev.DeviceArray(buf.ptr, x.shape, x.dtype).to_host(stream), x)
    pool.release(buf)
    pool.close()
    stream.close()
    with pytest.raises(DeviceError, match=rf"device_id {count} does not exist: this machine has {count} CUDA "):
        dev.check_device(count)
    with pytest.raises(DeviceError, match=rf"device_id {count} does not exist"):
        Session(DEMO_PATH, PROFILE, SessionOptions(device_id=count))

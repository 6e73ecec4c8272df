"""One session per GPU (SessionOptions(device_id=N), --device N).

On CPU: the options, the errors on this machine (no GPU) for real, and the whole Session GPU path
with the real TensorRT runners against the contract-strict CUDA and TensorRT fakes with two GPUs
(tests/fakes/), which refuse an engine run with the wrong GPU current or on another GPU's memory. On a GPU (``gpu``
marker): device 0 for real, and the error for a
device one past the last."""
from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import onnxruntime as ort
import pytest

from tests.helpers import in_threads
from trt_backend.data.demo import DEMO_PATH
from trt_backend.errors import DeviceError, OptionsError
from tests.fakes.machine import FakeMachine
from trt_backend.gpu import device as dev
from trt_backend.gpu import memory as mem
from trt_backend.gpu.status import tensorrt_status
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

PROFILE = [{"image": ((1, 3, 32, 32), (2, 3, 32, 32), (4, 3, 32, 32))}]


# ------------------------------------------------------------------ options and errors, for real


@pytest.mark.parametrize("bad", [-1, "1", True, 1.0])
def test_device_id_must_be_a_gpu_index(bad) -> None:
    with pytest.raises(OptionsError, match=r"device_id \(a GPU index, or None\) must be a whole number >= 0, got"):
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


# ------------------------------------------------------------------ two fake GPUs


@pytest.fixture
def two_gpus(monkeypatch):
    """The contract-strict CUDA and TensorRT fakes (tests/fakes/) with two GPUs."""
    machine = FakeMachine(monkeypatch, gpus=2)
    yield machine
    machine.check()


def test_check_device_names_how_many_there_are(two_gpus) -> None:
    assert dev.check_device(1) == 1
    with pytest.raises(DeviceError, match=r"device_id 2 does not exist: this machine has 2 CUDA device\(s\) "
                                          r"\(ids 0\.\.1; CUDA_VISIBLE_DEVICES renumbers them\)"):
        dev.check_device(2)
    two_gpus.cuda.gpus = []
    with pytest.raises(DeviceError, match=r"device_id 0: no CUDA device is usable here \(0 devices: no CUDA device\)"):
        dev.check_device(0)


def test_a_driver_older_than_cuda_python_is_named_not_taken_for_no_gpu(two_gpus) -> None:
    """cuda-python 13 on a CUDA 12.4 driver: cudaGetDeviceCount says cudaErrorInsufficientDriver.
    The reason names both versions and the fix, and TensorRT's status passes it on, so an
    emulate="auto" session says why it emulates instead of falling back without a word."""
    two_gpus.cuda.driver = 12040
    count, why = dev.cuda_status()
    assert count == 0 and why == ("the CUDA driver supports CUDA 12.4, older than cuda-python's runtime (CUDA 13.0): "
                                  "update the driver, or install a cuda-python of CUDA 12 (pip install "
                                  "'cuda-python<13')")
    tensorrt_status.cache_clear()
    try:
        ok, reason = tensorrt_status(0)
    finally:
        tensorrt_status.cache_clear()
    assert not ok and "older than cuda-python's runtime (CUDA 13.0)" in reason
    with pytest.raises(DeviceError, match=r"older than cuda-python's runtime"):
        dev.check_device(0)


def test_streams_and_pool_buffers_land_on_their_device_from_any_thread(two_gpus) -> None:
    stream, pool = dev.Stream(1), mem.BufferPool(1)
    assert two_gpus.cuda.streams[stream.handle].device == 1
    got: list[int] = []

    def allocate() -> None:  # a fresh thread starts on device 0, as in CUDA
        buf = pool.acquire(1000)
        got.append(two_gpus.cuda.allocations[buf.ptr].device)
        pool.release(buf)

    t = threading.Thread(target=allocate)
    t.start()
    t.join()
    assert got == [1]
    buf = pool.acquire(10)
    assert dev.device_of(buf.ptr) == 1 and dev.device_of(0x7) is None
    pool.release(buf)
    pool.close()
    stream.close()


def _session_on(machine: FakeMachine, options: SessionOptions) -> tuple[Session, list]:
    plan = Session.make_plan(DEMO_PATH)
    runners = machine.factory(plan)
    sess = Session(plan, PROFILE, options, engines={0: b"engine 0", 2: b"engine 2"}, runners=runners)
    return sess, machine.runners


def _serve_in_threads(sess: Session) -> None:
    reference = ort.InferenceSession(DEMO_PATH, providers=["CPUExecutionProvider"])

    def serve(seed: int) -> None:
        x = np.random.default_rng(seed).standard_normal((1 + seed % 4, 3, 32, 32)).astype(np.float32)
        for got, want in zip(sess.run(None, {"image": x}), reference.run(None, {"image": x})):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

    assert in_threads(serve, 4) == []


def test_session_on_gpu_1_puts_everything_there_in_every_thread(two_gpus) -> None:
    """The real TensorRT runners on the fake runtime: the fake raises if an engine runs with
    another GPU current, or reads memory of another GPU."""
    sess, made = _session_on(two_gpus, SessionOptions(device_id=1))
    assert sess.device_id == 1 and sess.segment_executors == ["tensorrt", "onnxruntime", "tensorrt"]
    assert {r.device_id for r in made} == {1}
    _serve_in_threads(sess)
    assert {two_gpus.cuda.allocations[p].device for p in two_gpus.cuda.allocations} == {1}
    # a device array that lives on GPU 0 is refused by name before anything runs
    on_gpu0 = mem.DeviceArray(0x10, (1, 3, 32, 32), np.dtype(np.float32), device_id=0)
    with pytest.raises(DeviceError, match=r"input 'image' is on GPU 0; this session runs on GPU 1"):
        sess.run(None, {"image": on_gpu0})
    sess.close()


def test_device_id_none_is_the_current_device_pinned_for_every_thread(two_gpus) -> None:
    """device_id=None with GPU 1 current when the session is made: the session lives on GPU 1,
    and threads (which start on GPU 0) run it there, never mixing the two."""
    two_gpus.cuda.cudaSetDevice(1)
    sess, made = _session_on(two_gpus, SessionOptions())
    assert sess.device_id == 1 and {r.device_id for r in made} == {1}
    _serve_in_threads(sess)
    sess.close()


def test_a_gpu_that_is_not_there_fails_before_planning(two_gpus) -> None:
    with pytest.raises(DeviceError, match=r"device_id 5 does not exist: this machine has 2 CUDA device\(s\)"):
        Session(DEMO_PATH, PROFILE, SessionOptions(device_id=5))


# ------------------------------------------------------------------ on a real GPU


@pytest.mark.gpu
def test_device_0_for_real() -> None:
    count = dev.cuda_device_count()
    assert dev.check_device(0) == 0
    stream, pool = dev.Stream(0), mem.BufferPool(0)
    x = np.arange(4096, dtype=np.float32)
    buf = pool.acquire(x.nbytes, stream)
    mem.copy_to_device(buf.ptr, x, stream)
    assert dev.device_of(buf.ptr) == 0 and dev.current_device() == 0
    np.testing.assert_array_equal(mem.DeviceArray(buf.ptr, x.shape, x.dtype).to_host(stream), x)
    pool.release(buf)
    pool.close()
    stream.close()
    with pytest.raises(DeviceError, match=rf"device_id {count} does not exist: this machine has {count} CUDA "):
        dev.check_device(count)
    with pytest.raises(DeviceError, match=rf"device_id {count} does not exist"):
        Session(DEMO_PATH, PROFILE, SessionOptions(device_id=count))

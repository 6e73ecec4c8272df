"""``TensorRTRunner.run_impl`` run on CPU, with fakes exactly at the GPU boundary: the engine and
its execution context (what ``Runtime.deserialize_cuda_engine`` would give, which needs a GPU), the
stream, the buffer pool and the device copies. Everything else is real: the runner, its profile
choice, the ``IOutputAllocator`` subclass of the installed TensorRT-RTX module, the host-tensor
path, and the phase marks bench's GPU timing hooks.

"Device memory" here is host memory (a fake pointer is a real address), so the fake engine
computes with what the runner really bound, and the runner reads back what it really wrote."""
from __future__ import annotations

import ctypes
import types
from typing import Any

import numpy as np
import pytest

from partitioner import Segment
from trt_backend.errors import MemoryLimitError, ProfileError, SegmentRunError
from trt_backend.gpu import device as dev
from trt_backend.runners.tensorrt import TensorRTRunner
from trt_backend.ort.values import memory_limit
from trt_backend.profiles import TensorProfile
from trt_backend.tensorrt.flavor import Flavor

pytestmark = pytest.mark.usefixtures("flavor")


def read(ptr: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return np.frombuffer(ctypes.string_at(ptr, n), dtype).reshape(shape).copy() if n else np.zeros(shape, dtype)


class Log(list):
    pass


class FakeStream:
    """A stream: its handle is what TensorRT gets; synchronize is logged."""

    def __init__(self, log: Log) -> None:
        self.handle = 0x5EED
        self.ptr = self.handle
        self.log = log

    def synchronize(self) -> None:
        self.log.append("synchronize")


class FakePool:
    """Buffer pool on host memory: acquire/release logged, capacities rounded as the real pool."""

    def __init__(self) -> None:
        self.memory: dict[int, np.ndarray] = {}
        self.acquired: list[int] = []
        self.released: list[int] = []

    def acquire(self, nbytes: int) -> dev.DeviceBuffer:
        size = dev.BufferPool.size_class(nbytes)
        block = np.zeros(size, np.uint8)
        self.memory[block.ctypes.data] = block
        self.acquired.append(size)
        return dev.DeviceBuffer(block.ctypes.data, size)

    def release(self, buf: dev.DeviceBuffer) -> None:
        self.released.append(buf.capacity)


class FakeEvent:
    def __init__(self, point: int, log: Log) -> None:
        self.point, self.log = point, log

    def record(self, stream: FakeStream) -> None:
        self.log.append(f"mark {self.point}")


class FakeContext:
    """An execution context: records shapes, addresses and profile switches; ``execute_async_v3``
    computes y = 2x + 1 and top = the k smallest values of x (k from the host shape tensor, so its
    length is known only while enqueuing) and hands both to the output allocator."""

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.addresses: dict[str, int] = {}
        self.allocators: dict[str, Any] = {}
        self.profiles: list[int] = []

    def set_output_allocator(self, name: str, allocator: Any) -> bool:
        self.allocators[name] = allocator
        return True

    def set_optimization_profile_async(self, index: int, stream: int) -> bool:
        assert stream == 0x5EED
        self.profiles.append(index)
        return True

    def set_input_shape(self, name: str, shape: tuple[int, ...]) -> bool:
        self.shapes[name] = tuple(shape)
        return True

    def set_tensor_address(self, name: str, ptr: int) -> bool:
        self.addresses[name] = ptr
        return True

    def execute_async_v3(self, stream: int) -> bool:
        self.engine.log.append("execute")
        if self.engine.fail:
            return False
        x = read(self.addresses["x"], self.shapes["x"], np.float32)
        k = int(read(self.addresses["k"], self.shapes["k"], np.int32)[0])
        for name, value in (("y", 2 * x + 1), ("top", np.sort(x.reshape(-1))[:k])):
            allocator = self.allocators[name]
            ptr = allocator.reallocate_output_async(name, 0, value.nbytes, 256, stream)
            ctypes.memmove(ptr, np.ascontiguousarray(value).ctypes.data, value.nbytes)
            allocator.notify_shape(name, value.shape)
        return True


class FakeEngine:
    def __init__(self, trt: Any, log: Log) -> None:
        self.log = log
        self.fail = False
        self.contexts: list[FakeContext] = []
        io = trt.TensorIOMode
        self.tensors = {"x": (io.INPUT, trt.DataType.FLOAT, trt.TensorLocation.DEVICE),
                        "k": (io.INPUT, trt.DataType.INT32, trt.TensorLocation.HOST),
                        "y": (io.OUTPUT, trt.DataType.FLOAT, trt.TensorLocation.DEVICE),
                        "top": (io.OUTPUT, trt.DataType.FLOAT, trt.TensorLocation.DEVICE)}
        self.num_io_tensors = len(self.tensors)

    def get_tensor_name(self, i: int) -> str:
        return list(self.tensors)[i]

    def get_tensor_mode(self, name: str) -> Any:
        return self.tensors[name][0]

    def get_tensor_dtype(self, name: str) -> Any:
        return self.tensors[name][1]

    def get_tensor_location(self, name: str) -> Any:
        return self.tensors[name][2]

    def create_execution_context(self) -> FakeContext:
        self.contexts.append(FakeContext(self))
        return self.contexts[-1]


@pytest.fixture
def rig(flavor, monkeypatch) -> types.SimpleNamespace:
    """A runner over the fake engine, with the device copies logged (and done on host memory)."""
    log = Log()
    engine = FakeEngine(flavor.module, log)

    class Runtime:  # deserializing an engine needs a GPU: this is the boundary
        def __init__(self, logger: Any) -> None:
            self.engine_host_code_allowed = None

        def deserialize_cuda_engine(self, data: bytes) -> FakeEngine:
            assert data == b"engine bytes"
            return engine

    module = types.SimpleNamespace(**{n: getattr(flavor.module, n) for n in (
        "TensorIOMode", "TensorLocation", "DataType", "nptype", "IOutputAllocator", "ILogger", "Logger")})
    module.Runtime = Runtime
    fake_flavor = Flavor(flavor.name, flavor.version, module)  # type: ignore[arg-type]

    def h2d(dst: int, host: np.ndarray, stream: Any = None) -> None:
        log.append(f"h2d {host.shape}")
        ctypes.memmove(dst, np.ascontiguousarray(host).ctypes.data, host.nbytes)

    def d2h(host: np.ndarray, src: int, stream: Any = None) -> None:
        log.append(f"d2h {host.shape}")
        ctypes.memmove(host.ctypes.data, src, host.nbytes)

    def d2d(dst: int, src: int, nbytes: int, stream: Any = None) -> None:
        log.append(f"d2d {nbytes}")
        ctypes.memmove(dst, src, nbytes)

    monkeypatch.setattr(dev, "copy_to_device", h2d)
    monkeypatch.setattr(dev, "copy_to_host", d2h)
    monkeypatch.setattr(dev, "copy_device", d2d)
    segment = Segment(0, "tensorrt", (0, 1), ("x", "k"), ("y", "top"))
    profiles = [{"x": TensorProfile((1, 4), (2, 4), (2, 4))}, {"x": TensorProfile((3, 4), (4, 4), (8, 4))}]
    pool = FakePool()

    def runner(**kw: Any) -> TensorRTRunner:
        return TensorRTRunner(segment, b"engine bytes", fake_flavor, profiles, frozenset({"k"}), pool=pool,
                              stream=FakeStream(log), **kw)

    return types.SimpleNamespace(runner=runner, engine=engine, log=log, pool=pool)


def inputs(batch: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    return (np.random.default_rng(seed).standard_normal((batch, 4)).astype(np.float32), np.array([k], np.int32))


def test_run_impl_binds_shapes_chooses_profiles_and_reads_the_output_allocator(rig) -> None:
    runner = rig.runner()
    assert runner.engine_inputs == ["x", "k"] and runner.host_io == {"k"}
    results = []
    for batch, k in ((1, 2), (5, 3), (6, 24), (2, 1)):
        x, kk = inputs(batch, k, seed=batch)
        y, top = runner.run([x, kk])
        np.testing.assert_array_equal(y, 2 * x + 1)
        np.testing.assert_array_equal(top, np.sort(x.reshape(-1))[:k])  # a shape known only while enqueuing
        (ctx,) = rig.engine.contexts  # one context per thread, made once
        assert ctx.shapes == {"x": (batch, 4), "k": (1,)}
        results.append(ctx.allocators["y"] is ctx.allocators["top"])
    assert results == [True] * 4  # one output allocator serves the context's outputs
    assert ctx.profiles == [0, 1, 0]  # switched only when the batch moved to another profile
    allocator = runner._local.allocator
    assert allocator.shapes == {"y": (2, 4), "top": (1,)}
    # the allocator grew its buffers when TensorRT asked for more (and kept them when it fit):
    # y: 16 B -> 80 B (size class 256, kept) ; top: 8 B, 12 B, 96 B (all 256), so two acquisitions
    assert sorted(allocator.buffers) == ["top", "y"] and all(b.capacity == 256 for b in allocator.buffers.values())
    # every run's input copy went back to the pool; the allocator's two buffers stay out
    assert len(rig.pool.acquired) == 4 + 2 and len(rig.pool.released) == 4


def test_phases_are_marked_in_order_around_copies_and_execution(rig) -> None:
    runner = rig.runner()
    runner.phase_events = tuple(FakeEvent(k, rig.log) for k in range(4))
    runner.run(list(inputs(2, 3)))
    assert rig.log == ["mark 0", "h2d (2, 4)", "mark 1", "execute", "mark 2", "d2h (2, 4)", "d2h (3,)", "mark 3",
                       "synchronize"]  # the host shape tensor 'k' is bound by address, never copied


def test_device_inputs_are_bound_in_place_and_outputs_stay_on_device(rig) -> None:
    runner = rig.runner(outputs_on_device=True)
    x, k = inputs(4, 5)
    buf = rig.pool.acquire(x.nbytes)
    ctypes.memmove(buf.ptr, x.ctypes.data, x.nbytes)
    on_device = dev.DeviceArray(buf.ptr, x.shape, x.dtype, owner=buf)
    y, top = runner.run([on_device, k])
    assert rig.engine.contexts[0].addresses["x"] == buf.ptr  # no copy: the device array itself
    assert not any(e.startswith("h2d") for e in rig.log)
    assert isinstance(y, dev.DeviceArray) and y.shape == (4, 4) and top.shape == (5,)
    assert y.ptr != runner._local.allocator.buffers["y"].ptr  # a fresh buffer; the allocator's is reused next run
    np.testing.assert_array_equal(read(y.ptr, y.shape, y.dtype), 2 * x + 1)
    np.testing.assert_array_equal(y.to_host(), 2 * x + 1)
    wrong = dev.DeviceArray(buf.ptr, x.shape, np.float16, owner=buf)
    with pytest.raises(SegmentRunError, match="input 'x' is float16 on the device, the engine wants float32"):
        runner.run([wrong, k])


def test_failures_release_buffers_and_are_clear(rig) -> None:
    runner = rig.runner()
    rig.engine.fail = True
    with pytest.raises(SegmentRunError, match="TensorRT execution failed"):
        runner.run(list(inputs(2, 1)))
    assert rig.pool.released == rig.pool.acquired  # the input copy went back to the pool
    rig.engine.fail = False
    with pytest.raises(ProfileError):
        runner.run(list(inputs(9, 1)))  # batch 9 is in no profile
    with memory_limit(16):  # the (2, 4) float32 output needs 32 bytes
        with pytest.raises(MemoryLimitError, match=r"segment 0.*output 'y': shape \(2, 4\) of float32 needs 32 bytes"):
            runner.run(list(inputs(2, 1)))

"""``TensorRTRunner`` run on CPU against the contract-strict fakes of the CUDA and TensorRT runtimes
(tests/fakes/): the runner, its context pool, output allocator, buffer pool, streams and profile
choice are real; the engine computes its ONNX model through ONNX Runtime, reading and writing the
(fake) device memory the runner bound. A broken TensorRT or CUDA rule fails the test."""
from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from partitioner import Segment
from tests.fakes.cuda_runtime import ContractViolation
from tests.fakes.machine import FakeMachine
from trt_backend.errors import MemoryLimitError, ProfileError, SegmentLoadError, SegmentRunError
from trt_backend.gpu import device as dev
from trt_backend.gpu import memory as mem
from trt_backend.ort.values import memory_limit
from trt_backend.profiles import TensorProfile

pytestmark = pytest.mark.usefixtures("flavor")

SEGMENT = Segment(0, "tensorrt", (0, 1, 2), ("x", "k"), ("y", "top"))
PROFILES = [{"x": TensorProfile((1, 4), (2, 4), (2, 4)),
             "k": TensorProfile((1,), (1,), (1,), values=((1,), (2,), (8,)))},
            {"x": TensorProfile((3, 4), (4, 4), (8, 4)),
             "k": TensorProfile((1,), (1,), (1,), values=((1,), (2,), (32,)))}]


def model() -> onnx.ModelProto:
    """y = 2x + 1; top = the k smallest values of x (k a host shape tensor: top's length is known
    only while the engine runs)."""
    nodes = [helper.make_node("Mul", ["x", "two"], ["x2"]), helper.make_node("Add", ["x2", "one"], ["y"]),
             helper.make_node("Reshape", ["x", "flat"], ["xf"]),
             helper.make_node("TopK", ["xf", "k"], ["top", "idx"], largest=0)]
    inits = [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
             helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
             helper.make_tensor("flat", TensorProto.INT64, [1], [-1])]
    graph = helper.make_graph(nodes, "seg", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4]),
                                             helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4]),
                               helper.make_tensor_value_info("top", TensorProto.FLOAT, ["t"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def inputs(batch: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    return np.random.default_rng(seed).standard_normal((batch, 4)).astype(np.float32), np.array([k], np.int64)


def want(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    return 2 * x + 1, np.sort(x.reshape(-1))[:k]


class UserArray:
    """A device array of the user's (a PyTorch tensor, say): produced on the user's stream, which
    its CUDA Array Interface names, as v3 of the interface requires."""

    def __init__(self, machine: FakeMachine, data: np.ndarray, *, offset: int = 0, stream: int | None = None) -> None:
        self.cuda = machine.cuda
        self.stream = stream if stream is not None else self.cuda.user_stream()
        self.base = int(self.cuda.cudaMalloc(max(1, data.nbytes) + offset)[1])
        self.ptr = self.base + offset
        if data.nbytes:
            self.cuda.write(self.ptr, data, self.stream)
        self.__cuda_array_interface__ = {"shape": data.shape, "typestr": data.dtype.str, "data": (self.ptr, False),
                                         "version": 3, "strides": None, "stream": self.stream}

    def free(self) -> None:
        self.cuda.cudaStreamSynchronize(self.stream)
        self.cuda.cudaFree(self.base)


def runner(machine: FakeMachine, **kw: Any):
    return machine.runner(SEGMENT, model(), PROFILES, frozenset({"k"}), **kw)


def test_runs_bind_shapes_choose_profiles_and_read_data_dependent_outputs(fake_gpu) -> None:
    r = runner(fake_gpu)
    for batch, k in ((1, 2), (5, 3), (6, 24), (2, 1)):
        x, kk = inputs(batch, k, seed=batch)
        y, top = r.run([x, kk])
        np.testing.assert_array_equal(y, want(x, k)[0])
        np.testing.assert_array_equal(top, want(x, k)[1])  # a shape known only while enqueuing
    # one context per profile used, made once each and reused; each on its profile from the start,
    # holding device memory for that profile only (not for the largest of both, as STATIC would)
    assert fake_gpu.trt.contexts_created == 2 and r.contexts.made == 2
    assert fake_gpu.trt.context_bytes == [1 << 16, 1 << 16]
    r.close()


def test_device_outputs_own_their_buffers_and_close_frees_everything(fake_gpu) -> None:
    """Every device output holds a pool buffer that goes back when the output is dropped; 50 runs
    reuse the same few buffers; closing frees them all (even the one still held)."""
    r = runner(fake_gpu, outputs_on_device=True)
    x, k = inputs(4, 5)
    for _ in range(50):
        y, top = r.run([x, k])
        np.testing.assert_array_equal(y.to_host(), want(x, 5)[0])
        np.testing.assert_array_equal(top.to_host(), want(x, 5)[1])
        del y, top
    assert r.pool.outstanding == 0 and r.pool.allocations <= 4, (r.pool.outstanding, r.pool.allocations)
    held = r.run([x, k])[0]
    r.close()
    assert fake_gpu.cuda.outstanding() == 1  # only what the caller still holds
    np.testing.assert_array_equal(held.to_host(), want(x, 5)[0])  # still valid after close
    del held


def test_device_inputs_choose_their_profile_and_refusals_are_clear(fake_gpu) -> None:
    r = runner(fake_gpu)
    x, k = inputs(6, 3)
    on_device = UserArray(fake_gpu, x)
    y, top = r.run([on_device, k])  # batch 6 is profile 1's only: chosen from the device array's shape
    np.testing.assert_array_equal(y, want(x, 3)[0])
    too_big = UserArray(fake_gpu, inputs(9, 1)[0])
    with pytest.raises(ProfileError, match=r"input 'x' has shape \(9, 4\)"):
        r.run([too_big, k])
    on_device.free()
    too_big.free()
    r.close()


def test_a_refused_input_shape_names_the_input_and_profile_with_tensorrts_reason(fake_gpu) -> None:
    """The runner's profiles say batch 5 fits profile 1, the engine's profile 1 stops at 4:
    TensorRT's set_input_shape returns false, which is reported, not ignored."""
    narrow = [PROFILES[0], {**PROFILES[1], "x": TensorProfile((3, 4), (4, 4), (4, 4))}]
    engine = fake_gpu.plan_bytes(model(), narrow, host_inputs=("k",))
    from trt_backend.runners.tensorrt import TensorRTRunner

    r = TensorRTRunner(SEGMENT, engine, fake_gpu.flavor, PROFILES, frozenset({"k"}))
    fake_gpu.trt.expect("is outside optimization profile 1")
    with pytest.raises(SegmentRunError, match=r"refused to take input 'x' of shape \(5, 4\) in optimization profile 1: "
                                              r"set_input_shape: 'x' \(5, 4\) is outside optimization profile 1"):
        r.run(list(inputs(5, 2)))
    r.close()


def test_shape_tensor_arriving_on_the_device_goes_to_the_host(fake_gpu) -> None:
    r = runner(fake_gpu)
    x, k = inputs(2, 3)
    k_on_device = UserArray(fake_gpu, k)
    y, top = r.run([x, k_on_device])
    np.testing.assert_array_equal(top, want(x, 3)[1])
    k_on_device.free()
    r.close()


def test_device_inputs_are_read_after_the_stream_producing_them(fake_gpu) -> None:
    """The feed's CUDA Array Interface names the stream it is written on; the engine's stream
    waits for it (the fake raises on a read that is not ordered after the write)."""
    r = runner(fake_gpu)
    x, k = inputs(2, 2)
    feed = UserArray(fake_gpu, x)  # written on the user's stream, not synchronized
    y, _ = r.run([feed, k])
    np.testing.assert_array_equal(y, want(x, 2)[0])
    feed.free()
    r.close()


def test_misaligned_and_empty_device_inputs_get_aligned_non_null_addresses(fake_gpu) -> None:
    empty_profiles = [{"x": TensorProfile((0, 4), (2, 4), (8, 4)),
                       "k": TensorProfile((1,), (1,), (1,), values=((0,), (1,), (8,)))}]
    r = fake_gpu.runner(SEGMENT, model(), empty_profiles, frozenset({"k"}))
    x, k = inputs(3, 2)
    shifted = UserArray(fake_gpu, x, offset=64)  # a view 64 bytes into an allocation (a slice)
    np.testing.assert_array_equal(r.run([shifted, k])[0], want(x, 2)[0])
    empty = UserArray(fake_gpu, np.zeros((0, 4), np.float32))
    empty.__cuda_array_interface__["data"] = (0, False)  # zero-size arrays say 0 (the interface's rule)
    y, top = r.run([empty, np.array([0], np.int64)])
    assert y.shape == (0, 4) and top.shape == (0,)
    shifted.free()
    empty.free()
    r.close()


def test_contexts_are_pooled_per_profile_across_threads_and_streams_are_per_thread(fake_gpu) -> None:
    r = runner(fake_gpu, outputs_on_device=True)
    x, k = inputs(2, 2)
    barrier = threading.Barrier(4)
    streams: set[int] = set()

    def serve() -> None:
        barrier.wait()
        for _ in range(10):
            y, _ = r.run([x, k])
            streams.add(int(y.__cuda_array_interface__["stream"]))
            np.testing.assert_array_equal(y.to_host(), want(x, 2)[0])

    threads = [threading.Thread(target=serve) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(streams) == 4 and len(r.streams) == 4  # a stream per thread
    assert r.contexts.made <= 4  # at most one per concurrent run of the profile, never per run
    assert fake_gpu.trt.compiles == 1  # TensorRT-RTX compiled once: the runtime cache is shared
    r.close()


def test_runtime_cache_file_is_reused_by_the_next_runner(fake_gpu, tmp_path) -> None:
    folder = str(tmp_path / "runtime")
    r = runner(fake_gpu, runtime_cache_dir=folder)
    r.run(list(inputs(2, 2)))
    r.close()
    assert fake_gpu.trt.compiles == 1 and len([f for f in os.listdir(folder) if f.endswith(".rtcache")]) == 1
    again = runner(fake_gpu, runtime_cache_dir=folder)
    again.run(list(inputs(2, 2)))
    assert fake_gpu.trt.compiles == 1  # the kernels came from the file
    again.close()


def test_no_device_to_device_copy_and_no_synchronize_for_device_outputs(fake_gpu, monkeypatch) -> None:
    copies, syncs = [], []
    real_copy, real_sync = fake_gpu.cuda.cudaMemcpyAsync, fake_gpu.cuda.cudaStreamSynchronize

    def counted_copy(*a):
        copies.append(int(a[3]))
        return real_copy(*a)

    def counted_sync(h):
        syncs.append(h)
        return real_sync(h)

    monkeypatch.setattr(fake_gpu.cuda, "cudaMemcpyAsync", counted_copy)
    monkeypatch.setattr(fake_gpu.cuda, "cudaStreamSynchronize", counted_sync)
    r = runner(fake_gpu, outputs_on_device=True)
    on_device = UserArray(fake_gpu, inputs(2, 2)[0])
    fake_gpu.cuda.cudaStreamSynchronize(on_device.stream)  # (ready: nothing to wait for)
    copies.clear()
    syncs.clear()
    y, top = r.run([on_device, inputs(2, 2)[1]])
    assert copies == [] and syncs == []  # TensorRT wrote the outputs where they are handed out
    assert y.to_host().shape == (2, 4)
    del y, top
    on_device.free()
    r.close()


def test_buffer_sizes_round_up_by_at_most_an_eighth() -> None:
    for n in (1, 255, 256, 1000, 4097, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 7, 10**9):
        size = mem.BufferPool.size_class(n)
        assert size >= n and size % 256 == 0 and (size - n <= 255 or size <= n * 1.125), (n, size)
    assert mem.BufferPool.size_class((1 << 20) + 1) < 1.2 * (1 << 20)  # not 2 MiB


def test_fp8_engine_io_loads_and_runs(fake_gpu) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "fp8",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT8E4M3FN, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FN, [2, 3])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    r = fake_gpu.runner(Segment(0, "tensorrt", (0,), ("x",), ("y",)), m)
    assert r.dtypes["x"] == np.dtype(ml_dtypes.float8_e4m3fn)
    x = np.array([[0.5, 1, 2], [-1, 4, 0.25]], ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(r.run([x])[0].astype(np.float32), x.astype(np.float32))
    r.close()


def test_an_engine_tensorrt_rtx_calls_invalid_here_is_refused_before_deserializing(fake_gpu) -> None:
    engine = fake_gpu.plan_bytes(model(), PROFILES, host_inputs=("k",), sms=(120,))
    from trt_backend.runners.tensorrt import TensorRTRunner

    with pytest.raises(SegmentLoadError, match=r"cannot run on this GPU and runtime \(UNSUPPORTED_CC\)"):
        TensorRTRunner(SEGMENT, engine, fake_gpu.flavor, PROFILES, frozenset({"k"}))


def test_failures_release_buffers_and_are_clear(fake_gpu) -> None:
    r = runner(fake_gpu)
    with pytest.raises(ProfileError):
        r.run(list(inputs(9, 1)))  # batch 9 is in no profile
    with memory_limit(16):  # the (2, 4) float32 output needs 32 bytes
        with pytest.raises(MemoryLimitError, match=r"segment 0.*output 'y': shape \(2, 4\) of float32 needs 32 bytes"):
            r.run(list(inputs(2, 1)))
    assert r.pool.outstanding == 0
    r.close()


def test_the_fake_fails_loudly_on_an_unordered_read(fake_gpu) -> None:
    """The contract fake itself: an engine reading memory written on another stream without an
    event between them is a race, reported as such."""
    feed = UserArray(fake_gpu, inputs(2, 2)[0])
    stream = dev.Stream()
    with pytest.raises(ContractViolation, match="while a write queued on another stream may still be running"):
        fake_gpu.cuda.device_access(feed.ptr, 32, stream.handle, False, "a read")
    stream.close()
    feed.free()


def test_phases_are_marked_in_order_around_copies_and_execution(fake_gpu, monkeypatch) -> None:
    """bench's GPU phase timing: start, inputs copied, work queued, outputs copied, then the stream
    synchronized (the host shape tensor 'k' is bound by address, never copied)."""
    from tests.fakes import tensorrt_runtime

    log: list[str] = []
    copy, execute, sync = fake_gpu.cuda.cudaMemcpyAsync, tensorrt_runtime._Context.execute_async_v3, \
        fake_gpu.cuda.cudaStreamSynchronize

    def logged_copy(*a):
        log.append({1: "h2d", 2: "d2h", 3: "d2d"}[int(a[3])])
        return copy(*a)

    def logged_execute(self, s):
        log.append("execute")
        return execute(self, s)

    def logged_sync(h):
        log.append("synchronize")
        return sync(h)

    monkeypatch.setattr(fake_gpu.cuda, "cudaMemcpyAsync", logged_copy)
    monkeypatch.setattr(tensorrt_runtime._Context, "execute_async_v3", logged_execute)
    monkeypatch.setattr(fake_gpu.cuda, "cudaStreamSynchronize", logged_sync)

    class Mark:
        def __init__(self, k: int) -> None:
            self.k = k

        def record(self, stream: Any) -> None:
            log.append(f"mark {self.k}")

    r = runner(fake_gpu)
    r.phase_events = tuple(Mark(k) for k in range(4))
    r.run(list(inputs(2, 3)))
    assert log == ["mark 0", "h2d", "mark 1", "execute", "mark 2", "d2h", "d2h", "mark 3", "synchronize"]
    r.close()


def test_an_input_no_layer_reads_is_bound_as_every_input_is(fake_gpu) -> None:
    """TensorRT keeps a network input no layer reads in the engine (a model's input its nodes never
    read: the segment holding the whole model lists it), and an enqueue needs its shape and an
    address as any input's: the runner binds it from its feed."""
    nodes = [helper.make_node("Mul", ["x", "two"], ["x2"]), helper.make_node("Add", ["x2", "one"], ["y"])]
    inits = [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
             helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])]
    graph = helper.make_graph(nodes, "unread", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4]),
                                                helper.make_tensor_value_info("length", TensorProto.INT64, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    profiles = [{"x": TensorProfile((1, 4), (2, 4), (4, 4)), "length": TensorProfile((1,), (1,), (2,))}]
    r = fake_gpu.runner(Segment(0, "tensorrt", (0, 1), ("x", "length"), ("y",)), proto, profiles)
    x = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    (y,) = r.run([x, np.array([3], np.int64)])
    np.testing.assert_array_equal(y, 2 * x + 1)
    r.close()

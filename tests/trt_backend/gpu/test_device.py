"""The cuda-python device layer: API names checked here on CPU, behaviour on a GPU."""
from __future__ import annotations

import numpy as np
import pytest

from trt_backend.gpu import device as dev
from trt_backend.gpu import memory as mem


def cudart_or_skip():
    try:
        return dev.cudart()
    except dev.CudaError as e:
        pytest.skip(str(e))


def test_every_cudart_name_exists_in_cuda_python() -> None:
    rt = cudart_or_skip()
    missing = [name for name in dev.CUDART_API if not hasattr(rt, name)]
    assert missing == []
    assert hasattr(rt.cudaMemcpyKind, "cudaMemcpyHostToDevice") and hasattr(rt.cudaMemcpyKind, "cudaMemcpyDeviceToHost")
    assert hasattr(rt.cudaDeviceAttr, "cudaDevAttrComputeCapabilityMajor")


def test_device_count_is_an_answer_with_its_reason() -> None:
    """No device comes with the reason why; devices come with none."""
    count, why = dev.cuda_status()
    assert dev.cuda_device_count() == count
    assert type(count) is int and count >= 0 and (count == 0) == bool(why), (count, why)


def test_size_classes() -> None:
    assert [mem.BufferPool.size_class(n) for n in (0, 1, 256, 257, 1000, 4096, 4097, 1 << 20, (1 << 20) + 1)] == \
        [256, 256, 256, 512, 1024, 4096, 4608, 1 << 20, (1 << 20) + (1 << 17)]


class FakeDeviceArray:
    """Stands in for a CuPy/PyTorch array at the GPU boundary: only the interface dict."""

    def __init__(self, shape, typestr, strides=None) -> None:
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (0xDEAD00, False),
                                         "version": 3, "strides": strides}


def test_foreign_device_arrays_are_viewed_without_copy() -> None:
    view = mem.as_device_array(FakeDeviceArray((2, 3), "<f4"))
    assert view is not None
    assert (view.ptr, view.shape, view.dtype, view.nbytes) == (0xDEAD00, (2, 3), np.float32, 24)
    assert view.__cuda_array_interface__["data"] == (0xDEAD00, False)
    strided = mem.as_device_array(FakeDeviceArray((2, 3), "<f2", strides=(6, 2)))
    assert strided is not None and strided.nbytes == 12
    with pytest.raises(dev.CudaError, match=r"not C-contiguous \(strides \(2, 4\)\)"):
        mem.as_device_array(FakeDeviceArray((2, 3), "<f2", strides=(2, 4)))
    assert mem.as_device_array(np.zeros(3)) is None


@pytest.mark.gpu
def test_round_trip_through_pooled_device_memory() -> None:
    pool, stream = mem.BufferPool(), dev.Stream()
    x = np.arange(1000, dtype=np.float32)
    buf = pool.acquire(x.nbytes, stream)
    mem.copy_to_device(buf.ptr, x, stream)
    other = pool.acquire(x.nbytes, stream)
    mem.copy_device(other.ptr, buf.ptr, x.nbytes, stream)
    out = mem.DeviceArray(other.ptr, x.shape, x.dtype).to_host(stream)
    np.testing.assert_array_equal(out, x)
    pool.release(buf)
    again = pool.acquire(x.nbytes, stream)
    assert again.ptr == buf.ptr and pool.allocations == 2  # reused, not reallocated
    pool.release(again)
    pool.release(other)
    pool.close()
    stream.close()
    assert pool.allocated_bytes == 0


@pytest.mark.gpu
def test_events_time_work_on_a_stream() -> None:
    pool, stream = mem.BufferPool(), dev.Stream()
    x = np.ones(1 << 24, np.float32)
    buf = pool.acquire(x.nbytes, stream)
    start, end = dev.Event(), dev.Event()
    start.record(stream)
    mem.copy_to_device(buf.ptr, x, stream)
    end.record(stream)
    end.synchronize()
    assert end.elapsed_ms(start) > 0
    assert dev.compute_capability()[0] >= 7


@pytest.mark.gpu
def test_cupy_and_torch_arrays_shared_without_copy() -> None:
    cupy = pytest.importorskip("cupy")
    a = cupy.arange(12, dtype=cupy.float32).reshape(3, 4)
    view = mem.as_device_array(a)
    assert view is not None
    assert view.ptr == a.data.ptr and view.shape == (3, 4)
    back = cupy.asarray(view)  # our interface consumed by CuPy: same memory
    back[0, 0] = 42
    assert float(a[0, 0]) == 42
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float16, device="cuda")
    tv = mem.as_device_array(t)
    assert tv is not None
    assert tv.ptr == t.data_ptr() and tv.dtype == np.float16
    np.testing.assert_array_equal(tv.to_host(), np.arange(6, dtype=np.float16))


def test_every_onnxruntime_name_of_the_cuda_runner_exists() -> None:
    import onnxruntime as ort

    from trt_backend.runners.ort_cuda import ORT_API

    missing = []
    for name in ORT_API:
        obj = ort
        for part in name.split("."):
            obj = getattr(obj, part, None)
        if obj is None:
            missing.append(name)
    assert missing == []


def test_session_takes_device_feeds_without_copy_and_validates_them() -> None:
    """At the GPU boundary: a device array (interface only) is checked like a numpy feed."""
    from trt_backend.data.demo import DEMO_PATH
    from trt_backend.errors import FeedError
    from trt_backend.session.options import SessionOptions
    from trt_backend.session.session import Session

    sess = Session(DEMO_PATH, [{"image": ((1, 3, 32, 32), (2, 3, 32, 32), (4, 3, 32, 32))}],
                   SessionOptions(emulate=True))
    validated = sess._validator.validate({"image": FakeDeviceArray((2, 3, 32, 32), "<f4")})
    assert isinstance(validated["image"], mem.DeviceArray) and validated["image"].ptr == 0xDEAD00
    with pytest.raises(FeedError, match=r"input 'image': expected dtype float32 .*got float16"):
        sess._validator.validate({"image": FakeDeviceArray((2, 3, 32, 32), "<f2")})
    with pytest.raises(FeedError, match=r"shape \(8, 3, 32, 32\) is outside every profile"):
        sess._validator.validate({"image": FakeDeviceArray((8, 3, 32, 32), "<f4")})


def test_two_threads_ordering_one_stream_after_theirs_each_wait_for_their_own(fake_gpu, monkeypatch) -> None:
    """A Stream orders itself after another with one event: recorded on the producer, then waited
    for. A stream waits for the event's latest record, so a second thread recording the same event
    between the first's record and wait ordered the first's reads after the wrong stream (the ONNX
    Runtime CUDA runner's one stream is shared by every thread that runs it)."""
    import threading
    import time

    from tests.fakes.cuda_runtime import ContractViolation

    cuda = fake_gpu.cuda
    shared = dev.Stream(0)
    first, second = cuda.user_stream(), cuda.user_stream()
    ptr = int(cuda.cudaMalloc(256)[1])
    cuda.write(ptr, np.ones(4, np.float32), first)  # the first thread's input, made on its stream
    record = cuda.cudaEventRecord

    def slow_record(event, stream):
        result = record(event, stream)
        if threading.current_thread().name == "first":
            time.sleep(0.2)  # the first thread loses the CPU between its record and its wait
        return result

    monkeypatch.setattr(cuda, "cudaEventRecord", slow_record)
    seen: list[str] = []

    def read_after_first() -> None:
        shared.wait_for(first)
        try:
            cuda.device_access(ptr, 16, shared.handle, False, "reading the first thread's input")
            seen.append("ordered")
        except ContractViolation as e:
            seen.append(str(e))

    def order_after_second() -> None:
        time.sleep(0.05)
        shared.wait_for(second)

    threads = [threading.Thread(target=read_after_first, name="first"),
               threading.Thread(target=order_after_second, name="second")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == ["ordered"]
    shared.close()
    cuda.cudaFree(ptr)


def test_the_host_source_of_an_async_copy_lives_until_the_stream_has_run_it(fake_gpu) -> None:
    """cudaMemcpyAsync may read pageable host memory after it returns (CUDA Runtime API, "API
    synchronization behavior"): a temporary handed to it (a dtype cast, packed int4) must outlive
    the copy. copy_to_device holds it on the stream until an event after the copy has completed
    (asked at the stream's next hold) or the stream is synchronized."""
    import gc
    import weakref

    pool, stream = mem.BufferPool(0), dev.Stream(0)
    lease = pool.lease(256, stream)
    source = np.arange(8, dtype=np.float32)
    alive = weakref.ref(source)
    mem.copy_to_device(lease.ptr, source, stream)
    del source
    gc.collect()
    assert alive() is not None  # held while the copy may still read it
    stream.synchronize()
    gc.collect()
    assert alive() is None  # and let go once the stream has run
    later = np.arange(8, dtype=np.float32)
    kept = weakref.ref(later)
    mem.copy_to_device(lease.ptr, later, stream)
    del later
    mem.copy_to_device(lease.ptr, np.zeros(8, np.float32), stream)  # its event has completed: let go here
    gc.collect()
    assert kept() is None
    np.testing.assert_array_equal(mem.DeviceArray(lease.ptr, (8,), np.dtype(np.float32)).to_host(stream), np.zeros(8))
    del lease
    stream.close()
    pool.close()


def test_a_lease_freed_by_a_collection_inside_the_pools_own_work_gives_its_buffer_back(fake_gpu) -> None:
    """A Lease's finalizer gives its buffer back from whatever the thread was doing when a
    garbage-collection pass freed it: an allocation inside the pool's lock, say. With a
    non-reentrant lock that thread waited for itself for ever."""
    import gc
    import threading

    pool = mem.BufferPool(0)

    def collect_inside_the_lock() -> None:
        cycle: list[object] = [pool.lease(256)]
        cycle.append(cycle)  # only a collection frees it
        del cycle
        with pool._lock:
            gc.collect()

    worker = threading.Thread(target=collect_inside_the_lock, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "the thread waits for the pool's lock it holds"
    assert pool.outstanding == 0
    pool.close()


def test_a_thread_that_ended_leaves_its_stream_to_the_next(fake_gpu) -> None:
    """One stream per thread that runs work, kept until the session closes: a caller running each
    call in a fresh thread grew one stream (and its events) per call. A stream of an ended thread
    goes to the next new thread; live threads keep their own."""
    import threading

    streams = dev.ThreadStreams(0)
    seen: list[int] = []

    def use() -> None:
        seen.append(int(streams.current().handle))

    for _ in range(20):
        t = threading.Thread(target=use)
        t.start()
        t.join()
    assert len(streams) == 1 and len(set(seen)) == 1
    hold, go = threading.Event(), threading.Event()

    def keep() -> None:
        seen.append(int(streams.current().handle))
        hold.set()
        go.wait(10)

    first = threading.Thread(target=keep)
    first.start()
    hold.wait(10)
    use()  # (this thread, beside a live one: a stream of its own)
    go.set()
    first.join()
    assert len(streams) == 2 and seen[-1] != seen[-2]
    streams.close()

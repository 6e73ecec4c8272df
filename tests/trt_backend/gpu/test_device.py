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

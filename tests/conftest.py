"""Shared fixtures. TensorRT-dependent tests skip only where no TensorRT flavor imports; in CI
(CI=true) that is an error instead, since CI installs tensorrt-rtx and must run them."""
from __future__ import annotations

import os

import onnx
import pytest


def _tensorrt_importable() -> bool:
    try:
        from trt_backend.tensorrt.flavor import load_flavor

        load_flavor("auto")
        return True
    except Exception:  # noqa: BLE001 - any import failure means "not here"
        return False


HAVE_TENSORRT = _tensorrt_importable()


@pytest.fixture(scope="session")
def flavor():
    """The installed TensorRT flavor (tensorrt preferred, else tensorrt_rtx)."""
    if not HAVE_TENSORRT:
        if os.environ.get("CI"):
            pytest.fail("CI must have a TensorRT flavor (tensorrt-rtx-cu13) for capability and build tests")
        pytest.skip("no TensorRT flavor importable")
    from trt_backend.tensorrt.flavor import load_flavor

    return load_flavor("auto")


@pytest.fixture(scope="session")
def oracle(flavor):
    """The real TensorRT(-RTX) parser oracle."""
    from trt_backend.tensorrt.oracle import ParserOracle

    return ParserOracle(flavor)


@pytest.fixture(scope="session")
def light_dir() -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def _cuda_devices() -> int:
    try:
        from trt_backend.gpu.device import cuda_device_count

        return cuda_device_count()
    except Exception:  # noqa: BLE001 - no cuda-python, no driver: no device
        return 0


def pytest_collection_modifyitems(config, items) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]  # (not keywords: a folder named gpu/ is one)
    if not gpu_items or _cuda_devices() > 0:
        return
    skip = pytest.mark.skip(reason="needs a usable CUDA device")
    for item in gpu_items:
        item.add_marker(skip)

"""The Resize kernel on a CUDA device, launched as the plugin's JIT path and TensorRT's AOT path
launch it, equals the host build bit for bit (which matches ONNX Runtime). Skipped without a
usable CUDA device; ``benchmarks/device/resize_gpu_check.py`` runs the larger version."""
from __future__ import annotations

import numpy as np
import pytest

from plugins.resize import host
from plugins.resize.check import random_cases

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def device():
    from tests.support.resize_gpu import Device

    try:
        return Device()
    except Exception as e:  # noqa: BLE001 - no driver, no device, no cuda-python: all mean "not here"
        pytest.skip(f"needs a usable CUDA device ({type(e).__name__}: {e})")


def test_generic_and_aot_kernels_equal_the_host_build(device) -> None:
    from tests.support.resize_gpu import aot, generic

    for k, case in enumerate(random_cases(40, seed=9)):
        params, x = case.params(), case.input()
        want = host.run(params, x)
        np.testing.assert_array_equal(generic(device, params, x, "float32"), want)
        x16 = x.astype(np.float16)
        np.testing.assert_array_equal(generic(device, params, x16, "float16"), host.run(params, x16))
        if k < 5:
            np.testing.assert_array_equal(aot(device, params, x), want)

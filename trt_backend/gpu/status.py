"""Whether TensorRT segments can execute here (a TensorRT flavor and a CUDA device it runs on)."""
from __future__ import annotations

import functools

from trt_backend.errors import TensorRTUnavailableError
from trt_backend.gpu.device import compute_capability, cuda_status
from trt_backend.tensorrt.flavor import load_flavor

# SMs TensorRT-RTX runs on (its support matrix: Turing to Blackwell RTX parts); data-centre
# Hopper/Blackwell parts are not among them. Whether an engine built with its default targets
# runs on a given one (SM 7.5 is not a default target) is the folder's business (artifacts.read).
_RTX_SMS = frozenset({(7, 5), (8, 0), (8, 6), (8, 9), (12, 0), (12, 1)})


@functools.lru_cache(maxsize=8)
def tensorrt_status(device_id: int = 0) -> tuple[bool, str]:
    """(can TensorRT segments execute here, on ``device_id``; why not). A CUDA driver too old for
    the installed cuda-python is named as such (with both versions), not taken for "no GPU"."""
    try:
        flavor = load_flavor("auto")
    except TensorRTUnavailableError as e:
        return False, str(e)
    devices, why = cuda_status()
    if devices == 0:
        return False, f"{flavor.target} is installed but no CUDA device is usable: {why}"
    if device_id >= devices:
        return False, f"{flavor.target} is installed but CUDA device {device_id} does not exist ({devices} device(s))"
    if flavor.is_rtx:
        sm = compute_capability(device_id)
        if sm not in _RTX_SMS:
            return False, f"{flavor.target} cannot run on this GPU (SM {sm[0]}.{sm[1]}); install full TensorRT"
    return True, f"{flavor.target} on {devices} CUDA device(s)"

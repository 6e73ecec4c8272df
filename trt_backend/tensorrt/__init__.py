"""TensorRT without a GPU: the flavor shim (full TensorRT or TensorRT-RTX), the parser oracle that
decides capability, and the list of TensorRT API names the code uses."""
from __future__ import annotations

from trt_backend._lazy import facade

__getattr__, __dir__, __all__ = facade(__name__, {
    "Flavor": "trt_backend.tensorrt.flavor",
    "load_flavor": "trt_backend.tensorrt.flavor",
    "ParserOracle": "trt_backend.tensorrt.oracle",
})

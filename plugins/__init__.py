"""TensorRT plugins for ONNX ops TensorRT's importer rejects (registry, specs, kernels).

The registry is an instance passed around, never module state; plugins receive the TensorRT
module from the backend, so importing this package loads no TensorRT."""
from __future__ import annotations

__all__: list[str] = []

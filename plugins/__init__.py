"""TensorRT plugins for ONNX ops TensorRT's importer rejects (registry, specs, kernels).

The registry is an instance passed around, never module state; plugins receive the TensorRT
module from the backend, so importing this package loads no TensorRT (nor CUDA, nor a
compiler), and its names load their modules (onnx and numpy) on first use.

For the engine builder: ``rewrite_for_engine(segment, registry, claimed_nodes(plan, sid))``
gives the segment copy for full TensorRT's parser, and ``registry.register_with(tensorrt)``
defines the plugins there first (full TensorRT >= 10.6; never TensorRT-RTX)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from partitioner._facade import facade

if TYPE_CHECKING:
    from .registry import PluginRecord, Registry
    from .rewrite import claimed_nodes, rewrite_for_engine

# public name -> module holding it (imported on first use: ``plugins.errors`` loads no onnx)
_PUBLIC = {"PluginRecord": "plugins.registry", "Registry": "plugins.registry", "claimed_nodes": "plugins.rewrite",
           "rewrite_for_engine": "plugins.rewrite"}

__all__ = ["PluginRecord", "Registry", "claimed_nodes", "default_registry", "register_with", "rewrite_for_engine"]


def default_registry() -> Registry:
    """A new registry holding every plugin trt-backend ships (today: Resize)."""
    from .registry import Registry
    from .resize import record

    return Registry([record()])


def register_with(trt: object, registry: Registry | None = None) -> list[str]:
    """Register ``registry``'s plugins (default: all shipped) with the TensorRT module ``trt``."""
    from types import ModuleType

    if not isinstance(trt, ModuleType):
        raise TypeError("register_with takes the tensorrt module itself")
    if trt.__name__.startswith("tensorrt_rtx"):
        raise ValueError("TensorRT-RTX cannot take Python plugins (its parser aborts on them); use full TensorRT")
    return (registry or default_registry()).register_with(trt)


__getattr__, _dir, _ = facade(__name__, _PUBLIC)


def __dir__() -> list[str]:
    return sorted(__all__)

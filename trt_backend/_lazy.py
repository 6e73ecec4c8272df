"""Package facades whose names load on first use: a package lists its public names and the
module holding each, and nothing heavy (TensorRT, ONNX Runtime, CUDA) or circular loads until a
name is asked for. And :func:`lazy_module`: a module a command needs on one of its paths only,
declared at the top of the module that uses it and loaded when that path is taken."""
from __future__ import annotations

import importlib
import types
from typing import Any

from partitioner._facade import facade

__all__ = ["facade", "lazy_module"]


class _LazyModule(types.ModuleType):
    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self.__name__), attr)


def lazy_module(name: str) -> types.ModuleType:
    """A stand-in for module ``name`` that imports it on the first attribute asked of it (the
    import graph checks read these calls as imports: ``tests/test_layers.py``)."""
    return _LazyModule(name)

"""Package facades whose names load on first use: a package lists its public names and the
module holding each, and nothing heavy (TensorRT, ONNX Runtime, CUDA) or circular loads until a
name is asked for. And :func:`lazy_module`: a module a command needs on one of its paths only,
declared at the top of the module that uses it and loaded when that path is taken."""
from __future__ import annotations

import importlib
import types
from collections.abc import Callable, Mapping
from typing import Any


def facade(package: str, names: Mapping[str, str], renamed: Mapping[str, str] | None = None
           ) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """(``__getattr__``, ``__dir__``, ``__all__``) for ``package``: ``names`` maps each public name
    to the module holding it; ``renamed``, a public name to the name it has in that module."""
    table, aliases = dict(names), dict(renamed or {})

    def getattr_(name: str) -> Any:
        if name in table:
            return getattr(importlib.import_module(table[name]), aliases.get(name, name))
        raise AttributeError(f"module '{package}' has no attribute '{name}'")

    def dir_() -> list[str]:
        return sorted(table)

    return getattr_, dir_, sorted(table)


class _LazyModule(types.ModuleType):
    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self.__name__), attr)


def lazy_module(name: str) -> types.ModuleType:
    """A stand-in for module ``name`` that imports it on the first attribute asked of it (the
    import graph checks read these calls as imports: ``tests/test_layers.py``)."""
    return _LazyModule(name)

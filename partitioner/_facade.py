"""Package facades whose names load on first use: a package lists its public names and the
module holding each, and nothing heavy or circular loads until a name is asked for. It lives in
the lowest layer so that every package (partitioner, plugins, trt_backend's) uses this one."""
from __future__ import annotations

import importlib
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

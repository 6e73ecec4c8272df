"""The runtime: :class:`Session` (a compiled model or a build folder, run segment by segment),
what a session is (:class:`SessionOptions`) and what one run does (:class:`RunOptions`), and feed
validation.

Names load on first use: the options sit below the compile path (which reads them), the Session
above it."""
from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"Session": "trt_backend.session.session", "load": "trt_backend.session.session",
         "SessionOptions": "trt_backend.session.options", "RunOptions": "trt_backend.session.options"}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'trt_backend.session' has no attribute '{name}'")

"""The runtime: :class:`Session` (a compiled model or a build folder, run segment by segment),
what a session is (:class:`SessionOptions`) and what one run does (:class:`RunOptions`), and feed
validation.

Names load on first use: the options sit below the compile path (which reads them), the Session
above it."""
from __future__ import annotations

from trt_backend._lazy import facade

__getattr__, __dir__, __all__ = facade(__name__,
                                       {"Session": "trt_backend.session.session", "load": "trt_backend.session.session",
         "SessionOptions": "trt_backend.session.options", "RunOptions": "trt_backend.session.options"})

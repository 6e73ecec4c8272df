"""Serving a Session on Ray Serve (``pip install -e .[serve]``): :func:`start`, :class:`ServeClient`,
:class:`ServeOptions`. Ray is imported only when something is served."""
from __future__ import annotations

from trt_backend.serve.app import ServeClient, build_app, start, stop
from trt_backend.serve.batching import BatchRunner, batch_rows
from trt_backend.serve.options import ServeOptions

__all__ = ["BatchRunner", "ServeClient", "ServeOptions", "batch_rows", "build_app", "start", "stop"]

"""Subcommands of the ``trt-backend`` CLI: one module each, with ``register(parser)`` (its
arguments) and ``handle(args)`` (its work); ``_args`` holds the flags they share and makes the one
SessionOptions every command that makes a session uses. The list of commands is ``trt_backend.cli.COMMANDS``."""
from __future__ import annotations

__all__: list[str] = []

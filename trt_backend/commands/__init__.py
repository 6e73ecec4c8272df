"""Subcommands of the ``trt-backend`` CLI; each module exposes ``register(subparsers)``."""

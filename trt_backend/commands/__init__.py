"""Subcommands of the ``trt-backend`` CLI: one module each, with ``register(parser)`` (its
arguments) and ``handle(args)`` (its work); ``_args`` holds the argument groups they share."""

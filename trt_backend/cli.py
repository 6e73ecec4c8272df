"""The ``trt-backend`` command line. Each subcommand lives in ``trt_backend.commands.<name>``
and exposes ``register(subparsers)``, which points the parser at its ``handle(args)``; user
errors print one line and exit 1."""
from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from trt_backend.commands import bench, build, compare, demo, inspect, run
from trt_backend.errors import TrtBackendError

COMMANDS = (inspect, run, build, bench, compare, demo)  # in the order --help lists them


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trt-backend", description="TensorRT engines with ONNX Runtime fallback.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-v info, -vv debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except TrtBackendError as e:
        print(f"trt-backend: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("trt-backend: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

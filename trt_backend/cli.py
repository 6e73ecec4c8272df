"""The ``trt-backend`` command line. Each subcommand lives in ``trt_backend.commands.<name>``,
whose ``register(parser)`` adds its arguments and points the parser at its ``handle(args)``;
only the subcommand being run is imported. User errors print one line and exit 1."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from trt_backend.errors import TrtBackendError

COMMANDS = {  # name -> one-line help, in --help order; module trt_backend.commands.<name with "-" as "_">
    "inspect": "plan a model: which nodes run in TensorRT, which in ONNX Runtime",
    "run": "run a model once: TensorRT segments (emulated without a GPU) + ONNX Runtime",
    "build": "build engines for every TensorRT segment into a folder",
    "bench": "benchmark the stitched session against ONNX Runtime and whole-model TensorRT",
    "compare": "compare trt-backend's outputs with ONNX Runtime on the whole model",
    "serve": "serve a build folder on Ray Serve: replicas, batching, HTTP and a Python handle",
    "demo": "plan, build and run the bundled demo model",
    "export-triton": "write a Triton Inference Server model repository (an ensemble) from a build",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``command`` (a subcommand name), only that subcommand's module is
    imported and given its arguments (the others are listed by name and help only), so a
    command starts without loading what the others need."""
    parser = argparse.ArgumentParser(prog="trt-backend", description="TensorRT engines with ONNX Runtime fallback.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-v info, -vv debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, text in COMMANDS.items():
        p = sub.add_parser(name, help=text)
        if command is None or name == command:
            importlib.import_module(f"trt_backend.commands.{name.replace('-', '_')}").register(p)  # (an import error is raised)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(command if command in COMMANDS else None)
    args = parser.parse_args(args_list)
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except TrtBackendError as e:
        print(f"trt-backend: error: {e}", file=sys.stderr)
        return int(getattr(args, "error_exit", 1))  # (compare: 2, kept apart from its 1 for "outputs differ")
    except KeyboardInterrupt:
        print("trt-backend: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

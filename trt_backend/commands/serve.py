"""``trt-backend serve``: serve a build folder (or a model) on Ray Serve until interrupted."""
from __future__ import annotations

import argparse
import re
import signal
import threading

from trt_backend.commands._args import (
    add_build_memory_argument,
    add_device_argument,
    add_memory_argument,
    add_partition_arguments,
    add_precision_arguments,
    add_shape_arguments,
    add_sign_key_argument,
    is_folder_arg,
    positive_int,
    session_options,
)
from trt_backend.commands._shapes import cli_profiles
from trt_backend.commands._precision import (
    add_auto_arguments,
    build_fields,
    options_with,
)
from trt_backend._progress import settle
from trt_backend.errors import OptionsError
from trt_backend.serve import ServeOptions, start, stop
from trt_backend.serve.options import DEFAULT_MAX_BATCH, DEFAULT_WAIT_MS


def register(p: argparse.ArgumentParser) -> None:
    """Arguments of `trt-backend serve` (the CLI names it and gives its one-line help)."""
    p.description = ("Serve BUILD_DIR (a folder written by trt-backend build, or a model) on Ray Serve: N replicas "
                     "each holding a Session, requests batched within the session's profiles, HTTP (JSON or "
                     "NumPy .npz) on --host:--port. Runs until Ctrl-C. Needs pip install 'trt-backend[serve]'.")
    p.add_argument("model", metavar="BUILD_DIR", help="folder written by trt-backend build (or an ONNX model)")
    p.add_argument("--replicas", type=positive_int, default=1, metavar="N", help="session replicas (default 1)")
    p.add_argument("--port", type=int, default=8000, metavar="P", help="HTTP port (default 8000)")
    p.add_argument("--host", default="127.0.0.1", help="HTTP host (default 127.0.0.1; 0.0.0.0 for every interface)")
    p.add_argument("--max-batch-size", type=positive_int, default=DEFAULT_MAX_BATCH, metavar="N",
                   help=f"most rows per session run, never past the profiles (default {DEFAULT_MAX_BATCH})")
    p.add_argument("--batch-wait-ms", type=float, default=DEFAULT_WAIT_MS, metavar="MS",
                   help=f"longest a request waits for others to batch with (default {DEFAULT_WAIT_MS:g})")
    p.add_argument("--no-batching", action="store_true", help="run every request alone")
    p.add_argument("--num-gpus", type=float, default=None, metavar="G",
                   help="GPUs per replica (default: 1 where the Ray cluster has GPUs, else 0)")
    p.add_argument("--num-cpus", type=float, default=1.0, metavar="C", help="CPUs per replica (default 1)")
    p.add_argument("--cache-dir", metavar="DIR", help="engine cache folder all replicas share (models built here)")
    p.add_argument("--emulate", action="store_true", help="run TensorRT segments through ONNX Runtime")
    p.add_argument("--address", default=None,
                   help="Ray cluster to join (default: the one RAY_ADDRESS names, else a new local one)")
    add_shape_arguments(p, "serve (a model, not a build folder: its profiles)")
    add_precision_arguments(p, "TensorRT segments of a model served (a build folder serves as it was built)")
    add_auto_arguments(p)
    add_device_argument(p)
    add_memory_argument(p)
    add_build_memory_argument(p)
    add_sign_key_argument(p)
    add_partition_arguments(p)
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    profiles = cli_profiles(args.min_shapes, args.opt_shapes, args.max_shapes, args.shapes) or None
    session = session_options(args, emulate=True if args.emulate else "auto", cache_dir=args.cache_dir)
    if not is_folder_arg(args):
        session = options_with(session, build_fields(args, args.model, profiles, session))
    try:
        options = ServeOptions(replicas=args.replicas, port=args.port, host=args.host, batching=not args.no_batching,
                               max_batch_size=args.max_batch_size, batch_wait_ms=args.batch_wait_ms,
                               num_gpus=args.num_gpus, num_cpus=args.num_cpus, session=session, profiles=profiles)
    except OptionsError as e:  # (named as the command line gives them: --port, not ServeOptions.port)
        raise OptionsError(re.sub(r"ServeOptions\.(\w+)", lambda m: "--" + m.group(1).replace("_", "-"), str(e))) \
            from None
    client = start(args.model, options, address=args.address)
    info = client.info()
    batching = (f"batches of up to {info['max_rows']} rows, {options.batch_wait_ms:g} ms wait"
                if options.batching and info["max_rows"] else "no batching" if not options.batching else
                f"no batching (each request runs alone: {info.get('no_batching') or 'no batch dim'})")
    print(f"serving {args.model} | {options.replicas} replica(s) | executors {', '.join(info['executors'])} | "
          f"{batching}")
    port = client.port if client.port is not None else options.port  # (--port 0: the one picked)
    print(f"  POST http://{options.host}:{port}{options.route_prefix}  "
          '(JSON {"inputs": {name: array}} or NumPy .npz with Content-Type: application/x-npz)')
    print("  Python: trt_backend.serve.ServeClient(" + repr(options.name) + ").infer({name: array})  (Ctrl-C stops)",
          flush=True)
    settle()  # (serving, it waits: no step of its start is running)
    done = threading.Event()
    got: list[int] = []

    def stop_on(number: int, _frame: object) -> None:
        got.append(number)
        done.set()

    for sig in (signal.SIGINT, signal.SIGTERM):  # Ray's driver keeps SIGINT from raising KeyboardInterrupt.
        signal.signal(sig, stop_on)
    while not done.wait(3600):
        pass
    print("stopping (Ray Serve shuts its replicas down)", flush=True)
    stop()
    print("stopped")
    return 128 + (got[0] if got else signal.SIGINT)  # (as a shell reports a command a signal ended: 130, 143)

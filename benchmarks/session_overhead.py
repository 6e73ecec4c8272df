"""Stitching overhead: emulated Session time / whole-model ONNX Runtime time, on CPU, same
inputs, per run (median over alternating blocks of runs, each after a warm-up). Targets: <= 1.05 for
single-segment models, <= 1.15 for models of five or more segments.

    python benchmarks/session_overhead.py [--runs 30] [--only REGEX] [--thread-pool session|global|both]
                                          [--explain] [--spinning auto|on|off] [--share-arena]

By default it prints two tables: the Session's defaults (segment sessions with a thread pool and
an arena each, as ONNX Runtime has them), then, in a child process (the switch is process-wide),
SessionOptions(thread_pool="global", share_arena=True): every session of the process, the
whole-model baseline included, on ONNX Runtime's one global pool, the segments allocating from
one arena.

Where the multi-segment overhead goes on a 2-core machine: with a pool per session, the first
parallel op of each segment run must wake that pool's thread (~30-60 us here); idle pools left
spinning would take the core of the one running, hence "auto" (spin while running, stop when the
run returns). The global pool removes most of that. What it cannot remove: the whole model keeps
its blocked-layout (NCHWc) tensors across what are segment boundaries here, where each segment
model reorders in and out; ``--explain`` shows it with ONNX Runtime's profiler (squeezenet cut at
every Concat: ReorderInput/ReorderOutput add 0.4-0.6 ms of kernel time to a ~2.6 ms model).
"""
from __future__ import annotations

import argparse
import functools
import logging
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.support.graphs import conv_chain, transformer_model  # noqa: E402
from trt_backend.session.options import SessionOptions  # noqa: E402
from trt_backend.session.session import Session  # noqa: E402

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def light(name: str) -> Callable[[], onnx.ModelProto]:
    return lambda: onnx.load(os.path.join(LIGHT, f"light_{name}.onnx"))


def tiny_mlp() -> onnx.ModelProto:
    """x[1, 16] -> MatMul -> Relu -> MatMul -> Softmax: a tabular model of some 20 us a run, where
    what the Session does around a segment run weighs most."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
               for n, s in (("w1", (16, 32)), ("w2", (32, 3)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["logits"]), helper.make_node("Softmax", ["logits"], ["p"])]
    graph = helper.make_graph(nodes, "tiny_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, 3])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# name, model factory, session options, profiles, input shapes
CASES: list[tuple[str, Callable[[], onnx.ModelProto], dict[str, Any], list[dict[str, Any]] | None,
                  dict[str, tuple]]] = [
    ("tiny MLP (one segment)", tiny_mlp, {}, None, {}),
    ("resnet50", light("resnet50"), {}, None, {}),
    ("inception_v1", light("inception_v1"), {}, None, {}),
    ("densenet121", light("densenet121"), {}, None, {}),
    ("squeezenet", light("squeezenet"), {}, None, {}),
    ("conv_chain x3 (5 segments)", lambda: conv_chain(3, 32, 64), {"exclude_ops": ("Resize",)},
     [{"x": ((1, 32, 64, 64), (4, 32, 64, 64), (4, 32, 64, 64))}], {"x": (4, 32, 64, 64)}),
    ("conv_chain x5 (9 segments)", lambda: conv_chain(5, 32, 64), {"exclude_ops": ("Resize",)},
     [{"x": ((1, 32, 64, 64), (4, 32, 64, 64), (4, 32, 64, 64))}], {"x": (4, 32, 64, 64)}),
    ("transformer, Softmax+LayerNorm on ORT", lambda: transformer_model(256, 8),
     {"exclude_ops": ("Softmax", "LayerNormalization"), "min_segment_size": 1},
     [{"x": ((1, 1, 256), (4, 128, 256), (4, 256, 256))}], {"x": (4, 128, 256)}),
    ("inception_v1, Concat on ORT", light("inception_v1"), {"exclude_ops": ("Concat",), "min_segment_size": 1},
     None, {}),
    ("squeezenet, Concat on ORT", light("squeezenet"), {"exclude_ops": ("Concat",), "min_segment_size": 1},
     None, {}),
]


class AcceptAll:
    """A capability oracle that takes every node (for machines without a TensorRT parser; the
    cases' exclusions then make the same segments the real parser does)."""

    target = "accept-all (what-if)"

    def query(self, model: onnx.ModelProto) -> Any:
        from partitioner import QueryResult

        return QueryResult(True)


def static_shape(shape: Sequence[int | str | None]) -> tuple[int, ...]:
    """A model input's declared shape, all of whose dims are numbers (CASES gives the others' shapes)."""
    assert all(isinstance(d, int) for d in shape), f"a dynamic input needs its shape in CASES: {shape}"
    return tuple(d for d in shape if isinstance(d, int))


def ort_session(model: onnx.ModelProto, threads: int = 0) -> Any:
    """The whole model in one ONNX Runtime session: its own pool of ``threads``, or the process's
    global pool once the process uses it (the same pool the segments share)."""
    import onnxruntime as ort

    from trt_backend.ort.threads import inference_session

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = threads
    return inference_session(model.SerializeToString(), so)


def measure(fns: Sequence[Callable[[], Any]], runs: int, warmup: int = 3, rounds: int = 3) -> list[float]:
    """Median seconds per call of each function. Each function runs in blocks of its own (a
    session's idle threads, still spinning, would otherwise slow the other side), blocks
    alternate over ``rounds`` so drift hits all alike."""
    times: list[list[float]] = [[] for _ in fns]
    per_block = max(1, runs // rounds)
    for _ in range(rounds):
        for k, fn in enumerate(fns):
            time.sleep(0.05)  # let the other side's threads go idle
            for _ in range(warmup):
                fn()
            for _ in range(per_block):
                t = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t)
    return [statistics.median(t) for t in times]


def kernel_ms(model: onnx.ModelProto, feeds: dict[str, Any], outputs: Sequence[str], threads: int,
              runs: int, warmup: int = 3) -> tuple[dict[str, float], float, list[Any]]:
    """ONNX Runtime's own profile of ``model``: milliseconds per run spent in kernels, by op type
    (ReorderInput/ReorderOutput are its NCHWc layout conversions), the median milliseconds of a
    whole run as the same profile has it, and the outputs."""
    import json
    import tempfile

    import onnxruntime as ort

    from trt_backend.ort.threads import inference_session

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = threads
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        so.profile_file_prefix = os.path.join(tmp, "p")
        sess = inference_session(model.SerializeToString(), so)
        for _ in range(warmup + runs):
            result = sess.run(list(outputs), feeds)
        with open(sess.end_profiling()) as f:
            events = json.load(f)
    model_runs = sorted((e["ts"], e["dur"]) for e in events
                        if e.get("cat") == "Session" and e.get("name") == "model_run")
    first = model_runs[warmup][0]  # the warm-up runs are left out
    run_ms = statistics.median(d for _, d in model_runs[warmup:]) / 1e3
    by_op: dict[str, float] = {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time") and e["ts"] >= first:
            op = e["args"]["op_name"]
            by_op[op] = by_op.get(op, 0.0) + e["dur"] / 1e3 / runs
    return by_op, run_ms, result


def explain(sess: Session, model: onnx.ModelProto, feeds: dict[str, Any], threads: int, t_ref: float,
            t_sess: float, runs: int = 30) -> str:
    """Where the extra time of a multi-segment session goes: kernel time ONNX Runtime adds inside
    the segment models (layout conversions at their boundaries, ...) and their whole runs, both
    from ONNX Runtime's profiler (profiled runs are slower than the timed ones above), and the
    segments timed alone, summed, against the session (what taking turns and stitching cost
    beyond the segments' own work)."""
    whole, run_whole, _ = kernel_ms(model, feeds, [o.name for o in model.graph.output], threads, runs)
    env = dict(feeds)
    segs: dict[str, float] = {}
    run_segs = 0.0
    for step in sess.schedule(None):
        seg = step.runner.segment
        by_op, run_ms, values = kernel_ms(sess.plan.extract(seg.id), {n: env[n] for n in step.inputs}, step.outputs,
                                          threads, runs)
        run_segs += run_ms
        env.update(zip(step.outputs, values))
        for op, ms in by_op.items():
            segs[op] = segs.get(op, 0.0) + ms
    alone = 0.0  # each segment's runner, run over and over on its own: no hand-off between sessions
    env = dict(feeds)
    for step in sess.schedule(None):
        args = [env[n] for n in step.inputs]
        (t,) = measure([lambda: step.runner.run(args)], runs, rounds=1)  # noqa: B023 - measured right here
        alone += t
        env.update(zip(step.outputs, step.runner.run(args)))
    k_whole, k_segs = sum(whole.values()), sum(segs.values())
    diff = sorted(((segs.get(op, 0.0) - whole.get(op, 0.0), op) for op in set(whole) | set(segs)), reverse=True)
    top = ", ".join(f"{op} {d:+.2f}" for d, op in diff[:3] if d > 0.005)
    return (f"    kernels: whole {k_whole:.2f} ms, segments {k_segs:.2f} ms "
            f"({k_segs - k_whole:+.2f}: {top or 'none'}); "
            f"ONNX Runtime runs (same profiles): whole {run_whole:.2f} ms, segments {run_segs:.2f} ms\n"
            f"    segments run alone, summed: {alone * 1e3:.2f} ms (whole-model ratio {alone / t_ref:.3f}); "
            f"session / that sum {t_sess / alone:.3f} (routing, checks and hand-offs between sessions)")


def _argv(args: argparse.Namespace, pool: str) -> list[str]:
    """The command line of ``args`` with the thread-pool mode ``pool``."""
    out = ["--runs", str(args.runs), "--threads", str(args.threads), "--spinning", args.spinning,
           "--oracle", args.oracle, "--thread-pool", pool]
    return (out + (["--only", args.only] if args.only else []) + (["--share-arena"] if args.share_arena else [])
            + (["--explain"] if args.explain else []))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--only", help="only cases whose name matches this regular expression")
    ap.add_argument("--threads", type=int, default=0, help="ONNX Runtime intra-op threads, both sides (0: default)")
    ap.add_argument("--spinning", choices=("auto", "on", "off"), default="auto",
                    help="the session's ONNX Runtime thread spinning (auto: with several segments, each "
                         "session's threads stop spinning when its run returns; on: they spin on; off: never)")
    ap.add_argument("--share-arena", action="store_true",
                    help="segment sessions allocate from one process-wide CPU arena (SessionOptions.share_arena)")
    ap.add_argument("--oracle", choices=("parser", "accept-all"), default="parser",
                    help="capability from the TensorRT parser, or take every node (no TensorRT installed)")
    ap.add_argument("--thread-pool", choices=("session", "global", "both"), default="both",
                    help="ONNX Runtime pools: one per session (ORT's default), the process's global pool shared by "
                         "the segments and the whole-model baseline alike, or both (default): a table as asked, then "
                         "one with the global pool and a shared arena, in a child process (the switch is process-wide)")
    ap.add_argument("--explain", action="store_true",
                    help="for cases of five or more segments, split the extra time with ONNX Runtime's profiler: "
                         "kernel time the segment models add (by op type) and time outside kernels")
    args = ap.parse_args(argv)
    if args.thread_pool == "both":
        code = main(_argv(args, "session"))
        print(flush=True)
        fast = _argv(args, "global") + ([] if args.share_arena else ["--share-arena"])
        child = subprocess.run([sys.executable, os.path.abspath(__file__), *fast], check=False)
        return code or child.returncode
    logging.basicConfig(level=logging.ERROR)
    spin = {"auto": None, "on": True, "off": False}[args.spinning]
    oracle = AcceptAll() if args.oracle == "accept-all" else None
    import onnxruntime

    print(f"onnxruntime {onnxruntime.__version__}, {os.cpu_count()} CPUs, threads {args.threads or 'default'}, "
          f"{'one global pool' if args.thread_pool == 'global' else 'a pool per session'}, spinning {args.spinning}"
          f"{', shared arena' if args.share_arena else ''}, oracle {args.oracle}")
    print(f"{'model':<40} {'segments':>8} {'ORT ms':>9} {'session ms':>11} {'ratio':>7}  target")
    worst = {True: 0.0, False: 0.0}  # 0: no such case ran
    for name, factory, opts, profiles, shapes in CASES:
        if args.only and not re.search(args.only, name):
            continue
        model = factory()
        sess = Session(model, profiles, SessionOptions(emulate=True, oracle=oracle, intra_op_threads=args.threads,
                                                       allow_spinning=spin, share_arena=args.share_arena,
                                                       thread_pool=args.thread_pool, **opts))
        ref = ort_session(model, args.threads)
        rng = np.random.default_rng(0)
        feeds = {a.name: rng.random(shapes.get(a.name) or static_shape(a.shape), dtype=np.float32)
                 for a in sess.get_inputs()}
        out = [o.name for o in ref.get_outputs()]
        ours, theirs = sess.run(None, feeds), ref.run(out, feeds)
        assert all(np.allclose(a, b, atol=1e-4) for a, b in zip(ours, theirs)), name
        t_ref, t_sess = measure([functools.partial(ref.run, out, feeds), functools.partial(sess.run, None, feeds)],
                                args.runs)
        segments = len(sess.plan.segments)
        ratio = t_sess / t_ref
        many = segments >= 5
        target = 1.15 if many else 1.05
        worst[many] = max(worst[many], ratio)
        print(f"{name:<40} {segments:>8} {t_ref * 1e3:9.2f} {t_sess * 1e3:11.2f} {ratio:7.3f}  <= {target}"
              f"{'' if ratio <= target else '  MISSED'}", flush=True)
        if args.explain and many:
            print(explain(sess, model, feeds, args.threads, t_ref, t_sess), flush=True)
    print("worst ratio: " + ", ".join(f"{label} {worst[k]:.3f} (target {t})" for k, label, t in (
        (False, "single-segment", 1.05), (True, "five or more segments", 1.15)) if worst[k]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

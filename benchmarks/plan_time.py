"""Planning time: ``plan_model(..., ParserOracle())`` against Polygraphy's
``inspect capability --with-partitioning`` on the same model files.

Models: the ONNX package's light models and generated long chains (``models.long_chain``) of
about 6k and 60k nodes, each saved twice: as generated (no value_info, like many exported
files) and with ONNX shape inference applied (``+vi``; Polygraphy crashes without dtypes on
its subgraph boundaries). Ours is timed in-process (the oracle is built once, outside the
timing); Polygraphy as a subprocess running its own CLI entry point with those arguments: its
wall clock, and the seconds spent inside the CLI's ``main`` once onnx and tensorrt_rtx are
imported ("work", what the comparison target uses). Start-up baselines (``polygraphy -v``, a bare
import of polygraphy + onnx + tensorrt_rtx) are timed too. A report: it exits 0 even when a
target fails. Polygraphy's partitioning needs ``onnx_graphsurgeon``; without it every
partitioned model shows as failed (pass ``--polygraphy-pythonpath DIR`` to point at one).

With ``--cli`` both sides are timed as users see them, start-up included:
``python -m trt_backend inspect MODEL`` against Polygraphy's own ``polygraphy inspect capability
--with-partitioning MODEL`` script, in turn, as processes, median of ``--repeat``, on ResNet-50 (as
exported by ``build_time.py --cli``, else the zoo's), every other model of the zoo
(``model_zoo.py``: BERT, MobileNet, DeepLab, SSDlite, ViT), the light models and the 6k chain
(with and without value_info). Targets: no slower than Polygraphy wherever Polygraphy
succeeds; the 6k chain in <= 2 s. A second column times ``inspect --cache-dir DIR`` once the plan
cache holds the model's plan (its first run there fills it and is not counted): a hit loads the
model but asks TensorRT's parser nothing and runs no probe.

    python benchmarks/plan_time.py [--quick] [--no-polygraphy] [--json OUT] [--profile]
    python benchmarks/plan_time.py --cli [--repeat 3]
"""
from __future__ import annotations

import argparse
import cProfile
import glob
import io
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import onnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.conformance import trained_zoo
from benchmarks.installed import as_installed
from tests.support.chains import long_chain

from partitioner import PartitionOptions, plan_model

CHAIN_SIZES = {"chain_6k": 6000, "chain_60k": 60000}
UNSUPPORTED_EVERY = 300
STARTUP_COMMANDS = {
    "polygraphy -v": ["{polygraphy}", "-v"],
    "python + import polygraphy, onnx, tensorrt_rtx + Builder": [
        sys.executable, "-c",
        "import polygraphy.tools, onnx, tensorrt_rtx as t; t.Builder(t.Logger(t.Logger.ERROR))"],
}


@dataclass
class Row:
    model: str
    path: str
    nodes: int
    ours_best: float | None = None
    ours_median: float | None = None
    ours_runs: list[float] = field(default_factory=list)
    segments: int | None = None
    tensorrt_segments: int | None = None
    parser_calls: int | None = None
    ours_error: str | None = None
    poly_best: float | None = None
    poly_runs: list[float] = field(default_factory=list)
    poly_ok: bool | None = None
    poly_work: float | None = None  # seconds inside Polygraphy's main, start-up excluded
    poly_error: str | None = None


def light_models() -> list[tuple[str, str]]:
    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    return [(os.path.basename(p)[:-5], p) for p in sorted(glob.glob(os.path.join(folder, "*.onnx")))]


def chain_models(tmp: str, quick: bool) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for name, n in CHAIN_SIZES.items():
        if quick and n > 10000:
            continue
        model = long_chain(n, unsupported_every=UNSUPPORTED_EVERY)
        raw = os.path.join(tmp, f"{name}.onnx")
        onnx.save(model, raw)
        out.append((name, raw))
        if not quick:
            vi = os.path.join(tmp, f"{name}+vi.onnx")
            onnx.save(onnx.shape_inference.infer_shapes(model), vi)
            out.append((f"{name}+vi", vi))
    return out


def repeat(fn: Any, k: int, budget_s: float) -> list[float]:
    """Time ``fn`` up to ``k`` times; stop early once ``budget_s`` is spent (at least one run)."""
    times: list[float] = []
    spent = 0.0
    for _ in range(k):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
        spent += times[-1]
        if spent > budget_s:
            break
    return times


def time_ours(row: Row, oracle: Any, k: int, budget_s: float) -> None:
    plans: list[Any] = []
    try:
        row.ours_runs = repeat(lambda: plans.append(plan_model(row.path, oracle, PartitionOptions())), k, budget_s)
    except Exception as e:  # noqa: BLE001 - a report: record what went wrong and go on
        row.ours_error = f"{type(e).__name__}: {e}"
        return
    plan = plans[-1]
    row.ours_best, row.ours_median = min(row.ours_runs), statistics.median(row.ours_runs)
    row.segments, row.parser_calls = len(plan.segments), plan.oracle_calls
    row.tensorrt_segments = len(plan.tensorrt_segments())


def polygraphy_exe() -> str:
    here = os.path.join(os.path.dirname(sys.executable), "polygraphy")
    return here if os.path.exists(here) else (shutil.which("polygraphy") or "polygraphy")


def poly_env(extra_path: str | None) -> dict[str, str]:
    env = dict(os.environ, POLYGRAPHY_USE_TENSORRT_RTX="1")
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, env.get("PYTHONPATH", "")) if p)
    return env


# Runs Polygraphy's own CLI entry point (what the `polygraphy` script calls) after the heavy
# imports, and reports the seconds spent inside it: Polygraphy's work net of start-up.
POLY_DRIVER = """
import sys, time
import onnx, tensorrt_rtx, polygraphy.tools
try:
    import onnx_graphsurgeon
except ImportError:
    pass
from polygraphy.tools import main
sys.argv = ["polygraphy"] + sys.argv[1:]
t = time.perf_counter()
try:
    rc = main()
finally:
    print(f"\\n@@POLY_WORK_SECONDS={time.perf_counter() - t:.6f}", flush=True)
sys.exit(rc)
"""


def run_timed(cmd: list[str], env: dict[str, str], timeout: float, cwd: str) -> tuple[float, int | None, str]:
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=timeout, text=True, errors="replace")
    except subprocess.TimeoutExpired:
        return time.perf_counter() - t, None, ""
    return time.perf_counter() - t, proc.returncode, proc.stdout


def last_error_line(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if any(m in ln for m in ("Error", "Exception", "[!]", "[E]", "Segmentation", "Aborted")):
            return ln[:200]
    return lines[-1][:200] if lines else "(no output)"


def time_polygraphy(row: Row, env: dict[str, str], k: int, budget_s: float, timeout: float) -> None:
    """Best wall clock of ``polygraphy inspect capability --with-partitioning`` (through
    :data:`POLY_DRIVER`, which also reports the seconds spent inside Polygraphy's ``main``)."""
    spent = 0.0
    work: list[float] = []
    for _ in range(k):
        with tempfile.TemporaryDirectory(prefix="polygraphy_cwd_") as cwd:  # it writes dumps into cwd
            cmd = [sys.executable, "-c", POLY_DRIVER, "inspect", "capability", "--with-partitioning", row.path]
            seconds, rc, out = run_timed(cmd, env, timeout, cwd)
        if rc is None:
            row.poly_ok, row.poly_error = False, f"timed out after {timeout:.0f} s"
            return
        row.poly_runs.append(seconds)
        if rc != 0:
            signal = f" (signal {-rc})" if rc < 0 else ""
            row.poly_ok, row.poly_error = False, f"exit {rc}{signal} after {seconds:.1f} s: {last_error_line(out)}"
            return
        row.poly_ok = True
        marks = [ln for ln in out.splitlines() if ln.startswith("@@POLY_WORK_SECONDS=")]
        if marks:
            work.append(float(marks[-1].split("=", 1)[1]))
        spent += seconds
        if spent > budget_s:
            break
    row.poly_best = min(row.poly_runs)
    row.poly_work = min(work) if work else None


def startup_baselines(env: dict[str, str], k: int) -> dict[str, float]:
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as cwd:
        for label, cmd in STARTUP_COMMANDS.items():
            cmd = [polygraphy_exe() if c == "{polygraphy}" else c for c in cmd]
            out[label] = min(run_timed(cmd, env, 60, cwd)[0] for _ in range(k))
    return out


def fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.1f}x"


def print_table(rows: list[Row], with_poly: bool) -> None:
    head = ["model", "nodes", "ours s best", "ours s median", "segments (trt)", "parser calls"]
    if with_poly:
        head += ["polygraphy s wall", "polygraphy s work", "poly/ours wall", "poly/ours work"]
    table = [head]
    notes: list[str] = []
    for r in rows:
        if r.ours_error:
            notes.append(f"note {len(notes) + 1}: ours on {r.model}: {r.ours_error}")
            ours = [f"error (note {len(notes)})", "", "", ""]
        else:
            ours = [fmt(r.ours_best), fmt(r.ours_median), f"{r.segments} ({r.tensorrt_segments})", str(r.parser_calls)]
        line = [r.model, str(r.nodes)] + ours
        if with_poly:
            if r.poly_ok:
                line += [fmt(r.poly_best), fmt(r.poly_work), ratio(r.poly_best, r.ours_best),
                         ratio(r.poly_work, r.ours_best)]
            else:
                notes.append(f"note {len(notes) + 1}: polygraphy on {r.model}: {r.poly_error}")
                line += [f"failed (note {len(notes)})", "", "", ""]
        table.append(line)
    widths = [max(len(t[i]) for t in table) for i in range(len(head))]
    for t in table:
        print("  ".join(c.ljust(w) for c, w in zip(t, widths)).rstrip())
    for note in notes:
        print(note)


def targets(rows: list[Row], with_poly: bool) -> list[tuple[str, bool | None, str]]:
    by = {r.model: r for r in rows}
    out: list[tuple[str, bool | None, str]] = []
    c6, c60 = by.get("chain_6k"), by.get("chain_60k")
    name = "6k-node chain planned in <= 2 s"
    if c6 and c6.ours_best is not None:
        out.append((name, c6.ours_best <= 2.0, f"{c6.ours_best:.3f} s"))
    else:
        out.append((name, False, "not planned"))
    name = "60k chain time / 6k chain time <= 12 (10x nodes)"
    if c60 is None:
        out.append((name, None, "skipped (--quick)"))
    elif c6 and c6.ours_best and c60.ours_best is not None:
        q = c60.ours_best / c6.ours_best
        out.append((name, q <= 12.0, f"{c60.ours_best:.3f} s / {c6.ours_best:.3f} s = {q:.1f}"))
    else:
        out.append((name, False, "a chain was not planned"))
    if with_poly:
        name = "no slower than Polygraphy on models both handle"
        both = [r for r in rows if r.poly_ok and r.poly_work is not None and r.ours_best is not None]
        slower = [r for r in both if r.ours_best > r.poly_work]  # type: ignore[operator]
        detail = (f"{len(both) - len(slower)}/{len(both)} models planned in no more than the time spent "
                  "inside Polygraphy's main (start-up excluded on both sides)")
        if slower:
            detail += "; slower on: " + ", ".join(f"{r.model} ({r.ours_best:.3f} s vs {r.poly_work:.3f} s)"
                                                 for r in slower)
        out.append((name, not slower if both else None, detail))
    return out


def profile_60k(tmp: str, oracle: Any, top: int = 15) -> str:
    path = os.path.join(tmp, "chain_60k.onnx")
    if not os.path.exists(path):
        onnx.save(long_chain(CHAIN_SIZES["chain_60k"], unsupported_every=UNSUPPORTED_EVERY), path)
    prof = cProfile.Profile()
    prof.enable()
    plan_model(path, oracle, PartitionOptions())
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(top)
    return buf.getvalue()


ZOO_MODELS = os.path.expanduser("~/.cache/trt-backend-zoo/models")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def exported_models(tmp: str) -> list[tuple[str, str]]:
    """``--cli``'s models: ResNet-50 and BERT-small, the rest of the exported zoo, the 6k chain
    (saved into ``tmp``, as generated and after shape inference) and the light models."""
    static = os.path.expanduser("~/.cache/trt-backend-large/resnet50_static.onnx")
    candidates = [("resnet50", static if os.path.exists(static) else os.path.join(ZOO_MODELS, "resnet50.onnx")),
                  ("bert", os.path.join(ZOO_MODELS, "bert.onnx"))]  # (build_time.py --cli exports the first)
    models = [(n, p) for n, p in candidates if os.path.exists(p)]
    models += [(os.path.basename(p)[:-5], p) for p in sorted(glob.glob(os.path.join(ZOO_MODELS, "*.onnx")))
               if os.path.basename(p) not in ("resnet50.onnx", "bert.onnx")]  # (the rest of the zoo)
    chain = long_chain(CHAIN_SIZES["chain_6k"], unsupported_every=UNSUPPORTED_EVERY)
    for name, proto in (("chain_6k", chain), ("chain_6k+vi", onnx.shape_inference.infer_shapes(chain))):
        onnx.save(proto, os.path.join(tmp, name + ".onnx"))
        models.append((name, os.path.join(tmp, name + ".onnx")))
    return models + light_models()


def trained_models() -> list[tuple[str, str]]:
    """``--cli --trained``'s models: the trained zoo's (fetched into its cache on first use)."""
    return [(entry.name, path) for entry, path in trained_zoo.fetched()]


def cli_mode(args: argparse.Namespace) -> int:
    """``trt-backend inspect`` and Polygraphy, both whole processes, in turn."""
    as_installed()  # (bytecode compiled, and the first runs done, as a user has them)
    env = poly_env(args.polygraphy_pythonpath)
    ours_env = dict(os.environ, PYTHONPATH=ROOT)
    with tempfile.TemporaryDirectory(prefix="plan_time_") as tmp:
        models = trained_models() if args.trained else exported_models(tmp)
        rows = []
        plan_cache = os.path.join(tmp, "plan-cache")
        for name, path in models:
            ours: list[float] = []
            poly: list[float] = []
            hits: list[float] = []
            poly_error = None
            inspect = [sys.executable, "-m", "trt_backend", "inspect", path, "--flavor", "tensorrt_rtx"]
            for k in range(args.repeat + 1):  # (the first run with --cache-dir fills the plan cache)
                seconds, rc, out = run_timed([*inspect, "--cache-dir", plan_cache], ours_env, 120, ROOT)
                if rc != 0 or ("plan from the plan cache" in out) != (k > 0):
                    raise SystemExit(f"trt-backend inspect --cache-dir {path}: not the hit expected: {out[-1000:]}")
                if k > 0:
                    hits.append(seconds)
            for _ in range(args.repeat):
                with tempfile.TemporaryDirectory(prefix="cwd_") as cwd:
                    seconds, rc, out = run_timed(inspect, ours_env, 120, ROOT)
                    if rc != 0:
                        raise SystemExit(f"trt-backend inspect {path} failed: {out[-1000:]}")
                    ours.append(seconds)
                    if poly_error is None:
                        # (its own script, as users run it: it imports onnx, numpy and onnx_graphsurgeon
                        # only when it partitions; the in-process mode's driver imports them up front)
                        cmd = [polygraphy_exe(), "inspect", "capability", "--with-partitioning", path]
                        seconds, rc, out = run_timed(cmd, env, args.polygraphy_timeout, cwd)
                        if rc == 0:
                            poly.append(seconds)
                        else:
                            poly_error = "timed out" if rc is None else f"exit {rc}: {last_error_line(out)}"
            nodes = len(onnx.load(path, load_external_data=False).graph.node)
            rows.append((name, nodes, statistics.median(ours), statistics.median(poly) if poly and poly_error is None
                         else None, poly_error, min(ours), min(poly) if poly else None, statistics.median(hits)))
            print(f"  timed {name}", file=sys.stderr, flush=True)
    print(f"inspect as a process (start-up included) vs polygraphy inspect capability --with-partitioning "
          f"(POLYGRAPHY_USE_TENSORRT_RTX=1), median of {args.repeat} (best in brackets)")
    print("(plan cache hit: inspect --cache-dir DIR again, the plan kept there by an earlier run, median)")
    print(f"{'model':<34}{'nodes':>7}{'ours s':>15}{'polygraphy s':>15}{'ours/poly':>11}{'hit s':>8}{'hit/poly':>10}")
    slower, notes, hit_slower = [], [], []
    for name, nodes, ours_s, poly_s, error, ours_best, poly_best, hit_s in rows:
        ours_text = f"{ours_s:.2f} ({ours_best:.2f})"
        if poly_s is None:
            notes.append(f"{name}: polygraphy failed ({error})")
            print(f"{name:<34}{nodes:>7}{ours_text:>15}{'failed':>15}{'-':>11}{hit_s:>8.2f}{'-':>10}")
            continue
        poly_text = f"{poly_s:.2f} ({poly_best:.2f})"
        print(f"{name:<34}{nodes:>7}{ours_text:>15}{poly_text:>15}{ours_s / poly_s:>10.2f}x{hit_s:>8.2f}"
              f"{hit_s / poly_s:>9.2f}x")
        if ours_s > poly_s:
            slower.append(f"{name} {ours_s / poly_s:.2f}x")
        if hit_s > poly_s:
            hit_slower.append(f"{name} {hit_s / poly_s:.2f}x")
    for note in notes:
        print("note:", note)
    both = sum(1 for r in rows if r[3] is not None)
    print(f"{'PASS' if not slower else 'FAIL'}  no slower than Polygraphy where it succeeds: "
          f"{both - len(slower)}/{both}" + (f"; slower on {', '.join(slower)}" if slower else ""))
    print(f"(with a plan cache hit: no slower on {both - len(hit_slower)}/{both}"
          + (f"; slower on {', '.join(hit_slower)})" if hit_slower else ")"))
    for chain_s in (r[2] for r in rows if r[0] == "chain_6k"):
        print(f"{'PASS' if chain_s <= 2.0 else 'FAIL'}  6k-node chain inspected in <= 2 s: {chain_s:.2f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="light models and the 6k chain only")
    ap.add_argument("--no-polygraphy", action="store_true", help="time our planner only")
    ap.add_argument("--json", metavar="OUT", help="write the results as JSON")
    ap.add_argument("--repeat", type=int, default=3, help="runs per model (best and median reported)")
    ap.add_argument("--budget", type=float, default=15.0, help="stop repeating a model after this many seconds")
    ap.add_argument("--polygraphy-timeout", type=float, default=45.0, help="seconds per Polygraphy run")
    ap.add_argument("--polygraphy-pythonpath", metavar="DIR", default=os.environ.get("BENCH_POLYGRAPHY_PATH"),
                    help="prepended to PYTHONPATH for Polygraphy (e.g. where onnx_graphsurgeon is installed)")
    ap.add_argument("--profile", action="store_true", help="print a cProfile top-15 of planning the 60k chain")
    ap.add_argument("--cli", action="store_true", help="trt-backend inspect vs polygraphy, both as processes")
    ap.add_argument("--trained", action="store_true", help="with --cli: the trained zoo's models "
                    "(benchmarks/conformance/trained_zoo.py) instead of the exported zoo, the chain and the light ones")
    args = ap.parse_args(argv)
    if args.cli:
        return cli_mode(args)

    from trt_backend.tensorrt.oracle import ParserOracle

    t = time.perf_counter()
    oracle = ParserOracle()
    oracle_s = time.perf_counter() - t
    with_poly = not args.no_polygraphy
    env = poly_env(args.polygraphy_pythonpath)
    with tempfile.TemporaryDirectory(prefix="plan_time_") as tmp:
        models = light_models() + chain_models(tmp, args.quick)
        rows = [Row(name, path, len(onnx.load(path, load_external_data=False).graph.node)) for name, path in models]
        for r in rows:
            time_ours(r, oracle, args.repeat, args.budget)
            if with_poly:
                time_polygraphy(r, env, args.repeat, args.budget, args.polygraphy_timeout)
            print(f"  timed {r.model}", file=sys.stderr, flush=True)
        baselines = startup_baselines(env, args.repeat) if with_poly else {}
        profile = profile_60k(tmp, oracle) if args.profile else None

    print(f"\nplanner: {oracle.target}; oracle built once in {oracle_s:.3f} s (not in the times below); "
          f"chains: long_chain(n, unsupported_every={UNSUPPORTED_EVERY}) (Det blocks)")
    if with_poly:
        print("polygraphy start-up baselines (best wall): "
              + "; ".join(f"{k}: {v:.3f} s" for k, v in baselines.items()))
        print("polygraphy s wall: the whole subprocess; work: inside its CLI main after imports")
    print()
    print_table(rows, with_poly)
    print()
    results = targets(rows, with_poly)
    for name, ok, detail in results:
        verdict = "SKIP" if ok is None else ("PASS" if ok else "FAIL")
        print(f"{verdict}  {name}: {detail}")
    if profile:
        print("\ncProfile, planning chain_60k, top 15 by cumulative time:\n" + profile)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"target": oracle.target, "oracle_build_s": oracle_s, "startup_baselines": baselines,
                       "rows": [asdict(r) for r in rows],
                       "targets": [{"name": n, "pass": ok, "detail": d} for n, ok, d in results]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The model zoo: real exported models (torchvision, transformers, skl2onnx, Q/DQ, fp16, control
flow) through this checkout's ``trt-backend`` CLI, one markdown table row per model.

    python benchmarks/conformance/model_zoo.py [--cache DIR] [--only REGEX] [--skip-export] [--out zoo.md]
                                   [--timeout 600] [--no-yardstick] [--table-only]

First it makes (once) an export venv in the cache folder (default ~/.cache/trt-backend-zoo/)
with torch, torchvision, transformers, skl2onnx, scikit-learn, onnx, onnxruntime, onnxscript,
and exports each model there once (``benchmarks/conformance/zoo_export.py``, random weights, no downloads).
Then, per model, in subprocesses of this Python with a time-out each: ``inspect --json`` (nodes,
segments, TensorRT share, parser calls, plan time, the most frequent fallback reason), ``build``
(TensorRT-RTX ahead of time into a temporary folder), ``run --inputs --outputs`` against whole-model
ONNX Runtime on the same inputs (max abs error), ``compare`` at 1e-3, and the per-node yardstick
("parser takes alone": each node alone in a one-node model through the TensorRT parser). A step
that fails is shown with its error's first line; a failed export is a row with its reason.

Each model's row is kept in CACHE/results/NAME.json; ``--table-only`` prints the table of the
kept rows without running anything. ``--precision-columns`` runs instead, per model, ``compare``
(emulated, 1e-3) and ``build`` (TensorRT-RTX ahead of time) in fp16, bf16 and int8 (int8 with
``--calibration-data random``: a smoke test of the path, not a calibration; where random data
cannot be shaped for the model, the zoo's own seeded run inputs, marked "zoo inputs"), kept in
CACHE/results/NAME.precision.json and printed as a second table. Run it with the project's Python (the one with
onnxruntime and tensorrt_rtx): the CLI runs as ``sys.executable -m trt_backend`` from this checkout."""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORTER = os.path.join(ROOT, "benchmarks", "conformance", "zoo_export.py")
EXPORT_PACKAGES = ("torch==2.14.1", "torchvision==0.29.1", "transformers", "skl2onnx", "scikit-learn", "onnx",
                   "onnxruntime", "onnxscript")
DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "trt-backend-zoo")

# Order of the table (detectors last: they are the slow ones on two cores).
MODELS = (
    "resnet18", "mobilenet_v3_small", "efficientnet_b0", "vit_tiny", "convnext_tiny",
    "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large",
    "bert", "distilbert", "gpt2_with_past", "t5_encoder", "whisper_encoder", "clip_text", "clip_vision",
    "skl_scaler_mlp", "skl_scaler_logreg", "skl_random_forest", "skl_gradient_boosting",
    "qdq_resnet18_default", "qdq_resnet18_trt", "fp16_resnet18", "scripted_loop_if",
    "resnet18_dynamo", "bert_dynamo",
    "fasterrcnn_mobilenet_v3_large_320_fpn", "ssdlite320_mobilenet_v3_large", "retinanet_resnet50_fpn",
    "fcos_resnet50_fpn", "maskrcnn_resnet50_fpn", "keypointrcnn_resnet50_fpn",
)

# Run sizes of the exporters' named dynamic dims; an unnamed dynamic dim is a batch.
DIM_VALUES = {"batch": 2, "sequence": 16, "past_sequence": 8, "total_sequence": 24}
ATOL = 1e-3


# ---- subprocesses -------------------------------------------------------------------------

@dataclass
class Called:
    rc: int | None  # None: timed out
    out: str
    err: str
    seconds: float

    def error_line(self) -> str:
        """The first line of what went wrong: the CLI's ``trt-backend: error:`` line, else a
        traceback's final exception line, else the last line written."""
        if self.rc is None:
            return f"timed out after {self.seconds:.0f} s"
        if self.rc < 0:
            return f"died on {signal.Signals(-self.rc).name}"
        lines = [ln.strip() for ln in (self.err + "\n" + self.out).splitlines() if ln.strip()]
        for ln in lines:
            if ln.startswith("trt-backend: error:"):
                return ln[len("trt-backend: error:"):].strip()
        exc = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception|Exit)\b.*", ln)]
        if exc:
            return exc[-1]
        return lines[-1] if lines else f"exit status {self.rc}"


def call(cmd: list[str], timeout: float, cwd: str = ROOT) -> Called:
    """``cmd`` in its own process group, killed whole when it passes ``timeout`` seconds."""
    start = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return Called(proc.returncode, out, err, time.perf_counter() - start)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return Called(None, out, err, time.perf_counter() - start)


def cli(*args: str, timeout: float) -> Called:
    return call([sys.executable, "-m", "trt_backend", *args], timeout)


# ---- the export venv and the exports --------------------------------------------------------

def ensure_venv(cache: str) -> str:
    """The export venv's python, made with ``python3 -m venv`` and pip on first use."""
    venv = os.path.join(cache, "venv")
    python = os.path.join(venv, "bin", "python")
    ready = os.path.join(venv, ".zoo-ready")
    if os.path.exists(ready):
        return python
    os.makedirs(cache, exist_ok=True)
    base = shutil.which("python3") or sys.executable
    print(f"making the export venv {venv} (torch is a 5.5 GB CUDA build; minutes)", flush=True)
    subprocess.run([base, "-m", "venv", venv], check=True)
    subprocess.run([python, "-m", "pip", "install", "--quiet", *EXPORT_PACKAGES], check=True)
    with open(ready, "w") as f:
        f.write(" ".join(EXPORT_PACKAGES) + "\n")
    return python


def export(python: str, name: str, path: str, timeout: float) -> str | None:
    """Export ``name`` to ``path`` unless it is there; the failure's first line, or None."""
    if os.path.exists(path):
        return None
    print(f"  exporting {name} ...", flush=True)
    res = call([python, EXPORTER, name, path], timeout)
    if res.rc == 0 and os.path.exists(path):
        return None
    with open(path + ".export-error.txt", "w") as f:
        f.write(res.err[-20000:])
    return res.error_line()


# ---- inputs ---------------------------------------------------------------------------------

def input_specs(path: str) -> list[tuple[str, tuple[int, ...], np.dtype]]:
    """Each graph input (initializers excluded) with its run shape and numpy dtype."""
    model = onnx.load(path, load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    specs = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else DIM_VALUES.get(d.dim_param, DIM_VALUES["batch"])
                     for d in tt.shape.dim)
        specs.append((vi.name, dims, onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)))
    return specs


def make_inputs(specs: list[tuple[str, tuple[int, ...], np.dtype]], seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs a model can take: token ids below every zoo vocabulary, all-ones masks,
    zero token types, 3 loop steps, floats in [0, 1)."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for name, shape, dtype in specs:
        if np.issubdtype(dtype, np.floating):
            feeds[name] = rng.random(shape).astype(dtype)
        elif "mask" in name:
            feeds[name] = np.ones(shape, dtype)
        elif name == "token_type_ids":
            feeds[name] = np.zeros(shape, dtype)
        elif name == "steps":
            feeds[name] = np.full(shape, 3, dtype)
        elif np.issubdtype(dtype, np.integer):
            feeds[name] = rng.integers(0, 100, shape).astype(dtype)
        else:
            feeds[name] = rng.integers(0, 2, shape).astype(dtype)
    return feeds


def shapes_arg(specs: list[tuple[str, tuple[int, ...], np.dtype]]) -> list[str]:
    """``--shapes`` for the CLI (nothing for a model whose inputs are all scalars)."""
    given = [f"{n}:{'x'.join(str(d) for d in s)}" for n, s, _ in specs if s]
    return ["--shapes", ",".join(given)] if given else []


# ---- helpers run in a subprocess of this Python -------------------------------------------------

def ort_reference(model: str, inputs: str, outputs: str) -> dict[str, Any]:
    """Whole-model ONNX Runtime on ``inputs``; the max abs error of trt-backend's ``outputs``."""
    import onnxruntime as ort
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feeds = dict(np.load(inputs))
    names = [o.name for o in sess.get_outputs()]
    ref = dict(zip(names, sess.run(names, feeds)))
    ours = dict(np.load(outputs))
    worst, problems = 0.0, []
    for name, r in ref.items():
        if name not in ours:
            problems.append(f"{name} missing")
            continue
        o = ours[name]
        if o.shape != r.shape:
            problems.append(f"{name} shape {o.shape} vs {r.shape}")
            continue
        if o.size == 0:
            continue
        diff = np.abs(o.astype(np.float64) - r.astype(np.float64))
        nan_mismatch = np.isnan(diff) & ~(np.isnan(o.astype(np.float64)) & np.isnan(r.astype(np.float64)))
        if nan_mismatch.any():
            problems.append(f"{name} NaN where the other is not")
        worst = max(worst, float(np.nanmax(diff)) if not np.isnan(diff).all() else 0.0)
    return {"max_abs": worst, "problems": problems}


def yardstick(model_path: str) -> dict[str, Any]:
    """How many nodes TensorRT's parser takes alone, each extracted into a one-node model."""
    sys.path.insert(0, ROOT)
    from partitioner import extract
    from trt_backend.planning import load_normalized as load
    from trt_backend.tensorrt.oracle import ParserOracle
    model = load(model_path)
    oracle = ParserOracle()
    taken, refused = 0, collections.Counter[str]()
    start = time.perf_counter()
    n = len(model.proto.graph.node)
    for i, node in enumerate(model.proto.graph.node):
        answer = oracle.query(extract(model, [i], name=f"node_{i}"))
        if answer.supported:
            taken += 1
        else:
            refused[node.op_type] += 1
    return {"taken": taken, "nodes": n, "seconds": time.perf_counter() - start,
            "refused_ops": dict(refused.most_common())}


def helper_main(argv: list[str]) -> int:
    if argv[0] == "--_ort-ref":
        print(json.dumps(ort_reference(*argv[1:4])))
    elif argv[0] == "--_yardstick":
        print(json.dumps(yardstick(argv[1])))
    else:
        return 2
    return 0


def helper(*args: str, timeout: float) -> tuple[dict[str, Any] | None, str]:
    res = call([sys.executable, os.path.abspath(__file__), *args], timeout)
    if res.rc == 0:
        try:
            return json.loads(res.out.strip().splitlines()[-1]), ""
        except (ValueError, IndexError):
            return None, "no result from the helper"
    return None, res.error_line()


# ---- one model ------------------------------------------------------------------------------

@dataclass
class Row:
    model: str
    export_error: str | None = None
    nodes: int | None = None
    segments: str = ""
    trt_share: str = ""
    parser_calls: str = ""
    plan_s: str = ""
    build: str = ""
    run_err: str = ""
    compare: str = ""
    fallback: str = ""
    alone: str = ""
    wall_s: float = 0.0
    errors: dict[str, str] = field(default_factory=dict)  # step -> error line


_HEADER = re.compile(r"\| (\d+) nodes? \| .*planned in ([\d.]+) s \((\d+) parser calls?\)")
_QUOTED = re.compile(r"'[^']*'")


def plan_columns(row: Row, plan: dict[str, Any], stdout: str) -> None:
    nodes = plan["nodes"]
    segs = plan["segments"]
    trt = [s for s in segs if s["backend"] == "tensorrt"]
    row.nodes = len(nodes)
    row.segments = f"{len(segs)} ({len(trt)}/{len(segs) - len(trt)})"
    on_trt = sum(len(s["nodes"]) for s in trt)
    row.trt_share = f"{100.0 * on_trt / max(len(nodes), 1):.0f}%"
    m = _HEADER.search(stdout)
    if m:
        row.plan_s, row.parser_calls = f"{float(m.group(2)):.2f}", m.group(3)
    reasons: collections.Counter[str] = collections.Counter()
    ops: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    example: dict[str, str] = {}
    for n in nodes:
        if n["verdict"] == "onnxruntime":
            # Reasons that differ only in the tensor they name ("rank of input 'x' is unknown")
            # count as one; the first one seen is shown.
            reason = n["reason"] or "(no reason)"
            key = _QUOTED.sub("'…'", reason)
            example.setdefault(key, reason)
            reasons[key] += 1
            ops[key][n["op_type"]] += 1
    if reasons:
        key, count = reasons.most_common(1)[0]
        op_list = ", ".join(op for op, _ in ops[key].most_common(3))
        row.fallback = f"{count}x {op_list}: {example[key]}"
    else:
        row.fallback = "none"


def evaluate(name: str, path: str, timeout: float, with_yardstick: bool) -> Row:
    row = Row(name)
    start = time.perf_counter()
    specs = input_specs(path)
    shapes = shapes_arg(specs)
    with tempfile.TemporaryDirectory(prefix=f"zoo-{name}-") as tmp:
        plan_json = os.path.join(tmp, "plan.json")
        res = cli("inspect", path, "--json", plan_json, timeout=timeout)
        if res.rc == 0:
            with open(plan_json) as f:
                plan_columns(row, json.load(f), res.out)
        else:
            row.errors["plan"] = res.error_line()
            row.segments = "plan failed"

        res = cli("build", path, "-o", os.path.join(tmp, "build"), *shapes, timeout=timeout)
        row.build = "ok" if res.rc == 0 else "FAILED"
        if res.rc != 0:
            row.errors["build"] = res.error_line()

        in_npz, out_npz = os.path.join(tmp, "in.npz"), os.path.join(tmp, "out.npz")
        inputs: dict[str, Any] = make_inputs(specs)  # (Any: numpy's stub reads ** as allow_pickle too)
        np.savez(in_npz, **inputs)
        res = cli("run", path, *shapes, "--emulate", "--inputs", in_npz, "--outputs", out_npz, timeout=timeout)
        if res.rc != 0:
            row.run_err = "FAILED"
            row.errors["run"] = res.error_line()
        else:
            ref, why = helper("--_ort-ref", path, in_npz, out_npz, timeout=timeout)
            if ref is None:
                row.run_err = "ORT failed"
                row.errors["ort reference"] = why
            else:
                row.run_err = f"{ref['max_abs']:.1e}"
                if ref["problems"]:
                    row.run_err += " (" + "; ".join(ref["problems"][:2]) + ")"

        res = cli("compare", path, *shapes, "--emulate", "--atol", str(ATOL), "--rtol", str(ATOL),
                  "--json", os.path.join(tmp, "compare.json"), timeout=timeout)
        if os.path.exists(os.path.join(tmp, "compare.json")):
            row.compare = "PASSED" if res.rc == 0 else "FAILED " + _compare_detail(os.path.join(tmp, "compare.json"))
        else:
            row.compare = "error"
            row.errors["compare"] = res.error_line()

    if with_yardstick:
        yard, why = helper("--_yardstick", path, timeout=timeout)
        if yard is None:
            row.alone = "failed"
            row.errors["yardstick"] = why
        else:
            row.alone = f"{100.0 * yard['taken'] / max(yard['nodes'], 1):.0f}% ({yard['taken']}/{yard['nodes']})"
    row.wall_s = time.perf_counter() - start
    return row


def _compare_detail(path: str) -> str:
    """``k/n outputs, max abs E`` of a failed comparison, with the first output note."""
    with open(path) as f:
        report = json.load(f)
    outputs = report.get("outputs", [])
    failed = [o for o in outputs if not o.get("passed")]
    worst = max((o.get("max_abs_error") or 0.0 for o in failed), default=0.0)
    notes = [o["note"] for o in outputs if o.get("note")]
    detail = f"({len(failed)}/{len(outputs)} outputs, max abs {worst:.1e}"
    return detail + (f"; {notes[0]})" if notes else ")")


# ---- precision columns ----------------------------------------------------------------------

ZOO_PRECISIONS = ("fp16", "bf16", "int8")


@dataclass
class PrecisionRow:
    model: str
    compare: dict[str, str] = field(default_factory=dict)  # precision -> "max abs E (within|beyond 1e-3)"
    build: dict[str, str] = field(default_factory=dict)  # precision -> "ok (S s)" | "skipped ..." | "FAILED"
    errors: dict[str, str] = field(default_factory=dict)  # "compare fp16" -> error line
    wall_s: float = 0.0


def precision_flags(precision: str) -> list[str]:
    return ["--precision", precision] + (["--calibration-data", "random"] if precision == "int8" else [])


def zoo_calibration(path: str, tmp: str, seeds: int = 4) -> list[str]:
    """int8 flags calibrating on the zoo's own run inputs (``make_inputs``, ``seeds`` seeds stacked
    on the batch dim): for models random data cannot be shaped for."""
    specs = input_specs(path)
    feeds = [make_inputs(specs, seed) for seed in range(seeds)]
    data = os.path.join(tmp, "zoo_calibration.npz")
    stacked: dict[str, Any] = {n: np.concatenate([f[n] for f in feeds]) for n, _, _ in specs}
    np.savez(data, **stacked)
    return ["--precision", "int8", "--calibration-data", data]


def _compare_error(path: str) -> str:
    """``max abs E, within`` or ``max abs E, beyond (k/n outputs)`` of a compare report."""
    with open(path) as f:
        report = json.load(f)
    outputs = report.get("outputs", [])
    worst = max((o.get("max_abs_error") or 0.0 for o in outputs), default=0.0)
    failed = sum(not o.get("passed") for o in outputs)
    if not failed:
        return f"{worst:.1e} within"
    notes = [o["note"] for o in outputs if o.get("note")]
    cell = f"{worst:.1e} beyond ({failed}/{len(outputs)}" + (f"; {_cell(notes[0], 60)})" if notes else ")")
    return _no_figure(cell)


def _no_figure(cell: str) -> str:
    """A comparison whose outputs changed shape (a detector finding another number of boxes) has
    no error figure: say so instead of the 0 its unmeasured outputs leave."""
    if cell.startswith("0.0e+00 beyond") and "not comparable" in cell:
        return "outputs change shape " + cell[len("0.0e+00 beyond "):]
    return cell


def evaluate_precisions(name: str, path: str, timeout: float, build: bool) -> PrecisionRow:
    row = PrecisionRow(name)
    start = time.perf_counter()
    shapes = shapes_arg(input_specs(path))
    with tempfile.TemporaryDirectory(prefix=f"zoo-{name}-precision-") as tmp:
        for precision in ZOO_PRECISIONS:
            report = os.path.join(tmp, f"compare_{precision}.json")
            flags = precision_flags(precision)
            res = cli("compare", path, *shapes, "--emulate", *flags, "--atol", str(ATOL),
                      "--rtol", str(ATOL), "--json", report, timeout=timeout)
            if precision == "int8" and "does not run on calibration data 'random'" in res.err:
                # dynamic dims that depend on each other (GPT-2's past + sequence = mask): random data
                # cannot be shaped for them; the zoo's own seeded run inputs can
                flags = zoo_calibration(path, tmp)
                res = cli("compare", path, *shapes, "--emulate", *flags, "--atol", str(ATOL),
                          "--rtol", str(ATOL), "--json", report, timeout=timeout)
            if "Traceback" in res.err:
                row.errors[f"compare {precision} traceback"] = res.error_line()
            if os.path.exists(report) and res.rc in (0, 1):
                zoo_inputs = " (zoo inputs)" if precision == "int8" and "random" not in flags else ""
                row.compare[precision] = _compare_error(report) + zoo_inputs
            else:
                row.compare[precision] = "error"
                row.errors[f"compare {precision}"] = res.error_line()
            if not build:
                row.build[precision] = "skipped (time)"
                continue
            res = cli("build", path, "-o", os.path.join(tmp, f"build_{precision}"), *shapes, *flags, timeout=timeout)
            if res.rc == 0:
                row.build[precision] = f"ok ({res.seconds:.0f} s)"
                shutil.rmtree(os.path.join(tmp, f"build_{precision}"), ignore_errors=True)
            else:
                row.build[precision] = "FAILED"
                row.errors[f"build {precision}"] = res.error_line()
            if "Traceback" in res.err:
                row.errors[f"build {precision} traceback"] = res.error_line()
    row.wall_s = time.perf_counter() - start
    return row


def precision_markdown(rows: list[PrecisionRow]) -> str:
    cols = ["model"] + [f"{p} compare max abs ({ATOL:g})" for p in ZOO_PRECISIONS] + [
        f"{p} build" for p in ZOO_PRECISIONS] + ["wall s"]
    cells = [[r.model] + [_no_figure(r.compare.get(p, "-")) for p in ZOO_PRECISIONS] + [
        r.build.get(p, "-") for p in ZOO_PRECISIONS] + [f"{r.wall_s:.0f}"] for r in rows]
    return _table(cols, cells, [(r.model, r.errors) for r in rows], "Errors (first line of each):")


def _table(cols: Sequence[str], cells: list[list[Any]], errors: list[tuple[str, dict[str, str]]], title: str) -> str:
    """A markdown table, then each row's step errors (first line) under ``title``."""
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in cells]
    failures = [(model, step, msg) for model, errs in errors for step, msg in errs.items()]
    if failures:
        lines += ["", title, ""]
        lines += [f"- {m} / {step}: {_cell(msg, 400)}" for m, step, msg in failures]
    return "\n".join(lines)


# ---- the table ------------------------------------------------------------------------------

COLUMNS = ("model", "nodes", "segments (TRT/ORT)", "TRT share", "parser takes alone", "parser calls", "plan s",
           "build", "run vs ORT max abs", f"compare {ATOL:g}", "largest fallback", "wall s")


_NAME_LIST = re.compile(r"(?:[^\s,]*[^\s,:], ){3,}[^\s,]*[^\s,:]")
_ORT_SOURCE = re.compile(r"/onnxruntime_src/\S+:\d+ [\w:]+\([^)]*\) ")


def _squeeze_lists(text: str) -> str:
    """Long comma-separated lists of tensor names cut to their first two and a count; ONNX
    Runtime's source locations dropped."""
    def squeeze(m: re.Match[str]) -> str:
        names = m.group(0).split(", ")
        return f"{names[0]}, {names[1]}, … ({len(names)} names)"
    return _NAME_LIST.sub(squeeze, _ORT_SOURCE.sub("", text))


def _cell(text: Any, width: int = 110) -> str:
    s = _squeeze_lists(str(text)).replace("|", "\\|").replace("\n", " ")
    return s if len(s) <= width else s[:width - 1] + "…"


def markdown(rows: list[Row]) -> str:
    cells = [[r.model, f"export failed: {_cell(r.export_error)}"] + [""] * (len(COLUMNS) - 2)
             if r.export_error is not None else
             [r.model, r.nodes if r.nodes is not None else "-", r.segments, r.trt_share, r.alone,
              r.parser_calls, r.plan_s, r.build, r.run_err, r.compare, _cell(r.fallback), f"{r.wall_s:.0f}"]
             for r in rows]
    return _table(COLUMNS, cells, [(r.model, r.errors) for r in rows], "Failures (first line of each error):")


def save_row(cache: str, row: Row) -> None:
    os.makedirs(os.path.join(cache, "results"), exist_ok=True)
    with open(os.path.join(cache, "results", row.model + ".json"), "w") as f:
        json.dump(asdict(row), f, indent=1)


def load_row(cache: str, name: str) -> Row | None:
    path = os.path.join(cache, "results", name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return Row(**json.load(f))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0].startswith("--_"):
        return helper_main(argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default=DEFAULT_CACHE, help="export venv, models and kept rows (default %(default)s)")
    ap.add_argument("--only", default=None, help="regular expression: run only the models it finds")
    ap.add_argument("--skip-export", action="store_true", help="export nothing; models not in the cache are skipped")
    ap.add_argument("--out", default=None, help="write the markdown table here too")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per CLI call (default %(default)s)")
    ap.add_argument("--export-timeout", type=float, default=1200.0, help="seconds per export (default %(default)s)")
    ap.add_argument("--no-yardstick", action="store_true", help="skip the one-node-per-model parser yardstick")
    ap.add_argument("--table-only", action="store_true", help="print the kept rows of the selected models, run nothing")
    ap.add_argument("--precision-columns", action="store_true",
                    help="fp16/bf16/int8 compare (emulated) and build per model instead of the main columns")
    ap.add_argument("--skip-builds", default=None, metavar="REGEX",
                    help="--precision-columns: models whose precision builds are skipped (said so in the table)")
    args = ap.parse_args(argv)
    if args.precision_columns:
        return precision_main(args)

    names = [n for n in MODELS if args.only is None or re.search(args.only, n)]
    models_dir = os.path.join(args.cache, "models")
    os.makedirs(models_dir, exist_ok=True)
    rows: list[Row] = []
    python = None if args.skip_export or args.table_only else ensure_venv(args.cache)
    for name in names:
        if args.table_only:
            kept = load_row(args.cache, name)
            if kept is not None:
                rows.append(kept)
            continue
        path = os.path.join(models_dir, name + ".onnx")
        if python is not None:
            why = export(python, name, path, args.export_timeout)
            if why is not None:
                row = Row(name, export_error=why)
                rows.append(row)
                save_row(args.cache, row)
                print(f"{name}: export failed: {why}", flush=True)
                continue
        elif not os.path.exists(path):
            continue
        print(f"{name}: evaluating ...", flush=True)
        row = evaluate(name, path, args.timeout, not args.no_yardstick)
        rows.append(row)
        save_row(args.cache, row)
        print(markdown([row]).splitlines()[2], flush=True)
    return emit(markdown(rows), args.out)


def precision_main(args: argparse.Namespace) -> int:
    names = [n for n in MODELS if args.only is None or re.search(args.only, n)]
    rows: list[PrecisionRow] = []
    for name in names:
        kept = os.path.join(args.cache, "results", name + ".precision.json")
        if args.table_only:
            if os.path.exists(kept):
                with open(kept) as f:
                    rows.append(PrecisionRow(**json.load(f)))
            continue
        path = os.path.join(args.cache, "models", name + ".onnx")
        if not os.path.exists(path):
            continue
        print(f"{name}: precisions ...", flush=True)
        build = not (args.skip_builds and re.search(args.skip_builds, name))
        row = evaluate_precisions(name, path, args.timeout, build)
        rows.append(row)
        os.makedirs(os.path.dirname(kept), exist_ok=True)
        with open(kept, "w") as f:
            json.dump(asdict(row), f, indent=1)
        print(precision_markdown([row]).splitlines()[2], flush=True)
    return emit(precision_markdown(rows), args.out)


def emit(table: str, out: str | None) -> int:
    """Print the table (and write it to ``out``); the exit status."""
    print()
    print(table)
    if out:
        with open(out, "w") as f:
            f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

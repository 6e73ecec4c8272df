"""Engine build time: our per-segment builds against one plain whole-model build, and engine
cache hits against cold builds. Real TensorRT(-RTX) builds; on a CPU-only machine that means
TensorRT-RTX ahead-of-time builds.

1. ``split/whole``: for models TensorRT supports whole (the light models: one TensorRT segment
   each), the sum of segment build seconds from ``build_engines`` (extraction, precision
   transform, parse, build) over the seconds of one whole-model build through the bare TensorRT
   API (parse the file's bytes, build). Target <= 1.2.
2. ``warm/cold``: ``build_engines`` wall time with a populated engine cache (every segment a hit:
   extraction, hashing, load, verification) over the same call on an empty cache. Target <= 0.05.

3. ``--cli``: what a user sees. ``trt-backend build MODEL -o DIR`` as a process, start-up
   included, against a process that parses and builds the whole model file directly with the
   same TensorRT (``parse_from_file`` + ``build_serialized_network``; target <= 1.3x); and the
   same ``build`` with ``--cache-dir`` once more on a warm cache against that cold build
   (target <= 0.25x; a hit of the build cache, which copies the earlier folder: each warm run's
   manifest is checked to say so, and warm against the plain build is printed too); and the plain
   build with ``--weights-by-reference`` (the folder refers to the model's weights instead of
   copying them), with both folders' sizes. Model: ResNet-50 exported from
   torchvision (random weights, 98 MiB;
   ``--cli-model``, default the zoo's ``resnet50.onnx``, exported on first use with the zoo venv),
   a one-segment model. The four are run in turn, ``--repeat`` rounds, medians.
4. ``--sweep``: the plain build against the direct one (as in 3) on every model of the trained
   zoo (``benchmarks/conformance/trained_zoo.py``, its wheels fetched into its cache on first use;
   the opt shapes of each model's first profile) and of the exported zoo
   (``benchmarks/conformance/zoo_export.py``, where it was exported) that the direct build takes
   whole, a row each, and how many are within 1.3x.

Medians of ``--repeat`` runs (the machines are shared). A report: it exits 0 even when a target
fails.

    python benchmarks/build_time.py [--models light_resnet50,...] [--repeat 3] [--precision fp16] [--json OUT]
    python benchmarks/build_time.py --cli [--cli-model resnet50.onnx[=x:1x3x224x224]] [--external-data] [--repeat 3]
    python benchmarks/build_time.py --sweep [--only REGEX] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import onnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.conformance import trained_zoo
from benchmarks.installed import as_installed
from trt_backend.engines.builder import BuildOptions
from trt_backend.engines.config import configure
from trt_backend.engines.cache import EngineCache
from trt_backend.engines.fallback import build_engines
from trt_backend.engines.precision import apply_precision
from trt_backend.planning import make_plan
from trt_backend.tensorrt.flavor import (
    Flavor,
    load_flavor,
    network_flags,
    shared_logger,
)

LIGHT = ["light_bvlc_alexnet", "light_densenet121", "light_inception_v1", "light_inception_v2", "light_resnet50",
         "light_shufflenet", "light_squeezenet", "light_vgg19", "light_zfnet512"]
SPLIT_TARGET, WARM_TARGET = 1.2, 0.05
CLI_TARGET, CLI_WARM_TARGET = 1.3, 0.25
ZOO = os.path.expanduser("~/.cache/trt-backend-zoo")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DIRECT = """
import sys, tensorrt_rtx as trt
logger = trt.Logger(trt.Logger.ERROR)
builder = trt.Builder(logger)
network = builder.create_network(0)
parser = trt.OnnxParser(network, logger)
assert parser.parse_from_file(sys.argv[1]), "parse failed"
config = builder.create_builder_config()
if len(sys.argv) > 3 and sys.argv[3]:  # name:1x3x224x224,... a fixed profile, as --shapes gives one
    profile = builder.create_optimization_profile()
    for spec in sys.argv[3].split(","):
        name, dims = spec.split(":")
        shape = tuple(int(d) for d in dims.split("x"))
        profile.set_shape(name, shape, shape, shape)
    config.add_optimization_profile(profile)
engine = builder.build_serialized_network(network, config)
assert engine is not None, "build failed"
open(sys.argv[2], "wb").write(engine)
"""
_EXPORT = """
import sys, torch, torchvision
m = torchvision.models.resnet50(weights=None).eval()
torch.onnx.export(m, torch.randn(1, 3, 224, 224), sys.argv[1], input_names=["x"], output_names=["y"],
                  opset_version=17, dynamo=False)
"""


def resnet50(path: str | None) -> str:
    """The CLI benchmark's model: ``path``, else ResNet-50 (exported once with the zoo's venv)."""
    if path:
        return path
    out = os.path.expanduser("~/.cache/trt-backend-large/resnet50_static.onnx")
    if not os.path.exists(out):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        subprocess.run([os.path.join(ZOO, "venv", "bin", "python"), "-c", _EXPORT, out], check=True,
                       capture_output=True)
    return out


def with_external_data(model: str, folder: str) -> str:
    """``model`` saved into ``folder`` with every initializer of 1 KiB or more in one external data
    file beside it; the new model's path."""
    out = os.path.join(folder, os.path.basename(model))
    onnx.save(onnx.load(model), out, save_as_external_data=True, all_tensors_to_one_file=True,
              location=os.path.basename(model) + ".data", size_threshold=1024)
    return out


def _wall(argv: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:5])}... failed: {proc.stderr.strip()[-2000:]}")
    return seconds


def _folder_size(folder: str) -> tuple[int, int]:
    """(bytes of the folder's files, bytes of its engines)."""
    sizes = {name: os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder)}
    return sum(sizes.values()), sum(v for name, v in sizes.items() if name.endswith(".engine"))


def cli_rows(model: str, repeat: int, shapes: str = "") -> int:
    """Section 3: the CLI against the bare TensorRT parse+build, cold and warm, in turn; a model
    with dynamic inputs gets ``shapes`` (``name:1x3x224x224,...``) as one fixed profile on both
    sides (``--shapes`` for ours)."""
    py = sys.executable
    as_installed()  # (bytecode compiled, and the first runs done, as a user has them)
    direct, cold, nocache, warm, byref = [], [], [], [], []
    hits: list[bool] = []
    sizes: dict[str, tuple[int, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(repeat):
            # (a new file each run, as each of ours writes a new folder: on the VMs measured, writing
            # 100 MiB into a new file took 0.38-0.50 s and into a file just truncated 0.04-0.14 s)
            direct.append(_wall([py, "-c", _DIRECT, model, os.path.join(tmp, f"direct{k}.engine"), shapes]))
            out = os.path.join(tmp, f"built{k}")
            ours = [py, "-m", "trt_backend", "build", model, "-o", out, "--flavor", "tensorrt_rtx"]
            ours += ["--shapes", shapes] if shapes else []
            nocache.append(_wall(ours))
            referring = os.path.join(tmp, f"byref{k}")
            byref.append(_wall([*ours[:6], referring, *ours[7:], "--weights-by-reference"]))
            sizes = {"plain": _folder_size(out), "by reference": _folder_size(referring)}
            cache = os.path.join(tmp, f"cache{k}")
            cold.append(_wall([*ours, "--cache-dir", cache]))
            warm.append(_wall([*ours, "--cache-dir", cache]))
            with open(os.path.join(out, "manifest.json")) as f:
                hits.append(bool(json.load(f).get("build_cache", {}).get("hit")))
    med = {name: statistics.median(v) for name, v in
           (("direct", direct), ("build", nocache), ("cold", cold), ("warm", warm), ("byref", byref))}
    size = os.path.getsize(model) / 2**20
    print(f"{os.path.basename(model)} ({size:.0f} MiB), processes with start-up, median of {repeat}:")
    print(f"  direct parse_from_file + build_serialized_network   {med['direct']:7.2f} s   "
          f"runs {', '.join(f'{x:.2f}' for x in direct)}")
    print(f"  trt-backend build                                     {med['build']:7.2f} s   "
          f"runs {', '.join(f'{x:.2f}' for x in nocache)}")
    print(f"  trt-backend build --cache-dir (cold)                  {med['cold']:7.2f} s   "
          f"runs {', '.join(f'{x:.2f}' for x in cold)}")
    print(f"  trt-backend build --cache-dir (warm: cache hit)       {med['warm']:7.2f} s   "
          f"runs {', '.join(f'{x:.2f}' for x in warm)}")
    print(f"  (warm runs that were build cache hits: {sum(hits)} of {len(hits)}; warm/plain build "
          f"{med['warm'] / med['build']:.2f}x)")
    print(f"  trt-backend build --weights-by-reference              {med['byref']:7.2f} s   "
          f"runs {', '.join(f'{x:.2f}' for x in byref)}")
    print(f"  (by reference/plain build {med['byref'] / med['build']:.2f}x; folders: " + ", ".join(
        f"{name} {total / 2**20:.1f} MiB ({(total - engines) / 2**20:.2f} MiB besides the engines)"
        for name, (total, engines) in sizes.items()) + ")")
    ratio, warm_ratio = med["build"] / med["direct"], med["warm"] / med["cold"]
    print(f"build/direct {ratio:.2f}x (target <= {CLI_TARGET}) {'PASS' if ratio <= CLI_TARGET else 'FAIL'}")
    print(f"warm/cold    {warm_ratio:.2f}x (target <= {CLI_WARM_TARGET}) "
          f"{'PASS' if warm_ratio <= CLI_WARM_TARGET else 'FAIL'}")
    return 0


# The exported zoo (benchmarks/conformance/zoo_export.py) at one fixed profile each: the models
# TensorRT takes whole (the detectors, GPT-2 with its cache and the sklearn models it does not).
ZOO_SHAPES = {
    "resnet18": "x:1x3x224x224", "resnet18_dynamo": "x:1x3x224x224", "resnet50": "x:1x3x224x224",
    "mobilenet_v3_small": "x:1x3x224x224", "efficientnet_b0": "x:1x3x224x224", "convnext_tiny": "x:1x3x224x224",
    "vit_tiny": "x:1x3x96x96", "clip_vision": "pixel_values:1x3x64x64", "whisper_encoder": "input_features:1x80x200",
    "bert": "input_ids:1x128,attention_mask:1x128,token_type_ids:1x128",
    "bert_dynamo": "input_ids:1x128,attention_mask:1x128,token_type_ids:1x128",
    "distilbert": "input_ids:1x128,attention_mask:1x128", "t5_encoder": "input_ids:1x32,attention_mask:1x32",
    "clip_text": "input_ids:1x16,attention_mask:1x16", "deeplabv3_mobilenet_v3_large": "x:1x3x256x256",
    "lraspp_mobilenet_v3_large": "x:1x3x256x256", "fp16_resnet18": "", "qdq_resnet18_trt": "",
}


def sweep_models() -> list[tuple[str, str, str]]:
    """(name, path, shapes) for ``--sweep``: the trained zoo's models (fetched into its cache on
    first use) at the opt shapes of their first profile, then the exported zoo's that are there."""
    out = []
    for entry, path in trained_zoo.fetched():
        shapes = ",".join(f"{name}:{'x'.join(map(str, dims[1]))}" for name, dims in entry.profiles[0].items()) \
            if entry.profiles else ""
        out.append((entry.name, path, shapes))
    for name, shapes in ZOO_SHAPES.items():
        path = os.path.join(ZOO, "models", name + ".onnx")
        if os.path.exists(path):
            out.append((name, path, shapes))
    return out


def sweep_rows(repeat: int, only: str | None) -> int:
    """``--sweep``: the build command against the bare TensorRT parse + build, in turn, on every
    model of :func:`sweep_models` the bare build takes whole; a row per model."""
    py = sys.executable
    as_installed()  # (bytecode compiled, and the first runs done, as a user has them)
    ratios: dict[str, float] = {}
    print(f"processes with start-up, median of {repeat}; build/direct <= {CLI_TARGET}")
    print(f"{'model':<30}{'direct s':>9}{'build s':>9}{'ratio':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, path, shapes in sweep_models():
            if only and not re.search(only, name):
                continue
            probe = subprocess.run([py, "-c", _DIRECT, path, os.path.join(tmp, "probe.engine"), shapes],
                                   capture_output=True, text=True)
            if probe.returncode != 0:
                last = (probe.stderr.strip().splitlines() or ["?"])[-1]
                print(f"{name:<30}  not taken whole by the bare build: {last[:80]}")
                continue
            direct, ours = [], []
            for k in range(repeat):
                direct.append(_wall([py, "-c", _DIRECT, path, os.path.join(tmp, f"{name}{k}.engine"), shapes]))
                ours.append(_wall([py, "-m", "trt_backend", "build", path, "-o", os.path.join(tmp, f"{name}{k}"),
                                   "--flavor", "tensorrt_rtx", *(["--shapes", shapes] if shapes else [])]))
            d, b = statistics.median(direct), statistics.median(ours)
            ratios[name] = b / d
            print(f"{name:<30}{d:>9.2f}{b:>9.2f}{b / d:>6.2f}x   direct {' '.join(f'{x:.2f}' for x in direct)}"
                  f" | build {' '.join(f'{x:.2f}' for x in ours)}", flush=True)
    within = [n for n, r in ratios.items() if r <= CLI_TARGET]
    print(f"build/direct <= {CLI_TARGET} on {len(within)} of {len(ratios)} models (median ratio "
          f"{statistics.median(ratios.values()):.2f}x); over: "
          + (", ".join(f"{n} {r:.2f}x" for n, r in ratios.items() if r > CLI_TARGET) or "none"))
    return 0


def whole_build_seconds(path: str, flavor: Flavor, options: BuildOptions) -> float:
    """Parse + build of the model file with the bare TensorRT API (the reference); for fp16/bf16
    the whole model gets the same ONNX-level precision transform first (timed)."""
    trt = flavor.module
    with open(path, "rb") as f:
        data = f.read()
    start = time.perf_counter()
    if options.precision in ("fp16", "bf16"):
        data = apply_precision(onnx.load_from_string(data), options.precision,
                               options.keep_fp32_ops).model.SerializeToString()
    builder = trt.Builder(shared_logger(flavor))
    network = builder.create_network(network_flags(flavor))
    parser = trt.OnnxParser(network, shared_logger(flavor))
    if not parser.parse(data):
        raise RuntimeError(f"{path}: TensorRT cannot parse the whole model")
    config = builder.create_builder_config()
    configure(config, options, flavor)
    if builder.build_serialized_network(network, config) is None:
        raise RuntimeError(f"{path}: TensorRT cannot build the whole model")
    return time.perf_counter() - start


def measure(path: str, flavor: Flavor, options: BuildOptions, repeat: int) -> dict[str, Any]:
    plan = make_plan(path, flavor=flavor.name)
    segments = len(plan.tensorrt_segments())
    split, whole, cold, warm = [], [], [], []
    for _ in range(repeat):
        whole.append(whole_build_seconds(path, flavor, options))
        split.append(build_engines(plan, [], options, flavor=flavor).report.build_seconds)
        with tempfile.TemporaryDirectory() as root:
            cache = EngineCache(root)
            t0 = time.perf_counter()
            build_engines(plan, [], options, cache, flavor=flavor)
            t1 = time.perf_counter()
            report = build_engines(plan, [], options, cache, flavor=flavor).report
            t2 = time.perf_counter()
            assert all(r.cached for r in report.segments)
            cold.append(t1 - t0)
            warm.append(t2 - t1)
    row: dict[str, Any] = {"model": os.path.basename(path), "nodes": len(plan.nodes), "trt_segments": segments,
           "whole_s": statistics.median(whole), "split_s": statistics.median(split),
           "cold_s": statistics.median(cold), "warm_s": statistics.median(warm)}
    row["split_over_whole"] = row["split_s"] / row["whole_s"]
    row["warm_over_cold"] = row["warm_s"] / row["cold_s"]
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(LIGHT), help="comma-separated light model names or .onnx paths")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "fp16", "bf16"])
    ap.add_argument("--flavor", default="auto")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--cli", action="store_true", help="section 3 only: the build command vs direct TensorRT")
    ap.add_argument("--cli-model", help="model for --cli, MODEL.onnx or MODEL.onnx=x:1x3x224x224,... (a fixed "
                    "profile for dynamic inputs; default: ResNet-50 from torchvision, exported once)")
    ap.add_argument("--external-data", action="store_true", help="with --cli: the model saved again with its weights "
                    "in an external data file beside it (as PyTorch's exporter writes them by default), and timed so")
    ap.add_argument("--sweep", action="store_true", help="the build command vs direct TensorRT on every model of "
                    "the trained zoo (benchmarks/conformance/trained_zoo.py) and the exported zoo it takes whole")
    ap.add_argument("--only", help="with --sweep: a regular expression the model names must match")
    args = ap.parse_args(argv)
    if args.sweep:
        return sweep_rows(args.repeat, args.only)
    if args.cli:
        path, _, shapes = (args.cli_model or "").partition("=")
        model = resnet50(path or None)
        if not args.external_data:
            return cli_rows(model, args.repeat, shapes)
        with tempfile.TemporaryDirectory() as tmp:
            return cli_rows(with_external_data(model, tmp), args.repeat, shapes)
    logging.basicConfig(level=logging.ERROR)
    flavor = load_flavor(args.flavor)
    light_dir = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    options = BuildOptions(precision=args.precision)
    print(f"{flavor.target}, precision {args.precision}, median of {args.repeat}")
    print(f"{'model':<26}{'segs':>5}{'whole s':>9}{'split s':>9}{'split/whole':>12}{'cold s':>8}{'warm s':>8}"
          f"{'warm/cold':>10}")
    rows = []
    for name in args.models.split(","):
        path = name if name.endswith(".onnx") else os.path.join(light_dir, name + ".onnx")
        row = measure(path, flavor, options, args.repeat)
        rows.append(row)
        print(f"{row['model']:<26}{row['trt_segments']:>5}{row['whole_s']:>9.3f}{row['split_s']:>9.3f}"
              f"{row['split_over_whole']:>12.3f}{row['cold_s']:>8.3f}{row['warm_s']:>8.3f}"
              f"{row['warm_over_cold']:>10.3f}")
    worst_split = max(r["split_over_whole"] for r in rows)
    worst_warm = max(r["warm_over_cold"] for r in rows)
    total_split = sum(r["split_s"] for r in rows) / sum(r["whole_s"] for r in rows)
    total_warm = sum(r["warm_s"] for r in rows) / sum(r["cold_s"] for r in rows)
    print(f"split/whole: total {total_split:.3f}, worst {worst_split:.3f} (target <= {SPLIT_TARGET}) "
          f"{'PASS' if total_split <= SPLIT_TARGET else 'FAIL'}")
    print(f"warm/cold:   total {total_warm:.3f}, worst {worst_warm:.3f} (target <= {WARM_TARGET}) "
          f"{'PASS' if total_warm <= WARM_TARGET else 'FAIL'}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"flavor": flavor.target, "precision": args.precision, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

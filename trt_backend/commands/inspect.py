"""``trt-backend inspect``: plan a model and show what runs where; or show what a build folder
holds: its plan, profiles and engines with their targets, as built."""
from __future__ import annotations

import argparse
import html
import json
import os
import shutil
from typing import Any

from partitioner import OptionsError, Plan
from partitioner.picture import render_picture
from partitioner.report import annotate, summary, table
from trt_backend._files import (
    new_folder,
    save_model_with_data,
    write_atomic,
    write_picture,
)
from trt_backend.artifacts.read import (
    BuiltFolder,
    is_build_folder,
    open_folder,
    runtime_mismatch,
)
from trt_backend.artifacts.seal import sign_key as read_sign_key
from trt_backend.commands._args import (
    add_partition_arguments,
    add_sign_key_argument,
    partition_options,
    refuse_build_flags,
)
from trt_backend.engines.precision_plan import (
    PrecisionPlan,
    SegmentPrecision,
    read_precision_plan,
)
from trt_backend.engines.report import demotion_lines
from trt_backend.gpu.status import tensorrt_status
from trt_backend.planning import make_plan


def register(p: argparse.ArgumentParser) -> None:
    """Arguments of `trt-backend inspect` (the CLI names it and gives its one-line help)."""
    p.description = ("Plan MODEL and print its segments and the fallback census; on a folder written by "
                     "trt-backend build, show its plan, profiles and engines (TensorRT, GPU target, precision, "
                     "sizes) as built, after checking its manifest and files.")
    p.add_argument("model", help="ONNX model file, or a folder written by trt-backend build")
    p.add_argument("--json", metavar="PLAN.json", help="write the plan as JSON")
    p.add_argument("--export-segments", metavar="DIR", help="write segment_<id>.onnx per segment into DIR")
    p.add_argument("--annotated", metavar="OUT.onnx", help="write the model with each node's segment in metadata_props")
    p.add_argument("--picture", metavar="OUT.svg|OUT.html", help="draw the segments coloured by backend")
    p.add_argument("--precision-plan", metavar="PLAN.json|DIR", default=None,
                   help="show this precision plan (of --precision auto; its JSON or a build folder) per segment, "
                        "also in the HTML picture")
    add_sign_key_argument(p)
    add_partition_arguments(p)
    p.set_defaults(func=handle)


def check_picture_name(args: argparse.Namespace) -> None:
    """Fail before planning on a picture name that says no format (the CLI checks that every
    output path can be written before any command starts)."""
    if args.picture and not args.picture.lower().endswith((".svg", ".html", ".htm")):
        raise OptionsError(f"--picture {args.picture}: use a .svg or .html file name")


def export_segments(plan: Plan, folder: str) -> list[str]:
    """Write every segment model; into a fresh temp folder renamed into place when ``folder`` is new."""
    fresh = not os.path.exists(folder)
    target = new_folder(os.path.dirname(os.path.abspath(folder)), ".segments-") if fresh else folder
    written = []
    weights = plan.model.base_dir if plan.model is not None else None
    try:
        for seg in plan.segments:
            path = os.path.join(target, f"segment_{seg.id}.onnx")
            save_model_with_data(plan.extract(seg.id), path, weights)
            written.append(os.path.join(folder, f"segment_{seg.id}.onnx"))
        if fresh:
            os.replace(target, folder)
    except BaseException:
        if fresh:
            shutil.rmtree(target, ignore_errors=True)
        raise
    return written


def _precision_text(entry: SegmentPrecision) -> str:
    pins = ", ".join(f"{p.node} ({p.op_type}, " + (p.tensor[1:-1] if p.tensor.startswith("(") else
                                                   f"{p.error:.3g} x tolerance") + ")" for p in entry.pinned)
    return (f"{entry.precision}, {entry.reduced}/{len(entry.nodes)} node(s) reduced, {len(entry.pinned)} pinned to fp32"
            + (f": {pins}" if pins else ""))


def _with_precision(page: str, plan: Plan, precision: PrecisionPlan) -> str:
    """The HTML picture with a table of each TensorRT segment's precision and pinned nodes."""
    about = f"--precision auto plan: atol {precision.atol:g}, rtol {precision.rtol:g}; search {precision.seconds:.1f} s"
    rows = ["<h2>Precision</h2>", f"<p>{html.escape(about)}</p>",
            "<table><tr><th>id</th><th>precision</th><th>nodes reduced</th><th>pinned to fp32 (error that pinned "
            "them)</th></tr>"]
    for seg in plan.tensorrt_segments():
        entry = precision.for_segment(plan.nodes[i].name for i in seg.nodes)
        if entry is None:
            rows.append(f"<tr><td class=\"n\">{seg.id}</td><td>fp32</td><td>-</td><td>not in the plan</td></tr>")
            continue
        pins = "<br>".join(html.escape(f"{p.node} ({p.op_type}): " + (p.tensor[1:-1] if p.tensor.startswith("(")
                                                                       else f"{p.error:.3g} x tolerance at {p.tensor}"))
                           for p in entry.pinned) or "-"
        rows.append(f"<tr><td class=\"n\">{seg.id}</td><td>{html.escape(entry.precision)}</td>"
                    f"<td class=\"n\">{entry.reduced}/{len(entry.nodes)}</td><td>{pins}</td></tr>")
    rows.append("</table>")
    return page.replace("</body></html>", "\n".join(rows) + "</body></html>", 1)


def _here(manifest: dict[str, object]) -> str:
    problem = runtime_mismatch(manifest)
    if problem:
        return f"{problem} (run and bench emulate its segments; load(..., rebuild=True) rebuilds)"
    ok, why = tensorrt_status()
    return "same TensorRT and GPU target: the engines execute here" if ok else \
        f"same TensorRT and GPU target, but {why}: its TensorRT segments run emulated here"


def _builder_line(opts: dict[str, Any]) -> list[str]:
    """The builder settings a folder was built with beyond the defaults, in one line (or none)."""
    said = []
    if opts.get("optimization_level") is not None:
        said.append(f"optimisation level {opts['optimization_level']}")
    if opts.get("max_aux_streams") is not None:
        said.append(f"auxiliary streams {opts['max_aux_streams']}")
    if opts.get("hardware_compatibility", "none") != "none":
        said.append(f"hardware compatibility {opts['hardware_compatibility']}")
    if opts.get("version_compatible"):
        said.append("version compatible" + ("" if opts.get("exclude_lean_runtime", True) else ", lean runtime included"))
    return ["builder: " + ", ".join(said)] if said else []


def folder_report(built: BuiltFolder, folder: str, verbose: bool = False) -> str:
    """A build folder as built: header (digest, signature, TensorRT, GPU target, build options),
    the plan's segment table, each TensorRT segment's profiles and each engine."""
    m = built.manifest
    opts = m.get("build_options", {})
    caps = ",".join(opts.get("compute_capabilities") or ()) or "the builder's default"
    workspace = f"{opts['workspace_bytes'] >> 20} MiB" if opts.get("workspace_bytes") else "default"
    lines = [f"build folder {folder} | manifest {m.get('digest')} | "
             + ("signed (HMAC-SHA256)" if "signature" in m else "unsigned")
             + f" | trt-backend {m.get('trt_backend')} | from {m.get('model')}",
             f"engines for {m.get('tensorrt')} | GPU target {m.get('gpu_target')} (compute capabilities: {caps}) | "
             f"precision {opts.get('precision')} | workspace {workspace} | built in {m.get('build_seconds')} s",
             *_builder_line(opts),
             f"this machine: {_here(m)}", ""]
    lines.append(summary(built.plan).rstrip("\n"))
    lines += ["", "Profiles of TensorRT segments (min / opt / max)"]
    rows = []
    for seg in m["plan"]["segments"]:
        for k, profile in enumerate(seg.get("profiles") or ()):
            for name, tp in profile.items():
                rows.append((seg["id"], k, name, " / ".join("x".join(map(str, tp[w])) or "[]"
                                                            for w in ("min", "opt", "max")), tp.get("source", "")))
    lines += table(("segment", "profile", "tensor", "min / opt / max", "source"), rows,
                   (True, True, False, False, False)) if rows else ["  none: no TensorRT segment"]
    engines = [(s["id"], s["engine"], s["engine_bytes"], s["build_seconds"], s["engine_sha256"][:16])
               for s in m["segments"] if s.get("engine")]
    lines += ["", "Engines"]
    lines += table(("segment", "file", "bytes", "build s", "sha256"), engines, (True, False, True, True, False)) \
        if engines else ["  none"]
    lines += ["  " + line for line in demotion_lines(m.get("demoted") or (), verbose=verbose)]
    return "\n".join(lines) + "\n"


def handle(args: argparse.Namespace) -> int:
    check_picture_name(args)
    precision = read_precision_plan(args.precision_plan) if args.precision_plan else None
    if is_build_folder(args.model):
        refuse_build_flags(args, os.fspath(args.model), allow=("precision_plan",))
        built = open_folder(args.model, executes=False, sign_key=read_sign_key(args.sign_key))
        plan: Plan = built.plan
        print(folder_report(built, os.fspath(args.model), verbose=bool(args.verbose)))
    else:
        plan = make_plan(args.model, partition_options(args), flavor=args.flavor, isolate=args.isolate)
        print(summary(plan))
    if precision is None and is_build_folder(args.model) and built.manifest.get("precision_plan"):
        precision = PrecisionPlan.from_dict(built.manifest["precision_plan"])
    if precision is not None:
        print(f"precision plan (atol {precision.atol:g}, rtol {precision.rtol:g}):")
        for seg in plan.tensorrt_segments():
            entry = precision.for_segment(plan.nodes[i].name for i in seg.nodes)
            print(f"  segment {seg.id}: " + (_precision_text(entry) if entry is not None else "fp32 (not in the plan)"))
    if args.json:
        write_atomic(args.json, json.dumps(built.manifest["plan"], indent=1) if is_build_folder(args.model)
                     else plan.to_json())
        print(f"plan written to {args.json}")
    if args.export_segments:
        files = export_segments(plan, args.export_segments)
        print(f"{len(files)} segment model(s) written to {args.export_segments}")
    if args.annotated:
        save_model_with_data(annotate(plan), args.annotated, plan.model.base_dir if plan.model else None)
        print(f"annotated model written to {args.annotated}")
    if args.picture:
        if precision is not None and not args.picture.lower().endswith(".svg"):
            write_atomic(args.picture, _with_precision(render_picture(plan, args.picture), plan, precision))
        else:
            write_picture(plan, args.picture)
        print(f"picture written to {args.picture}")
    return 0

"""``trt-backend inspect``: plan a model and show what runs where; or show what a build folder
holds: its plan, profiles and engines with their targets, as built."""
from __future__ import annotations

import argparse
import json
import os
import shutil
from typing import TYPE_CHECKING, Any

import onnx

from partitioner import OptionsError, PartitionOptions, Plan
from partitioner.report import annotate, summary
from trt_backend._files import (
    new_folder,
    save_model_with_data,
    write_atomic,
    write_picture,
)
from trt_backend._lazy import lazy_module
from trt_backend.commands._args import (
    add_partition_arguments,
    add_shape_arguments,
    add_sign_key_argument,
    is_folder_arg,
    partition_options,
    refuse_build_flags,
)
from trt_backend.commands._shapes import cli_profiles
from trt_backend.planning import make_plan

if TYPE_CHECKING:
    from trt_backend.engines.precision_plan import PrecisionPlan

# Loaded on the paths that need them: a build folder's reader and report, a picture, a precision plan.
_folder = lazy_module("trt_backend.commands._inspect_folder")
_picture = lazy_module("partitioner.picture")
_given = lazy_module("trt_backend.profiles.given")  # Only where shapes are given.
_node_arg = lazy_module("trt_backend.profiles.node_arg")
_precision_plan = lazy_module("trt_backend.engines.precision_plan")
_references = lazy_module("trt_backend.artifacts.references")  # Only exporting a folder's segments.
_plan_cache = lazy_module("trt_backend.artifacts.plan_cache")  # Only with --cache-dir.


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
    add_shape_arguments(p, "plan at: where shape inference leaves a tensor's type unknown, the model runs at "
                           "these to learn it, as build and run do")
    p.add_argument("--cache-dir", metavar="DIR",
                   help="plan cache (DIR/plans, shared with build): a model file planned before with the same "
                        "options is not planned again")
    add_sign_key_argument(p)
    add_partition_arguments(p)
    p.set_defaults(func=handle)


def check_picture_name(args: argparse.Namespace) -> None:
    """Fail before planning on a picture name that says no format (the CLI checks that every
    output path can be written before any command starts)."""
    if args.picture and not args.picture.lower().endswith((".svg", ".html", ".htm")):
        raise OptionsError(f"--picture {args.picture}: use a .svg or .html file name")


def export_segments(plan: Plan, folder: str, built: tuple[str, dict[str, Any]] | None = None) -> list[str]:
    """Write every segment model; into a fresh temp folder renamed into place when ``folder`` is new.
    ``built``: (a build folder, its manifest): its segments as built (the models its engines were
    built from: casts, Q/DQ), not as planned."""
    fresh = not os.path.exists(folder)
    target = new_folder(os.path.dirname(os.path.abspath(folder)), ".segments-") if fresh else folder
    written = []
    weights = plan.model.base_dir if plan.model is not None else None
    files = {int(e["id"]): e["model"] for e in built[1]["segments"]} if built is not None else {}
    try:
        for seg in plan.segments:
            path = os.path.join(target, f"segment_{seg.id}.onnx")
            if built is not None and seg.id in files:  # (its weights are in files of the folder, or referred to)
                where = _references.weights_dir(built[1]) or built[0]
                save_model_with_data(onnx.load_model(os.path.join(built[0], os.path.basename(files[seg.id])),
                                                     load_external_data=False), path, where)
            else:
                save_model_with_data(plan.extract(seg.id), path, weights)
            written.append(os.path.join(folder, f"segment_{seg.id}.onnx"))
        if fresh:
            os.replace(target, folder)
    except BaseException:
        if fresh:
            shutil.rmtree(target, ignore_errors=True)
        raise
    return written


def _with_precision(page: str, plan: Plan, precision: PrecisionPlan) -> str:
    """The HTML picture with a table of each TensorRT segment's precision and pinned nodes."""
    import html  # (only here: a plain inspect loads no more than it needs)

    about = f"--precision auto plan: {precision.tolerance_words()}; search {precision.seconds:.1f} s"
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


def _planned(args: argparse.Namespace, shapes: list[dict[str, Any]], options: PartitionOptions) -> Plan:
    """The plan of the model file, from the plan cache under --cache-dir where it was kept."""
    path = os.fspath(args.model)
    entry = _plan_cache.plan_entry(args.cache_dir, path, options, args.flavor, shapes) \
        if args.cache_dir and os.path.isfile(path) else None
    plan = entry.load() if entry is not None else None
    if plan is None:
        plan = make_plan(path, options, flavor=args.flavor, isolate=args.isolate, shapes=shapes)
        if entry is not None:
            entry.store(plan)
    return plan


def _check_profiles(profiles: list[dict[str, Any]], plan: Plan) -> None:
    """The shapes given, checked against the model as a build checks them: each names a model
    input (or a TensorRT segment's input), with its rank and fixed dims; ProfileError otherwise."""
    assert plan.model is not None
    graph = plan.model.proto.graph
    _given.check_profile_names(profiles, graph)
    inputs = [_node_arg.node_arg(vi.name, vi.type) for vi in graph.input]
    extra = {n for s in plan.tensorrt_segments() for n in s.inputs} - {a.name for a in inputs}
    _given.normalize_profiles(profiles, inputs, extra)


def handle(args: argparse.Namespace) -> int:
    check_picture_name(args)
    precision = _precision_plan.read_precision_plan(args.precision_plan) if args.precision_plan else None
    manifest: dict[str, Any] | None = None
    if is_folder_arg(args):
        refuse_build_flags(args, os.fspath(args.model), allow=("precision_plan",))
        if args.cache_dir:
            raise OptionsError(f"{args.model}: --cache-dir keeps plans of model files; a build folder holds its own "
                               "plan (inspect the model file with --cache-dir instead)")
        plan, manifest, report = _folder.open_and_report(os.fspath(args.model), args.sign_key,
                                                         verbose=bool(args.verbose))
        print(report)
    else:
        profiles = cli_profiles(args.min_shapes, args.opt_shapes, args.max_shapes, args.shapes)
        shapes = _given.profile_shapes(profiles) if profiles else []
        options = partition_options(args)
        plan = _planned(args, shapes, options)
        if profiles and plan.model is not None:  # held to the model as build and run hold them
            _check_profiles(profiles, plan)
        print(summary(plan, verbose=bool(args.verbose)))  # (its boundary bytes priced as planned, at the shapes given)
        if plan.tensorrt_segments():
            print("note: planned by TensorRT's parser; its builder can still refuse a node the parser took (a build "
                  "then runs it on ONNX Runtime: `trt-backend build` or `compare` shows what a build keeps)")
    if precision is None and manifest is not None and manifest.get("precision_plan"):
        precision = _precision_plan.PrecisionPlan.from_dict(manifest["precision_plan"])
    if precision is not None:
        print(f"precision plan ({precision.tolerance_words()}):")
        for seg in plan.tensorrt_segments():
            entry = precision.for_segment(plan.nodes[i].name for i in seg.nodes)
            print(f"  segment {seg.id}: " + (entry.words() if entry is not None else "fp32 (not in the plan)"))
        moved = precision.moved_line()
        if moved:
            print(f"  {moved}")
    if args.json:
        write_atomic(args.json, json.dumps(manifest["plan"], indent=1) if manifest is not None else plan.to_json())
        print(f"plan written to {args.json}")
    if args.export_segments:
        files = export_segments(plan, args.export_segments,
                                (os.fspath(args.model), manifest) if manifest is not None else None)
        print(f"{len(files)} segment model(s) written to {args.export_segments}")
    if args.annotated:
        save_model_with_data(annotate(plan), args.annotated, plan.model.base_dir if plan.model else None)
        print(f"annotated model written to {args.annotated}")
    if args.picture:
        if precision is not None and not args.picture.lower().endswith(".svg"):
            write_atomic(args.picture, _with_precision(_picture.render_picture(plan, args.picture), plan, precision))
        else:
            write_picture(plan, args.picture)
        print(f"picture written to {args.picture}")
    return 0

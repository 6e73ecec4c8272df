"""``trt-backend inspect`` of a build folder: the folder read and checked, and its report (the
plan, profiles and engines as built). Loaded only when inspect is given a folder."""
from __future__ import annotations

from typing import Any

from partitioner import Plan
from partitioner.cost import si_bytes
from partitioner.report import summary, table
from trt_backend.artifacts.read import BuiltFolder, open_folder, recorded_profiles, runtime_mismatch
from trt_backend.artifacts.references import KEY as REFERENCES_KEY
from trt_backend.artifacts.seal import sign_key as read_sign_key
from trt_backend.commands._segment_notes import precision_notes
from trt_backend.engines.report import demotion_lines
from trt_backend.gpu.status import tensorrt_status
from trt_backend.planning import sized_cost


def open_and_report(folder: str, sign_key: str | None, verbose: bool = False) -> tuple[Plan, dict[str, Any], str]:
    """(the folder's plan, its manifest, its report), its manifest and files checked."""
    built = open_folder(folder, executes=False, sign_key=read_sign_key(sign_key))
    return built.plan, built.manifest, folder_report(built, folder, verbose)


def _here(manifest: dict[str, object]) -> str:
    problem = runtime_mismatch(manifest)
    if problem:
        return f"{problem} (run and bench emulate its segments; load(..., rebuild=True) rebuilds)"
    ok, why = tensorrt_status()
    return "same TensorRT and GPU target: the engines execute here" if ok else \
        f"same TensorRT and GPU target; {why}: its TensorRT segments run emulated here"


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
        said.append("version compatible"
                    + ("" if opts.get("exclude_lean_runtime", True) else ", lean runtime included"))
    return ["builder: " + ", ".join(said)] if said else []


def _weights_line(manifest: dict[str, Any]) -> list[str]:
    """Where a folder built with --weights-by-reference reads its model's weights (none for a
    folder that holds them)."""
    record = manifest.get(REFERENCES_KEY)
    if not isinstance(record, dict):
        return []
    files = [f"{f['file']} ({f['bytes']} bytes, {f['kind']})" for f in record.get("files", ())]
    return [f"weights: referred to in {record.get('dir')}, not copied: {', '.join(files) or 'none'} (each checked "
            "against its size, modification time and digest when the folder is read)"]


def _memory_line(manifest: dict[str, Any]) -> list[str]:
    """The memory budget a folder was built within, where one held its TensorRT segments' weights
    (a cut the plan would not make otherwise)."""
    build = manifest.get("build")
    limit, budget = (build.get("max_segment_weights"), build.get("max_build_memory")) if isinstance(build, dict) \
        else (None, None)
    if not isinstance(limit, int):
        return []
    within = f"--max-build-memory {si_bytes(budget)}" if isinstance(budget, int) else "the memory free then"
    return [f"memory: TensorRT segments held to {si_bytes(limit)} of weights each, to build within {within}"]


def folder_report(built: BuiltFolder, folder: str, verbose: bool = False) -> str:
    """A build folder as built: header (digest, signature, TensorRT, GPU target, build options),
    the plan's segment table, each TensorRT segment's profiles and each engine."""
    m = built.manifest
    opts = m.get("build_options", {})
    caps = ",".join(opts.get("compute_capabilities") or ()) or "the builder's default"
    workspace = f"{opts['workspace_bytes'] >> 20} MiB" if opts.get("workspace_bytes") else "default"
    # What the engines compute in (what compare and run report), and what was asked where it differs
    # (auto; or a reduced precision on a plan with no TensorRT segment, which builds nothing in it)
    built_in = (m.get("build") or {}).get("summary") or opts.get("precision")
    asked = f" (asked: {opts.get('precision')})" if opts.get("precision") not in (built_in, None) else ""
    notes = [f"segment {s.get('id')}: {note}" for s in m.get("segments", ()) if isinstance(s, dict)
             for note in precision_notes(s)]
    asked += f" ({'; '.join(notes)})" if notes else ""
    lines = [f"build folder {folder} | manifest {m.get('digest')} | "
             + ("signed (HMAC-SHA256)" if "signature" in m else "unsigned")
             + f" | trt-backend {m.get('trt_backend')} | from {m.get('model')}",
             f"engines for {m.get('tensorrt')} | GPU target {m.get('gpu_target')} (compute capabilities: {caps}) | "
             f"precision {built_in}{asked} | workspace {workspace} | built in {m.get('build_seconds')} s",
             *_builder_line(opts), *_weights_line(m), *_memory_line(m),
             f"this machine: {_here(m)}", ""]
    demoted = [d["node"] for d in m.get("demoted") or () if isinstance(d, dict) and isinstance(d.get("node"), int)]
    if built.plan.model is not None:  # its boundaries priced at its profiles' shapes, as its build priced them
        shapes = [{n: getattr(tp, which) for n, tp in p.items()} for p in recorded_profiles(m)
                  for which in ("min", "opt", "max")]
        built.plan.cost = sized_cost(built.plan.cost, built.plan.model, shapes)
    lines.append(summary(built.plan, origin="the plan as built", verbose=verbose,  # (demotions: listed below)
                         listed=demoted).rstrip("\n"))
    lines += ["", "Profiles of TensorRT segments (min / opt / max)"]
    rows = []
    for seg in m["plan"]["segments"]:
        for k, profile in enumerate(seg.get("profiles") or ()):
            for name, tp in profile.items():
                shown = " / ".join("x".join(map(str, tp[w])) or "[]" for w in ("min", "opt", "max"))
                values = tp.get("values")
                if isinstance(values, dict):  # a shape tensor: the values it takes decide a run too
                    shown += "; values " + " / ".join(str(tuple(values.get(w) or ())) for w in ("min", "opt", "max"))
                rows.append((seg["id"], k, name, shown, tp.get("source", "")))
    lines += table(("segment", "profile", "tensor", "min / opt / max", "source"), rows,
                   (True, True, False, False, False)) if rows else ["  none: no TensorRT segment"]
    engines = [(s["id"], s["engine"], s["engine_bytes"], s["build_seconds"], s["engine_sha256"][:16])
               for s in m["segments"] if s.get("engine")]
    lines += ["", "Engines"]
    lines += table(("segment", "file", "bytes", "build s", "sha256"), engines, (True, False, True, True, False)) \
        if engines else ["  none"]
    lines += ["  " + line for line in demotion_lines(m.get("demoted") or (), verbose=verbose)]
    return "\n".join(lines) + "\n"



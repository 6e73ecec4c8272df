"""The read side of build folders, the one loader every door uses (``run``, ``compare``, ``bench``,
``inspect``, ``export-triton``, ``serve`` and :meth:`Session.load`): ``trt-backend build`` writes a
folder (manifest, normalized model, segment models, engines; :mod:`trt_backend.artifacts.write`)
that :func:`open_build` reads back, checked, as the :class:`~trt_backend.compiler.Compiled` it was.

The manifest holds the plan with its derived profiles, the build options, per segment its files
with their SHA-256, the precision it was built in and the nodes kept fp32, build seconds and engine
size, the calibration data's digest, the versions that built it and the GPU target. Each TensorRT
segment's model file is the model its engine was built from (Q/DQ for int8, casts for fp16/bf16),
so emulating it runs what was built. Anything edited or corrupt, an engine for another TensorRT
version or GPU, is a clear error (or a rebuild on request)."""
from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import onnx

from partitioner import Plan, TrtBackendError
from partitioner.cost import BoundaryCost
from partitioner.errors import OptionsError
from partitioner.extract import boundary
from partitioner.weights import check_location, file_sha256
from trt_backend._files import path_text
from trt_backend.artifacts.build_cache import jsonable
from trt_backend.artifacts.references import check_references, weights_dir
from trt_backend.artifacts.saved import saved_segment_profiles
from trt_backend.artifacts.seal import MANIFEST, check_seal
from trt_backend.compiler import Compiled, compile
from trt_backend.engines.builder import BuildOptions
from trt_backend.engines.memory import EngineFile
from trt_backend.engines.precision_plan import PrecisionPlan
from trt_backend.engines.report import BuiltSegment
from trt_backend.engines.targets import (
    current_sm,
    describe_target,
    target_covers,
)
from trt_backend.errors import ArtifactError, ProfileError, TensorRTUnavailableError
from trt_backend.planning import load_normalized as load
from trt_backend.planning import with_shipped_plugins
from trt_backend.profiles import Profile, profiles_from_json, shape_tensor_inputs
from trt_backend.profiles.profile import as_shape
from trt_backend.session.options import SessionOptions
from trt_backend.tensorrt.flavor import load_flavor

log = logging.getLogger(__name__)

MODEL_FILE = "model.onnx"
# The model before its Q/DQ were re-quantized to int8 (``--qdq-rewrite int8``), which compare
# measures such a folder against; the manifest lists it under REFERENCE_KEY only then.
REFERENCE_FILE, REFERENCE_KEY = "reference.onnx", "reference_model"
FORMAT = 2  # 2: segment models are the built forms, per segment precision, the build record


@dataclass
class BuiltFolder:
    """What a build folder holds, checked: the plan (with its model), the manifest (whose plan
    carries the derived profiles) and the engines by segment id (None: build them anew): their
    bytes where they execute here, else their files (never read)."""

    plan: Plan
    manifest: dict[str, Any]
    engines: dict[int, bytes | EngineFile] | None


def is_build_folder(source: object) -> TypeGuard[str | os.PathLike[str]]:
    """Whether ``source`` names a folder (a model is a file): read as a build folder."""
    return isinstance(source, (str, os.PathLike)) and os.path.isdir(source)


def open_folder(folder: str | os.PathLike[str], *, executes: bool, rebuild: bool = False,
                sign_key: bytes | None = None, options: SessionOptions | None = None) -> BuiltFolder:
    """Read ``folder``, its manifest checked against its digest (and signature, with
    ``sign_key``) and every file against its SHA-256. When its engines are to execute here
    (``executes``), an engine that cannot run with this TensorRT and GPU (see
    :func:`runtime_mismatch`; ``options``: the run-time ones it depends on) is an ArtifactError,
    or with ``rebuild`` leaves the engines out (to be built anew)."""
    folder = os.fspath(folder)
    manifest = read_manifest(folder, sign_key)
    engines: dict[int, bytes | EngineFile] | None = {}
    if executes:
        opts = options if options is not None else SessionOptions()
        problem = runtime_mismatch(manifest, allow_host_code=opts.allow_host_code, lean_runtime=opts.lean_runtime)
        if problem and not rebuild:
            raise ArtifactError(f"{folder}: {problem}; rebuild it (trt-backend build, or load(..., rebuild=True))")
        if problem:
            log.warning("%s: %s; building new engines", folder, problem)
            engines = None
    if engines is not None:
        for seg in manifest["segments"]:
            if seg.get("engine"):
                engine = EngineFile(os.path.join(folder, os.path.basename(seg["engine"])), seg["engine_sha256"],
                                    int(seg["engine_bytes"]))
                engines[int(seg["id"])] = engine.read() if executes else engine
    plan = Plan.from_dict(manifest["plan"])
    plan.cost = recorded_cost(manifest)
    shapes = [{n: getattr(tp, which) for n, tp in p.items()}  # Types learned again at the profiles' shapes.
              for p in profiles_from_json(manifest["plan"].get("input_profiles", []))
              for which in ("min", "opt", "max")]
    # A folder that refers to its model's weights reads them from the model's own folder.
    plan.model = load(os.path.join(folder, manifest["model_file"]), shapes, base_dir=weights_dir(manifest))
    check_plan_fits(plan, os.path.join(folder, MANIFEST))
    return BuiltFolder(plan, manifest, engines)


def recorded_cost(manifest: Mapping[str, Any]) -> BoundaryCost:
    """The boundary cost a folder was planned with (its constants and the dims its profiles
    sized), as its manifest records it; the defaults where it records none."""
    recorded = ((manifest.get("build") or {}).get("partition") or {}).get("boundary_cost")
    if not isinstance(recorded, dict):
        return BoundaryCost()
    try:
        return BoundaryCost(**recorded)
    except (OptionsError, TypeError):  # (a manifest of another version: its report uses the defaults)
        return BoundaryCost()


def read_manifest(folder: str, sign_key: bytes | None = None) -> dict[str, Any]:
    """The manifest of ``folder``, checked against its digest (and its signature under
    ``sign_key``), every file checked against its SHA-256; for a folder that refers to its model's
    weights, the files it refers to checked against their size, time and digest
    (:func:`~trt_backend.artifacts.references.check_references`)."""
    path = os.path.join(folder, MANIFEST)
    if os.path.isfile(folder):
        raise ArtifactError(f"{folder}: a file, not a trt-backend build folder" + (
            "; a model file is opened with Session(path), or built into a folder with trt-backend build"
            if folder.endswith(".onnx") else ""))
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise ArtifactError(f"{folder}: no {MANIFEST}; not a trt-backend build folder") from None
    except (OSError, ValueError) as e:  # (ValueError: JSON that does not parse, bytes that are not UTF-8)
        raise ArtifactError(f"{path}: unreadable ({e})") from None
    except RecursionError:  # (arrays nested past what Python's JSON reader follows)
        raise ArtifactError(f"{path}: unreadable (nested deeper than a manifest is)") from None
    if isinstance(manifest, dict) and isinstance(manifest.get("format"), int) and manifest["format"] < FORMAT:
        raise ArtifactError(f"{folder}: written by an older trt-backend (folder format {manifest['format']}, which "
                            "does not record the models its engines were built from); rebuild it with "
                            "trt-backend build")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ArtifactError(f"{path}: not a format-{FORMAT} trt-backend manifest")
    check_seal(manifest, path, sign_key)
    check_manifest_shape(manifest, path)
    try:
        checks = [(manifest["model_file"], manifest["model_sha256"])]
        for seg in manifest["segments"]:
            checks.append((seg["model"], seg["model_sha256"]))
            if seg.get("engine"):
                checks.append((seg["engine"], seg["engine_sha256"]))
        if REFERENCE_KEY in manifest:
            checks.append((manifest[REFERENCE_KEY]["file"], manifest[REFERENCE_KEY]["sha256"]))
    except (KeyError, TypeError) as e:
        raise ArtifactError(f"{path}: manifest lacks {e}; edited by hand? rebuild with trt-backend build") from None
    for name, digest in checks:
        file = os.path.join(folder, os.path.basename(name))
        try:
            found = file_sha256(file)  # In chunks: an engine may be gigabytes.
        except OSError:
            raise ArtifactError(f"{folder}: {name} listed in {MANIFEST} is missing") from None
        if found != digest:
            raise ArtifactError(f"{folder}: {name} does not match its SHA-256 in {MANIFEST} (edited or corrupt); "
                                "rebuild with trt-backend build")
    check_data_files(folder, manifest)
    check_references(folder, manifest)
    return manifest


# What each field the readers of a folder rely on must hold: its digest says only that the manifest
# is as its writer sealed it, and anyone can seal an edited one again.
_FIELDS: dict[str, tuple[type, ...]] = {"model_file": (str,), "model_sha256": (str,), "build": (dict,),
                                        "build_options": (dict,), "segments": (list,), "plan": (dict,),
                                        "demoted": (list,), "gpu_target": (str, type(None)),
                                        "tensorrt": (str, type(None))}
_SEGMENT_FIELDS: dict[str, tuple[type, ...]] = {"id": (int,), "backend": (str,), "model": (str,),
                                                "model_sha256": (str,), "engine": (str, type(None)),
                                                "precision": (str, type(None)), "pinned": (list,)}
_PLAN_SEGMENT_FIELDS: dict[str, tuple[type, ...]] = {"id": (int,), "backend": (str,), "nodes": (list,),
                                                     "inputs": (list,), "outputs": (list,), "copies": (list,),
                                                     "profiles": (list,)}


def check_manifest_shape(manifest: Mapping[str, Any], path: str) -> None:
    """ArtifactError naming the first field of ``manifest`` that does not hold what a folder's
    readers take from it (a type; a plan whose segments are not listed in order, with whole
    numbers for nodes and names for tensors)."""
    def refuse(where: str, want: tuple[type, ...], got: Any) -> None:
        names = " or ".join("null" if t is type(None) else {dict: "an object", list: "a list", str: "a string",
                                                           int: "a whole number"}[t] for t in want)
        raise ArtifactError(f"{path}: {where} must be {names}, got {json.dumps(got)[:60]}; edited by hand? rebuild "
                            "with trt-backend build")

    def held(entry: Mapping[str, Any], fields: Mapping[str, tuple[type, ...]], where: str) -> None:
        for key, want in fields.items():
            value = entry.get(key)
            if key in entry and (not isinstance(value, want) or (isinstance(value, bool) and bool not in want)):
                refuse(f"{where}{key}", want, entry[key])

    held(manifest, _FIELDS, "")
    for k, seg in enumerate(manifest.get("segments") or ()):
        if not isinstance(seg, dict):
            refuse(f"segments[{k}]", (dict,), seg)
        held(seg, _SEGMENT_FIELDS, f"segments[{k}].")
    for k, entry in enumerate(manifest.get("demoted") or ()):
        if not isinstance(entry, dict):
            refuse(f"demoted[{k}]", (dict,), entry)
    plan = manifest.get("plan") or {}
    if not isinstance(plan.get("segments"), list) or not isinstance(plan.get("nodes"), list):
        refuse("plan.segments and plan.nodes", (list,), {k: plan.get(k) for k in ("segments", "nodes")})
    for k, seg in enumerate(plan["segments"]):
        if not isinstance(seg, dict):
            refuse(f"plan.segments[{k}]", (dict,), seg)
        held(seg, _PLAN_SEGMENT_FIELDS, f"plan.segments[{k}].")
        if seg.get("id") != k:
            refuse(f"plan.segments[{k}].id", (int,), seg.get("id"))
        for key, kind in (("nodes", int), ("copies", int), ("inputs", str), ("outputs", str)):
            if any(not isinstance(v, kind) or isinstance(v, bool) for v in seg.get(key) or ()):
                refuse(f"plan.segments[{k}].{key}[...]", (kind,), seg[key])
    for k, node in enumerate(plan["nodes"]):
        if not isinstance(node, dict) or not isinstance(node.get("segment"), int):
            refuse(f"plan.nodes[{k}]", (dict,), node)
    ids = sorted(seg["id"] for seg in manifest.get("segments") or ())
    if ids != list(range(len(plan["segments"]))):
        raise ArtifactError(f"{path}: segments {ids} are not the plan's {len(plan['segments'])} segment(s); edited "
                            "by hand? rebuild with trt-backend build")
    for where, profiles in [("plan.input_profiles", plan.get("input_profiles") or [])] + [
            (f"plan.segments[{k}].profiles", seg.get("profiles") or []) for k, seg in enumerate(plan["segments"])]:
        for profile in profiles if isinstance(profiles, list) else [profiles]:
            if not isinstance(profile, dict):
                refuse(where, (dict,), profile)
            for name, tp in profile.items():
                try:  # (the shapes as the profiles' own reader takes them: whole numbers >= 0)
                    spans = [as_shape(tp[w], name) if isinstance(tp[w], list) else None
                             for w in ("min", "opt", "max")]
                except (TypeError, KeyError, ProfileError):
                    spans = [None]
                if None in spans or len({len(v) for v in spans if v is not None}) != 1:
                    raise ArtifactError(f"{path}: {where}: the profile of '{name}' must give min, opt and max as lists "
                                        f"of whole numbers >= 0 of one length, got {json.dumps(tp)[:80]}; edited by "
                                        "hand? rebuild with trt-backend build")


def check_plan_fits(plan: Plan, path: str) -> None:
    """ArtifactError where a folder's plan does not describe its model: each segment's nodes are
    the model's, each node in one segment, and each segment reads and writes the tensors its nodes
    do, in an order that runs (what a run would otherwise find as a missing tensor)."""
    model = plan.model
    if model is None:
        return
    index = model.index
    n = len(model.proto.graph.node)
    seen: set[int] = set()
    for seg in plan.segments:
        bad = [i for i in (*seg.nodes, *seg.copies) if not 0 <= i < n]
        if bad or seen & set(seg.nodes):
            raise ArtifactError(f"{path}: plan segment {seg.id} lists node(s) {bad or sorted(seen & set(seg.nodes))} "
                                f"the model does not have once (it has {n}); edited by hand? rebuild with "
                                "trt-backend build")
        seen.update(seg.nodes)
    available = set(index.graph_inputs) | set(index.initializers)
    for seg in plan.segments:
        inputs, outputs = boundary(index, seg.nodes, seg.copies)
        if set(inputs) != set(seg.inputs) or not set(seg.outputs) <= set(outputs) or len(set(seg.outputs)) != \
                len(seg.outputs) or not set(seg.inputs) <= available:
            raise ArtifactError(f"{path}: plan segment {seg.id} does not read and write what its nodes do "
                                f"(recorded {list(seg.inputs)} -> {list(seg.outputs)}; its nodes read {inputs} and "
                                f"write {outputs}), or reads a tensor no earlier segment writes; edited by hand? "
                                "rebuild with trt-backend build")
        available |= set(seg.outputs)


def check_data_files(folder: str, manifest: Mapping[str, Any]) -> None:
    """The external data files the manifest lists (weights shared by the segment models): each
    inside the folder, present, of its size and SHA-256 (read in chunks, never held whole)."""
    for entry in manifest.get("data_files", []):
        try:
            name, size, digest = entry["file"], int(entry["bytes"]), entry["sha256"]
            check_location(name, "?", folder)
        except (KeyError, TypeError, ValueError, TrtBackendError) as e:
            raise ArtifactError(f"{folder}: data file entry {entry!r} in {MANIFEST} is malformed ({e})") from None
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            raise ArtifactError(f"{folder}: data file {name} listed in {MANIFEST} is missing")
        if os.path.getsize(path) != size:
            raise ArtifactError(f"{folder}: data file {name} has {os.path.getsize(path)} bytes, {MANIFEST} says "
                                f"{size} (truncated or edited); rebuild with trt-backend build")
        if file_sha256(path) != digest:
            raise ArtifactError(f"{folder}: data file {name} does not match its SHA-256 in {MANIFEST} (edited or "
                                "corrupt); rebuild with trt-backend build")


def runtime_mismatch(manifest: Mapping[str, Any], *, allow_host_code: bool = False,
                     lean_runtime: str | None = None) -> str | None:
    """Why the manifest's engines cannot execute with this machine's TensorRT and GPU, or None when
    they can (as far as the manifest tells; TensorRT-RTX checks each engine again before loading it).

    The TensorRT version must be the one that built them, except for version-compatible engines,
    which run on the same or a later runtime of the same major version: those that embed their
    lean runtime need ``allow_host_code`` (it is host code), those built without it need that
    lean runtime (``lean_runtime``, loaded with ``Runtime.load_runtime`` as Polygraphy's
    ``--load-runtime`` does) unless the versions are equal. The GPU must be covered by what they
    were built for: its own SM (full TensorRT), a hardware-compatibility level (Ampere and later,
    or the build GPU's compute capability) or TensorRT-RTX's compute capabilities, whose defaults
    leave out SM 7.5."""
    try:
        flv = load_flavor("auto")
    except TensorRTUnavailableError as e:
        return str(e)
    built = str(manifest.get("tensorrt") or "")
    name, _, version = built.partition(" ")
    fields = manifest.get("build_options", {})
    compatible = bool(fields.get("version_compatible"))
    embedded = compatible and not fields.get("exclude_lean_runtime", True)
    if name != flv.name or (version != flv.version and not compatible):
        return f"engines were built with {built or 'an unknown TensorRT'}, this machine has {flv.target}"
    if version != flv.version:
        if version.split(".")[0] != flv.version.split(".")[0] or _version(version) > _version(flv.version):
            return (f"version-compatible engines of {built} run on {name} {version.split('.')[0]}.x from {version} on, "
                    f"this machine has {flv.target}")
        if not embedded and not lean_runtime:
            return (f"engines were built version-compatible by {built} without its lean runtime; give that lean "
                    f"runtime library (SessionOptions(lean_runtime=PATH)) to run them on {flv.target}")
    if embedded and not allow_host_code:
        return ("engines embed their lean runtime (version-compatible build), which is host code: allow it with "
                "allow_host_code=True (--allow-host-code)")
    sm = current_sm()
    target = manifest.get("gpu_target")
    if sm is not None and not target_covers(target, (int(sm[:-1]), int(sm[-1])), manifest.get("built_on_sm")):
        hint = " (rebuild with --compute-capabilities SM75)" if target == "cc:default" and sm == "75" else ""
        return f"engines were built for {describe_target(target)}, this GPU is SM {sm[:-1]}.{sm[-1]}{hint}"
    return None


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


@dataclass
class OpenedBuild:
    """A build folder read back: what was built (:class:`~trt_backend.compiler.Compiled`, its
    options those it was built with plus the caller's run-time ones) and the manifest."""

    compiled: Compiled
    manifest: dict[str, Any]
    folder: str


# Options a folder was built with: changing them would change what was built, so a folder refuses
# them (say them to ``trt-backend build`` instead). Field -> the CLI flag a user gives it with.
BUILD_FIELDS = {"precision": "--precision", "keep_fp32_ops": "--keep-fp32-ops",
                "calibration_data": "--calibration-data",
                "calibration_method": "--calibration-method", "precision_plan": "--precision-plan",
                "workspace_bytes": "--workspace-mb", "builder_optimization_level": "--builder-optimization-level",
                "hardware_compatibility": "--hardware-compatibility", "compute_capabilities": "--compute-capabilities",
                "max_aux_streams": "--max-aux-streams", "version_compatible": "--version-compatible",
                "exclude_lean_runtime": "--include-lean-runtime", "timing_cache": "--timing-cache",
                "max_build_memory": "--max-build-memory"}
PARTITION_FIELDS = {"exclude_ops": "--exclude-ops", "exclude_nodes": "--exclude-nodes",
                    "min_segment_size": "--min-segment-size", "boundary_cost": "--launch-cost-us/--no-boundary-cost",
                    "plugins": "--no-plugins", "plugin_ops": "--plugin-ops", "target": "--target",
                    "qdq_rewrite": "--qdq-rewrite"}
# How a plan is made (whose parser decides, in which process): a folder's plan is made already.
PLANNING_FIELDS = {"flavor": "--flavor", "isolate_parser": "--isolate"}


# Options that name a set of ops or nodes: the same names in another order are the same option.
_SETS = frozenset({"keep_fp32_ops", "exclude_ops", "exclude_nodes", "plugin_ops"})


def _unlike(name: str, given: Any, recorded: Any) -> bool:
    """Whether the option ``name`` given as ``given`` differs from the folder's ``recorded``."""
    if name in _SETS and isinstance(given, (list, tuple)) and isinstance(recorded, (list, tuple)):
        return set(given) != set(recorded)
    return bool(given != recorded)


def refusal(folder: str, flag: str, field: str | None = None) -> OptionsError:
    """The one error every door gives for an option a build folder refuses: the folder, the flag
    (and the option's field where its name differs), where it belongs instead."""
    named = flag if field is None or flag == "--" + field.replace("_", "-") else f"{flag} ({field})"
    return OptionsError(f"{folder}: {named} would change what was built; a build folder runs as it was built "
                        f"(give {flag.replace('/', ' or ')} to trt-backend build)")


def refused_on_folder(options: SessionOptions, folder: str, manifest: Mapping[str, Any] | None = None, *,
                      build: Mapping[str, Any] | None = None, skip: tuple[str, ...] = (),
                      explicit: frozenset[str] = frozenset()) -> None:
    """The rule every door follows on a build folder (the Python door's Session.load and the
    command line's flags alike): the :func:`refusal` of the first option that would change what
    the folder's engines were built from. Planning, partition and build options pass when left at
    their defaults or equal to what the folder records (``manifest``; None: every one not at its
    default is refused); run-time ones (threads, device, emulation, memory) always do.
    ``build``: the build fields as given where they are no BuildOptions (the command line's:
    precision 'auto' without its plan is none), default ``options.build``'s; ``skip``: fields the
    caller reads for a purpose of its own (inspect's precision plan); ``explicit``: build fields the
    command line gave explicitly, which are held to the folder's even at their defaults."""
    built = folder_build_options(manifest) if manifest is not None else BuildOptions()
    default_build, default_partition = BuildOptions(), with_shipped_plugins()
    for name, flag in BUILD_FIELDS.items():
        value = build.get(name, getattr(default_build, name)) if build is not None else getattr(options.build, name)
        asked = value != getattr(default_build, name) or name in explicit
        if name not in skip and asked and _unlike(name, value, getattr(built, name)):
            raise refusal(folder, flag, name)
    recorded = manifest.get("build", {}) if manifest is not None else {}
    partition = recorded.get("partition")
    planned: dict[str, Any] = partition if isinstance(partition, dict) else {}
    given = jsonable(options.partition)
    if isinstance(planned.get("boundary_cost"), dict) and not (given.get("boundary_cost") or {}).get("dims"):
        # (the named dims a build priced boundaries at come from its profiles, not from options given)
        planned = {**planned, "boundary_cost": {**planned["boundary_cost"], "dims": []}}
    for name, flag in PARTITION_FIELDS.items():
        if getattr(options.partition, name) != getattr(default_partition, name) and _unlike(name, given[name],
                                                                                              planned.get(name)):
            raise refusal(folder, flag, name)
    engines = str((manifest or {}).get("tensorrt") or "").partition(" ")[0]
    if options.flavor not in ("auto", engines):
        raise refusal(folder, PLANNING_FIELDS["flavor"], "flavor")
    if options.isolate_parser:
        raise refusal(folder, PLANNING_FIELDS["isolate_parser"], "isolate_parser")
    if options.oracle is not None:
        raise OptionsError(f"{folder}: a capability oracle would change what was built; a build folder runs as it was "
                           "planned")


def same_profiles(given: Any, manifest: Mapping[str, Any] | None) -> bool:
    """Whether profiles given for a build folder (``[{input: (min, opt, max)}]``, the Python
    door's and the command line's form) are the model-input profiles it records: given so, they
    change nothing and are taken, as an option equal to the folder's setting is."""
    recorded = recorded_profiles(manifest)
    if not recorded or not isinstance(given, Sequence) or len(given) != len(recorded):
        return False
    ours = [{n: (list(t.min), list(t.opt), list(t.max)) for n, t in p.items()} for p in recorded]
    try:
        theirs = [{n: tuple(list(s) for s in shapes) for n, shapes in p.items()} for p in given]
    except (TypeError, ValueError, AttributeError):
        return False
    return ours == theirs


def recorded_profiles(manifest: Mapping[str, Any] | None) -> list[Profile]:
    """The model-input profiles a folder's manifest records; none where it records none, or none
    that can be read (opening the folder says why)."""
    recorded = ((manifest or {}).get("plan") or {}).get("input_profiles")
    if not isinstance(recorded, list):
        return []
    try:
        return profiles_from_json(recorded)
    except (TypeError, ValueError, AttributeError, KeyError, TrtBackendError):
        return []


def folder_build_options(manifest: Mapping[str, Any]) -> BuildOptions:
    """The BuildOptions a folder was built with, as its manifest records them."""
    rec = manifest.get("build", {})
    fields = dict(manifest.get("build_options", {}))
    plan = PrecisionPlan.from_dict(rec["precision_plan"]) if rec.get("precision_plan") else None
    calibration = rec.get("calibration") or {}
    kw: dict[str, Any] = {"precision": rec.get("precision", fields.get("precision", "fp32")),
                          "keep_fp32_ops": tuple(rec.get("keep_fp32_ops", ())), "precision_plan": plan,
                          "calibration_data": calibration.get("source"),
                          "calibration_method": calibration.get("method", "minmax")}
    for name in ("workspace_bytes", "hardware_compatibility", "compute_capabilities", "max_aux_streams",
                 "version_compatible", "exclude_lean_runtime"):
        if name in fields:
            kw[name] = tuple(fields[name]) if name == "compute_capabilities" else fields[name]
    if "optimization_level" in fields:
        kw["builder_optimization_level"] = fields["optimization_level"]
    if rec.get("max_build_memory") is not None:
        kw["max_build_memory"] = rec["max_build_memory"]
    try:
        return BuildOptions(**kw)
    except (TypeError, TrtBackendError) as e:
        raise ArtifactError(f"manifest build options unreadable ({e}); rebuild with trt-backend build") from None


def open_build(folder: str | os.PathLike[str], options: SessionOptions | None = None, *, executes: bool = False,
               rebuild: bool = False, sign_key: bytes | None = None) -> OpenedBuild:
    """Read ``folder`` (see :func:`open_folder`) as what was built. ``options``: run-time options
    (threads, device, emulation, memory, signing); any that would change what was built is an
    OptionsError naming it. With ``rebuild`` and engines that cannot execute here, the folder's
    model is compiled again with the folder's own options and profiles."""
    folder = path_text(folder, "a build folder")
    opts = options if options is not None else SessionOptions()
    built = open_folder(folder, executes=executes, rebuild=rebuild, sign_key=sign_key, options=opts)
    manifest = built.manifest
    refused_on_folder(opts, folder, manifest, explicit=getattr(opts, "given", frozenset()))
    opts = dataclasses.replace(opts, build=dataclasses.replace(folder_build_options(manifest),
                                                               max_workers=opts.build.max_workers,
                                                               timing_cache=opts.build.timing_cache))
    if built.engines is None:  # Rebuild: the same plan and profiles, engines built anew.
        compiled = compile(built.plan, None, opts, build=True, saved_plan=manifest["plan"])
        return OpenedBuild(compiled, manifest, folder)
    plan = built.plan
    assert plan.model is not None
    saved = manifest["plan"]
    derived = saved_segment_profiles(saved)
    entries = {int(e["id"]): e for e in manifest["segments"]}
    segments: dict[int, BuiltSegment] = {}
    for seg in plan.tensorrt_segments():
        entry = entries.get(seg.id)
        if entry is None:
            raise ArtifactError(f"{folder}: manifest lists no segment {seg.id} of its plan; "
                                "rebuild with trt-backend build")
        model = _segment_model(folder, entry)
        segments[seg.id] = BuiltSegment(seg, model, str(entry.get("precision") or "fp32"),
                                        tuple(entry.get("pinned") or ()), derived.get(seg.id, []),
                                        frozenset(shape_tensor_inputs(plan.model, seg)), built.engines.get(seg.id))
    compiled = Compiled(plan, profiles_from_json(saved.get("input_profiles", [])), segments, opts,
                        calibration=manifest.get("build", {}).get("calibration"))
    return OpenedBuild(compiled, manifest, folder)


def _segment_model(folder: str, entry: Mapping[str, Any]) -> onnx.ModelProto:
    """A segment's model file (checked against its SHA-256 by :func:`read_manifest`); its external
    weights, if any, stay in their files beside it (ONNX Runtime reads them from the folder)."""
    path = os.path.join(folder, os.path.basename(entry["model"]))
    try:
        return onnx.load_model(path, load_external_data=False)
    except Exception as e:  # noqa: BLE001 - a file that passed its digest but does not parse
        raise ArtifactError(f"{path}: unreadable segment model ({e}); rebuild with trt-backend build") from None

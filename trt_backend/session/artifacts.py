"""The read side of build folders: ``trt-backend build`` writes a folder (manifest, normalized
model, segment models, engines; :mod:`trt_backend.session.build_folder`) that :func:`open_folder`
reads back, checked, for :meth:`Session.load` to run without planning, calibrating or building.

The manifest holds the plan with its derived profiles, per segment its files with their SHA-256,
build seconds and engine size, the versions that built it and the GPU target. Anything edited or
corrupt, an engine for another TensorRT version or GPU, is a clear error (or a rebuild on request)."""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from partitioner import Plan, TrtBackendError
from partitioner.weights import check_location, file_sha256
from trt_backend._files import sha256_bytes
from trt_backend.engines.builder import BuildOptions, build_target
from trt_backend.errors import ArtifactError, TensorRTUnavailableError
from trt_backend.planning import load
from trt_backend.session.seal import check_seal
from trt_backend.tensorrt.flavor import load_flavor

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
MODEL_FILE = "model.onnx"
FORMAT = 1


@dataclass
class BuiltFolder:
    """What a build folder holds, checked: the plan (with its model), the manifest (whose plan
    carries the derived profiles) and the engines by segment id (None: build them anew)."""

    plan: Plan
    manifest: dict[str, Any]
    engines: dict[int, bytes] | None


def is_build_folder(source: object) -> TypeGuard[str | os.PathLike[str]]:
    """Whether ``source`` names a folder (a model is a file): read as a build folder."""
    return isinstance(source, (str, os.PathLike)) and os.path.isdir(source)


def open_folder(folder: str | os.PathLike[str], *, executes: bool, rebuild: bool = False,
                sign_key: bytes | None = None) -> BuiltFolder:
    """Read ``folder``, its manifest checked against its digest (and signature, with
    ``sign_key``) and every file against its SHA-256. When its engines are to execute here
    (``executes``), an engine for another TensorRT version or GPU is an ArtifactError, or with
    ``rebuild`` leaves the engines out (to be built anew)."""
    folder = os.fspath(folder)
    manifest = read_manifest(folder, sign_key)
    engines: dict[int, bytes] | None = {}
    if executes:
        problem = runtime_mismatch(manifest)
        if problem and not rebuild:
            raise ArtifactError(f"{folder}: {problem}; rebuild it (trt-backend build, or load(..., rebuild=True))")
        if problem:
            log.warning("%s: %s; building new engines", folder, problem)
            engines = None
    if engines is not None:
        for seg in manifest["segments"]:
            if seg.get("engine"):
                with open(os.path.join(folder, os.path.basename(seg["engine"])), "rb") as f:
                    engines[int(seg["id"])] = f.read()
    plan = Plan.from_dict(manifest["plan"])
    plan.model = load(os.path.join(folder, manifest["model_file"]))
    return BuiltFolder(plan, manifest, engines)


def read_manifest(folder: str, sign_key: bytes | None = None) -> dict[str, Any]:
    """The manifest of ``folder``, checked against its digest (and its signature under
    ``sign_key``), every file checked against its SHA-256."""
    path = os.path.join(folder, MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise ArtifactError(f"{folder}: no {MANIFEST}; not a trt-backend build folder") from None
    except (OSError, json.JSONDecodeError) as e:
        raise ArtifactError(f"{path}: unreadable ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ArtifactError(f"{path}: not a format-{FORMAT} trt-backend manifest")
    check_seal(manifest, path, sign_key)
    try:
        checks = [(manifest["model_file"], manifest["model_sha256"])]
        for seg in manifest["segments"]:
            checks.append((seg["model"], seg["model_sha256"]))
            if seg.get("engine"):
                checks.append((seg["engine"], seg["engine_sha256"]))
    except (KeyError, TypeError) as e:
        raise ArtifactError(f"{path}: manifest lacks {e}; edited by hand? rebuild with trt-backend build") from None
    for name, digest in checks:
        file = os.path.join(folder, os.path.basename(name))
        try:
            with open(file, "rb") as f:
                data = f.read()
        except OSError:
            raise ArtifactError(f"{folder}: {name} listed in {MANIFEST} is missing") from None
        if sha256_bytes(data) != digest:
            raise ArtifactError(f"{folder}: {name} does not match its SHA-256 in {MANIFEST} (edited or corrupt); "
                                "rebuild with trt-backend build")
    check_data_files(folder, manifest)
    return manifest


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


def runtime_mismatch(manifest: Mapping[str, Any]) -> str | None:
    """Why the manifest's engines cannot execute with this machine's TensorRT (version, GPU
    target), or None when they can (as far as the manifest tells)."""
    try:
        flv = load_flavor("auto")
    except TensorRTUnavailableError as e:
        return str(e)
    if flv.target != manifest.get("tensorrt"):
        return f"engines were built with {manifest.get('tensorrt')}, this machine has {flv.target}"
    fields = manifest.get("build_options", {})
    here = build_target(flv, BuildOptions(compute_capabilities=tuple(fields.get("compute_capabilities", ()))))
    if here != manifest.get("gpu_target"):
        return f"engines were built for {manifest.get('gpu_target')}, this machine is {here}"
    return None

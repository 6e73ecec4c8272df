"""Built artifacts: ``trt-backend build`` writes a folder (manifest, normalized model, segment
models, engines) that :func:`load` turns into a Session without planning, calibrating or building.

The manifest holds the plan with its derived profiles, per segment its files with their SHA-256,
build seconds and engine size, the versions that built it and the GPU target. Anything edited or
corrupt, an engine for another TensorRT version or GPU, is a clear error (or a rebuild on request)."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

import onnx

from partitioner import Plan, TrtBackendError
from partitioner.model import load_model
from partitioner.report import write_atomic

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
MODEL_FILE = "model.onnx"
FORMAT = 1


class ArtifactError(TrtBackendError):
    """A build folder is missing, edited, corrupt or was built for another runtime or GPU."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build(model: Any, out_dir: str, profiles: Sequence[Mapping[str, Any]] | None = None, options: Any = None,
          build_options: Any = None, cache_dir: str | None = None, *, flavor: str = "auto",
          progress: Any = None) -> dict[str, Any]:
    """Plan ``model``, derive profiles, build every TensorRT segment (demoting what TensorRT
    refuses), and write the folder ``out_dir`` atomically. Returns the manifest. ``progress``
    receives a ``BuildEvent`` as each segment finishes."""
    from . import __version__
    from .builder import BuildOptions, build_target
    from .cache import EngineCache
    from .engines import build_with_fallback, plugin_rewrite
    from .flavor import load_flavor
    from .session import Session, SessionOptions

    opts = options if options is not None else SessionOptions()
    opts = _emulated(opts)
    bopts = build_options or BuildOptions()
    flv = load_flavor(flavor)
    _check_out_dir(out_dir)
    start = time.perf_counter()
    sess = Session(model, profiles, opts)
    memo: dict[int, dict[int, Any]] = {id(sess.plan): sess.segment_profiles}
    sessions = {id(sess.plan): sess}

    def profiles_of(plan: Plan) -> dict[int, Any]:
        if id(plan) not in memo:
            again = Session(plan, profiles, opts)
            memo[id(plan)], sessions[id(plan)] = again.segment_profiles, again
        return memo[id(plan)]

    cache = EngineCache(cache_dir) if cache_dir else None
    result = build_with_fallback(sess.plan, profiles_of, bopts, cache, flavor=flv,
                                 min_segment_size=opts.min_segment_size, rewrite=plugin_rewrite(sess.plan, flv),
                                 progress=progress)
    final = sessions.get(id(result.plan)) or Session(result.plan, profiles, opts)
    seconds = {r.segment: r.seconds for r in result.report.segments} if result.report.segments else {}
    files: dict[str, bytes] = {MODEL_FILE: final.model.proto.SerializeToString()}
    segments = []
    for seg in final.plan.segments:
        model_file = f"segment_{seg.id}.onnx"
        files[model_file] = final.plan.extract(seg.id).SerializeToString()
        entry: dict[str, Any] = {"id": seg.id, "backend": seg.backend, "model": model_file,
                                 "model_sha256": _sha256(files[model_file]), "engine": None, "engine_sha256": None,
                                 "engine_bytes": None, "build_seconds": None}
        if seg.backend == "tensorrt":
            engine = result.engines[seg.id]
            name = f"segment_{seg.id}.engine"
            files[name] = engine
            entry.update(engine=name, engine_sha256=_sha256(engine), engine_bytes=len(engine),
                         build_seconds=round(float(seconds.get(seg.id, 0.0)), 4))
        segments.append(entry)
    manifest = {
        "format": FORMAT, "trt_backend": __version__, "model": final.model.source,
        "model_file": MODEL_FILE, "model_sha256": _sha256(files[MODEL_FILE]),
        "tensorrt": flv.target, "gpu_target": build_target(flv, bopts),
        "versions": _versions(flv), "build_options": bopts.key_fields(),
        "plan": final.plan.to_dict(), "segments": segments,
        "demoted": [d.__dict__ for d in result.report.demoted] if result.report.demoted else [],
        "build_seconds": round(time.perf_counter() - start, 4),
    }
    _write_folder(out_dir, files, manifest)
    return manifest


def _emulated(opts: Any) -> Any:
    """Building needs no GPU: profiles come from calibration through ONNX Runtime."""
    import dataclasses

    return dataclasses.replace(opts, emulate=True)


def _versions(flv: Any) -> dict[str, str]:
    import onnxruntime

    return {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__, flv.name: flv.version}


def _check_out_dir(out_dir: str) -> None:
    if os.path.exists(out_dir):
        if not os.path.isdir(out_dir):
            raise ArtifactError(f"{out_dir}: exists and is not a folder")
        if os.listdir(out_dir) and not os.path.exists(os.path.join(out_dir, MANIFEST)):
            raise ArtifactError(f"{out_dir}: folder is not empty and holds no {MANIFEST}; refusing to replace it")
    parent = os.path.dirname(os.path.abspath(out_dir))
    if not os.path.isdir(parent):
        raise ArtifactError(f"{out_dir}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ArtifactError(f"{out_dir}: folder {parent} is not writable")


def _write_folder(out_dir: str, files: Mapping[str, bytes], manifest: Mapping[str, Any]) -> None:
    """Everything into a temp folder beside ``out_dir``, then swapped in: never half a build."""
    parent = os.path.dirname(os.path.abspath(out_dir))
    tmp = tempfile.mkdtemp(prefix=".build-", dir=parent)
    try:
        for name, data in files.items():
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(data)
        write_atomic(os.path.join(tmp, MANIFEST), json.dumps(manifest, indent=1) + "\n")
        old = None
        if os.path.exists(out_dir):
            old = tempfile.mkdtemp(prefix=".old-", dir=parent)
            os.rmdir(old)
            os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        if old:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ArtifactError(f"cannot write {out_dir}: {e.strerror or e}") from None


def read_manifest(folder: str) -> dict[str, Any]:
    """The manifest of ``folder``, every file checked against its SHA-256."""
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
        if _sha256(data) != digest:
            raise ArtifactError(f"{folder}: {name} does not match its SHA-256 in {MANIFEST} (edited or corrupt); "
                                "rebuild with trt-backend build")
    return manifest


def load(folder: str, options: Any = None, *, rebuild: bool = False) -> Any:
    """A Session from a build folder, using its engines and saved profiles: no planning, no
    calibration, no build. On another TensorRT version or GPU: ArtifactError, or with
    ``rebuild`` a session that builds fresh engines."""
    from .runners import tensorrt_status
    from .session import Session, SessionOptions

    manifest = read_manifest(folder)
    opts = options if options is not None else SessionOptions()
    engines: dict[int, bytes] | None = {}
    executes = opts.emulate is not True and tensorrt_status()[0]
    if executes or opts.emulate is False:
        problem = _runtime_mismatch(manifest)
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
    model = load_model(os.path.join(folder, manifest["model_file"]))
    plan = Plan.from_dict(manifest["plan"])
    plan.model = model
    return Session(plan, None, opts, plan=manifest["plan"], engines=engines)


def _runtime_mismatch(manifest: Mapping[str, Any]) -> str | None:
    from .builder import BuildOptions, build_target
    from .flavor import TensorRTUnavailableError, load_flavor

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

"""The write side of build folders: ``trt-backend build`` plans, derives profiles, builds every
TensorRT segment and writes the folder atomically; :func:`load` turns one into a Session."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import onnx

from partitioner import Model, Plan
from partitioner.model import ModelSource, serialize, structure_copy
from partitioner.weights import (
    INLINE_MAX_BYTES,
    data_files,
    file_sha256,
    is_external,
    place_data_files,
)
from trt_backend._files import missing_parent, swap_in_folder, write_atomic
from trt_backend._version import __version__
from trt_backend.engines.builder import BuildOptions, build_target
from trt_backend.engines.cache import EngineCache
from trt_backend.engines.fallback import PlanMemo, build_with_fallback, plugin_rewrite
from trt_backend.engines.report import ProgressCallback
from trt_backend.errors import ArtifactError
from trt_backend.gpu.device import check_device, use_device
from trt_backend.profiles import Profile
from trt_backend.runners.base import EMULATED, ONNXRUNTIME, SegmentRunner
from trt_backend.session.artifacts import (
    FORMAT,
    MANIFEST,
    MODEL_FILE,
    sha256_bytes,
)
from trt_backend.session.options import SessionOptions
from trt_backend.session.seal import seal
from trt_backend.session.seal import sign_key as read_sign_key
from trt_backend.session.session import Session
from trt_backend.tensorrt.flavor import Flavor, load_flavor

log = logging.getLogger(__name__)


def build(model: ModelSource | Model, out_dir: str, profiles: Sequence[Mapping[str, Any]] | None = None,
          options: SessionOptions | None = None, build_options: BuildOptions | None = None,
          cache_dir: str | None = None, *, flavor: str = "auto",
          progress: ProgressCallback | None = None, sign_key: str | bytes | None = None) -> dict[str, Any]:
    """Plan ``model``, derive profiles, build every TensorRT segment (demoting what TensorRT
    refuses), and write the folder ``out_dir`` atomically. Returns the manifest, sealed with its
    digest and, with ``sign_key`` (the key, ``@FILE``, or else ``TRT_BACKEND_SIGN_KEY``), signed.
    ``progress`` receives a ``BuildEvent`` as each segment finishes."""
    key = read_sign_key(sign_key)
    opts = options if options is not None else SessionOptions()
    if opts.device_id is not None:  # full TensorRT builds for the current GPU (and keys its cache by its SM)
        use_device(check_device(opts.device_id))
    opts = _emulated(opts)
    bopts = build_options or BuildOptions()
    flv = load_flavor(flavor)
    _check_out_dir(out_dir)
    start = time.perf_counter()
    sess = _PlannedSession(model, profiles, opts)
    session_of = PlanMemo(lambda plan: _PlannedSession(plan, profiles, opts), (sess.plan, sess))
    cache = EngineCache(cache_dir) if cache_dir else None
    result = build_with_fallback(sess.plan, lambda plan: session_of(plan).segment_profiles, bopts, cache, flavor=flv,
                                 min_segment_size=opts.partition.min_segment_size,
                                 boundary_cost=opts.partition.boundary_cost,
                                 rewrite=plugin_rewrite(sess.plan, flv), progress=progress,
                                 quantizer=sess.quantizer(bopts) if bopts.precision == "int8" else None)
    final = session_of(result.plan)
    seconds = {r.segment: r.seconds for r in result.report.segments} if result.report.segments else {}
    precisions = {r.segment: r.precision for r in result.report.segments}
    originals = data_file_entries(final.model)
    weights = _externalize(final.model, [d["file"] for d in originals])
    refer = weights.refs.get if weights is not None else (lambda name: None)
    files: dict[str, bytes] = {MODEL_FILE: serialize(structure_copy(final.model.proto, lambda t: refer(t.name)),
                                                     MODEL_FILE)}
    segments = []
    for seg in final.plan.segments:
        model_file = f"segment_{seg.id}.onnx"
        files[model_file] = serialize(final.plan.extract(seg.id, lambda t: refer(t.name)), model_file)
        entry: dict[str, Any] = {"id": seg.id, "backend": seg.backend, "model": model_file,
                                 "model_sha256": sha256_bytes(files[model_file]), "engine": None, "engine_sha256": None,
                                 "engine_bytes": None, "build_seconds": None}
        if seg.backend == "tensorrt":
            engine = result.engines[seg.id]
            name = f"segment_{seg.id}.engine"
            files[name] = engine
            entry.update(engine=name, engine_sha256=sha256_bytes(engine), engine_bytes=len(engine),
                         build_seconds=round(float(seconds.get(seg.id, 0.0)), 4),
                         precision=precisions.get(seg.id) or bopts.precision)
        segments.append(entry)
    manifest = {
        "format": FORMAT, "trt_backend": __version__, "model": final.model.source,
        "model_file": MODEL_FILE, "model_sha256": sha256_bytes(files[MODEL_FILE]),
        "tensorrt": flv.target, "gpu_target": build_target(flv, bopts),
        "versions": _versions(flv), "build_options": bopts.key_fields(),
        "plan": final.plan.to_dict(), "segments": segments,
        "demoted": [d.__dict__ for d in result.report.demoted] if result.report.demoted else [],
        "precision_plan": bopts.precision_plan.to_dict() if bopts.precision_plan is not None else None,
        "build_seconds": round(time.perf_counter() - start, 4),
    }
    if originals or weights is not None:  # (absent for models without large weights: manifests unchanged)
        manifest["data_files"] = originals + ([weights.entry()] if weights is not None else [])
    seal(manifest, key)
    _write_folder(out_dir, files, manifest, final.model.base_dir if originals else None,
                  [d["file"] for d in originals], weights)
    return manifest


WEIGHTS_FILE = "weights.data"
_ALIGN = 4096  # tensors start on page boundaries: ONNX Runtime can map them instead of copying


@dataclasses.dataclass
class _Weights:
    """A model's inline weights, to be written once into the folder's own data file that its
    model and segment files all reference (instead of each carrying a copy)."""

    location: str
    blobs: list[tuple[int, bytes]]  # (offset, bytes)
    refs: dict[str, onnx.TensorProto]  # initializer name -> its external reference

    def entry(self) -> dict[str, Any]:
        """The data file's manifest entry (size and SHA-256), before it is written."""
        h = hashlib.sha256()
        size = 0
        for chunk in _padded(self):
            h.update(chunk)
            size += len(chunk)
        return {"file": self.location, "bytes": size, "sha256": h.hexdigest()}


def _externalize(model: Model, taken: Sequence[str]) -> _Weights | None:
    big = [t for t in model.proto.graph.initializer if not is_external(t) and len(t.raw_data) > INLINE_MAX_BYTES]
    if not big:
        return None
    location = WEIGHTS_FILE
    while location in taken:
        location = "_" + location
    weights = _Weights(location, [], {})
    offset = 0
    for t in big:
        raw = t.raw_data
        ref = onnx.TensorProto()
        ref.name, ref.data_type = t.name, t.data_type
        ref.dims.extend(t.dims)
        ref.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", location), ("offset", str(offset)), ("length", str(len(raw)))):
            entry = ref.external_data.add()
            entry.key, entry.value = key, value
        weights.refs[t.name] = ref
        weights.blobs.append((offset, raw))
        offset = -(-(offset + len(raw)) // _ALIGN) * _ALIGN
    return weights


def _padded(weights: _Weights) -> Iterator[bytes]:
    at = 0
    for offset, raw in weights.blobs:
        if offset > at:
            yield b"\0" * (offset - at)
        yield raw
        at = offset + len(raw)


def _write_weights(folder: str, weights: _Weights) -> None:
    with open(os.path.join(folder, weights.location), "wb") as f:
        for chunk in _padded(weights):
            f.write(chunk)


def data_file_entries(model: Model) -> list[dict[str, Any]]:
    """The external data files the model's weights live in, with size and SHA-256: the build
    folder gets one copy of them, shared by every segment model."""
    if model.base_dir is None:
        return []
    out = []
    for location in data_files(model.proto):
        path = os.path.join(model.base_dir, location)
        out.append({"file": location, "bytes": os.path.getsize(path), "sha256": file_sha256(path)})
    return out


@dataclasses.dataclass(frozen=True)
class _NoRunner:
    """Where a planned session's runner would be: its executor only (nothing loaded)."""

    executor: str

    def close(self) -> None:
        pass


class _PlannedSession(Session):
    """A Session that plans and derives profiles but loads nothing to run: a build needs the
    plan and the profiles, not an ONNX Runtime session per segment holding the weights again."""

    def _make_runners(self, plan: Plan, emulate: bool, derived: dict[int, list[Profile]],
                      shape_tensors: dict[int, frozenset[str]], engines: dict[int, bytes]) -> list[SegmentRunner]:
        return [cast(SegmentRunner, _NoRunner(EMULATED if s.backend == "tensorrt" else ONNXRUNTIME))
                for s in plan.segments]


def _emulated(opts: SessionOptions) -> SessionOptions:
    """Building needs no GPU: profiles come from calibration through ONNX Runtime."""
    return dataclasses.replace(opts, emulate=True)


def _versions(flv: Flavor) -> dict[str, str]:
    import onnxruntime

    return {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__, flv.name: flv.version}


def _check_out_dir(out_dir: str) -> None:
    if os.path.exists(out_dir):
        if not os.path.isdir(out_dir):
            raise ArtifactError(f"{out_dir}: exists and is not a folder")
        if os.listdir(out_dir) and not os.path.exists(os.path.join(out_dir, MANIFEST)):
            raise ArtifactError(f"{out_dir}: folder is not empty and holds no {MANIFEST}; refusing to replace it")
    problem = missing_parent(out_dir)
    if problem:
        raise ArtifactError(f"{out_dir}: {problem}")
    parent = os.path.dirname(os.path.abspath(out_dir))
    try:  # (os.access says yes to root, also on read-only file systems: try it, before building)
        os.rmdir(tempfile.mkdtemp(prefix=".build-probe-", dir=parent))
    except OSError as e:
        raise ArtifactError(f"{out_dir}: cannot write in folder {parent} ({e.strerror or e})") from None


def _write_folder(out_dir: str, files: Mapping[str, bytes], manifest: Mapping[str, Any],
                  weights_dir: str | None = None, data_locations: Sequence[str] = (),
                  weights: _Weights | None = None) -> None:
    """Everything into a temp folder beside ``out_dir``, then swapped in: never half a build.
    Data files are copied from ``weights_dir`` (see :func:`partitioner.weights.place_data_files`);
    ``weights`` (inline ones) are written once into the folder's own data file."""
    parent = os.path.dirname(os.path.abspath(out_dir))
    try:
        tmp = tempfile.mkdtemp(prefix=".build-", dir=parent)
    except OSError as e:
        raise ArtifactError(f"cannot write {out_dir}: {e.strerror or e}") from None
    try:
        for name, data in files.items():
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(data)
        if weights_dir is not None:
            place_data_files(data_locations, weights_dir, tmp)
        if weights is not None:
            _write_weights(tmp, weights)
        write_atomic(os.path.join(tmp, MANIFEST), json.dumps(manifest, indent=1) + "\n")
        swap_in_folder(tmp, out_dir)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ArtifactError(f"cannot write {out_dir}: {e.strerror or e}") from None


def load(folder: str | os.PathLike[str], options: SessionOptions | None = None, *, rebuild: bool = False,
         sign_key: str | bytes | None = None) -> Session:
    """A Session from a build folder (see :meth:`Session.load`)."""
    return Session.load(folder, options, rebuild=rebuild, sign_key=sign_key)

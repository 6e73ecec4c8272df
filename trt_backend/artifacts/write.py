"""The write side of build folders: :func:`build` compiles a model (:func:`trt_backend.compiler.compile`)
and writes what was built into a folder, atomically: the normalized model, per segment the model
its engine was built from and the engine, and the manifest that records it all (read back by
:mod:`trt_backend.artifacts.read`)."""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

import onnx

from partitioner import Model, Plan, Segment
from partitioner.errors import OptionsError
from partitioner.model import ModelSource, describe_outputs, serialize, structure_copy
from partitioner.weights import (
    INLINE_MAX_BYTES,
    data_files,
    external_reference,
    file_sha256,
    is_external,
    place_data_files,
    raw_nbytes,
)
from trt_backend._files import (
    new_folder,
    output_lock,
    path_text,
    sha256_bytes,
    swap_in_folder,
    write_atomic,
)
from trt_backend._version import __version__
from trt_backend.artifacts.build_cache import BuildCache, check_build_folder, feeds_sha256, jsonable
from trt_backend.artifacts.read import FORMAT, MANIFEST, MODEL_FILE, REFERENCE_FILE, REFERENCE_KEY
from trt_backend.artifacts.references import KEY as REFERENCES_KEY
from trt_backend.artifacts.references import refer as refer_to_weights
from trt_backend.artifacts.references import referable_path
from trt_backend.artifacts.saved import SessionPlan, model_fingerprint
from trt_backend.artifacts.seal import manifest_text, seal
from trt_backend.artifacts.seal import sign_key as read_sign_key
from trt_backend.compiler import Compiled, check_feeds, compile, plan_entry_for
from trt_backend.engines import head_start
from trt_backend.engines.builder import BuildOptions
from trt_backend.engines.config import check_build_options
from trt_backend.engines.memory import EngineFile
from trt_backend.engines.precision import fp32_subgraphs, stored_reduced, unreduced
from trt_backend.engines.quantize import QDQ_OPS, qdq_types
from trt_backend.engines.report import BuildProgress, BuildReport
from trt_backend.engines.targets import build_target, current_sm
from trt_backend.errors import ArtifactError
from trt_backend.gpu.device import check_device, use_device
from trt_backend.ort.sessions import installed_version
from trt_backend.planning import as_written
from trt_backend.planning import load_normalized as load_for_planning
from trt_backend.planning import with_shipped_plugins
from trt_backend.profiles.given import profile_shapes
from trt_backend.runners.base import EMULATED, ONNXRUNTIME
from trt_backend.session.options import SessionOptions
from trt_backend.tensorrt.flavor import Flavor, load_flavor

log = logging.getLogger(__name__)


def build(model: ModelSource | Model, out_dir: str | os.PathLike[str],
          profiles: Sequence[Mapping[str, Any]] | None = None,
          options: SessionOptions | None = None, *, progress: BuildProgress | None = None,
          calibration_feeds: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """Compile ``model`` (:func:`trt_backend.compiler.compile`: plan, derive profiles, apply the
    precision, build every TensorRT segment, demoting what TensorRT refuses) and write the folder
    ``out_dir`` atomically. Everything comes from ``options``: precision and calibration
    (``options.build``), the partition, the TensorRT flavor, ``cache_dir`` (engines by segment, and
    whole folders by model file and options, :mod:`trt_backend.artifacts.build_cache`: building the
    same file the same way again copies that folder, manifest ``build_cache.hit``),
    ``weights_by_reference`` (the folder refers to the model file's weights where they are
    instead of holding a copy: :mod:`trt_backend.artifacts.references`; ``model`` must then be a
    path) and ``sign_key`` (the key, ``@FILE``, or else ``TRT_BACKEND_SIGN_KEY``). Returns the manifest,
    sealed with its digest (and signed with the key). ``progress`` receives a ``BuildEvent`` as
    each segment finishes. ``calibration_feeds``: real inputs (input name -> array, one mapping a
    sample) that profiles are derived from where random inputs would not do, as :class:`Session`
    and ``compare`` take them (a graph network's index inputs: random indices fall outside its
    nodes); they are part of the build cache's key."""
    opts = options if options is not None else SessionOptions()
    if not isinstance(opts, SessionOptions):
        raise OptionsError(f"options must be a SessionOptions, got {type(opts).__name__}")
    check_feeds(calibration_feeds)
    out_dir = path_text(out_dir, "out_dir")
    reference = referable_path(model) if opts.weights_by_reference else None
    key = read_sign_key(opts.sign_key)
    if opts.device_id is not None:  # full TensorRT builds for the current GPU (and keys its cache by its SM)
        use_device(check_device(opts.device_id))
    opts = dataclasses.replace(opts, emulate=True)  # Building needs no GPU: profiles come from ONNX Runtime.
    if opts.flavor == "none":
        raise OptionsError("a build needs TensorRT: flavor 'none' plans everything on ONNX Runtime")
    if isinstance(model, (str, os.PathLike)):  # (its head start's TensorRT, where it runs in a child)
        head_start.adopt_flavor(os.fspath(model), opts.flavor)
    flv = load_flavor(opts.flavor)
    check_build_options(opts.build, flv)  # Before planning: a setting this TensorRT refuses is said at once.
    check_build_folder(out_dir)
    if isinstance(model, (str, os.PathLike)) and opts.oracle is None and opts.partition == with_shipped_plugins() \
            and not head_start.pending_for(os.fspath(model)):  # (other partition options seldom plan it whole)
        head_start.launch(os.fspath(model), out_dir, opts.flavor, profiles or [], opts.build)
    # The build's time counts from its head start where one began (its engine's time is in it).
    began = head_start.started_for(os.fspath(model)) if isinstance(model, (str, os.PathLike)) else None
    try:
        with output_lock(out_dir):  # A second build into the same folder is refused, not lost.
            return _build_locked(model, out_dir, profiles, opts, flv, key, progress, reference, began,
                                 calibration_feeds)
    finally:
        head_start.discard()  # One the build did not take (see trt_backend.engines.head_start).


def _build_locked(model: ModelSource | Model, out_dir: str, profiles: Sequence[Mapping[str, Any]] | None,
                  opts: SessionOptions, flv: Flavor, key: bytes | None, progress: BuildProgress | None,
                  reference: str | None, began: float | None = None,
                  calibration_feeds: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    start = min(time.perf_counter(), began) if began is not None else time.perf_counter()
    builds, build_key = _build_cache(model, profiles, opts, flv, calibration_feeds)
    if builds is not None and build_key is not None:
        path = os.fspath(cast("str | os.PathLike[str]", model))
        given = str(opts.build.calibration_data) if opts.build.calibration_data else None
        hit = builds.restore(build_key, out_dir, {"model": path, "build_seconds": round(time.perf_counter() - start, 4),
                                                  "build_cache": {"key": build_key, "hit": True}}, key, given)
        if hit is not None:
            return hit
    entry = plan_entry_for(model, profiles, opts)  # (a plan kept in the plan cache: the model loaded, not probed)
    kept = entry.load() if entry is not None else None
    loaded = kept.model if kept is not None and kept.model is not None else \
        load_for_planning(model, profile_shapes(profiles), opts.partition.qdq_rewrite)
    stage = _Stage(out_dir, loaded, reference)  # the weights go into the folder while the engines build
    try:
        # (the folder's model files are made while the engines build: see _Stage.prepare)
        as_planned = opts.build.precision in ("fp32", "tf32")
        compiled = compile(kept if kept is not None else loaded, profiles, opts, build=True, progress=progress,
                           engine_dir=stage.engine_dir(), plan_entry=entry, calibration_feeds=calibration_feeds,
                           before_build=lambda plan: stage.prepare(plan, as_planned))
        if not as_planned and not compiled.plan.tensorrt_segments():
            log.warning("--precision %s applies to TensorRT segments, and the plan has none: ONNX Runtime runs the "
                        "whole model in the precision it has", opts.build.precision)
        exact = as_written(model, compiled.model, compiled.options.partition.qdq_rewrite, profile_shapes(profiles))
        manifest = _write_into(stage, compiled, flv, start, exact)
        if build_key is not None:
            manifest["build_cache"] = {"key": build_key, "hit": False}
        seal(manifest, key)
        stage.finish(manifest)
    finally:
        stage.close()
    if builds is not None and build_key is not None:
        builds.store(build_key, out_dir, manifest)
    return manifest


def _build_cache(model: ModelSource | Model, profiles: Sequence[Mapping[str, Any]] | None, opts: SessionOptions,
                 flv: Flavor, calibration_feeds: Sequence[Mapping[str, Any]] = ()
                 ) -> tuple[BuildCache | None, str | None]:
    """The build cache under ``opts.cache_dir`` and this build's key there: for a model given by
    the path of a file and no oracle of the caller's (one the key cannot describe); else (None, None).
    Real inputs profiles are derived from are in the key by their values."""
    if not opts.cache_dir or not isinstance(model, (str, os.PathLike)) or opts.oracle is not None:
        return None, None
    if not os.path.isfile(model):
        return None, None  # Loading it names the problem.
    options = {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)
               if f.name not in ("sign_key", "cache_dir", "build", "given")}  # ``build``: its key fields below decide.
    # (the memory budget given cuts the model, and so the folder, though not a given segment's engine)
    inputs = {"profiles": profiles, "options": options, "build_options": opts.build.key_fields(),
              "max_build_memory": opts.build.max_build_memory,
              "flavor": opts.flavor, "tensorrt": [flv.name, flv.version, flv.parser_version],
              "gpu_target": build_target(flv, opts.build)}
    if calibration_feeds:
        inputs["calibration_feeds"] = feeds_sha256(calibration_feeds)
    try:
        builds = BuildCache(opts.cache_dir)
        return builds, builds.key(os.fspath(model), inputs, by_reference=opts.weights_by_reference)
    except OSError as e:  # An unreadable model or data file: loading it names the problem.
        log.debug("no build cache key for %s: %s", model, e)
        return None, None


def _write_into(stage: _Stage, compiled: Compiled, flv: Flavor, start: float,
                exact: Model | None = None) -> dict[str, Any]:
    """Put the model, segment and engine files of ``compiled`` in ``stage``; the manifest. Each
    TensorRT segment's model file is the model its engine was built from. ``exact``: the model
    before an int8 re-quantization of its Q/DQ (:func:`~trt_backend.planning.as_written`), kept as the
    reference."""
    plan, bopts = compiled.plan, compiled.options.build
    report = compiled.report if compiled.report is not None else BuildReport(flv.target)  # No TensorRT segment.
    seconds = {r.segment: r.seconds for r in report.segments}
    from_cache = {r.segment for r in report.segments if r.cached}
    placed = stage.data(compiled.model)
    originals, weights, weights_entry = placed.originals, placed.weights, placed.entry
    refer = weights.refs.get if weights is not None else (lambda name: None)
    model_bytes, model_sha256 = stage.model_file(compiled.model)
    files: dict[str, bytes] = {MODEL_FILE: model_bytes}
    if exact is not None:
        files[REFERENCE_FILE] = serialize(structure_copy(exact.proto, _shared_weights(compiled.model, refer)),
                                          REFERENCE_FILE)
    session_plan = SessionPlan.of(plan, executors=[EMULATED if s.backend == "tensorrt" else ONNXRUNTIME
                                                   for s in plan.segments],
                                  input_profiles=compiled.input_profiles, segment_profiles=compiled.segment_profiles)
    session_plan.fingerprint = stage.fingerprint(compiled.model)
    segments = []
    for seg in plan.segments:
        model_file = f"segment_{seg.id}.onnx"
        built = compiled.segments.get(seg.id)
        if built is None or built.precision in ("fp32", "tf32"):  # The segment as planned: weights shared.
            form, files[model_file], digest = stage.segment_file(plan, seg)
        else:  # Its own weights: cast to 16 bits, or beside their Q/DQ.
            form = built.model
            files[model_file] = serialize(form, model_file)
            digest = sha256_bytes(files[model_file])
        entry: dict[str, Any] = {"id": seg.id, "backend": seg.backend, "model": model_file,
                                 "model_sha256": digest, "engine": None, "engine_sha256": None,
                                 "engine_bytes": None, "build_seconds": None}
        if built is not None:
            engine = built.engine
            if engine is None:
                raise ArtifactError(f"segment {seg.id} has no engine after the build")
            name = f"segment_{seg.id}.engine"
            if isinstance(engine, EngineFile):  # Streamed into the folder as it was built.
                stage.take(engine.path, name)
                digest = engine.sha256
            else:
                files[name] = engine
                digest = sha256_bytes(engine)
            entry.update(engine=name, engine_sha256=digest, engine_bytes=len(engine),
                         build_seconds=round(float(seconds.get(seg.id, 0.0)), 4), precision=built.precision,
                         pinned=list(built.pinned))
            if seg.id in from_cache:  # (build_seconds: its load from the engine cache, not a build)
                entry["engine_cache_hit"] = True
            # Q/DQ in the built form: TensorRT computes int8 there whatever the precision (the
            # model's own, or an int8 build's)
            qdq = sum(n.op_type in QDQ_OPS for n in form.graph.node)
            if qdq:
                entry["qdq_nodes"], entry["qdq_types"] = qdq, qdq_types(form)
            stored = stored_reduced(form) if built.precision in ("fp32", "tf32") else {}
            if stored:  # a model stored in fp16: TensorRT computes its types, whatever the build asked
                entry["stored_types"] = stored
            lowered_none = unreduced(bopts.precision, built.precision, form)  # (the precision asked: built as it is)
            if lowered_none:
                entry["unreduced"] = bopts.precision
            kept = fp32_subgraphs(form) if built.precision not in ("fp32", "tf32") or lowered_none else {}
            if kept:  # If/Loop/Scan bodies: float32 whatever the segment's precision
                entry["fp32_subgraphs"] = kept
            if bopts.precision == "int8" and built.precision != "int8":
                entry["int8_none"] = True  # (no Q/DQ came of it: nothing the quantizer takes was quantized)
        segments.append(entry)
    stage.write(files)
    searched = bopts.precision_plan.after_build([d.name for d in report.demoted]) \
        if bopts.precision_plan is not None else None
    manifest = {
        "format": FORMAT, "trt_backend": __version__, "model": compiled.model.source,
        "model_file": MODEL_FILE, "model_sha256": model_sha256,
        "tensorrt": flv.target, "gpu_target": build_target(flv, bopts), "built_on_sm": current_sm(),
        "versions": _versions(flv), "build_options": bopts.key_fields(),
        "build": {"precision": bopts.precision, "keep_fp32_ops": list(bopts.keep_fp32_ops),
                  "precision_plan": searched.to_dict() if searched is not None else None,
                  "calibration": compiled.calibration or _asked_calibration(bopts),
                  "summary": compiled.precision_summary(),
                  "partition": jsonable(compiled.options.partition),
                  "max_build_memory": bopts.max_build_memory,
                  "max_segment_weights": report.max_segment_weights},
        "plan": session_plan.to_dict(), "segments": segments,
        "demoted": [d.__dict__ for d in report.demoted] if report.demoted else [],
        "precision_plan": searched.to_dict() if searched is not None else None,
        "build_seconds": round(time.perf_counter() - start, 4),
    }
    if exact is not None:  # Absent unless Q/DQ were re-quantized to int8: manifests unchanged.
        manifest[REFERENCE_KEY] = {"file": REFERENCE_FILE, "sha256": sha256_bytes(files[REFERENCE_FILE])}
    if originals or weights_entry is not None:  # Absent for models without large weights: manifests unchanged.
        manifest["data_files"] = originals + ([weights_entry] if weights_entry is not None else [])
    if placed.references is not None:  # Absent for folders that hold their weights: manifests unchanged.
        manifest[REFERENCES_KEY] = placed.references
    return manifest


def _shared_weights(model: Model, refer: Any) -> Any:
    """For :func:`structure_copy` of another form of ``model``: its initializer ``t`` as the
    reference into the folder's data file that ``model``'s initializer of that name has, where the
    two hold the same values (None: ``t`` is copied whole)."""
    mine = {t.name: t for t in model.proto.graph.initializer}

    def shared(t: onnx.TensorProto) -> onnx.TensorProto | None:
        ref, same = refer(t.name), mine.get(t.name)
        if ref is None or same is None or same.data_type != t.data_type or list(same.dims) != list(t.dims):
            return None
        return ref if same.raw_data == t.raw_data else None

    return shared


WEIGHTS_FILE = "weights.data"
_ENGINES = ".engines"  # where engines are streamed while they build
_ALIGN = 4096  # tensors start on page boundaries: ONNX Runtime can map them instead of copying


@dataclasses.dataclass
class _Weights:
    """A model's inline weights, to be written once into the folder's own data file that its
    model and segment files all reference (instead of each carrying a copy)."""

    location: str
    blobs: list[tuple[int, bytes]]  # Offset, bytes.
    refs: dict[str, onnx.TensorProto]  # initializer name -> its external reference


def _externalize(model: Model, taken: Sequence[str]) -> _Weights | None:
    big = [t for t in model.proto.graph.initializer if not is_external(t) and raw_nbytes(t) > INLINE_MAX_BYTES]
    if not big:
        return None
    location = WEIGHTS_FILE
    while location in taken:
        location = "_" + location
    weights = _Weights(location, [], {})
    offset = 0
    for t in big:
        raw = t.raw_data
        weights.refs[t.name] = external_reference(t, location, offset, len(raw))
        weights.blobs.append((offset, raw))
        offset = -(-(offset + len(raw)) // _ALIGN) * _ALIGN
    return weights


def _write_weights(folder: str, weights: _Weights) -> dict[str, Any]:
    """Write the data file (each tensor at its page-aligned offset) and return its manifest
    entry: size and SHA-256, taken as it is written."""
    h = hashlib.sha256()
    at = 0
    with open(os.path.join(folder, weights.location), "wb") as f:
        for offset, raw in weights.blobs:
            for chunk in ((b"\0" * (offset - at)) if offset > at else b"", raw):
                h.update(chunk)
                f.write(chunk)
            at = offset + len(raw)
    return {"file": weights.location, "bytes": at, "sha256": h.hexdigest()}


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


def _asked_calibration(bopts: BuildOptions) -> dict[str, Any] | None:
    """The calibration data the build was given where no segment used it (every int8 segment went
    to ONNX Runtime): recorded all the same, since the folder's options name int8 and int8 options
    without calibration data are refused when the folder is read."""
    if not bopts.calibration_data:
        return None
    return {"source": str(bopts.calibration_data), "method": bopts.calibration_method}


def _versions(flv: Flavor) -> dict[str, str]:
    return {"onnx": onnx.__version__, "onnxruntime": installed_version() or "none", flv.name: flv.version}




@dataclasses.dataclass
class _Placed:
    """The model's weights as the folder has them: ``originals``, the entries of the external data
    files copied in; ``weights``, the references its models get (to its own data file, or with
    ``weights_by_reference`` into the model file); ``entry``, its own data file's entry;
    ``references``, with ``weights_by_reference``, the manifest's record of the files referred to."""

    originals: list[dict[str, Any]]
    weights: _Weights | None
    entry: dict[str, Any] | None
    references: dict[str, Any] | None = None


class _Stage:
    """The folder being written: a temp folder beside ``out_dir``, swapped in by :meth:`finish`
    (never half a build), removed by :meth:`close` otherwise. The model's weights go in from a
    thread started at once (its external data files copied, see
    :func:`partitioner.weights.place_data_files`; inline weights written once into the folder's own
    data file), so writing and hashing them overlaps the engine builds. With ``reference`` (the
    model file's absolute path) nothing is copied: the thread finds where the weights are
    (:func:`trt_backend.artifacts.references.refer`)."""

    def __init__(self, out_dir: str, model: Model, reference: str | None = None) -> None:
        self.out_dir = out_dir
        self.tmp: str | None = None
        self.model = model
        self.reference = reference
        self._taken: dict[str, str] = {}
        self._data: _Placed | None = None
        # made by prepare, model_file and segment_file: (model proto id, segment or None for the
        # model's own file) -> (that proto, kept so the id stays its own; the file's model; its
        # bytes; their SHA-256); by fingerprint: model proto id -> (that proto, its fingerprint)
        self._files: dict[tuple[int, Segment | None], tuple[Any, Any, bytes, str]] = {}
        self._fingerprints: dict[int, tuple[Any, str]] = {}
        # the files written into the folder so far (None: begun, not known to be whole)
        self._written: dict[str, bytes | None] = {}
        self._preparing: threading.Thread | None = None  # making them while the engines build
        self._closing = threading.Event()  # (the build ended: the thread makes no more)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._place, name="build-folder-weights", daemon=True)
        # (a Ctrl-C or SIGTERM as the folder is made or the thread starts, which waits for it: the
        # folder goes with it)
        try:
            self.tmp = new_folder(os.path.dirname(os.path.abspath(out_dir)), ".build-")
            self._thread.start()
        except OSError as e:
            raise ArtifactError(f"cannot write {out_dir}: {e.strerror or e}") from None
        except BaseException:
            self.close()
            raise

    def _place(self) -> None:
        try:
            self._data = self._placed(self.model)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread by data()
            self._error = e

    def _placed(self, model: Model) -> _Placed:
        assert self.tmp is not None
        if self.reference is not None:
            referenced = refer_to_weights(model, self.reference)
            return _Placed([], _Weights("", [], referenced.refs), None, referenced.record)
        originals = data_file_entries(model)
        if originals:
            assert model.base_dir is not None
            place_data_files([d["file"] for d in originals], model.base_dir, self.tmp)
        weights = _externalize(model, [d["file"] for d in originals])
        entry = _write_weights(self.tmp, weights) if weights is not None else None
        if weights is not None:
            weights.blobs.clear()  # Written: their copies go before the engines are copied out.
        return _Placed(originals, weights, entry)

    def data(self, model: Model) -> _Placed:
        """The model's weights as placed in the folder (see :class:`_Placed`), once written;
        ``model`` is the final plan's (placed again if it is another)."""
        self._thread.join()
        self._prepared()
        try:
            if self._error is not None:
                raise self._error
            if model.proto is not self.model.proto:
                self._data, self.model = self._placed(model), model
        except OSError as e:
            raise ArtifactError(f"cannot write {self.out_dir}: {e.strerror or e}") from None
        assert self._data is not None
        return self._data

    def prepare(self, plan: Plan, as_planned: bool) -> None:
        """Make the folder's model file and the model files of ``plan``'s segments (the TensorRT
        ones too where ``as_planned``: built in fp32 or tf32, their files are the segments as
        planned) in a thread, while the engines build: :meth:`model_file` and :meth:`segment_file`
        then take them (what it could not make, they make). The files refer to the folder's
        weights, so the thread waits for them first. A head start's engine builds in another
        process meanwhile, and once it is built nothing but its entry is left to write."""
        assert self._preparing is None
        self._preparing = threading.Thread(target=self._prepare, args=(plan, as_planned), daemon=True,
                                           name="build-folder-files")
        try:
            self._preparing.start()
        except RuntimeError:  # (no thread to be had: the files are made after the build)
            self._preparing = None

    def _prepare(self, plan: Plan, as_planned: bool) -> None:
        model = plan.model
        assert model is not None
        try:
            for seg in [None, *(s for s in plan.segments if as_planned or s.backend != "tensorrt")]:
                if self._closing.is_set():
                    return
                if seg is None:
                    self.write({MODEL_FILE: self._model_file(model)[0]}, final=False)
                else:
                    self.write({f"segment_{seg.id}.onnx": self._segment_file(plan, seg)[1]}, final=False)
            self._fingerprint(model)
        except BaseException as e:  # noqa: BLE001 - the files are made after the build, which meets it
            log.debug("the folder's files were not made while the engines built: %s", e)

    def _prepared(self) -> None:
        """Wait for :meth:`prepare`'s thread (from another thread), where it started."""
        thread = self._preparing
        if thread is not None and thread.ident is not None and thread is not threading.current_thread():
            thread.join()

    def model_file(self, model: Model) -> tuple[bytes, str]:
        """The folder's model file for ``model`` (its weights where the folder has them, its
        outputs' types as the model described them, not ones a run learned at a profile's
        shapes) and its SHA-256; made once."""
        self._prepared()
        return self._model_file(model)

    def _model_file(self, model: Model) -> tuple[bytes, str]:
        key = (id(model.proto), None)
        if key not in self._files:
            refer = self._refer(model)
            own = describe_outputs(structure_copy(model.proto, lambda t: refer(t.name)), model)
            data = serialize(own, MODEL_FILE)
            self._files[key] = (model.proto, own, data, sha256_bytes(data))
        _, _, data, digest = self._files[key]
        return data, digest

    def segment_file(self, plan: Plan, seg: Segment) -> tuple[onnx.ModelProto, bytes, str]:
        """The model file of ``seg`` of ``plan`` as planned (its weights where the folder has
        them): the model, its bytes and their SHA-256; made once for a segment of the same model
        with the same nodes, inputs and outputs."""
        self._prepared()
        return self._segment_file(plan, seg)

    def _segment_file(self, plan: Plan, seg: Segment) -> tuple[onnx.ModelProto, bytes, str]:
        assert plan.model is not None
        key = (id(plan.model.proto), seg)
        if key not in self._files:
            refer = self._refer(plan.model)
            form = plan.extract(seg.id, lambda t: refer(t.name))
            data = serialize(form, f"segment_{seg.id}.onnx")
            self._files[key] = (plan.model.proto, form, data, sha256_bytes(data))
        _, form, data, digest = self._files[key]
        return form, data, digest

    def fingerprint(self, model: Model) -> str:
        """``model``'s fingerprint (:func:`~trt_backend.artifacts.saved.model_fingerprint`), made once."""
        self._prepared()
        return self._fingerprint(model)

    def _fingerprint(self, model: Model) -> str:
        if id(model.proto) not in self._fingerprints:
            self._fingerprints[id(model.proto)] = (model.proto, model_fingerprint(model.proto))
        return self._fingerprints[id(model.proto)][1]

    def _refer(self, model: Model) -> Any:
        weights = self.data(model).weights
        return weights.refs.get if weights is not None else (lambda name: None)

    def engine_dir(self) -> str:
        """A folder inside the stage that engines are streamed into as they are built (what is
        left there when the folder is finished, engines of demoted segments, is removed)."""
        assert self.tmp is not None
        path = os.path.join(self.tmp, _ENGINES)
        os.makedirs(path, exist_ok=True)
        return path

    def take(self, path: str, name: str) -> None:
        """Put the file at ``path`` (in the stage) in as ``name``: moved, or linked where an
        earlier name took it (two segments with the same engine)."""
        assert self.tmp is not None
        target = os.path.join(self.tmp, name)
        try:
            if path in self._taken:
                os.link(self._taken[path], target)
            else:
                os.replace(path, target)
                self._taken[path] = target
        except OSError as e:
            raise ArtifactError(f"cannot write {self.out_dir}: {e.strerror or e}") from None

    def write(self, files: Mapping[str, bytes], final: bool = True) -> None:
        """Write ``files`` (name -> bytes) into the folder, but those written already with these
        very bytes; ``final``: these are all of its model files, and any other written before (for
        a plan its build changed) is removed."""
        assert self.tmp is not None
        self._prepared()
        try:
            for name, data in files.items():
                if self._written.get(name) is not data:
                    self._written[name] = None  # (removed below where it is no file of the plan, whole or not)
                    with open(os.path.join(self.tmp, name), "wb") as f:
                        f.write(data)
                    self._written[name] = data
            for name in set(self._written) - set(files) if final else ():
                os.remove(os.path.join(self.tmp, name))
                del self._written[name]
        except OSError as e:
            raise ArtifactError(f"cannot write {self.out_dir}: {e.strerror or e}") from None

    def finish(self, manifest: Mapping[str, Any]) -> None:
        """The manifest last, then the folder in ``out_dir``'s place."""
        assert self.tmp is not None
        try:
            shutil.rmtree(os.path.join(self.tmp, _ENGINES), ignore_errors=True)
            write_atomic(os.path.join(self.tmp, MANIFEST), manifest_text(manifest))
            swap_in_folder(self.tmp, self.out_dir)
        except OSError as e:
            raise ArtifactError(f"cannot write {self.out_dir}: {e.strerror or e}") from None
        self.tmp = None

    def close(self) -> None:
        """Remove the temp folder unless :meth:`finish` swapped it in (after the threads are done,
        the files thread told to make no more)."""
        self._closing.set()
        try:
            if self._thread.ident is not None:  # (started)
                self._thread.join()
            self._prepared()
        finally:
            if self.tmp is not None:
                shutil.rmtree(self.tmp, ignore_errors=True)
                self.tmp = None


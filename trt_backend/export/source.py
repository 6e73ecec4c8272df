"""What an export starts from: one or more ``trt-backend build`` folders of the same model (one per
GPU target), or a model, built first into a temporary folder. Read once, checked, as an
:class:`ExportSource` that knows nothing of Triton."""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx
from google.protobuf.message import DecodeError
from onnx.external_data_helper import load_external_data_for_model

from partitioner import Plan
from trt_backend.artifacts.read import is_build_folder, open_folder
from trt_backend.artifacts.references import weights_dir
from trt_backend.artifacts.saved import saved_segment_profiles
from trt_backend.artifacts.seal import sign_key as read_sign_key
from trt_backend._files import path_text
from trt_backend.artifacts.write import build
from trt_backend.engines.memory import engine_bytes
from trt_backend.errors import ArtifactError, ExportError, OptionsError
from trt_backend.profiles import Profile, profiles_from_json
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

log = logging.getLogger(__name__)

DEFAULT_TARGET = ""  # engines that run on any GPU the build allows (no single SM)


@dataclass
class ExportSource:
    """A planned, built model: its plan (with the normalized model), the segment models, the
    derived profiles, and the engines of each TensorRT segment by GPU target (``"8.6"``, or
    :data:`DEFAULT_TARGET`; the first target is the default one). ``runtime`` is the TensorRT
    that built the engines (``"tensorrt 10.13.0"``, ``"tensorrt_rtx 1.7.1"``, or None)."""

    name: str
    plan: Plan
    segment_models: dict[int, onnx.ModelProto]
    segment_profiles: dict[int, list[Profile]]
    input_profiles: list[Profile]
    engines: dict[int, dict[str, bytes]] = field(default_factory=dict)
    runtime: str | None = None
    precision: str = "fp32"
    external_weights: bool = False
    # TensorRT segment id -> the precision its model (the built form) was built in
    segment_precisions: dict[int, str] = field(default_factory=dict)
    # TensorRT segment id -> its nodes kept fp32 in that precision (a precision plan's pins, refusals)
    segment_pinned: dict[int, tuple[str, ...]] = field(default_factory=dict)

    @property
    def is_rtx(self) -> bool:
        return bool(self.runtime) and str(self.runtime).startswith("tensorrt_rtx")

    def plugin_nodes(self, segment_id: int) -> list[tuple[str, str]]:
        """(node name, plugin) of the plugin nodes in a segment."""
        return [(n.name, n.verdict.split(":", 1)[1]) for n in self.plan.nodes
                if n.segment == segment_id and n.verdict.startswith("plugin:")]


def target_key(gpu_target: str | None) -> str:
    """A build folder's GPU target as Triton's ``cc_model_filenames`` key: ``"sm:86"`` -> ``"8.6"``,
    ``"sm:120"`` -> ``"12.0"``; anything else (RTX compute capabilities, hardware compatibility
    levels, unknown) is the default target."""
    if gpu_target and gpu_target.startswith("sm:") and gpu_target[3:].isdigit() and len(gpu_target) >= 5:
        sm = gpu_target[3:]
        return f"{sm[:-1]}.{sm[-1]}"
    return DEFAULT_TARGET


def _stem(path: str) -> str:
    base = os.path.basename(os.path.normpath(path))
    return base[:-5] if base.endswith(".onnx") else base


def _has_external_data(proto: onnx.ModelProto) -> bool:
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)


def _file_has_external_data(path: str) -> bool:
    try:
        return _has_external_data(onnx.load(path, load_external_data=False))
    except (OSError, ValueError, DecodeError) as e:  # not a model: the build says so in its own words
        log.debug("cannot read %s for external data: %s", path, e)
        return False


def _load_with_weights(path: str, weights: str) -> onnx.ModelProto:
    """The model file ``path`` with its external data read in from the folder ``weights``."""
    model = onnx.load(path, load_external_data=False)
    load_external_data_for_model(model, weights)  # What onnx.load does, from that folder.
    return model


def from_build_folders(folders: Sequence[str], *, name: str | None = None, external_weights: bool | None = None,
                       sign_key: str | bytes | None = None) -> ExportSource:
    """An export source from build folders of one model, one per GPU target (their plans must be
    the same). ``external_weights`` None: as the folders keep them. ``sign_key`` (the key,
    ``@FILE``, or else ``TRT_BACKEND_SIGN_KEY``): each folder must be signed with it."""
    seal_key = read_sign_key(sign_key)
    if isinstance(folders, (str, os.PathLike)) or not isinstance(folders, Sequence):
        raise OptionsError(f"folders must be a list of build folders, got {type(folders).__name__}")
    folders = [path_text(f, "a build folder") for f in folders]
    if not folders:
        raise ExportError("no build folder given")
    first: ExportSource | None = None
    targets: list[str] = []
    for folder in folders:
        if not is_build_folder(folder):
            raise ExportError(f"{folder}: not a folder; give trt-backend build folders, or one model file")
        built = open_folder(folder, executes=False, sign_key=seal_key)
        manifest = built.manifest
        key = target_key(manifest.get("gpu_target"))
        if key in targets:
            what = f"GPU {key}" if key else "the default GPU target"
            raise ExportError(f"{folder}: a second build for {what} ({manifest.get('gpu_target')}); give one folder "
                              "per GPU target")
        targets.append(key)
        engines: dict[int, bytes] = {k: engine_bytes(e) for k, e in (built.engines or {}).items()}
        if first is None:
            models: dict[int, onnx.ModelProto] = {}
            external = False
            # The weights are copied into the repository: from the folder, or from where a folder
            # built with weights_by_reference refers to them (checked by open_folder).
            weights = weights_dir(manifest) or folder
            for seg in manifest["segments"]:
                path = os.path.join(folder, os.path.basename(seg["model"]))
                external = external or _file_has_external_data(path)
                models[int(seg["id"])] = _load_with_weights(path, weights)
            plan_json: Mapping[str, Any] = manifest["plan"]
            first = ExportSource(
                name=name or _stem(str(manifest.get("model") or folder)), plan=built.plan, segment_models=models,
                segment_profiles=saved_segment_profiles(plan_json),
                input_profiles=profiles_from_json(plan_json.get("input_profiles", [])),
                runtime=manifest.get("tensorrt"),
                precision=str(manifest.get("build_options", {}).get("precision", "fp32")),
                external_weights=external if external_weights is None else external_weights,
                segment_precisions={int(s["id"]): str(s.get("precision") or "fp32") for s in manifest["segments"]
                                    if s["backend"] == "tensorrt"},
                segment_pinned={int(s["id"]): tuple(s.get("pinned") or ()) for s in manifest["segments"]
                                if s["backend"] == "tensorrt"})
        else:
            _check_same_plan(first, built.plan, manifest, folder, folders[0])
        for seg_id, engine in engines.items():
            first.engines.setdefault(seg_id, {})[key] = engine
    assert first is not None
    return first


def _check_same_plan(first: ExportSource, plan: Plan, manifest: Mapping[str, Any], folder: str,
                     first_folder: str) -> None:
    keys = ("id", "backend", "nodes", "inputs", "outputs")
    a = [{k: s.to_dict().get(k) for k in keys} for s in first.plan.segments]
    b = [{k: s.to_dict().get(k) for k in keys} for s in plan.segments]
    if a != b:
        raise ExportError(f"{folder}: its plan differs from that of {first_folder}; engines for several GPUs must "
                          "come from builds of the same model with the same options")
    if manifest.get("tensorrt") != first.runtime:
        raise ExportError(f"{folder}: built with {manifest.get('tensorrt')}, {first_folder} with {first.runtime}")


def from_model(model: str | onnx.ModelProto, profiles: Sequence[Mapping[str, Any]] | None,
               options: SessionOptions | None = None, *, scratch_dir: str | None = None, name: str | None = None,
               external_weights: bool | None = None) -> ExportSource:
    """Build ``model`` (a model file, a build folder or a ModelProto, named "model" unless ``name``
    says otherwise) with ``options`` (precision, partition, flavor, signing key: all there) into a
    scratch folder (removed afterwards) and read it as an export source. ``external_weights``
    None: as the model file keeps its weights."""
    sign_key = options.sign_key if options is not None else None
    if isinstance(model, onnx.ModelProto):
        external = bool(external_weights)
        name = name or "model"
    elif is_build_folder(path_text(model, "the model (a model file, a build folder or a ModelProto)")):
        return from_build_folders([os.fspath(model)], name=name, external_weights=external_weights,
                                  sign_key=sign_key)
    else:
        model = os.fspath(model)
        external = _file_has_external_data(model) if external_weights is None else external_weights
    scratch = tempfile.mkdtemp(prefix=".export-build-", dir=scratch_dir)
    try:
        out = os.path.join(scratch, "build")
        build(model, out, profiles, options)
        source = from_build_folders([out], name=name or _stem(os.fspath(model)), external_weights=external,
                                    sign_key=sign_key)
    except ArtifactError as e:
        raise ExportError(f"{name or model}: building it for export failed: {e}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return source


def from_session(session: Session, *, name: str | None = None, engines: Mapping[int, Mapping[str, bytes]] | None = None,
                 runtime: str | None = None, external_weights: bool = False) -> ExportSource:
    """An export source from a Session's plan and derived profiles. Without ``engines`` (by segment
    id, then GPU target) its TensorRT segments export as ONNX (Triton's TensorRT accelerator);
    ``runtime`` names the TensorRT that built the engines given."""
    if not isinstance(session, Session):
        raise OptionsError(f"from_session takes a trt_backend Session, got {type(session).__name__}; for a model "
                           "file or a build folder, use from_model or from_build_folders")
    if engines is not None and (not isinstance(engines, Mapping) or not all(
            isinstance(k, int) and isinstance(v, Mapping) and all(isinstance(t, str) and isinstance(b, bytes)
                                                                  for t, b in v.items())
            for k, v in engines.items())):
        raise OptionsError("engines must map a segment id to {GPU target: engine bytes}, e.g. {0: {'8.6': b'...'}}")
    plan = session.plan
    return ExportSource(
        name=name or _stem(session.model.source or "model"), plan=plan,
        # A TensorRT segment exports as the model its engine is, or would be, built from.
        segment_models={seg.id: (session.compiled.segments[seg.id].model if seg.id in session.compiled.segments
                                 else plan.extract(seg.id)) for seg in plan.segments},
        segment_profiles=dict(session.segment_profiles), input_profiles=list(session.input_profiles),
        engines={k: dict(v) for k, v in (engines or {}).items()}, runtime=runtime,
        precision=session.options.build.precision, external_weights=external_weights,
        segment_precisions=dict(session.compiled.precisions),
        segment_pinned={k: tuple(b.pinned) for k, b in session.compiled.segments.items()})

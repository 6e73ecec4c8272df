"""Build folders that refer to the model's weights where they are instead of copying them
(``SessionOptions(weights_by_reference=True)``, ``trt-backend build --weights-by-reference``).

ONNX and ONNX Runtime take only relative external-data locations without ``..``, and ONNX's
checker refuses a data file with more than one hard link, so a folder cannot point at the
user's files by path or by link. It points at them through the folder its models' external data
is read from: its ``model.onnx`` and segment models name the weights by locations relative to the
user's model folder, and the loader (:func:`trt_backend.artifacts.read.open_folder`) hands that
folder, recorded absolute in the manifest, to every reader as the model's ``base_dir``: ONNX
Runtime gets it as ``session.model_external_initializers_file_folder_path``, TensorRT's parser
as the folder of the path it parses with. External data files keep their own locations; a weight
held inside the user's .onnx becomes a reference into that very file (location: the file's
name, offset and length: where protobuf stored its ``raw_data``, found by
:func:`partitioner.weights.inline_payloads`). Both runtimes read such references; neither asks
that an offset be aligned.

The manifest's ``"weights"`` entry records the folder and each file referred to, with what tells
a change without reading the weights: its size, its modification time in nanoseconds and a
SHA-256 of what can be read cheaply (the model file's structure: everything but the initializers'
bytes; a data file's first and last 64 KiB and size). :func:`check_references` holds each file
to that record whenever the folder is read: a file moved, removed, truncated or touched is one
:class:`~trt_backend.errors.WeightsReferenceError` naming the file and what differs."""
from __future__ import annotations

import datetime
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import onnx

from partitioner import Model, TrtBackendError
from partitioner.errors import OptionsError
from partitioner.model import ModelSource
from partitioner.weights import (
    INLINE_MAX_BYTES,
    check_location,
    data_files,
    external_reference,
    inline_payloads,
    is_external,
    raw_nbytes,
    structure_sha256,
)
from trt_backend.artifacts.seal import MANIFEST
from trt_backend.errors import ArtifactError, WeightsReferenceError

KEY = "weights"  # the manifest's entry; absent: the folder holds its weights (a copy)
MODE = "reference"
MODEL, DATA = "model", "data"  # what a referred-to file is: the model file itself, or an external data file
_ENDS = 64 * 1024  # bytes at each end of a data file that its digest covers


def referable_path(model: ModelSource | Model) -> str:
    """The absolute path of the model file a by-reference build refers to; OptionsError for a
    model given as bytes, a ModelProto or a loaded Model, whose weights are in no file of the
    user's (a missing file is left to loading, which names it)."""
    if not isinstance(model, (str, os.PathLike)):
        raise OptionsError(f"weights_by_reference needs the model as a file path: a {type(model).__name__} has "
                           "no file whose weights a build folder could refer to")
    return os.path.abspath(os.fspath(model))


@dataclass
class Referenced:
    """What a by-reference build folder refers to: ``refs``, initializer name -> its external
    reference into the model file (weights held inside it); ``record``, the manifest's
    :data:`KEY` entry (the folder and every file with its size, time and digest)."""

    refs: dict[str, onnx.TensorProto]
    record: dict[str, Any]


def refer(model: Model, path: str) -> Referenced:
    """The references of a folder built from ``model``, loaded from the file ``path``: its
    external data files as they are, and each large weight held inside it by where its bytes sit
    in ``path``. A weight not found there byte for byte (one that loading rewrote, as
    ``--qdq-rewrite`` dequantizes weights) gets no reference: the folder's models hold it."""
    folder = os.path.dirname(path)
    if model.base_dir is None or os.path.abspath(model.base_dir) != folder:
        raise ArtifactError(f"{path}: the model was loaded with its weights in {model.base_dir}, not beside it; "
                            "build it without weights_by_reference")
    files = [entry(folder, location, DATA) for location in data_files(model.proto)]
    big = [t for t in model.proto.graph.initializer if not is_external(t) and raw_nbytes(t) > INLINE_MAX_BYTES]
    refs: dict[str, onnx.TensorProto] = {}
    if big:
        payloads = inline_payloads(path)
        location = os.path.basename(path)
        with open(path, "rb", buffering=0) as f:
            for t in big:
                p = payloads.get(t.name)
                if p is None or p.length != raw_nbytes(t) or p.data_type != t.data_type or p.dims != tuple(t.dims):
                    continue
                f.seek(p.offset)
                if f.read(p.length) != t.raw_data:  # One tensor at a time, compared (not hashed).
                    continue
                refs[t.name] = _reference(t, location, p.offset, p.length)
        if refs:
            files.insert(0, entry(folder, location, MODEL))
    return Referenced(refs, {"mode": MODE, "dir": folder, "files": files})


def _reference(t: onnx.TensorProto, location: str, offset: int, length: int) -> onnx.TensorProto:
    return external_reference(t, location, offset, length)


def entry(folder: str, location: str, kind: str) -> dict[str, Any]:
    """The record of one file referred to: location, kind, size, modification time and digest."""
    path = os.path.join(folder, location)
    st = os.stat(path)
    out: dict[str, Any] = {"file": location, "kind": kind, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}
    out.update(_digest(path, kind))
    return out


def _digest(path: str, kind: str) -> dict[str, str]:
    if kind == MODEL:
        return {"structure_sha256": structure_sha256(path)}
    return {"ends_sha256": ends_sha256(path)}


def ends_sha256(path: str) -> str:
    """SHA-256 of a file's size and its first and last 64 KiB (the whole file when smaller)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        h.update(f"{size}\0".encode())
        h.update(f.read(min(size, _ENDS)))
        if size > _ENDS:
            f.seek(max(_ENDS, size - _ENDS))
            h.update(f.read())
    return h.hexdigest()


def weights_dir(manifest: Mapping[str, Any]) -> str | None:
    """The folder a by-reference folder's models read their external data from (absolute), or
    None for a folder that holds its weights (all of them: one built by reference from a model
    with none large enough to refer to holds them too)."""
    record = manifest.get(KEY)
    if not isinstance(record, Mapping) or not record.get("files") or not isinstance(record.get("dir"), str):
        return None
    return str(record["dir"])


def check_references(folder: str, manifest: Mapping[str, Any]) -> None:
    """Each file a by-reference folder refers to (its manifest's :data:`KEY` entry) is where it was,
    of the size, modification time and digest recorded: else one WeightsReferenceError naming
    the file and what differs. A folder without the entry holds its weights: nothing to check."""
    record = manifest.get(KEY)
    if record is None:
        return
    try:
        if record["mode"] != MODE:
            raise ValueError(f"mode {record['mode']!r}")
        base = record["dir"]
        if not isinstance(base, str) or not os.path.isabs(base):
            raise ValueError(f"dir {base!r} is not an absolute path")
        files = [(str(e["file"]), str(e["kind"]), int(e["bytes"]), int(e["mtime_ns"])) for e in record["files"]]
        for location, kind, _, _ in files:
            check_location(location, "?", folder)
            if kind not in (MODEL, DATA):
                raise ValueError(f"kind {kind!r}")
    except (KeyError, TypeError, ValueError, TrtBackendError) as e:
        raise ArtifactError(f"{folder}: its weights entry in {MANIFEST} is malformed ({e}); rebuild it with "
                            "trt-backend build") from None
    for (location, kind, size, mtime_ns), recorded in zip(files, record["files"]):
        path = os.path.join(base, location)
        problem = _difference(path, kind, size, mtime_ns, recorded)
        if problem:
            raise WeightsReferenceError(
                f"{folder}: refers to its model's weights instead of holding a copy, and {path} {problem}; put the "
                "file back as it was, or rebuild the folder (trt-backend build, with --weights-by-reference to "
                "refer to the weights again)")


def _difference(path: str, kind: str, size: int, mtime_ns: int, recorded: Mapping[str, Any]) -> str | None:
    """What differs between the file ``path`` and its record, in words; None when nothing does."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "is missing (moved or removed)"
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if not os.path.isfile(path):
        return "is not a file"
    if st.st_size != size:
        return f"has {st.st_size} bytes, the folder was built with {size} (changed or truncated)"
    if st.st_mtime_ns != mtime_ns:
        return (f"was modified at {_when(st.st_mtime_ns)}, the folder was built with it as of {_when(mtime_ns)} "
                "(a file touched or rewritten since)")
    try:
        found = _digest(path, kind)
    except (OSError, TrtBackendError) as e:
        return f"cannot be read ({getattr(e, 'strerror', None) or e})"
    what = "its structure (graph, names, shapes, where the weights sit)" if kind == MODEL else \
        "its first or last 64 KiB"
    for key, digest in found.items():
        if recorded.get(key) != digest:
            return f"differs from the file the folder was built with: {what} changed"
    return None


def _when(ns: int) -> str:
    return datetime.datetime.fromtimestamp(ns / 1e9).isoformat(sep=" ", timespec="microseconds")

"""Weights kept as external data: checked where they are, read only when a value is needed.

A model on disk whose weights live in data files beside it is planned, extracted and built
without those weights ever entering a protobuf: initializers stay references (location, offset,
length) relative to the model's folder, ``Model.base_dir``. Locations are checked once at load:
relative, no ``..``, only the keys TensorRT's parser accepts, the file there and long enough.
Small external tensors (shapes, scales) are read in at load, so code reading values works."""
from __future__ import annotations

import functools
import logging
import math
import mmap
import os
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import onnx

from partitioner.errors import ModelLoadError, ModelTooLargeError
from partitioner.wire import location_problem
from partitioner.wire import Payload, initializer_payloads

log = logging.getLogger(__name__)

ALLOWED_KEYS = frozenset({"location", "offset", "length", "checksum"})  # what TensorRT's parser takes
INLINE_MAX_BYTES = 64 * 1024  # external tensors up to this size are read into the proto at load
PROTOBUF_LIMIT = 2**31 - 1  # bytes in one serialized message
TRT_MAX_ELEMENTS = 2**31 - 1  # elements in one TensorRT tensor
_CHUNK = 16 * 1024 * 1024


@dataclass(frozen=True)
class ExternalRef:
    """Where one tensor's bytes are: ``location`` relative to the model's folder."""

    tensor: str
    location: str
    offset: int
    length: int


def all_tensors(proto: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Initializers and tensor attributes of the graph and of every subgraph and function."""
    from onnx.external_data_helper import _get_all_tensors

    yield from _get_all_tensors(proto)


def is_external(tensor: onnx.TensorProto) -> bool:
    return tensor.HasField("data_location") and tensor.data_location == onnx.TensorProto.EXTERNAL


def external_tensors(proto: onnx.ModelProto) -> list[onnx.TensorProto]:
    return [t for t in all_tensors(proto) if is_external(t)]


def uses_external_data(proto: onnx.ModelProto) -> bool:
    if any(is_external(t) for t in proto.graph.initializer):
        return True
    return any(is_external(t) for t in _attribute_tensors(proto.graph))


_TENSOR_ATTRS = frozenset({onnx.AttributeProto.TENSOR, onnx.AttributeProto.TENSORS, onnx.AttributeProto.GRAPH,
                           onnx.AttributeProto.GRAPHS})


def _attribute_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Tensors in node attributes and in subgraphs (their initializers too), recursively."""
    for node in graph.node:
        for a in node.attribute:
            if a.type not in _TENSOR_ATTRS:
                continue
            if a.type == onnx.AttributeProto.TENSOR:
                yield a.t
            elif a.type == onnx.AttributeProto.TENSORS:
                yield from a.tensors
            else:
                for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    yield from g.initializer
                    yield from _attribute_tensors(g)


def tensor_nbytes(tensor: onnx.TensorProto) -> int | None:
    """Bytes the tensor's values take (None for strings and unknown dtypes)."""
    itemsize = _itemsize(tensor.data_type)
    if itemsize is None:
        return None
    count = math.prod(tensor.dims)  # Python ints: no overflow; called per initializer, often.
    if tensor.data_type in (onnx.TensorProto.INT4, onnx.TensorProto.UINT4):
        return (count + 1) // 2
    return count * itemsize


@functools.cache
def _itemsize(data_type: int) -> int | None:
    if data_type in (0, onnx.TensorProto.STRING):
        return None
    try:
        return int(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(data_type)).itemsize)
    except (KeyError, TypeError, ValueError):
        return None


def raw_nbytes(tensor: onnx.TensorProto) -> int:
    """``len(tensor.raw_data)`` without reading the bytes: protobuf's upb copies a bytes field on
    every access (~35 ms per 100 MB), so sizes come from dims and dtype, which loading checked
    against the bytes (:func:`partitioner.model.load_model`). 0 without raw data."""
    if not tensor.HasField("raw_data"):
        return 0
    need = tensor_nbytes(tensor)
    return need if need is not None else len(tensor.raw_data)


def check_location(location: str, tensor: str, where: str) -> None:
    """A location a model may name: relative, inside the model's folder, no ``..``."""
    problem = location_problem(location)
    if problem == "empty":
        raise ModelLoadError(f"{where}: tensor '{tensor}' has external data without a location")
    if problem == "absolute":
        raise ModelLoadError(f"{where}: tensor '{tensor}' names its external data by the absolute path "
                             f"'{location}'; locations must be relative to the model's folder")
    if problem == "outside":
        raise ModelLoadError(f"{where}: tensor '{tensor}' names external data '{location}' outside the model's "
                             "folder ('..' is refused)")


def external_ref(tensor: onnx.TensorProto, base_dir: str, where: str) -> ExternalRef:
    """The checked reference of one external tensor: keys, location, file, offset and length."""
    entries = {e.key: e.value for e in tensor.external_data}
    unknown = sorted(set(entries) - ALLOWED_KEYS)
    if unknown:
        raise ModelLoadError(f"{where}: tensor '{tensor.name}' has external-data key(s) {', '.join(unknown)}; "
                             f"only {', '.join(sorted(ALLOWED_KEYS))} are accepted")
    location = entries.get("location", "")
    check_location(location, tensor.name, where)
    path = os.path.join(base_dir, location)
    if not os.path.isfile(path):
        raise ModelLoadError(f"{where}: external data file '{location}' of tensor '{tensor.name}' not found in "
                             f"{base_dir}")
    try:
        offset = int(entries.get("offset", "0"))
        length = int(entries["length"]) if "length" in entries else -1
    except ValueError:
        raise ModelLoadError(f"{where}: tensor '{tensor.name}' has a malformed offset or length "
                             f"({entries.get('offset')!r}, {entries.get('length')!r})") from None
    size = os.path.getsize(path)
    expected = tensor_nbytes(tensor)
    if length < 0:
        length = expected if expected is not None else size - offset
    if offset < 0 or offset + length > size:
        raise ModelLoadError(f"{where}: external data file '{location}' is truncated: tensor '{tensor.name}' needs "
                             f"bytes {offset}..{offset + length}, the file has {size}")
    if expected is not None and length != expected:
        raise ModelLoadError(f"{where}: tensor '{tensor.name}' declares {length} bytes of external data in "
                             f"'{location}', its shape {list(tensor.dims)} needs {expected}")
    return ExternalRef(tensor.name, location, offset, length)


def check_external(proto: onnx.ModelProto, base_dir: str | None, where: str,
                   inline_max: int = INLINE_MAX_BYTES) -> list[ExternalRef]:
    """Check every external tensor of ``proto`` (see :func:`external_ref`) and read those of at
    most ``inline_max`` bytes into the proto; returns the references that stay external."""
    external = external_tensors(proto)
    if not external:
        return []
    if base_dir is None:
        raise ModelLoadError(f"{where}: tensor '{external[0].name}' has external data; "
                             "load it from its path, or with onnx.load(path) where its data files lie beside it "
                             "(partitioner.load_model takes base_dir: the folder holding them)")
    refs = []
    for tensor in external:
        ref = external_ref(tensor, base_dir, where)
        if ref.length <= inline_max:
            _inline(tensor, read_bytes(ref, base_dir))
        else:
            refs.append(ref)
    return refs


def _inline(tensor: onnx.TensorProto, data: bytes) -> None:
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.DEFAULT
    tensor.raw_data = data


def read_bytes(ref: ExternalRef, base_dir: str) -> bytes:
    with open(os.path.join(base_dir, ref.location), "rb") as f:
        f.seek(ref.offset)
        data = f.read(ref.length)
    if len(data) != ref.length:
        raise ModelLoadError(f"external data file '{ref.location}' is truncated: tensor '{ref.tensor}' got "
                             f"{len(data)} of {ref.length} bytes")
    return data


READ_IN_MAX_BYTES = 1792 << 20  # external weights a precision transform reads into one segment (fp16: < 1 GiB)


def read_in(proto: onnx.ModelProto, base_dir: str | None, where: str,
            max_bytes: int = READ_IN_MAX_BYTES) -> onnx.ModelProto:
    """A copy of ``proto`` whose external main-graph initializers hold their bytes, for the
    transforms that rewrite weights (fp16/bf16, int8 Q/DQ); ``proto`` is untouched. Past
    ``max_bytes`` in all: ModelTooLargeError naming the size (the transform cannot take it; the
    caller keeps the segment in fp32). External tensors elsewhere (subgraphs, attributes) stay."""
    external = [t for t in proto.graph.initializer if is_external(t)]
    if not external:
        return proto
    if base_dir is None:
        raise ModelLoadError(f"{where}: tensor '{external[0].name}' has external data and no folder was given "
                             "to read it from")
    refs = {t.name: external_ref(t, base_dir, where) for t in external}
    total = sum(r.length for r in refs.values())
    if total > max_bytes:
        raise ModelTooLargeError(f"{where}: {total / 2**30:.2f} GiB of external weights, past the "
                                 f"{max_bytes / 2**30:.2f} GiB one segment's precision transform reads in")
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)  # The external tensors are references: nothing large copied for them.
    for t in copy.graph.initializer:
        ref = refs.get(t.name)
        if ref is not None:
            _inline(t, read_bytes(ref, base_dir))
    return copy


def tensor_array(tensor: onnx.TensorProto, base_dir: str | None) -> np.ndarray:
    """The tensor's values, read from its data file when external."""
    if not is_external(tensor):
        return onnx.numpy_helper.to_array(tensor)
    if base_dir is None:
        raise ModelLoadError(f"tensor '{tensor.name}' has external data and no folder was given to read it from")
    copy = onnx.TensorProto()
    copy.CopyFrom(tensor)
    _inline(copy, read_bytes(external_ref(tensor, base_dir, "model"), base_dir))
    return onnx.numpy_helper.to_array(copy)


def refuse_embedded_past_limit(proto: onnx.ModelProto, where: str) -> None:
    """A model held in memory with its weights inside, past protobuf's 2 GiB, cannot be
    serialized for any runtime: say how to save it so it can. (The weights' bytes are summed
    first: a full ``ByteSize`` costs as much as serializing, ~0.5 s per 100 MB.)"""
    inits = getattr(getattr(proto, "graph", None), "initializer", None)
    if inits is not None and sum(_held_bytes(t) for t in inits) < PROTOBUF_LIMIT // 2:
        return
    size = proto.ByteSize()
    if size > PROTOBUF_LIMIT:
        raise ModelTooLargeError(
            f"{where}: the model holds {size / 2**30:.2f} GiB of weights inside its protobuf, past the 2 GiB one "
            "ONNX file can hold; save it with external data (onnx.save(model, 'model.onnx', "
            "save_as_external_data=True, location='model.onnx.data')) and pass the path")


def external_reference(t: onnx.TensorProto, location: str, offset: int | None = None,
                       length: int | None = None) -> onnx.TensorProto:
    """A tensor of ``t``'s name, element type and dims whose values are stored externally at
    ``location`` (and ``offset``, ``length`` where given): ``t`` without its bytes."""
    out = onnx.TensorProto()
    out.name, out.data_type = t.name, t.data_type
    out.dims.extend(t.dims)
    out.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            entry = out.external_data.add()
            entry.key, entry.value = key, str(value)
    return out


STAND_IN = "__stand_in__"  # location of a weight whose values a consumer does not need (dims and length only)
STAND_IN_MIN_BYTES = 64 * 1024


def stand_in(t: onnx.TensorProto) -> onnx.TensorProto | None:
    """For :func:`partitioner.extract.extract`: a large inline float weight as a reference to
    :data:`STAND_IN` (dims, dtype and length kept, no bytes copied); None for everything else.
    Only for consumers that do not read weight values (a capability query)."""
    if t.data_type not in _FLOATS or is_external(t):
        return None
    n = raw_nbytes(t)
    if n < STAND_IN_MIN_BYTES:
        return None
    return external_reference(t, STAND_IN, 0, n)


_FLOATS = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                     onnx.TensorProto.DOUBLE})


def is_stand_in(t: onnx.TensorProto) -> bool:
    return is_external(t) and any(e.key == "location" and e.value == STAND_IN for e in t.external_data)


def _held_bytes(t: onnx.TensorProto) -> int:
    return (len(t.raw_data) + 4 * (len(t.float_data) + len(t.int32_data)) + 8 * (len(t.int64_data)
            + len(t.double_data) + len(t.uint64_data)) + sum(len(v) for v in t.string_data))


def data_files(proto: onnx.ModelProto) -> list[str]:
    """Locations of the data files ``proto``'s external tensors name, sorted."""
    return sorted({e.value for t in external_tensors(proto) for e in t.external_data if e.key == "location"})


# ---------------------------------------------------------------- digests

_digests: dict[tuple[str, int, int, int, int, int], str] = {}
_digests_lock = threading.Lock()


def range_sha256(path: str, offset: int, length: int) -> str:
    """SHA-256 of ``length`` bytes of ``path`` from ``offset``, read in chunks; remembered per
    process while the file's inode, size and mtime stay the same."""
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_ino, st.st_size, st.st_mtime_ns, offset, length)
    with _digests_lock:
        hit = _digests.get(key)
    if hit is not None:
        return hit
    import hashlib  # (here and below, not at the top: planning never hashes, and hashlib costs ~3 ms to load)

    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(offset)
        left = length
        while left > 0:
            chunk = f.read(min(_CHUNK, left))
            if not chunk:
                break
            h.update(chunk)
            left -= len(chunk)
    digest = h.hexdigest()
    with _digests_lock:
        _digests[key] = digest
    return digest


def file_sha256(path: str) -> str:
    return range_sha256(path, 0, os.path.getsize(path))


def weights_sha256(proto: onnx.ModelProto, base_dir: str | None,
                   skip: Callable[[onnx.TensorProto], bool] | None = None) -> str | None:
    """One SHA-256 over the bytes of every external tensor of ``proto`` (by name; those ``skip``
    says yes to left out), or None when it has none: what a cache key needs besides the
    (weightless) serialized model."""
    external = [t for t in external_tensors(proto) if skip is None or not skip(t)]
    if not external:
        return None
    if base_dir is None:
        raise ModelLoadError(f"tensor '{external[0].name}' has external data and no folder was given to read it from")
    import hashlib

    h = hashlib.sha256()
    for t in sorted(external, key=lambda t: t.name):
        ref = external_ref(t, base_dir, "model")
        h.update(f"{ref.tensor}\0{range_sha256(os.path.join(base_dir, ref.location), ref.offset, ref.length)}\0"
                 .encode())
    return h.hexdigest()


# ---------------------------------------------------------------- placing data files

def place_data_files(locations: Iterable[str], base_dir: str, out_dir: str) -> list[str]:
    """Make each data file ``base_dir/<location>`` available as ``out_dir/<location>``: one copy,
    made by the kernel (``shutil.copyfile``: no user-space buffer, a reflink where the filesystem
    shares blocks). Not a hard link: ONNX's checker (1.19+, behind ``onnx.load``) refuses a data
    file with more than one link as a "potential hardlink attack", so a link would make the
    user's own model unloadable by onnx. Returns the locations placed (already the same file:
    left alone)."""
    placed = []
    for location in locations:
        check_location(location, "?", out_dir)
        src, dst = os.path.join(base_dir, location), os.path.join(out_dir, location)
        if os.path.exists(dst) and os.path.samefile(src, dst):
            continue
        os.makedirs(os.path.dirname(dst) or out_dir, exist_ok=True)
        tmp = dst + ".part"
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
        placed.append(location)
    return placed


# ---------------------------------------------------------------- weights inside a model file

def _mapped(path: str) -> mmap.mmap | None:
    """``path`` mapped read-only (None for an empty file, which cannot be mapped)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return None
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def inline_payloads(path: str) -> dict[str, Payload]:
    """Where each main-graph initializer of the ONNX file ``path`` holds its ``raw_data``, by
    name, found by walking protobuf's wire format: tags and lengths only, the weights' bytes are
    skipped, so a 100 MB model costs the few pages its headers sit on. A name given twice, a
    file that is no protobuf message or whose graph is split over several fields yields no
    entry: such weights cannot be referred to in place."""
    buf = _mapped(path)
    if buf is None:
        return {}
    try:
        return initializer_payloads(buf)[0]
    except (ValueError, IndexError):
        return {}
    finally:
        buf.close()


def structure_sha256(path: str) -> str:
    """SHA-256 of the ONNX file ``path`` with the ``raw_data`` bytes of its main-graph
    initializers left out (each one's offset and length hashed in its place): it changes with
    the graph, the names, dtypes and shapes and where the weights sit, and is read without
    reading the weights. ModelLoadError where the file is not an ONNX model."""
    import hashlib

    buf = _mapped(path)
    if buf is None:
        raise ModelLoadError(f"{path}: file is empty")
    h = hashlib.sha256()
    try:
        _, ranges = initializer_payloads(buf)
        at = 0
        for offset, length in sorted(ranges):
            h.update(buf[at:offset])
            h.update(f"\0{offset}:{length}\0".encode())
            at = offset + length
        h.update(buf[at:])
    except (ValueError, IndexError) as e:
        raise ModelLoadError(f"{path}: not an ONNX model ({e})") from None
    finally:
        buf.close()
    return h.hexdigest()

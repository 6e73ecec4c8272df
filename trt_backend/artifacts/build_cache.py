"""Whole build folders by what they were built from: ``trt-backend build --cache-dir`` with the
same model (its bytes and its data files' bytes), profiles, options, TensorRT and trt-backend
copies the folder it built before instead of loading, planning and building again.

An entry is ``<cache_dir>/builds/<key>/``: the folder as built (manifest last, by rename), so a
reader sees a whole entry or none. Engines are hard-linked into and out of it where the file
system allows (they are never rewritten in place: every writer replaces files by rename); data
files are copied by the kernel, since ONNX refuses to load a data file with more than one link.
An entry is checked on a hit by its manifest's digest and the sizes of its files; their content
is checked by :func:`trt_backend.artifacts.read.read_manifest` when the folder is loaded."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from typing import Any

from trt_backend._files import json_sha256, link_or_copy, missing_parent, new_folder, swap_in_folder, write_atomic
from trt_backend._lazy import lazy_module
from trt_backend._version import __version__
from trt_backend.artifacts.seal import MANIFEST, check_seal, manifest_text, seal
from trt_backend.errors import ArtifactError

log = logging.getLogger(__name__)
_onnx = lazy_module("onnx")  # A model with external data only: a cache hit of one without loads none.
_protobuf = lazy_module("google.protobuf.message")
_weights = lazy_module("partitioner.weights")

BUILD_CACHE_FORMAT = 1
BUILDS = "builds"
DIGESTS = "digests.json"  # file digests by path and status: unchanged files are not read again
_MAX_DIGESTS = 1000
SOURCE_PACKAGES = ("trt_backend", "partitioner", "plugins")
_source_digest: str | None = None


def source_digest() -> str:
    """SHA-256 over the Python sources of trt-backend's packages (read once per process): a
    cached folder is only as good as the code that built it, whatever its version number says."""
    global _source_digest
    if _source_digest is None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        root = os.path.dirname(root)
        h = hashlib.sha256()
        for package in SOURCE_PACKAGES:
            top = os.path.join(root, package)
            for folder, dirs, files in os.walk(top):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for name in sorted(files):
                    if name.endswith((".py", ".cu", ".json")):
                        path = os.path.join(folder, name)
                        with open(path, "rb") as f:
                            h.update(f"{os.path.relpath(path, root)}\0".encode())
                            h.update(hashlib.sha256(f.read()).digest())
        _source_digest = h.hexdigest()
    return _source_digest


def model_digest(path: str, known: dict[str, Any] | None = None) -> dict[str, Any]:
    """SHA-256 of the model file and of each external data file it names (by location).
    ``known``: digests by path with the file's status (size, times, inode) when each was taken,
    as :meth:`BuildCache.digests` keeps them: a file whose status is unchanged is not read again
    (git's index does the same); entries are added for files read."""
    known = {} if known is None else known
    model = _file_digest(path, known, None)
    out: dict[str, Any] = {"model_sha256": model["sha256"]}
    if model["data_files"]:
        base = os.path.dirname(os.path.abspath(path))
        out["data_files"] = {loc: _file_digest(os.path.join(base, loc), known, False)["sha256"]
                             if os.path.isfile(os.path.join(base, loc)) else None  # Missing: the build names it.
                             for loc in model["data_files"]}
    return out


_RACY_SECONDS = 2.0  # a file changed this recently may change again within its time stamp's resolution


def _sha256_finding(path: str, needle: bytes | None) -> tuple[str, bool]:
    """The file's SHA-256, read a MiB at a time (a data file of gigabytes stays out of memory), and
    whether ``needle`` occurs in it."""
    h = hashlib.sha256()
    found, tail = False, b""
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            if needle is not None and not found:
                found = needle in tail + chunk[:len(needle)] or needle in chunk
                tail = chunk[-(len(needle) - 1):]
    return h.hexdigest(), found


def remembered(path: str, known: Mapping[str, Any]) -> bool:
    """Whether :func:`model_digest` of ``path`` with ``known`` reads no file: the model file and
    each data file it names are there with their status unchanged (False where one cannot be read)."""
    try:
        entry = _known_entry(path, known)
        if entry is None:
            return False
        base = os.path.dirname(os.path.abspath(path))
        return all(_known_entry(os.path.join(base, loc), known) is not None for loc in entry["data_files"])
    except (OSError, KeyError, TypeError):
        return False


def _status(path: str) -> list[int]:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _known_entry(path: str, known: Mapping[str, Any], status: list[int] | None = None) -> dict[str, Any] | None:
    """``known``'s digest of the file ``path`` where its status (``status``: as just read) is the
    one recorded, else None."""
    entry = known.get(os.path.abspath(path))
    ok = isinstance(entry, dict) and entry.get("status") == (status if status is not None else _status(path))
    return entry if ok else None


def _file_digest(path: str, known: dict[str, Any], data: bool | None) -> dict[str, Any]:
    """{"sha256", "data_files"} of a file (``data``: it is a data file, not a model)."""
    status = _status(path)
    entry = _known_entry(path, known, status)
    if entry is not None:
        return entry
    key = os.path.abspath(path)
    digest, named = _sha256_finding(path, b"location" if data is None else None)
    entry = {"status": status, "sha256": digest, "data_files": []}
    if named:  # No external data without that key: no parse.
        with open(path, "rb") as f:
            content = f.read()
        proto = _onnx.ModelProto()  # Only here: a cache hit of a model without external data loads no onnx.
        try:
            proto.ParseFromString(content)
            entry["data_files"] = _weights.data_files(proto)
        except (_protobuf.DecodeError, RuntimeError, ValueError) as e:  # Not a model: loading it names the problem.
            raise OSError(f"not an ONNX model ({e})") from None
    if time.time() - status[1] / 1e9 > _RACY_SECONDS:
        known[key] = entry
    return entry


def feeds_sha256(feeds: Sequence[Mapping[str, Any]]) -> str:
    """SHA-256 of real inputs (input name -> array mappings, as ``compiler.check_feeds`` holds
    them) by their names, dtypes, shapes and values, for cache keys; a value that is no array keys
    by its repr (the build names the problem with it)."""
    import numpy as np

    h = hashlib.sha256()
    for k, sample in enumerate(feeds):
        for name in sorted(sample, key=str):
            try:
                a = np.ascontiguousarray(sample[name])
            except Exception:  # noqa: BLE001 - keyed by its repr: the build says what is wrong with it
                h.update(f"{k}:{name}:{sample[name]!r}".encode())
                continue
            h.update(f"{k}:{name}:{a.dtype.str}:{a.shape}:".encode())
            h.update(repr(a.tolist()).encode() if a.dtype.hasobject else a.tobytes())
    return h.hexdigest()


def jsonable(value: Any) -> Any:
    """``value`` as JSON-able data that is the same in every process: dataclasses as their fields,
    our own functions by name (their sources are in the build key), anything else by repr."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # (less what is derived from the rest)
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not f.metadata.get("derived")}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [jsonable(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    module = getattr(value, "__module__", None) or ""
    if callable(value) and module.split(".")[0] in SOURCE_PACKAGES:  # Our own code: its sources are in the key.
        return f"{module}:{getattr(value, '__qualname__', repr(value))}"
    return repr(value)  # Anything else without a stable form, e.g. a user's callable, keys to itself: a miss.


def reference_status(model_path: str, digest: Mapping[str, Any]) -> list[list[Any]]:
    """[absolute path, size, modification time in ns] of the model file and of each data file its
    ``digest`` (:func:`model_digest`) names: what a folder that refers to its weights instead of
    copying them records of them, so a key with it names only folders that still refer correctly
    (a file touched, or the same bytes at another path, is another key)."""
    base = os.path.dirname(os.path.abspath(model_path))
    out: list[list[Any]] = []
    for path in [os.path.abspath(model_path), *(os.path.join(base, loc) for loc in digest.get("data_files") or ())]:
        try:
            st = os.stat(path)
            out.append([path, st.st_size, st.st_mtime_ns])
        except OSError:
            out.append([path, None, None])  # Missing: the build names it.
    return out


def build_key(model_path: str, inputs: Mapping[str, Any], known: dict[str, Any] | None = None, *,
              by_reference: bool = False) -> str:
    """The key of building ``model_path`` with ``inputs`` (profiles, options, TensorRT flavor and
    target, anything else the folder depends on, as JSON-able values); ``known``: see
    :func:`model_digest`. ``by_reference``: the folder refers to the model's files instead of
    copying them, so their paths, sizes and times are part of the key (:func:`reference_status`)."""
    digest = model_digest(model_path, known)
    material = {"build_cache_format": BUILD_CACHE_FORMAT, "trt_backend": __version__, "source": source_digest(),
                "model": digest, "inputs": jsonable(inputs)}
    if by_reference:
        material["references"] = reference_status(model_path, digest)
    return json_sha256(material, default=repr)


class BuildCache:
    """Build folders by :func:`build_key` under ``<root>/builds``."""

    def __init__(self, root: str) -> None:
        self.root = os.path.join(os.path.abspath(root), BUILDS)

    def entry(self, key: str) -> str:
        return os.path.join(self.root, key)

    def key(self, model_path: str, inputs: Mapping[str, Any], *, by_reference: bool = False) -> str:
        """:func:`build_key`, with the file digests this cache remembers (``digests.json``)."""
        known = self.digests()
        before = dict(known)
        key = build_key(model_path, inputs, known, by_reference=by_reference)
        self.keep_digests(known, before)
        return key

    def model_digest(self, model_path: str) -> dict[str, Any]:
        """:func:`model_digest`, with the file digests this cache remembers."""
        known = self.digests()
        before = dict(known)
        digest = model_digest(model_path, known)
        self.keep_digests(known, before)
        return digest

    def keep_digests(self, known: dict[str, Any], before: dict[str, Any]) -> None:
        """Keep ``known`` (``digests.json``) where reading files added to it since ``before``."""
        if known != before:  # A file read anew: its digest is kept.
            try:
                os.makedirs(self.root, exist_ok=True)
                write_atomic(os.path.join(self.root, DIGESTS), json.dumps(_newest(known), indent=1))
            except OSError as e:
                log.debug("build cache %s: digests not kept (%s)", self.root, e)

    def digests(self) -> dict[str, Any]:
        try:
            with open(os.path.join(self.root, DIGESTS), encoding="utf-8") as f:
                known = json.load(f)
            return known if isinstance(known, dict) else {}
        except (OSError, ValueError, RecursionError):
            return {}

    def restore(self, key: str, out_dir: str, updates: Mapping[str, Any],
                sign_key: bytes | None, calibration_source: str | None = None) -> dict[str, Any] | None:
        """Write the folder cached under ``key`` as ``out_dir`` (temp folder, then swapped in), its
        manifest updated with ``updates`` and sealed (signed with ``sign_key``); the manifest, or
        None on a miss. A damaged entry is logged, removed and a miss. ``calibration_source``: the
        calibration data this build was given (the key holds its bytes, not its path), recorded
        in place of the path the cached build was given."""
        entry = self.entry(key)
        manifest = self._read(entry)
        if manifest is None:
            return None
        parent = os.path.dirname(os.path.abspath(out_dir))
        tmp = None
        try:
            tmp = new_folder(parent, ".build-")
            for name in _files_of(manifest):
                link_or_copy(os.path.join(entry, name), os.path.join(tmp, name), link=name.endswith(".engine"))
            build = manifest.get("build")
            recorded = build.get("calibration") if isinstance(build, dict) else None
            if calibration_source is not None and isinstance(build, dict) and isinstance(recorded, dict):
                manifest = {**manifest, "build": {**build, "calibration": {**recorded, "source": calibration_source}}}
            manifest = seal({**manifest, **updates}, sign_key)
            write_atomic(os.path.join(tmp, MANIFEST), manifest_text(manifest))
            swap_in_folder(tmp, out_dir)
        except OSError as e:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(e, FileNotFoundError) and tmp is not None:
                return None  # An entry removed while it was copied: build it.
            raise ArtifactError(f"cannot write {out_dir}: {e.strerror or e}") from None
        log.info("build cache hit %s: %s", key[:12], entry)
        return manifest

    def store(self, key: str, folder: str, manifest: Mapping[str, Any]) -> None:
        """Keep the finished build ``folder`` under ``key`` (unsigned: a hit signs with its own
        key). Failing to store is a warning, never a failed build."""
        entry = self.entry(key)
        if os.path.exists(os.path.join(entry, MANIFEST)):
            return
        tmp = None
        try:
            os.makedirs(self.root, exist_ok=True)
            tmp = new_folder(self.root, ".entry-")
            kept = seal({k: v for k, v in manifest.items() if k != "build_cache"})
            for name in _files_of(kept):
                link_or_copy(os.path.join(folder, name), os.path.join(tmp, name), link=name.endswith(".engine"))
            with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as f:
                f.write(manifest_text(kept))
            if os.path.exists(entry):  # A half entry of a process killed before its rename.
                shutil.rmtree(entry, ignore_errors=True)
            os.replace(tmp, entry)
            tmp = None
        except OSError as e:
            log.warning("build cache %s: could not keep this build (%s)", self.root, e.strerror or e)
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    def _read(self, entry: str) -> dict[str, Any] | None:
        path = os.path.join(entry, MANIFEST)
        try:
            with open(path, encoding="utf-8") as f:
                manifest = json.load(f)
            check_seal(manifest, path)
            for name, size in _sizes_of(manifest):
                if os.path.getsize(os.path.join(entry, name)) != size:
                    raise ArtifactError(f"{name} is {os.path.getsize(os.path.join(entry, name))} bytes, "
                                        f"its manifest says {size}")
            for name in _files_of(manifest):
                if not os.path.isfile(os.path.join(entry, name)):
                    raise ArtifactError(f"{name} is missing")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError, RecursionError, ArtifactError) as e:
            log.warning("build cache entry %s is damaged (%s); removing it", entry, e)
            shutil.rmtree(entry, ignore_errors=True)
            return None
        if not isinstance(manifest, dict):
            return None
        return manifest

def check_build_folder(out_dir: str) -> None:
    """An ArtifactError unless ``out_dir`` can become a build folder: absent, empty or a build
    folder (one holding a manifest) in a folder that takes new files."""
    if os.path.exists(out_dir):
        if not os.path.isdir(out_dir):
            raise ArtifactError(f"{out_dir}: exists and is not a folder")
        if os.listdir(out_dir) and not os.path.exists(os.path.join(out_dir, MANIFEST)):
            raise ArtifactError(f"{out_dir}: folder is not empty and holds no {MANIFEST}; refusing to replace it")
    problem = missing_parent(out_dir)
    if problem:
        raise ArtifactError(f"{out_dir}: {problem}")
    parent = os.path.dirname(os.path.abspath(out_dir))
    try:  # Os.access says yes to root, also on read-only file systems: try it, before building.
        os.rmdir(new_folder(parent, ".build-probe-"))
    except OSError as e:
        raise ArtifactError(f"{out_dir}: cannot write in folder {parent} ({e.strerror or e})") from None


def _newest(known: dict[str, Any]) -> dict[str, Any]:
    """``known`` cut to its :data:`_MAX_DIGESTS` most recently changed files."""
    if len(known) <= _MAX_DIGESTS:
        return known
    order = sorted(known, key=lambda k: known[k].get("status", [0, 0])[1], reverse=True)
    return {k: known[k] for k in order[:_MAX_DIGESTS]}


def _files_of(manifest: Mapping[str, Any]) -> list[str]:
    names = [str(manifest["model_file"])]
    for seg in manifest["segments"]:
        names.append(str(seg["model"]))
        if seg.get("engine"):
            names.append(str(seg["engine"]))
    names.extend(str(d["file"]) for d in manifest.get("data_files") or ())
    for name in names:
        if os.path.isabs(name) or ".." in name.replace("\\", "/").split("/"):
            raise ArtifactError(f"file name {name!r} outside the folder")
    return names


def _sizes_of(manifest: Mapping[str, Any]) -> Sequence[tuple[str, int]]:
    sizes = [(str(s["engine"]), int(s["engine_bytes"])) for s in manifest["segments"] if s.get("engine")]
    sizes.extend((str(d["file"]), int(d["bytes"])) for d in manifest.get("data_files") or ())
    return sizes

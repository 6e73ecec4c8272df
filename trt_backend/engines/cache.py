"""Content-addressed engine cache and TensorRT timing-cache files.

An entry is a directory ``<root>/<key>/`` holding ``engine-<sha256>.plan`` and ``manifest.json``
(the commit point: written last, by rename, naming the engine file and its hash). Engines are not
byte-for-byte reproducible, so each writer's engine gets its own content-named file and any
interleaving of two writers leaves a manifest that matches the engine it names. A per-key lock
file (``flock`` where available) makes a second process wait for the first one's build and reuse
it instead of building again."""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from trt_backend._files import file_lock, json_sha256, link_or_copy, sha256_bytes, write_atomic
from trt_backend.engines.memory import EngineFile
from trt_backend.errors import EngineCacheError

log = logging.getLogger(__name__)

CACHE_FORMAT = 1
MANIFEST = "manifest.json"


def cache_key(material: Mapping[str, Any]) -> str:
    """SHA-256 of ``material`` as canonical JSON (sorted keys); values must be JSON-able."""
    return json_sha256({"cache_format": CACHE_FORMAT, **material})


@dataclass(frozen=True)
class CachedEngine:
    key: str
    engine: bytes | EngineFile
    manifest: dict[str, Any]

    @property
    def host_code(self) -> bool:
        return bool(self.manifest.get("host_code", False))


class EngineCache:
    """Engines on disk by key. ``allow_host_code`` permits loading entries whose engines embed
    host code (a lean runtime, serialized plugins); without it such entries raise."""

    def __init__(self, root: str | os.PathLike[str], *, allow_host_code: bool = False) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.allow_host_code = allow_host_code
        try:
            os.makedirs(self.root, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".probe-", dir=self.root)
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise EngineCacheError(f"engine cache directory '{self.root}' is not writable: "
                                   f"{e.strerror or e}") from e

    def entry_dir(self, key: str) -> str:
        if not key or any(c not in "0123456789abcdef" for c in key):
            raise EngineCacheError(f"malformed engine cache key {key!r}")
        return os.path.join(self.root, key)

    # -- reading
    def get(self, key: str, expect: Mapping[str, Any] | None = None) -> CachedEngine | None:
        """The entry for ``key``, or None on a miss. A corrupt, truncated or foreign entry
        (manifest fields differing from ``expect``) is logged, removed, and reported as a miss."""
        directory = self.entry_dir(key)
        path = os.path.join(directory, MANIFEST)
        if not os.path.exists(path):
            return None
        for attempt in range(2):
            before = _read_bytes(path)
            try:
                entry = self._read(key, directory, path, expect or {})
                break
            except _BadEntry as e:
                if attempt == 0 and _read_bytes(path) != before:
                    continue  # a writer replaced the entry while we read it: read the new one
                log.warning("engine cache entry %s is unusable (%s); removing it, the engine will be rebuilt",
                            key, e)
                self._discard(directory)
                return None
        if entry.host_code and not self.allow_host_code:
            raise EngineCacheError(f"cached engine {key} contains host code (lean runtime or plugins); "
                                   "allow host code to load it")
        return entry

    def _read(self, key: str, directory: str, path: str, expect: Mapping[str, Any]) -> CachedEngine:
        try:
            with open(path, "rb") as f:
                manifest = json.loads(f.read().decode())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise _BadEntry(f"manifest unreadable: {e}") from e
        if not isinstance(manifest, dict) or manifest.get("format") != CACHE_FORMAT:
            raise _BadEntry("manifest of another format")
        if manifest.get("key") != key:
            raise _BadEntry(f"manifest belongs to key {str(manifest.get('key'))[:16]}...")
        for field, value in expect.items():
            if manifest.get(field) != value:
                raise _BadEntry(f"{field} is {manifest.get(field)!r}, expected {value!r}")
        name = manifest.get("engine")
        if not isinstance(name, str) or os.path.basename(name) != name or not name.startswith("engine-"):
            raise _BadEntry("manifest names no engine file")
        try:
            with open(os.path.join(directory, name), "rb") as f:
                data = f.read()
        except OSError as e:
            raise _BadEntry(f"engine file unreadable: {e.strerror or e}") from e
        if len(data) != manifest.get("bytes"):
            raise _BadEntry(f"engine file has {len(data)} bytes, manifest says {manifest.get('bytes')}")
        if sha256_bytes(data) != manifest.get("sha256"):
            raise _BadEntry("engine file hash differs from the manifest's")
        return CachedEngine(key, data, manifest)

    # -- writing
    def put(self, key: str, engine: bytes | EngineFile, meta: Mapping[str, Any] | None = None, *,
            host_code: bool = False) -> bool:
        """Store ``engine`` under ``key`` (an engine in a file is hard-linked in where the file
        system allows: it is never rewritten in place); False (logged) when the disk refuses the write."""
        directory = self.entry_dir(key)
        digest = engine.sha256 if isinstance(engine, EngineFile) else sha256_bytes(engine)
        name = f"engine-{digest[:32]}.plan"
        manifest = {**(meta or {}), "format": CACHE_FORMAT, "key": key, "engine": name, "sha256": digest,
                    "bytes": len(engine), "host_code": bool(host_code), "created": time.time()}
        try:
            os.makedirs(directory, exist_ok=True)
            if isinstance(engine, EngineFile):  # (read back against its sha256, as written bytes are)
                link_or_copy(engine.path, os.path.join(directory, name))
            else:
                write_atomic(os.path.join(directory, name), engine, durable=False)  # Read back against its sha256.
            write_atomic(os.path.join(directory, MANIFEST), json.dumps(manifest, indent=1, sort_keys=True).encode())
        except OSError as e:
            log.warning("could not write engine cache entry %s (%s); continuing without caching it", key,
                        e.strerror or e)
            return False
        return True

    def get_or_build(self, key: str, build: Callable[[], tuple[bytes | EngineFile, Mapping[str, Any]]], *,
                     expect: Mapping[str, Any] | None = None,
                     host_code: bool = False) -> tuple[CachedEngine, bool]:
        """The entry for ``key``, building and storing it on a miss; ``(entry, hit)``: on a miss,
        its engine is what ``build`` made (an engine in a file stays that file). Holds the key's
        lock meanwhile, so a concurrent builder of the same key waits and then hits."""
        with self.lock(key):
            found = self.get(key, expect)
            if found is not None:
                return found, True
            engine, meta = build()
            manifest = {**meta, **(expect or {})}
            if self.put(key, engine, manifest, host_code=host_code):
                self._prune(key)
            return CachedEngine(key, engine, {**manifest, "host_code": host_code}), False

    def _prune(self, key: str) -> None:
        """Remove engine files the manifest no longer names (caller holds the key's lock)."""
        directory = self.entry_dir(key)
        try:
            with open(os.path.join(directory, MANIFEST), "rb") as f:
                keep = json.loads(f.read().decode()).get("engine")
            for name in os.listdir(directory):
                if name.startswith("engine-") and name != keep:
                    os.unlink(os.path.join(directory, name))
        except (OSError, ValueError) as e:
            log.debug("pruning %s skipped: %s", key, e)

    def _discard(self, directory: str) -> None:
        try:
            os.unlink(os.path.join(directory, MANIFEST))
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("could not remove bad cache manifest in %s: %s", directory, e)

    @contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """An exclusive per-key lock across threads and processes (POSIX ``flock``; elsewhere a
        per-process lock only, where content-named engine files keep entries valid anyway)."""
        path = os.path.join(self.root, f".{key}.lock")
        try:
            os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o644))
        except OSError as e:
            raise EngineCacheError(f"cannot create lock file in '{self.root}': {e.strerror or e}") from e
        with file_lock(path):
            yield

    def keys(self) -> list[str]:
        return sorted(k for k in os.listdir(self.root) if os.path.exists(os.path.join(self.root, k, MANIFEST)))

    def clear(self) -> None:
        for name in os.listdir(self.root):
            path = os.path.join(self.root, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)


class _BadEntry(Exception):
    pass


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None




class TimingCacheFile:
    """A TensorRT timing cache backed by a file: loaded once, one fresh ITimingCache per build
    (builds run in parallel), each merged back, and the file saved merged with what other
    processes wrote meanwhile. Timing caches are no-ops in TensorRT-RTX (deprecated in 1.2)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self._lock = threading.Lock()
        self._data = self._load()
        self._merged: Any = None

    def _load(self) -> bytes:
        try:
            with open(self.path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return b""
        except OSError as e:
            log.warning("timing cache %s unreadable (%s); starting empty", self.path, e.strerror or e)
            return b""

    def attach(self, config: Any) -> Any:
        """Give ``config`` a timing cache seeded from the file; returns it for :meth:`merge`."""
        with self._lock:
            data = self._data
        cache = config.create_timing_cache(data)
        if cache is None and data:
            log.warning("timing cache %s rejected by TensorRT; starting empty", self.path)
            cache = config.create_timing_cache(b"")
        config.set_timing_cache(cache, False)
        return cache

    def merge(self, config: Any, cache: Any) -> None:
        with self._lock:
            if self._merged is None:
                self._merged, self._config = cache, config
            elif self._merged is not cache:
                self._merged.combine(cache, True)

    def save(self) -> bool:
        """Write the merged cache (combined with the file's current content); False on failure."""
        with self._lock:
            if self._merged is None:
                return False
            on_disk = self._load()
            if on_disk and on_disk != self._data:
                other = self._config.create_timing_cache(on_disk)
                if other is not None:
                    self._merged.combine(other, True)
            data = bytes(self._merged.serialize())
            try:
                os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
                write_atomic(self.path, data)
            except OSError as e:
                log.warning("could not save timing cache %s: %s", self.path, e.strerror or e)
                return False
            self._data = data
            return True

"""``trt-backend build --cache-dir`` answered before the build command loads anything heavy.

The build cache (:mod:`trt_backend.artifacts.build_cache`) keys a folder by the model's content
and the options the command made of its arguments; making those options loads onnx, numpy and
TensorRT, which is most of a cache hit's time. This module keeps a second, cheaper way to the
same entries: an index under ``<cache_dir>/builds/index/`` from the command line itself to the
entry's key. Its key is made of what decides the options and the folder without loading them:

- the argument list as given, less the output folder and the verbosity flags (a different
  spelling of the same options is only a miss);
- the model file's SHA-256 and its external data files' (the build cache's own digests, with
  the file status check that skips reading an unchanged file); with ``--weights-by-reference``
  also their absolute paths, sizes and modification times, which such a folder records;
- the status (size, time, inode) of every source file of trt-backend's packages, the Python
  interpreter, the installed distributions (their names and versions) on ``sys.path``, the
  NVIDIA driver's view of the GPUs and the environment variables that steer TensorRT, CUDA,
  ONNX Runtime or trt-backend.

Only arguments known to carry plain values (:data:`trt_backend.commands._argv.BUILD_LINE_VALUES`
and its flags) take this path: one naming a file whose content
matters (calibration data, inputs, a precision plan, a timing cache, a signing key, a report)
or a device, and ``--precision auto`` (whose search runs before the options exist), send the
command the usual way. The index is written after a build that went the usual way; a hit
restores the entry exactly as the usual path would (its manifest sealed again,
``build_cache.hit`` true), so the folder, its manifest and the printed lines are the same."""
from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from partitioner import wire
from trt_backend._files import output_lock, write_atomic
from trt_backend._lazy import lazy_module
from trt_backend.commands._argv import Call, parse
from trt_backend.artifacts.build_cache import (
    SOURCE_PACKAGES,
    BuildCache,
    check_build_folder,
    model_digest,
    reference_status,
    remembered,
)
from trt_backend.artifacts.seal import sign_key
from trt_backend.commands._segment_notes import precision_notes

log = logging.getLogger(__name__)
_report = lazy_module("trt_backend.engines.report")  # A build that demoted nodes only.

INDEX = "index"
INDEX_FORMAT = 1
_ENV_PREFIXES = ("TRT_BACKEND", "TENSORRT", "TRT_", "CUDA", "NVIDIA", "ORT_", "ONNX", "POLYGRAPHY", "LD_LIBRARY_PATH",
                 "OMP_")


def _status(path: str) -> list[int]:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _sources() -> list[Any]:
    """(relative path, status) of every source file of trt-backend's packages."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out: list[Any] = []
    for package in SOURCE_PACKAGES:
        for folder, dirs, files in os.walk(os.path.join(root, package)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".py", ".cu", ".json")):
                    path = os.path.join(folder, name)
                    out.append([os.path.relpath(path, root), *_status(path)])
    return out


def _installed() -> list[str]:
    """The distributions on ``sys.path`` (their metadata folders' names carry the versions)."""
    names: list[str] = []
    for entry in sys.path:
        if os.path.isdir(entry):
            try:
                names += sorted(n for n in os.listdir(entry) if n.endswith((".dist-info", ".egg-info", ".egg-link",
                                                                            ".pth")))
            except OSError:
                continue
    return names


def _gpus() -> list[str]:
    """What the NVIDIA driver says about itself and each GPU (nothing on a machine without one)."""
    out = []
    for path in ["/proc/driver/nvidia/version", *sorted(glob.glob("/proc/driver/nvidia/gpus/*/information"))]:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                out.append(f.read())
        except OSError:
            continue
    return out


def index_key(call: Call, known: dict[str, Any]) -> str:
    """The index key of ``call``: see the module's description. ``known``: the build cache's
    remembered file digests (:func:`trt_backend.artifacts.build_cache.model_digest`)."""
    env = {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)}
    digest = model_digest(call.model, known)
    material = {"index_format": INDEX_FORMAT, "argv": call.argv, "model": digest,
                "sources": _sources(), "python": [sys.version, sys.executable], "installed": _installed(),
                "gpus": _gpus(), "env": env}
    if "--weights-by-reference" in call.argv:  # The folder records where the files are, their sizes and times.
        material["references"] = reference_status(call.model, digest)
    text = json.dumps(material, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _index_path(cache: BuildCache, key: str) -> str:
    return os.path.join(cache.root, INDEX, key + ".json")


# The largest model file the index lookup reads (hashes) before a build where the build cache
# remembers no digest of it (a file it has not read as it is now): ~30 ms. A larger one (ResNet-50's
# 97 MiB took 0.2 s) is read once, for the build's own key, and the index key is made after it.
READ_BEFORE_BUILD_BYTES = 16 << 20


def lookup_index(argv: Sequence[str], *, read: bool = False) -> tuple[Call | None, str | None]:
    """(the call, its index key) for a build command line this path can answer; (None, None)
    when it cannot (any problem: the usual path meets it and says it). The key is made of the
    model's digest: where the build cache remembers none and the file is larger than
    ``READ_BEFORE_BUILD_BYTES``, (the call, None) unless ``read`` (after the build, which
    remembers it)."""
    call = parse(argv)
    if call is None or call.cache_dir is None:
        return None, None
    try:
        cache = BuildCache(call.cache_dir)
        known = cache.digests()
        if not read and not remembered(call.model, known) and _bytes_to_read(call.model) > READ_BEFORE_BUILD_BYTES:
            return call, None
        before = dict(known)
        key = index_key(call, known)
        cache.keep_digests(known, before)
        return call, key
    except (OSError, ValueError) as e:
        log.debug("build index: %s", e)
        return None, None


def _bytes_to_read(model: str) -> int:
    """The size of the model file and of the external data files it names (without parsing it:
    :func:`partitioner.wire.external_bytes`, none counted where it cannot tell), or of the file
    alone where it is larger than what the lookup reads."""
    size = os.path.getsize(model)
    if size > READ_BEFORE_BUILD_BYTES:
        return size
    with open(model, "rb") as f:
        return size + (wire.external_bytes(f.read(), os.path.dirname(os.path.abspath(model))) or 0)


def remember_in_index(cache_dir: str, index: str, manifest: Mapping[str, Any]) -> None:
    """After a build the usual way: index ``index`` names the build cache entry it wrote or
    copied (failing to keep it only costs the next build its shortcut)."""
    key = (manifest.get("build_cache") or {}).get("key")
    if not isinstance(key, str):
        return
    cache = BuildCache(cache_dir)
    try:
        os.makedirs(os.path.join(cache.root, INDEX), exist_ok=True)
        write_atomic(_index_path(cache, index), json.dumps({"key": key}) + "\n", durable=False)
    except OSError as e:
        log.debug("build index %s: not kept (%s)", cache.root, e)


def restore_indexed(call: Call, index: str) -> dict[str, Any] | None:
    """The manifest of ``call.output`` restored from the build cache entry ``index`` names, or
    None (no such index or entry: the usual path builds)."""
    if call.cache_dir is None:
        return None
    cache = BuildCache(call.cache_dir)
    try:
        with open(_index_path(cache, index), encoding="utf-8") as f:
            key = json.load(f).get("key")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    if not isinstance(key, str) or not os.path.isfile(os.path.join(cache.entry(key), "manifest.json")):
        return None
    start = time.perf_counter()
    signing = sign_key(None)
    check_build_folder(call.output)
    with output_lock(call.output):
        given = call.values("--calibration-data")[-1:]
        return cache.restore(key, call.output, {"model": call.model,
                                                "build_seconds": round(time.perf_counter() - start, 4),
                                                "build_cache": {"key": key, "hit": True}}, signing,
                             given[0] if given else None)


def print_build(model: str, output: str, manifest: Mapping[str, Any], verbose: bool) -> None:
    """What ``trt-backend build`` prints about the folder it wrote."""
    segs = manifest["segments"]
    engines = [s for s in segs if s["engine"]]
    cached = " (a copy of an earlier build: build cache hit)" if manifest.get("build_cache", {}).get("hit") else ""
    print(f"model {model} | {manifest['tensorrt']} | target {manifest['gpu_target']} | {len(segs)} segment(s), "
          f"{len(engines)} engine(s) | {manifest['build_seconds']:.2f} s{cached}")
    for s in segs:
        what = "runs in ONNX Runtime"
        if s["engine"]:
            how = "from the engine cache in" if s.get("engine_cache_hit") else "built in"
            what = f"engine {s['engine']} {s['engine_bytes']} bytes, {how} {s['build_seconds']:.2f} s"
        precision = f" {s['precision']}" if s.get("precision") else ""
        precision += "".join(f" ({note})" for note in precision_notes(s))
        print(f"  segment {s['id']}: {s['backend']:<11}{precision} {s['model']}  {what}")
    if manifest.get("demoted"):
        for line in _report.demotion_lines(manifest["demoted"], verbose=verbose):
            print("  " + line)
    referred = manifest.get("weights")
    if isinstance(referred, dict):
        names = ", ".join(os.path.join(str(referred.get("dir")), str(f.get("file"))) for f in referred.get("files", ()))
        print(f"  weights: referred to where they are, not copied: {names or 'none (the model holds none large)'}")
    signed = ", signed with HMAC-SHA256" if "signature" in manifest else ""
    print(f"wrote {output}/manifest.json (digest {manifest['digest'][:19]}...{signed})")

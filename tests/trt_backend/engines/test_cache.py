"""Engine cache: hits and misses by content (weights, profiles, options, target), corrupt,
truncated and foreign entries rebuilt, two processes on one key, unwritable and full disks,
host-code entries refused unless allowed. Engines are real TensorRT-RTX builds."""
from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os

import numpy as np
import pytest
from onnx import helper

from partitioner import PartitionOptions
from tests.helpers import const, model, vi
from tests.support.graphs import CONV_RESIZE_PROFILE as PROFILE
from tests.support.graphs import conv_resize_conv
from trt_backend.engines.builder import BuildOptions
from trt_backend.engines.cache import MANIFEST, EngineCache, cache_key, sha256_bytes
from trt_backend.engines.fallback import build_engines
from trt_backend.engines.memory import EngineFile, engine_bytes
from trt_backend.errors import EngineCacheError
from trt_backend.planning import make_plan

pytestmark = pytest.mark.tensorrt


def _plan(m=None):
    return make_plan(m if m is not None else conv_resize_conv(), PartitionOptions(min_segment_size=1))


def _entry_files(cache: EngineCache, key: str) -> list[str]:
    return sorted(os.listdir(cache.entry_dir(key)))


def test_second_build_loads_every_segment_from_cache(flavor, tmp_path) -> None:
    cache = EngineCache(tmp_path)
    plan = _plan()
    cold = build_engines(plan, PROFILE, BuildOptions(), cache, flavor=flavor)
    warm = build_engines(plan, PROFILE, BuildOptions(), cache, flavor=flavor)
    assert [r.cached for r in cold.report.segments] == [False, False]
    assert [r.cached for r in warm.report.segments] == [True, True]
    assert warm.engines == cold.engines and len(cache.keys()) == 2
    assert {r.key for r in warm.report.segments} == {r.key for r in cold.report.segments}
    for key in cache.keys():
        manifest = json.loads((tmp_path / key / MANIFEST).read_text())
        assert manifest["flavor"] == flavor.name and manifest["version"] == flavor.version
        assert manifest["layers"] >= 1 and manifest["host_code"] is False
        assert _entry_files(cache, key) == sorted([MANIFEST, manifest["engine"]])


@pytest.mark.parametrize("change", ["weights", "profiles", "precision", "compute_capabilities", "keep_fp32_ops"])
def test_key_covers_what_changes_an_engine(flavor, tmp_path, change: str) -> None:
    cache = EngineCache(tmp_path)
    base_options = BuildOptions(precision="fp16")
    build_engines(_plan(), PROFILE, base_options, cache, flavor=flavor)
    m, profiles, options = conv_resize_conv(), PROFILE, base_options
    if change == "weights":
        w = next(t for t in m.graph.initializer if t.name == "w")
        w.CopyFrom(const("w", np.full((4, 3, 3, 3), 0.25, np.float32)))
    elif change == "profiles":
        profiles = [{**PROFILE[0], "x": ((1, 3, 16, 16), (2, 3, 16, 16), (8, 3, 16, 16))}]
    elif change == "precision":
        options = BuildOptions(precision="fp32")
    elif change == "compute_capabilities":
        if not flavor.is_rtx:
            pytest.skip("compute capabilities are a TensorRT-RTX option")
        options = BuildOptions(precision="fp16", compute_capabilities=("sm86",))
    else:
        options = BuildOptions(precision="fp16", keep_fp32_ops=("Conv",))
    again = build_engines(_plan(m), profiles, options, cache, flavor=flavor)
    rebuilt = {"weights": {0}, "profiles": {0}}.get(change, {0, 2})  # w and x live in segment 0
    assert {r.segment for r in again.report.segments if not r.cached} == rebuilt


def test_fp32_key_ignores_the_keep_list(flavor, tmp_path) -> None:
    cache = EngineCache(tmp_path)
    build_engines(_plan(), PROFILE, BuildOptions(), cache, flavor=flavor)
    again = build_engines(_plan(), PROFILE, BuildOptions(keep_fp32_ops=("Conv",)), cache, flavor=flavor)
    assert all(r.cached for r in again.report.segments)


def _damage(path: str, how: str) -> None:
    data = open(path, "rb").read()
    if how == "truncate":
        data = data[: len(data) // 2]
    elif how == "flip":
        data = data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]
    with open(path, "wb") as f:
        f.write(data)


@pytest.mark.parametrize("how", ["truncate", "flip", "manifest-garbage", "manifest-foreign", "manifest-version",
                                 "engine-missing"])
def test_bad_entries_are_logged_and_rebuilt(flavor, tmp_path, caplog: pytest.LogCaptureFixture, how: str) -> None:
    cache = EngineCache(tmp_path)
    plan = _plan()
    build_engines(plan, PROFILE, BuildOptions(), cache, flavor=flavor)
    key = cache.keys()[0]
    manifest_path = os.path.join(cache.entry_dir(key), MANIFEST)
    manifest = json.loads(open(manifest_path).read())
    engine_path = os.path.join(cache.entry_dir(key), manifest["engine"])
    if how in ("truncate", "flip"):
        _damage(engine_path, how)
    elif how == "engine-missing":
        os.unlink(engine_path)
    elif how == "manifest-garbage":
        open(manifest_path, "w").write("{not json")
    else:
        field, value = ("key", "0" * 64) if how == "manifest-foreign" else ("version", "0.0.1")
        open(manifest_path, "w").write(json.dumps({**manifest, field: value}))
    with caplog.at_level(logging.WARNING, logger="trt_backend.engines.cache"):
        again = build_engines(plan, PROFILE, BuildOptions(), cache, flavor=flavor)
    row = next(r for r in again.report.segments if r.key == key)
    assert not row.cached and f"entry {key} is unusable" in caplog.text
    entry = cache.get(key, {"flavor": flavor.name, "version": flavor.version})
    assert entry is not None and entry.engine == again.engines[row.segment]


def test_host_code_entries_need_permission(tmp_path) -> None:
    key = cache_key({"test": "host code"})
    EngineCache(tmp_path).put(key, b"engine with a lean runtime", {"layers": 1}, host_code=True)
    with pytest.raises(EngineCacheError, match="host code"):
        EngineCache(tmp_path).get(key)
    entry = EngineCache(tmp_path, allow_host_code=True).get(key)
    assert entry is not None and entry.engine == b"engine with a lean runtime"


def test_host_code_follows_build_options() -> None:
    assert not BuildOptions(version_compatible=True).host_code
    assert BuildOptions(version_compatible=True, exclude_lean_runtime=False).host_code


def test_unwritable_cache_dir_is_a_clear_error(tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(EngineCacheError, match="not writable"):
        EngineCache(blocker / "cache")


def test_malformed_key_is_refused(tmp_path) -> None:
    with pytest.raises(EngineCacheError, match="malformed"):
        EngineCache(tmp_path).get("../../etc")


def _fill_disk_child(root: str, key: str) -> None:
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    ok = EngineCache(root).put(key, os.urandom(100_000), {"layers": 1})
    os._exit(0 if ok is False else 3)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="uses RLIMIT_FSIZE in a child process (POSIX)")
def test_full_disk_leaves_no_torn_entry(tmp_path) -> None:
    key = cache_key({"test": "full disk"})
    proc = mp.get_context("spawn").Process(target=_fill_disk_child, args=(str(tmp_path), key))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0, "put() should report the failed write, not raise or succeed"
    cache = EngineCache(tmp_path)
    assert cache.get(key) is None and os.listdir(cache.entry_dir(key)) == []  # no temp files left


def _segment_model():
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")]
    return model(nodes, [vi("x", [1, 3, 32, 32])], [vi("y", [1, 8, 32, 32])],
                 [const("w", rng.standard_normal((8, 3, 3, 3)).astype(np.float32))])


def _race_child(root: str, key: str, barrier, results) -> None:
    from trt_backend.engines.builder import compile_segment
    from trt_backend.tensorrt.flavor import load_flavor

    fl = load_flavor("auto")

    def build():
        built = compile_segment(_segment_model(), [], BuildOptions(), fl)
        return built.engine, {"layers": built.layers}

    barrier.wait(30)
    entry, hit = EngineCache(root).get_or_build(key, build, expect={"flavor": fl.name})
    results.put((hit, sha256_bytes(engine_bytes(entry.engine))))


def test_two_processes_building_one_key_leave_one_valid_entry(flavor, tmp_path) -> None:
    ctx = mp.get_context("spawn")
    key = cache_key({"test": "race"})
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_race_child, args=(str(tmp_path), key, barrier, results)) for _ in range(2)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    cache = EngineCache(tmp_path)
    entry = cache.get(key, {"flavor": flavor.name})
    assert entry is not None and sha256_bytes(engine_bytes(entry.engine)) == entry.manifest["sha256"]
    assert _entry_files(cache, key) == sorted([MANIFEST, entry.manifest["engine"]])
    if hasattr(os, "fork"):  # flock: the second process waited and reused the first one's engine
        assert sorted(hit for hit, _ in outcomes) == [False, True]
        assert {digest for _, digest in outcomes} == {entry.manifest["sha256"]}


def _put_many(root: str, key: str, seed: int) -> None:
    cache = EngineCache(root)
    for i in range(20):
        cache.put(key, bytes([seed]) * (1000 + i), {"writer": seed})


def test_unlocked_concurrent_writers_never_tear_an_entry(tmp_path) -> None:
    """Without the lock (Windows), content-named engine files still keep every manifest valid."""
    ctx = mp.get_context("spawn")
    key = cache_key({"test": "writers"})
    procs = [ctx.Process(target=_put_many, args=(str(tmp_path), key, s)) for s in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    entry = EngineCache(tmp_path).get(key)
    assert entry is not None and set(engine_bytes(entry.engine)) == {entry.manifest["writer"]}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # no-ops in TensorRT-RTX, deprecated there
def test_timing_cache_file_round_trip(flavor, tmp_path) -> None:
    """The file plumbing (load, one cache per build, merge, save merged with the file's current
    content). Real timings need full TensorRT and a GPU; RTX's caches are empty but well-formed."""
    from trt_backend.engines.cache import TimingCacheFile
    from trt_backend.tensorrt.flavor import shared_logger

    trt = flavor.module
    builder = trt.Builder(shared_logger(flavor))
    path = tmp_path / "sub" / "timing.cache"
    first = TimingCacheFile(path)  # missing file: starts empty
    configs = [builder.create_builder_config() for _ in range(2)]
    for config in configs:
        first.merge(config, first.attach(config))
    assert first.save() and path.stat().st_size > 0
    saved = path.read_bytes()
    second = TimingCacheFile(path)
    config = builder.create_builder_config()
    second.merge(config, second.attach(config))
    path.write_bytes(saved)  # rewritten meanwhile: save() re-reads and merges before writing
    assert second.save() and path.read_bytes() and os.listdir(path.parent) == ["timing.cache"]
    assert TimingCacheFile(tmp_path / "never-used").save() is False


def test_an_engine_built_into_a_file_is_linked_in_not_read_and_written_again(tmp_path) -> None:
    """An engine streamed into a file as it was built (a build folder's, or a head start's) goes
    into the cache by a hard link where the file system allows, with the digest it was written
    with: the cache's entry is the same file, and stays when the builder's name for it goes (the
    folder writer moves it); a later lookup hits and reads it back against its SHA-256."""
    data = os.urandom(200_000)
    path = tmp_path / "segment.engine"
    path.write_bytes(data)
    built = EngineFile(str(path), sha256_bytes(data), len(data))
    cache, key = EngineCache(tmp_path / "cache"), cache_key({"model": "m", "profiles": [1]})
    entry, hit = cache.get_or_build(key, lambda: (built, {"layers": 3}))
    assert not hit and entry.engine is built
    stored = os.path.join(cache.entry_dir(key), f"engine-{built.sha256[:32]}.plan")
    assert os.stat(stored).st_ino == os.stat(path).st_ino
    os.remove(path)
    again, hit = cache.get_or_build(key, lambda: pytest.fail("built again"))
    assert hit and again.engine == data and again.manifest["layers"] == 3

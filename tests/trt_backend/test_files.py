"""Files written whole or not at all (trt_backend._files): atomic writes, models, pictures."""
from __future__ import annotations

import hashlib
import os

import onnx
import pytest

from partitioner import OptionsError, PartitionOptions, Plan, plan_model
from partitioner.picture import render_html, render_svg
from partitioner.report import annotate
from tests.helpers import conv_resize_chain
from trt_backend._files import save_model_atomic, write_atomic, write_hashed, write_picture


@pytest.fixture(scope="module")
def chain_plan(oracle) -> Plan:
    return plan_model(conv_resize_chain(), oracle, PartitionOptions(min_segment_size=1))


def test_write_atomic_writes_and_replaces(tmp_path) -> None:
    target = tmp_path / "out.txt"
    write_atomic(target, "héllo")
    assert target.read_bytes() == "héllo".encode()
    write_atomic(str(target), b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert os.listdir(tmp_path) == ["out.txt"]


@pytest.mark.parametrize("failing", ["replace", "fsync"])
def test_write_atomic_leaves_nothing_on_failure(tmp_path, monkeypatch, failing: str) -> None:
    def boom(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, failing, boom)
    with pytest.raises(OSError, match="No space"):
        write_atomic(tmp_path / "new.onnx", b"x" * 1000)
    assert os.listdir(tmp_path) == []
    monkeypatch.undo()
    (tmp_path / "old.svg").write_text("old")
    monkeypatch.setattr(os, failing, boom)
    with pytest.raises(OSError):
        write_atomic(tmp_path / "old.svg", "new")
    assert os.listdir(tmp_path) == ["old.svg"] and (tmp_path / "old.svg").read_text() == "old"


def test_save_model_atomic(tmp_path, monkeypatch, chain_plan: Plan) -> None:
    path = tmp_path / "annotated.onnx"
    save_model_atomic(annotate(chain_plan), path)
    onnx.checker.check_model(onnx.load(str(path)))

    class TooLarge:  # what protobuf does with a model over 2 GiB
        def SerializeToString(self) -> bytes:
            raise ValueError("Message onnx.ModelProto exceeds maximum protobuf size of 2GB")

    with pytest.raises(ValueError, match="2GB"):
        save_model_atomic(TooLarge(), tmp_path / "big.onnx")  # type: ignore[arg-type]
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError("disk gone")))
    with pytest.raises(OSError, match="disk gone"):
        save_model_atomic(annotate(chain_plan), tmp_path / "other.onnx")
    assert sorted(os.listdir(tmp_path)) == ["annotated.onnx"]


def test_write_picture_by_suffix(tmp_path, chain_plan: Plan) -> None:
    write_picture(chain_plan, tmp_path / "p.svg")
    write_picture(chain_plan, tmp_path / "p.HTM")
    write_picture(chain_plan, str(tmp_path / "p.html"))
    assert (tmp_path / "p.svg").read_text(encoding="utf-8") == render_svg(chain_plan)
    assert (tmp_path / "p.html").read_text(encoding="utf-8") == render_html(chain_plan)
    with pytest.raises(OptionsError, match=r"\.svg, \.html or \.htm"):
        write_picture(chain_plan, tmp_path / "p.png")
    assert sorted(os.listdir(tmp_path)) == ["p.HTM", "p.html", "p.svg"]


def test_one_canonical_json_hash_for_engine_keys_build_keys_and_manifest_digests() -> None:
    """Sorted keys, no spaces, ASCII escapes: the bytes every cache key and manifest digest hash,
    so keys written before stay valid."""
    import hashlib

    from trt_backend._files import canonical_json, json_sha256
    from trt_backend.artifacts.seal import canonical, manifest_digest
    from trt_backend.engines.cache import CACHE_FORMAT, cache_key

    value = {"b": [1, 2.5, None], "a": {"z": True, "y": "é"}}
    text = b'{"a":{"y":"\\u00e9","z":true},"b":[1,2.5,null]}'
    assert canonical_json(value) == text
    assert json_sha256(value) == hashlib.sha256(text).hexdigest()
    assert canonical({**value, "digest": "sha256:x", "signature": "y"}) == text
    assert manifest_digest(value) == "sha256:" + hashlib.sha256(text).hexdigest()
    assert cache_key(value) == hashlib.sha256(
        b'{"a":{"y":"\\u00e9","z":true},"b":[1,2.5,null],"cache_format":%d}' % CACHE_FORMAT).hexdigest()
    class Opaque:
        def __repr__(self) -> str:
            return "opaque"

    assert json_sha256({"f": Opaque()}, default=repr) == hashlib.sha256(b'{"f":"opaque"}').hexdigest()


@pytest.mark.parametrize("size", [0, 1000, (4 << 20) + 1, 9 << 20])
def test_write_hashed_writes_the_bytes_and_returns_their_sha256(tmp_path, size) -> None:
    """Small data hashed after the write; more than 4 MiB in a thread beside it: the same file
    and digest either way, from bytes or from another buffer (a serialized engine is one)."""
    data = os.urandom(size)
    for given in (data, bytearray(data), memoryview(data)):
        path = str(tmp_path / f"f{size}")
        assert write_hashed(path, given) == hashlib.sha256(data).hexdigest()
        with open(path, "rb") as f:
            assert f.read() == data
        os.unlink(path)


def test_write_hashed_removes_its_file_where_the_hash_fails(tmp_path, monkeypatch) -> None:
    """A failure in the hashing thread is raised in the caller's thread, as it was, and the file
    written beside it is removed."""
    def broken(data: object) -> object:
        raise MemoryError("no room to hash")

    monkeypatch.setattr(hashlib, "sha256", broken)
    path = tmp_path / "engine"
    with pytest.raises(MemoryError, match="no room to hash"):
        write_hashed(str(path), os.urandom(5 << 20))
    assert not path.exists()
    with pytest.raises(IsADirectoryError):  # (a write that fails: nothing made)
        write_hashed(str(tmp_path), b"x")


def test_folders_a_killed_process_left_are_removed_by_the_next_one_of_their_kind(tmp_path) -> None:
    """A build killed with SIGKILL (or by the out-of-memory killer) left its staging folder
    (.build-*, 100s of MB), its head start's (.head-start-*) and its capability queries' zeros in
    the temporary folder for good, even after later builds into the same -o. The next build
    into that folder removes those of processes of this machine that are gone; a live one's, and
    another machine's, stay. Here a real build is killed mid-way."""
    import signal
    import subprocess
    import sys
    import time

    from trt_backend._files import _machine, remove_stale
    from trt_backend.cli import main
    from trt_backend.data.demo import DEMO_PATH

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = tmp_path / f".build-{_machine()}.{gone.pid}-abc123"
    live = tmp_path / f".build-{_machine()}.{os.getpid()}-def456"
    other = tmp_path / f".build-00000000.{gone.pid}-ghi789"
    probe = tmp_path / f".build-probe-{_machine()}.{gone.pid}-x"
    for folder in (stale, live, other, probe):
        folder.mkdir()
        (folder / "segment_0.engine").write_bytes(b"x" * 1000)
    assert remove_stale(str(tmp_path), ".build-") == [str(stale)]
    assert not stale.exists() and live.exists() and other.exists() and probe.exists()
    # a real build killed while it builds: its folders go with the next build into the same place
    shapes = ["--min-shapes", "image:1x3x32x32", "--opt-shapes", "image:4x3x32x32", "--max-shapes", "image:8x3x32x32"]
    out = str(tmp_path / "built")
    proc = subprocess.Popen([sys.executable, "-m", "trt_backend.cli", "build", DEMO_PATH, "-o", out, *shapes],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    mine = f".build-{_machine()}.{proc.pid}-"
    while time.monotonic() < deadline and proc.poll() is None and not any(
            n.startswith(mine) for n in os.listdir(tmp_path)):
        time.sleep(0.005)
    assert proc.poll() is None, "the build ended before its staging folder was seen"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    left = [n for n in os.listdir(tmp_path) if f"{_machine()}.{proc.pid}-" in n]
    assert left and not os.path.exists(out)
    assert main(["build", DEMO_PATH, "-o", out, *shapes]) == 0
    assert [n for n in os.listdir(tmp_path) if f"{_machine()}.{proc.pid}-" in n] == []

"""``build --cache-dir`` repeated: the build cache's index answers before onnx, numpy or TensorRT
load, with the folder the usual path would copy; any change of the model or of an option, and
any argument naming a file, goes the usual way."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.support.external_mlp import write_mlp
from trt_backend.artifacts import build_cache
from trt_backend.artifacts.build_cache import BUILDS
from trt_backend.cli import main
from trt_backend.commands._argv import parse
from trt_backend.commands import _build_hit
from trt_backend.commands._build_hit import INDEX
from trt_backend.data.demo import DEMO_PATH
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

SHAPES = ["--shapes", "image:1x3x32x32"]
pytestmark = pytest.mark.usefixtures("flavor")

# a build in a fresh process: what it printed, whether it loaded onnx, numpy or a TensorRT (the
# builds whose index entries are compared run in children alike: the environment is in the key)
CHILD = textwrap.dedent("""
    import json, sys
    from trt_backend.cli import main
    rc = main(sys.argv[1:])
    loaded = {m.split(".")[0] for m in sys.modules}
    heavy = sorted(loaded & {"onnx", "numpy", "tensorrt", "tensorrt_rtx", "onnxruntime"})
    print(json.dumps({"rc": rc, "heavy": heavy}))
""")


def build(model: str, out: str, cache: str, *extra: str) -> dict:
    assert main(["build", model, "-o", out, "--cache-dir", cache, *SHAPES, *extra]) == 0
    with open(os.path.join(out, "manifest.json")) as f:
        return json.load(f)


def build_in_child(model: str, out: str, cache: str, *extra: str,
                   shapes: tuple[str, ...] = tuple(SHAPES)) -> tuple[dict, list[str], str]:
    argv = ["build", model, "-o", out, "--cache-dir", cache, *shapes, *extra]
    proc = subprocess.run([sys.executable, "-c", CHILD, *argv], capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["rc"] == 0
    with open(os.path.join(out, "manifest.json")) as f:
        return json.load(f), result["heavy"], "\n".join(lines[:-1])


def demo_copy(path: str, scale: float = 1.0) -> str:
    model = onnx.load(DEMO_PATH)
    if scale != 1.0:  # other weights, the same size
        init = model.graph.initializer[0]
        array = onnx.numpy_helper.to_array(init) * np.float32(scale)
        init.CopyFrom(onnx.numpy_helper.from_array(array.astype(np.float32), init.name))
    onnx.save(model, path)
    return path


def outputs(folder: str, model: str) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    ours = Session.load(folder, SessionOptions(emulate=True)).run(None, {"image": x})[0]
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]
    return ours, ref


def test_a_repeated_build_is_answered_before_onnx_loads(tmp_path) -> None:
    model, cache = demo_copy(str(tmp_path / "demo.onnx")), str(tmp_path / "cache")
    first, heavy, _ = build_in_child(model, str(tmp_path / "a"), cache)  # (the environment is part of the key)
    assert first["build_cache"]["hit"] is False and "onnx" in heavy
    assert len(os.listdir(os.path.join(cache, BUILDS, INDEX))) == 1
    hit, heavy, printed = build_in_child(model, str(tmp_path / "b"), cache)
    assert heavy == []
    assert hit["build_cache"] == {"key": first["build_cache"]["key"], "hit": True}
    assert "build cache hit" in printed and f"wrote {tmp_path / 'b'}/manifest.json" in printed
    assert [s["engine_sha256"] for s in hit["segments"]] == [s["engine_sha256"] for s in first["segments"]]
    assert hit["plan"] == first["plan"]
    ours, ref = outputs(str(tmp_path / "b"), model)
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)
    # the output check still holds: a folder that is not a build is not replaced
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    assert main(["build", model, "-o", str(other), "--cache-dir", cache, *SHAPES]) == 1
    assert (other / "keep.txt").read_text() == "mine"


def test_a_changed_model_or_option_misses(tmp_path) -> None:
    model, cache = demo_copy(str(tmp_path / "demo.onnx")), str(tmp_path / "cache")
    first = build(model, str(tmp_path / "a"), cache)
    size = os.path.getsize(model)
    demo_copy(model, scale=0.5)
    assert os.path.getsize(model) == size
    changed, heavy, _ = build_in_child(model, str(tmp_path / "b"), cache)
    assert changed["build_cache"]["hit"] is False and "onnx" in heavy
    assert changed["build_cache"]["key"] != first["build_cache"]["key"]
    ours, ref = outputs(str(tmp_path / "b"), model)
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)
    option, heavy, _ = build_in_child(model, str(tmp_path / "c"), cache, "--min-segment-size", "1")
    assert option["build_cache"]["hit"] is False and "onnx" in heavy
    assert option["build_cache"]["key"] != changed["build_cache"]["key"]
    again, heavy, _ = build_in_child(model, str(tmp_path / "d"), cache, "--min-segment-size", "1")
    assert again["build_cache"] == {"key": option["build_cache"]["key"], "hit": True} and heavy == []


def test_a_damaged_index_or_a_removed_entry_goes_the_usual_way(tmp_path) -> None:
    model, cache = demo_copy(str(tmp_path / "demo.onnx")), str(tmp_path / "cache")
    first, _, _ = build_in_child(model, str(tmp_path / "a"), cache)
    index = os.path.join(cache, BUILDS, INDEX)
    (name,) = os.listdir(index)
    with open(os.path.join(index, name), "w") as f:
        f.write("{not json")
    damaged, heavy, _ = build_in_child(model, str(tmp_path / "b"), cache)
    assert damaged["build_cache"] == {"key": first["build_cache"]["key"], "hit": True} and "onnx" in heavy
    with open(os.path.join(index, name)) as f:
        assert json.load(f) == {"key": first["build_cache"]["key"]}  # (written again by the usual path)
    import shutil

    shutil.rmtree(os.path.join(cache, BUILDS, first["build_cache"]["key"]))
    rebuilt, heavy, _ = build_in_child(model, str(tmp_path / "c"), cache)
    assert rebuilt["build_cache"]["hit"] is False and "onnx" in heavy


def test_only_arguments_with_plain_values_take_the_index() -> None:
    call = parse(["-v", "build", "m.onnx", "-o", "out", "--cache-dir=c", "--shapes", "x:1x3", "--no-plugins",
                  "--weights-by-reference"])
    assert call is not None
    assert (call.model, call.output, call.cache_dir) == ("m.onnx", "out", "c")
    assert call.argv == ["build", "<model>", "--cache-dir", "c", "--shapes", "x:1x3", "--no-plugins",
                         "--weights-by-reference"]
    for extra in (["--report", "r.json"], ["--inputs", "x.npz"], ["--calibration-data", "d"], ["--sign-key", "k"],
                  ["--timing-cache", "t"], ["--precision-plan", "p.json"], ["--device", "0"], ["--min", "x:1"],
                  ["second.onnx"], ["--shapes"], ["--precision", "auto"], ["--precision=auto"]):
        assert parse(["build", "m.onnx", "-o", "out", "--cache-dir", "c", *extra]) is None, extra
    assert parse(["build", "m.onnx", "-o", "out", "--cache-dir", "c", "--precision", "fp16"]) is not None
    assert parse(["build", "m.onnx", "-o", "out"]) is None
    assert parse(["inspect", "m.onnx", "--cache-dir", "c"]) is None


def test_a_repeated_build_by_reference_takes_the_index_and_a_touched_model_misses(tmp_path) -> None:
    """The index key of a --weights-by-reference build holds the model's path, size and time,
    which the folder records: the same file answers before onnx loads, the file touched (same
    bytes) goes the usual way and gets a folder that refers to it as it is now."""
    model, cache = str(tmp_path / "mlp.onnx"), str(tmp_path / "cache")
    write_mlp(str(tmp_path / "ext.onnx"), 192, 2)  # MatMul weights of 144 KiB: past 64 KiB, referred to
    onnx.save(onnx.load(str(tmp_path / "ext.onnx")), model)
    shapes = ("--shapes", "x:2x192")

    def by_reference(out: str, *extra: str) -> tuple[dict, list[str], str]:
        return build_in_child(model, str(tmp_path / out), cache, *extra, shapes=shapes)

    first, _, _ = by_reference("a", "--weights-by-reference")
    hit, heavy, printed = by_reference("b", "--weights-by-reference")
    assert heavy == [] and hit["build_cache"] == {"key": first["build_cache"]["key"], "hit": True}
    assert hit["weights"] == first["weights"] and [f["file"] for f in hit["weights"]["files"]] == ["mlp.onnx"]
    assert f"weights: referred to where they are, not copied: {model}" in printed
    copying, _, _ = by_reference("c")
    assert copying["build_cache"]["key"] != first["build_cache"]["key"] and "weights" not in copying
    st = os.stat(model)
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    touched, heavy, _ = by_reference("d", "--weights-by-reference")
    assert touched["build_cache"]["hit"] is False and "onnx" in heavy
    assert touched["weights"]["files"][0]["mtime_ns"] == st.st_mtime_ns + 10**9
    x = np.random.default_rng(0).standard_normal((2, 192)).astype(np.float32)
    ours = Session.load(str(tmp_path / "d"), SessionOptions(emulate=True)).run(None, {"x": x})[0]
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)


def test_a_model_file_past_what_the_lookup_reads_is_read_once_and_indexed_after_the_build(
        tmp_path, monkeypatch) -> None:
    """A model file larger than the index lookup reads before a build (READ_BEFORE_BUILD_BYTES;
    ResNet-50's 97 MiB took 0.2 s to hash), whose digest the cache does not remember, is not read
    by the lookup (the build starts at once, and hashes it for its own key): the model is read
    once, the index is made after the build, and the same command line then finds it."""
    monkeypatch.setattr(_build_hit, "READ_BEFORE_BUILD_BYTES", 0)
    model, cache = demo_copy(str(tmp_path / "demo.onnx")), str(tmp_path / "cache")
    os.utime(model, (os.path.getmtime(model) - 60,) * 2)  # (a file written a while ago: its digest is kept)
    argv = ["build", model, "-o", str(tmp_path / "a"), "--cache-dir", cache, *SHAPES]
    call, index = _build_hit.lookup_index(argv)
    assert call is not None and call.model == model and index is None
    reads: list[str] = []
    real = build_cache._sha256_finding

    def counted(path: str, needle: bytes | None) -> tuple[str, bool]:
        reads.append(path)
        return real(path, needle)

    monkeypatch.setattr(build_cache, "_sha256_finding", counted)
    assert main(argv) == 0
    assert reads == [os.path.abspath(model)]
    call, index = _build_hit.lookup_index(argv)
    assert index is not None and os.listdir(os.path.join(cache, BUILDS, INDEX)) == [index + ".json"]
    assert main(["build", model, "-o", str(tmp_path / "b"), "--cache-dir", cache, *SHAPES]) == 0
    with open(tmp_path / "b" / "manifest.json") as f:
        assert json.load(f)["build_cache"]["hit"] is True
    assert reads == [os.path.abspath(model)]

"""Writing a build folder: its model files are written while the engines build (before the
build has said its last word on the plan), and the folder holds exactly the files of the plan it
ends with; the manifest's text; a head start's child ended without waiting for the kernel.
Everything real: TensorRT-RTX plans and builds, ONNX Runtime runs the folder."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import trt_backend
from partitioner import PartitionOptions
from tests.helpers import refuse_to_start
from tests.support.graphs import CONV_RESIZE_PROFILE, conv_resize_conv
from trt_backend.artifacts.seal import manifest_text
from trt_backend.engines.builder import BuildOptions
from trt_backend.session.options import SessionOptions

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_a_plan_its_build_changes_leaves_the_files_of_the_plan_it_ends_with(flavor, tmp_path) -> None:
    """Planned as TensorRT, ONNX Runtime, TensorRT, and both TensorRT segments refused by the
    builder (no workspace): the three segment files written while the engines built give way to
    the one file of the plan the build ends with, and the folder runs as the model does."""
    path, out = str(tmp_path / "crc.onnx"), str(tmp_path / "built")
    onnx.save(conv_resize_conv(), path)
    partition = PartitionOptions(min_segment_size=1, plugins=())
    planned = trt_backend.make_plan(path, partition)
    assert [s.backend for s in planned.segments] == ["tensorrt", "onnxruntime", "tensorrt"]
    manifest = trt_backend.build(path, out, CONV_RESIZE_PROFILE,
                                 SessionOptions(partition=partition, build=BuildOptions(workspace_bytes=0)))
    assert [s["backend"] for s in manifest["segments"]] == ["onnxruntime"]
    assert sorted(os.listdir(out)) == ["manifest.json", "model.onnx", "segment_0.onnx"]
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    expected = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    [got] = trt_backend.load(out).run(None, {"x": x})
    np.testing.assert_array_equal(got, expected)


def test_a_folder_built_as_planned_holds_each_file_once_as_its_manifest_says(flavor, tmp_path) -> None:
    """Built as planned (TensorRT, ONNX Runtime, TensorRT): the segment files written while the
    engines built are the ones the manifest lists, hashes and all (the folder loads: its digest
    and every file's SHA-256 are checked)."""
    path, out = str(tmp_path / "crc.onnx"), str(tmp_path / "built")
    onnx.save(conv_resize_conv(), path)
    manifest = trt_backend.build(path, out, CONV_RESIZE_PROFILE,
                                 SessionOptions(partition=PartitionOptions(min_segment_size=1, plugins=())))
    assert [s["backend"] for s in manifest["segments"]] == ["tensorrt", "onnxruntime", "tensorrt"]
    assert sorted(os.listdir(out)) == ["manifest.json", "model.onnx", "segment_0.engine", "segment_0.onnx",
                                       "segment_1.onnx", "segment_2.engine", "segment_2.onnx"]
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    expected = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    [got] = trt_backend.load(out).run(None, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_the_manifest_text_is_its_json_with_the_node_rows_on_one_line() -> None:
    nodes = [{"index": i, "name": f"n{i}", "op_type": "Relu"} for i in range(3)]
    manifest = {"format": 2, "plan": {"segments": [{"id": 0, "inputs": ["x"]}], "nodes": nodes}, "segments": []}
    text = manifest_text(manifest)
    assert json.loads(text) == manifest
    assert f'  "nodes": {json.dumps(nodes)}' in text.splitlines()  # the rows on one line, the rest indented
    assert '  "segments": [' in text.splitlines()
    # a tensor named as the text stands in for the rows: written all indented, and still the manifest
    odd = {"format": 2, "plan": {"segments": [{"id": 0, "inputs": ["\0nodes\0"]}], "nodes": nodes}}
    assert json.loads(manifest_text(odd)) == odd


_CHILDREN = """
def children():
    mine = []
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if p.isdigit() and int(fields[1]) == os.getpid():
            mine.append((int(p), fields[0]))
    return mine
def settled():
    deadline = time.monotonic() + 20
    while children() and time.monotonic() < deadline:
        time.sleep(0.02)
    return children()
"""


def _python(script: str) -> str:
    if not hasattr(os, "fork") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("a child is forked only on Linux with two CPUs or more")
    proc = subprocess.run([sys.executable, "-c", "import os, time\n" + _CHILDREN + script], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_a_killed_child_is_reaped_without_being_waited_for() -> None:
    """``Forked.kill`` does not wait for the child to end; it leaves no zombie behind either, and
    a fork right after it (the next build's head start) is still a fork, not a thread."""
    out = _python("""
from trt_backend import _forked
child = _forked.Forked.start(lambda send: time.sleep(60) or {}, "a sleeping child")
assert child is not None and [pid for pid, _ in children()] == [child.pid], children()
child.kill()
again = _forked.Forked.start(lambda send: time.sleep(60) or {}, "another")
print("FORKED AGAIN", again is not None)
again.kill()
print("LEFT", settled())
""")
    assert "FORKED AGAIN True" in out and "LEFT []" in out


def test_builds_through_the_python_door_leave_no_process_behind(flavor, tmp_path) -> None:
    """Three builds of a model file in one process (each forks a head start, whose engine is
    taken or not): no child left running or a zombie afterwards."""
    path = str(tmp_path / "crc.onnx")
    onnx.save(conv_resize_conv(), path)
    out = _python(f"""
import trt_backend
from partitioner import PartitionOptions
from trt_backend.session.options import SessionOptions
from tests.support.graphs import CONV_RESIZE_PROFILE
cut = PartitionOptions(min_segment_size=1, plugins=())
for k, partition in enumerate([PartitionOptions(), cut, PartitionOptions()]):
    options = SessionOptions(partition=partition)
    trt_backend.build({path!r}, {str(tmp_path)!r} + f"/built{{k}}", CONV_RESIZE_PROFILE, options)
    print("LEFT", k, settled())
""")
    assert [line for line in out.splitlines() if line.startswith("LEFT")] == ["LEFT 0 []", "LEFT 1 []", "LEFT 2 []"]


@pytest.mark.parametrize("failure", [RuntimeError("can't start new thread"), KeyboardInterrupt()])
def test_a_thread_for_the_files_that_does_not_start_leaves_the_build_whole_or_nothing(failure, flavor, tmp_path,
                                                                                      monkeypatch) -> None:
    """No thread to be had for the folder's files: they are made after the build, the same.
    A Ctrl-C as it starts: the build ends with it, and nothing of the folder is left."""
    path, out = str(tmp_path / "crc.onnx"), str(tmp_path / "built")
    onnx.save(conv_resize_conv(), path)
    refuse_to_start(monkeypatch, "build-folder-files", failure)
    options = SessionOptions(partition=PartitionOptions(min_segment_size=1, plugins=()))
    if isinstance(failure, KeyboardInterrupt):
        with pytest.raises(KeyboardInterrupt):
            trt_backend.build(path, out, CONV_RESIZE_PROFILE, options)
        assert sorted(os.listdir(tmp_path)) == ["crc.onnx"]
        return
    manifest = trt_backend.build(path, out, CONV_RESIZE_PROFILE, options)
    assert [s["backend"] for s in manifest["segments"]] == ["tensorrt", "onnxruntime", "tensorrt"]
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype(np.float32)
    expected = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(trt_backend.load(out).run(None, {"x": x})[0], expected, rtol=1e-5, atol=1e-5)

"""Properties found by hand, kept as tests: a multi-segment session run
from 8 threads at mixed batch sizes equals whole-model ONNX Runtime; three processes building into
one engine cache all succeed with loadable folders; a build killed with SIGKILL at its riskiest
points leaves no half-written folder or cache entry; ``build -o`` into a place it cannot write is
one line, exit 1. (Cache corruption detected and rebuilt: tests/trt_backend/engines/test_cache.py;
a tampered engine in a build folder refused: test_build_folder.py.)"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest

from tests.helpers import in_threads
from trt_backend.cli import main
from trt_backend.data.demo import DEMO_PATH
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PROFILE = [{"image": ((1, 3, 32, 32), (4, 3, 32, 32), (8, 3, 32, 32))}]
BUILD_ARGS = ["--min-shapes", "image:1x3x32x32", "--opt-shapes", "image:4x3x32x32", "--max-shapes", "image:8x3x32x32"]
pytestmark = pytest.mark.usefixtures("flavor")


def reference(x: np.ndarray) -> list[np.ndarray]:
    return ort.InferenceSession(DEMO_PATH, providers=["CPUExecutionProvider"]).run(None, {"image": x})


def assert_matches_reference(got: list, x: np.ndarray) -> None:
    want = reference(x)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)  # probabilities
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)  # top scores
    np.testing.assert_array_equal(got[2], want[2])  # top classes


def test_eight_threads_at_mixed_batch_sizes_equal_whole_model_onnx_runtime() -> None:
    sess = Session(DEMO_PATH, PROFILE, SessionOptions(emulate=True))
    assert sess.segment_executors == ["emulated", "onnxruntime", "emulated"]
    rng = np.random.default_rng(8)
    work = [[rng.standard_normal((int(b), 3, 32, 32)).astype(np.float32) for b in rng.integers(1, 9, size=12)]
            for _ in range(8)]
    results: dict[tuple[int, int], list] = {}

    def worker(t: int) -> None:
        for k, x in enumerate(work[t]):
            results[t, k] = sess.run(None, {"image": x})

    errors = in_threads(worker, 8)
    assert not errors, errors
    assert len(results) == 96 and len({x.shape[0] for xs in work for x in xs}) == 8  # every batch size 1..8
    for (t, k), got in results.items():
        assert_matches_reference(got, work[t][k])


def cli(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "trt_backend", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def check_folder(folder: str) -> None:
    """A whole build folder: loads (digest, files, signatures checked) and runs like ONNX Runtime."""
    sess = Session.load(folder, SessionOptions(emulate=True))
    x = np.random.default_rng(1).standard_normal((5, 3, 32, 32)).astype(np.float32)
    assert_matches_reference(sess.run(None, {"image": x}), x)


def test_three_processes_building_into_one_cache_all_succeed(tmp_path) -> None:
    cache = str(tmp_path / "cache")
    procs = [cli("build", DEMO_PATH, "-o", str(tmp_path / f"out{k}"), "--cache-dir", cache, *BUILD_ARGS)
             for k in range(3)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in outs]
    for k in range(3):
        check_folder(str(tmp_path / f"out{k}"))
    engines = [json.load(open(tmp_path / f"out{k}" / "manifest.json"))["segments"] for k in range(3)]
    # one cache, two segments: all three folders hold the same engines (built once, or waited for)
    assert [[s["engine_sha256"] for s in segs] for segs in engines] == [[s["engine_sha256"] for s in engines[0]]] * 3
    from trt_backend.engines.cache import EngineCache

    assert len(EngineCache(cache).keys()) == 2


KILLER = r"""
import os, signal, sys
import trt_backend.engines.cache as cache_module
import trt_backend.artifacts.write as folder_module
from trt_backend.cli import main

point = sys.argv[1]

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

if point == "cache":  # an engine file written, its entry's manifest not yet
    real = cache_module.write_atomic
    calls = []
    def write(path, data, **kwargs):
        calls.append(path)
        if path.endswith("manifest.json"):
            die()
        real(path, data, **kwargs)
    cache_module.write_atomic = write
elif point == "files":  # every segment file written into the temp folder, the manifest not yet
    folder_module.write_atomic = die
elif point == "swap":  # the folders exchanged in one step, the old one (now at the temp path) not yet removed
    import trt_backend._files as files_module
    real_exchange = files_module._exchange
    def exchange(a, b):
        if real_exchange(a, b):
            die()
        return False
    files_module._exchange = exchange
elif point == "swap-fallback":  # no exchange: the old folder moved aside, the new one not yet in its place
    import trt_backend._files as files_module
    files_module._exchange = lambda a, b: False
    class Os:
        replaced = 0
        def __getattr__(self, name):
            return getattr(os, name)
        def replace(self, a, b):
            Os.replaced += 1
            if Os.replaced == 2:
                die()
            os.replace(a, b)
    import trt_backend._files as files_module
    real_swap = files_module.swap_in_folder
    def swap(tmp, out_dir):
        files_module.os = Os()  # (only the swap's own moves are counted)
        real_swap(tmp, out_dir)
    folder_module.swap_in_folder = swap
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("point", ["cache", "files", "swap", "swap-fallback"])
def test_a_build_killed_with_sigkill_leaves_nothing_half_written(tmp_path, point: str) -> None:
    """Killed anywhere, a build leaves the old folder whole or (killed after the atomic exchange)
    the new one whole; only where the system has no exchange can a kill between its two moves
    leave no folder (the old one is kept beside it, hidden)."""
    out, cache = str(tmp_path / "out"), str(tmp_path / "cache")
    if point != "cache":  # a finished earlier build is there to be replaced
        assert main(["build", DEMO_PATH, "-o", out, "--cache-dir", cache, *BUILD_ARGS]) == 0  # (Softmax in TensorRT)
        before = json.load(open(os.path.join(out, "manifest.json")))["digest"]
    proc = subprocess.run([sys.executable, "-c", KILLER, point, "build", DEMO_PATH, "-o", out, "--cache-dir",
                           cache, "--exclude-ops", "Softmax", *BUILD_ARGS], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    if point == "swap" and sys.platform.startswith("linux"):  # the new folder is in place, whole
        new = json.load(open(os.path.join(out, "manifest.json")))
        assert new["digest"] != before and new["segments"][-1]["backend"] == "onnxruntime"
        check_folder(out)
    elif os.path.exists(out):  # the old folder, whole: never a mix of old and new, never a partial one
        assert json.load(open(os.path.join(out, "manifest.json")))["digest"] == before
        check_folder(out)
    else:
        assert point in ("cache", "swap-fallback")
    # whatever the kill left (an engine file without its entry, temp folders beside the output),
    # the next build into the same cache and folder succeeds and its folder is whole
    assert main(["build", DEMO_PATH, "-o", out, "--cache-dir", cache, "--exclude-ops", "Softmax", *BUILD_ARGS]) == 0
    check_folder(out)
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    assert [s["backend"] for s in manifest["segments"]][-1] == "onnxruntime"  # the new build: Softmax excluded


def test_build_into_a_place_it_cannot_write_is_one_line(tmp_path, capsys) -> None:
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    places = [(str(tmp_path / "a_file" / "out"), f"{tmp_path / 'a_file'} is not a folder")]
    (tmp_path / "a_file").write_text("x")
    if os.geteuid() != 0:
        os.chmod(blocked, 0o500)
        places.append((str(blocked / "out"), f"cannot create files in folder {blocked}"))
    if os.path.isdir("/proc/self"):  # root may write anywhere but here
        places.append(("/proc/trt-backend-out", "cannot create files in folder /proc"))
    try:
        for place, message in places:
            assert main(["build", DEMO_PATH, "-o", place, "--shapes", "image:2x3x32x32"]) == 1
            err = capsys.readouterr().err.strip()
            assert err.startswith(f"trt-backend: error: cannot write -o {place}: "), err
            assert message in err and "\n" not in err, err
    finally:
        os.chmod(blocked, 0o700)
    assert os.listdir(blocked) == []

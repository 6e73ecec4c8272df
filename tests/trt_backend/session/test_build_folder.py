"""``trt-backend build`` folders: real TensorRT-RTX builds on CPU, a load that plans, calibrates
and builds nothing, and clear errors for edited, corrupt or foreign folders."""
from __future__ import annotations

import json
import os

import numpy as np
import onnxruntime as ort
import pytest

import trt_backend
from tests.helpers import compile_stages, stage_spy
from trt_backend.cli import main
from trt_backend.data.demo import DEMO_PATH
from trt_backend.errors import ArtifactError, OptionsError
from trt_backend.session.options import SessionOptions
from trt_backend.artifacts.seal import seal
from trt_backend.session.session import Session

PROFILE = [{"image": ((1, 3, 32, 32), (2, 3, 32, 32), (4, 3, 32, 32))}]
pytestmark = pytest.mark.usefixtures("flavor")


BUILD_STAGES: list[str] = []  # what the spy saw while the folder was built


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> str:
    from trt_backend.artifacts.write import build as build_folder_build

    out = str(tmp_path_factory.mktemp("b") / "demo")
    with stage_spy(compile_stages()) as calls:
        build_folder_build(DEMO_PATH, out, PROFILE)
    BUILD_STAGES[:] = calls
    return out


def copy_of(src: str, dst) -> str:
    import shutil

    shutil.copytree(src, dst)
    return str(dst)


def test_manifest_lists_files_with_hashes_and_real_engines(built) -> None:
    manifest = json.load(open(os.path.join(built, "manifest.json")))
    assert [(s["backend"], s["engine"] is not None) for s in manifest["segments"]] == [
        ("tensorrt", True), ("onnxruntime", False), ("tensorrt", True)]
    for seg in manifest["segments"]:
        assert os.path.getsize(os.path.join(built, seg["model"])) > 0
        if seg["engine"]:
            assert seg["engine_bytes"] == os.path.getsize(os.path.join(built, seg["engine"])) > 10_000
            assert seg["build_seconds"] > 0
    assert manifest["tensorrt"].startswith("tensorrt") and manifest["gpu_target"]
    seg0 = manifest["plan"]["segments"][0]
    assert seg0["profiles"][0]["image"]["max"] == [4, 3, 32, 32]
    assert sorted(os.listdir(os.path.dirname(built))) == ["demo"]  # no temp folders left behind


def test_the_stage_spy_sees_planning_derivation_and_building(built) -> None:
    """The spy the build-folder tests rely on saw the folder's build plan the model, derive its
    profiles and build its engines."""
    assert {"trt_backend.compiler.compile", "trt_backend.planning.plan_for", "partitioner.plan.plan_model",
            "trt_backend.profiles.derive.derive_profiles",
            "trt_backend.engines.fallback.build_with_fallback"} <= set(BUILD_STAGES), BUILD_STAGES


def test_load_runs_without_planning_calibrating_or_building(built) -> None:
    with stage_spy(compile_stages()) as calls:
        sess = Session.load(built, SessionOptions(emulate=True))
    assert calls == []
    assert sess.segment_executors == ["emulated", "onnxruntime", "emulated"]
    x = np.random.default_rng(3).standard_normal((3, 3, 32, 32)).astype(np.float32)
    got = sess.run(None, {"image": x})
    want = ort.InferenceSession(DEMO_PATH, providers=["CPUExecutionProvider"]).run(None, {"image": x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[2], want[2])


def test_edited_or_corrupt_folders_are_refused(built, tmp_path) -> None:
    folder = copy_of(built, tmp_path / "corrupt")
    with open(os.path.join(folder, "segment_2.engine"), "r+b") as f:
        f.seek(100)
        f.write(b"\x00garbage\x00")
    with pytest.raises(ArtifactError, match=r"segment_2\.engine does not match its SHA-256 in manifest\.json"):
        trt_backend.load(folder)
    folder = copy_of(built, tmp_path / "missing")
    os.remove(os.path.join(folder, "segment_0.onnx"))
    with pytest.raises(ArtifactError, match=r"segment_0\.onnx listed in manifest\.json is missing"):
        trt_backend.load(folder)
    folder = copy_of(built, tmp_path / "edited")
    path = os.path.join(folder, "manifest.json")
    manifest = json.load(open(path))
    del manifest["segments"][0]["model_sha256"]
    json.dump(seal(manifest), open(path, "w"))  # (re-digested: the manifest's own checks still hold)
    with pytest.raises(ArtifactError, match="manifest lacks 'model_sha256'"):
        trt_backend.load(folder)
    with pytest.raises(ArtifactError, match="no manifest.json"):
        trt_backend.load(str(tmp_path))


def test_engines_of_another_tensorrt_version_are_refused_or_rebuilt(built, tmp_path) -> None:
    folder = copy_of(built, tmp_path / "foreign")
    path = os.path.join(folder, "manifest.json")
    manifest = json.load(open(path))
    manifest["tensorrt"] = "tensorrt 9.0.0"
    json.dump(seal(manifest), open(path, "w"))  # re-digested, as a real foreign folder would be
    with pytest.raises(ArtifactError, match=r"engines were built with tensorrt 9\.0\.0, this machine has tensorrt"):
        trt_backend.load(folder, SessionOptions(emulate=False))
    from trt_backend.errors import TensorRTUnavailableError

    with pytest.raises(TensorRTUnavailableError, match="no CUDA device"):  # rebuild asked: then it needs a GPU
        trt_backend.load(folder, SessionOptions(emulate=False), rebuild=True)
    assert Session.load(folder, SessionOptions(emulate=True)).segment_executors[1] == "onnxruntime"


def test_build_refuses_to_replace_an_unrelated_folder_and_replaces_its_own(built, tmp_path, capsys) -> None:
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_bytes(b"meow")
    assert main(["build", DEMO_PATH, "-o", str(other), "--shapes", "image:2x3x32x32"]) == 1
    assert "holds no manifest.json; refusing to replace it" in capsys.readouterr().err
    assert os.listdir(other) == ["cat.jpg"]
    out = copy_of(built, tmp_path / "again")
    assert main(["build", DEMO_PATH, "-o", out, "--shapes", "image:2x3x32x32", "--exclude-ops", "Softmax",
                 "--min-segment-size", "1"]) == 0
    text = capsys.readouterr().out
    assert "5 segment(s), 3 engine(s)" in text
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    assert manifest["plan"]["segments"][0]["profiles"][0]["image"]["min"] == [2, 3, 32, 32]
    assert sorted(f for f in os.listdir(out) if f.endswith(".engine")) == [
        "segment_0.engine", "segment_2.engine", "segment_4.engine"]


def test_build_errors_are_one_line(tmp_path, capsys) -> None:
    assert main(["build", str(tmp_path / "nope.onnx"), "-o", str(tmp_path / "o")]) == 1
    assert "no such file" in capsys.readouterr().err
    assert main(["build", DEMO_PATH, "-o", str(tmp_path / "o"), "--workspace-mb", "-1"]) == 1
    assert "--workspace-mb must be a whole number >= 0" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "o")


def test_plugin_plans_are_not_built_with_tensorrt_rtx(tmp_path, capsys, flavor) -> None:
    import onnx

    from tests.support.resize_models import crop_cnn
    from partitioner import OptionsError, PartitionOptions
    from plugins import default_registry
    from trt_backend.engines.fallback import plugin_rewrite
    from trt_backend.planning import make_plan

    if not flavor.is_rtx:
        pytest.skip("full TensorRT installed: plugin engines are buildable here")
    path = tmp_path / "crop.onnx"
    onnx.save(crop_cnn(), str(path))
    plan = make_plan(str(path), PartitionOptions(plugins=default_registry().claims(), target="tensorrt"))
    assert any(n.verdict.startswith("plugin:") for n in plan.nodes)
    with pytest.raises(OptionsError, match=r"puts 1 node\(s\) on plugins, which tensorrt_rtx .* cannot run"):
        plugin_rewrite(plan, flavor)
    assert plugin_rewrite(make_plan(str(path), PartitionOptions(target="tensorrt_rtx")), flavor) is None
    assert main(["build", str(path), "-o", str(tmp_path / "b"), "--target", "tensorrt", "--shapes", "x:1x3x16x16"]) == 1
    assert "cannot run" in capsys.readouterr().err and not os.path.exists(tmp_path / "b")


def test_run_and_compare_take_a_build_folder(built, capsys) -> None:
    """Build once, run many: run DIR and compare DIR use the folder's plan, profiles and engines
    (emulated here) with no planning, calibration or build; Session(DIR) too."""
    with stage_spy(compile_stages()) as calls:
        assert main(["run", built, "--shapes", "image:3x3x32x32", "--emulate"]) == 0
        out = capsys.readouterr().out
        assert "probs: shape (3, 10) float32" in out and "executors: emulated x2, onnxruntime x1" in out
        assert main(["compare", built, "--emulate"]) == 0
        assert "PASSED | 1 comparison(s)" in capsys.readouterr().out
        sess = Session(built, options=SessionOptions(emulate=True))
    assert calls == []
    assert sess.segment_executors == ["emulated", "onnxruntime", "emulated"]
    # Its own profiles change nothing and are taken, at both doors; other ones are refused, at both.
    assert Session(built, PROFILE, SessionOptions(emulate=True)).input_profiles == sess.input_profiles
    other = [{"image": ((1, 3, 32, 32), (3, 3, 32, 32), (4, 3, 32, 32))}]
    with pytest.raises(OptionsError, match="profiles other than the ones it was built with would change what was"):
        Session(built, other, SessionOptions(emulate=True))
    same = ["--min-shapes", "image:1x3x32x32", "--opt-shapes", "image:2x3x32x32", "--max-shapes", "image:4x3x32x32"]
    assert main(["run", built, *same, "--emulate"]) == 0
    capsys.readouterr()
    assert main(["run", built, *same[:3], "image:3x3x32x32", *same[4:], "--emulate"]) == 1
    assert "--min-shapes would change what was built" in capsys.readouterr().err  # (the three as one profile)


def test_a_folder_takes_the_partition_options_it_was_built_with_in_another_process(tmp_path) -> None:
    """The manifest records the partition options in a form that is the same in every process (the
    plugins' functions by name, not by address), so Session.load with the options a folder was
    built with (here with the plugin registry, as the CLI builds) opens it in a later process too,
    and other options are still refused."""
    import subprocess
    import sys

    from plugins import default_registry

    out = str(tmp_path / "b")
    plugins = default_registry().claims()
    trt_backend.build(DEMO_PATH, out, [{"image": ((2, 3, 32, 32),) * 3}],
                      SessionOptions(exclude_ops=("Gemm",), plugins=plugins))
    with open(os.path.join(out, "manifest.json")) as f:
        assert " at 0x" not in json.dumps(json.load(f)["build"]["partition"])
    code = ("from plugins import default_registry\n"
            "from trt_backend import Session, SessionOptions\n"
            "from trt_backend.errors import OptionsError\n"
            "plugins = default_registry().claims()\n"
            f"Session.load({out!r}, SessionOptions(exclude_ops=('Gemm',), plugins=plugins)).close()\n"
            "try:\n"
            f"    Session.load({out!r}, SessionOptions(exclude_ops=('Conv',), plugins=plugins))\n"
            "except OptionsError as e:\n"
            "    print('refused:', e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused:" in done.stdout and "--exclude-ops" in done.stdout


def test_load_of_a_model_file_says_it_is_a_model_file(tmp_path) -> None:
    """Session.load of an .onnx file said "manifest.json: unreadable (Not a directory)"."""
    with pytest.raises(ArtifactError, match=r"demo.onnx: a file, not a trt-backend build folder; a model file is "
                                            r"opened with Session\(path\)"):
        Session.load(DEMO_PATH)
    other = tmp_path / "notes.txt"
    other.write_text("x")
    with pytest.raises(ArtifactError, match=r"notes.txt: a file, not a trt-backend build folder$"):
        Session.load(str(other))

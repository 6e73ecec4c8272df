"""Build once, run many from the command line: ``bench DIR`` measures a build folder's engines as
built and its JSON says no build happened; ``inspect DIR`` shows the built plan, profiles and
engines; ``--max-memory`` refuses an oversized tensor in one line on every command that allocates."""
from __future__ import annotations

import json
import os
from collections.abc import Iterator

import numpy as np
import pytest

from tests.helpers import compile_stages, stage_spy
from trt_backend.cli import main
from trt_backend.data.demo import DEMO_PATH
from trt_backend.errors import MemoryLimitError, OptionsError
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

FAST = ["--warmup-ms", "20", "--duration-s", "0.1", "--iterations", "3", "--rounds", "1", "--no-progress"]
pytestmark = pytest.mark.usefixtures("flavor")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("folder") / "demo")
    assert main(["build", DEMO_PATH, "-o", out, "--min-shapes", "image:1x3x32x32", "--opt-shapes", "image:2x3x32x32",
                 "--max-shapes", "image:8x3x32x32"]) == 0
    return out


@pytest.fixture
def nothing_planned_calibrated_or_built() -> Iterator[None]:
    """No stage that plans, derives profiles or builds runs within the test (see
    tests/trt_backend/session/test_build_folder.py for the spy seeing them when they do)."""
    with stage_spy(compile_stages()) as calls:
        yield
    assert calls == [], calls


def test_bench_on_a_build_folder_records_that_nothing_was_built(built, tmp_path, capsys,
                                                                 nothing_planned_calibrated_or_built) -> None:
    out = tmp_path / "bench.json"
    assert main(["bench", built, "--shapes", "image:3x3x32x32", "--emulate", "--baselines", "ort-cpu,trt-whole",
                 *FAST, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    manifest = json.load(open(os.path.join(built, "manifest.json")))
    doc = json.loads(out.read_text())
    assert doc["source"] == "build folder" and doc["built"] is False and doc["signed"] is False
    assert doc["manifest_digest"] == manifest["digest"] and doc["folder"] == built
    assert doc["built_with"] == manifest["tensorrt"] and doc["gpu_target"] == manifest["gpu_target"]
    assert doc["shapes"] == {"image": [3, 3, 32, 32]} and doc["settings"]["build"] is False
    ours, ort_cpu, whole = doc["runners"]
    assert ours["name"] == "trt-backend" and ours["available"] and ours["iterations"] >= 3
    assert [s["executor"] for s in ours["segments"]] == ["emulated", "onnxruntime", "emulated"]
    assert ours["build"]["skipped"].startswith("build folder") and ours["build"]["engine_bytes"] == {
        str(s["id"]): s["engine_bytes"] for s in manifest["segments"] if s["engine"]}
    assert ort_cpu["available"] and not whole["available"] and "build folder is measured as built" in whole["reason"]
    assert f"build folder {built} (manifest {manifest['digest']})" in text


def test_bench_of_a_model_says_it_built(tmp_path) -> None:
    out = tmp_path / "bench.json"
    assert main(["bench", DEMO_PATH, "--shapes", "image:2x3x32x32", "--emulate", "--baselines", "none", *FAST,
                 "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["source"] == "model" and doc["built"] is True and "manifest_digest" not in doc


def refused(built: str, flag: str) -> str:
    return (f"trt-backend: error: {built}: {flag} would change what was built; a build folder runs as it was built "
            f"(give {flag} to trt-backend build)")


def test_bench_on_a_build_folder_refuses_profiles_and_outside_shapes(built, capsys) -> None:
    assert main(["bench", built, "--min-shapes", "image:1x3x32x32", "--opt-shapes", "image:1x3x32x32",
                 "--max-shapes", "image:1x3x32x32", *FAST]) == 1
    assert capsys.readouterr().err.strip() == refused(built, "--min-shapes")
    assert main(["bench", built, "--shapes", "image:9x3x32x32", "--emulate", *FAST]) == 1
    err = capsys.readouterr().err.strip()
    assert "image" in err and "\n" not in err and "9" in err and "outside every profile" in err
    assert main(["bench", built, "--shapes", "image:8x3x32x32", "--emulate", "--baselines", "none", *FAST]) == 0
    capsys.readouterr()  # a shape inside the folder's profiles only shapes the inputs


@pytest.mark.parametrize("command", ["bench", "run", "compare"])
@pytest.mark.parametrize("flag", [["--precision", "fp16"], ["--calibration-data", "random"],
                                  ["--exclude-ops", "Conv"], ["--flavor", "tensorrt"], ["--max-build-memory", "1G"],
                                  ["--min-shapes", "image:1x3x32x32", "--opt-shapes", "image:2x3x32x32",
                                   "--max-shapes", "image:4x3x32x32"]])
def test_a_build_folder_refuses_what_would_change_the_build(built, command, flag, capsys,
                                                            nothing_planned_calibrated_or_built) -> None:
    """Every command gives the same one line: the folder, the first such flag, where it belongs."""
    code = main([command, built, "--emulate", *flag, *(FAST if command == "bench" else [])])
    assert code == (2 if command == "compare" else 1)  # (compare keeps 1 for "outputs differ")
    assert capsys.readouterr().err.strip() == refused(built, flag[0])


def test_inspect_shows_a_build_folder_as_built(built, tmp_path, capsys, nothing_planned_calibrated_or_built) -> None:
    manifest = json.load(open(os.path.join(built, "manifest.json")))
    assert main(["inspect", built, "--json", str(tmp_path / "plan.json"), "--export-segments",
                 str(tmp_path / "segs")]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"build folder {built} | manifest {manifest['digest']} | unsigned")
    assert f"engines for {manifest['tensorrt']} | GPU target {manifest['gpu_target']}" in text
    assert "precision fp32" in text and "this machine: same TensorRT and GPU target" in text
    assert "3 segments (2 TensorRT, 1 ONNX Runtime)" in text
    assert "image   1x3x32x32 / 2x3x32x32 / 8x3x32x32  user" in text
    for seg in manifest["segments"]:
        if seg["engine"]:
            assert f"{seg['engine']}  {seg['engine_bytes']}" in text
    assert json.loads((tmp_path / "plan.json").read_text()) == manifest["plan"]
    assert sorted(os.listdir(tmp_path / "segs")) == ["segment_0.onnx", "segment_1.onnx", "segment_2.onnx"]
    assert main(["inspect", built, "--exclude-ops", "Conv"]) == 1
    assert "--exclude-ops would change what was built" in capsys.readouterr().err
    assert main(["inspect", built, "--min-segment-size", "1"]) == 1


def test_max_memory_refuses_in_one_line(built, capsys) -> None:
    """--max-memory on run, bench, compare and build: the tensor, its shape and both sizes."""
    # 16x3x32x32 float32 is 192 KiB; 8x3x32x32 is 96 KiB; the limit 64K is below both
    cases = [["run", DEMO_PATH, "--shapes", "image:16x3x32x32", "--emulate"],
             ["run", built, "--shapes", "image:8x3x32x32", "--emulate"],
             ["compare", DEMO_PATH, "--shapes", "image:16x3x32x32", "--emulate"],
             ["build", DEMO_PATH, "-o", os.path.join(os.path.dirname(built), "never"), "--shapes", "image:16x3x32x32"],
             ["bench", DEMO_PATH, "--shapes", "image:16x3x32x32", "--emulate", *FAST]]
    for command in cases:
        assert main([*command, "--max-memory", "64K"]) == (2 if command[0] == "compare" else 1), command
        err = capsys.readouterr().err.strip()
        assert err.startswith("trt-backend: error: input 'image'") or err.startswith(
            "trt-backend: error: calibration input 'image'"), err
        assert "x3x32x32" not in err and "3, 32, 32) of float32 needs" in err
        assert err.endswith("more than the max_memory limit (--max-memory) of 64.0 KiB") and "\n" not in err
    assert not os.path.exists(os.path.join(os.path.dirname(built), "never"))
    assert main(["run", DEMO_PATH, "--shapes", "image:2x3x32x32", "--emulate", "--max-memory", "64K"]) == 0
    capsys.readouterr()
    assert main(["run", DEMO_PATH, "--max-memory", "lots"]) == 1
    assert capsys.readouterr().err.strip() == ("trt-backend: error: --max-memory: cannot read size 'lots'; "
                                               "write bytes or a size such as 8G, 512M, 1.5GiB")


def test_session_max_memory(built) -> None:
    with pytest.raises(MemoryLimitError, match=r"calibration input 'image': shape \(16, 3, 32, 32\) of float32 "
                                               r"needs 192\.0 KiB, more than the max_memory limit"):
        Session(DEMO_PATH, [{"image": (16, 3, 32, 32)}], SessionOptions(emulate=True, max_memory="128K"))
    sess = Session(built, options=SessionOptions(emulate=True, max_memory=1 << 20))
    assert sess.options.max_memory == 1 << 20
    out = sess.run(None, {"image": np.zeros((8, 3, 32, 32), np.float32)})
    assert out[0].shape == (8, 10)
    assert SessionOptions(max_memory="1.5G").max_memory == 3 << 29
    with pytest.raises(OptionsError, match="max_memory must be more than 0 bytes"):
        SessionOptions(max_memory=0)


def test_an_inputs_file_claiming_a_huge_array_is_refused_before_numpy_allocates(built, tmp_path, capsys) -> None:
    """An .npz member's header may claim any shape: its size is checked from the header first."""
    import io
    import zipfile

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                  "shape": (1 << 30, 3, 32, 32)})
    crafted = tmp_path / "big.npz"
    with zipfile.ZipFile(crafted, "w") as z:
        z.writestr("image.npy", b"\x93NUMPY\x01\x00" + header.getvalue()[8:] + b"\x00" * 64)
    assert main(["run", built, "--inputs", str(crafted), "--emulate"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"trt-backend: error: input 'image' in {crafted}: shape (1073741824, 3, 32, 32) of float32 "
                          "needs 12.0 TiB, ") and "\n" not in err
    np.savez(tmp_path / "ok.npz", image=np.zeros((2, 3, 32, 32), np.float32))
    assert main(["run", built, "--inputs", str(tmp_path / "ok.npz"), "--emulate", "--max-memory", "16K"]) == 1
    assert "input 'image' in" in capsys.readouterr().err
    assert main(["run", built, "--inputs", str(tmp_path / "ok.npz"), "--emulate", "--max-memory", "32K"]) == 0
    assert "probs: shape (2, 10) float32" in capsys.readouterr().out


def _conv_model(path: str, stored: int, cast_in: bool) -> None:
    """x -> Conv -> Relu -> y with the Conv's weights and tensors in ``stored`` (FLOAT16 or FLOAT);
    ``cast_in``: fp32 input and output around it, cast to and from ``stored``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    dtype = np.float16 if stored == TensorProto.FLOAT16 else np.float32
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(dtype), "w")
    io = TensorProto.FLOAT if cast_in else stored
    nodes = [helper.make_node("Conv", ["xs", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["ys"])]
    if cast_in:
        nodes = [helper.make_node("Cast", ["x"], ["xs"], to=stored), *nodes,
                 helper.make_node("Cast", ["ys"], ["y"], to=TensorProto.FLOAT)]
    else:
        nodes[0].input[0], nodes[-1].output[0] = "x", "y"
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", io, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", io, [1, 4, 8, 8])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_a_model_stored_in_fp16_is_not_labelled_by_the_build_option_alone(tmp_path, capsys) -> None:
    """A model stored in fp16 built "fp32": TensorRT computes the model's own types, so the build
    line, the manifest and ``inspect DIR`` say so (the label said fp32 alone); an fp32 model says
    nothing more."""
    from onnx import TensorProto

    cases = {"fp16": (TensorProto.FLOAT16, False), "casts": (TensorProto.FLOAT16, True),
             "fp32": (TensorProto.FLOAT, False)}
    said = {"fp16": "fp32 (computes in fp16: the model's own types)",
            "casts": "fp32 (fp16 in 4 of 6 float tensors: the model's own types)", "fp32": "fp32 segment_0.onnx"}
    for name, (stored, cast_in) in cases.items():
        path, folder = str(tmp_path / f"{name}.onnx"), str(tmp_path / name)
        _conv_model(path, stored, cast_in)
        capsys.readouterr()
        assert main(["build", path, "-o", folder]) == 0
        line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("  segment 0:"))
        assert said[name] in line, line
        with open(os.path.join(folder, "manifest.json")) as f:
            seg = json.load(f)["segments"][0]
        assert seg["precision"] == "fp32" and (("stored_types" in seg) == (name != "fp32")), seg
        assert main(["inspect", folder]) == 0
        header = capsys.readouterr().out.splitlines()[1]
        assert ("(segment 0: " in header) == (name != "fp32"), header


def test_fp16_of_a_model_stored_in_fp16_is_its_fp32_build(tmp_path, capsys) -> None:
    """--precision fp16 lowers nothing of a model stored in fp16: the folder was labelled fp16 and
    its emulation ran at another ONNX Runtime level than the reference, so the very engine of the
    fp32 build (same size, same nodes) compared FAILED there and PASSED here."""
    from onnx import TensorProto

    path = str(tmp_path / "fp16.onnx")
    _conv_model(path, TensorProto.FLOAT16, False)
    lines, reports = [], []
    for precision in ("fp32", "fp16"):
        folder = str(tmp_path / precision)
        assert main(["build", path, "-o", folder, "--precision", precision]) == 0
        lines.append(next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("  segment 0:")))
        assert main(["compare", folder, "--json", str(tmp_path / f"{precision}.json")]) == 0
        capsys.readouterr()
        with open(tmp_path / f"{precision}.json") as f:
            reports.append(json.load(f))
    assert lines[0].split(" engine ")[0] == lines[1].split(" engine ")[0]  # (both: fp32, the model's own fp16)
    assert "fp32 (computes in fp16: the model's own types)" in lines[1]
    assert [r["precision"] for r in reports] == ["fp32 (computing in the model's own fp16 types)"] * 2
    assert reports[0]["outputs"][0]["max_abs_error"] == reports[1]["outputs"][0]["max_abs_error"] == 0

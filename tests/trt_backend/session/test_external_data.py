"""A model whose weights are external data, end to end on a few MiB: real TensorRT-RTX parses
and builds of segments that reference the original data file, ONNX Runtime segments reading it
from their folder, build folders sharing one copy of the weights that still load
when moved, and one-line errors for missing or truncated data files."""
from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.support.external_mlp import write_mlp
from partitioner.errors import ModelTooLargeError
from partitioner.weights import is_external, read_in
from trt_backend.cli import main
from trt_backend.engines.builder import BuildOptions, build_segment, key_material
from trt_backend.errors import ArtifactError
from trt_backend.planning import make_plan
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

HIDDEN = 256
PROFILE = [{"x": ((1, HIDDEN), (4, HIDDEN), (8, HIDDEN))}]
SHAPES = ["--min-shapes", f"x:1x{HIDDEN}", "--opt-shapes", f"x:4x{HIDDEN}", "--max-shapes", f"x:8x{HIDDEN}"]
pytestmark = pytest.mark.usefixtures("flavor")


@pytest.fixture(scope="module")
def mlp(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("m") / "mlp.onnx")
    write_mlp(path, HIDDEN, 6)
    return path


def feeds(batch: int = 3) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((batch, HIDDEN)).astype(np.float32)}


def reference(path: str) -> np.ndarray:
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds())[0]


@pytest.fixture(scope="module")
def plan(mlp):
    return make_plan(mlp, flavor="auto")


def test_plan_has_three_segments_and_the_parser_read_the_weights(plan) -> None:
    assert [s.backend for s in plan.segments] == ["tensorrt", "onnxruntime", "tensorrt"]
    det = next(n for n in plan.nodes if n.op_type == "Det")
    assert det.verdict == "onnxruntime" and "checkDet" in (det.reason or "")


def test_real_rtx_build_of_segments_referencing_the_data_file(plan, flavor) -> None:
    seg = plan.extract(0)
    assert any(is_external(t) for t in seg.graph.initializer)
    engine = build_segment(seg, PROFILE, flavor=flavor, weights_dir=plan.model.base_dir)
    matmuls = sum(n.op_type == "MatMul" for n in seg.graph.node)
    assert matmuls == 3 and len(engine) > matmuls * HIDDEN * HIDDEN * 4  # the weights are in the engine


def test_cache_key_covers_the_external_weights(plan, flavor, tmp_path) -> None:
    seg = plan.extract(0)
    base = plan.model.base_dir
    a = key_material(seg, [], BuildOptions(), flavor, "t", weights_dir=base)
    copy = tmp_path / "mlp.onnx.data"
    shutil.copyfile(os.path.join(base, "mlp.onnx.data"), copy)
    with open(copy, "r+b") as f:
        f.seek(100)
        f.write(b"\x01\x02\x03\x04")  # one weight of w0 changed, same size
    b = key_material(seg, [], BuildOptions(), flavor, "t", weights_dir=str(tmp_path))
    assert a["model_sha256"] == b["model_sha256"]
    assert a["external_weights_sha256"] != b["external_weights_sha256"]


def test_emulated_session_equals_whole_model_onnx_runtime(mlp) -> None:
    sess = Session(mlp, PROFILE, SessionOptions(emulate=True))
    np.testing.assert_allclose(sess.run(None, feeds())[0], reference(mlp), rtol=0, atol=1e-5)


def test_exported_segments_moved_elsewhere_still_load(mlp, tmp_path, capsys, flavor) -> None:
    out = tmp_path / "segs"
    assert main(["inspect", mlp, "--export-segments", str(out), "--annotated", str(tmp_path / "ann.onnx")]) == 0
    assert filecmp.cmp(out / "mlp.onnx.data", mlp + ".data", shallow=False)
    assert os.stat(mlp + ".data").st_nlink == 1  # a copy: onnx's checker refuses hard-linked data files
    assert os.path.exists(tmp_path / "mlp.onnx.data")  # beside the annotated model
    moved = tmp_path / "elsewhere" / "segs"
    os.makedirs(moved.parent)
    shutil.move(str(out), moved)
    seg0 = str(moved / "segment_0.onnx")
    assert os.path.getsize(seg0) < 20_000
    first = ort.InferenceSession(seg0, providers=["CPUExecutionProvider"])
    names = [o.name for o in first.get_outputs()]
    tapped = onnx.load(mlp, load_external_data=False)
    tapped.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names)
    so = ort.SessionOptions()
    so.add_session_config_entry("session.model_external_initializers_file_folder_path", os.path.dirname(mlp))
    want = ort.InferenceSession(tapped.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(names, feeds())
    for got, exp in zip(first.run(names, feeds()), want):
        np.testing.assert_allclose(got, exp, rtol=0, atol=1e-5)
    trt = flavor.module
    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse_from_file(seg0), [parser.get_error(i).desc() for i in range(parser.num_errors)]
    annotated = ort.InferenceSession(str(tmp_path / "ann.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(annotated.run(None, feeds())[0], reference(mlp), rtol=0, atol=1e-5)


def test_build_folder_shares_the_weights_and_loads_when_moved(mlp, tmp_path, capsys) -> None:
    out = tmp_path / "built"
    assert main(["build", mlp, "-o", str(out), *SHAPES]) == 0
    manifest = json.load(open(out / "manifest.json"))
    data = manifest["data_files"]
    assert [d["file"] for d in data] == ["mlp.onnx.data"] and data[0]["bytes"] == os.path.getsize(mlp + ".data")
    assert filecmp.cmp(out / "mlp.onnx.data", mlp + ".data", shallow=False)
    assert os.stat(mlp + ".data").st_nlink == 1
    onnx.checker.check_model(mlp)  # (onnx refuses a data file with more than one link)
    onnx_bytes = sum(os.path.getsize(out / s["model"]) for s in manifest["segments"])
    assert onnx_bytes < 50_000  # segment models hold references, not weights
    moved = tmp_path / "far" / "away"
    os.makedirs(moved.parent)
    shutil.move(str(out), moved)
    sess = Session.load(str(moved), SessionOptions(emulate=True))
    np.testing.assert_allclose(sess.run(None, feeds())[0], reference(mlp), rtol=0, atol=1e-5)
    capsys.readouterr()
    assert main(["compare", str(moved)]) == 0
    assert "PASSED" in capsys.readouterr().out
    with open(moved / "mlp.onnx.data", "r+b") as f:
        f.truncate(1000)
    with pytest.raises(ArtifactError, match=r"data file mlp\.onnx\.data has 1000 bytes, manifest\.json says \d+ "
                                            r"\(truncated or edited\)"):
        Session.load(str(moved), SessionOptions(emulate=True))


def test_run_compare_and_bench_read_the_weights_from_the_path(mlp, capsys) -> None:
    assert main(["run", mlp, "--shapes", f"x:2x{HIDDEN}"]) == 0
    assert main(["compare", mlp, "--shapes", f"x:2x{HIDDEN}"]) == 0
    assert "PASSED" in capsys.readouterr().out
    assert main(["bench", mlp, "--shapes", f"x:2x{HIDDEN}", "--duration-s", "0.05", "--iterations", "3",
                 "--warmup-ms", "1", "--rounds", "1", "--no-progress", "--emulate", "--baselines", "ort-cpu"]) == 0
    out = capsys.readouterr().out
    assert "ort-cpu" in out and "segments of trt-backend" in out


def test_missing_or_truncated_data_file_is_one_line_and_exit_1(mlp, tmp_path) -> None:
    folder = tmp_path / "copy"
    folder.mkdir()
    shutil.copy(mlp, folder)
    path = str(folder / "mlp.onnx")
    for command in (["inspect", path], ["run", path, "--shapes", f"x:2x{HIDDEN}"]):
        proc = subprocess.run([sys.executable, "-m", "trt_backend", *command], capture_output=True, text=True)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "external data file 'mlp.onnx.data' of tensor 'w0' not found" in lines[0]
    with open(mlp + ".data", "rb") as src, open(folder / "mlp.onnx.data", "wb") as dst:
        dst.write(src.read(HIDDEN * HIDDEN * 4 + 10))
    proc = subprocess.run([sys.executable, "-m", "trt_backend", "inspect", path], capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"trt-backend: error: {path}: external data file 'mlp.onnx.data' is truncated: tensor 'b0' needs bytes "
        f"{HIDDEN * HIDDEN * 4}..{HIDDEN * HIDDEN * 4 + HIDDEN * 4}, the file has {HIDDEN * HIDDEN * 4 + 10}"]


def test_capability_with_inline_and_external_weights_mixed(mlp, tmp_path, plan) -> None:
    """Inline float weights reach the parser as stand-ins (zeros) and external ones from their
    file (through a link beside the zeros): the plan is the one of the all-external model."""
    proto = onnx.load(mlp, load_external_data=False)
    w0 = next(t for t in proto.graph.initializer if t.name == "w0")
    raw = np.fromfile(mlp + ".data", np.uint8, count=HIDDEN * HIDDEN * 4)
    del w0.external_data[:]
    w0.data_location = onnx.TensorProto.DEFAULT
    w0.raw_data = raw.tobytes()
    mixed = os.path.join(os.path.dirname(mlp), "mixed.onnx")
    onnx.save(proto, mixed)
    got = make_plan(mixed, flavor="auto")
    assert [(s.backend, s.nodes) for s in got.segments] == [(s.backend, s.nodes) for s in plan.segments]
    assert all(n.verdict == m.verdict for n, m in zip(got.nodes, plan.nodes))
    sess = Session(mixed, PROFILE, SessionOptions(emulate=True))
    np.testing.assert_allclose(sess.run(None, feeds())[0], reference(mlp), rtol=0, atol=1e-5)


def test_weights_held_inside_are_written_once_into_the_build_folder(mlp, tmp_path, capsys) -> None:
    """A model holding its weights inline gets one weights.data in its build folder that the
    model and every segment reference (was a copy of the weights in each), and still loads moved."""
    inline = str(tmp_path / "inline.onnx")
    onnx.save(onnx.load(mlp), inline)  # (load_external_data=True: the weights are read in)
    assert os.path.getsize(inline) > 6 * HIDDEN * HIDDEN * 4
    out = tmp_path / "built"
    assert main(["build", inline, "-o", str(out), *SHAPES]) == 0
    manifest = json.load(open(out / "manifest.json"))
    [data] = manifest["data_files"]
    assert data["file"] == "weights.data" and data["bytes"] >= 6 * HIDDEN * HIDDEN * 4
    assert os.path.getsize(out / "model.onnx") + sum(os.path.getsize(out / s["model"])
                                                      for s in manifest["segments"]) < 100_000
    moved = tmp_path / "moved"
    shutil.move(str(out), moved)
    sess = Session.load(str(moved), SessionOptions(emulate=True))
    np.testing.assert_allclose(sess.run(None, feeds())[0], reference(mlp), rtol=0, atol=1e-5)


def test_fp16_of_segments_whose_weights_are_external_data(mlp, tmp_path, caplog) -> None:
    """fp16 reads a segment's external weights in (up to READ_IN_MAX_BYTES) and converts them:
    the build's engines are fp16 (smaller than the fp32 ones), and the emulated session computes
    in fp16 with an error that is small and not zero."""
    fp32, fp16 = tmp_path / "fp32", tmp_path / "fp16"
    assert main(["build", mlp, "-o", str(fp32), *SHAPES]) == 0
    assert main(["build", mlp, "-o", str(fp16), *SHAPES, "--precision", "fp16"]) == 0
    assert "building it in fp32" not in caplog.text
    segs = {p: json.load(open(p / "manifest.json"))["segments"] for p in (fp32, fp16)}
    assert [s.get("precision") for s in segs[fp16] if s["engine"]] == ["fp16", "fp16"]
    for a, b in zip(segs[fp32], segs[fp16]):
        if a["engine"]:  # (each MatMul weight is HIDDEN x HIDDEN: half the bytes in fp16)
            assert b["engine_bytes"] < a["engine_bytes"] - HIDDEN * HIDDEN
    sess = Session(mlp, PROFILE, SessionOptions(emulate=True, build=BuildOptions(precision="fp16")))
    assert set(sess.emulated_precisions.values()) == {"fp16"}
    error = np.abs(sess.run(None, feeds())[0] - reference(mlp)).max()
    assert 0 < error < 0.05, error


def test_read_in_refuses_past_its_limit_naming_the_size(plan) -> None:
    seg = plan.extract(0)
    inline = read_in(seg, plan.model.base_dir, "segment 0")
    assert not any(is_external(t) for t in inline.graph.initializer)
    assert any(is_external(t) for t in seg.graph.initializer)  # (the segment itself is untouched)
    with pytest.raises(ModelTooLargeError, match=r"segment 0: 0\.00 GiB of external weights, past the 0\.00 GiB"):
        read_in(seg, plan.model.base_dir, "segment 0", max_bytes=1000)

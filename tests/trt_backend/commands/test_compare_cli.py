"""``trt-backend compare`` end to end: exit 0 on a pass, 1 on a mismatch with the JSON written, 2 on a tool error,
bad input being one ``trt-backend: error:`` line with no report and no JSON."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from tests.support.graphs import custom_op_model, three_segments
from trt_backend.cli import main

pytestmark = pytest.mark.usefixtures("oracle")  # needs a TensorRT parser

RANGE = ["--min-shapes", "x:1x3x8x8", "--opt-shapes", "x:2x3x8x8", "--max-shapes", "x:4x3x8x8"]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("compare") / "three.onnx"
    onnx.save(three_segments(), path)
    return str(path)


def test_pass_exits_0_and_writes_json(model_path, tmp_path, capsys) -> None:
    out = tmp_path / "report.json"
    rc = main(["compare", model_path, *RANGE, "--all-profile-shapes", "--iterations", "2", "--emulate",
               "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "3 segment(s): emulated x2, onnxruntime x1" in text and "inputs: x:1x3x8x8; x:2x3x8x8; x:4x3x8x8" in text
    assert "PASSED | 6 comparison(s), elemwise error, atol 0.001, rtol 0.001, precision fp32" in text
    data = json.loads(out.read_text())
    assert data["passed"] is True and data["localization"] is None and (data["atol"], data["rtol"]) == (1e-3, 1e-3)
    assert [o["name"] for o in data["outputs"]] == ["y", "z"]
    assert all(isinstance(o["max_abs_error"], float) and o["passed"] for o in data["outputs"])


def test_fp16_mismatch_exits_1_localised(model_path, tmp_path, capsys) -> None:
    out = tmp_path / "report.json"
    rc = main(["compare", model_path, "--shapes", "x:2x3x8x8", "--precision", "fp16", "--atol", "1e-5",
               "--rtol", "1e-5", "--tolerance", "z:1e-2,1e-2", "--localize", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 1
    assert "first diverging segment: 0 (tensorrt, executor emulated, fp16)" in text
    assert "nodes: conv1 (Conv), relu1 (Relu), sigmoid (Sigmoid)" in text
    data = json.loads(out.read_text())
    assert data["passed"] is False
    assert {o["name"]: o["passed"] for o in data["outputs"]} == {"y": False, "z": True}
    loc = data["localization"]
    assert loc["segment"] == 0 and loc["backend"] == "tensorrt" and len(loc["nodes"]) == 3 and loc["own_error"] > 0


@pytest.mark.parametrize("extra, message", [
    (["--tolerance", "nope:1e-3,1e-3"], r"--tolerance names unknown output(s) 'nope'; the model's outputs are: y, z"),
    (["--tolerance", "y:1e-3"], "cannot read tolerance 'y:1e-3'"),
    (["--atol", "abc"], "atol must be a finite number >= 0, got 'abc'"),
    (["--iterations", "0"], "iterations must be a whole number >= 1"),
    (["--error-stat", "p99"], "unknown error statistic 'p99'"),
    (["--precision", "int4"], "unknown precision 'int4'"),
    (["--precision", "int8"], "int8 needs calibration data: give --calibration-data FILE.npz|DIR"),
    (["--precision", "int8", "--calibration-data", "nowhere.npz"], "calibration data nowhere.npz: no such file"),
])
def test_bad_input_is_one_error_line_and_no_json(model_path, tmp_path, capsys, extra, message) -> None:
    out = tmp_path / "report.json"
    rc = main(["compare", model_path, *RANGE, "--emulate", "--json", str(out), *extra])
    captured = capsys.readouterr()
    assert rc == 2  # (a tool error: 1 means the outputs differ)
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trt-backend: error: ") and message in lines[0], captured.err
    assert "FAILED" not in captured.out and "PASSED" not in captured.out
    assert not out.exists()


def test_model_the_reference_cannot_run(tmp_path, capsys) -> None:
    path = tmp_path / "custom.onnx"
    onnx.save(custom_op_model(), path)
    rc = main(["compare", str(path), "--emulate", "--json", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "trt-backend: error: the reference (ONNX Runtime on the whole model" in err and "cannot load it" in err
    assert not (tmp_path / "r.json").exists()


def test_json_folder_checked_before_running(model_path, tmp_path, capsys) -> None:
    rc = main(["compare", model_path, *RANGE, "--json", str(tmp_path / "no" / "r.json")])
    assert rc == 2 and "cannot write --json" in capsys.readouterr().err


def test_int8_with_bad_or_random_calibration_data(model_path, tmp_path, capsys) -> None:
    bad = tmp_path / "cal.npz"
    np.savez(bad, x=np.full((4, 3, 8, 8), np.nan, np.float32))
    rc = main(["compare", model_path, *RANGE, "--emulate", "--precision", "int8", "--calibration-data", str(bad)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and f"calibration data {bad}: input 'x' holds 768 NaN/inf value(s)" in err[0]
    rc = main(["compare", model_path, *RANGE, "--emulate", "--precision", "int8", "--calibration-data", "random",
               "--atol", "1", "--rtol", "1"])
    captured = capsys.readouterr()
    assert "calibration data: random (a smoke test of the int8 path" in captured.err
    assert rc == 0 and "precision int8" in captured.out

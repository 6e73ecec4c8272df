"""Build folders work from any working directory and after being moved: folders of a model
quantized by ``onnxruntime.quantization.quantize_static`` (its defaults, and the symmetric
per-channel preset TensorRT takes), of a float model whose inline weights go into the folder's
``weights.data``, and of a model whose weights are external data. Every file a folder's model
and segments reference is read from the folder (``Model.base_dir``), never from the current
directory: ``run``, ``compare`` (also in fp16), ``bench``, ``inspect`` and ``Session.load``,
from elsewhere and moved, on real TensorRT-RTX builds; so does a precision search
(``build --precision auto``) of a model with external weights.

Tolerances as in test_quantized_models: with ONNX Runtime's graph optimisations off the emulated
session computes what ONNX Runtime computes on the original model (float Q/DQ); the CLI runs with
them on, where ONNX Runtime fuses the original's Q/DQ into int8 kernels, so the quantized models'
outputs may differ by a few output quantization steps."""
from __future__ import annotations

import json
import os
import shutil
from typing import Any
from collections.abc import Callable, Iterator

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper as h
from onnx import numpy_helper as nh

from partitioner.weights import INLINE_MAX_BYTES, is_external
from tests.helpers import vi
from trt_backend.cli import main
from trt_backend.planning import load_normalized as load
from trt_backend.artifacts.write import build as build_folder_build
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

PROFILE = [{"x": ((1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8))}]
KINDS = ("float", "default", "symmetric", "external")
QUANTIZED = ("default", "symmetric")
STEPS = 4  # output quantization steps allowed where ONNX Runtime fuses the original's Q/DQ
FAST = ["--warmup-ms", "1", "--duration-s", "0.01", "--iterations", "1", "--rounds", "1", "--no-progress"]
pytestmark = pytest.mark.usefixtures("flavor")


def float_cnn() -> onnx.ModelProto:
    """x: Nx3x8x8 -> [Conv 3x3 -> Relu] x3 -> GlobalAveragePool -> Flatten -> Gemm -> y: Nx200;
    the last Conv's weights are past the inline threshold even as int8 (96x96x3x3 bytes)."""
    rng = np.random.default_rng(0)
    nodes, inits, prev, cin = [], [], "x", 3
    for i, cout in enumerate((32, 96, 96)):
        inits += [nh.from_array((rng.standard_normal((cout, cin, 3, 3)) * 0.1).astype(np.float32), f"w{i}"),
                  nh.from_array((rng.standard_normal(cout) * 0.1).astype(np.float32), f"b{i}")]
        nodes += [h.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  h.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        prev, cin = f"r{i}", cout
    inits += [nh.from_array((rng.standard_normal((96, 200)) * 0.1).astype(np.float32), "fw"),
              nh.from_array((rng.standard_normal(200) * 0.1).astype(np.float32), "fb")]
    nodes += [h.make_node("GlobalAveragePool", [prev], ["g"]), h.make_node("Flatten", ["g"], ["f"]),
              h.make_node("Gemm", ["f", "fw", "fb"], ["y"])]
    m = h.make_model(h.make_graph(nodes, "cnn", [vi("x", ["N", 3, 8, 8])], [vi("y", ["N", 200])], inits),
                     opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


class _Reader:
    """A CalibrationDataReader over a few seeded batches."""

    def __init__(self) -> None:
        rng = np.random.default_rng(1)
        self._it: Iterator[dict[str, np.ndarray]] = iter(
            [{"x": rng.random((1, 3, 8, 8), dtype=np.float32)} for _ in range(4)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    from onnxruntime.quantization import quantize_static

    folder = tmp_path_factory.mktemp("models")
    paths = {"float": str(folder / "float.onnx"), "default": str(folder / "default.onnx"),
             "symmetric": str(folder / "symmetric.onnx"), "external": str(folder / "external" / "model.onnx")}
    onnx.save(float_cnn(), paths["float"])
    quantize_static(paths["float"], paths["default"], _Reader())
    quantize_static(paths["float"], paths["symmetric"], _Reader(), per_channel=True,
                    extra_options={"ActivationSymmetric": True, "QuantizeBias": False})
    os.makedirs(os.path.dirname(paths["external"]))
    onnx.save(float_cnn(), paths["external"], save_as_external_data=True, location="model.data", size_threshold=1024)
    return paths


@pytest.fixture(scope="module")
def folders(models, tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("built")
    return {kind: (build_folder_build(models[kind], str(out / kind), PROFILE), str(out / kind))[1] for kind in KINDS}


@pytest.fixture(params=["elsewhere", "moved"])
def placed(request, folders, tmp_path, monkeypatch) -> Callable[[str], str]:
    """kind -> its folder: the built folder where it was built, or a copy moved elsewhere; the
    working directory is an unrelated empty folder either way."""
    def at(kind: str) -> str:
        if request.param == "elsewhere":
            return folders[kind]
        first = tmp_path / "first" / kind
        shutil.copytree(folders[kind], first)
        moved = tmp_path / "moved" / "far" / kind
        os.makedirs(moved.parent, exist_ok=True)
        shutil.move(str(first), moved)
        return str(moved)

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return at


def feeds(batch: int = 3, seed: int = 5) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).random((batch, 3, 8, 8), dtype=np.float32)}


def run_ort(path: str, x: dict[str, np.ndarray], level: str = "all") -> np.ndarray:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                                   "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[level]
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, x)[0]


def tolerance(models: dict[str, str], kind: str) -> float:
    """Absolute tolerance against ONNX Runtime (optimised) on the original: STEPS output steps
    for the quantized models (y is a DequantizeLinear output), float rounding otherwise."""
    if kind not in QUANTIZED:
        return 1e-5
    m = onnx.load(models[kind])
    dq = next(n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "y")
    step = float(next(nh.to_array(t) for t in m.graph.initializer if t.name == dq.input[1]))
    return STEPS * step * 1.0001


def read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def test_every_folder_references_its_weights_in_a_data_file(folders) -> None:
    for kind, folder in folders.items():
        manifest = read_json(os.path.join(folder, "manifest.json"))
        [data] = manifest["data_files"]
        assert data["file"] == ("model.data" if kind == "external" else "weights.data")
        model = onnx.load(os.path.join(folder, "model.onnx"), load_external_data=False)
        assert any(is_external(t) for t in model.graph.initializer), kind
        if kind in QUANTIZED:  # an int8 weight past the threshold is external; its DequantizeLinear stays
            big = [t for t in model.graph.initializer if is_external(t) and t.data_type == onnx.TensorProto.INT8]
            assert big and all(int({e.key: e.value for e in t.external_data}["length"]) > INLINE_MAX_BYTES
                               for t in big)


@pytest.mark.parametrize("kind", KINDS)
def test_session_load_from_another_directory(kind, models, placed) -> None:
    folder = placed(kind)
    assert os.path.abspath(folder) != os.getcwd()
    sess = Session.load(folder, SessionOptions(emulate=True, graph_optimization_level="disable"))
    assert sess.segment_executors == ["emulated"]
    assert bool(sess.plan.rewritten) == (kind == "default")  # (only the default quantizer's Q/DQ is rewritten)
    x = feeds()
    np.testing.assert_allclose(sess.run(None, x)[0], run_ort(models[kind], x, "disable"), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_cli_on_a_folder_from_another_directory(kind, models, placed, tmp_path, capsys) -> None:
    folder = placed(kind)
    inputs, outputs = str(tmp_path / "in.npz"), str(tmp_path / "out.npz")
    x: dict[str, Any] = feeds()  # (Any: numpy's stub reads ** as allow_pickle too)
    np.savez(inputs, **x)
    assert main(["run", folder, "--inputs", inputs, "--outputs", outputs]) == 0
    got = np.load(outputs)["y"]
    # (emulated, a quantized model's Q/DQ compute as ONNX defines them: ONNX Runtime unoptimised)
    assert np.abs(got - run_ort(models[kind], x, "disable" if kind in QUANTIZED else "all")).max() <= 1e-5
    capsys.readouterr()
    report = str(tmp_path / "compare.json")
    assert main(["compare", folder, "--json", report]) == 0
    assert "PASSED" in capsys.readouterr().out
    assert read_json(report)["passed"] is True
    numbers = str(tmp_path / "bench.json")
    assert main(["bench", folder, *FAST, "--baselines", "ort-cpu", "--json", numbers]) == 0
    assert "segments of trt-backend" in capsys.readouterr().out
    ours, cpu = read_json(numbers)["runners"]
    assert ours["name"] == "trt-backend" and cpu["name"] == "ort-cpu"
    assert ours["latency_ms"]["min"] > 0 and ours["segments"][0]["executor"] == "emulated"
    assert main(["inspect", folder]) == 0
    assert "segment_0.engine" in capsys.readouterr().out
    repo = str(tmp_path / "repo")
    assert main(["export-triton", folder, "-o", repo]) == 0
    exported = [os.path.join(root, f) for root, _, files in os.walk(repo) for f in files if f == "model.onnx"]
    assert exported  # (the segment model, its weights beside it, runs as the folder's does)
    [segment] = [p for p in exported if "_trt" in p or "_ort" in p]
    got = ort.InferenceSession(segment, providers=["CPUExecutionProvider"]).run(None, x)[0]
    assert np.abs(got - run_ort(models[kind], x)).max() <= tolerance(models, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_compare_of_a_folder_in_another_precision_is_refused_in_one_line(kind, placed, capsys) -> None:
    """A folder is compared as it was built: asking for fp16 on an fp32 folder is one line naming
    the flag (build it in fp16 to compare that), never a traceback."""
    folder = placed(kind)
    assert main(["compare", folder, "--precision", "fp16"]) == 2
    out, err = capsys.readouterr()
    assert "--precision would change what was built" in err and len(err.strip().splitlines()) == 1


def test_qdq_rewrite_reads_external_constants_from_the_models_folder(models, tmp_path, monkeypatch) -> None:
    """A Q/DQ model saved with external data whose asymmetric (uint8) weights the rewrite folds:
    their values come from the model's folder, whatever the working directory."""
    from onnxruntime.quantization import QuantType, quantize_static

    path = str(tmp_path / "q" / "model.onnx")
    os.makedirs(os.path.dirname(path))
    quantize_static(models["float"], path, _Reader(), activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QUInt8, use_external_data_format=True)
    saved = onnx.load(path, load_external_data=False)
    assert any(is_external(t) and t.data_type == onnx.TensorProto.UINT8 for t in saved.graph.initializer)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    model = load(path)
    assert sum(w.startswith("constant DequantizeLinear") for w in model.rewritten.values()) >= 8
    sess = Session(model, PROFILE, SessionOptions(emulate=True, graph_optimization_level="disable"))
    x = feeds()
    np.testing.assert_allclose(sess.run(None, x)[0], run_ort(path, x, "disable"), rtol=1e-5, atol=1e-6)


def test_precision_search_reads_external_weights_from_the_models_folder(models, tmp_path, monkeypatch,
                                                                         capsys) -> None:
    """``build --precision auto`` of a model with external weights, from another directory: the
    search's fp16 transforms read the weights from the model's folder."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    out = str(tmp_path / "auto")
    assert main(["build", models["external"], "-o", out, "--shapes", "x:2x3x8x8", "--precision", "auto",
                 "--allow", "fp16"]) == 0
    [segment] = read_json(os.path.join(out, "manifest.json"))["precision_plan"]["segments"]
    assert segment["precision"] == "fp16" and segment["reduced"] > 0

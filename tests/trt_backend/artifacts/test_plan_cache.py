"""The plan cache: with a cache folder, a model file planned before with the same options is not
planned again (no parser call, no probe run, no profile derivation), and what it gives is what
planning gives: the same plan JSON from ``inspect``, the same folder from ``build``. A changed
model or option plans again; a damaged entry is dropped and planned again. Everything real: the
TensorRT-RTX parser plans, ONNX Runtime probes, TensorRT-RTX builds."""
from __future__ import annotations

import glob
import json
import logging
import os
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.folders import folder
from tests.support.pipelines import mlp_pipeline
from tests.support.small_cnn import PROFILES, SHAPES, small_cnn
from trt_backend.cli import main
from trt_backend.ort import probe
from trt_backend.profiles import derive
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session
from trt_backend.tensorrt.oracle import ParserOracle

pytestmark = pytest.mark.usefixtures("flavor")


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often the real parser was asked, a probe ran and profiles were derived."""
    seen = {"queries": 0, "probes": 0, "derivations": 0}
    for owner, name, key in ((ParserOracle, "query", "queries"), (probe, "_probe", "probes"),
                             (derive, "derive_profiles", "derivations")):
        real = getattr(owner, name)

        def counting(*args, _real=real, _key=key, **kw):
            seen[_key] += 1
            return _real(*args, **kw)

        monkeypatch.setattr(owner, name, counting)
    monkeypatch.setattr("trt_backend.compiler.derive_profiles", derive.derive_profiles)
    return seen


def _inspect(path: str, out: str, *extra: str) -> tuple[dict, str]:
    assert main(["inspect", path, "--json", out, *extra]) == 0
    with open(out) as f:
        return json.load(f), out


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_inspect_takes_the_plan_from_the_cache(tmp_path, counted, capsys) -> None:
    """An exporter's pipeline whose types need a probe run: the second inspect asks neither the
    parser nor ONNX Runtime and writes the same plan (learned types included)."""
    path = str(tmp_path / "pipeline.onnx")
    onnx.save(mlp_pipeline(), path)
    cache = str(tmp_path / "cache")
    plain, _ = _inspect(path, str(tmp_path / "plain.json"))
    capsys.readouterr()
    first, _ = _inspect(path, str(tmp_path / "first.json"), "--cache-dir", cache)
    assert "planned in" in capsys.readouterr().out
    asked = dict(counted)
    assert asked["queries"] >= 2 and asked["probes"] == 2  # (with the cache and without)
    again, _ = _inspect(path, str(tmp_path / "again.json"), "--cache-dir", cache)
    assert "plan from the plan cache" in capsys.readouterr().out
    assert counted == asked  # no parser call, no probe run
    assert plain == first == again and again["learned_types"]
    assert len(glob.glob(os.path.join(cache, "plans", "*.json"))) == 1


def test_a_changed_model_or_option_plans_again(tmp_path, counted, capsys) -> None:
    path = small_cnn(str(tmp_path / "cnn.onnx"))
    cache = str(tmp_path / "cache")
    _inspect(path, str(tmp_path / "a.json"), "--cache-dir", cache)
    calls = counted["queries"]
    _inspect(path, str(tmp_path / "b.json"), "--cache-dir", cache, "--exclude-ops", "Relu")
    assert counted["queries"] > calls  # another option: planned
    calls = counted["queries"]
    model = onnx.load(path)  # the same size, other weights
    w = numpy_helper.to_array(model.graph.initializer[0])
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array((w * 2).astype(np.float32), "w0"))
    onnx.save(model, path)
    _inspect(path, str(tmp_path / "c.json"), "--cache-dir", cache)
    assert counted["queries"] > calls  # another model: planned
    assert len(glob.glob(os.path.join(cache, "plans", "*.json"))) == 3


def test_a_damaged_entry_is_dropped_and_planned_again(tmp_path, counted, capsys, caplog) -> None:
    path = small_cnn(str(tmp_path / "cnn.onnx"))
    cache = str(tmp_path / "cache")
    first, _ = _inspect(path, str(tmp_path / "a.json"), "--cache-dir", cache)
    (entry,) = glob.glob(os.path.join(cache, "plans", "*.json"))
    for damage in ('{"format": 1, "plan": {"segments": []', '{"format": 1, "plan": {}, "types": {}}'):
        with open(entry, "w") as f:
            f.write(damage)
        calls = counted["queries"]
        with caplog.at_level(logging.WARNING, logger="trt_backend.artifacts.plan_cache"):
            again, _ = _inspect(path, str(tmp_path / "b.json"), "--cache-dir", cache)
        assert again == first and counted["queries"] > calls
        assert any("unusable" in r.getMessage() for r in caplog.records)
        caplog.clear()
    with open(entry) as f:  # written again, whole
        assert json.load(f)["plan"] == first


def test_a_build_takes_plan_and_profiles_from_the_cache_and_writes_the_same_folder(tmp_path, counted,
                                                                                   capsys) -> None:
    """A second build with other build options (no whole-folder hit) takes the plan and the
    derived profiles from the cache; its folder is the one a build without a cache writes."""
    path = small_cnn(str(tmp_path / "cnn.onnx"))
    cache = str(tmp_path / "cache")
    assert main(["build", path, "-o", str(tmp_path / "fp32"), *SHAPES, "--cache-dir", cache]) == 0
    asked = dict(counted)  # (its parser question answered by the fp32 build's head start: no query counted)
    assert asked["derivations"] == 1
    assert main(["build", path, "-o", str(tmp_path / "cached"), *SHAPES, "--precision", "fp16",
                 "--cache-dir", cache]) == 0
    assert counted["queries"] == asked["queries"] and counted["derivations"] == asked["derivations"]
    assert main(["build", path, "-o", str(tmp_path / "plain"), *SHAPES, "--precision", "fp16"]) == 0
    assert counted["derivations"] == asked["derivations"] + 1
    assert counted["queries"] > asked["queries"]  # (an fp16 build has no head start: planning it asks)
    cached, plain = folder(str(tmp_path / "cached"), drop=("build_cache",)), folder(str(tmp_path / "plain"))
    assert cached == plain
    with open(os.path.join(tmp_path / "cached", "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["build_cache"]["hit"] is False and manifest["build"]["precision"] == "fp16"


def test_a_hit_names_the_model_as_given(tmp_path, counted, capsys) -> None:
    """The same bytes at another path: a hit, and the plan names the path given, as planning it does."""
    first = small_cnn(str(tmp_path / "cnn.onnx"))
    cache = str(tmp_path / "cache")
    _inspect(first, str(tmp_path / "a.json"), "--cache-dir", cache)
    other = str(tmp_path / "copy.onnx")
    shutil.copyfile(first, other)
    calls = counted["queries"]
    hit, _ = _inspect(other, str(tmp_path / "b.json"), "--cache-dir", cache)
    assert counted["queries"] == calls and "plan from the plan cache" in capsys.readouterr().out
    fresh, _ = _inspect(other, str(tmp_path / "c.json"))
    assert hit == fresh and hit["model"] == other


def test_a_graph_output_whose_type_a_probe_learned(tmp_path, counted, capsys) -> None:
    """A graph output declared without a shape after an op ONNX's inference has no rule for: the
    probe learns its rank, the cache keeps it on the output, and a hit plans as the miss did."""
    nodes = [helper.make_node("Scaler", ["x"], ["s"], domain="ai.onnx.ml", offset=[0.5] * 4, scale=[2.0] * 4),
             helper.make_node("Relu", ["s"], ["r"]), helper.make_node("Abs", ["r"], ["a"]),
             helper.make_node("Neg", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "scaled", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("s", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    path = str(tmp_path / "scaled.onnx")
    onnx.save(model, path)
    cache = str(tmp_path / "cache")
    first, _ = _inspect(path, str(tmp_path / "a.json"), "--cache-dir", cache)
    assert "s" in first["learned_types"] and counted["probes"] == 1
    calls = counted["queries"]
    again, _ = _inspect(path, str(tmp_path / "b.json"), "--cache-dir", cache)
    assert "plan from the plan cache" in capsys.readouterr().out
    assert again == first and counted["queries"] == calls and counted["probes"] == 1


def test_inspect_build_and_session_share_one_entry(tmp_path, counted, capsys) -> None:
    """The plan ``inspect --cache-dir`` keeps is the one ``build --cache-dir`` and a Python
    ``Session(cache_dir=...)`` take: one entry, no parser call after the first, the same plan."""
    path = small_cnn(str(tmp_path / "cnn.onnx"))
    cache = str(tmp_path / "cache")
    planned, _ = _inspect(path, str(tmp_path / "a.json"), "--cache-dir", cache, *SHAPES)
    calls = counted["queries"]
    assert main(["build", path, "-o", str(tmp_path / "built"), *SHAPES, "--cache-dir", cache]) == 0
    sess = Session(path, PROFILES, SessionOptions(cache_dir=cache, emulate=True))
    assert counted["queries"] == calls and sess.plan.cached
    with open(os.path.join(tmp_path / "built", "manifest.json")) as f:
        built = json.load(f)["plan"]
    assert [(s["id"], s["backend"], s["nodes"]) for s in built["segments"]] == \
        [(s["id"], s["backend"], s["nodes"]) for s in planned["segments"]] == \
        [(s.id, s.backend, list(s.nodes)) for s in sess.plan.segments]
    assert len(glob.glob(os.path.join(cache, "plans", "*.json"))) == 1


def test_a_build_folder_takes_no_plan_cache_in_one_line(tmp_path, capsys) -> None:
    path = small_cnn(str(tmp_path / "cnn.onnx"))
    folder = str(tmp_path / "built")
    assert main(["build", path, "-o", folder, *SHAPES]) == 0
    capsys.readouterr()
    assert main(["inspect", folder, "--cache-dir", str(tmp_path / "cache")]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (f"trt-backend: error: {folder}: --cache-dir keeps plans of model files; a build folder holds "
                   "its own plan (inspect the model file with --cache-dir instead)"), err
    assert not os.path.exists(tmp_path / "cache")


def test_a_big_data_file_is_hashed_without_holding_it(tmp_path) -> None:
    """The cache key's digest of a model's external data reads it a MiB at a time: Python holds
    far less than the file (a Session or inspect with a cache folder on a model of gigabytes)."""
    import hashlib
    import tracemalloc

    from trt_backend.artifacts.build_cache import model_digest

    weights = np.random.default_rng(0).standard_normal((4096, 2048)).astype(np.float32)  # 32 MiB
    proto = onnx.helper.make_model(onnx.helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4096])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2048])],
        [numpy_helper.from_array(weights, "w")]))
    path = str(tmp_path / "big.onnx")
    onnx.save(proto, path, save_as_external_data=True, location="big.data", size_threshold=0)
    del weights, proto
    tracemalloc.start()
    try:
        digest = model_digest(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    with open(tmp_path / "big.data", "rb") as f:
        assert digest["data_files"] == {"big.data": hashlib.sha256(f.read()).hexdigest()}
    assert peak < 4 * 2**20, peak

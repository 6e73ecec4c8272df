"""``trt-backend export-triton``: real builds (TensorRT-RTX on CPU) written as Triton model
repositories, every config parsed with Triton's own schema, and the ensemble checked and executed
step by step by a checker that reads only the repository (``triton_checker``), against
whole-model ONNX Runtime at 1e-5."""
from __future__ import annotations

import os
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from tests.support.graphs import (
    assert_same,
    conv_chain,
    detection_model,
    nonzero_detection_model,
    ort_reference,
    transformer_model,
)
from tests.support.pipelines import digits_classifier
from tests.support.triton_checker import check_repo, executable_path, load_repo, run_ensemble
from trt_backend.cli import main
from trt_backend.data.demo import DEMO_PATH
from trt_backend.errors import ExportError, OptionsError
from trt_backend.export.repo import TritonOptions, triton_repo
from trt_backend.export.source import from_build_folders, from_model
from trt_backend.export.write import write_repo
from trt_backend.session.options import SessionOptions

pytestmark = pytest.mark.usefixtures("flavor")
DEMO_PROFILE = [{"image": ((1, 3, 32, 32), (4, 3, 32, 32), (8, 3, 32, 32))}]


@pytest.fixture(scope="module")
def demo_build(tmp_path_factory) -> str:
    from trt_backend.artifacts.write import build as build_folder_build

    out = str(tmp_path_factory.mktemp("build") / "demo_build")
    build_folder_build(DEMO_PATH, out, DEMO_PROFILE)
    return out


def _check_against_ort(repo: str, model: onnx.ModelProto | str, feeds_list: list[dict[str, np.ndarray]]) -> None:
    proto = onnx.load(model) if isinstance(model, str) else model
    names = [o.name for o in proto.graph.output]
    for feeds in feeds_list:
        got = run_ensemble(repo, feeds)
        assert_same([got[n] for n in names], ort_reference(proto, feeds), atol=1e-5)


def _images(*batches: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(11)
    return [{"image": rng.random((b, 3, 32, 32), dtype=np.float32)} for b in batches]


# ------------------------------------------------------------------ the demo model


def test_demo_build_folder_exports_an_ensemble_that_runs_like_the_model(demo_build, tmp_path, capsys) -> None:
    repo = str(tmp_path / "repo")
    assert main(["export-triton", demo_build, "-o", repo]) == 0
    out = capsys.readouterr().out
    assert "exported as ONNX Runtime models with Triton's TensorRT execution accelerator" in out
    assert "cannot load TensorRT-RTX engines" in out
    models = load_repo(repo)  # every config parses into inference.ModelConfig
    assert sorted(models) == ["demo", "demo_0_trt", "demo_1_ort", "demo_2_trt"]
    ens = models["demo"].config
    assert ens.platform == "ensemble" and ens.max_batch_size == 0
    assert [s.model_name for s in ens.ensemble_scheduling.step] == ["demo_0_trt", "demo_1_ort", "demo_2_trt"]
    assert [dict(s.input_map) for s in ens.ensemble_scheduling.step] == [{"image": "image"}, {"r2": "r2"}, {"up": "up"}]
    assert list(ens.input[0].dims) == [-1, 3, 32, 32]
    trt0 = models["demo_0_trt"].config
    assert trt0.backend == "onnxruntime" and not trt0.platform
    acc = trt0.optimization.execution_accelerators.gpu_execution_accelerator[0]
    assert acc.name == "tensorrt"
    assert dict(acc.parameters) == {"trt_profile_min_shapes": "image:1x3x32x32",
                                    "trt_profile_opt_shapes": "image:4x3x32x32",
                                    "trt_profile_max_shapes": "image:8x3x32x32"}
    assert [(g.kind, g.count) for g in trt0.instance_group] == [(trt0.instance_group[0].KIND_GPU, 1)]
    assert os.path.isfile(os.path.join(repo, "demo_1_ort", "1", "model.onnx"))
    assert os.path.isdir(os.path.join(repo, "demo", "1"))
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # no temp folders left
    _check_against_ort(repo, DEMO_PATH, _images(1, 3, 8))


def test_demo_with_batching_drops_the_batch_dim_and_batches_the_first_step(demo_build, tmp_path) -> None:
    repo = str(tmp_path / "repo")
    assert main(["export-triton", demo_build, "-o", repo, "--max-batch-size", "8", "--trt-instances", "2",
                 "--ort-instances", "3", "--ort-kind", "cpu", "--name", "demo_batched"]) == 0
    models, ens = check_repo(repo)
    assert ens.name == "demo_batched" and ens.config.max_batch_size == 8
    assert list(ens.config.input[0].dims) == [3, 32, 32]
    for name, m in models.items():
        assert m.config.max_batch_size == 8
        assert m.config.HasField("dynamic_batching") == (name == "demo_batched_0_trt")
    groups = {n: (m.config.instance_group[0].count, m.config.instance_group[0].kind) for n, m in models.items()
              if m.config.instance_group}
    gpu, cpu = models["demo_batched_0_trt"].config.instance_group[0].KIND_GPU, \
        models["demo_batched_0_trt"].config.instance_group[0].KIND_CPU
    assert groups == {"demo_batched_0_trt": (2, gpu), "demo_batched_1_ort": (3, cpu), "demo_batched_2_trt": (2, gpu)}
    _check_against_ort(repo, DEMO_PATH, _images(1, 5, 8))


def test_batching_past_the_profiles_is_refused(demo_build, tmp_path, capsys) -> None:
    repo = tmp_path / "repo"
    assert main(["export-triton", demo_build, "-o", str(repo), "--max-batch-size", "16"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert "profile 0 of model input 'image' takes batches 1..8" in err and "1 to 16" in err
    assert not repo.exists()


def test_dry_run_prints_tree_and_configs_and_writes_nothing(demo_build, tmp_path, capsys) -> None:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    repo = tmp_path / "repo"
    assert main(["export-triton", demo_build, "-o", str(repo), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert not repo.exists()
    assert "  demo_1_ort/1/model.onnx (359 bytes)" in out or "  demo_1_ort/1/model.onnx (" in out
    configs = out.split("\n--- ")[1:]
    assert [c.split("/config.pbtxt")[0] for c in configs] == ["demo_0_trt", "demo_1_ort", "demo_2_trt", "demo"]
    for c in configs:
        text = c.split("\n", 1)[1].split("\nensemble demo |")[0]
        text_format.Parse(text, mc.ModelConfig())


def test_existing_repo_is_refused_unless_forced(demo_build, tmp_path, capsys) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "keep.txt").write_text("mine")
    assert main(["export-triton", demo_build, "-o", str(repo)]) == 1
    assert "is not empty; --force replaces it" in capsys.readouterr().err
    assert (repo / "keep.txt").read_text() == "mine"
    assert main(["export-triton", demo_build, "-o", str(repo), "--force"]) == 0
    assert not (repo / "keep.txt").exists() and (repo / "demo" / "config.pbtxt").exists()
    file = tmp_path / "afile"
    file.write_text("x")
    assert main(["export-triton", demo_build, "-o", str(file)]) == 1
    assert "exists and is not a folder" in capsys.readouterr().err


def test_trt_format_plan_is_refused_for_rtx_engines(demo_build, tmp_path, capsys) -> None:
    assert main(["export-triton", demo_build, "-o", str(tmp_path / "r"), "--trt-format", "plan"]) == 1
    err = capsys.readouterr().err
    assert "segment 0 cannot be a plan" in err and "TensorRT-RTX" in err


def test_two_builds_for_the_same_gpu_target_are_refused(demo_build, tmp_path) -> None:
    with pytest.raises(ExportError, match="a second build for the default GPU target"):
        from_build_folders([demo_build, demo_build])


# ------------------------------------------------------------------ plans (full TensorRT)


def test_full_tensorrt_engines_for_two_gpus_become_a_plan_model_per_segment(demo_build, tmp_path) -> None:
    """Full TensorRT cannot be installed here, so the engines of a full-TensorRT build for SM 8.6
    and SM 9.0 are stood in for by the RTX build's engine bytes (the GPU boundary); everything
    else (plan, segment models, profiles) is the real build's."""
    source = from_build_folders([demo_build])
    rtx_engines = source.engines
    source.runtime = "tensorrt 10.13.0.35"
    source.engines = {seg: {"8.6": e[""], "9.0": e[""] + b"sm90"} for seg, e in rtx_engines.items()}
    repo = str(tmp_path / "repo")
    write_repo(triton_repo(source), repo)
    models, _ = check_repo(repo)
    plan = models["demo_0_trt"].config
    assert plan.platform == "tensorrt_plan" and not plan.backend
    assert plan.default_model_filename == "model.plan"
    assert dict(plan.cc_model_filenames) == {"8.6": "model.plan", "9.0": "model_sm90.plan"}
    assert [list(g.profile) for g in plan.instance_group] == [["0"]]
    version = os.path.join(repo, "demo_0_trt", "1")
    assert sorted(os.listdir(version)) == ["model.plan", "model_sm90.plan", "segment.onnx"]
    with open(os.path.join(version, "model_sm90.plan"), "rb") as f:
        assert f.read() == rtx_engines[0][""] + b"sm90"
    assert models["demo_1_ort"].config.backend == "onnxruntime"
    _check_against_ort(repo, DEMO_PATH, _images(2, 8))
    onnx_repo = str(tmp_path / "as_onnx")
    write_repo(triton_repo(source, TritonOptions(trt_format="onnx")), onnx_repo)
    assert load_repo(onnx_repo)["demo_2_trt"].config.backend == "onnxruntime"


def test_plugin_segments_export_as_plans_only(tmp_path) -> None:
    from partitioner import PartitionOptions
    from plugins import default_registry
    from tests.helpers import conv_resize_chain
    from trt_backend.export.source import from_session
    from trt_backend.session.session import Session

    m = conv_resize_chain(2)
    opts = SessionOptions(partition=PartitionOptions(target="tensorrt", plugins=default_registry().claims()),
                          emulate=True)
    sess = Session(m, None, opts)
    assert [s.backend for s in sess.plan.segments] == ["tensorrt"]
    with pytest.raises(ExportError, match=r"segment 0 holds plugin node 'resize0' \(resize\).*the build has no "
                                          "engines; build it with full TensorRT"):
        triton_repo(from_session(sess, name="plug"))
    old = from_session(sess, name="plug", engines={0: {"8.0": b"stand-in engine"}}, runtime="tensorrt 10.8.0.43")
    with pytest.raises(ExportError, match="before TensorRT 10.9 the plugin runs through Python"):
        triton_repo(old)
    source = from_session(sess, name="plug", engines={0: {"8.0": b"stand-in engine"}}, runtime="tensorrt 10.13.0.35")
    with pytest.raises(ExportError, match="Triton runs it only as a TensorRT plan"):
        triton_repo(source, TritonOptions(trt_format="onnx"))
    repo = str(tmp_path / "repo")
    write_repo(triton_repo(source), repo)
    models, _ = check_repo(repo)
    assert models["plug_0_trt"].config.platform == "tensorrt_plan"
    x = np.random.default_rng(4).standard_normal((1, 4, 8, 8)).astype(np.float32)
    _check_against_ort(repo, m, [{"x": x}])


# ------------------------------------------------------------------ other models


def test_detection_with_data_dependent_shapes(tmp_path) -> None:
    m = nonzero_detection_model()
    path = str(tmp_path / "det.onnx")
    onnx.save(m, path)
    repo = str(tmp_path / "repo")
    shapes = ["--min-shapes", "feats:1x4x8", "--opt-shapes", "feats:2x16x8", "--max-shapes", "feats:2x32x8"]
    assert main(["export-triton", path, "-o", repo, "--exclude-ops", "NonZero", "--min-segment-size", "1",
                 *shapes]) == 0
    models, ens = check_repo(repo)
    kinds = [models[s.model_name].config.backend for s in ens.config.ensemble_scheduling.step]
    assert len(kinds) >= 3 and "det_1_ort" in models
    kept = next(io for io in ens.config.output if io.name == "kept_boxes")
    assert list(kept.dims) == [-1, 4]  # the count of kept boxes varies with the data
    rng = np.random.default_rng(9)
    _check_against_ort(repo, m, [{"feats": rng.standard_normal(s).astype(np.float32)}
                                 for s in ((1, 4, 8), (2, 16, 8), (2, 32, 8), (1, 20, 8))])
    assert main(["export-triton", path, "-o", str(tmp_path / "b"), "--exclude-ops", "NonZero",
                 "--min-segment-size", "1", "--max-batch-size", "2", *shapes]) == 1


def test_data_dependent_leading_dims_refuse_batching(tmp_path) -> None:
    source = from_model(_saved(nonzero_detection_model(), tmp_path), [{"feats": ((1, 4, 8), (2, 16, 8), (2, 32, 8))}],
                        SessionOptions(exclude_ops=("NonZero",), min_segment_size=1))
    with pytest.raises(ExportError, match=r"--max-batch-size 2: segment \d+ (input|output) '(nz|idx|kept\w*)'"):
        triton_repo(source, TritonOptions(max_batch_size=2))


def test_scalars_cross_boundaries_as_shape_1(tmp_path) -> None:
    """A NonMaxSuppression/Loop detection graph: the kept-box count (a Gather of a Shape) enters
    the Loop's segment as a scalar and the Loop's area sum leaves the model as one; Triton cannot
    declare scalars without batching, so they travel as [1] (reshaped inside the models)."""
    m = detection_model()
    source = from_model(_saved(m, tmp_path), [{"feats": ((1, 4, 8), (2, 16, 8), (2, 32, 8))}],
                        SessionOptions(exclude_ops=("NonMaxSuppression", "Loop"), min_segment_size=1))
    exported = triton_repo(source)
    assert any("area_sum travel as shape [1]" in n for n in exported.notes)
    repo = str(tmp_path / "repo")
    write_repo(exported, repo)
    models, ens = check_repo(repo)
    area = next(io for io in ens.config.output if io.name == "area_sum")
    assert list(area.dims) == [1]
    maps = [(k, v) for s in ens.config.ensemble_scheduling.step for k, v in list(s.input_map.items())
            + list(s.output_map.items()) if k != v]
    assert ("count__1d", "count") in maps and ("area_sum__1d", "area_sum") in maps
    for model_ in (m_ for m_ in models.values() if m_ is not ens):  # (ONNX Runtime warns of one at each load)
        proto = onnx.load(executable_path(model_), load_external_data=False)
        read = {i for n in proto.graph.node for i in n.input}
        assert [t.name for t in proto.graph.initializer if t.name not in read] == [], model_.name
    rng = np.random.default_rng(5)
    for shape in ((1, 4, 8), (2, 16, 8), (2, 32, 8)):
        feeds = {"feats": rng.standard_normal(shape).astype(np.float32)}
        got = run_ensemble(repo, feeds)
        want = ort_reference(m, feeds)
        names = [o.name for o in m.graph.output]
        assert got["area_sum"].shape == (1,) and want[names.index("area_sum")].shape == ()
        got["area_sum"] = got["area_sum"].reshape(())
        assert_same([got[n] for n in names], want, atol=1e-5)
    with pytest.raises(ExportError, match=r"--max-batch-size 2: .*(is fixed|no leading dim|depends on the data)"):
        triton_repo(source, TritonOptions(max_batch_size=2))
    # as full-TensorRT plans (stand-in engine bytes): the engine writing the scalar count goes as ONNX
    source.runtime = "tensorrt 10.13.0.35"
    source.engines = {seg.id: {"8.6": b"stand-in"} for seg in source.plan.segments if seg.backend == "tensorrt"}
    plans = triton_repo(source)
    forms = {m.segment: m.form for m in plans.models if m.segment_backend == "tensorrt"}
    assert forms == {0: "plan", 2: "onnx"}
    assert any("segment 2 exported as ONNX, not as a plan" in n and "'count'" in n for n in plans.notes)
    with pytest.raises(ExportError, match="segment 2 cannot be a plan: its engine reads or writes scalar"):
        triton_repo(source, TritonOptions(trt_format="plan"))


def _saved(m: onnx.ModelProto, folder, name: str = "m.onnx", external: bool = False) -> str:
    path = str(folder / name)
    onnx.save_model(m, path, save_as_external_data=external, all_tensors_to_one_file=True,
                    location=name + ".weights", size_threshold=0)
    return path


def test_transformer_with_dynamic_sequence_length(tmp_path) -> None:
    m = transformer_model()
    profiles = [{"x": ((1, 1, 32), (2, 8, 32), (2, 16, 32))}]
    source = from_model(_saved(m, tmp_path, "transformer.onnx"), profiles,
                        SessionOptions(exclude_ops=("Softmax", "LayerNormalization"), min_segment_size=1))
    assert len(source.plan.segments) >= 5
    repo = str(tmp_path / "repo")
    write_repo(triton_repo(source), repo)
    models, ens = check_repo(repo)
    assert ens.name == "transformer"
    assert list(ens.config.input[0].dims) == [-1, -1, 32]
    shape_tensors = {n for seg in source.plan.segments if seg.backend == "tensorrt"
                     for p in source.segment_profiles[seg.id] for n, tp in p.items() if tp.values is not None}
    assert shape_tensors  # the head split/merge shapes cross into TensorRT segments as shape tensors
    params = {}
    for rm in models.values():
        for acc in rm.config.optimization.execution_accelerators.gpu_execution_accelerator:
            params.update({k: acc.parameters[k] for k in ("trt_profile_min_shapes", "trt_profile_max_shapes")
                           if k in acc.parameters and any(n + ":" in acc.parameters[k] for n in shape_tensors)})
    # a shape tensor's profile is its values (B in 1..2, S in 1..16), as ONNX Runtime's TensorRT EP reads it
    assert re.search(r"(split|merge)_shape:1x1(x|,|$)", params["trt_profile_min_shapes"])
    assert re.search(r"(split|merge)_shape:2x16(x|,|$)", params["trt_profile_max_shapes"])
    rng = np.random.default_rng(7)
    _check_against_ort(repo, m, [{"x": rng.standard_normal((b, s, 32)).astype(np.float32)}
                                 for b, s in ((1, 1), (2, 7), (1, 16), (2, 16))])
    with pytest.raises(ExportError, match=r"--max-batch-size 2: .*'(split_shape|merge_shape|xs|bs)'"):
        triton_repo(source, TritonOptions(max_batch_size=2))


def test_external_weights_land_in_the_model_onnx_folder(tmp_path, capsys) -> None:
    m = conv_chain(blocks=2)
    path = _saved(m, tmp_path, "convs.onnx", external=True)
    assert os.path.isfile(path + ".weights")
    repo = str(tmp_path / "repo")
    assert main(["export-triton", path, "-o", repo, "--min-shapes", "x:1x8x16x16", "--opt-shapes", "x:2x8x16x16",
                 "--max-shapes", "x:4x8x16x16"]) == 0
    models, ens = check_repo(repo)
    assert [s.model_name for s in ens.config.ensemble_scheduling.step] == ["convs_0_trt", "convs_1_ort", "convs_2_trt"]
    for name in ("convs_0_trt", "convs_1_ort", "convs_2_trt"):  # Triton's folder form
        assert os.path.isfile(os.path.join(repo, name, "1", "model.onnx", "model.onnx"))
    for name in ("convs_0_trt", "convs_2_trt"):  # the Conv weights (the Resize segment has only tiny constants)
        folder = os.path.join(repo, name, "1", "model.onnx")
        assert sorted(os.listdir(folder)) == ["model.onnx", "model.onnx.data"]
        proto = onnx.load(os.path.join(folder, "model.onnx"), load_external_data=False)
        assert sum(t.data_location == T.EXTERNAL for t in proto.graph.initializer) == 2
    rng = np.random.default_rng(2)
    _check_against_ort(repo, onnx.load(path), [{"x": rng.standard_normal((n, 8, 16, 16)).astype(np.float32)}
                                               for n in (1, 4)])


def test_bad_options_are_one_line_errors(demo_build, tmp_path, capsys) -> None:
    with pytest.raises(OptionsError, match="ort_kind must be one of cpu, gpu"):
        TritonOptions(ort_kind="tpu")
    assert main(["export-triton", demo_build, "-o", str(tmp_path / "r"), "--max-batch-size", "-1"]) == 1
    assert "max_batch_size must be a whole number >= 0" in capsys.readouterr().err
    assert main(["export-triton", str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.onnx" in err and "Traceback" not in err


# ------------------------------------------------------------------ the checker can fail


def _edit(repo: str, model: str, old: str, new: str) -> None:
    path = os.path.join(repo, model, "config.pbtxt")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert old in text, (old, text)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(old, new, 1))


@pytest.mark.parametrize("model, old, new, message", [
    ("demo", 'input_map { key: "r2" value: "r2" }', "", "must specify 'input_map'"),
    ("demo_1_ort", 'name: "r2"', 'name: "r3"', "maps to non-existing input 'r2' of 'demo_1_ort'"),
    ("demo", 'output_map { key: "up" value: "up" }', 'output_map { key: "up" value: "r2" }', "only once"),
    ("demo_2_trt", "dims: [ -1, 8, 64, 64 ]", "dims: [ -1, 8, 32, 64 ]", "ensemble tensor 'up'"),
    ("demo_2_trt", "data_type: TYPE_FP32", "data_type: TYPE_FP16", "ensemble tensor 'up'"),
    ("demo_1_ort", "dims: [ -1, 8, 32, 32 ]", "dims: [ ]", "must specify dims"),
    ("demo_1_ort", "max_batch_size: 0", "max_batch_size: 4", "does not batch"),
    ("demo", 'model_name: "demo_1_ort"', 'model_name: "demo_9_ort"', "not in the repository"),
    ("demo", "ensemble_scheduling {", "instance_group [ { kind: KIND_CPU } ]\nensemble_scheduling {",
     "instance_group, optimization and model_warmup are not allowed"),
])
def test_the_checker_refuses_what_triton_refuses(demo_build, tmp_path, model, old, new, message) -> None:
    repo = str(tmp_path / "repo")
    write_repo(triton_repo(from_build_folders([demo_build])), repo)
    check_repo(repo)
    _edit(repo, model, old, new)
    with pytest.raises(AssertionError, match=message):
        run_ensemble(repo, _images(2)[0])


def test_the_checker_refuses_missing_files_and_weights(demo_build, tmp_path) -> None:
    from tests.support.triton_checker import RepoInvalid

    repo = str(tmp_path / "repo")
    exported = triton_repo(from_build_folders([demo_build], external_weights=True))
    write_repo(exported, repo)
    check_repo(repo)
    os.remove(os.path.join(repo, "demo_0_trt", "1", "model.onnx", "model.onnx.data"))
    with pytest.raises(RepoInvalid, match="weights file .*model.onnx.data of '.*' is missing"):
        check_repo(repo)
    write_repo(exported, repo, force=True)
    os.remove(os.path.join(repo, "demo_2_trt", "1", "model.onnx", "model.onnx"))
    with pytest.raises(RepoInvalid, match="demo_2_trt.*model.onnx is missing"):
        check_repo(repo)


def test_a_failed_write_leaves_the_old_repo_and_no_temp_folder(demo_build, tmp_path, capsys) -> None:
    repo = tmp_path / "repo"
    assert main(["export-triton", demo_build, "-o", str(repo)]) == 0
    before = sorted(os.listdir(repo))
    long_name = "m" * 300  # a valid model name, but no file system takes a folder name this long
    assert main(["export-triton", demo_build, "-o", str(repo), "--force", "--name", long_name]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"trt-backend: error: cannot write {repo}: File name too long") and err.count("\n") == 1
    assert sorted(os.listdir(repo)) == before
    assert sorted(os.listdir(tmp_path)) == ["repo"]


def test_signed_builds_export_only_with_their_key(tmp_path, capsys) -> None:
    from trt_backend.artifacts.write import build as build_folder_build

    signed = str(tmp_path / "signed")
    build_folder_build(DEMO_PATH, signed, DEMO_PROFILE, SessionOptions(sign_key="key-one"))
    assert main(["export-triton", signed, "-o", str(tmp_path / "a"), "--sign-key", "key-one"]) == 0
    capsys.readouterr()
    assert main(["export-triton", signed, "-o", str(tmp_path / "b"), "--sign-key", "key-two"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sign" in err and not (tmp_path / "b").exists()


def constants_output_model() -> onnx.ModelProto:
    """y = Relu(x) and an output computed from constants alone (ConstantOfShape -> Mul -> Sigmoid)."""
    nodes = [h.make_node("Relu", ["x"], ["y"]),
             h.make_node("ConstantOfShape", ["shp"], ["c0"], value=nh.from_array(np.array([2.0], np.float32))),
             h.make_node("Mul", ["c0", "c0"], ["c1"]), h.make_node("Sigmoid", ["c1"], ["c"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["N", 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["N", 4]), h.make_tensor_value_info("c", T.FLOAT, [3])],
                     [nh.from_array(np.array([3], np.int64), "shp")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def test_a_segment_of_constants_only_is_scheduled_by_a_model_input(tmp_path) -> None:
    m = constants_output_model()
    source = from_model(_saved(m, tmp_path), [{"x": ((1, 4), (2, 4), (4, 4))}],
                        SessionOptions(exclude_ops=("Relu",), min_segment_size=1))
    assert [(s.backend, s.inputs) for s in source.plan.segments] == [("onnxruntime", ("x",)), ("tensorrt", ())]
    exported = triton_repo(source)
    assert any("segment 1 computes constants only; it takes model input 'x' (unused)" in n for n in exported.notes)
    repo = str(tmp_path / "repo")
    write_repo(exported, repo)
    models, ens = check_repo(repo)
    assert [dict(s.input_map) for s in ens.config.ensemble_scheduling.step] == [{"x": "x"}, {"x": "x"}]
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    _check_against_ort(repo, m, [{"x": x}])


def test_a_sequence_output_is_one_line_saying_triton_declares_tensors_only(tmp_path, capsys) -> None:
    """A model whose output is a sequence (as skl2onnx's ZipMap makes maps): Triton's model
    configuration has no type for it; the refusal says so of the output, not of a hand-over."""
    graph = h.make_graph([h.make_node("Relu", ["x"], ["r"]), h.make_node("SequenceConstruct", ["r", "x"], ["s"])],
                         "seq", [h.make_tensor_value_info("x", T.FLOAT, [2, 4])],
                         [h.make_value_info("s", h.make_sequence_type_proto(h.make_tensor_type_proto(T.FLOAT, None)))])
    path = str(tmp_path / "seq.onnx")
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8), path)
    folder = str(tmp_path / "b")
    assert main(["build", path, "-o", folder]) == 0
    capsys.readouterr()
    assert main(["export-triton", folder, "-o", str(tmp_path / "repo")]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'s' is a sequence_type, not a tensor" in err, err
    assert "declares tensors only" in err and not os.path.exists(tmp_path / "repo")


def test_tensors_whose_only_dim_is_the_batch_are_reshaped_as_triton_declares_them(tmp_path) -> None:
    """A classifier's labels ([batch]) and an input of one value per row: with --max-batch-size,
    Triton declares such a tensor dims [1] reshaped to [] in the model that computes or reads it
    (dims must not be empty), so clients send and get it as [batch, 1]. Before, the export was
    refused."""
    m, X = digits_classifier()
    path = _saved(m, tmp_path, "digits.onnx")
    folder = str(tmp_path / "b")
    assert main(["build", path, "-o", folder, "--min-shapes", "X:1x64", "--opt-shapes", "X:4x64",
                 "--max-shapes", "X:8x64"]) == 0
    repo = str(tmp_path / "repo")
    assert main(["export-triton", folder, "-o", repo, "--max-batch-size", "8"]) == 0
    models, ens = check_repo(repo)
    label = next(o for o in ens.config.output if o.name == "label")
    assert list(label.dims) == [1] and not label.HasField("reshape")
    made = [o for c in models.values() if c is not ens for o in c.config.output if o.name == "label"]
    assert [(list(o.dims), list(o.reshape.shape), o.HasField("reshape")) for o in made] == [([1], [], True)]
    for rows in (X[1200:1203], X[1300:1308]):
        got = run_ensemble(repo, {"X": rows})
        want = ort_reference(m, {"X": rows})
        assert got["label"].shape == (len(rows), 1)
        assert np.array_equal(got["label"][:, 0], want[0]) and np.abs(got["probabilities"] - want[1]).max() < 1e-5

    # One value per row in: the ensemble takes [batch, 1], the model reads [batch].
    graph = h.make_graph([h.make_node("Mul", ["w", "two"], ["w2"]), h.make_node("Unsqueeze", ["w2", "one"], ["w2c"]),
                          h.make_node("Add", ["x", "w2c"], ["y"])], "rows",
                         [h.make_tensor_value_info("x", T.FLOAT, ["n", 4]),
                          h.make_tensor_value_info("w", T.FLOAT, ["n"])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["n", 4])],
                         [nh.from_array(np.array(2, np.float32), "two"), nh.from_array(np.array([1], np.int64), "one")])
    rows_model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    source = from_model(_saved(rows_model, tmp_path, "rows.onnx"), [{"x": ((1, 4), (2, 4), (4, 4)),
                                                                      "w": ((1,), (2,), (4,))}])
    repo2 = str(tmp_path / "repo2")
    write_repo(triton_repo(source, TritonOptions(max_batch_size=4)), repo2)
    models, ens = check_repo(repo2)
    w = next(i for i in ens.config.input if i.name == "w")
    assert list(w.dims) == [1] and not w.HasField("reshape")
    x = np.random.default_rng(3).random((3, 4), dtype=np.float32)
    wv = np.array([1.0, -2.0, 0.5], np.float32)
    got = run_ensemble(repo2, {"x": x, "w": wv[:, None]})
    assert np.abs(got["y"] - (x + 2 * wv[:, None])).max() < 1e-6


def test_the_python_door_writes_a_repository_from_a_source(tmp_path) -> None:
    """trt_backend.export listed sources and write_repo, but write_repo took a TritonRepo that
    nothing public made, and a source handed to it ended in an AttributeError. It takes the
    source (default options) or triton_repo(source, TritonOptions(...)), now public, and anything
    else is one ExportError."""
    from trt_backend import Session, SessionOptions, export
    from trt_backend.data.demo import DEMO_PATH
    from trt_backend.errors import ExportError

    session = Session(DEMO_PATH, [{"image": ((1, 3, 32, 32), (4, 3, 32, 32), (8, 3, 32, 32))}],
                      SessionOptions(emulate=True))
    source = export.from_session(session)
    export.write_repo(source, str(tmp_path / "plain"))
    export.write_repo(export.triton_repo(source, export.TritonOptions(max_batch_size=8)), str(tmp_path / "batched"))
    for repo, batch in (("plain", 0), ("batched", 8)):
        configs = [os.path.join(root, f) for root, _, files in os.walk(tmp_path / repo) for f in files
                   if f == "config.pbtxt"]
        assert len(configs) == 4 and all(f"max_batch_size: {batch}" in open(c).read() for c in configs), repo
    with pytest.raises(ExportError, match="write_repo takes a TritonRepo .* or an ExportSource .*, got str"):
        export.write_repo("demo_build", str(tmp_path / "wrong"))  # type: ignore[arg-type]
    session.close()


def test_profiles_the_accelerator_cannot_read_are_left_out_with_a_note(tmp_path, capsys) -> None:
    """ONNX Runtime's TensorRT provider reads its profiles as ``name:dims`` lists, cut at the first
    ':' and ','; tf2onnx names every tensor ``...:0``. Such a segment's accelerator gets no profiles,
    and the export says so (it said nothing, and the accelerator then builds per input shape)."""
    nodes = [h.make_node("Relu", ["x"], ["conv:0"], name="r0"), h.make_node("Sin", ["conv:0"], ["sin:0"], name="sin"),
             h.make_node("Relu", ["sin:0"], ["y"], name="r1")]
    path = str(tmp_path / "tf.onnx")
    onnx.save(h.make_model(h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["N", 4])],
                                        [h.make_tensor_value_info("y", T.FLOAT, ["N", 4])]),
                           opset_imports=[h.make_opsetid("", 17)]), path)
    folder, repo = str(tmp_path / "b"), str(tmp_path / "repo")
    assert main(["build", path, "-o", folder, "--min-shapes", "x:1x4", "--opt-shapes", "x:2x4", "--max-shapes", "x:8x4",
                 "--exclude-ops", "Sin", "--min-segment-size", "1", "--no-boundary-cost", "-q"]) == 0
    capsys.readouterr()
    assert main(["export-triton", folder, "-o", repo]) == 0
    out = capsys.readouterr().out
    assert "segment 2: its TensorRT accelerator is given no profiles (input 'sin:0' has ':' or ','" in out, out
    models, _ = check_repo(repo)
    first = models["tf_0_trt"].config.optimization.execution_accelerators.gpu_execution_accelerator[0]
    last = models["tf_2_trt"].config.optimization.execution_accelerators.gpu_execution_accelerator[0]
    assert dict(first.parameters)["trt_profile_max_shapes"] == "x:8x4"
    assert "trt_profile_max_shapes" not in dict(last.parameters)
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(run_ensemble(repo, {"x": x})["y"], np.maximum(np.sin(np.maximum(x, 0)), 0), atol=1e-6)


def test_an_output_shape_the_model_declares_wrongly_is_written_as_it_computes(tmp_path, capsys) -> None:
    """Where nothing computes an output's shape (an op of ONNX Runtime's own domain), its declaration
    was written into the configs as it is: ddddocr's old recognizer declares [1, -1] for an output of
    shape (24, 1, 8210), which Triton would refuse. One run checks the declarations; a contradicted
    one is written with the rank it computed, every dim -1, and said."""
    g = h.make_graph([h.make_node("Relu", ["x"], ["r"], name="relu"),
                      h.make_node("Gelu", ["r"], ["y"], domain="com.microsoft", name="gelu")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [1, 4])], [h.make_tensor_value_info("y", T.FLOAT, [1])])
    path = str(tmp_path / "declared.onnx")
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)]), path)
    folder, repo = str(tmp_path / "b"), str(tmp_path / "repo")
    assert main(["build", path, "-o", folder, "--min-segment-size", "1", "--no-boundary-cost", "-q"]) == 0
    capsys.readouterr()
    assert main(["export-triton", folder, "-o", repo]) == 0
    out = capsys.readouterr().out
    assert "model output(s) 'y' declared [1] but computed (1, 4) when the model ran" in out, out
    models, ens = check_repo(repo)
    assert [list(o.dims) for o in ens.config.output] == [[-1, -1]]
    x = np.array([[-1.0, 0.5, 2.0, -3.0]], np.float32)
    assert run_ensemble(repo, {"x": x})["y"].shape == (1, 4)

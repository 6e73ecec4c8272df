"""Real TensorRT-RTX ahead-of-time builds on CPU (no mocks): light models, multi-segment graphs,
options, profiles, and the fallback loop that demotes what TensorRT refuses and re-plans."""
from __future__ import annotations

import logging
import os

import onnx
import pytest
from onnx import TensorProto, helper

from partitioner import PartitionOptions, load_model, plan_model
from partitioner.errors import OptionsError
from tests.helpers import assert_plan_valid, model, vi
from tests.support.graphs import CONV_RESIZE_PROFILE, conv_resize_conv
from tests.support.small_cnn import small_cnn
from trt_backend.engines.builder import (
    BuildOptions,
    build_segment,
    compile_segment,
    file_as_is,
)
from trt_backend.engines.fallback import build_engines, build_with_fallback
from trt_backend.engines.report import BuildEvent
from trt_backend.engines.targets import build_target
from trt_backend.errors import SegmentBuildError
from trt_backend.planning import make_plan
from trt_backend.tensorrt.flavor import network_flags

pytestmark = pytest.mark.tensorrt

FAST_LIGHT = ["light_bvlc_alexnet", "light_squeezenet", "light_vgg19", "light_zfnet512", "light_inception_v1"]
SLOW_LIGHT = ["light_densenet121", "light_inception_v2", "light_resnet50", "light_shufflenet"]
PROFILE = CONV_RESIZE_PROFILE


def _light(light_dir: str, name: str) -> str:
    return os.path.join(light_dir, name + ".onnx")


def _check_light(flavor, light_dir: str, name: str, options: BuildOptions | None = None) -> None:
    plan = make_plan(_light(light_dir, name), flavor=flavor.name)
    result = build_engines(plan, [], options or BuildOptions(), flavor=flavor)
    assert result.report.failures == []
    assert sorted(result.engines) == [s.id for s in plan.tensorrt_segments()] != []
    for row in result.report.segments:
        assert row.engine_bytes == len(result.engines[row.segment]) > 0
        assert row.layers > 0 and row.seconds > 0 and not row.cached


@pytest.mark.parametrize("name", FAST_LIGHT)
def test_light_models_build(flavor, light_dir: str, name: str) -> None:
    _check_light(flavor, light_dir, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW_LIGHT)
def test_light_models_build_slow(flavor, light_dir: str, name: str) -> None:
    _check_light(flavor, light_dir, name)


@pytest.mark.parametrize("precision", ["tf32", "fp16", "bf16"])
def test_precisions_build(flavor, light_dir: str, precision: str) -> None:
    plan = make_plan(_light(light_dir, "light_squeezenet"), flavor=flavor.name)
    result = build_engines(plan, [], BuildOptions(precision=precision), flavor=flavor)
    assert [r.precision for r in result.report.segments] == [precision]


def test_light_model_cut_into_many_segments_builds_in_parallel(flavor, light_dir: str) -> None:
    plan = make_plan(_light(light_dir, "light_inception_v1"), PartitionOptions(exclude_ops=("Concat",)),
                     flavor=flavor.name)
    assert len(plan.tensorrt_segments()) >= 5
    events: list[BuildEvent] = []
    result = build_engines(plan, [], BuildOptions(max_workers=2), flavor=flavor, progress=events.append)
    assert result.report.failures == [] and len(result.engines) == len(plan.tensorrt_segments())
    assert [e.done for e in events] == list(range(1, len(events) + 1))
    assert {e.status for e in events} == {"built"} and events[-1].total == len(events)
    assert "engine bytes" in result.report.table()


def test_multi_segment_graph_with_dynamic_batch(flavor) -> None:
    plan = make_plan(conv_resize_conv(), PartitionOptions(min_segment_size=1), flavor=flavor.name)
    assert [s.backend for s in plan.segments] == ["tensorrt", "onnxruntime", "tensorrt"]
    result = build_engines(plan, PROFILE, BuildOptions(precision="fp16"), flavor=flavor)
    assert sorted(result.engines) == [0, 2] and result.report.failures == []
    by_segment = {0: PROFILE, 2: PROFILE}  # the per-segment form profile derivation returns
    assert sorted(build_engines(plan, by_segment, flavor=flavor).engines) == [0, 2]


def test_fallback_demotes_what_the_parser_rejects_and_replans(flavor) -> None:
    m = conv_resize_conv()
    plan = plan_model(load_model(m), None, PartitionOptions(min_segment_size=1))  # no parser: all TensorRT
    assert [s.backend for s in plan.segments] == ["tensorrt"]
    result = build_with_fallback(plan, PROFILE, flavor=flavor, min_segment_size=1)
    assert [s.backend for s in result.plan.segments] == ["tensorrt", "onnxruntime", "tensorrt"]
    assert_plan_valid(result.plan)
    [demoted] = result.report.demoted
    assert (demoted.name, demoted.op_type, demoted.round) == ("r", "Resize", 1)
    assert "transformation modes" in demoted.reason and result.report.rounds == 2
    assert result.plan.nodes[1].reason == demoted.reason
    assert sorted(result.engines) == [s.id for s in result.plan.tensorrt_segments()]


def test_fallback_after_max_rounds_demotes_whole_segments(flavor) -> None:
    plan = plan_model(load_model(conv_resize_conv()), None, PartitionOptions(min_segment_size=1))
    result = build_with_fallback(plan, PROFILE, flavor=flavor, min_segment_size=1, max_rounds=0)
    assert [s.backend for s in result.plan.segments] == ["onnxruntime"] and result.engines == {}
    assert len(result.report.demoted) == 4


def test_build_failure_without_named_node_fails_the_segment(flavor, light_dir: str) -> None:
    plan = make_plan(_light(light_dir, "light_squeezenet"), flavor=flavor.name)
    result = build_engines(plan, [], BuildOptions(workspace_bytes=0), flavor=flavor)
    [failure] = result.report.failures
    assert failure.stage == "build" and "workspace" in failure.message and failure.nodes == ()
    fallback = build_with_fallback(plan, [], BuildOptions(workspace_bytes=0), flavor=flavor)
    assert [s.backend for s in fallback.plan.segments] == ["onnxruntime"]
    assert len(fallback.report.demoted) == len(plan.nodes)


def test_build_segment_raises_with_local_node_indices(flavor) -> None:
    m = conv_resize_conv(batch=1)
    with pytest.raises(SegmentBuildError) as info:
        build_segment(m, [], BuildOptions(), flavor)
    assert info.value.stage == "parse" and info.value.nodes == (1,)
    good = model([m.graph.node[0]], [vi("x", [1, 3, 16, 16])], [vi("c", [1, 4, 16, 16])],
                 [t for t in m.graph.initializer if t.name == "w"])
    assert len(build_segment(good, [], BuildOptions(), flavor)) > 1000


def test_options_are_applied(flavor) -> None:
    m = conv_resize_conv(batch=2)
    seg = make_plan(m, PartitionOptions(min_segment_size=1), flavor=flavor.name).extract(0)
    options = BuildOptions(workspace_bytes=1 << 28, builder_optimization_level=1, max_aux_streams=2,
                           hardware_compatibility="ampere_plus", precision="fp32")
    built = compile_segment(seg, [], options, flavor)
    assert built.layers == 1 and len(built.engine) > 1000 and built.precision == "fp32"
    if flavor.is_rtx:
        one = compile_segment(seg, [], BuildOptions(compute_capabilities=("sm_80",)), flavor)
        three = compile_segment(seg, [], BuildOptions(compute_capabilities=("SM80", "8.6", "sm89")), flavor)
        assert len(three.engine) > len(one.engine)
        with pytest.raises(OptionsError, match="SM99"):
            compile_segment(seg, [], BuildOptions(compute_capabilities=("sm99",)), flavor)
        assert network_flags(flavor) == 0  # strongly typed without asking


def test_options_validation() -> None:
    for bad in ({"precision": "int8"}, {"builder_optimization_level": 7}, {"workspace_bytes": -1},
                {"hardware_compatibility": "turing"}, {"compute_capabilities": ("eighty",)}, {"max_workers": -2}):
        with pytest.raises(OptionsError):
            BuildOptions(**bad)  # type: ignore[arg-type]
    assert BuildOptions(compute_capabilities=("sm_86", "8.9", "current")).compute_capabilities == \
        ("SM86", "SM89", "CURRENT")
    assert "timing_cache" not in BuildOptions(timing_cache="t.cache").key_fields()


def test_build_target(flavor) -> None:
    assert build_target(flavor, BuildOptions(compute_capabilities=("sm80",))) == "cc:SM80"
    assert build_target(flavor, BuildOptions(hardware_compatibility="ampere_plus")) == "hw:ampere_plus"


def test_profiles_checked_before_building(flavor) -> None:
    plan = make_plan(conv_resize_conv(), PartitionOptions(min_segment_size=1), flavor=flavor.name)
    with pytest.raises(OptionsError, match="no optimisation profile"):
        build_engines(plan, [], flavor=flavor)
    with pytest.raises(OptionsError, match="no shape range for dynamic segment input 'r'"):
        build_engines(plan, [{"x": PROFILE[0]["x"]}], flavor=flavor)
    with pytest.raises(OptionsError, match="axis 1 is fixed at 3"):
        build_engines(plan, [{**PROFILE[0], "x": ((1, 2, 16, 16),) * 3}], flavor=flavor)
    with pytest.raises(OptionsError, match="min <= opt <= max"):
        build_engines(plan, [{**PROFILE[0], "x": ((4, 3, 16, 16), (2, 3, 16, 16), (1, 3, 16, 16))}], flavor=flavor)


def test_several_profiles_and_shape_tensor_inputs(flavor) -> None:
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")]
    m = model(nodes, [vi("x", ["N", 6]), vi("shape", [2], TensorProto.INT64)], [vi("y", ["A", "B"])])
    rng = {"x": ((1, 6), (2, 6), (4, 6))}
    values = {"min": (1, 6), "opt": (2, 6), "max": (4, 6)}
    shape_entry = {"min": (2,), "opt": (2,), "max": (2,), "values": tuple(values.values())}
    engine = build_segment(m, [{**rng, "shape": shape_entry}, {"x": ((8, 6),) * 3,
                                                                "shape": {**shape_entry, "values": ((8, 6),) * 3}}],
                           BuildOptions(), flavor)
    assert len(engine) > 1000
    with pytest.raises(OptionsError, match="shape tensor"):
        build_segment(m, [{**rng, "shape": ((2,), (2,), (2,))}], BuildOptions(), flavor)


def test_timing_cache_ignored_on_rtx(flavor, tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    if not flavor.is_rtx:
        pytest.skip("TensorRT-RTX behaviour")
    plan = make_plan(conv_resize_conv(batch=1), PartitionOptions(min_segment_size=1), flavor=flavor.name)
    with caplog.at_level(logging.INFO, logger="trt_backend.engines.fallback"):
        result = build_engines(plan, [], BuildOptions(timing_cache=str(tmp_path / "t.cache")), flavor=flavor)
    assert len(result.engines) == 2 and "no-ops in TensorRT-RTX" in caplog.text
    assert not (tmp_path / "t.cache").exists()


def test_rewrite_hook_runs_before_the_build(flavor) -> None:
    """A segment rewrite (what plugin substitution will use) sees each extracted segment first."""
    def supported_mode(m: onnx.ModelProto) -> onnx.ModelProto:
        for node in m.graph.node:
            for a in node.attribute:
                if a.name == "coordinate_transformation_mode":
                    a.s = b"half_pixel"
        return m

    plan = plan_model(load_model(conv_resize_conv()), None, PartitionOptions(min_segment_size=1))
    result = build_with_fallback(plan, PROFILE, flavor=flavor, rewrite=supported_mode)
    assert result.report.demoted == [] and [s.backend for s in result.plan.segments] == ["tensorrt"]


def test_expected_parser_complaints_are_not_logged_as_errors(flavor, caplog: pytest.LogCaptureFixture) -> None:
    plan = plan_model(load_model(conv_resize_conv()), None, PartitionOptions(min_segment_size=1))
    with caplog.at_level(logging.DEBUG, logger="trt_backend"):
        build_with_fallback(plan, PROFILE, flavor=flavor, min_segment_size=1)
    assert not [r for r in caplog.records if r.name == "trt_backend.tensorrt" and r.levelno >= logging.ERROR]
    assert any("transformation modes" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


@pytest.mark.gpu
def test_full_tensorrt_cache_target_is_the_current_gpu() -> None:
    """Full TensorRT builds for the GPU it runs on, so its cache keys carry that GPU's SM."""
    import types

    from trt_backend.engines.targets import current_sm
    from trt_backend.tensorrt.flavor import Flavor

    sm = current_sm()
    if sm is None:
        pytest.skip("no usable CUDA device (or no cuda-python)")
    assert sm.isdigit() and int(sm) >= 50
    full = Flavor("tensorrt", "10.13.0", types.ModuleType("tensorrt"))
    assert build_target(full, BuildOptions()) == f"sm:{sm}"


def test_a_whole_model_is_built_from_its_file_only_as_the_file_holds_it(tmp_path) -> None:
    """``file_as_is`` names the model's file for a segment that is all of it, and nothing where the
    file would build something else than what was loaded: weights read from another folder, the
    file changed since, Q/DQ rewritten while loading, or a segment that is a part of it."""
    path = small_cnn(str(tmp_path / "old.onnx"), old_format=True)
    loaded = load_model(path)
    whole = loaded.proto
    assert file_as_is(loaded, whole) == os.path.abspath(path)
    part = onnx.ModelProto()
    part.CopyFrom(whole)
    del part.graph.node[-1]
    assert file_as_is(loaded, part) is None

    data = str(tmp_path / "data")
    os.mkdir(data)
    external = str(tmp_path / "data" / "cnn.onnx")
    onnx.save(onnx.load(path), external, save_as_external_data=True, location="cnn.data", size_threshold=0)
    assert file_as_is(load_model(external), whole) == os.path.abspath(external)
    os.replace(str(tmp_path / "data" / "cnn.data"), str(tmp_path / "cnn.data"))  # the weights moved beside
    assert file_as_is(load_model(external, base_dir=str(tmp_path)), whole) is None

    later = load_model(path)
    onnx.save(onnx.load(path), path + ".new")
    os.replace(path + ".new", path)
    assert file_as_is(later, whole) is None

    qdq = load_model(path)
    qdq.rewritten["conv"] = "re-quantized"
    assert file_as_is(qdq, whole) is None

"""Plugins in planning: targets, stand-in validation of a claimed node's neighbours, forced
plugin ops, the CLI options, and emulated sessions against whole-model ONNX Runtime."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.support.resize_models import crop_cnn, fpn, native_upsample
from partitioner import OptionsError, PartitionOptions, QueryResult, plan_model
from plugins import default_registry, rewrite_for_engine
from tests.helpers import assert_plan_valid
from trt_backend.cli import main

RTX_REASON = ("plugin resize covers it, but target tensorrt_rtx cannot run it: "
              "TensorRT-RTX 1.7 has no Python plugin support")


def options(target: str, **kw) -> PartitionOptions:
    return PartitionOptions(plugins=default_registry().claims(), target=target, **kw)


def shapes(plan) -> list[tuple[str, int]]:
    return [(s.backend, len(s.nodes)) for s in plan.segments]


class Recording:
    """The real parser oracle, with every queried model kept."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.queries: list[onnx.ModelProto] = []

    @property
    def target(self) -> str:
        return self.inner.target

    def query(self, model: onnx.ModelProto) -> QueryResult:
        self.queries.append(model)
        return self.inner.query(model)


@pytest.mark.parametrize("antialias", [False, True])
def test_target_tensorrt_plans_one_segment_and_rtx_three(oracle, antialias: bool) -> None:
    model = crop_cnn(antialias=antialias)
    one = plan_model(model, oracle, options("tensorrt"))
    assert shapes(one) == [("tensorrt", 7)] and one.target == "tensorrt"
    assert one.nodes[3].verdict == "plugin:resize" and one.nodes[3].reason is None
    three = plan_model(model, oracle, options("tensorrt_rtx"))
    assert shapes(three) == [("tensorrt", 3), ("onnxruntime", 1), ("tensorrt", 3)] and three.target == "tensorrt_rtx"
    reason = three.nodes[3].reason or ""
    assert reason.startswith("TensorRT parser: UNSUPPORTED_NODE") and RTX_REASON in reason
    assert json.loads(one.to_json())["target"] == "tensorrt" and json.loads(three.to_json())["target"] == "tensorrt_rtx"
    for plan in (one, three):
        assert_plan_valid(plan)


@pytest.mark.parametrize("antialias", [False, True])
def test_emulated_sessions_match_whole_model_onnx_runtime(oracle, antialias: bool) -> None:
    from trt_backend.session.options import SessionOptions
    from trt_backend.session.session import Session

    model = crop_cnn(antialias=antialias)
    x = np.random.default_rng(4).standard_normal((2, 3, 16, 16)).astype(np.float32)
    whole = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    profile = [{"x": ((1, 3, 16, 16), (2, 3, 16, 16), (4, 3, 16, 16))}]
    for target, n in (("tensorrt", 1), ("tensorrt_rtx", 3)):
        plan = plan_model(model, oracle, options(target))
        sess = Session(plan, profile, SessionOptions(emulate=True))
        assert len(sess.plan.segments) == n
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], whole, rtol=1e-5, atol=1e-5)


def test_fpn_resizes_rejected_three_ways_become_one_segment(oracle) -> None:
    without = plan_model(fpn(), oracle, options("tensorrt_rtx"))
    with_plugins = plan_model(fpn(), oracle, options("tensorrt"))
    assert len(without.segments) == 5 and shapes(with_plugins) == [("tensorrt", 18)]
    reasons = {n.name: n.reason or "" for n in without.nodes if n.op_type == "Resize"}
    assert "keep_aspect_ratio_policy" in reasons["up2"] and "Antialiasing" in reasons["shrink"]
    assert all(RTX_REASON in r for r in reasons.values())
    assert plan_model(fpn(), oracle, PartitionOptions(target="tensorrt")).segments == without.segments


def test_claimed_nodes_neighbours_are_parsed_with_a_stand_in(oracle) -> None:
    rec = Recording(oracle)
    plan = plan_model(crop_cnn(), rec, options("tensorrt"))
    assert shapes(plan) == [("tensorrt", 7)]
    last = rec.queries[-1]
    names = [n.name for n in last.graph.node]
    assert "crop_resize::standin" in names and "crop_resize" not in names
    assert {"conv2", "conv3"} <= set(names)  # both neighbours in one network with the stand-in
    standin = next(n for n in last.graph.node if n.name == "crop_resize::standin")
    assert standin.op_type == "Resize" and {a.name: a.s for a in standin.attribute}["mode"] == b"nearest"


class RejectStandIns:
    """An oracle wrapper that rejects any network holding a plugin stand-in, naming ``culprit``."""

    def __init__(self, inner, culprit: str) -> None:
        self.inner, self.culprit = inner, culprit

    @property
    def target(self) -> str:
        return self.inner.target

    def query(self, model: onnx.ModelProto) -> QueryResult:
        names = [n.name for n in model.graph.node]
        hit = [i for i, n in enumerate(names) if n == self.culprit or n == self.culprit + "::standin"]
        if hit and any(n.endswith("::standin") for n in names):
            return QueryResult(False, (), {hit[0]: "UNSUPPORTED_NODE: rejected next to a stand-in"})
        return self.inner.query(model)


def test_neighbour_rejected_next_to_the_stand_in_falls_back(oracle) -> None:
    plan = plan_model(crop_cnn(), RejectStandIns(oracle, "conv3"), options("tensorrt", min_segment_size=1))
    verdicts = {n.name: (n.verdict, n.reason) for n in plan.nodes}
    assert verdicts["conv3"] == ("onnxruntime", "TensorRT parser: UNSUPPORTED_NODE: rejected next to a stand-in "
                                                "(parsed next to plugin stand-ins)")
    assert verdicts["crop_resize"][0] == "plugin:resize"
    assert_plan_valid(plan)


def test_rejected_stand_in_drops_the_claim(oracle) -> None:
    plan = plan_model(crop_cnn(), RejectStandIns(oracle, "crop_resize"), options("tensorrt"))
    node = plan.nodes[3]
    assert node.verdict == "onnxruntime"
    assert node.reason == ("plugin resize: native stand-in rejected (TensorRT parser: UNSUPPORTED_NODE: "
                           "rejected next to a stand-in)")
    assert len(plan.segments) == 3


def test_forced_plugin_ops_never_reach_the_parser(oracle) -> None:
    rec = Recording(oracle)
    natively = plan_model(native_upsample(), oracle, options("tensorrt"))
    assert [n.verdict for n in natively.nodes] == ["tensorrt"] * 4
    forced = plan_model(native_upsample(), rec, options("tensorrt", plugin_ops=("Resize",)))
    assert [n.verdict for n in forced.nodes] == ["tensorrt", "tensorrt", "plugin:resize", "tensorrt"]
    assert all("up" not in [n.name for n in q.graph.node] for q in rec.queries)
    with pytest.raises(OptionsError, match="no plugin covers op type 'Det'"):
        plan_model(native_upsample(), oracle, options("tensorrt", plugin_ops=("Det",)))
    with pytest.raises(OptionsError, match="unknown target 'tensorrt_llm'"):
        plan_model(native_upsample(), oracle, options("tensorrt_llm"))


def test_rewritten_plugin_ops_are_never_handed_to_the_parser(oracle) -> None:
    """A segment already rewritten for the engine build is refused by rule (custom domain)."""
    registry = default_registry()
    plan = plan_model(crop_cnn(), oracle, options("tensorrt"))
    rewritten = rewrite_for_engine(plan.extract(0), registry, {"crop_resize": "resize"})
    rec = Recording(oracle)
    again = plan_model(rewritten, rec, options("tensorrt"))
    node = next(n for n in again.nodes if n.op_type == "TrtBackendResize")
    assert node.verdict == "onnxruntime" and node.reason == "custom domain 'trt_backend' is unknown to TensorRT"
    assert not any(n.op_type == "TrtBackendResize" for q in rec.queries for n in q.graph.node)


def test_bad_resize_falls_back_with_the_predicates_reason(oracle) -> None:
    model = crop_cnn()
    roi = next(t for t in model.graph.initializer if t.name == "crop.roi")
    roi.CopyFrom(onnx.numpy_helper.from_array(np.array([0.1, 0.15, 0.9, 0.8], np.float32), "crop.roi"))
    plan = plan_model(model, oracle, options("tensorrt"))
    assert shapes(plan) == [("tensorrt", 3), ("onnxruntime", 1), ("tensorrt", 3)]
    assert (plan.nodes[3].reason or "").endswith("plugin resize declined: roi has 4 values; tf_crop_and_resize "
                                                 "needs 2 x 4 (starts, ends)")


def test_cli_target_and_plugin_options(tmp_path, capsys) -> None:
    path = str(tmp_path / "fpn.onnx")
    onnx.save(fpn(), path)
    runs = {}
    for key, extra in {"tensorrt": ["--target", "tensorrt"], "rtx": ["--target", "tensorrt_rtx"],
                       "off": ["--target", "tensorrt", "--no-plugins"],
                       "isolated": ["--target", "tensorrt", "--isolate"]}.items():
        out = tmp_path / f"{key}.json"
        assert main(["inspect", path, "--json", str(out), *extra]) == 0
        runs[key] = json.loads(out.read_text())
    assert [len(runs[k]["segments"]) for k in ("tensorrt", "rtx", "off", "isolated")] == [1, 5, 5, 1]
    assert runs["tensorrt"]["target"] == "tensorrt" and runs["rtx"]["target"] == "tensorrt_rtx"
    assert runs["isolated"]["nodes"] == runs["tensorrt"]["nodes"]
    assert "plugin resize covers it" not in json.dumps(runs["off"])
    capsys.readouterr()
    assert main(["inspect", path, "--plugin-ops", "Det"]) == 1
    assert "no plugin covers op type(s) Det" in capsys.readouterr().err

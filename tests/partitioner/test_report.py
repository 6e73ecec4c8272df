"""Reports on plans: census, text summary, Netron annotation, atomic writes, SVG/HTML picture."""
from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET

import numpy as np
import onnx
import pytest
from onnx import helper

from partitioner import Claim, Model, OptionsError, PartitionOptions, Plan, plan_model
from partitioner.picture import flows, layout, render_html, render_picture, render_svg
from partitioner.report import CensusRow, annotate, census, clip, format_ops, summary
from tests.helpers import (
    const,
    conv_resize_chain,
    crop_resize,
    model,
    shared_constants_model,
    vi,
)

SVG = "{http://www.w3.org/2000/svg}"
DEMOTED = "demoted: TensorRT group of 2 node(s) is below the minimum segment size 3"


def det_and_ml() -> onnx.ModelProto:
    """Two branches: Abs -> Det -> Neg, and Relu -> ai.onnx.ml Binarizer -> Sigmoid."""
    nodes = [helper.make_node("Abs", ["x"], ["a"], name="abs"), helper.make_node("Det", ["a"], ["d"], name="det"),
             helper.make_node("Neg", ["d"], ["y"], name="neg"), helper.make_node("Relu", ["x2"], ["b"], name="relu"),
             helper.make_node("Binarizer", ["b"], ["c"], name="bin", domain="ai.onnx.ml", threshold=0.5),
             helper.make_node("Sigmoid", ["c"], ["z"], name="sig")]
    return model(nodes, [vi("x", [2, 3, 3]), vi("x2", [4, 4])], [vi("y", [2]), vi("z", [4, 4])],
                 extra_opsets=[("ai.onnx.ml", 3)])


def skip_edge() -> onnx.ModelProto:
    """Conv output read by the Resize (ONNX Runtime) and again after it: an edge skipping a segment."""
    resize, inits = crop_resize("c", "r", name="resize")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]), resize,
             helper.make_node("Add", ["c", "r"], ["y"], name="add")]
    return model(nodes, [vi("x", [1, 4, 8, 8])], [vi("y", [1, 4, 8, 8])],
                 [const("w", np.ones((4, 4, 3, 3), np.float32))] + inits)


NASTY = 'a<b>&"c\'d'


def nasty_names() -> onnx.ModelProto:
    """Tensor and node names with XML metacharacters; Sin is excluded to force a split."""
    nodes = [helper.make_node("Relu", [NASTY], [f"t<1>&{NASTY}"], name="relu<&>"),
             helper.make_node("Sin", [f"t<1>&{NASTY}"], ["s&amp;"], name='sin"q"'),
             helper.make_node("Neg", ["s&amp;"], ["out>"], name="neg")]
    return model(nodes, [vi(NASTY, [4])], [vi("out>", [4])])


@pytest.fixture(scope="module")
def chain_plan(oracle) -> Plan:
    return plan_model(conv_resize_chain(), oracle, PartitionOptions(min_segment_size=1))


def segment_shapes(plan: Plan) -> list[tuple[str, tuple[int, ...]]]:
    return [(s.backend, s.nodes) for s in plan.segments]


def svg_groups(svg: str, cls: str) -> list[ET.Element]:
    root = ET.fromstring(svg)
    return [g for g in root.iter(f"{SVG}g") if g.get("class") == cls]


def svg_child(el: ET.Element, tag: str) -> ET.Element:
    """``el``'s first SVG ``tag`` child, which the picture always draws."""
    child = el.find(f"{SVG}{tag}")
    assert child is not None, tag
    return child


def svg_attr(el: ET.Element, name: str) -> str:
    value = el.get(name)
    assert value is not None, name
    return value


# --- census ---------------------------------------------------------------------------------------------

def test_census_counts_parser_rejections(chain_plan: Plan) -> None:
    assert segment_shapes(chain_plan) == [("tensorrt", (0,)), ("onnxruntime", (1,)), ("tensorrt", (2, 3)),
                                          ("onnxruntime", (4,)), ("tensorrt", (5,))]
    (row,) = census(chain_plan)
    assert (row.op_type, row.count) == ("Resize", 2)
    assert row.reason is not None and row.reason.startswith("TensorRT parser: UNSUPPORTED_NODE")
    assert "transformation" in row.reason


def test_census_orders_by_count_then_op_then_reason(oracle) -> None:
    rows = census(plan_model(conv_resize_chain(), oracle))  # default size 3: lone relu1 is demoted
    assert [(r.op_type, r.count) for r in rows] == [("Resize", 2), ("Relu", 1)]
    assert rows[1].reason == "demoted: TensorRT group of 1 node(s) is below the minimum segment size 3"
    rows = census(plan_model(det_and_ml(), oracle))  # all on ONNX Runtime, one node per op type
    assert [(r.op_type, r.count) for r in rows] == [("Abs", 1), ("Binarizer", 1), ("Det", 1), ("Neg", 1),
                                                    ("Relu", 1), ("Sigmoid", 1)]
    assert [r.reason for r in rows if r.op_type not in ("Det", "Binarizer")] == [DEMOTED] * 4
    assert rows[1].reason == "ai.onnx.ml operators are not TensorRT operators"
    assert rows[2].reason is not None and rows[2].reason.startswith("TensorRT parser: UNSUPPORTED_NODE")
    rows = census(plan_model(det_and_ml(), oracle, PartitionOptions(min_segment_size=1)))
    assert [(r.op_type, r.count) for r in rows] == [("Binarizer", 1), ("Det", 1)]


# --- summary --------------------------------------------------------------------------------------------

def test_summary_rows(chain_plan: Plan) -> None:
    text = summary(chain_plan)
    lines = text.splitlines()
    assert lines[0].startswith(f"model <ModelProto> | TensorRT target {chain_plan.tensorrt} | ")
    assert "| 6 nodes | 5 segments (3 TensorRT, 2 ONNX Runtime) | planned in " in lines[0]
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines if re.match(r"^\s+\d+\s{2}", line)]
    assert rows == [["0", "TensorRT", "1", "1", "1", "Conv x1"], ["1", "ONNX Runtime", "1", "1", "1", "Resize x1"],
                    ["2", "TensorRT", "2", "1", "1", "Conv x1, Relu x1"],
                    ["3", "ONNX Runtime", "1", "1", "1", "Resize x1"], ["4", "TensorRT", "1", "1", "1", "Relu x1"]]
    assert "  id  backend       nodes  inputs  outputs  ops" in lines  # numbers right-aligned under headers
    assert "   2  TensorRT          2       1        1  Conv x1, Relu x1" in lines
    census_line = next(line for line in lines if line.startswith("  Resize "))
    assert re.match(r"^  Resize      2  TensorRT parser: UNSUPPORTED_NODE: .{60,}…$", census_line)
    assert len(census_line) - len("  Resize      2  ") == 100
    assert all(line == line.rstrip() for line in lines)


def test_summary_without_parser_and_fallback() -> None:
    plan = plan_model(conv_resize_chain(1), None)
    text = summary(plan)
    assert "no TensorRT parser | 3 nodes | 1 segment (1 TensorRT) | planned in " in text
    assert "(0 parser calls)" in text and "Fallback census (0 nodes on ONNX Runtime)" in text
    assert "none: every node runs in TensorRT" in text


def test_format_ops_and_clip() -> None:
    counts = [("Conv", 12), ("Relu", 12), ("Add", 4), ("MaxPool", 1), ("Gemm", 1)]
    assert format_ops(counts, 100) == "Conv x12, Relu x12, Add x4, MaxPool x1, Gemm x1"
    assert format_ops(counts, 30) == "Conv x12, Relu x12, Add x4 …"
    assert clip("a   b\nc", 10) == "a b c"
    assert clip("x" * 200, 100) == "x" * 99 + "…"


# --- annotate -------------------------------------------------------------------------------------------

def test_annotate_marks_every_node(oracle) -> None:
    source = conv_resize_chain()
    for key, value in (("trt_backend.segment", "stale"), ("author", "me")):
        entry = source.graph.node[1].metadata_props.add()
        entry.key, entry.value = key, value
    plan = plan_model(source, oracle, PartitionOptions(min_segment_size=1))
    annotated = onnx.load_from_string(annotate(plan).SerializeToString())
    onnx.checker.check_model(annotated)
    expected_segment = [0, 1, 2, 2, 3, 4]
    for i, node in enumerate(annotated.graph.node):
        meta = {p.key: p.value for p in node.metadata_props}
        assert meta["trt_backend.segment"] == str(expected_segment[i])
        assert meta["trt_backend.backend"] == ("onnxruntime" if node.op_type == "Resize" else "tensorrt")
        assert meta["trt_backend.verdict"] == meta["trt_backend.backend"]
        assert ("trt_backend.reason" in meta) == (node.op_type == "Resize")
    keys = [p.key for p in annotated.graph.node[1].metadata_props]
    assert keys.count("trt_backend.segment") == 1 and "author" in keys
    assert plan.model is not None
    assert len(plan.model.proto.graph.node[0].metadata_props) == 0  # the plan's model is untouched


def test_annotation_and_picture_show_copied_constants(oracle) -> None:
    plan = plan_model(shared_constants_model(), oracle, PartitionOptions(exclude_ops=("Sin",), boundary_cost=None))
    annotated = annotate(plan)
    metas = [{p.key: p.value for p in node.metadata_props} for node in annotated.graph.node]
    assert [m.get("trt_backend.copied_into") for m in metas[:4]] == ["2", "2", "2", None]
    assert [m["trt_backend.segment"] for m in metas[:3]] == ["0", "0", "0"]
    assert not any("trt_backend.copied_into" in m for m in metas[3:])
    # annotating again replaces the marks, it does not double them
    again = annotate(plan_model(annotated, oracle, PartitionOptions(exclude_ops=("Sin",), boundary_cost=None)))
    assert [p.key for p in again.graph.node[0].metadata_props].count("trt_backend.copied_into") == 1
    svg = render_svg(plan)
    assert "constant-only nodes copied in (3): k, fill, cast" in svg
    assert svg.count("copied in") == 1


# --- picture --------------------------------------------------------------------------------------------

def test_svg_boxes_and_edges(chain_plan: Plan) -> None:
    svg = render_svg(chain_plan)
    boxes = svg_groups(svg, "segment")
    assert [b.get("data-segment") for b in boxes] == ["0", "1", "2", "3", "4"]
    fills = [svg_attr(svg_child(b, "rect"), "fill") for b in boxes]
    assert fills[0] == fills[2] == fills[4] != fills[1] == fills[3]
    edges = [(e.get("data-from"), e.get("data-to")) for e in svg_groups(svg, "edge")]
    assert edges == [("inputs", "0"), ("0", "1"), ("1", "2"), ("2", "3"), ("3", "4"), ("4", "outputs")]
    texts = [t.text for t in boxes[2].iter(f"{SVG}text")]
    assert texts == ["#2  TensorRT  ·  2 nodes", "Conv x1, Relu x1"]
    assert "nodes (2): relu0, conv1" in (svg_child(boxes[2], "title").text or "")
    assert "fallback x1: TensorRT parser:" in (svg_child(boxes[1], "title").text or "")
    assert render_svg(chain_plan) == svg  # deterministic


def test_svg_skip_edge_uses_a_lane(oracle) -> None:
    plan = plan_model(skip_edge(), oracle, PartitionOptions(min_segment_size=1))
    assert segment_shapes(plan) == [("tensorrt", (0,)), ("onnxruntime", (1,)), ("tensorrt", (2,))]
    assert flows(plan) == {(0, 1): ["x"], (1, 2): ["c"], (1, 3): ["c"], (2, 3): ["r"], (3, 4): ["y"]}
    _, edges, _, _ = layout(plan)
    assert [(e.src, e.dst, e.lane) for e in edges if e.lane >= 0] == [(1, 3, 0)]
    svg = render_svg(plan)
    edge_groups = svg_groups(svg, "edge")
    inter = [(e.get("data-from"), e.get("data-to")) for e in edge_groups if e.get("data-from", "").isdigit()
             and e.get("data-to", "").isdigit()]
    assert inter == [("0", "1"), ("0", "2"), ("1", "2")]
    labels = [[t.text for t in e.iter(f"{SVG}text")] for e in edge_groups]
    assert labels[1:4] == [["1 tensor"], ["1"], ["1 tensor"]]


def test_escaping_in_svg_and_html() -> None:
    plan = plan_model(nasty_names(), None, PartitionOptions(exclude_ops=("Sin",), min_segment_size=1))
    assert [s.backend for s in plan.segments] == ["tensorrt", "onnxruntime", "tensorrt"]
    svg = render_svg(plan)
    root = ET.fromstring(svg)  # parses: every name was escaped
    titles = "\n".join(t.text or "" for t in root.iter(f"{SVG}title"))
    assert f"t<1>&{NASTY}" in titles and "relu<&>" in titles and "s&amp;" in titles
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert NASTY in texts and "out>" in texts
    page = render_html(plan)
    assert svg in page
    assert NASTY not in page and "t&lt;1&gt;&amp;a&lt;b&gt;&amp;&quot;c&#x27;d" in page


def test_html_is_self_contained(chain_plan: Plan) -> None:
    page = render_html(chain_plan)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert render_svg(chain_plan) in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<script" not in page
    assert page.count("<tr><td class=\"n\">") == 5  # one row per segment
    assert "<td>Resize</td><td class=\"n\">2</td><td>TensorRT parser: UNSUPPORTED_NODE" in page


def test_plan_from_json_draws_but_cannot_annotate(chain_plan: Plan) -> None:
    again = Plan.from_dict(json.loads(chain_plan.to_json()))
    assert flows(again) == flows(chain_plan)
    assert len(svg_groups(render_svg(again), "segment")) == 5
    with pytest.raises(OptionsError, match="without its model"):
        annotate(again)


def test_many_segments_stay_in_a_column() -> None:
    nodes, prev = [], "x"
    for k in range(200):
        nodes.append(helper.make_node("Sin" if k % 2 else "Relu", [prev], [f"t{k}"], name=f"n{k}"))
        prev = f"t{k}"
    plan = plan_model(model(nodes, [vi("x", [4])], [vi(prev, [4])]), None,
                      PartitionOptions(exclude_ops=("Sin",), min_segment_size=1))
    assert len(plan.segments) == 200
    svg = render_svg(plan)
    root = ET.fromstring(svg)
    boxes = svg_groups(svg, "segment")
    assert len(boxes) == 200 and len(svg_groups(svg, "edge")) == 201
    ys = [int(svg_attr(svg_child(b, "rect"), "y")) for b in boxes]
    assert ys == sorted(ys) and len({svg_attr(svg_child(b, "rect"), "x") for b in boxes}) == 1
    assert int(svg_attr(root, "width")) < 600


class CropResizePlugin:
    """A plugin claim taking every Resize the parser rejected."""

    name = "crop_resize"

    def claim(self, node: onnx.NodeProto, model: Model) -> Claim:
        return Claim(node.op_type == "Resize")


def test_plugin_nodes_are_marked(oracle) -> None:
    plan = plan_model(conv_resize_chain(), oracle, PartitionOptions(plugins=(CropResizePlugin(),)))
    assert segment_shapes(plan) == [("tensorrt", (0, 1, 2, 3, 4, 5))] and census(plan) == []
    assert "| 6 nodes | 1 segment (1 TensorRT) | 2 plugin nodes | planned in " in summary(plan)
    svg = render_svg(plan)
    (box,) = svg_groups(svg, "segment")
    assert [r.get("class") for r in box.iter(f"{SVG}rect")] == [None, "plugin-mark"]
    assert [t.text for t in box.iter(f"{SVG}text")][-1] == "◆ plugin: Resize (crop_resize) x2"
    meta = {p.key: p.value for p in annotate(plan).graph.node[1].metadata_props}
    assert meta == {"trt_backend.segment": "0", "trt_backend.backend": "tensorrt",
                    "trt_backend.verdict": "plugin:crop_resize"}


# --- a real model ---------------------------------------------------------------------------------------

def test_light_resnet50(oracle, light_dir: str) -> None:
    path = os.path.join(light_dir, "light_resnet50.onnx")
    plan = plan_model(path, oracle)
    n = len(onnx.load(path, load_external_data=False).graph.node)
    assert [(s.backend, len(s.nodes)) for s in plan.segments] == [("tensorrt", n)]
    assert census(plan) == []
    assert re.search(rf"^\s+0  TensorRT\s+{n}\s+1\s+1\s+ConstantOfShape x239, BatchNormalization x53, Conv x53 …$",
                     summary(plan), re.M)
    svg = render_svg(plan)
    assert [(e.get("data-from"), e.get("data-to")) for e in svg_groups(svg, "edge")] == [
        ("inputs", "0"), ("0", "outputs")]
    annotated = annotate(plan)
    onnx.checker.check_model(annotated)
    assert {p.value for node in annotated.graph.node for p in node.metadata_props
            if p.key == "trt_backend.segment"} == {"0"}


def test_light_resnet50_with_sums_excluded(light_dir: str) -> None:
    plan = plan_model(os.path.join(light_dir, "light_resnet50.onnx"), None, PartitionOptions(exclude_ops=("Sum",)))
    assert census(plan) == [CensusRow("Sum", 16, "excluded by user (op type Sum)")]
    assert [s.backend for s in plan.segments] == ["tensorrt", "onnxruntime"] * 16 + ["tensorrt"]
    _, edges, _, _ = layout(plan)
    # each weight (ConstantOfShape of an initializer) is computed in the segment that uses it, so
    # nothing skips a segment: a plain chain of 33 segments between the model's input and output
    assert [e for e in edges if e.lane >= 0] == []
    seg_of = {i: s.id for s in plan.segments for i in s.nodes}
    assert plan.model is not None
    for n in plan.model.proto.graph.node:
        if n.op_type == "ConstantOfShape":
            consumers = plan.model.index.consumers[n.output[0]]
            assert seg_of[plan.model.index.producer[n.output[0]]] == seg_of[consumers[0]]
    assert len(svg_groups(render_svg(plan), "edge")) == len(edges) == 32 + 2


def test_render_picture_by_suffix(chain_plan: Plan) -> None:
    assert render_picture(chain_plan, "p.svg") == render_svg(chain_plan)
    assert render_picture(chain_plan, "p.HTM") == render_picture(chain_plan, "x/p.html") == render_html(chain_plan)
    with pytest.raises(OptionsError, match=r"\.svg, \.html or \.htm"):
        render_picture(chain_plan, "p.png")

"""The head-to-head's judging is the project's own rule: the elementwise check handed to
onnxconverter-common agrees with ``tolerance_ratio``; ``evaluate`` reports the worst error in
units of the tolerance and the task agreement; the fp16 census counts what a transform lowered;
the YOLO decoding keeps one box per object and class. Small arrays and one tiny model: fast."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.support.elementwise import within
from tests.support.precision_judging import census, evaluate, output_atols, yolo_detections
from trt_backend.accuracy.numeric import tolerance_ratio
from trt_backend.engines.precision import apply_precision


def test_the_tools_check_is_the_unified_rule() -> None:
    rng = np.random.default_rng(0)
    for k in range(300):
        ref = (rng.standard_normal(40) * 10.0 ** rng.integers(-4, 3)).astype(np.float32)
        ref[rng.random(40) < 0.1] = 0.0
        ours = (ref + rng.standard_normal(40) * 10.0 ** rng.integers(-6, -1)).astype(np.float32)
        if k % 7 == 0:
            ours[0] = ref[0] = np.nan
        atol, rtol = 10.0 ** rng.integers(-5, -1), 10.0 ** rng.integers(-5, -1)
        assert within(ours, ref, atol, rtol) == (tolerance_ratio(ours, ref, atol, rtol) <= 1.0), k
    assert not within(np.array([np.nan]), np.array([1.0]), 1.0, 1.0)


def test_evaluate_reports_the_worst_ratio_and_top1_agreement() -> None:
    feeds = [{"x": np.array([[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]], np.float32)} for _ in range(2)]
    refs = [{"y": f["x"].copy()} for f in feeds]

    def run(feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        y = feed["x"] + np.float32(0.002)  # 2 x atol on the zeros, within rtol on the rest but one
        y[1] = [0.0, 0.0, 4.0]  # row 1's arg-max moves
        return {"y": y}

    scores = evaluate(run, feeds, refs, ["y"], {"y": 1e-3}, 1e-3, "top1")
    assert scores.units == 4 and scores.agreed == 2 and scores.agreement == 0.5
    assert scores.worst == tolerance_ratio(run(feeds[0])["y"], refs[0]["y"], 1e-3, 1e-3)
    assert evaluate(lambda f: {"y": f["x"].copy()}, feeds, refs, ["y"], {"y": 1e-3}, 1e-3, None).worst == 0.0
    assert output_atols(refs, ["y"], 1e-3, 0.01) == {"y": 0.03}


def test_census_counts_nodes_lowered_to_fp16() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                               helper.make_node("Sigmoid", ["a"], ["b"], name="sigmoid"),
                               helper.make_node("Shape", ["b"], ["s"], name="shape"),
                               helper.make_node("Reshape", ["b", "s"], ["y"], name="reshape")], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert census(model) == (0, 3)  # Shape makes no float tensor
    assert census(apply_precision(model, "fp16").model) == (3, 3)  # its Casts are not counted
    assert census(apply_precision(model, "fp16", keep_fp32_nodes=["sigmoid"]).model) == (2, 3)
    onnx.checker.check_model(model)


def test_yolo_decoding_keeps_one_box_per_object_and_class() -> None:
    raw = np.zeros((1, 6, 4), np.float32)  # 4 anchors, 2 classes: (cx, cy, w, h, class 0, class 1)
    raw[0, :4, 0] = [50, 50, 20, 20]
    raw[0, :4, 1] = [51, 50, 20, 20]  # the same object, lower score: suppressed
    raw[0, :4, 2] = [51, 50, 20, 20]  # the same place, another class: kept
    raw[0, :4, 3] = [200, 200, 10, 10]  # below the score threshold
    raw[0, 4:, 0], raw[0, 4:, 1], raw[0, 4:, 2], raw[0, 4:, 3] = [0.9, 0.1], [0.8, 0.1], [0.1, 0.7], [0.1, 0.2]
    found = yolo_detections(raw)
    assert found["classes"].tolist() == [0, 1]
    assert np.allclose(found["boxes"][0], [40, 40, 60, 60]) and np.allclose(found["scores"], [0.9, 0.7])

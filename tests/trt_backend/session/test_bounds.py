"""Bounds, not observations, for data-dependent dims (issue 12, item 2b): a segment input whose
dim counts what NonZero found gets the graph's bound as its max (NonZero finds at most what its
input holds), so a next input where more survive than calibration saw is still taken."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from tests.trt_backend.session.test_graphs import assert_same, ort_reference
from trt_backend.session.bounds import DimBounds
from trt_backend.session.derive import OBSERVED_WIDEN
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

PROFILE = [{"x": ((1, 8), (4, 8), (16, 8))}]


def kept_rows(tail: str = "Relu"):
    """Rows of x whose first column exceeds 0.5 (NonZero -> Gather, as detectors keep boxes),
    through Sin (sent to ONNX Runtime) into a TensorRT tail; ``tail`` "Pad" also pads the kept
    rows on ONNX Runtime, a dim the graph bounds through no rule here."""
    inits = [nh.from_array(np.array([0], np.int64), "col"), nh.from_array(np.array(0.5, np.float32), "half"),
             nh.from_array(np.array([0], np.int64), "axis0"),
             nh.from_array((np.arange(64, dtype=np.float32).reshape(8, 8) / 64), "w"),
             nh.from_array(np.array([1, 0, 1, 0], np.int64), "pads")]
    nodes = [h.make_node("Gather", ["x", "col"], ["first"], axis=1),           # [N, 1]
             h.make_node("Greater", ["first", "half"], ["keep"]),
             h.make_node("NonZero", ["keep"], ["where"]),                       # [2, K]
             h.make_node("Gather", ["where", "axis0"], ["rows2d"], axis=0),     # [1, K]
             h.make_node("Squeeze", ["rows2d", "axis0"], ["rows"]),             # [K]
             h.make_node("Gather", ["x", "rows"], ["kept"], axis=0),            # [K, 8]
             h.make_node("Sin", ["kept"], ["waved"])]
    if tail == "Pad":
        nodes += [h.make_node("Pad", ["waved", "pads"], ["padded"]), h.make_node("MatMul", ["padded", "w"], ["m"])]
    else:
        nodes += [h.make_node("MatMul", ["waved", "w"], ["m"])]
    nodes += [h.make_node("Relu", ["m"], ["r"]), h.make_node("Neg", ["r"], ["y"])]
    graph = h.make_graph(nodes, "kept_rows", [h.make_tensor_value_info("x", T.FLOAT, ["N", 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def session(tail: str) -> Session:
    opts = SessionOptions(emulate=True, exclude_ops=("Sin", "Pad"), min_segment_size=1)
    return Session(kept_rows(tail), PROFILE, opts)


def test_nonzero_rows_are_bounded_by_the_graph() -> None:
    sess = session("Relu")
    tail = sess.plan.segments[-1]
    assert tail.backend == "tensorrt" and tail.inputs == ("waved",)
    prof = sess.segment_profiles[tail.id][0]["waved"]
    assert prof.data_dependent == (0,) and prof.observed == ()
    assert (prof.min[0], prof.max[0]) == (0, 16)  # NonZero keeps at most the N <= 16 rows it was given
    m = kept_rows("Relu")
    for rows in (np.full((16, 8), 0.9, np.float32), np.full((3, 8), 0.1, np.float32),  # all kept; none kept
                 np.random.default_rng(2).random((11, 8), dtype=np.float32)):
        assert_same(sess.run(None, {"x": rows}), ort_reference(m, {"x": rows}))
    bounds = DimBounds(sess.model, {"x": (16, 8)})
    assert bounds.bound("kept", 0) == (16, True) and bounds.bound("kept", 1) == (8, False)
    assert bounds.bound("where", 1) == (16, True)


def test_unbounded_data_dependent_dims_are_widened_and_flagged() -> None:
    sess = session("Pad")
    tail = sess.plan.segments[-1]
    prof = sess.segment_profiles[tail.id][0][tail.inputs[0]]
    assert prof.data_dependent == (0,) and prof.observed == (0,)
    seen = prof.max[0] // OBSERVED_WIDEN  # (calibration saw at most that many padded rows)
    assert prof.max[0] == seen * OBSERVED_WIDEN and 2 <= seen <= 16 + 2
    assert '"observed": [0]' in sess.plan.to_json()

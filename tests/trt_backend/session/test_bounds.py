"""Bounds, not observations, for data-dependent dims: a segment input whose
dim counts what NonZero found gets the graph's bound as its max (NonZero finds at most what its
input holds), so a next input where more survive than calibration saw is still taken."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from tests.support.graphs import assert_same, ort_reference
from trt_backend.profiles.bounds import DimBounds
from trt_backend.profiles.derive import OBSERVED_WIDEN
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


def flattened_boxes():
    """Kept rows of a [N, 3, 2] box tensor reshaped to [K, 6] with a target computed the way
    torchvision's RetinaNet/FCOS box decoding exports it: its first dim from the Reshape input's
    own Shape, its second from the Shape of a Flatten of it. ONNX Runtime's ReshapeFusion turns
    that target into the constant [0, -1], which fails when no row is kept (K = 0)."""
    inits = [nh.from_array(np.array(0.5, np.float32), "half"), nh.from_array(np.array([-1], np.int64), "minus1"),
             nh.from_array(np.array(0, np.int64), "i0"), nh.from_array(np.array(1, np.int64), "i1"),
             nh.from_array(np.array([0], np.int64), "ax0"),
             nh.from_array((np.arange(36, dtype=np.float32).reshape(6, 6) / 36), "w")]
    nodes = [h.make_node("Greater", ["scores", "half"], ["keep"]),
             h.make_node("NonZero", ["keep"], ["where"]),                  # [1, K]
             h.make_node("Reshape", ["where", "minus1"], ["rows"]),        # [K]
             h.make_node("Gather", ["boxes", "rows"], ["kept"], axis=0),   # [K, 3, 2]
             h.make_node("Relu", ["kept"], ["pos"]),
             h.make_node("Flatten", ["pos"], ["flat"], axis=1),
             h.make_node("Shape", ["pos"], ["pos_shape"]),
             h.make_node("Shape", ["flat"], ["flat_shape"]),
             h.make_node("Gather", ["pos_shape", "i0"], ["k"], axis=0),
             h.make_node("Gather", ["flat_shape", "i1"], ["width"], axis=0),
             h.make_node("Unsqueeze", ["k", "ax0"], ["k1"]),
             h.make_node("Unsqueeze", ["width", "ax0"], ["width1"]),
             h.make_node("Concat", ["k1", "width1"], ["target"], axis=0),
             h.make_node("Reshape", ["pos", "target"], ["rows6"]),         # [K, 6]
             h.make_node("MatMul", ["rows6", "w"], ["m"]),
             h.make_node("Neg", ["m"], ["y"])]
    graph = h.make_graph(nodes, "flattened_boxes", [h.make_tensor_value_info("scores", T.FLOAT, ["N"]),
                                                    h.make_tensor_value_info("boxes", T.FLOAT, ["N", 3, 2])],
                         [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_no_box_surviving_is_normal_data() -> None:
    """Calibration (the whole model with intermediate tensors as outputs) and every segment run
    where no box survives: the Session keeps ONNX Runtime's ReshapeFusion off (OrtOptions
    ``disabled_optimizers``), which plain ONNX Runtime, with it on, fails on."""
    import onnxruntime as ort

    m = flattened_boxes()
    none_kept = {"scores": np.zeros(4, np.float32), "boxes": np.ones((4, 3, 2), np.float32)}
    with pytest.raises(Exception, match="requested shape:{0,-1}"):
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, none_kept)
    profile = [{"scores": ((1,), (4,), (8,)), "boxes": ((1, 3, 2), (4, 3, 2), (8, 3, 2))}]
    # every row dropped at calibration too: the empty tensors are what it measures
    opts = SessionOptions(emulate=True, exclude_ops=("NonZero",), min_segment_size=1)
    sess = Session(m, profile, opts, calibration_feeds=[{"scores": np.zeros(n, np.float32),
                                                         "boxes": np.ones((n, 3, 2), np.float32)} for n in (1, 4, 8)])
    assert [s.backend for s in sess.plan.segments][-1] == "tensorrt"
    expected = np.zeros((0, 6), np.float32)
    (got,) = sess.run(None, none_kept)
    assert got.shape == expected.shape and got.dtype == np.float32
    rng = np.random.default_rng(4)
    some = {"scores": np.array([0.9, 0.1, 0.7], np.float32), "boxes": rng.random((3, 3, 2), dtype=np.float32)}
    ref = -(np.maximum(some["boxes"][[0, 2]], 0).reshape(2, 6) @ (np.arange(36, dtype=np.float32).reshape(6, 6) / 36))
    (got,) = sess.run(None, some)
    np.testing.assert_allclose(got, ref, atol=1e-5)


def counted_rows():
    """Kept rows (NonZero, on ONNX Runtime) whose count reaches a TensorRT segment as a shape
    tensor: ``target = Concat(Unsqueeze(Shape(kept)[0]), [8])`` is computed on ONNX Runtime
    (excluded nodes) and read by an Expand in TensorRT, as Keypoint R-CNN's keypoint RoI pool
    reads how many detections survived."""
    inits = [nh.from_array(np.array([0], np.int64), "col"), nh.from_array(np.array(0.5, np.float32), "half"),
             nh.from_array(np.array([0], np.int64), "axis0"), nh.from_array(np.array(0, np.int64), "first_dim"),
             nh.from_array(np.array([8], np.int64), "eight"), nh.from_array(np.array(1.0, np.float32), "one")]
    nodes = [h.make_node("Gather", ["x", "col"], ["first"], axis=1),
             h.make_node("Greater", ["first", "half"], ["keep"]),
             h.make_node("NonZero", ["keep"], ["where"]),
             h.make_node("Gather", ["where", "axis0"], ["rows2d"], axis=0),
             h.make_node("Squeeze", ["rows2d", "axis0"], ["rows"]),
             h.make_node("Gather", ["x", "rows"], ["kept"], axis=0),
             h.make_node("Sin", ["kept"], ["waved"]),
             h.make_node("Shape", ["kept"], ["kept_shape"], name="count_shape"),
             h.make_node("Gather", ["kept_shape", "first_dim"], ["count"], axis=0, name="count_gather"),
             h.make_node("Unsqueeze", ["count", "axis0"], ["count1"], name="count_unsqueeze"),
             h.make_node("Concat", ["count1", "eight"], ["target"], axis=0, name="count_concat"),
             h.make_node("Expand", ["one", "target"], ["ones"]),
             h.make_node("Add", ["waved", "ones"], ["s"]),
             h.make_node("Relu", ["s"], ["y"])]
    graph = h.make_graph(nodes, "counted_rows", [h.make_tensor_value_info("x", T.FLOAT, ["N", 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_a_count_handed_over_as_a_shape_tensor_is_bounded_by_the_graph() -> None:
    opts = SessionOptions(emulate=True, exclude_ops=("Sin", "NonZero"), min_segment_size=1,
                          exclude_nodes=("count_shape", "count_gather", "count_unsqueeze", "count_concat"))
    m = counted_rows()
    sess = Session(m, PROFILE, opts)
    tail = sess.plan.segments[-1]
    assert tail.backend == "tensorrt" and "target" in tail.inputs
    prof = sess.segment_profiles[tail.id][0]["target"]
    assert prof.values is not None
    lo, _, hi = prof.values
    assert (lo[0], hi[0]) == (0, 16) and (lo[1], hi[1]) == (8, 8)  # at most the 16 rows the profile allows
    for rows in (np.full((16, 8), 0.9, np.float32), np.full((5, 8), 0.1, np.float32),
                 np.random.default_rng(3).random((12, 8), dtype=np.float32)):
        assert_same(sess.run(None, {"x": rows}), ort_reference(m, {"x": rows}))


def test_a_slice_with_constant_ends_bounds_what_it_keeps() -> None:
    """``keep[:5]`` after NonZero keeps at most 5, whatever NonZero found (a detector's
    detections-per-image cut); a Reshape's -1 dim is the input's elements over the rest."""
    from partitioner import load_model

    inits = [nh.from_array(np.array([0], np.int64), "zero"), nh.from_array(np.array([5], np.int64), "five"),
             nh.from_array(np.array([-1, 1, 2], np.int64), "target"), nh.from_array(np.array(1, np.int64), "one")]
    nodes = [h.make_node("NonZero", ["mask"], ["where"]),                     # [1, K]
             h.make_node("Slice", ["where", "zero", "five", "zero"], ["rows2d"]),  # axis 0: [1, K]
             h.make_node("Squeeze", ["rows2d", "zero"], ["rows"]),            # [K]
             h.make_node("Slice", ["rows", "zero", "five"], ["top"]),         # [<= 5]
             h.make_node("Gather", ["pairs", "top"], ["picked"], axis=0),     # [<= 5, 2]
             h.make_node("Reshape", ["picked", "target"], ["r"]),             # [<= 5, 1, 2]
             h.make_node("Shape", ["picked"], ["picked_shape"]),
             h.make_node("Add", ["picked_shape", "one"], ["plus_one"]),       # values (<= 6, 3)
             h.make_node("Sub", ["plus_one", "picked_shape"], ["diff"])]  # a bound minus a bound: nothing follows
    graph = h.make_graph(nodes, "sliced", [h.make_tensor_value_info("mask", T.BOOL, ["M"]),
                                           h.make_tensor_value_info("pairs", T.FLOAT, ["P", 2])],
                         [h.make_tensor_value_info("r", T.FLOAT, None)], inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    bounds = DimBounds(load_model(m), {"mask": (1000,), "pairs": (50, 2)})
    assert bounds.bound("rows", 0) == (1000, True)
    assert bounds.bound("top", 0) == (5, True)
    assert bounds.bound("r", 0) == (5, True) and bounds.bound("r", 2) == (2, False)
    assert bounds.value_bounds("plus_one") == [(6, True), (3, False)]
    assert bounds.value_bounds("diff") == [(None, True), (None, False)]


def branching(n: int = 8):
    """An If on the data (is x's mean above 0?) whose then branch keeps x [N, 4, 8, 8] and whose
    else branch halves its last two dims (a strided Slice), then a TensorRT tail; the If runs on
    ONNX Runtime (excluded), so the tail's input is the If's output."""
    starts, ends, axes, steps = ([0, 0], [8, 8], [2, 3], [2, 2])
    consts = [h.make_node("Constant", [], [name], value=nh.from_array(np.array(v, np.int64), name))
              for name, v in (("s", starts), ("e", ends), ("a", axes), ("t", steps))]
    then = h.make_graph([h.make_node("Identity", ["x"], ["big"])], "then", [],
                        [h.make_tensor_value_info("big", T.FLOAT, ["N", 4, 8, 8])])
    other = h.make_graph(consts + [h.make_node("Slice", ["x", "s", "e", "a", "t"], ["small"])], "else", [],
                         [h.make_tensor_value_info("small", T.FLOAT, ["N", 4, 4, 4])])
    nodes = [h.make_node("ReduceMean", ["x"], ["mean"], keepdims=0),
             h.make_node("Greater", ["mean", "zero"], ["cond"]),
             h.make_node("If", ["cond"], ["chosen"], then_branch=then, else_branch=other),
             h.make_node("Relu", ["chosen"], ["r"]), h.make_node("Sigmoid", ["r"], ["g"]),
             h.make_node("Neg", ["g"], ["y"])]
    graph = h.make_graph(nodes, "branching", [h.make_tensor_value_info("x", T.FLOAT, ["N", 4, 8, 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, None)],
                         [nh.from_array(np.array(0.0, np.float32), "zero")])
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_an_if_whose_branches_differ_in_size_gives_a_data_dependent_dim() -> None:
    """Calibration's random data takes one branch; the dims where the branches' outputs differ
    (8 against 4) depend on the data: from 0 to the larger branch's size, where the profile was
    the calibrated branch's alone and an input taking the other branch was refused at run time."""
    m = branching()
    opts = SessionOptions(emulate=True, exclude_ops=("If",), min_segment_size=1)
    sess = Session(m, [{"x": ((1, 4, 8, 8), (2, 4, 8, 8), (4, 4, 8, 8))}], opts)
    tail = sess.plan.segments[-1]
    assert tail.backend == "tensorrt" and tail.inputs == ("chosen",)
    prof = sess.segment_profiles[tail.id][0]["chosen"]
    assert prof.data_dependent == (2, 3) and prof.observed == ()
    assert (prof.min[2:], prof.max[2:]) == ((0, 0), (8, 8))
    rng = np.random.default_rng(0)
    for shift in (3.0, -3.0):  # above 0: the then branch (8 x 8); below: the else branch (4 x 4)
        x = (rng.standard_normal((3, 4, 8, 8)) + shift).astype(np.float32)
        assert_same(sess.run(None, {"x": x}), ort_reference(m, {"x": x}))


def test_a_reshape_to_a_target_made_from_shapes_and_indices_made_by_range() -> None:
    """Exporters reshape token ids to ``[-1, S]`` with S read from a Shape, and make position ids
    as Range(0, S) offset by a cached length: the reshaped dim is bounded by S, the positions by
    S + P - 1, and a Gather from a table of fewer rows is named as one they may pass."""
    from partitioner import load_model

    inits = [nh.from_array(np.array([-1], np.int64), "minus1"), nh.from_array(np.array(1, np.int64), "one"),
             nh.from_array(np.array(0, np.int64), "zero"), nh.from_array(np.array([0], np.int64), "ax0"),
             nh.from_array(np.zeros((6, 2), np.float32), "table")]
    nodes = [h.make_node("Shape", ["ids"], ["s"]), h.make_node("Gather", ["s", "one"], ["seq"]),
             h.make_node("Unsqueeze", ["seq", "ax0"], ["seq1"]),
             h.make_node("Concat", ["minus1", "seq1"], ["target"], axis=0),
             h.make_node("Reshape", ["ids", "target"], ["flat"]),                 # [?, <= S]
             h.make_node("Shape", ["past"], ["ps"]), h.make_node("Gather", ["ps", "one"], ["cached"]),
             h.make_node("Range", ["zero", "seq", "one"], ["steps"]),
             h.make_node("Add", ["steps", "cached"], ["positions"]),              # values <= S + P - 1
             h.make_node("Cast", ["positions"], ["pos32"], to=T.INT32),
             h.make_node("Gather", ["table", "pos32"], ["p"], name="lookup")]
    graph = h.make_graph(nodes, "positions", [h.make_tensor_value_info("ids", T.INT64, ["B", "S"]),
                                              h.make_tensor_value_info("past", T.FLOAT, ["B", "P"])],
                         [h.make_tensor_value_info("flat", T.INT64, None),
                          h.make_tensor_value_info("p", T.FLOAT, None)], inits)
    m = load_model(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))
    bounds = DimBounds(m, {"ids": (2, 5), "past": (2, 3)})
    assert bounds.bound("flat", 1) == (5, False)
    assert bounds.index_bound("pos32") == 7 and bounds.index_bound("ids") is None
    assert bounds.table_overruns() == [("lookup", 6, 7)]
    assert DimBounds(m, {"ids": (2, 3), "past": (2, 3)}).table_overruns() == []  # positions 0..5: the last row


def test_indices_past_the_rows_of_a_tensor_the_graph_bounds() -> None:
    """A mask [B, M] gathered along M at positions Range(0, S) + S * 0 (an offset scaled by a
    shape): flagged where S passes M's bound, whatever the mask holds."""
    from partitioner import load_model

    inits = [nh.from_array(np.array(1, np.int64), "one"), nh.from_array(np.array(0, np.int64), "zero")]
    nodes = [h.make_node("Shape", ["ids"], ["s"]), h.make_node("Gather", ["s", "one"], ["seq"]),
             h.make_node("Range", ["zero", "seq", "one"], ["steps"]),
             h.make_node("Mul", ["seq", "zero"], ["none"]), h.make_node("Add", ["steps", "none"], ["positions"]),
             h.make_node("Gather", ["mask", "positions"], ["picked"], axis=1, name="pick")]
    graph = h.make_graph(nodes, "masked", [h.make_tensor_value_info("ids", T.INT64, ["B", "S"]),
                                           h.make_tensor_value_info("mask", T.INT64, ["B", "M"])],
                         [h.make_tensor_value_info("picked", T.INT64, None)], inits)
    m = load_model(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))
    assert DimBounds(m, {"ids": (1, 6), "mask": (1, 4)}).table_overruns() == [("pick", 4, 5)]
    assert DimBounds(m, {"ids": (1, 4), "mask": (1, 4)}).table_overruns() == []


def test_gathers_at_shape_made_indices_the_bounds_cannot_size_are_named() -> None:
    """Positions Range(0, S) picking from a mask reshaped to [B, -1] (a length the graph infers):
    neither decided over nor under by the bounds, so named for a run to tell; positions from a
    shape the data made (NonZero's count) and indices from the mask's values are not shape-made."""
    from partitioner import load_model
    from trt_backend.profiles.bounds import valued_tensors

    inits = [nh.from_array(np.array(v, np.int64), n) for n, v in
             (("one", 1), ("zero", 0), ("ax0", [0]), ("rest", [-1]))]
    nodes = [h.make_node("Shape", ["ids"], ["s"]), h.make_node("Gather", ["s", "one"], ["seq"]),
             h.make_node("Gather", ["s", "zero"], ["batch"]), h.make_node("Unsqueeze", ["batch", "ax0"], ["b"]),
             h.make_node("Concat", ["b", "rest"], ["target"], axis=0),
             h.make_node("Reshape", ["mask", "target"], ["rows"]),
             h.make_node("Range", ["zero", "seq", "one"], ["at"]),
             h.make_node("Gather", ["rows", "at"], ["picked"], axis=1, name="shape_made"),
             h.make_node("NonZero", ["mask"], ["nz"]), h.make_node("Shape", ["nz"], ["found"]),
             h.make_node("Gather", ["found", "one"], ["count"]), h.make_node("Range", ["zero", "count", "one"], ["k"]),
             h.make_node("Gather", ["rows", "k"], ["by_count"], axis=1, name="data_made"),
             h.make_node("Gather", ["rows", "mask"], ["by_value"], axis=1, name="by_value")]
    graph = h.make_graph(nodes, "masked", [h.make_tensor_value_info("ids", T.INT64, ["B", "S"]),
                                           h.make_tensor_value_info("mask", T.INT64, ["B", "T"])],
                         [h.make_tensor_value_info(n, T.INT64, None) for n in ("picked", "by_count", "by_value")],
                         inits)
    m = load_model(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))
    valued = valued_tensors(m)
    assert {"mask", "nz", "found", "count", "k"} <= valued and not {"s", "seq", "at", "target"} & valued
    assert DimBounds(m, {"ids": (1, 3), "mask": (1, 2)}).unproven_gathers() == ["shape_made"]


def test_a_flatten_at_the_last_axis_keeps_every_dim_in_its_first() -> None:
    """HF's attention mask, ``Flatten(axis=2)`` of [B, T], is [B * T, 1]: a Gather of its rows at
    positions made from T is within them (it had been read as 1 row, an overrun flagged on every
    BERT, whose build then ran the whole model once more)."""
    from partitioner import load_model

    inits = [nh.from_array(np.array(v, np.int64), n) for n, v in (("one", 1), ("zero", 0))]
    nodes = [h.make_node("Flatten", ["mask"], ["flat"], axis=2), h.make_node("Flatten", ["mask"], ["cols"], axis=-1),
             h.make_node("Shape", ["mask"], ["s"]), h.make_node("Gather", ["s", "one"], ["t"]),
             h.make_node("Range", ["zero", "t", "one"], ["at"]),
             h.make_node("Gather", ["flat", "at"], ["picked"], axis=0, name="pick")]
    graph = h.make_graph(nodes, "masked", [h.make_tensor_value_info("mask", T.FLOAT, ["B", "T"])],
                         [h.make_tensor_value_info(n, T.FLOAT, None) for n in ("picked", "cols")], inits)
    m = load_model(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))
    bounds = DimBounds(m, {"mask": (2, 6)})
    assert [bounds.bound("flat", 0), bounds.bound("flat", 1)] == [(12, False), (1, False)]
    assert [bounds.bound("cols", 0), bounds.bound("cols", 1)] == [(2, False), (6, False)]
    assert bounds.table_overruns() == [] and bounds.unproven_gathers() == []

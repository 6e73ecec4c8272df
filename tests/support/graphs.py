"""Stitched sessions on hand-made multi-segment graphs: outputs equal whole-model ONNX Runtime at
several shapes inside each profile, and derived profiles cover the shapes seen at run time.

The graph builders here are shared with the other session tests and the benchmarks."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from tests.helpers import crop_resize
from trt_backend.ort.threads import inference_session
from trt_backend.profiles import covering_profile
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

pytestmark = pytest.mark.usefixtures("oracle")  # needs a TensorRT parser


def _w(name: str, shape: Sequence[int], rng: np.random.Generator, scale: float = 0.1) -> onnx.TensorProto:
    return nh.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _c(name: str, value: Any, dtype: Any = np.int64) -> onnx.TensorProto:
    return nh.from_array(np.asarray(value, dtype=dtype), name)


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           inits: Sequence[onnx.TensorProto] = (), opset: int = 18, ml: bool = False, name: str = "g") -> onnx.ModelProto:
    opsets = [h.make_opsetid("", opset)] + ([h.make_opsetid("ai.onnx.ml", 3)] if ml else [])
    m = h.make_model(h.make_graph(nodes, name, inputs, outputs, list(inits)), opset_imports=opsets)
    m.ir_version = 9
    return m


def conv_chain(blocks: int = 5, channels: int = 8, size: int = 16) -> onnx.ModelProto:
    """``blocks`` Conv/Relu/Conv/Sigmoid blocks separated by tf_crop_and_resize Resizes (which
    TensorRT's parser rejects): 2 * blocks - 1 segments. Input x: [N, channels, size, size]."""
    rng = np.random.default_rng(0)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    cur = "x"
    for b in range(blocks):
        for k, act in enumerate(("Relu", "Sigmoid")):
            w = f"w{b}_{k}"
            inits.append(_w(w, (channels, channels, 3, 3), rng, 0.2))
            nodes += [h.make_node("Conv", [cur, w], [f"c{b}_{k}"], pads=[1, 1, 1, 1]),
                      h.make_node(act, [f"c{b}_{k}"], [f"a{b}_{k}"])]
            cur = f"a{b}_{k}"
        if b < blocks - 1:
            node, consts = crop_resize(cur, f"z{b}")
            nodes.append(node)
            inits += consts
            cur = f"z{b}"
    nodes.append(h.make_node("ReduceMean", [cur], ["y"], axes=[2, 3], keepdims=0))
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["N", channels, size, size])],
                  [h.make_tensor_value_info("y", T.FLOAT, None)], inits, opset=17)


def detection_model(classes: int = 3, feat: int = 8) -> onnx.ModelProto:
    """Box and score heads -> NonMaxSuppression -> GatherND of the kept boxes; TopK over the best
    class scores; a Loop summing the kept boxes' areas. Input feats: [N, A, feat]."""
    rng = np.random.default_rng(1)
    inits = [_w("wb", (feat, 4), rng, 0.5), _w("wc", (feat, classes), rng, 0.5),
             _c("box_off", np.array([0, 0, 0.5, 0.5]).reshape(1, 1, 4), np.float32), _c("max_out", [5]),
             _c("iou", [0.5], np.float32), _c("thr", [0.2], np.float32), _c("cols", [0, 2]), _c("k", [3]),
             _c("zero", 0), _c("fzero", 0.0, np.float32), _c("true", True, np.bool_), _c("two", [2])]
    body = h.make_graph(
        [h.make_node("Gather", ["sel_boxes", "i"], ["b"], axis=0),
         h.make_node("Split", ["b"], ["y1", "x1", "y2", "x2"], axis=0, num_outputs=4),
         h.make_node("Sub", ["y2", "y1"], ["hh"]), h.make_node("Sub", ["x2", "x1"], ["ww"]),
         h.make_node("Mul", ["hh", "ww"], ["area"]), h.make_node("Squeeze", ["area"], ["area0"]),
         h.make_node("Add", ["acc", "area0"], ["acc_out"]), h.make_node("Identity", ["cond"], ["cond_out"])],
        "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond", T.BOOL, []),
                 h.make_tensor_value_info("acc", T.FLOAT, [])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("acc_out", T.FLOAT, [])])
    nodes = [h.make_node("MatMul", ["feats", "wb"], ["braw"]), h.make_node("Sigmoid", ["braw"], ["bsig"]),
             h.make_node("Add", ["bsig", "box_off"], ["boxes"]),
             h.make_node("MatMul", ["feats", "wc"], ["craw"]), h.make_node("Sigmoid", ["craw"], ["cs"]),
             h.make_node("Transpose", ["cs"], ["scores"], perm=[0, 2, 1]),
             h.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "thr"], ["selected"]),
             h.make_node("Gather", ["selected", "cols"], ["bi"], axis=1),
             h.make_node("GatherND", ["boxes", "bi"], ["sel_boxes"]),
             h.make_node("ReduceMax", ["cs", "two"], ["best"], keepdims=0),
             h.make_node("TopK", ["best", "k"], ["top_scores", "top_idx"], axis=1),
             h.make_node("Shape", ["sel_boxes"], ["sb_shape"]),
             h.make_node("Gather", ["sb_shape", "zero"], ["count"], axis=0),
             h.make_node("Loop", ["count", "true", "fzero"], ["area_sum"], body=body)]
    outs = [h.make_tensor_value_info(n, t, None) for n, t in
            (("sel_boxes", T.FLOAT), ("top_scores", T.FLOAT), ("top_idx", T.INT64), ("area_sum", T.FLOAT))]
    return _model(nodes, [h.make_tensor_value_info("feats", T.FLOAT, ["N", "A", feat])], outs, inits)


def transformer_model(dim: int = 32, heads: int = 4) -> onnx.ModelProto:
    """One pre-norm transformer block on x: [B, S, dim], S the dynamic sequence length; the head
    split/merge reshapes use shapes computed from Shape(x) (shape tensors)."""
    rng = np.random.default_rng(2)
    hd = dim // heads
    inits = [_w(n, (dim, dim), rng) for n in ("wq", "wk", "wv", "wo")]
    inits += [_w("w1", (dim, 2 * dim), rng), _w("w2", (2 * dim, dim), rng),
              _c("g1", np.ones(dim), np.float32), _c("b1", np.zeros(dim), np.float32),
              _c("g2", np.ones(dim), np.float32), _c("b2", np.zeros(dim), np.float32),
              _c("i01", [0, 1]), _c("hs", [heads, hd]), _c("dm", [dim]), _c("scale", 1 / np.sqrt(hd), np.float32)]
    nodes = [h.make_node("LayerNormalization", ["x", "g1", "b1"], ["ln1"], axis=-1),
             h.make_node("Shape", ["x"], ["xs"]), h.make_node("Gather", ["xs", "i01"], ["bs"], axis=0),
             h.make_node("Concat", ["bs", "hs"], ["split_shape"], axis=0),
             h.make_node("Concat", ["bs", "dm"], ["merge_shape"], axis=0)]
    for n in ("q", "k", "v"):
        nodes += [h.make_node("MatMul", ["ln1", f"w{n}"], [f"{n}0"]),
                  h.make_node("Reshape", [f"{n}0", "split_shape"], [f"{n}1"]),
                  h.make_node("Transpose", [f"{n}1"], [f"{n}h"], perm=[0, 2, 3, 1] if n == "k" else [0, 2, 1, 3])]
    nodes += [h.make_node("MatMul", ["qh", "kh"], ["att0"]), h.make_node("Mul", ["att0", "scale"], ["att1"]),
              h.make_node("Softmax", ["att1"], ["att"], axis=-1), h.make_node("MatMul", ["att", "vh"], ["ctx0"]),
              h.make_node("Transpose", ["ctx0"], ["ctx1"], perm=[0, 2, 1, 3]),
              h.make_node("Reshape", ["ctx1", "merge_shape"], ["ctx"]), h.make_node("MatMul", ["ctx", "wo"], ["o"]),
              h.make_node("Add", ["x", "o"], ["r1"]),
              h.make_node("LayerNormalization", ["r1", "g2", "b2"], ["ln2"], axis=-1),
              h.make_node("MatMul", ["ln2", "w1"], ["f1"]), h.make_node("Relu", ["f1"], ["f2"]),
              h.make_node("MatMul", ["f2", "w2"], ["f3"]), h.make_node("Add", ["r1", "f3"], ["y"])]
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["B", "S", dim])],
                  [h.make_tensor_value_info("y", T.FLOAT, ["B", "S", dim])], inits)


def ml_pipeline_model(features: int = 4, classes: int = 3) -> onnx.ModelProto:
    """Standard-op preprocessing -> ai.onnx.ml Scaler, LinearClassifier, ZipMap -> standard-op
    postprocessing of the probabilities. Outputs: label (int64), a sequence of maps, score."""
    rng = np.random.default_rng(3)
    inits = [_c("bias", rng.standard_normal(features), np.float32), _c("two", 2.0, np.float32)]
    nodes = [h.make_node("Add", ["X", "bias"], ["p0"]), h.make_node("Relu", ["p0"], ["p1"]),
             h.make_node("Mul", ["p1", "two"], ["p2"]),
             h.make_node("Scaler", ["p2"], ["scaled"], domain="ai.onnx.ml", offset=[0.5] * features,
                         scale=[1.5] * features),
             h.make_node("LinearClassifier", ["scaled"], ["label", "probs"], domain="ai.onnx.ml",
                         coefficients=rng.standard_normal(features * classes).tolist(),
                         intercepts=rng.standard_normal(classes).tolist(), classlabels_ints=list(range(classes)),
                         post_transform="SOFTMAX"),
             h.make_node("ZipMap", ["probs"], ["prob_maps"], domain="ai.onnx.ml", classlabels_int64s=list(range(classes))),
             h.make_node("Log", ["probs"], ["lp"]), h.make_node("Neg", ["lp"], ["nlp"]),
             h.make_node("ReduceSum", ["nlp"], ["score"], keepdims=0)]
    seq_map = h.make_sequence_type_proto(h.make_map_type_proto(T.INT64, h.make_tensor_type_proto(T.FLOAT, [])))
    outs = [h.make_tensor_value_info("label", T.INT64, ["N"]), h.make_value_info("prob_maps", seq_map),
            h.make_tensor_value_info("score", T.FLOAT, None)]
    return _model(nodes, [h.make_tensor_value_info("X", T.FLOAT, ["N", features])], outs, inits, opset=17, ml=True)


DTYPES = (T.FLOAT16, T.INT64, T.INT32, T.INT8, T.UINT8, T.BOOL, T.DOUBLE, T.BFLOAT16)


def dtype_model() -> onnx.ModelProto:
    """x [N, 4] is cast to every dtype in DTYPES (TensorRT), each passes an Identity that is
    excluded by name (ONNX Runtime), then all come back to float and are summed (TensorRT)."""
    nodes = [h.make_node("Relu", ["x"], ["xr"])]
    acc = "xr"
    for t in DTYPES:
        name = T.DataType.Name(t).lower()
        nodes += [h.make_node("Greater", ["xr", "half"], [f"{name}_a"]) if t == T.BOOL else
                  h.make_node("Cast", ["xr4"], [f"{name}_a"], to=t),
                  h.make_node("Identity", [f"{name}_a"], [f"{name}_b"], name=f"pass_{name}"),
                  h.make_node("Cast", [f"{name}_b"], [f"{name}_f"], to=T.FLOAT),
                  h.make_node("Add", [acc, f"{name}_f"], [f"acc_{name}"])]
        acc = f"acc_{name}"
    nodes.insert(1, h.make_node("Mul", ["xr", "four"], ["xr4"]))
    nodes.append(h.make_node("Identity", [acc], ["y"]))
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["N", 4])], [h.make_tensor_value_info("y", T.FLOAT, None)],
                  [_c("half", 0.5, np.float32), _c("four", 4.0, np.float32)])


def sequence_model() -> onnx.ModelProto:
    """A sequence and an optional made in the first ONNX Runtime segment and read in the last one,
    across a TensorRT segment (the optional through an If whose condition TensorRT computes)."""
    branch = h.make_graph([h.make_node("OptionalGetElement", ["opt"], ["xo"])], "branch", [],
                          [h.make_tensor_value_info("xo", T.FLOAT, ["N", 3])])
    nodes = [h.make_node("SplitToSequence", ["x"], ["seq"], axis=0, keepdims=1),
             h.make_node("Optional", ["x"], ["opt"]),
             h.make_node("Relu", ["x"], ["t0"]), h.make_node("Mul", ["t0", "t0"], ["t1"]),
             h.make_node("Add", ["t1", "x"], ["t2"]), h.make_node("ReduceMax", ["t2"], ["m"], keepdims=0),
             h.make_node("GreaterOrEqual", ["m", "zero"], ["cond"]),
             h.make_node("SequenceInsert", ["seq", "t2"], ["seq2"]),
             h.make_node("ConcatFromSequence", ["seq2"], ["cat"], axis=0),
             h.make_node("If", ["cond"], ["x_back"], then_branch=branch, else_branch=branch)]
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["N", 3])],
                  [h.make_tensor_value_info("cat", T.FLOAT, None), h.make_tensor_value_info("x_back", T.FLOAT, None),
                   h.make_tensor_sequence_value_info("seq2", T.FLOAT, None)], [_c("zero", -1e30, np.float32)])


# ------------------------------------------------------------------ helpers


def ort_reference(model: onnx.ModelProto, feeds: Mapping[str, Any], names: Sequence[str] | None = None) -> list[Any]:
    """Whole-model ONNX Runtime outputs (``names``: extra tensors to fetch, added as outputs)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for n in names or ():
        if n not in {o.name for o in m.graph.output}:
            m.graph.output.append(onnx.ValueInfoProto(name=n))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = inference_session(m.SerializeToString(), so)  # follows the process's thread-pool mode
    return sess.run(list(names) if names else None, dict(feeds))


def assert_same(got: Sequence[Any], expected: Sequence[Any], atol: float = 1e-5) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        if isinstance(e, list):
            assert isinstance(g, list) and len(g) == len(e)
            for a, b in zip(g, e):
                if isinstance(b, dict):
                    assert a.keys() == b.keys() and all(abs(a[k] - b[k]) <= atol for k in b)
                else:
                    np.testing.assert_allclose(a, b, atol=atol, rtol=0)
            continue
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), atol=atol, rtol=0)


def boundary_shapes(model: onnx.ModelProto, feeds: Mapping[str, Any], names: Sequence[str]) -> dict[str, tuple]:
    """Shapes of ``names`` as whole-model ONNX Runtime computes them for ``feeds``."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names if n not in {o.name for o in m.graph.output})
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = inference_session(m.SerializeToString(), so)
    fed = {n: ort.OrtValue.ortvalue_from_numpy(v) for n, v in feeds.items()}
    return {n: tuple(v.shape()) for n, v in zip(names, sess.run_with_ort_values(list(names), fed))}


def assert_profiles_cover(sess: Session, feeds: Mapping[str, Any]) -> None:
    """Every TensorRT segment's inputs, as whole-model ONNX Runtime computes them for ``feeds``,
    fall inside one of the segment's derived profiles."""
    for seg in sess.plan.tensorrt_segments():
        shapes = boundary_shapes(sess.model.proto, feeds, seg.inputs)
        assert covering_profile(sess.segment_profiles[seg.id], shapes) is not None, (seg.id, shapes)


def check(sess: Session, model: onnx.ModelProto, feeds: Mapping[str, Any]) -> None:
    assert_same(sess.run(None, feeds), ort_reference(model, feeds))
    assert_profiles_cover(sess, feeds)


# ------------------------------------------------------------------ tests


def test_conv_chain_five_segments_several_batch_sizes() -> None:
    m = conv_chain(blocks=3)
    sess = Session(m, profiles=[{"x": ((1, 8, 16, 16), (2, 8, 16, 16), (4, 8, 16, 16))}],
                   options=SessionOptions(emulate=True))
    assert [s.backend for s in sess.plan.segments] == ["tensorrt", "onnxruntime"] * 2 + ["tensorrt"]
    assert sess.segment_executors == ["emulated", "onnxruntime"] * 2 + ["emulated"]
    rng = np.random.default_rng(0)
    for n in (1, 3, 4):
        check(sess, m, {"x": rng.standard_normal((n, 8, 16, 16)).astype(np.float32)})
    (z0,) = sess.segment_profiles[2][0].values()  # Resize output: ONNX cannot infer N * scale
    assert z0.source == "calibrated" and (z0.min, z0.opt, z0.max) == ((1, 8, 16, 16), (2, 8, 16, 16), (4, 8, 16, 16))


def test_detection_post_processing_with_nms_topk_loop() -> None:
    m = detection_model()
    opts = SessionOptions(emulate=True, exclude_ops=("NonMaxSuppression", "Loop"), min_segment_size=1)
    sess = Session(m, profiles=[{"feats": ((1, 4, 8), (2, 16, 8), (2, 32, 8))}], options=opts)
    assert [s.backend for s in sess.plan.segments] == ["tensorrt", "onnxruntime", "tensorrt", "onnxruntime"]
    selected = sess.segment_profiles[2][0]["selected"]
    assert selected.source == "calibrated" and selected.data_dependent == (0,)
    assert (selected.min, selected.max) == ((0, 3), (30, 3))  # NMS bound: 2 batches x 3 classes x 5 boxes
    rng = np.random.default_rng(5)
    for shape in ((1, 4, 8), (2, 16, 8), (2, 32, 8), (1, 20, 8)):
        check(sess, m, {"feats": rng.standard_normal(shape).astype(np.float32)})


def test_detection_whole_model_on_tensorrt_single_segment() -> None:
    m = detection_model()
    sess = Session(m, profiles=[{"feats": ((1, 4, 8), (2, 16, 8), (2, 32, 8))}], options=SessionOptions(emulate=True))
    assert len(sess.plan.segments) == 1 and sess.segment_executors == ["emulated"]
    check(sess, m, {"feats": np.random.default_rng(6).standard_normal((2, 10, 8)).astype(np.float32)})


def test_transformer_block_dynamic_sequence_length() -> None:
    m = transformer_model()
    opts = SessionOptions(emulate=True, exclude_ops=("Softmax", "LayerNormalization"), min_segment_size=1)
    sess = Session(m, profiles=[{"x": ((1, 1, 32), (2, 8, 32), (2, 16, 32))}], options=opts)
    assert len(sess.plan.segments) >= 5
    by_source = {tp.source for seg in sess.plan.tensorrt_segments() for p in sess.segment_profiles[seg.id]
                 for tp in p.values()}
    assert "symbolic" in by_source
    shape_inputs = {n: tp for seg in sess.plan.tensorrt_segments() for p in sess.segment_profiles[seg.id]
                    for n, tp in p.items() if tp.values is not None}
    for tp in shape_inputs.values():  # shape tensors carry value ranges: B in 1..2, S in 1..16
        assert tp.values[0][:2] == (1, 1) and tp.values[2][:2] == (2, 16)
    rng = np.random.default_rng(7)
    for b, s in ((1, 1), (2, 7), (1, 16), (2, 16)):
        check(sess, m, {"x": rng.standard_normal((b, s, 32)).astype(np.float32)})


def test_transformer_several_profiles() -> None:
    m = transformer_model()
    opts = SessionOptions(emulate=True, exclude_ops=("Softmax",), min_segment_size=1)
    profiles = [{"x": ((1, 1, 32), (1, 4, 32), (1, 8, 32))}, {"x": ((2, 8, 32), (2, 32, 32), (2, 64, 32))}]
    sess = Session(m, profiles=profiles, options=opts)
    assert all(len(sess.segment_profiles[s.id]) == 2 for s in sess.plan.tensorrt_segments())
    rng = np.random.default_rng(8)
    for b, s in ((1, 3), (2, 40), (2, 64)):
        check(sess, m, {"x": rng.standard_normal((b, s, 32)).astype(np.float32)})


def test_onnx_ml_pipeline_by_hand() -> None:
    m = ml_pipeline_model()
    # the hand-made pipeline's TensorRT part is a few element-wise ops (no price of boundaries here)
    sess = Session(m, profiles=[{"X": ((1, 4), (8, 4), (64, 4))}], options=SessionOptions(emulate=True, boundary_cost=None))
    backends = [s.backend for s in sess.plan.segments]
    assert "onnxruntime" in backends and "tensorrt" in backends
    assert sess.get_outputs()[1].type == "seq(map(int64,tensor(float)))"
    rng = np.random.default_rng(9)
    for n in (1, 5, 64):
        check(sess, m, {"X": rng.standard_normal((n, 4)).astype(np.float32)})


def test_skl2onnx_pipeline() -> None:
    pytest.importorskip("sklearn")
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(10)
    X = rng.standard_normal((60, 5)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] > 0).astype(np.int64) + (X[:, 2] > 1)
    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=200)).fit(X, y)
    from skl2onnx.common.data_types import FloatTensorType

    m = skl2onnx.convert_sklearn(pipe, initial_types=[("X", FloatTensorType([None, 5]))], target_opset=17)
    sess = Session(m, profiles=[{"X": ((1, 5), (8, 5), (32, 5))}], options=SessionOptions(emulate=True))
    for n in (1, 7, 32):
        feeds = {"X": rng.standard_normal((n, 5)).astype(np.float32)}
        assert_same(sess.run(None, feeds), ort_reference(m, feeds))


def test_every_dtype_crosses_segment_boundaries() -> None:
    m = dtype_model()
    names = tuple(f"pass_{T.DataType.Name(t).lower()}" for t in DTYPES)
    sess = Session(m, profiles=[{"x": ((1, 4), (2, 4), (3, 4))}],
                   options=SessionOptions(emulate=True, exclude_nodes=names, min_segment_size=1))
    crossing = {n for s in sess.plan.segments[1:] for n in s.inputs}
    for t in DTYPES:
        assert f"{T.DataType.Name(t).lower()}_a" in crossing or f"{T.DataType.Name(t).lower()}_b" in crossing
    x = np.random.default_rng(11).standard_normal((3, 4)).astype(np.float32)
    check(sess, m, {"x": x})


def test_bfloat16_crosses_a_boundary_and_comes_back_as_ml_dtypes() -> None:
    nodes = [h.make_node("Relu", ["x"], ["r"]), h.make_node("Cast", ["r"], ["y"], to=T.BFLOAT16),
             h.make_node("Identity", ["y"], ["z"], name="keep")]
    m = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
               [h.make_tensor_value_info("y", T.BFLOAT16, [2, 3]), h.make_tensor_value_info("z", T.BFLOAT16, [2, 3])])
    sess = Session(m, options=SessionOptions(emulate=True, exclude_nodes=("keep",), min_segment_size=1))
    assert [s.backend for s in sess.plan.segments] == ["tensorrt", "onnxruntime"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    y, z = sess.run(None, {"x": x})
    assert y.dtype.name == "bfloat16" and z.dtype.name == "bfloat16"
    np.testing.assert_array_equal(y.astype(np.float32), np.maximum(x, 0))
    np.testing.assert_array_equal(z.astype(np.float32), np.maximum(x, 0))


def test_sequences_and_optionals_pass_between_onnxruntime_segments() -> None:
    m = sequence_model()
    sess = Session(m, profiles=[{"x": ((1, 3), (2, 3), (4, 3))}], options=SessionOptions(emulate=True, boundary_cost=None))
    backends = [s.backend for s in sess.plan.segments]
    assert backends == ["onnxruntime", "tensorrt", "onnxruntime"]
    assert {"seq", "opt"} <= set(sess.plan.segments[2].inputs)
    assert sess.get_outputs()[2].type == "seq(tensor(float))"
    for n in (1, 4):
        x = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
        check(sess, m, {"x": x})


def test_calibration_runs_the_whole_model_once_per_point(monkeypatch) -> None:
    """Profiles of every calibrated tensor come from one whole-model run per calibration point
    (min, opt, max, and the data-dependence probe), however many tensors are recorded."""
    import trt_backend.compiler as compile_module

    calls: list[int] = []
    real = compile_module.tapped_session

    def counting(model, names, options, what):
        run = real(model, names, options, what)
        calls.append(len(names))
        return lambda feeds, wanted: calls.append(-1) or run(feeds, wanted)

    monkeypatch.setattr(compile_module, "tapped_session", counting)
    opts = SessionOptions(emulate=True, exclude_ops=("NonMaxSuppression", "Loop"), min_segment_size=1)
    Session(detection_model(), profiles=[{"feats": ((1, 4, 8), (2, 16, 8), (2, 32, 8))}], options=opts)
    sessions, runs = [c for c in calls if c >= 0], calls.count(-1)
    assert len(sessions) == 1 and sessions[0] >= 4  # one tapped session, several tensors recorded
    assert runs == 4

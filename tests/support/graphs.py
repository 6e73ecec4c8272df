"""Small hand-made ONNX graphs that split into several segments (a conv chain, a detector with
NMS/TopK/Loop post-processing, a transformer block, an ONNX-ML pipeline, every dtype across a
boundary, sequences and optionals), and the checks the tests apply to them: whole-model ONNX
Runtime outputs as the reference, and derived profiles covering the shapes seen at run time.
Shared by the tests and the benchmarks."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from tests.helpers import const, crop_resize, model, vi
from trt_backend.ort.threads import inference_session
from trt_backend.profiles import covering_profile
from trt_backend.session.session import Session


def _w(name: str, shape: Sequence[int], rng: np.random.Generator, scale: float = 0.1) -> onnx.TensorProto:
    return nh.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _c(name: str, value: Any, dtype: Any = np.int64) -> onnx.TensorProto:
    return nh.from_array(np.asarray(value, dtype=dtype), name)


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           inits: Sequence[onnx.TensorProto] = (), opset: int = 18, ml: bool = False,
           name: str = "g") -> onnx.ModelProto:
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


def nonzero_detection_model(feat: int = 8) -> onnx.ModelProto:
    """Scores -> NonZero of those above a threshold -> GatherND of the kept boxes (a count that
    depends on the data) -> box arithmetic; TopK of the scores per image. feats: [N, A, feat]."""
    rng = np.random.default_rng(3)
    inits = [nh.from_array((rng.standard_normal((feat, 4)) * 0.5).astype(np.float32), "wb"),
             nh.from_array((rng.standard_normal((feat, 1)) * 0.5).astype(np.float32), "wc"),
             nh.from_array(np.array([0.5], np.float32), "thr"), nh.from_array(np.array([2], np.int64), "k"),
             nh.from_array(np.array([2], np.int64), "axis2"), nh.from_array(np.array(2.0, np.float32), "two")]
    nodes = [h.make_node("MatMul", ["feats", "wb"], ["braw"]), h.make_node("Sigmoid", ["braw"], ["boxes"]),
             h.make_node("MatMul", ["feats", "wc"], ["craw"]), h.make_node("Sigmoid", ["craw"], ["cs"]),
             h.make_node("Squeeze", ["cs", "axis2"], ["scores"]),
             h.make_node("Greater", ["scores", "thr"], ["keep"]), h.make_node("NonZero", ["keep"], ["nz"]),
             h.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
             h.make_node("GatherND", ["boxes", "idx"], ["kept"]), h.make_node("Mul", ["kept", "two"], ["kept2"]),
             h.make_node("Sigmoid", ["kept2"], ["kept_boxes"]),
             h.make_node("TopK", ["scores", "k"], ["top_scores", "top_idx"], axis=1)]
    g = h.make_graph(nodes, "det", [h.make_tensor_value_info("feats", T.FLOAT, ["N", "A", feat])],
                     [h.make_tensor_value_info("kept_boxes", T.FLOAT, None),
                      h.make_tensor_value_info("top_scores", T.FLOAT, None),
                      h.make_tensor_value_info("top_idx", T.INT64, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 9
    return m


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
             h.make_node("ZipMap", ["probs"], ["prob_maps"], domain="ai.onnx.ml",
                         classlabels_int64s=list(range(classes))),
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
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["N", 4])],
                  [h.make_tensor_value_info("y", T.FLOAT, None)],
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


# ------------------------------------------------------------------ small CNNs around a crop-and-resize Resize

CONV_RESIZE_PROFILE = [{"x": ((1, 3, 16, 16), (2, 3, 16, 16), (4, 3, 16, 16)),
                        "r": ((1, 4, 16, 16), (2, 4, 16, 16), (4, 4, 16, 16))}]


def conv_resize_conv(batch: str | int = "N") -> onnx.ModelProto:
    """Conv -> Resize(tf_crop_and_resize, rejected by TensorRT) -> Conv -> Relu."""
    rng = np.random.default_rng(0)
    resize, inits = crop_resize("c", "r")
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv1"), resize,
             h.make_node("Conv", ["r", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             h.make_node("Relu", ["c2"], ["y"], name="relu")]
    inits += [const("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
              const("w2", rng.standard_normal((4, 4, 3, 3)).astype(np.float32))]
    return model(nodes, [vi("x", [batch, 3, 16, 16])], [vi("y", [batch, 4, 16, 16])], inits)


def cnn() -> onnx.ModelProto:
    """[Conv -> Relu] x2 -> crop-and-resize Resize (ONNX Runtime) -> Conv -> Relu -> GAP -> Flatten -> Gemm."""
    rng = np.random.default_rng(0)
    inits, nodes, prev, cin = [], [], "x", 3
    for i, cout in enumerate((8, 16, 16)):
        inits += [nh.from_array((rng.standard_normal((cout, cin, 3, 3)) * 0.3).astype(np.float32), f"w{i}"),
                  nh.from_array((rng.standard_normal(cout) * 0.1).astype(np.float32), f"b{i}")]
        if i == 2:
            resize, consts = crop_resize(prev, "rs", "resize")
            nodes.append(resize)
            inits += consts
            prev = "rs"
        nodes += [h.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1], name=f"conv{i}"),
                  h.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        prev, cin = f"r{i}", cout
    inits += [nh.from_array((rng.standard_normal((16, 10)) * 0.3).astype(np.float32), "fw"),
              nh.from_array((rng.standard_normal(10) * 0.1).astype(np.float32), "fb")]
    nodes += [h.make_node("GlobalAveragePool", [prev], ["g"], name="gap"),
              h.make_node("Flatten", ["g"], ["f"], name="flat"),
              h.make_node("Gemm", ["f", "fw", "fb"], ["y"], name="fc")]
    m = h.make_model(h.make_graph(nodes, "cnn", [vi("x", ["N", 3, 16, 16])], [vi("y", ["N", 10])], inits),
                     opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def three_segments(batch: int | str = "N") -> onnx.ModelProto:
    """Conv+Relu+Sigmoid (TensorRT) -> crop-and-resize Resize (ONNX Runtime: TensorRT rejects it)
    -> Conv+Relu (TensorRT); outputs y (from the last segment) and z (from the first)."""
    rng = np.random.default_rng(0)
    w1 = nh.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1")
    w2 = nh.from_array(rng.standard_normal((4, 8, 3, 3)).astype(np.float32), "w2")
    resize, consts = crop_resize("r1", "rs")
    nodes = [h.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             h.make_node("Sigmoid", ["r1"], ["z"], name="sigmoid"),
             resize,
             h.make_node("Conv", ["rs", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c2"], ["y"], name="relu2")]
    graph = h.make_graph(nodes, "three", [h.make_tensor_value_info("x", T.FLOAT, [batch, 3, 8, 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, None), h.make_tensor_value_info("z", T.FLOAT, None)],
                         [w1, w2, *consts])
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def custom_op_model() -> onnx.ModelProto:
    nodes = [h.make_node("Relu", ["x"], ["a"]), h.make_node("Frobnicate", ["a"], ["y"], domain="example.custom")]
    m = h.make_model(h.make_graph(nodes, "custom", [h.make_tensor_value_info("x", T.FLOAT, [2])],
                                  [h.make_tensor_value_info("y", T.FLOAT, [2])]),
                     opset_imports=[h.make_opsetid("", 18), h.make_opsetid("example.custom", 1)])
    m.ir_version = 9
    return m

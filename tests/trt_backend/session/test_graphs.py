"""Stitched sessions on hand-made multi-segment graphs: outputs equal whole-model ONNX Runtime at
several shapes inside each profile, and derived profiles cover the shapes seen at run time."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from tests.support.graphs import (
    DTYPES,
    _model,
    assert_same,
    check,
    conv_chain,
    detection_model,
    dtype_model,
    ml_pipeline_model,
    ort_reference,
    sequence_model,
    transformer_model,
)
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

pytestmark = pytest.mark.usefixtures("oracle")  # needs a TensorRT parser



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
        assert tp.values is not None
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
    sess = Session(m, profiles=[{"X": ((1, 4), (8, 4), (64, 4))}],
                   options=SessionOptions(emulate=True, boundary_cost=None))
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
        if t == T.DOUBLE:  # (TensorRT has no float64: what computes in it stays on ONNX Runtime)
            continue
        assert f"{T.DataType.Name(t).lower()}_a" in crossing or f"{T.DataType.Name(t).lower()}_b" in crossing
    on_ort = {i for s in sess.plan.segments if s.backend == "onnxruntime" for i in s.nodes}
    types = sess.model.index.types
    double = [i for i, n in enumerate(sess.model.proto.graph.node)
              if any(x in types and types[x].tensor_type.elem_type == T.DOUBLE for x in (*n.input, *n.output))]
    assert len(double) == 3 and set(double) <= on_ort  # (the Cast to double, its Identity, the Cast back)
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
    sess = Session(m, profiles=[{"x": ((1, 3), (2, 3), (4, 3))}],
                   options=SessionOptions(emulate=True, boundary_cost=None))
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


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_what_computes_in_float64_stays_on_onnx_runtime() -> None:
    """A scikit-learn regressor converted in float64 (skl2onnx's DoubleTensorType): TensorRT's
    parser took it whole and computes doubles in float32, so an engine would have returned float32
    where the model says float64, while the emulation ran float64. It runs on ONNX Runtime, as
    the model says, and the plan says why."""
    from skl2onnx import to_onnx
    from sklearn.datasets import load_diabetes
    from sklearn.neural_network import MLPRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = load_diabetes(return_X_y=True)
    reg = make_pipeline(StandardScaler(), MLPRegressor(hidden_layer_sizes=(32,), max_iter=50, random_state=0)).fit(x, y)
    m = to_onnx(reg, x[:1].astype(np.float64), target_opset=17)
    sess = Session(m, profiles=[{"X": ((1, 10), (8, 10), (64, 10))}], options=SessionOptions(emulate=True))
    assert [s.backend for s in sess.plan.segments] == ["onnxruntime"]
    reasons = {n.reason for n in sess.plan.nodes}
    assert any("float64 value, which TensorRT does not compute in" in (r or "") for r in reasons), reasons
    (ours,) = sess.run(None, {"X": x[:8]})
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x[:8]})[0]
    assert ours.dtype == np.float64
    np.testing.assert_array_equal(ours, ref)

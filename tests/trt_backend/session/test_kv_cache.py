"""Transformers with a KV cache: a decoder whose past_key/past_value inputs have
two symbolic dims (batch and past length; past length 0 on the first step) plans, builds with one
profile covering prefill and decode, and runs both steps emulated equal to ONNX Runtime."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from trt_backend.artifacts.write import build as build_folder_build
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

D, HEADS, HD = 16, 2, 8
# one profile from prefill (past 0) to decode (past up to 32)
PROFILE = [{"x": ((1, 1, D), (1, 4, D), (2, 16, D)),
            "past_key": ((1, HEADS, 0, HD), (1, HEADS, 8, HD), (2, HEADS, 32, HD)),
            "past_value": ((1, HEADS, 0, HD), (1, HEADS, 8, HD), (2, HEADS, 32, HD))}]


def kv_decoder(d: int = D, heads: int = HEADS, seed: int = 0) -> onnx.ModelProto:
    """A one-layer attention decoder with a KV cache, as exporters write one: past_key/past_value
    in (batch, heads, past, head_dim), present_* out; past length 0 on the first step."""
    hd = d // heads
    rng = np.random.default_rng(seed)
    def w(n: str) -> onnx.TensorProto:
        return nh.from_array((rng.standard_normal((d, d)) * 0.3).astype(np.float32), n)

    inits = [w("wq"), w("wk"), w("wv"), w("wo"), nh.from_array(np.array([0, 0, heads, hd], np.int64), "split_shape"),
             nh.from_array(np.array([0, 0, d], np.int64), "merge_shape"),
             nh.from_array(np.array(1 / np.sqrt(hd), np.float32), "inv_sqrt")]
    nodes = []
    for n in ("q", "k", "v"):
        nodes += [h.make_node("MatMul", ["x", f"w{n}"], [f"{n}_flat"]),
                  h.make_node("Reshape", [f"{n}_flat", "split_shape"], [f"{n}_split"]),
                  h.make_node("Transpose", [f"{n}_split"], [f"{n}_heads"], perm=[0, 2, 1, 3])]
    nodes += [h.make_node("Concat", ["past_key", "k_heads"], ["present_key"], axis=2),
              h.make_node("Concat", ["past_value", "v_heads"], ["present_value"], axis=2),
              h.make_node("Transpose", ["present_key"], ["k_t"], perm=[0, 1, 3, 2]),
              h.make_node("MatMul", ["q_heads", "k_t"], ["scores_raw"]),
              h.make_node("Mul", ["scores_raw", "inv_sqrt"], ["scores"]),
              h.make_node("Softmax", ["scores"], ["probs"], axis=-1),
              h.make_node("MatMul", ["probs", "present_value"], ["ctx"]),
              h.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
              h.make_node("Reshape", ["ctx_t", "merge_shape"], ["ctx_flat"]),
              h.make_node("MatMul", ["ctx_flat", "wo"], ["y"])]
    vi = h.make_tensor_value_info
    graph = h.make_graph(nodes, "kv_decoder",
                         [vi("x", T.FLOAT, ["batch", "seq", d]), vi("past_key", T.FLOAT, ["batch", heads, "past", hd]),
                          vi("past_value", T.FLOAT, ["batch", heads, "past", hd])],
                         [vi("y", T.FLOAT, ["batch", "seq", d]),
                          vi("present_key", T.FLOAT, ["batch", heads, "total", hd]),
                          vi("present_value", T.FLOAT, ["batch", heads, "total", hd])], inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def generate(sess: Session, model: onnx.ModelProto, batch: int, prompt: int, steps: int) -> None:
    """Prefill ``prompt`` tokens from an empty cache, then decode ``steps`` tokens one at a time,
    feeding each step's present_* back as past_*; every step equals ONNX Runtime's."""
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(batch * 100 + prompt)
    past = np.zeros((batch, HEADS, 0, HD), np.float32)
    feeds = {"x": rng.standard_normal((batch, prompt, D)).astype(np.float32), "past_key": past, "past_value": past}
    for step in range(steps + 1):
        ours, theirs = sess.run(None, feeds), ref.run(None, feeds)
        for a, b in zip(ours, theirs):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
        assert ours[1].shape == (batch, HEADS, prompt + step, HD)
        feeds = {"x": rng.standard_normal((batch, 1, D)).astype(np.float32), "past_key": ours[1],
                 "past_value": ours[2]}


@pytest.mark.parametrize("cut", [(), ("Softmax",)])
def test_kv_cache_decoder_prefill_and_decode(flavor, tmp_path, cut) -> None:
    m = kv_decoder()
    opts = SessionOptions(emulate=True, exclude_ops=cut, min_segment_size=1)
    sess = Session(m, PROFILE, opts)
    assert [s.backend for s in sess.plan.segments] == (["tensorrt"] if not cut else
                                                       ["tensorrt", "onnxruntime", "tensorrt"])
    for batch, prompt in ((1, 5), (2, 1), (2, 16)):
        generate(sess, m, batch, prompt, steps=3)
    if cut:  # the boundary after the past dim: its range spans prefill (past 0) to the longest decode
        scores = sess.segment_profiles[2][0]["probs"]
        assert scores.min[3] == 1 and scores.max[3] == 32 + 16
    # one profile covers both steps in the engines too (TensorRT-RTX builds ahead of time here)
    manifest = build_folder_build(m, str(tmp_path / "b"), PROFILE, opts)
    assert all(s["engine_bytes"] > 0 for s in manifest["segments"] if s["backend"] == "tensorrt")
    loaded = Session.load(str(tmp_path / "b"), SessionOptions(emulate=True))
    generate(loaded, m, 1, 3, steps=2)

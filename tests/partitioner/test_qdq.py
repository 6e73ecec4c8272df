"""The Q/DQ rewrite (partitioner.qdq) on hand-made graphs: what TensorRT refuses only for its form
becomes float nodes and initializers with ONNX Runtime's numerics (bit-exact with graph
optimisations off, rounding ties to even included); what it takes, or what cannot be rewritten
exactly (a scale that is not constant, blocked quantization, a Q read by other nodes), stays."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from partitioner import Plan, load_model
from partitioner.qdq import QdqPass, rewrite_qdq, rewrite_summary
from tests.helpers import const, model, vi
from trt_backend.ort.threads import inference_session


def run_ort(m: onnx.ModelProto, feeds: dict[str, np.ndarray], level: str = "disable") -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                                   "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[level]
    return inference_session(m.SerializeToString(), so).run(None, feeds)


def qdq_pair(x: str, out: str, scale: np.ndarray, zp: np.ndarray, name: str, axis: int | None = None,
             opset_axis: bool = True) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    kw: dict[str, Any] = {"axis": axis} if axis is not None and opset_axis else {}
    nodes = [h.make_node("QuantizeLinear", [x, f"{name}_s", f"{name}_zp"], [f"{name}_q"], name=f"{name}_Q", **kw),
             h.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_zp"], [out], name=f"{name}_DQ", **kw)]
    return nodes, [const(f"{name}_s", scale), const(f"{name}_zp", zp)]


def per_axis_model(axis: int = 1) -> onnx.ModelProto:
    """x -> asymmetric uint8 Q/DQ per channel -> Relu -> asymmetric int8 Q/DQ per tensor -> y."""
    scale = np.array([0.05, 0.1, 0.02, 0.2], np.float32)
    n1, i1 = qdq_pair("x", "d", scale, np.array([128, 3, 0, 250], np.uint8), "a", axis=axis)
    n2, i2 = qdq_pair("r", "y", np.array(0.03, np.float32), np.array(-7, np.int8), "b")
    return model(n1 + [h.make_node("Relu", ["d"], ["r"], name="relu")] + n2,
                 [vi("x", [2, 4, 5, 5])], [vi("y", [2, 4, 5, 5])], i1 + i2, opset=13)


def ties(scale: np.ndarray, shape: tuple[int, ...], axis: int, rng: np.random.Generator) -> np.ndarray:
    """Inputs that sit exactly on rounding ties (k + 0.5 steps) and far outside the range."""
    k = rng.integers(-300, 300, size=shape).astype(np.float32) + 0.5
    s = scale.reshape([-1 if d == axis else 1 for d in range(len(shape))])
    return (k * s).astype(np.float32)


def test_per_axis_asymmetric_pairs_become_float_nodes_equal_bit_for_bit() -> None:
    m = per_axis_model()
    loaded = load_model(m)
    result = rewrite_qdq(loaded)
    assert result.modified
    assert set(result.rewritten) == {"a_Q", "a_DQ", "b_Q", "b_DQ"} == set(loaded.rewritten)
    assert "zero points per axis 1" in result.rewritten["a_Q"] and "zero point -7" in result.rewritten["b_Q"]
    ops = [(n.name, n.op_type) for n in loaded.proto.graph.node]
    assert ops[:6] == [("a_Q/Div", "Div"), ("a_Q/Round", "Round"), ("a_Q/Add", "Add"), ("a_Q/Clip", "Clip"),
                       ("a_DQ/Sub", "Sub"), ("a_DQ/Mul", "Mul")]
    assert not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in loaded.proto.graph.node)
    assert any("Q/DQ" in f for f in loaded.fixes)
    rng = np.random.default_rng(0)
    scale = np.array([0.05, 0.1, 0.02, 0.2], np.float32)
    for x in (ties(scale, (2, 4, 5, 5), 1, rng), rng.standard_normal((2, 4, 5, 5)).astype(np.float32) * 20):
        want, got = run_ort(m, {"x": x})[0], run_ort(loaded.proto, {"x": x})[0]
        np.testing.assert_array_equal(got, want)  # float emulation of Q/DQ is exact with optimisations off


def test_negative_axis_and_idempotence() -> None:
    m = per_axis_model(axis=-3)
    loaded = load_model(m)
    assert rewrite_qdq(loaded).modified
    again = QdqPass()(loaded)
    assert not again.modified and again.rewritten == {}
    x = ties(np.array([0.05, 0.1, 0.02, 0.2], np.float32), (2, 4, 5, 5), 1, np.random.default_rng(1))
    np.testing.assert_array_equal(run_ort(loaded.proto, {"x": x})[0], run_ort(m, {"x": x})[0])


def test_constant_dequantize_folds_per_axis_and_int32_bias_exactly() -> None:
    """uint8 weights with per-channel zero points and an int32 bias, as a default quantizer
    writes them, become float32 initializers equal to ONNX Runtime's DequantizeLinear."""
    rng = np.random.default_rng(2)
    wq = rng.integers(0, 256, (4, 3, 3, 3)).astype(np.uint8)
    ws, wzp = np.array([0.01, 0.02, 0.005, 0.3], np.float32), np.array([128, 0, 255, 7], np.uint8)
    bq, bs = rng.integers(-2**31, 2**31 - 1, (4,)).astype(np.int32), np.array([1e-4], np.float32)
    nodes = [h.make_node("DequantizeLinear", ["wq", "ws", "wzp"], ["w"], name="w_DQ", axis=0),
             h.make_node("DequantizeLinear", ["bq", "bs"], ["b"], name="b_DQ"),
             h.make_node("Conv", ["x", "w", "b"], ["y"], name="conv")]
    m = model(nodes, [vi("x", [1, 3, 6, 6])], [vi("y", [1, 4, 4, 4])],
              [const("wq", wq), const("ws", ws), const("wzp", wzp), const("bq", bq), const("bs", bs)], opset=13)
    loaded = load_model(m)
    result = rewrite_qdq(loaded)
    assert set(result.rewritten) == {"w_DQ", "b_DQ"}
    assert "int32" in result.rewritten["b_DQ"] and "nonzero zero point" in result.rewritten["w_DQ"]
    # the summary counts each reason found (it named "int32 bias, nonzero zero point" whatever was found)
    assert rewrite_summary(result.rewritten) == [
        "2 constant DequantizeLinear(s) TensorRT refuses (1 nonzero zero point, 1 int32) folded into float32 "
        "initializers (exact)"]
    assert rewrite_summary({"b_DQ": result.rewritten["b_DQ"]})[0].startswith(
        "1 constant DequantizeLinear(s) TensorRT refuses (1 int32) folded")
    assert [n.op_type for n in loaded.proto.graph.node] == ["Conv"]
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in loaded.proto.graph.initializer}
    assert set(inits) == {"w", "b"}  # the quantized tensors and their scales went with their readers
    dq = model(nodes[:2], [], [vi("w", [4, 3, 3, 3]), vi("b", [4])], m.graph.initializer, opset=13)
    want_w, want_b = run_ort(dq, {})
    np.testing.assert_array_equal(inits["w"], want_w)
    np.testing.assert_array_equal(inits["b"], want_b)
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    np.testing.assert_array_equal(run_ort(loaded.proto, {"x": x})[0], run_ort(m, {"x": x})[0])


def test_what_tensorrt_takes_is_left_alone() -> None:
    """Symmetric int8 activations and per-channel symmetric weights: nothing to rewrite."""
    n1, i1 = qdq_pair("x", "d", np.array(0.05, np.float32), np.array(0, np.int8), "a")
    nodes = n1 + [h.make_node("DequantizeLinear", ["wq", "ws", "wzp"], ["w"], name="w_DQ", axis=0),
                  h.make_node("Conv", ["d", "w"], ["y"], name="conv")]
    inits = i1 + [const("wq", np.ones((4, 4, 1, 1), np.int8)), const("ws", np.full(4, 0.1, np.float32)),
                  const("wzp", np.zeros(4, np.int8))]
    loaded = load_model(model(nodes, [vi("x", [1, 4, 3, 3])], [vi("y", [1, 4, 3, 3])], inits, opset=13))
    before = loaded.proto.SerializeToString()
    result = rewrite_qdq(loaded)
    assert not result.modified and loaded.rewritten == {} and loaded.proto.SerializeToString() == before


@pytest.mark.parametrize("case", ["scale is a graph input", "scale computed", "Q read by another node",
                                  "DQ with another scale", "Q output is a graph output", "blocked"])
def test_what_cannot_be_rewritten_exactly_stays_as_it_was(case: str) -> None:
    """Bad or unusual inputs: no rewrite, no crash, the model unchanged."""
    s, zp = np.array(0.05, np.float32), np.array(9, np.int8)
    inputs, outputs = [vi("x", [1, 4, 3, 3])], [vi("y", [1, 4, 3, 3])]
    inits = [const("s", s), const("zp", zp)]
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], name="Q"),
             h.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], name="DQ")]
    opset = 13
    if case == "scale is a graph input":
        inputs.append(vi("s", []))
        inits = [const("zp", zp)]
    elif case == "scale computed":
        nodes.insert(0, h.make_node("Abs", ["s0"], ["s"], name="abs"))
        inits = [const("s0", s), const("zp", zp)]
    elif case == "Q read by another node":
        nodes.append(h.make_node("Cast", ["q"], ["qf"], name="cast", to=T.FLOAT))
        outputs.append(vi("qf", [1, 4, 3, 3]))
    elif case == "DQ with another scale":
        nodes[1].input[1] = "s2"
        inits.append(const("s2", np.array(0.5, np.float32)))
    elif case == "Q output is a graph output":
        outputs.append(vi("q", [1, 4, 3, 3], T.INT8))
    elif case == "blocked":
        opset = 21
        bs, bzp = np.full((1, 4, 1, 3), 0.05, np.float32), np.full((1, 4, 1, 3), 9, np.int8)
        inits = [const("s", bs), const("zp", bzp)]
        for n in nodes:
            n.attribute.extend([h.make_attribute("axis", 2), h.make_attribute("block_size", 3)])
    m = model(nodes, inputs, outputs, inits, opset=opset, ir=10 if opset >= 21 else 8)
    loaded = load_model(m)
    before = loaded.proto.SerializeToString()
    result = rewrite_qdq(loaded)
    assert not result.modified, case
    assert loaded.rewritten == {} and loaded.proto.SerializeToString() == before


def test_plan_json_carries_rewritten_only_when_there_is_some() -> None:
    from partitioner import Verdict, build_plan

    loaded = load_model(per_axis_model())
    rewrite_qdq(loaded)
    plan = build_plan(loaded, [Verdict("onnxruntime", "test")] * len(loaded.proto.graph.node), None)
    d = plan.to_dict()
    assert d["rewritten"] == loaded.rewritten and list(d)[:4] == ["model", "tensorrt", "target", "rewritten"]
    back = Plan.from_dict(d)
    assert back.rewritten == loaded.rewritten and back.to_json() == plan.to_json()
    plain = load_model(model([h.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [2])], [vi("y", [2])]))
    plain_plan = build_plan(plain, [Verdict("onnxruntime", "test")], None)
    assert "rewritten" not in plain_plan.to_dict() and '"rewritten"' not in plain_plan.to_json()


def test_requires_a_loaded_model() -> None:
    from partitioner import InvalidModelError

    with pytest.raises(InvalidModelError, match="needs a loaded Model"):
        QdqPass()(onnx.ModelProto())  # type: ignore[arg-type]


def test_int8_rewrite_requantizes_pairs_and_weights_symmetrically() -> None:
    """The int8 rewrite: a per-tensor asymmetric pair becomes symmetric int8 over the same range
    (a Clip keeps what the lopsided range clamped), within one new step of the original; a
    per-axis lopsided pair is rewritten exactly (its clamp would be per axis); a constant uint8
    weight DequantizeLinear with a nonzero zero point becomes symmetric int8 weights, per axis,
    within half a new step of its values."""
    w = np.arange(24, dtype=np.uint8).reshape(4, 6) * 9
    wq = [const("w", w), const("w_s", np.array([0.01, 0.02, 0.03, 0.04], np.float32)),
          const("w_zp", np.array([100, 90, 80, 70], np.uint8))]
    pair_nodes, pair_inits = qdq_pair("x", "d", np.array(0.05, np.float32), np.array(-100, np.int8), "p")
    nodes = pair_nodes + [h.make_node("DequantizeLinear", ["w", "w_s", "w_zp"], ["wf"], name="w_DQ", axis=0),
                          h.make_node("MatMul", ["wf", "d"], ["y"], name="mm")]
    m = model(nodes, [vi("x", [6, 3])], [vi("y", [4, 3])], pair_inits + wq, opset=13)
    loaded = load_model(m)
    result = rewrite_qdq(loaded, "int8")
    assert set(result.rewritten) == {"p_Q", "p_DQ", "w_DQ"}
    assert "re-quantized to symmetric int8: range -1.4..11.35 kept, step x1.79" in result.rewritten["p_Q"]
    graph = loaded.proto.graph
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
    by_name = {n.name: n for n in graph.node}
    assert [n.op_type for n in graph.node] == ["Clip", "QuantizeLinear", "DequantizeLinear", "DequantizeLinear",
                                               "MatMul"]
    for name in ("p_Q", "p_DQ", "w_DQ"):
        zp = inits[by_name[name].input[2]]
        assert zp.dtype == np.int8 and not zp.any()
    assert inits[by_name["p_Q"].input[1]] == pytest.approx(11.35 / 127)
    x = np.linspace(-3, 14, 18, dtype=np.float32).reshape(6, 3)
    want, got = run_ort(m, {"x": x})[0], run_ort(loaded.proto, {"x": x})[0]
    original_w = ((w.astype(np.float32) - np.array([100, 90, 80, 70])[:, None])
                  * np.array([0.01, 0.02, 0.03, 0.04])[:, None])
    new_w = inits[by_name["w_DQ"].input[0]].astype(np.float32) * inits[by_name["w_DQ"].input[1]][:, None]
    assert np.abs(new_w - original_w).max() <= 0.5 * inits[by_name["w_DQ"].input[1]].max() + 1e-7
    assert np.abs(got - want).max() <= 0.1 * np.abs(want).max()
    lopsided = load_model(per_axis_model())
    done = rewrite_qdq(lopsided, "int8")
    assert _FLOAT in done.rewritten["a_Q"] and "re-quantized" in done.rewritten["b_Q"]


_FLOAT = "emulated in float32"


@pytest.mark.parametrize("mode", ["exact", "int8"])
def test_a_symmetric_scalar_constant_is_folded_which_tensorrt_does_not_build(mode, flavor, tmp_path) -> None:
    """ONNX Runtime's quantizer with symmetric activations quantizes an activation's scalar
    constants (GELU's 0.5) to int8 with zero point 0, a form TensorRT's parser takes and its
    builder refuses ("Quantized constant ... is only allowed before DQ"; of shape [1] it builds):
    the build demoted the whole segment, node by node. Folded into a float32 scalar, exactly."""
    import trt_backend

    n1, i1 = qdq_pair("x", "d", np.array(0.05, np.float32), np.array(0, np.int8), "a")
    nodes = n1 + [h.make_node("DequantizeLinear", ["half_q", "half_s", "half_zp"], ["half"], name="half_DQ"),
                  h.make_node("Mul", ["d", "half"], ["y"], name="mul")]
    inits = i1 + [const("half_q", np.array(64, np.int8)), const("half_s", np.array(1 / 128, np.float32)),
                  const("half_zp", np.array(0, np.int8))]
    m = model(nodes, [vi("x", [2, 8])], [vi("y", [2, 8])], inits, opset=13)
    loaded = load_model(m)
    result = rewrite_qdq(loaded, mode)
    assert result.rewritten == {"half_DQ": "constant DequantizeLinear (scalar) folded into float32 initializer 'half'"}
    assert rewrite_summary(result.rewritten) == ["1 constant DequantizeLinear(s) TensorRT refuses (1 scalar) folded "
                                                 "into float32 initializers (exact)"]
    assert [n.op_type for n in loaded.proto.graph.node] == ["QuantizeLinear", "DequantizeLinear", "Mul"]
    x = np.linspace(-3, 3, 16, dtype=np.float32).reshape(2, 8)
    np.testing.assert_array_equal(run_ort(loaded.proto, {"x": x})[0], run_ort(m, {"x": x})[0])
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    folder = str(tmp_path / "built")
    manifest = trt_backend.build(path, folder, None, trt_backend.SessionOptions(qdq_rewrite=mode))
    assert manifest["demoted"] == [] and [s["backend"] for s in manifest["segments"]] == ["tensorrt"]

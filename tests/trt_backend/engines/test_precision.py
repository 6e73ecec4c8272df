"""The precision transform: I/O dtypes kept, keep-list ops in float32, initializers converted,
numerics checked by running the transformed model in ONNX Runtime CPU against the original."""
from __future__ import annotations

import logging
import os
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from partitioner.errors import OptionsError
from tests.helpers import const, model, vi
from trt_backend.engines.emulation import emulation_of
from trt_backend.engines.precision import (
    DEFAULT_KEEP_FP32,
    apply_precision,
    compare_outputs,
)
from trt_backend.errors import PrecisionError

pytest.importorskip("onnxruntime")
F16, BF16, F32 = TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.FLOAT
RNG = np.random.default_rng(0)


def _rand(*shape: int, scale: float = 0.5) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def block() -> onnx.ModelProto:
    """Conv -> Relu -> flatten -> MatMul -> LayerNorm -> Softmax, plus a side output."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Flatten", ["r"], ["f"], axis=1, name="flatten"),
        helper.make_node("MatMul", ["f", "m"], ["mm"], name="matmul"),
        helper.make_node("Add", ["mm", "bias"], ["a"], name="add"),
        helper.make_node("LayerNormalization", ["a", "gamma", "beta"], ["ln"], axis=-1, name="ln"),
        helper.make_node("Softmax", ["ln"], ["y"], axis=-1, name="softmax"),
        helper.make_node("Mul", ["a", "gamma"], ["side"], name="side"),  # gamma: read fp32 and fp16
    ]
    inits = [const("w", _rand(4, 3, 3, 3)), const("m", _rand(4 * 8 * 8, 16, scale=0.1)),
             const("bias", _rand(16)), const("gamma", _rand(16) + 1), const("beta", _rand(16))]
    return model(nodes, [vi("x", ["N", 3, 8, 8])], [vi("y", ["N", 16]), vi("a", ["N", 16]), vi("side", ["N", 16])],
                 inits)


def feeds(batch: int = 2) -> dict[str, np.ndarray]:
    return {"x": _rand(batch, 3, 8, 8, scale=1.0)}


def _types(m: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(m)
    g = inferred.graph
    out = {v.name: v.type.tensor_type.elem_type for v in (*g.input, *g.value_info, *g.output)}
    out.update({t.name: t.data_type for t in g.initializer})
    return out


def test_fp16_keeps_io_lowers_the_rest_and_matches_onnxruntime() -> None:
    original = block()
    result = apply_precision(original, "fp16")
    out = result.model
    assert result.modified and result.precision == "fp16"
    assert [(v.name, v.type.tensor_type.elem_type) for v in (*out.graph.input, *out.graph.output)] == \
        [(v.name, v.type.tensor_type.elem_type) for v in (*original.graph.input, *original.graph.output)]
    types = _types(out)
    assert types["w"] == F16 and types["m"] == F16 and types["c"] == F16  # weights and activations lowered
    assert set(result.kept) == {"ln", "softmax"}
    ln = next(n for n in out.graph.node if n.name == "ln")
    assert all(types[i] == F32 for i in ln.input)  # the kept op reads float32 (its weights too)
    assert any(t.name.startswith("gamma_") and t.data_type == F16 for t in out.graph.initializer)
    assert types["gamma"] == F32  # shared initializer: float32 original kept beside an fp16 copy
    assert result.casts >= 3 and result.lowered == 6
    scores = compare_outputs(original, out, feeds(), atol=1e-2, rtol=1e-2)
    assert set(scores) == {"y", "a", "side"} and max(scores.values()) <= 1.0
    assert original.graph.initializer[0].data_type == F32  # the argument is untouched


def test_fp16_error_is_real_but_within_tolerance() -> None:
    """Not vacuous: fp16 differs from fp32, beyond fp32 round-off, and stays within 1e-2."""
    original = block()
    with pytest.raises(PrecisionError, match="beyond tolerance"):
        compare_outputs(original, apply_precision(original, "fp16").model, feeds(), atol=1e-7, rtol=1e-7)


def test_custom_keep_list() -> None:
    original = block()
    result = apply_precision(original, "fp16", keep_fp32_ops=("Conv", "Softmax"))
    types = _types(result.model)
    assert types["w"] == F32 and types["c"] == F32  # Conv kept: its output stays float32
    assert types["r"] == F16  # Relu lowered after it
    assert {"conv", "softmax"} <= set(result.kept) and "ln" not in result.kept
    compare_outputs(original, result.model, feeds(), atol=2e-2, rtol=2e-2)


def test_a_kept_op_type_onnx_does_not_have_is_refused_at_every_door(tmp_path, capsys) -> None:
    """``--keep-fp32-ops Lstm`` kept nothing (op types are matched exactly) and, replacing the
    default list, dropped the normalisations and softmaxes from it without a word."""
    from trt_backend.cli import main
    from trt_backend.session.options import SessionOptions

    message = "unknown op type 'Lstm' kept in fp32: not an ONNX operator (did you mean 'LSTM'?)"
    with pytest.raises(OptionsError, match=re.escape(message)):
        SessionOptions(precision="fp16", keep_fp32_ops=("Softmax", "Lstm"))
    with pytest.raises(OptionsError, match=re.escape(message)):
        apply_precision(block(), "fp16", keep_fp32_ops=("Lstm",))
    path = str(tmp_path / "m.onnx")
    onnx.save(block(), path)
    assert main(["build", path, "-o", str(tmp_path / "b"), "--precision", "fp16", "--keep-fp32-ops", "Lstm"]) == 1
    assert capsys.readouterr().err.startswith(f"trt-backend: error: {message}")
    assert not (tmp_path / "b").exists()


def test_default_keep_list_covers_normalisations_softmax_reductions() -> None:
    for op in ("LayerNormalization", "InstanceNormalization", "GroupNormalization", "Softmax", "LogSoftmax",
               "ReduceMean", "ReduceSum"):
        assert op in DEFAULT_KEEP_FP32
    assert "BatchNormalization" not in DEFAULT_KEEP_FP32  # folded into Conv by TensorRT


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_fp32_and_tf32_leave_the_model_alone(precision: str) -> None:
    original = block()
    result = apply_precision(original, precision)
    assert not result.modified and result.model is original


def test_unknown_precision_is_an_options_error() -> None:
    with pytest.raises(OptionsError, match="unknown precision 'int4'"):
        apply_precision(block(), "int4")


def test_constants_casts_and_shape_ops() -> None:
    """Cast(to=float) becomes Cast(to=fp16); Constant and ConstantOfShape values converted;
    Shape reads whatever dtype comes; Resize's float scales input stays float32."""
    nodes = [
        helper.make_node("Cast", ["i"], ["ci"], to=F32, name="cast"),
        helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.array([0.5], np.float32), "k"),
                         name="const"),
        helper.make_node("Mul", ["ci", "k"], ["mk"], name="mul"),
        helper.make_node("Shape", ["mk"], ["s"], name="shape"),
        helper.make_node("ConstantOfShape", ["s"], ["ones"], value=numpy_helper.from_array(np.array([1.0], np.float32)),
                         name="cos"),
        helper.make_node("Add", ["mk", "ones"], ["p"], name="add"),
        helper.make_node("Resize", ["p", "", "scales"], ["y"], mode="nearest", name="resize"),
    ]
    m = model(nodes, [vi("i", [1, 2, 4, 4], TensorProto.INT32)], [vi("y", [1, 2, 8, 8])],
              [const("scales", np.array([1, 1, 2, 2], np.float32))])
    out = apply_precision(m, "fp16").model
    types = _types(out)
    cast = next(n for n in out.graph.node if n.name == "cast")
    assert cast.attribute[0].i == F16 and types["k"] == F16 and types["ones"] == F16
    assert types["scales"] == F32 and types["y"] == F32
    assert sum(n.op_type == "Cast" for n in out.graph.node) == 2  # the model's own + one for the output
    x = RNG.integers(-5, 5, (1, 2, 4, 4)).astype(np.int32)
    compare_outputs(m, out, {"i": x}, atol=1e-3, rtol=1e-3)


def test_fp16_clips_stand_ins_for_infinity_and_keeps_large_weights_fp32(caplog: pytest.LogCaptureFixture) -> None:
    """A mask's -1e30 is clipped to fp16's largest (it stands for -inf); a weight of 1e6 (a trained
    BatchNormalization's variance) keeps its node in fp32: clipped, it would change the result."""
    m = model([helper.make_node("Add", ["x", "mask"], ["a"], name="mask"),
               helper.make_node("Add", ["a", "big"], ["y"], name="add")], [vi("x", [2])], [vi("y", [2])],
              [const("mask", np.array([-1e30, 0.0], np.float32)), const("big", np.array([1e6, -3.0], np.float32))])
    with caplog.at_level(logging.WARNING, logger="trt_backend.engines.precision"):
        result = apply_precision(m, "fp16")
    assert result.clipped == 1 and "clipped" in caplog.text
    inits = {t.name: numpy_helper.to_array(t) for t in result.model.graph.initializer}
    assert inits["mask"].dtype == np.float16 and float(inits["mask"][0]) == -65504.0
    assert inits["big"].dtype == np.float32 and "add" in result.kept and "mask" not in result.kept


def test_a_constant_node_fp16_cannot_hold_keeps_its_reader_fp32() -> None:
    """Paddle2ONNX writes a BatchNormalization's variance as a Constant node (PP-OCRv4's detector:
    9.8e7): that node and the BatchNormalization reading it stay fp32, as an initializer's would;
    clipped to 65504, the normalised values came out 30x too large."""
    import onnxruntime as ort

    var = np.array([9.8e7, 2.0, 1e5, 0.5], np.float32)
    nodes = [helper.make_node("Constant", [], ["var"], value=numpy_helper.from_array(var, "var_value")),
             helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"], name="bn"),
             helper.make_node("Relu", ["bn"], ["y"], name="relu")]
    inits = [const("w", _rand(4, 3, 1, 1)), const("scale", np.ones(4, np.float32)),
             const("bias", np.zeros(4, np.float32)), const("mean", np.zeros(4, np.float32))]
    m = model(nodes, [vi("x", [1, 3, 8, 8])], [vi("y", [1, 4, 8, 8])], inits)
    result = apply_precision(m, "fp16")
    assert "bn" in result.kept and "conv" not in result.kept
    constant = next(n for n in result.model.graph.node if n.op_type == "Constant")
    assert constant.attribute[0].t.data_type == F32 and numpy_helper.to_array(constant.attribute[0].t)[0] == 9.8e7
    x = (_rand(1, 3, 8, 8) * 2000).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(emulation_of(result.model, "fp16").SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.abs(got - want).max() <= 2e-3 * np.abs(want).max()


def test_custom_domain_and_subgraph_nodes_stay_float32() -> None:
    then = helper.make_graph([helper.make_node("Identity", ["a"], ["t"])], "then", [], [vi("t", [2])])
    other = helper.make_graph([helper.make_node("Neg", ["a"], ["e"])], "else", [], [vi("e", [2])])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("If", ["cond"], ["b"], then_branch=then, else_branch=other, name="if"),
        helper.make_node("Sigmoid", ["b"], ["y"], name="sig"),
    ]
    m = model(nodes, [vi("x", [2]), vi("cond", [], TensorProto.BOOL)], [vi("y", [2])])
    result = apply_precision(m, "fp16")
    assert "if" in result.kept and {"relu", "sig"}.isdisjoint(result.kept)
    branch_reads = {i for n in result.model.graph.node if n.op_type == "If"
                    for a in n.attribute for inner in a.g.node for i in inner.input}
    assert branch_reads == {"a_fp32"}  # the branches read 'a' through a cast back to float32
    for cond in (True, False):
        compare_outputs(m, result.model, {"x": _rand(2), "cond": np.array(cond)}, atol=1e-2, rtol=1e-2)


def _widen(m: onnx.ModelProto) -> onnx.ModelProto:
    """bf16 -> float32 everywhere (values kept): runs on ONNX Runtime CPU, which has few bf16 kernels."""
    out = onnx.ModelProto()
    out.CopyFrom(m)
    g = out.graph
    for t in g.initializer:
        if t.data_type == BF16:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
    for v in (*g.value_info, *g.input, *g.output):
        if v.type.tensor_type.elem_type == BF16:
            v.type.tensor_type.elem_type = F32
    for n in g.node:
        for a in n.attribute:
            if n.op_type == "Cast" and a.name == "to" and a.i == BF16:
                a.i = F32
    return out


def test_bf16_upgrades_opset_and_rounds_weights() -> None:
    original = block()
    result = apply_precision(original, "bf16")
    out = result.model
    assert next(o.version for o in out.opset_import if o.domain == "") == 22
    types = _types(out)
    assert types["w"] == BF16 and types["c"] == BF16 and types["y"] == F32
    onnx.checker.check_model(out)
    # wiring check: the same graph with bf16 widened back (weights stay bf16-rounded)
    compare_outputs(original, _widen(out), feeds(), atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("name", ["light_squeezenet", "light_inception_v1"])
def test_light_models_fp16(light_dir: str, name: str) -> None:
    from partitioner import load_model

    m = load_model(os.path.join(light_dir, name + ".onnx")).proto
    result = apply_precision(m, "fp16")
    assert result.lowered > 0.9 * len(m.graph.node)
    x = m.graph.input[0]
    shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
    compare_outputs(m, result.model, {x.name: _rand(*shape, scale=1.0)}, atol=1e-2, rtol=1e-2)


def attribute_forms() -> onnx.ModelProto:
    """Every form a float constant takes: a 0-d initializer, Constant value / value_float /
    value_floats, ConstantOfShape with and without a value, Resize scales from a Constant node,
    and QuantizeLinear at opset 17 (float32 x only)."""
    nodes = [
        helper.make_node("Mul", ["x", "half"], ["m"], name="mul0d"),  # 'half' is a 0-d initializer
        helper.make_node("Constant", [], ["k1"], value_float=0.25, name="cf"),
        helper.make_node("Constant", [], ["k2"], value_floats=[1.0, 2.0, 3.0, 4.0], name="cfs"),
        helper.make_node("Constant", [], ["k3"], value=numpy_helper.from_array(np.array(1.5, np.float32)), name="c0d"),
        helper.make_node("Add", ["m", "k1"], ["a1"], name="add1"),
        helper.make_node("Mul", ["a1", "k2"], ["a2"], name="mul2"),
        helper.make_node("Sub", ["a2", "k3"], ["a3"], name="sub3"),
        helper.make_node("Shape", ["a3"], ["s"], name="shape"),
        helper.make_node("ConstantOfShape", ["s"], ["zeros"], name="cos_default"),
        helper.make_node("ConstantOfShape", ["s"], ["twos"], value=numpy_helper.from_array(np.array([2.0], np.float32)),
                         name="cos_two"),
        helper.make_node("Add", ["a3", "zeros"], ["b1"], name="addz"),
        helper.make_node("Mul", ["b1", "twos"], ["b2"], name="mul_two"),
        helper.make_node("Constant", [], ["scales"], value_floats=[1.0, 1.0, 2.0, 2.0], name="scales_const"),
        helper.make_node("Resize", ["b2", "", "scales"], ["r"], mode="nearest", name="resize"),
        helper.make_node("QuantizeLinear", ["r", "qs", "qz"], ["q"], name="q"),
        helper.make_node("DequantizeLinear", ["q", "qs", "qz"], ["y"], name="dq"),
    ]
    inits = [const("half", np.array(0.5, np.float32)), const("qs", np.array(0.05, np.float32)),
             const("qz", np.array(0, np.int8))]
    return model(nodes, [vi("x", [1, 2, 3, 4])], [vi("y", [1, 2, 6, 8]), vi("b2", [1, 2, 3, 4])], inits)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_every_float_constant_form(precision: str) -> None:
    """Was ``TypeError: 'numpy.float16' object does not support item assignment`` on the 0-d
    initializer (BERT-small, GPT-2, SSDlite)."""
    from trt_backend.engines.emulation import emulation_model

    original = attribute_forms()
    result = apply_precision(original, precision)
    low = F16 if precision == "fp16" else BF16
    types = _types(result.model)
    assert types["half"] == low and types["k1"] == low and types["k2"] == low and types["k3"] == low
    assert types["zeros"] == low and types["twos"] == low  # the default fill too
    assert types["scales"] == F32  # read by Resize as float32 only: not lowered, no cast back
    q = next(n for n in result.model.graph.node if n.name == "q")
    assert types[q.input[0]] == (low if precision == "bf16" else F32)  # opset 17 Q takes float32 only
    cf = next(n for n in result.model.graph.node if n.name == "cf")
    assert [a.name for a in cf.attribute] == ["value"] and cf.attribute[0].t.data_type == low
    emulated = emulation_model(original, precision, DEFAULT_KEEP_FP32).model
    x = _rand(1, 2, 3, 4, scale=2.0)
    scores = compare_outputs(original, emulated, {"x": x}, atol=0.06, rtol=2e-2)
    assert set(scores) == {"y", "b2"}


def test_bf16_emulation_rounds_every_computed_tensor() -> None:
    """bf16 emulated in fp32: the numbers equal numpy's step-by-step bf16 rounding, and ONNX
    Runtime runs it (it has no bf16 kernels for Add/MatMul on CPU)."""
    import ml_dtypes

    from trt_backend.engines.emulation import bf16_as_fp32

    w = _rand(8, 8)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
             helper.make_node("Add", ["mm", "x"], ["a"], name="add"),
             helper.make_node("Transpose", ["a"], ["y"], perm=[1, 0], name="t")]
    original = model(nodes, [vi("x", [4, 8])], [vi("y", [8, 4])], [const("w", w)], opset=22, ir=10)
    emulated = bf16_as_fp32(apply_precision(original, "bf16").model)
    assert not any(t.data_type == BF16 for t in emulated.graph.initializer)
    x = _rand(4, 8, scale=3.0)

    def bf(v: np.ndarray) -> np.ndarray:
        return np.asarray(v, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)

    xb = bf(x)
    expected = bf(bf(xb @ bf(w)) + xb).T
    from trt_backend.ort.threads import inference_session

    got = inference_session(emulated.SerializeToString()).run(None, {"x": x})[0]
    assert np.array_equal(got, expected)
    assert not np.array_equal(got, (x @ w + x).T)  # the rounding is real


def test_emulation_of_a_model_exported_in_fp16_keeps_its_fp16_inputs_and_outputs() -> None:
    """A model whose inputs and outputs are fp16 (exported so): its fp16 emulation computes in
    fp32 inside but takes and gives fp16, and ONNX Runtime runs it on fp16 feeds."""
    from trt_backend.engines.emulation import rounded_in_fp32
    from trt_backend.ort.threads import inference_session

    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    m = model(nodes, [vi("x", ["N", 3, 8, 8], F16)], [vi("y", ["N", 4, 8, 8], F16)],
              [const("w", _rand(4, 3, 3, 3).astype(np.float16))])
    emulated = rounded_in_fp32(apply_precision(m, "fp16").model, F16)
    assert [v.type.tensor_type.elem_type for v in (*emulated.graph.input, *emulated.graph.output)] == [F16, F16]
    x = _rand(2, 3, 8, 8, scale=1.0).astype(np.float16)
    (ours,) = inference_session(emulated.SerializeToString()).run(None, {"x": x})
    (ref,) = inference_session(m.SerializeToString()).run(None, {"x": x})
    assert ours.dtype == np.float16 and ours.shape == (2, 4, 8, 8)
    assert np.abs(ours.astype(np.float32) - ref.astype(np.float32)).max() <= 2e-3 * np.abs(ref).max()


def declared_output_shape_is_wrong() -> onnx.ModelProto:
    """Opset 12: MatMul -> Relu -> Reshape to [dim 0, -1] (rank 2, the target built from Shape,
    Gather, Unsqueeze and Concat), while the graph declares its output [n, 4, 8] (rank 3), as a
    TorchScript export declares [1, seqlen] for a [21, 1, 8210] output: ONNX Runtime warns and
    runs it; inference at opset 22 (what bf16 needs) sees the contradiction."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["a"], name="mm"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "i0"], ["d0"], name="g0", axis=0),
        helper.make_node("Unsqueeze", ["d0"], ["u0"], name="u0", axes=[0]),
        helper.make_node("Concat", ["u0", "minus1"], ["target"], name="cat", axis=0),
        helper.make_node("Reshape", ["r", "target"], ["y"], name="reshape"),
    ]
    inits = [numpy_helper.from_array(_rand(8, 8), "w"), numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
             numpy_helper.from_array(np.array(0, np.int64), "i0")]
    g = helper.make_graph(nodes, "wrong_output_shape", [vi("x", ["n", 4, 8])], [vi("y", ["n", 4, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)])


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_a_declared_output_shape_the_model_does_not_keep_does_not_block_the_transform(precision: str) -> None:
    import onnxruntime as ort

    m = declared_output_shape_is_wrong()
    result = apply_precision(m, precision, DEFAULT_KEEP_FP32)  # (bf16 refused it: "differ in rank: (2) vs (3)")
    assert result.precision == precision and result.lowered >= 2
    x = _rand(3, 4, 8)
    so = ort.SessionOptions()
    so.log_severity_level = 4  # (the declared shape's warning)
    want = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(emulation_of(result.model, precision).SerializeToString(), so,
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == want.shape == (3, 32)
    assert 0 < np.abs(got - want).max() < 0.05 * np.abs(want).max()


def anchor_grid() -> onnx.ModelProto:
    """A detection head's anchor grid as PyTorch exports ``torch.meshgrid`` over ``arange`` of a
    feature map's height and width (Ultralytics' YOLO heads): the dims read by Shape, made floats
    by Cast, Range, + 0.5, Expand to the grid, times the stride, added to the head's outputs."""
    def c(name: str, value: object, dtype: type = np.int64) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(value, dtype), name)

    inits = [c("i2", 2), c("i3", 3), c("zero", 0.0, np.float32), c("one", 1.0, np.float32),
             c("half", 0.5, np.float32), c("stride", 8.0, np.float32), c("col", [-1, 1]), c("row", [1, -1]),
             c("last", [-1]), c("pairs", [-1, 2]), c("rows", [0, 2, -1]), c("from", [0]), c("to", [2]),
             c("ax1", [1]), numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["f"], pads=[1, 1, 1, 1]),
             helper.make_node("Shape", ["f"], ["fs"]),
             helper.make_node("Gather", ["fs", "i2"], ["h"], axis=0),
             helper.make_node("Gather", ["fs", "i3"], ["w_"], axis=0),
             helper.make_node("Cast", ["h"], ["hf"], to=F32, name="cast_h"),
             helper.make_node("Cast", ["w_"], ["wf"], to=F32, name="cast_w"),
             helper.make_node("Range", ["zero", "hf", "one"], ["ry"]),
             helper.make_node("Range", ["zero", "wf", "one"], ["rx"]),
             helper.make_node("Add", ["ry", "half"], ["sy"]), helper.make_node("Add", ["rx", "half"], ["sx"]),
             helper.make_node("Reshape", ["sy", "col"], ["sy_r"]), helper.make_node("Reshape", ["sx", "row"], ["sx_r"]),
             helper.make_node("Shape", ["sy"], ["shy"]), helper.make_node("Shape", ["sx"], ["shx"]),
             helper.make_node("Concat", ["shy", "shx"], ["grid_shape"], axis=0),
             helper.make_node("Expand", ["sy_r", "grid_shape"], ["gy"]),
             helper.make_node("Expand", ["sx_r", "grid_shape"], ["gx"]),
             helper.make_node("Unsqueeze", ["gx", "last"], ["gx1"]),
             helper.make_node("Unsqueeze", ["gy", "last"], ["gy1"]),
             helper.make_node("Concat", ["gx1", "gy1"], ["grid"], axis=-1),
             helper.make_node("Reshape", ["grid", "pairs"], ["points"]),
             helper.make_node("Mul", ["points", "stride"], ["anchors"]),
             helper.make_node("Slice", ["f", "from", "to", "ax1"], ["f2"]),
             helper.make_node("Reshape", ["f2", "rows"], ["f2r"]),
             helper.make_node("Transpose", ["f2r"], ["f2t"], perm=[0, 2, 1]),
             helper.make_node("Add", ["f2t", "anchors"], ["y"])]
    return model(nodes, [vi("x", ["N", 3, "H", "W"])], [vi("y", ["N", "HW", 2])], inits)


@pytest.mark.usefixtures("flavor")
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_dims_made_floats_for_range_stay_float32_and_the_head_builds(precision: str, tmp_path) -> None:
    """A Cast of a dim to float32 that only Range reads was lowered and cast back: inexact past
    2,048 in fp16, and TensorRT's builder refused the grid ("Error during shape inference of
    mul(coordValue, Range_shape_cast_F16)"), so bisection demoted nodes after seven trial builds;
    a YOLO head at dynamic shapes lost all of its 437 nodes to ONNX Runtime that way."""
    import trt_backend

    m = anchor_grid()
    out = apply_precision(m, precision).model
    casts = {n.name: n for n in out.graph.node if n.op_type == "Cast"}
    assert casts["cast_h"].attribute[0].i == F32 and casts["cast_w"].attribute[0].i == F32
    assert not [n for n in out.graph.node if n.op_type == "Cast" and n.input[0] in ("hf", "wf")]  # (no round trip)
    if precision == "fp16":  # (ONNX Runtime's CPU Conv has no bf16 kernel: the emulation's own form runs that)
        x = RNG.standard_normal((2, 3, 16, 24)).astype(np.float32)
        compare_outputs(m, out, {"x": x}, atol=0.05, rtol=0.02)
    path, folder = str(tmp_path / "head.onnx"), str(tmp_path / "built")
    onnx.save(m, path)
    profiles = [{"x": ((1, 3, 8, 8), (1, 3, 32, 32), (2, 3, 64, 64))}]
    manifest = trt_backend.build(path, folder, profiles, trt_backend.SessionOptions(precision=precision))
    assert manifest["demoted"] == [] and [s["backend"] for s in manifest["segments"]] == ["tensorrt"]
    assert manifest["segments"][0]["engine"]


@pytest.mark.parametrize("guard", ["add", "max", "constant node"])
def test_an_epsilon_fp16_flushes_to_zero_keeps_its_reader_and_the_log_fp32(guard) -> None:
    """Audio front-ends guard a log spectrogram with log(x + 1e-10) or log(max(x, 1e-12)): fp16
    rounds such an epsilon to 0 (below half its smallest subnormal, 5.96e-8), and a silent bin's
    log is -inf, a pitch tracker's outputs NaN (basic-pitch, swift-f0, DNSMOS all were). The node
    reading the epsilon and the log it guards stay fp32; the nodes after the log are fp16, and a
    large weight holding values fp16 flushes is converted as TensorRT converts weights."""
    import onnxruntime as ort

    eps = np.array([1e-10], np.float32)
    if guard == "constant node":
        first = [helper.make_node("Constant", [], ["eps"], value=numpy_helper.from_array(eps, "eps_value")),
                 helper.make_node("Add", ["x", "eps"], ["g"], name="guard")]
        inits = []
    else:
        first = [helper.make_node("Add" if guard == "add" else "Max", ["x", "eps"], ["g"], name="guard")]
        inits = [const("eps", eps)]
    tiny_weights = _rand(16, 16) * 1e-9  # a 256-value weight: not an epsilon
    nodes = first + [helper.make_node("Log", ["g"], ["l"], name="log"),
                     helper.make_node("MatMul", ["l", "w"], ["m"], name="matmul"),
                     helper.make_node("Mul", ["m", "half"], ["y"], name="scale")]
    m = model(nodes, [vi("x", [2, 16])], [vi("y", [2, 16])],
              inits + [const("w", _rand(16, 16) + tiny_weights), const("half", np.array([0.5], np.float32))])
    result = apply_precision(m, "fp16")
    assert {"guard", "log"} <= set(result.kept) and {"matmul", "scale"}.isdisjoint(result.kept)
    x = np.abs(_rand(2, 16))
    x[:, ::3] = 0.0  # silent bins
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(emulation_of(result.model, "fp16").SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.isfinite(got).all() and np.abs(got - want).max() <= 1e-2 * np.abs(want).max()
    bf16 = apply_precision(m, "bf16")  # bf16 has fp32's range: nothing to keep
    assert {"guard", "log"}.isdisjoint(bf16.kept)


def test_a_node_the_builder_refuses_only_in_bf16_is_built_in_fp32_not_sent_to_onnx_runtime(tmp_path, flavor) -> None:
    """TensorRT-RTX 1.7 builds a ConvTranspose in fp32 and fp16 but not in bf16 (Myelin: "Could
    not infer output types ... deconv"): the build demoted it to ONNX Runtime, cutting a U-Net's
    one segment into three. The builder's refusal is now met as the parser's is: that node is
    kept fp32 and the segment built again, one engine, the node listed as kept."""
    from trt_backend.artifacts.write import build
    from trt_backend.session.options import SessionOptions
    from trt_backend.session.session import Session

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "wc"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2], name="down"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("ConvTranspose", ["r", "w", "b"], ["u"], strides=[2, 2], name="up"),
             helper.make_node("Relu", ["u"], ["y"], name="out")]
    m = model(nodes, [vi("x", ["N", 1, 16, 16])], [vi("y", ["N", 16, 16, 16])],
              [const("wc", (rng.standard_normal((32, 1, 3, 3)) * 0.2).astype(np.float32)),
               const("w", (rng.standard_normal((32, 16, 2, 2)) * 0.2).astype(np.float32)),
               const("b", np.zeros(16, np.float32))])
    path = str(tmp_path / "deconv.onnx")
    onnx.save(m, path)
    manifest = build(path, str(tmp_path / "b"), [{"x": ((4, 1, 16, 16),) * 3}], SessionOptions(precision="bf16"))
    assert [(s["backend"], s.get("precision"), s.get("pinned")) for s in manifest["segments"]] == \
        [("tensorrt", "bf16", ["up"])]
    assert not manifest.get("demoted")
    built = onnx.load(str(tmp_path / "b" / "segment_0.onnx"))
    types = {t.name: t.data_type for t in built.graph.initializer}
    assert types["w"] == TensorProto.FLOAT and types["wc"] == TensorProto.BFLOAT16
    x = rng.random((4, 1, 16, 16), dtype=np.float32)
    want = Session(m, [{"x": ((4, 1, 16, 16),) * 3}], SessionOptions(flavor="none")).run(None, {"x": x})[0]
    got = Session.load(str(tmp_path / "b")).run(None, {"x": x})[0]
    assert np.abs(got - want).max() <= 2e-2 * np.abs(want).max()

"""Activations a reduced precision cannot hold, on real emulated runs: a square of values near 500
is finite in fp32 and bf16 and inf in fp16. ``compare`` reports the tensor where it starts (a
note in its report), ``run`` warns once naming it; where nothing leaves the range, nothing is said."""
from __future__ import annotations

import logging
from typing import Any
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from trt_backend.accuracy.compare import compare
from trt_backend.accuracy.overflow import range_overflows
from trt_backend.cli import main
from trt_backend.runners.ort import EmulatedTensorRTRunner
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

pytestmark = pytest.mark.usefixtures("oracle")  # needs a TensorRT parser

PROFILE = [{"x": ((1, 16), (1, 16), (1, 16))}]
FEEDS: dict[str, Any] = {"x": np.full((1, 16), 0.9, np.float32)}  # Any: numpy's stub reads ** as allow_pickle too


def squares() -> onnx.ModelProto:
    """x [1,16] -> MatMul by 30s (432 at x = 0.9) -> 'square' a*a (1.9e5: past fp16's 65504)
    -> times 1e-4 -> Relu: every value finite in fp32, inf after 'square' in fp16."""
    w = nh.from_array(np.full((16, 16), 30.0, np.float32), "w")
    k = nh.from_array(np.array(1e-4, np.float32), "k")
    g = h.make_graph(
        [h.make_node("MatMul", ["x", "w"], ["a"], name="project"),
         h.make_node("Mul", ["a", "a"], ["b"], name="square"),
         h.make_node("Mul", ["b", "k"], ["c"], name="scale"),
         h.make_node("Relu", ["c"], ["y"], name="relu")],
        "squares", [h.make_tensor_value_info("x", T.FLOAT, [1, 16])],
        [h.make_tensor_value_info("y", T.FLOAT, [1, 16])], [w, k])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def test_compare_names_the_tensor_fp16_cannot_hold() -> None:
    report = compare(squares(), profiles=PROFILE, session_options=SessionOptions(emulate=True, precision="fp16"),
                     feeds=[FEEDS])
    assert not report.passed
    notes = [n for n in report.notes if "leaves fp16's range" in n]
    assert len(notes) == 1, report.notes
    assert "tensor 'b' (node 'square', Mul) leaves fp16's range" in notes[0]
    assert "16 of 16 element(s) are inf/nan" in notes[0] and "largest |fp32| 1.866e+05" in notes[0]


def test_overflow_found_where_fp32_is_finite() -> None:
    sess = Session(squares(), PROFILE, SessionOptions(emulate=True, precision="fp16"))
    try:
        found = range_overflows(sess, FEEDS)
        assert [(o.segment, o.precision, o.tensor, o.node, o.op, o.count) for o in found] == \
            [(0, "fp16", "b", "square", "Mul", 16)]
        assert found[0].fp32_max == pytest.approx(432.0 ** 2, rel=1e-3)
    finally:
        sess.close()


def test_bf16_and_fp32_say_nothing() -> None:
    for precision in ("bf16", "fp32"):
        report = compare(squares(), profiles=PROFILE, session_options=SessionOptions(emulate=True, precision=precision),
                         feeds=[FEEDS], atol=1.0, rtol=0.05)
        assert report.passed, precision
        assert not [n for n in report.notes if "range" in n], report.notes


def test_run_warns_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = tmp_path / "squares.onnx"
    onnx.save(squares(), str(model))
    np.savez(tmp_path / "in.npz", **FEEDS)
    args = ["run", str(model), "--shapes", "x:1x16", "--emulate", "--inputs", str(tmp_path / "in.npz")]
    with caplog.at_level(logging.WARNING):
        assert main([*args, "--precision", "fp16"]) == 0
    said = [r.getMessage() for r in caplog.records if "range" in r.getMessage()]
    assert len(said) == 1 and "segment 0 (fp16): tensor 'b' (node 'square', Mul) leaves fp16's range" in said[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert main(args) == 0
    assert not [r for r in caplog.records if "range" in r.getMessage()]


def test_a_reduced_build_with_real_data_warns_where_it_leaves_the_range(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    """A build in fp16 (or int8, whose remainder is fp16) said nothing of an activation fp16 cannot
    hold (magika: a sum of squares of 1.7e5 cast to fp16 made every file the same class); with real
    data at hand (--inputs, or the calibration data) it warns as run and compare do. Without any,
    it cannot tell, and says nothing."""
    model = tmp_path / "squares.onnx"
    onnx.save(squares(), str(model))
    np.savez(tmp_path / "in.npz", **FEEDS)
    (tmp_path / "cal").mkdir()
    np.savez(tmp_path / "cal" / "0.npz", x=np.full((4, 16), 0.9, np.float32))  # four samples stacked
    shapes = ["--shapes", "x:1x16", "-q"]
    for extra in (["--precision", "fp16", "--inputs", str(tmp_path / "in.npz")],
                  ["--precision", "int8", "--calibration-data", str(tmp_path / "cal")]):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert main(["build", str(model), "-o", str(tmp_path / "b"), *shapes, *extra]) == 0
        said = [r.getMessage() for r in caplog.records if "range" in r.getMessage()]
        assert len(said) == 1 and "leaves fp16's range" in said[0] and "(node 'square', Mul)" in said[0], extra
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert main(["build", str(model), "-o", str(tmp_path / "b"), *shapes, "--precision", "fp16"]) == 0
    assert not [r for r in caplog.records if "range" in r.getMessage()]
    # a model of a fixed batch of 4: the calibration sample is taken at the profile's batch (a
    # sample of 1 row failed its run, and the check was skipped without a word)
    four = squares()
    four.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 4
    four.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 4
    onnx.save(four, str(tmp_path / "four.onnx"))
    np.savez(tmp_path / "cal" / "0.npz", x=np.full((8, 16), 0.9, np.float32))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert main(["build", str(tmp_path / "four.onnx"), "-o", str(tmp_path / "b4"), "--shapes", "x:4x16", "-q",
                     "--precision", "int8", "--calibration-data", str(tmp_path / "cal")]) == 0
    assert [r for r in caplog.records if "leaves fp16's range" in r.getMessage()], caplog.text


def paddle_batchnorm() -> onnx.ModelProto:
    """x [1,4,8,8] -> Conv -> BatchNormalization whose variance is a Constant node of 1e7..9.8e7
    (as Paddle2ONNX writes a trained one) -> Relu. The fp16 transform keeps that Constant and its
    BatchNormalization in fp32; every other value stays small."""
    rng = np.random.default_rng(0)
    conv = nh.from_array((rng.standard_normal((4, 4, 3, 3)) * 0.1).astype(np.float32), "w")
    scale, bias, mean = (nh.from_array(v.astype(np.float32), n) for v, n in
                         ((np.full(4, 2000.0), "scale"), (np.zeros(4), "bias"), (np.zeros(4), "mean")))
    variance = h.make_node("Constant", [], ["var"], value=nh.from_array(
        np.array([1.05e7, 3e7, 6e7, 9.79e7], np.float32)))
    g = h.make_graph(
        [h.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]), variance,
         h.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"], name="bn"),
         h.make_node("Relu", ["b"], ["y"], name="relu")],
        "paddle_bn", [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 8, 8])],
        [h.make_tensor_value_info("y", T.FLOAT, [1, 4, 8, 8])], [conv, scale, bias, mean])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def test_a_large_constant_the_build_keeps_in_fp32_is_no_overflow() -> None:
    """The range check named the variance ('24 of 24 element(s) ... clamped') although the built
    form holds it in fp32, where 9.8e7 is an ordinary value; it names nothing now, and the
    emulated fp16 output is close to fp32's."""
    profile = [{"x": ((1, 4, 8, 8), (1, 4, 8, 8), (1, 4, 8, 8))}]
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)}
    sess = Session(paddle_batchnorm(), profile, SessionOptions(emulate=True, precision="fp16"))
    try:
        (runner,) = [r for r in sess.runners if r.segment.id == 0]
        assert isinstance(runner, EmulatedTensorRTRunner)
        held = {n.output[0]: n for n in runner.model.graph.node if n.op_type == "Constant"}
        assert nh.to_array(held["var"].attribute[0].t).dtype == np.float32  # kept fp32 by the transform
        assert range_overflows(sess, feeds) == []
    finally:
        sess.close()
    report = compare(paddle_batchnorm(), profiles=profile, feeds=[feeds],
                     session_options=SessionOptions(emulate=True, precision="fp16"), atol=1e-2, rtol=1e-2)
    assert report.passed and not [n for n in report.notes if "range" in n], report.notes


def masked_attention() -> onnx.ModelProto:
    """One attention head over x [1, 8, 16] whose keys m [1, 8] masks (0: masked) by adding
    float32's minimum to their scores, as transformers' exports do: Where(m == 0, min, 0)."""
    rng = np.random.default_rng(0)
    weights = [nh.from_array(rng.standard_normal((16, 16)).astype(np.float32) * 0.1, n) for n in ("wq", "wk")]
    consts = [nh.from_array(np.array(np.finfo(np.float32).min, np.float32), "low"),
              nh.from_array(np.array(0.0, np.float32), "zero"), nh.from_array(np.array([1], np.int64), "axes")]
    g = h.make_graph(
        [h.make_node("MatMul", ["x", "wq"], ["q"], name="q"), h.make_node("MatMul", ["x", "wk"], ["k"], name="k"),
         h.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1], name="kt"),
         h.make_node("MatMul", ["q", "kt"], ["scores"], name="scores"),
         h.make_node("Equal", ["m", "zero"], ["masked"], name="masked"),
         h.make_node("Where", ["masked", "low", "zero"], ["bias"], name="bias"),
         h.make_node("Unsqueeze", ["bias", "axes"], ["bias3"], name="bias3"),
         h.make_node("Add", ["scores", "bias3"], ["s"], name="add_mask"),
         h.make_node("Softmax", ["s"], ["p"], axis=-1, name="softmax"),
         h.make_node("MatMul", ["p", "x"], ["y"], name="attend")],
        "masked_attention", [h.make_tensor_value_info("x", T.FLOAT, [1, 8, 16]),
                             h.make_tensor_value_info("m", T.FLOAT, [1, 8])],
        [h.make_tensor_value_info("y", T.FLOAT, [1, 8, 16])], weights + consts)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("keys", ["some masked", "all masked"])
def test_a_mask_of_float32s_minimum_is_no_bf16_overflow_until_it_harms(keys) -> None:
    """A mask computed on ONNX Runtime (the Where kept there) reaches a bf16 segment holding
    float32's minimum, which rounds to -inf in bf16, as a mask means: ``compare`` noted an
    overflow ("leaves bf16's range") on outputs within tolerance, and advised ``--precision
    auto``, which judges by the outputs and had kept that segment in bf16. Where some keys are
    masked nothing is said now; where all are, a softmax of -inf alone is nan where fp32's is
    uniform, and that is named: the softmax, its input reaching float32's minimum."""
    from partitioner import PartitionOptions

    profile = [{"x": ((1, 8, 16),) * 3, "m": ((1, 8),) * 3}]
    m = np.array([[1, 1, 1, 1, 1, 0, 0, 0]], np.float32) if keys == "some masked" else np.zeros((1, 8), np.float32)
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 8, 16)).astype(np.float32), "m": m}
    options = SessionOptions(emulate=True, precision="bf16",
                             partition=PartitionOptions(exclude_ops=("Where",), min_segment_size=1))
    report = compare(masked_attention(), profiles=profile, session_options=options, feeds=[feeds], atol=0.05,
                     rtol=0.05)
    notes = [n for n in report.notes if "range" in n]
    assert report.precision == "bf16"  # (both TensorRT segments, the one the mask reaches too)
    if keys == "some masked":
        assert report.passed and not notes, report.notes
    else:
        assert not report.passed and len(notes) == 1, report.notes
        assert "tensor 'p' (node 'softmax', Softmax) leaves bf16's range" in notes[0]
        assert "its input 's' reaches 3.403e+38 in fp32" in notes[0]


def test_a_log_of_values_fp16_flushes_to_zero_is_named_as_such_not_as_an_overflow() -> None:
    """A power spectrum of quiet audio holds values below fp16's smallest subnormal: fp16 makes
    them 0 and the log after them -inf, while fp32's log is about -20, well within fp16's range.
    The note said the log "leaves fp16's range (largest finite 65504)", which pointed the wrong
    way; it names the input that fp16 flushed to zero."""
    k = nh.from_array(np.array(1e-6, np.float32), "k")  # (fp16 holds 1e-6 as a subnormal: no epsilon)
    g = h.make_graph([h.make_node("Mul", ["x", "k"], ["p"], name="power"),
                      h.make_node("Log", ["p"], ["l"], name="log"),
                      h.make_node("Neg", ["l"], ["y"], name="neg")],
                     "quiet", [h.make_tensor_value_info("x", T.FLOAT, [1, 16])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 16])], [k])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    feeds = {"x": np.linspace(1e-3, 1e-2, 16, dtype=np.float32)[None]}  # power 1e-9..1e-8: 0 in fp16
    report = compare(m, profiles=PROFILE, session_options=SessionOptions(emulate=True, precision="fp16"),
                     feeds=[feeds])
    notes = [n for n in report.notes if "tensor 'l'" in n]
    assert not report.passed and len(notes) == 1, report.notes
    assert "tensor 'l' (node 'log', Log) is inf/nan or clamped in 16 of 16 element(s) in fp16 where fp32 holds " \
           "finite values within fp16's range (largest |fp32| 20.72)" in notes[0]
    assert "its input 'p' is 0 in fp16 in 16 element(s) where fp32 holds values down to 1e-09 (fp16 flushes " \
           "magnitudes below 5.96e-08 to 0)" in notes[0] and "65504" not in notes[0]

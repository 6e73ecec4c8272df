"""int8 through calibrated Q/DQ on a small CNN cut in three by a Resize TensorRT refuses: the
TensorRT segments get Q/DQ from ONNX Runtime's static quantizer in the form TensorRT takes (every
Q/DQ node of a quantized segment is accepted by a real TensorRT-RTX parse, which keeps the segment
whole), the ONNX Runtime segment stays float, an RTX ahead-of-time build of the int8 segments
succeeds, emulation measures int8's error, the engine cache key follows the data's bytes, and bad
calibration data is one clear error naming the input."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import helper as h
from onnx import numpy_helper as nh

from partitioner import PartitionOptions, plan_model
from tests.helpers import vi
from tests.support.graphs import cnn
from trt_backend.accuracy.compare import compare
from trt_backend.artifacts.write import build as build_folder_build
from trt_backend.engines.builder import BuildOptions
from trt_backend.engines.calibration import InputSpec, load_calibration
from trt_backend.engines.quantize import QDQ_OPS, SegmentQuantizer
from trt_backend.errors import CalibrationDataError
from trt_backend.planning import load_normalized as load
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

PROFILE = [{"x": ((1, 3, 16, 16), (2, 3, 16, 16), (4, 3, 16, 16))}]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("int8")
    paths = {"model": str(folder / "cnn.onnx"), "data": str(folder / "cal.npz")}
    onnx.save(cnn(), paths["model"])
    np.savez(paths["data"], x=np.random.default_rng(1).random((32, 3, 16, 16), dtype=np.float32))
    return paths


def int8_options(data: str, **kw) -> SessionOptions:
    return SessionOptions(emulate=True, precision="int8", calibration_data=data, **kw)


def test_qdq_lands_in_tensorrt_segments(files, oracle) -> None:
    sess = Session(files["model"], PROFILE, int8_options(files["data"]))
    assert [s.backend for s in sess.plan.segments] == ["tensorrt", "onnxruntime", "tensorrt"]
    quantizer = sess.quantizer()
    assert len(quantizer.data.batches) == 16  # 32 samples in batches of the opt batch, 2
    for seg in sess.plan.tensorrt_segments():
        quantized = quantizer(sess.plan.extract(seg.id))
        qdq = [n for n in quantized.graph.node if n.op_type in QDQ_OPS]
        convs = [n for n in quantized.graph.node if n.op_type in ("Conv", "Gemm")]
        assert len(qdq) == 3 * len(convs)  # Q+DQ on the activation, DQ on the int8 weight of each compute op
        readers = {i: n.op_type for n in quantized.graph.node for i in n.input}
        dq_outputs = [n.output[0] for n in qdq if n.op_type == "DequantizeLinear"]
        assert {readers[o] for o in dq_outputs} <= {"Conv", "Gemm"}  # Q/DQ only in front of compute ops
        zero_points = [nh.to_array(t) for t in quantized.graph.initializer if t.name.endswith("zero_point")]
        assert zero_points and all(z.dtype == np.int8 and not z.any() for z in zero_points)  # symmetric
        assert not any(n.op_type == "DequantizeLinear" and n.input[0].startswith("b") for n in quantized.graph.node)
        # int8 with fp16 for the rest: Q/DQ at opset 19 with fp16 scales, every float tensor fp16
        assert quantized.opset_import[0].version >= 19
        scales = [t for t in quantized.graph.initializer if t.name.endswith("_scale")]
        assert scales and all(t.data_type == onnx.TensorProto.FLOAT16 for t in scales)
        inferred = onnx.shape_inference.infer_shapes(quantized)
        types = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
        made = [o for n in quantized.graph.node if n.op_type in ("Conv", "Relu", "Gemm", "DequantizeLinear")
                for o in n.output]
        assert made and {types[o] for o in made if o in types} == {onnx.TensorProto.FLOAT16}
        replanned = plan_model(load(quantized), oracle)  # a real TensorRT-RTX parse of the int8 segment
        assert [s.backend for s in replanned.segments] == ["tensorrt"]
        assert all(n.verdict == "tensorrt" for n in replanned.nodes), [
            (n.name, n.verdict) for n in replanned.nodes if n.verdict != "tensorrt"]
    ort_seg = next(r for r in sess.runners if r.segment.backend == "onnxruntime")
    assert sess.emulated_precisions == {0: "int8", 2: "int8"} and ort_seg.executor == "onnxruntime"


def test_rtx_builds_the_int8_segments(files, flavor, tmp_path, caplog) -> None:
    import logging

    from trt_backend.engines.builder import BuildOptions

    out = str(tmp_path / "build")
    with caplog.at_level(logging.DEBUG, logger="trt_backend.tensorrt"):
        manifest = build_folder_build(files["model"], out, PROFILE,
                                      SessionOptions(build=BuildOptions(precision="int8",
                                                                        calibration_data=files["data"])))
    trt = [s for s in manifest["segments"] if s["backend"] == "tensorrt"]
    assert len(trt) == 2 and all(s["engine_bytes"] > 1000 and s["precision"] == "int8" for s in trt)
    assert not manifest["demoted"] and manifest["build_options"]["calibration"]["method"] == "minmax"
    # TensorRT-RTX's notice that it keeps the fp16 Q/DQ scales as fp32 is expected: not a warning
    notices = [r for r in caplog.records if "scales to fp32" in r.getMessage()]
    assert notices and all(r.levelno == logging.DEBUG for r in notices)


def test_emulated_int8_error_is_measured(files) -> None:
    model = files["model"]
    fp32 = compare(model, profiles=PROFILE, session_options=SessionOptions(emulate=True), atol=1e-6, rtol=1e-6)
    report = compare(model, profiles=PROFILE, session_options=int8_options(files["data"]), localize="always",
                     atol=1e-6, rtol=1e-6)
    assert fp32.passed and not report.passed and report.precision == "int8"
    err = report.outputs[0].error.max_abs_error
    scale = float(np.abs(Session(model, PROFILE, SessionOptions(emulate=True)).run(
        None, {"x": np.random.default_rng(0).random((2, 3, 16, 16), dtype=np.float32)})[0]).max())
    assert 1e-4 < err < 0.1 * scale, (err, scale)  # int8's error, not a wreck
    assert report.segments is not None
    assert [s.precision for s in report.segments] == ["int8", "fp32", "int8"]
    assert report.segments[1].own_error < 1e-6  # the ONNX Runtime segment stays float


def test_methods_and_the_cache_key(files, tmp_path) -> None:
    a = BuildOptions(precision="int8", calibration_data=files["data"]).key_fields()
    b = BuildOptions(precision="int8", calibration_data=files["data"], calibration_method="percentile").key_fields()
    assert a["calibration"]["sha256"] == b["calibration"]["sha256"] and a != b
    other = str(tmp_path / "other.npz")
    np.savez(other, x=np.random.default_rng(2).random((8, 3, 16, 16), dtype=np.float32))
    c = BuildOptions(precision="int8", calibration_data=other).key_fields()
    assert c["calibration"]["sha256"] != a["calibration"]["sha256"]
    assert "calibration" not in BuildOptions(precision="fp16").key_fields()
    sess = Session(files["model"], PROFILE, int8_options(files["data"], calibration_method="percentile"))
    segment = sess.plan.extract(sess.plan.tensorrt_segments()[0].id)
    # (the scales as calibrated, before the fp16 remainder rounds them: the two differ by less than fp16 shows)
    percentile = sess.quantizer()._quantize(segment)
    minmax = SegmentQuantizer(sess.model, files["data"], "minmax", {"x": 2})._quantize(segment)

    def scales(m: onnx.ModelProto) -> dict[str, float]:
        return {t.name: float(nh.to_array(t).max()) for t in m.graph.initializer if t.name.endswith("_scale")}

    assert scales(percentile).keys() == scales(minmax).keys()
    assert scales(percentile)["x_scale"] < scales(minmax)["x_scale"]  # the 99.999th percentile cuts the range
    assert scales(percentile)["w0_scale"] == scales(minmax)["w0_scale"]  # weights: their own max either way


def test_models_with_qdq_keep_theirs(files) -> None:
    sess = Session(files["model"], PROFILE, int8_options(files["data"]))
    quantizer = sess.quantizer()
    once = quantizer(sess.plan.extract(0))
    assert quantizer(once) is once  # no double quantization


SPEC = [InputSpec("x", np.dtype(np.float32), (None, 3, 16, 16))]


@pytest.mark.parametrize("arrays, message", [
    ({"image": np.zeros((4, 3, 16, 16), np.float32)}, "'image' name no model input; the model's inputs are: x"),
    ({"x": np.zeros((4, 3, 16, 16), np.float64)}, "input 'x' is float64, the model takes float32"),
    ({"x": np.zeros((4, 3, 8, 8), np.float32)},
     r"input 'x': a sample has shape \(3, 8, 8\), the model takes \[\?, 3, 16, 16\]"),
    ({"x": np.zeros((4, 16, 16), np.float32)}, r"input 'x' has shape \(4, 16, 16\); the model takes"),
    ({"x": np.zeros((0, 3, 16, 16), np.float32)}, "input 'x' holds no samples"),
    ({"x": np.full((2, 3, 16, 16), np.nan, np.float32)}, "input 'x' holds 1536 NaN/inf value"),
    ({}, "holds no arrays"),
])
def test_bad_calibration_data_is_one_clear_error(tmp_path, arrays, message) -> None:
    path = str(tmp_path / "bad.npz")
    np.savez(path, **arrays)
    with pytest.raises(CalibrationDataError, match=message) as e:
        load_calibration(path, SPEC)
    assert path in str(e.value)


def test_missing_unreadable_and_random_data(tmp_path, caplog) -> None:
    with pytest.raises(CalibrationDataError, match="int8 needs calibration data: give --calibration-data"):
        BuildOptions(precision="int8")
    with pytest.raises(CalibrationDataError, match="no such file or folder"):
        BuildOptions(precision="int8", calibration_data=str(tmp_path / "none.npz")).key_fields()
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    with pytest.raises(CalibrationDataError, match="not an .npz file; give an .npz of arrays by input name"):
        load_calibration(str(junk), SPEC)  # (what --inputs says of it: numpy's words spoke of pickled data)
    np.save(tmp_path / "one.npy", np.zeros(3, np.float32))
    with pytest.raises(CalibrationDataError, match="a single .npy array, which names no input"):
        load_calibration(str(tmp_path / "one.npy"), SPEC)
    broken = tmp_path / "broken.npz"
    broken.write_bytes(b"PK\x03\x04 but cut short")
    with pytest.raises(CalibrationDataError, match="not a readable .npz"):
        load_calibration(str(broken), SPEC)
    with pytest.raises(CalibrationDataError, match="holds no .npz file"):
        load_calibration(_empty(tmp_path), SPEC)
    data = load_calibration("random", SPEC, {"x": 2})
    assert data.random and len(data.batches) == 8 and data.batches[0]["x"].shape == (2, 3, 16, 16)
    assert "smoke test" in caplog.text


def _empty(tmp_path) -> str:
    folder = tmp_path / "empty"
    folder.mkdir()
    return str(folder)


def test_a_folder_of_files_and_unbatched_inputs(tmp_path) -> None:
    for k in range(2):
        np.savez(tmp_path / f"part{k}.npz", x=np.ones((3, 3, 16, 16), np.float32) * k,
                 s=np.arange(3, dtype=np.int64) + 3 * k)
    spec = [*SPEC, InputSpec("s", np.dtype(np.int64), ())]  # a scalar input: one sample per entry
    data = load_calibration(str(tmp_path), spec, {"x": 1})
    assert len(data.batches) == 6 and [int(b["s"]) for b in data.batches] == list(range(6))
    assert data.batches[4]["x"].shape == (1, 3, 16, 16) and float(data.batches[4]["x"].max()) == 1.0
    os.remove(tmp_path / "part1.npz")
    np.savez(tmp_path / "part1.npz", x=np.ones((3, 3, 16, 16), np.float32), s=np.arange(2, dtype=np.int64))
    with pytest.raises(CalibrationDataError, match="different numbers of batches"):
        load_calibration(str(tmp_path), spec, {"x": 1})


def test_scales_fp16_cannot_hold_keep_their_qdq_in_fp32(tmp_path, oracle) -> None:
    """Activations of ~1e-6 give scales below fp16's normal range: those Q/DQ nodes stay fp32
    (casts around them), the rest of the segment is fp16, TensorRT-RTX takes every node, and
    the emulated int8 output is finite and close to fp32."""
    from trt_backend.engines.quantize import fp32_scaled_qdq

    model, data = str(tmp_path / "cnn.onnx"), str(tmp_path / "tiny.npz")
    onnx.save(cnn(), model)
    np.savez(data, x=(np.random.default_rng(1).random((8, 3, 16, 16)) * 1e-6).astype(np.float32))
    sess = Session(model, PROFILE, int8_options(data))
    quantized = sess.quantizer()(sess.plan.extract(0))
    kept = set(fp32_scaled_qdq(quantized))
    assert {"x_QuantizeLinear", "x_DequantizeLinear"} <= kept
    scales = {t.name: t.data_type for t in quantized.graph.initializer if t.name.endswith("_scale")}
    # conv0's weight scale meets x's in conv0: one dtype for both; conv1 keeps fp16 scales
    assert scales["x_scale"] == scales["w0_scale"] == onnx.TensorProto.FLOAT
    assert scales["w1_scale"] == onnx.TensorProto.FLOAT16
    assert any(n.op_type == "Cast" for n in quantized.graph.node)
    replanned = plan_model(load(quantized), oracle)
    assert all(n.verdict == "tensorrt" for n in replanned.nodes)
    x = (np.random.default_rng(4).random((2, 3, 16, 16)) * 1e-6).astype(np.float32)
    ours = sess.run(None, {"x": x})[0]
    ref = Session(model, PROFILE, SessionOptions(emulate=True)).run(None, {"x": x})[0]
    assert np.isfinite(ours).all() and np.abs(ours - ref).max() < 0.05 * np.abs(ref).max() + 1e-3


def test_a_model_that_cannot_run_on_its_calibration_data_is_named(tmp_path, capsys) -> None:
    """x [N, k] reshaped to [N, 4, 2]: calibration samples of k = 6 lie within the profiles
    (k from 6 to 8) but cannot run it; that is one CalibrationDataError naming the data, its
    shapes and ONNX Runtime's reason, and the CLI prints it in one line. Random data takes the
    profile's opt shapes, so it runs."""
    from trt_backend.cli import main

    nodes = [h.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
             h.make_node("MatMul", ["r", "w"], ["y"], name="mm")]
    inits = [nh.from_array(np.array([0, 4, 2], np.int64), "shape"),
             nh.from_array(np.random.default_rng(0).standard_normal((2, 2)).astype(np.float32), "w")]
    m = h.make_model(h.make_graph(nodes, "reshape", [vi("x", ["N", "k"])], [vi("y", ["N", 4, 2])], inits),
                     opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    path, data = str(tmp_path / "reshape.onnx"), str(tmp_path / "six.npz")
    onnx.save(m, path)
    np.savez(data, x=np.ones((4, 6), np.float32))
    profiles = [{"x": ((1, 6), (2, 8), (4, 8))}]
    with pytest.raises(CalibrationDataError,
                       match=r"does not run on calibration data '.*six.npz', batch 0 \(x \(2, 6\)\)"
                                                   r": .*Reshape"):
        Session(path, profiles, int8_options(data))  # (emulation quantizes)
    assert Session(path, profiles, int8_options("random")).quantizer().data.batches[0]["x"].shape == (2, 8)
    rc = main(["compare", path, "--emulate", "--min-shapes", "x:1x6", "--opt-shapes", "x:2x8", "--max-shapes", "x:4x8",
               "--shapes", "x:2x8", "--precision", "int8", "--calibration-data", data])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and "does not run on calibration data" in err


def test_int8_emulation_is_the_qdq_arithmetic_with_fp16_between_layers(tmp_path) -> None:
    """x -> MatMul(w) -> y in int8: the emulated output is, to fp16's last bit, x rounded to fp16,
    quantized with its scale, times the dequantized int8 weights in fp32 (the DQ values not
    rounded: TensorRT fuses them into the int8 kernel), the product rounded to fp16."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    m = h.make_model(h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "mm", [vi("x", ["N", 16])],
                                  [vi("y", ["N", 8])], [nh.from_array(w, "w")]), opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    path, data = str(tmp_path / "mm.onnx"), str(tmp_path / "cal.npz")
    onnx.save(m, path)
    np.savez(data, x=rng.standard_normal((32, 16)).astype(np.float32))
    sess = Session(path, [{"x": ((1, 16), (4, 16), (8, 16))}], int8_options(data))
    q = sess.quantizer()(sess.plan.extract(0))
    inits = {t.name: nh.to_array(t) for t in q.graph.initializer}
    x = rng.standard_normal((4, 16)).astype(np.float32)
    xs = np.float32(inits["x_scale"])
    xq = np.clip(np.round(x.astype(np.float16).astype(np.float32) / xs), -128, 127) * xs
    wq = inits["w_quantized"].astype(np.float32) * inits["w_scale"].astype(np.float32)
    expected = (xq @ wq).astype(np.float16).astype(np.float32)
    ours = sess.run(None, {"x": x})[0]
    ulp = np.spacing(np.abs(expected).astype(np.float16)).astype(np.float32)
    assert np.all(np.abs(ours - expected) <= ulp) and np.abs(ours - x @ w).max() > 1e-3


def _tiny_channel_matmul() -> onnx.ModelProto:
    """x [N, T, 16] -> Relu -> MatMul(w) -> Add -> Tanh, one output channel of w 1e-5 times the
    rest: that channel's int8 scale (~2e-7) is below fp16's normal range, the others' are not."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    w[:, 0] *= 1e-5
    nodes = [h.make_node("Relu", ["x"], ["r"], name="relu"), h.make_node("MatMul", ["r", "w"], ["m"], name="mm"),
             h.make_node("Add", ["m", "b"], ["a"], name="add"), h.make_node("Tanh", ["a"], ["y"], name="tanh")]
    inits = [nh.from_array(w, "w"), nh.from_array((rng.standard_normal(8) * 0.1).astype(np.float32), "b")]
    m = h.make_model(h.make_graph(nodes, "tiny", [vi("x", ["N", "T", 16])], [vi("y", ["N", "T", 8])], inits),
                     opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_operand_scales_of_a_matmul_share_one_dtype(tmp_path, flavor) -> None:
    """A weight scale fp16 cannot hold keeps its DQ in fp32, and with it the activation's Q/DQ
    in front of the same MatMul and the MatMul itself: TensorRT-RTX (Myelin) refuses a MatMul whose
    operand scales are fp32 and fp16. The int8 build takes the MatMul (nothing demoted), and the
    emulated output is within int8's error of fp32."""
    model, data = str(tmp_path / "tiny.onnx"), str(tmp_path / "cal.npz")
    onnx.save(_tiny_channel_matmul(), model)
    np.savez(data, x=np.random.default_rng(1).standard_normal((32, 5, 16)).astype(np.float32))
    profile = [{"x": ((1, 1, 16), (4, 5, 16), (8, 64, 16))}]
    out = str(tmp_path / "build")
    manifest = build_folder_build(model, out, profile, SessionOptions(
        build=BuildOptions(precision="int8", calibration_data=data)))
    assert not manifest["demoted"]
    assert [(s["backend"], s["precision"]) for s in manifest["segments"]] == [("tensorrt", "int8")]
    built = onnx.load(os.path.join(out, "segment_0.onnx"))
    scales = {t.name: t.data_type for t in built.graph.initializer if t.name.endswith("_scale")}
    assert scales == {"r_scale": onnx.TensorProto.FLOAT, "w_scale": onnx.TensorProto.FLOAT}
    made = {o: n.op_type for n in built.graph.node for o in n.output}
    mm = next(n for n in built.graph.node if n.op_type == "MatMul")
    assert [made[i] for i in mm.input] == ["DequantizeLinear", "DequantizeLinear"]  # no cast between
    x = np.random.default_rng(4).standard_normal((2, 7, 16)).astype(np.float32)
    ours = Session.load(out, SessionOptions(emulate=True)).run(None, {"x": x})[0]
    ref = Session(model, profile, SessionOptions(emulate=True)).run(None, {"x": x})[0]
    err = float(np.abs(ours - ref).max())
    assert 1e-4 < err < 0.1, err  # int8's error (outputs in [-1, 1]), not fp32's and not a wreck


def test_a_segment_with_nothing_quantized_is_recorded_as_the_fp16_it_is(tmp_path) -> None:
    """int8 asked, but the TensorRT segment's only compute op goes to ONNX Runtime: the quantizer
    inserts no Q/DQ, and the segment runs as int8's fp16 remainder. The manifest, the build's
    summary, the emulated session and compare all say fp16, not int8."""
    from trt_backend.accuracy.compare import compare

    rng = np.random.default_rng(0)
    nodes = [h.make_node("Relu", ["x"], ["r"], name="relu"), h.make_node("Sigmoid", ["r"], ["s"], name="sig"),
             h.make_node("Tanh", ["s"], ["t"], name="tanh"), h.make_node("MatMul", ["t", "w"], ["y"], name="mm")]
    m = h.make_model(h.make_graph(nodes, "chain", [vi("x", ["N", 16])], [vi("y", ["N", 8])],
                                  [nh.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")]),
                     opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    model, data, out = str(tmp_path / "chain.onnx"), str(tmp_path / "cal.npz"), str(tmp_path / "build")
    onnx.save(m, model)
    np.savez(data, x=rng.standard_normal((32, 16)).astype(np.float32))
    profile = [{"x": ((1, 16), (4, 16), (8, 16))}]
    options = SessionOptions(build=BuildOptions(precision="int8", calibration_data=data),
                             partition=PartitionOptions(exclude_nodes=("mm",), min_segment_size=1, boundary_cost=None))
    manifest = build_folder_build(model, out, profile, options)
    assert [(s["backend"], s.get("precision")) for s in manifest["segments"]] == [("tensorrt", "fp16"),
                                                                                ("onnxruntime", None)]
    assert manifest["build"]["summary"] == "fp16"
    built = onnx.load(os.path.join(out, "segment_0.onnx"))
    assert not any(n.op_type in QDQ_OPS for n in built.graph.node)
    assert any(t.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16 for t in
               onnx.shape_inference.infer_shapes(built).graph.value_info)  # what fp16 says: it computes in fp16
    assert Session.load(out, SessionOptions(emulate=True)).emulated_precisions == {0: "fp16"}
    report = compare(out, atol=1e-2, rtol=1e-2)
    assert report.precision == "fp16" and report.passed
    sess = Session(model, profile, SessionOptions(emulate=True, precision="int8", calibration_data=data,
                                                  partition=options.partition))
    assert sess.emulated_precisions == {0: "fp16"}  # emulating from the model says the same

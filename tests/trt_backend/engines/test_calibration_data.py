"""Calibration on real data: samples of different heights and widths within the profiles (as
detection and OCR data is), a scalar input (a sample rate), integer and bool inputs, data streamed
rather than held, and a sample outside the profiles as one CalibrationDataError naming the file,
the input, what the profiles take and what the file holds."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from tests.helpers import vi
from trt_backend.engines import quantize
from trt_backend.engines.calibration import Batches, InputSpec, load_calibration
from trt_backend.engines.quantize import QDQ_OPS
from trt_backend.errors import CalibrationDataError
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

PROFILES = [{"x": ((1, 3, 16, 16), (2, 3, 32, 32), (4, 3, 64, 64))}]


def detector() -> onnx.ModelProto:
    """A fully convolutional net on x [N, 3, H, W]: Conv -> Relu -> Conv -> Relu -> GAP -> Gemm."""
    rng = np.random.default_rng(0)
    inits = [nh.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w0"),
             nh.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.3).astype(np.float32), "w1"),
             nh.from_array((rng.standard_normal((8, 5)) * 0.3).astype(np.float32), "fw")]
    nodes = [h.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1], name="conv0"),
             h.make_node("Relu", ["c0"], ["r0"], name="relu0"),
             h.make_node("Conv", ["r0", "w1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2], name="conv1"),
             h.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             h.make_node("GlobalAveragePool", ["r1"], ["g"], name="gap"),
             h.make_node("Flatten", ["g"], ["f"], name="flatten"),
             h.make_node("Gemm", ["f", "fw"], ["y"], name="fc")]
    m = h.make_model(h.make_graph(nodes, "det", [vi("x", ["N", 3, "H", "W"])], [vi("y", ["N", 5])], inits),
                     opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _varied(folder) -> dict[str, tuple[int, ...]]:
    rng = np.random.default_rng(1)
    shapes: dict[str, tuple[int, ...]] = {"a.npz": (3, 3, 16, 16), "b.npz": (1, 3, 64, 64), "d.npz": (2, 3, 32, 48),
                                          "e.npz": (3, 3, 32, 48)}
    for name, shape in shapes.items():
        np.savez(folder / name, x=rng.random(shape, dtype=np.float32))
    return shapes


def test_samples_of_different_shapes_are_calibrated_in_same_shape_groups(tmp_path) -> None:
    """Five files in three shapes: batches of the opt batch (2) are made within each run of
    consecutive same-shape files (d's and e's 32x48 samples fill batches together), short ones
    fed as they are (the batch dim is dynamic); the int8 session quantizes on them and its
    emulated output follows fp32 at every shape."""
    _varied(tmp_path)
    spec = [InputSpec("x", np.dtype(np.float32), (None, 3, None, None))]
    data = load_calibration(str(tmp_path), spec, {"x": 2})
    assert isinstance(data.batches, Batches)
    got = [b["x"].shape for b in data.batches]
    assert got == [(2, 3, 16, 16), (1, 3, 16, 16), (1, 3, 64, 64), (2, 3, 32, 48), (2, 3, 32, 48), (1, 3, 32, 48)]
    assert data.samples == 9 and data.shapes == 5 and len(data.batches) == 6
    assert data.batches[-1]["x"].shape == (1, 3, 32, 48) and [b["x"].shape for b in data.batches[1:3]] == got[1:3]

    m = detector()
    sess = Session(m, PROFILES, SessionOptions(emulate=True, precision="int8", calibration_data=str(tmp_path)))
    fp32 = Session(m, PROFILES, SessionOptions(emulate=True))
    quantized = sess.compiled.segments[0].model
    assert sum(n.op_type in QDQ_OPS for n in quantized.graph.node) >= 6
    rng = np.random.default_rng(2)
    for shape in ((1, 3, 16, 16), (2, 3, 32, 48), (4, 3, 64, 64)):
        x = rng.random(shape, dtype=np.float32)
        ours, ref = sess.run(None, {"x": x})[0], fp32.run(None, {"x": x})[0]
        assert np.abs(ours - ref).max() < 0.05 * np.abs(ref).max() + 1e-3


def test_a_sample_outside_the_profiles_names_file_input_expected_and_got(tmp_path) -> None:
    _varied(tmp_path)
    np.savez(tmp_path / "f.npz", x=np.ones((1, 3, 128, 16), np.float32))
    with pytest.raises(CalibrationDataError) as e:
        Session(detector(), PROFILES, SessionOptions(emulate=True, precision="int8", calibration_data=str(tmp_path)))
    text = str(e.value)
    assert "f.npz" in text and "input 'x'" in text and "(1, 3, 128, 16)" in text
    assert "[1, 3, 16, 16]..[4, 3, 64, 64]" in text


def test_streamed_calibration_gives_the_scales_the_cached_one_does(tmp_path, monkeypatch) -> None:
    """Segment inputs past TAP_CACHE_BYTES are not kept but made again on each pass (the data
    may exceed memory): the Q/DQ scales are the ones calibration with every batch held gives."""
    _varied(tmp_path)

    def scales(cache: int) -> dict[str, np.ndarray]:
        monkeypatch.setattr(quantize, "TAP_CACHE_BYTES", cache)
        sess = Session(detector(), PROFILES, SessionOptions(emulate=True, precision="int8",
                                                            calibration_data=str(tmp_path)))
        q = sess.compiled.segments[0].model
        return {t.name: nh.to_array(t) for t in q.graph.initializer if "scale" in t.name}

    held, streamed = scales(1 << 30), scales(1)
    assert held.keys() == streamed.keys() and len(held) >= 3
    for name, value in held.items():
        np.testing.assert_array_equal(value, streamed[name])


def speech() -> onnx.ModelProto:
    """x [N, L] audio, sr [] int64 sample rate, mask [N, L] bool: Conv1d -> Relu, scaled by
    sr / 16000, masked with Where, then MatMul: a scalar, an integer and a bool input."""
    rng = np.random.default_rng(0)
    inits = [nh.from_array((rng.standard_normal((4, 1, 3)) * 0.5).astype(np.float32), "w"),
             nh.from_array(np.array(16000.0, np.float32), "rate"), nh.from_array(np.array(0.0, np.float32), "zero"),
             nh.from_array(np.array([1], np.int64), "axis1"),
             nh.from_array((rng.standard_normal((4, 2)) * 0.5).astype(np.float32), "proj")]
    nodes = [h.make_node("Unsqueeze", ["x", "axis1"], ["x1"], name="channel"),
             h.make_node("Conv", ["x1", "w"], ["c"], pads=[1, 1], name="conv"),
             h.make_node("Relu", ["c"], ["r"], name="relu"),
             h.make_node("Cast", ["sr"], ["srf"], to=T.FLOAT, name="cast"),
             h.make_node("Div", ["srf", "rate"], ["k"], name="div"),
             h.make_node("Mul", ["r", "k"], ["s"], name="scale"),
             h.make_node("Unsqueeze", ["mask", "axis1"], ["m1"], name="mask_channel"),
             h.make_node("Where", ["m1", "s", "zero"], ["masked"], name="where"),
             h.make_node("Transpose", ["masked"], ["t"], perm=[0, 2, 1], name="transpose"),
             h.make_node("MatMul", ["t", "proj"], ["y"], name="proj")]
    m = h.make_model(h.make_graph(nodes, "speech", [vi("x", ["N", "L"]), vi("sr", [], T.INT64),
                                                    vi("mask", ["N", "L"], T.BOOL)], [vi("y", ["N", "L", 2])], inits),
                     opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_scalar_integer_and_bool_inputs_calibrate(tmp_path) -> None:
    """A 0-d sample rate is the file's one rate (a leading axis holds one per batch), int32 data
    feeds an int64 input when its values fit, bool masks feed a bool input; int8 quantizes the Conv and
    MatMul and the emulated output follows fp32."""
    rng = np.random.default_rng(3)
    np.savez(tmp_path / "a.npz", x=rng.standard_normal((2, 64)).astype(np.float32), sr=np.array(16000, np.int64),
             mask=rng.random((2, 64)) > 0.2)
    np.savez(tmp_path / "b.npz", x=rng.standard_normal((3, 96)).astype(np.float32),
             sr=np.array([8000, 16000, 16000], np.int32), mask=np.ones((3, 96), bool))
    profiles = [{"x": ((1, 32), (2, 64), (4, 128)), "sr": ((), (), ()), "mask": ((1, 32), (2, 64), (4, 128))}]
    spec = [InputSpec("x", np.dtype(np.float32), (None, None)), InputSpec("sr", np.dtype(np.int64), ()),
            InputSpec("mask", np.dtype(bool), (None, None))]
    data = load_calibration(str(tmp_path), spec, {"x": 1, "mask": 1})
    assert [(b["x"].shape, b["sr"].shape, b["sr"].dtype, int(b["sr"])) for b in data.batches] == [
        ((1, 64), (), np.dtype(np.int64), 16000), ((1, 64), (), np.int64, 16000), ((1, 96), (), np.int64, 8000),
        ((1, 96), (), np.int64, 16000), ((1, 96), (), np.int64, 16000)]
    m = speech()
    sess = Session(m, profiles, SessionOptions(emulate=True, precision="int8", calibration_data=str(tmp_path)))
    assert sess.quantizer().data.samples == 5
    qdq = [n for s in sess.compiled.segments.values() for n in s.model.graph.node if n.op_type in QDQ_OPS]
    assert len(qdq) >= 4
    fp32 = Session(m, profiles, SessionOptions(emulate=True))
    feeds = {"x": rng.standard_normal((2, 64)).astype(np.float32), "sr": np.array(16000, np.int64),
             "mask": rng.random((2, 64)) > 0.5}
    ours, ref = sess.run(None, feeds)[0], fp32.run(None, feeds)[0]
    assert np.abs(ours - ref).max() < 0.05 * np.abs(ref).max() + 1e-3
    np.savez(tmp_path / "c.npz", x=np.ones((1, 64), np.float32), sr=np.array([2**40], np.int64),
             mask=np.ones((1, 64), bool))
    spec[1] = InputSpec("sr", np.dtype(np.int32), ())
    with pytest.raises(CalibrationDataError, match=r"c.npz: input 'sr' holds int64 values from 1099511627776 to "
                                                   r"1099511627776; the model takes int32"):
        load_calibration(str(tmp_path), spec)


def test_samples_short_of_a_batch_the_profiles_fix_are_left_out(tmp_path, caplog) -> None:
    """68 samples in batches of 32 where the profile fixes the batch at 32 (the model's batch dim is
    dynamic): two whole batches calibrate and the 4 left over are left out with one warning, as
    TensorRT's calibrators leave them, instead of an error about a batch of 4."""
    rng = np.random.default_rng(2)
    np.savez(tmp_path / "cal.npz", x=rng.random((68, 3, 16, 16), dtype=np.float32))
    spec = [InputSpec("x", np.dtype(np.float32), (None, 3, None, None))]
    fixed = (((32, 3, 16, 16), (32, 3, 16, 16), (32, 3, 16, 16)),)
    with caplog.at_level("WARNING", logger="trt_backend.engines.calibration"):
        data = load_calibration(str(tmp_path / "cal.npz"), spec, {"x": 32}, ranges=[{"x": fixed[0]}])
        batches = list(data.batches)
        again = list(data.batches)  # (a second pass over the data, as int8 calibration makes: said once)
    assert [b["x"].shape[0] for b in batches] == [b["x"].shape[0] for b in again] == [32, 32]
    assert data.samples == 64
    assert caplog.text.count("4 sample(s) short of a whole batch left out") == 1
    # within a profile that takes batches 1..32, the short batch is fed as it is
    ranged = (((1, 3, 16, 16), (32, 3, 16, 16), (32, 3, 16, 16)),)
    data = load_calibration(str(tmp_path / "cal.npz"), spec, {"x": 32}, ranges=[{"x": ranged[0]}])
    assert [b["x"].shape[0] for b in data.batches] == [32, 32, 4]


def test_an_int8_folder_with_no_tensorrt_segment_opens_through_every_door(tmp_path, capsys) -> None:
    """A model that runs all in ONNX Runtime (here by exclusion; a scikit-learn classifier's ML ops
    do the same) built in int8: nothing is calibrated, yet the folder records the data it was given,
    so run, compare and Session.load open it instead of refusing its own manifest."""
    from trt_backend.artifacts.write import build
    from trt_backend.cli import main

    model = detector()
    path = tmp_path / "det.onnx"
    onnx.save(model, str(path))
    np.savez(tmp_path / "cal.npz", x=np.random.default_rng(3).random((4, 3, 16, 16), dtype=np.float32))
    out = tmp_path / "built"
    options = SessionOptions(precision="int8", calibration_data=str(tmp_path / "cal.npz"),
                             exclude_ops=("Conv", "Relu", "GlobalAveragePool", "Flatten", "Gemm"))
    build(str(path), str(out), [{"x": ((2, 3, 16, 16), (2, 3, 16, 16), (2, 3, 16, 16))}], options)
    sess = Session.load(str(out))
    assert sess.segment_executors == ["onnxruntime"]
    x = np.random.default_rng(4).random((2, 3, 16, 16), dtype=np.float32)
    ref = Session(model, PROFILES, SessionOptions(emulate=True)).run(None, {"x": x})[0]
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], ref, rtol=1e-6, atol=1e-6)
    assert main(["run", str(out)]) == 0
    assert main(["compare", str(out)]) == 0
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_string_samples_calibrate_as_they_feed_a_run(tmp_path, capsys) -> None:
    """A scikit-learn text classifier (CountVectorizer and an MLP, skl2onnx): its string input
    comes from an .npz as a unicode array (an .npz holds no object array without pickling), which
    ``--inputs`` reads; ``--calibration-data`` refused the same file ("is <U.., the model takes
    object"), so such a model could be calibrated on random data only."""
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import StringTensorType
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline

    from trt_backend.cli import main

    words = ["engine", "tensor", "model", "graph", "layer", "kernel", "batch", "shape", "cache", "plan"]
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(words, 6)) for _ in range(60)]
    labels = [int("engine" in t) + int("kernel" in t) for t in texts]
    clf = make_pipeline(CountVectorizer(lowercase=False),  # (lower case needs a locale ONNX Runtime asks for)
                        MLPClassifier((16,), max_iter=50, random_state=0)).fit(texts, labels)
    path = str(tmp_path / "text.onnx")
    with open(path, "wb") as f:
        f.write(to_onnx(clf, initial_types=[("text", StringTensorType([None, 1]))], target_opset=17,
                        options={id(clf): {"zipmap": False}}).SerializeToString())
    samples = str(tmp_path / "text.npz")
    np.savez(samples, text=np.array([[t] for t in texts[:24]]))  # (a unicode array)
    assert main(["run", path, "--inputs", samples, "-q"]) == 0
    folder = str(tmp_path / "int8")
    shapes = ["--min-shapes", "text:1x1", "--opt-shapes", "text:24x1", "--max-shapes", "text:64x1"]
    capsys.readouterr()
    assert main(["build", path, "-o", folder, *shapes, "--precision", "int8", "--calibration-data", samples]) == 0, \
        capsys.readouterr().err
    out = capsys.readouterr().out
    assert "tensorrt    int8" in out and "segment_1.engine" in out
    assert main(["compare", folder, "--inputs", samples]) in (0, 1)  # (int8 may fail 1e-3: measured, said)
    report = capsys.readouterr().out
    label = next(line for line in report.splitlines() if line.startswith("label"))
    assert "equal:" in label and "of 24 differ" in label and "precision int8" in report


def test_calibration_data_given_without_profiles_shapes_the_profile_as_samples_do(tmp_path, capsys) -> None:
    """A model of open dims built int8 on calibration files and no --shapes asked for a --shapes
    setting every open dim to 1 (a CNN that cannot run at width 1), and compare's profile spanned
    its --inputs sample alone, then refused the calibration files outside it. The files' shapes
    (read from their headers) join the samples' in the one profile that spans them, as --inputs
    alone makes one."""
    import json

    from trt_backend.cli import main

    path = str(tmp_path / "det.onnx")
    onnx.save(detector(), path)
    data = tmp_path / "cal"
    data.mkdir()
    shapes = _varied(data)
    assert main(["build", path, "-o", str(tmp_path / "b8"), "--precision", "int8", "--calibration-data",
                 str(data)]) == 0
    capsys.readouterr()
    profile = json.load(open(tmp_path / "b8" / "manifest.json"))["plan"]["input_profiles"][0]["x"]
    # (a file's leading dim counts the samples it stacks: the batch is 1 without --inputs, said)
    low = [1] + [min(s[k] for s in shapes.values()) for k in range(1, 4)]
    high = [1] + [max(s[k] for s in shapes.values()) for k in range(1, 4)]
    assert (profile["min"], profile["opt"], profile["max"]) == (low, [1, *shapes["a.npz"][1:]], high)
    np.savez(tmp_path / "one.npz", x=np.random.default_rng(3).random((2, 3, 24, 24), dtype=np.float32))
    rc = main(["compare", path, "--inputs", str(tmp_path / "one.npz"), "--precision", "int8", "--calibration-data",
               str(data), "--atol", "0.5", "--rtol", "0.5"])
    out, err = capsys.readouterr()
    assert rc == 0 and "outside" not in err and "PASSED" in out, (out, err)
    # an array naming no input is the calibration data's error, naming its file (it was said of "profile 0")
    extra = tmp_path / "extra"
    extra.mkdir()
    np.savez(extra / "0.npz", x=np.random.default_rng(4).random((1, 3, 24, 24), dtype=np.float32),
             labels=np.zeros(1, np.int64))
    assert main(["build", path, "-o", str(tmp_path / "bx"), "--precision", "int8", "--calibration-data",
                 str(extra)]) == 1
    err = capsys.readouterr().err
    assert f"calibration data {extra / '0.npz'}: array(s) 'labels' name no model input" in err, err


def test_keep_fp32_ops_reaches_the_fp16_remainder_of_an_int8_build(tmp_path) -> None:
    """An int8 build computes what it does not quantize in fp16, save the ops of keep_fp32_ops:
    the quantizer was made without the list given, so --keep-fp32-ops changed nothing of an int8
    build (byte-identical segment models) while the manifest recorded it."""
    _varied(tmp_path)

    def segment(keep: tuple[str, ...] | None) -> onnx.ModelProto:
        extra: dict[str, Any] = {"keep_fp32_ops": keep} if keep is not None else {}
        sess = Session(detector(), PROFILES, SessionOptions(emulate=True, precision="int8",
                                                            calibration_data=str(tmp_path), **extra))
        return sess.compiled.segments[0].model

    def fp16_inputs(model: onnx.ModelProto, op: str) -> bool:
        types = {vi.name: vi.type.tensor_type.elem_type for vi in model.graph.value_info}
        casts = {o: n for n in model.graph.node if n.op_type == "Cast" for o in n.output}
        node = next(n for n in model.graph.node if n.op_type == op)
        source = node.input[0]
        return types.get(source) == T.FLOAT16 or (source in casts and any(
            a.name == "to" and a.i == T.FLOAT16 for a in casts[source].attribute))

    default, kept = segment(None), segment(("GlobalAveragePool",))
    assert fp16_inputs(default, "GlobalAveragePool") and not fp16_inputs(kept, "GlobalAveragePool")
    assert default.SerializeToString() != kept.SerializeToString()


@pytest.mark.parametrize("method", ["entropy", "percentile"])
def test_a_histogram_calibration_of_batches_of_several_shapes_is_one_error(tmp_path, method) -> None:
    """ONNX Runtime's histogram calibrators (entropy, percentile) stack every batch of a tensor:
    on data of several shapes the quantizer failed inside the segment's build, which fell back to
    fp32 with a warning and exited 0. It is one CalibrationDataError before anything builds;
    minmax takes the same data."""
    _varied(tmp_path)
    with pytest.raises(CalibrationDataError, match=rf"--calibration-method {method} takes samples of one shape, "
                                                   r"and the data holds \d+ \(ONNX Runtime's histogram calibrator"):
        Session(detector(), PROFILES, SessionOptions(emulate=True, precision="int8", calibration_data=str(tmp_path),
                                                     calibration_method=method))
    Session(detector(), PROFILES, SessionOptions(emulate=True, precision="int8", calibration_data=str(tmp_path),
                                                 calibration_method="minmax")).close()


def test_a_histogram_calibration_leaves_out_a_short_last_batch(tmp_path) -> None:
    """Ten samples of one shape at a batch of 4 make batches of 4, 4 and 2: the check of shapes
    refused them as of several shapes ("use samples of one shape", which they were). The short
    batch is left out of an entropy or percentile calibration, which stacks every batch."""
    rng = np.random.default_rng(4)
    np.savez(tmp_path / "ten.npz", x=rng.random((10, 3, 16, 16), dtype=np.float32))
    profile = [{"x": ((1, 3, 16, 16), (4, 3, 16, 16), (4, 3, 16, 16))}]
    sess = Session(detector(), profile, SessionOptions(emulate=True, precision="int8",
                                                       calibration_data=str(tmp_path / "ten.npz"),
                                                       calibration_method="entropy"))
    quantized = sess.compiled.segments[0].model
    assert sum(n.op_type in QDQ_OPS for n in quantized.graph.node) >= 6
    sess.close()

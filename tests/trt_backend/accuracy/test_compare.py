"""``trt_backend.compare`` on real runs (TensorRT segments emulated through ONNX Runtime): emulated
sessions pass at the default tolerance; a segment made wrong on purpose is localised to exactly
that segment; fp16 errors are reported per output and localised; NaN/inf are handled explicitly;
bad input is a clear error, never a report."""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import trt_backend
from partitioner.errors import ModelLoadError, OptionsError
from tests.support.graphs import custom_op_model, three_segments
from trt_backend.accuracy.compare import compare
from trt_backend.accuracy.options import CompareOptions
from trt_backend.errors import ReferenceRunError
from trt_backend.runners.base import SegmentRunner
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

pytestmark = pytest.mark.usefixtures("oracle")  # needs a TensorRT parser

EMULATE = SessionOptions(emulate=True)
EMULATE_FP16 = SessionOptions(emulate=True, precision="fp16")
EMULATE_BF16 = SessionOptions(emulate=True, precision="bf16")


PROFILE = [{"x": ((1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8))}]


class Noisy(SegmentRunner):
    """A segment runner made wrong on purpose: its outputs get seeded noise (or a NaN)."""

    def __init__(self, inner: SegmentRunner, scale: float = 0.0, nan: bool = False) -> None:
        super().__init__(inner.segment, inner.profiles, inner.shape_tensors)
        self.executor = inner.executor  # type: ignore[misc]
        self.inner, self.scale, self.nan = inner, scale, nan

    def run_impl(self, inputs: Sequence[Any], ort_run_options: Any = None) -> list[Any]:
        rng = np.random.default_rng(7)
        outs = []
        for o in self.inner.run(inputs, ort_run_options):
            o = o + (self.scale * rng.standard_normal(o.shape)).astype(o.dtype)
            if self.nan:
                o.reshape(-1)[0] = np.nan
            outs.append(o)
        return outs


def session_with_noise(k: int, **noise: Any) -> Session:
    sess = Session(three_segments(), PROFILE, EMULATE)
    sess.runners[k] = Noisy(sess.runners[k], **noise)
    return sess


def test_three_segment_graph_passes_at_default_tolerance() -> None:
    report = compare(three_segments(), profiles=PROFILE, session_options=EMULATE, iterations=2, localize="always")
    assert report.passed and report.executors == ["emulated", "onnxruntime", "emulated"]
    assert [o.name for o in report.outputs] == ["y", "z"] and (report.atol, report.rtol) == (1e-3, 1e-3)
    assert report.points == [{"x": [2, 3, 8, 8]}] and report.iterations == 2  # opt shapes by default
    assert all(o.error.max_abs_error < 1e-4 for o in report.outputs)
    assert report.segments is not None  # localize="always": the table
    assert report.localization is None and len(report.segments) == 3  # asked always: table, no culprit
    assert all(s.stitched_passed and s.own_error < 1e-4 for s in report.segments)


def test_all_profile_shapes_and_seeds() -> None:
    report = compare(three_segments(), profiles=PROFILE, session_options=EMULATE, all_profile_shapes=True,
                     iterations=2, seed=5)
    assert report.passed and report.iterations == 6
    assert [p["x"][0] for p in report.points] == [1, 2, 4]


@pytest.mark.parametrize("k", [0, 2])
def test_noisy_segment_is_localised_exactly(k: int) -> None:
    report = compare(session_with_noise(k, scale=1e-2), localize=True)
    assert not report.passed
    loc = report.localization
    assert loc is not None and loc.segment.id == k and loc.segment.backend == "tensorrt"
    assert loc.segment.own_error > 1e-3 and not loc.segment.own_passed
    assert "alone on reference inputs it exceeds it too" in loc.reason
    assert report.segments is not None
    for s in report.segments:
        if s.id != k:
            assert s.own_error < 1e-5, s  # the others are innocent when fed reference inputs
    assert loc.node_names == (("conv1", "relu1", "sigmoid") if k == 0 else ("conv2", "relu2"))
    failed = set(report.failed_outputs)
    assert failed == ({"y", "z"} if k == 0 else {"y"})  # z comes from segment 0 only
    d = report.to_dict()["localization"]
    assert d["segment"] == k and d["backend"] == "tensorrt" and d["nodes"] == list(loc.segment.nodes)
    assert d["own_error"] == loc.segment.own_error


def test_no_localisation_unless_asked_or_failing() -> None:
    report = compare(session_with_noise(0, scale=1e-2))
    assert not report.passed and report.localization is None and report.segments is None
    assert compare(three_segments(), profiles=PROFILE, session_options=EMULATE, localize=True).segments is None


def test_fp16_errors_per_output_and_localised() -> None:
    fp32 = compare(three_segments(), profiles=PROFILE, session_options=EMULATE, atol=1e-5, rtol=1e-5)
    assert fp32.passed
    report = compare(three_segments(), profiles=PROFILE, session_options=EMULATE_FP16,
                     atol=1e-5, rtol=1e-5, localize=True)
    assert not report.passed and report.precision == "fp16"
    errors = {o.name: o.error for o in report.outputs}
    assert set(report.failed_outputs) == {"y", "z"}
    assert all(1e-5 < e.max_abs_error < 0.5 for e in errors.values()), errors
    assert errors["y"].required_atol == errors["y"].max_abs_error  # elemwise: the max is what would pass
    assert report.localization is not None and report.segments is not None
    seg = report.localization.segment
    assert (seg.id, seg.backend, seg.precision) == (0, "tensorrt", "fp16") and seg.own_error > 1e-5
    by_id = {s.id: s for s in report.segments}
    assert by_id[1].precision == "fp32" and by_id[1].own_error < 1e-6  # ONNX Runtime segment stays exact
    assert by_id[2].own_error > 1e-5  # the second fp16 segment has its own error too
    # per-output tolerances: loosen y and z enough and the same run passes
    loose = compare(three_segments(), profiles=PROFILE, session_options=EMULATE_FP16, atol=1e-5,
                    rtol=1e-5, tolerances={"y": (1.0, 0.1), "z": (0.1, 0.1)})
    assert loose.passed and [o.atol for o in loose.outputs] == [1.0, 0.1]


def test_precision_from_build_options() -> None:
    from trt_backend.engines.builder import BuildOptions

    fp16 = SessionOptions(emulate=True, build=BuildOptions(precision="fp16"))
    report = compare(three_segments(), profiles=PROFILE, session_options=fp16, atol=1e-5, rtol=1e-5)
    assert report.precision == "fp16" and not report.passed  # emulated segments follow the engines' precision
    # the precision is the session's alone: CompareOptions has no field for it
    with pytest.raises(OptionsError, match="CompareOptions has no option 'precision'"):
        compare(three_segments(), profiles=PROFILE, session_options=fp16, precision="bf16")


def test_a_given_session_leaves_as_it_came() -> None:
    """A ready Session is compared as it is: an fp16-emulating session reports fp16 (and fails a
    tight tolerance) every time; an fp32 one passes; neither has its runners swapped."""
    fp16 = Session(three_segments(), PROFILE, EMULATE_FP16)
    assert fp16.emulated_precisions == {0: "fp16", 2: "fp16"}
    runners = list(fp16.runners)
    first = compare(fp16, atol=1e-5, rtol=1e-5)
    assert not first and first.precision == "fp16"
    assert fp16.runners == runners and not compare(fp16, atol=1e-5, rtol=1e-5)
    sess = Session(three_segments(), PROFILE, EMULATE)
    runners = list(sess.runners)
    assert compare(sess, atol=1e-5, rtol=1e-5).passed and sess.runners == runners
    with pytest.raises(OptionsError, match="brings its own profiles"):
        compare(sess, profiles=PROFILE)


def test_nan_and_inf_are_explicit() -> None:
    x = np.array([[-1.0, 0.0, 1.0, 2.0]], np.float32)
    nodes = [h.make_node("Log", ["x"], ["l"]), h.make_node("Relu", ["l"], ["y"])]
    m = h.make_model(h.make_graph(nodes, "log", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                                  [h.make_tensor_value_info("y", T.FLOAT, [1, 4])]),
                     opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 9
    none = SessionOptions(flavor="none")
    same = compare(m, session_options=none, feeds=[{"x": x}])  # log(-1) = NaN, log(0) = -inf in both
    assert same.passed and same.outputs[0].error.nonfinite_matched == 1  # relu(-inf) = 0; NaN stays
    sess = Session(m, options=none)
    sess.runners[0] = Noisy(sess.runners[0], nan=True)  # one NaN where the reference is finite
    report = compare(sess, feeds=[{"x": np.abs(x) + 1}])
    out = report.outputs[0]
    assert not report.passed and out.error.nonfinite_mismatched == 1
    # an element's error is unbounded: max errors and the tolerances needed are inf (they read 0 where
    # every element was NaN, the statistics having been taken over the finite places only), which the
    # finite places' own max stands beside
    assert out.error.max_abs_error == out.error.required_atol == out.error.required_rtol == np.inf
    assert out.error.finite_max_abs_error is not None and np.isfinite(out.error.finite_max_abs_error)
    line = next(li for li in report.lines() if li.startswith("y "))
    assert "no tolerance passes" in line.split("FAILED")[0] and "NaN/inf mismatch" in line
    assert "elements finite on both sides: max abs" in line
    assert report.to_dict()["outputs"][0]["max_abs_error"] is None  # (JSON has no inf)


def test_light_models_pass(light_dir: str) -> None:
    for name in ("squeezenet", "densenet121"):
        report = compare(os.path.join(light_dir, f"light_{name}.onnx"), session_options=EMULATE)
        assert report.passed and report.executors == ["emulated"], name
    cut = SessionOptions(emulate=True, exclude_ops=("Concat",), min_segment_size=1)
    report = compare(os.path.join(light_dir, "light_inception_v1.onnx"), session_options=cut, localize="always")
    assert report.passed and len(report.executors) > 10 and report.localization is None
    assert report.segments is not None
    assert max(s.own_error for s in report.segments) < 1e-4


def test_bad_input() -> None:
    with pytest.raises(OptionsError, match=r"unknown output\(s\) 'nope'.*outputs are: y, z"):
        compare(three_segments(), profiles=PROFILE, session_options=EMULATE, tolerances={"nope": (1, 1)})
    with pytest.raises(OptionsError, match="cannot read tolerance"):
        compare(three_segments(), profiles=PROFILE, session_options=EMULATE, tolerances=["y:1e-3"])
    with pytest.raises(OptionsError, match="not both"):
        compare(three_segments(), CompareOptions(), atol=1)
    with pytest.raises(OptionsError, match="CompareOptions has no option 'atl'"):
        compare(three_segments(), atl=1)
    with pytest.raises(ModelLoadError):
        compare(b"not a model")


def test_inputs_too_large_for_memory_are_one_error_naming_the_input() -> None:
    """2^50 float32 elements would be 4 PiB: refused before anything is allocated, instead of a
    numpy allocation traceback."""
    from trt_backend.errors import MemoryLimitError

    shape = [2**20, 2**20, 2**10]
    m = h.make_model(h.make_graph([h.make_node("Relu", ["x"], ["y"])], "huge",
                                  [h.make_tensor_value_info("x", T.FLOAT, shape)],
                                  [h.make_tensor_value_info("y", T.FLOAT, shape)]),
                     opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 9
    with pytest.raises(MemoryLimitError,
                       match=r"input 'x': shape \(1048576, 1048576, 1024\) of float32 needs 4096.0 TiB "
                                                 r"\(16384.0 TiB while it is made\), and .* is available to this "
                                                 r"process"):
        compare(m, session_options=EMULATE)


def test_an_input_of_unknown_rank_is_compared_at_the_given_shape() -> None:
    """Polygraphy's shape check needs a rank; a model input of unknown rank was a TypeError
    traceback inside it (found by benchmarks/conformance/fuzz.py), now the feeds' rank is used."""
    nodes = [h.make_node("Relu", ["x"], ["a"]), h.make_node("Sigmoid", ["a"], ["b"]), h.make_node("Neg", ["b"], ["y"])]
    m = h.make_model(h.make_graph(nodes, "unranked", [h.make_tensor_value_info("x", T.FLOAT, None)],
                                  [h.make_tensor_value_info("y", T.FLOAT, None)]),
                     opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 9
    report = compare(m, CompareOptions(shapes={"x": (2, 3, 5)}), session_options=EMULATE)
    assert report.passed and [o.name for o in report.outputs] == ["y"]
    assert [list(p["x"]) for p in report.points] == [[2, 3, 5]]
    assert report.outputs[0].to_dict()["max_abs_error"] == 0.0


def string_input_model() -> Any:
    """A string column encoded by ai.onnx.ml's LabelEncoder beside a float input that TensorRT
    takes (Add and seven element-wise ops): the kind of model scikit-learn pipelines export."""
    nodes = [h.make_node("LabelEncoder", ["city"], ["code"], domain="ai.onnx.ml", keys_strings=["a", "b", "c"],
                         values_floats=[0.5, -1.0, 2.0], default_float=0.0),
             h.make_node("Add", ["x", "code"], ["t0"])]
    for k, op in enumerate(["Relu", "Sigmoid", "Neg", "Exp", "Tanh", "Abs", "Sqrt"]):
        nodes.append(h.make_node(op, [f"t{k}"], [f"t{k + 1}"]))
    nodes[-1].output[0] = "y"
    m = h.make_model(h.make_graph(nodes, "strings", [h.make_tensor_value_info("x", T.FLOAT, ["N", 4]),
                                                     h.make_tensor_value_info("city", T.STRING, ["N", 1])],
                                  [h.make_tensor_value_info("y", T.FLOAT, ["N", 4])]),
                     opset_imports=[h.make_opsetid("", 18), h.make_opsetid("ai.onnx.ml", 3)])
    m.ir_version = 9
    return m


def test_a_model_with_a_string_input_is_compared(tmp_path, capsys) -> None:
    """Polygraphy's data loader has no type for numpy's object arrays (string tensors): it was an
    AttributeError traceback from Polygraphy's TensorRT type table; the runners are fed them as
    they are."""
    import onnx

    from trt_backend.cli import main

    from partitioner import PartitionOptions

    m = string_input_model()
    # (the boundary cost would keep eight small nodes on ONNX Runtime: TensorRT gets them here)
    options = SessionOptions(emulate=True, partition=PartitionOptions(boundary_cost=None))
    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal((5, 4)).astype(np.float32),
            "city": np.array([["a"], ["c"], ["b"], ["z"], ["a"]], dtype=object)}
    report = compare(m, feeds=[feed], session_options=options)
    assert report.passed and [o.name for o in report.outputs] == ["y"]
    assert report.outputs[0].to_dict()["elements"] == 20
    assert report.executors == ["onnxruntime", "emulated"]  # (a TensorRT segment emulated and compared)
    random = compare(m, profiles=[{"x": ((3, 4),) * 3, "city": ((3, 1),) * 3}], session_options=options)
    assert random.passed
    path, inputs = str(tmp_path / "m.onnx"), str(tmp_path / "in.npz")
    onnx.save(m, path)
    np.savez(inputs, x=feed["x"], city=feed["city"].astype(str))  # (an .npz holds strings as unicode arrays)
    saved = str(tmp_path / "run.npz")
    assert main(["compare", path, "--inputs", inputs, "--no-boundary-cost", "--save-outputs", saved]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err and out.rstrip().splitlines()[-1].startswith("PASSED")
    # the run saved with its string inputs (as unicode: no pickle) serves as the reference again
    assert main(["compare", path, "--load-outputs", saved, "--no-boundary-cost"]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("PASSED")


def test_outputs_an_npz_cannot_hold_are_said_on_save_and_on_load(tmp_path, capsys) -> None:
    """ZipMap's sequence of maps: compared, but left out of --save-outputs with a note (it was
    left out silently), and on --load-outputs said to be missing from the file (it was compared
    as an empty optional there and FAILED); a top1 check reads its maps as rows (it found none)."""
    import onnx

    from trt_backend.cli import main

    nodes = [h.make_node("Softmax", ["x"], ["y"], axis=1),
             h.make_node("ZipMap", ["y"], ["probs"], domain="ai.onnx.ml", classlabels_int64s=[0, 1, 2])]
    graph = h.make_graph(nodes, "zipmap", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["N", 3]),
                          h.make_value_info("probs", h.make_sequence_type_proto(
                              h.make_map_type_proto(T.INT64, h.make_tensor_type_proto(T.FLOAT, []))))])
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 18), h.make_opsetid("ai.onnx.ml", 3)])
    m.ir_version = 9
    path, inputs, saved = str(tmp_path / "m.onnx"), str(tmp_path / "in.npz"), str(tmp_path / "run.npz")
    onnx.save(m, path)
    np.savez(inputs, x=np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32))
    assert main(["compare", path, "--inputs", inputs, "--save-outputs", saved, "--check", "top1:probs"]) == 0
    out = capsys.readouterr().out
    assert f"note: 'probs': compared, but not saved in {saved}" in out
    assert "top1:probs" in out and "agreement 1.0000 over 4 row(s)" in out  # one row per map, by label
    assert np.load(saved).files == ["inputs/0/x", "outputs/0/y"]
    assert main(["compare", path, "--load-outputs", saved]) == 0
    out = capsys.readouterr().out
    assert "note: 'probs': not in the saved outputs" in out and "probs" in out.split("note:")[0]
    assert out.rstrip().splitlines()[-1].startswith("PASSED | 1 comparison(s)")


def test_a_model_the_reference_cannot_run() -> None:
    with pytest.raises(ReferenceRunError, match=r"the reference \(ONNX Runtime on the whole model .*cannot load it"):
        compare(custom_op_model(), session_options=SessionOptions(flavor="none"))


def test_reference_failing_at_run_time_names_the_reference() -> None:
    from trt_backend.accuracy.polygraphy_glue import _ReferenceSession
    from trt_backend.ort.options import OrtOptions
    from trt_backend.ort.sessions import ort_session

    nodes = [h.make_node("Reshape", ["x", "s"], ["y"])]
    m = h.make_model(h.make_graph(nodes, "reshape", [h.make_tensor_value_info("x", T.FLOAT, [2, 3]),
                                                     h.make_tensor_value_info("s", T.INT64, [2])],
                                  [h.make_tensor_value_info("y", T.FLOAT, None)]),
                     opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 9
    ref = _ReferenceSession(ort_session(m, OrtOptions(), "reshape"))
    with pytest.raises(ReferenceRunError, match=r"the reference \(ONNX Runtime, whole model\) failed to run"):
        ref.run(None, {"x": np.zeros((2, 3), np.float32), "s": np.array([4, 4])})


def test_public_facade() -> None:
    assert "compare" in trt_backend.__all__ and trt_backend.compare is compare
    assert trt_backend.compare(three_segments(2), session_options=EMULATE).passed


def test_bf16_is_emulated_and_measured() -> None:
    """ONNX Runtime's CPU kernels have no bf16 Conv: bf16 segments run in fp32 with every
    tensor rounded through bf16, so compare reports bf16's error (larger than fp16's) instead of
    failing to load the segment."""
    fp16 = compare(three_segments(), profiles=PROFILE, session_options=EMULATE_FP16, localize="always")
    bf16 = compare(three_segments(), profiles=PROFILE, session_options=EMULATE_BF16, localize="always")
    assert bf16.segments is not None
    assert bf16.precision == "bf16" and [s.precision for s in bf16.segments] == ["bf16", "fp32", "bf16"]
    e16 = {o.name: o.error.max_abs_error for o in fp16.outputs}
    eb = {o.name: o.error.max_abs_error for o in bf16.outputs}
    assert all(0 < e16[n] < eb[n] < 1.0 for n in ("y", "z")), (e16, eb)


@pytest.mark.usefixtures("flavor")
def test_a_model_with_large_weights_compares_as_built(tmp_path) -> None:
    """compare of a model file builds its engines (as ``build`` does) and emulates what was built:
    an fp32 segment is built from its large weights held by reference (no copy), and the
    emulation reads them from the model (it looked for the placeholder's data file and failed
    to load). fp32 and fp16 both compare, from the file and from a ModelProto."""
    import onnx
    from onnx import numpy_helper as nh

    w = nh.from_array(np.random.default_rng(0).standard_normal((256, 128)).astype(np.float32) * 0.1, "w")  # 128 KiB
    graph = h.make_graph([h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Relu", ["m"], ["y"])], "big",
                         [h.make_tensor_value_info("x", T.FLOAT, ["N", 256])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["N", 128])], [w])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    path = str(tmp_path / "big.onnx")
    onnx.save(model, path)
    profiles = [{"x": ((1, 256), (4, 256), (8, 256))}]
    for precision in ("fp32", "fp16"):
        report = compare(path, profiles=profiles, session_options=SessionOptions(emulate=True, precision=precision))
        assert report.passed or precision == "fp16", report.lines()
        assert report.outputs[0].elements == 4 * 128 and report.precision.startswith(precision)
    assert compare(model, profiles=profiles, session_options=SessionOptions(emulate=True)).passed


@pytest.mark.usefixtures("flavor")
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_a_classifier_with_string_labels_is_compared_saved_and_searched(tmp_path, capsys) -> None:
    """scikit-learn's classifiers trained on string classes (skl2onnx) output a string tensor of
    labels beside ZipMap's maps: ``compare`` ended in a traceback from Polygraphy's type table (it
    has no type for numpy's object arrays), and ``run --outputs`` left the labels out as "not
    numeric". Labels are judged by equality, saved as a unicode array, and the search measures
    them by the same rule."""
    from skl2onnx import to_onnx
    from sklearn.datasets import load_wine
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from trt_backend.accuracy.auto_precision import AutoOptions
    from trt_backend.cli import main

    x, y = load_wine(return_X_y=True)
    x = x.astype(np.float32)
    labels = np.array([f"class_{k}" for k in y])
    clf = make_pipeline(StandardScaler(), MLPClassifier((16,), max_iter=100, random_state=0)).fit(x, labels)
    path = str(tmp_path / "wine.onnx")
    with open(path, "wb") as f:
        f.write(to_onnx(clf, x[:1], target_opset=17).SerializeToString())
    feeds = str(tmp_path / "wine.npz")
    np.savez(feeds, X=x[::6])
    assert main(["compare", path, "--inputs", feeds, "--emulate"]) == 0
    out = capsys.readouterr().out
    label = next(line for line in out.splitlines() if line.startswith("output_label"))
    assert f"equal: 0 of {len(x[::6])} differ" in label and "PASSED" in label
    report = compare(path, feeds=[{"X": x[::6]}], session_options=EMULATE)
    assert report.passed and report.to_dict()["outputs"][0]["compared_by"] == "equality"
    saved = str(tmp_path / "out.npz")
    assert main(["run", path, "--inputs", feeds, "--outputs", saved, "-q"]) == 0
    import onnxruntime as ort

    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(["output_label"], {"X": x[::6]})[0]
    with np.load(saved, allow_pickle=False) as data:
        assert data["output_label"].tolist() == ref.tolist() and "output_probability" not in data.files
    profiles = [{"X": ((1, 13), (30, 13), (64, 13))}]
    plan = trt_backend.search_precision(path, profiles, EMULATE, AutoOptions(allow=("fp16",)),
                                        feeds=[{"X": x[::6]}])
    assert plan.worst["output_label"] == 0.0 and plan.segments[0].precision == "fp16", plan.rounds


@pytest.mark.usefixtures("flavor")
def test_localizing_measures_a_segment_that_makes_maps(tmp_path, capsys) -> None:
    """The segment making ZipMap's maps read "stitched 0 ok" under --localize-always while the
    output table measured those maps' error (non-tensor values were left out of the segment check)."""
    import onnx

    from tests.support.graphs import ml_pipeline_model
    from trt_backend.cli import main

    m = ml_pipeline_model()  # (less its score: the segment making the maps then makes them and the labels alone)
    keep = [n for n in m.graph.node if n.op_type not in ("Log", "Neg", "ReduceSum")]
    del m.graph.node[:]
    m.graph.node.extend(keep)
    outputs = [o for o in m.graph.output if o.name != "score"]
    del m.graph.output[:]
    m.graph.output.extend(outputs)
    path = str(tmp_path / "pipeline.onnx")
    onnx.save(m, path)
    assert main(["compare", path, "--precision", "fp16", "--no-boundary-cost", "--min-segment-size", "1",
                 "--shapes", "X:8x4", "--atol", "1e-7", "--rtol", "1e-7", "--localize-always"]) == 1
    out = capsys.readouterr().out
    maps = next(line for line in out.splitlines() if line.startswith("prob_maps"))
    assert "FAILED" in maps
    makes = next(line for line in out.splitlines() if " onnxruntime onnxruntime " in line)  # (Scaler .. ZipMap)
    assert "stitched 0 ok" not in makes and "DIVERGES" in makes and "own 0 ok" in makes, makes


def test_several_comparisons_are_localized_where_the_failing_output_errs_most() -> None:
    """compare --all-profile-shapes (or several samples) with --localize localized the first
    failing comparison, without saying which, so its segment table disagreed with the output
    rows above it (the worst over every comparison). It localizes the comparison where the first
    failing output errs most, and says which."""
    from trt_backend.data.demo import DEMO_PATH
    from trt_backend.session.options import SessionOptions

    profile = [{"image": ((1, 3, 32, 32), (4, 3, 32, 32), (8, 3, 32, 32))}]
    options = SessionOptions(emulate=True, precision="fp16")
    report = compare(DEMO_PATH, CompareOptions(all_profile_shapes=True, localize="always", atol=1e-6, rtol=1e-6),
                     profiles=profile, session_options=options)
    note = next(n for n in report.notes if n.startswith("segments localized on comparison "))
    each = [compare(DEMO_PATH, CompareOptions(shapes={"image": shape}, seed=j, atol=1e-6, rtol=1e-6),
                    profiles=profile, session_options=options).outputs[0].error.max_abs_error
            for j, shape in enumerate(((1, 3, 32, 32), (4, 3, 32, 32), (8, 3, 32, 32)))]  # (comparison j: seed j)
    worst = int(np.argmax(each))
    assert note.startswith(f"segments localized on comparison {worst + 1} of 3 "), (note, each)
    assert report.outputs[0].error.max_abs_error == pytest.approx(max(each))

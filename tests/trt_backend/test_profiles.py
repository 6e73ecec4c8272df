"""Profiles: user profiles checked against the model, CLI shape specs, and derived profiles for
TensorRT segment inputs (symbolic, calibrated, shape-tensor values, data-dependent dims)."""
from __future__ import annotations

import json
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from partitioner.errors import OptionsError
from trt_backend.commands._shapes import cli_profiles, parse_shapes
from trt_backend.errors import CalibrationError, MissingProfileError, ProfileError
from trt_backend.profiles import TensorProfile, profiles_from_json, profiles_to_json
from trt_backend.profiles.derive import symbolic_profile
from trt_backend.profiles.node_arg import node_arg
from trt_backend.profiles.given import complete_profiles, normalize_profiles
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

X = node_arg("x", h.make_tensor_type_proto(T.FLOAT, ["N", 3, 8]))
K = node_arg("k", h.make_tensor_type_proto(T.INT64, [2]))


def test_user_profile_forms() -> None:
    (p,), _ = normalize_profiles([{"x": ((1, 3, 8), (2, 3, 8), (4, 3, 8))}], [X])
    assert p["x"] == TensorProfile((1, 3, 8), (2, 3, 8), (4, 3, 8))
    one = {"x": {"min": [1, 3, 8], "opt": [1, 3, 8], "max": np.array([5, 3, 8])}}  # one profile: no list needed
    (p,), _ = normalize_profiles(one, [X])  # type: ignore[arg-type]
    assert p["x"].max == (5, 3, 8)
    (p,), _ = normalize_profiles([{"x": (2, 3, 8)}], [X])
    assert p["x"].min == p["x"].opt == p["x"].max == (2, 3, 8)


@pytest.mark.parametrize("profiles, message", [
    ([{"x": ((4, 3, 8), (2, 3, 8), (1, 3, 8))}], r"profile 0, input 'x': need min <= opt <= max in every dim"),
    ([{"x": ((1, 3), (2, 3), (4, 3))}], r"profile 0, input 'x': expected rank 3 \(shape \['N', 3, 8\]\)"),
    ([{"x": ((1, 3, 8), (2, 3, 9), (4, 3, 9))}], r"dim 2 is fixed at 8 in the model"),
    ([{"y": (1, 3, 8)}], r"profile 0: 'y' is not a model input \(inputs: x\)"),
    ([{"x": ((1, 3, 8), (2, 3, 8))}], r"expected \(min_shape, opt_shape, max_shape\) or one shape"),
    ([{"x": ((1, 3, 8), (2, 3, 8), (-1, 3, 8))}], r"dims must be whole numbers >= 0"),
    ([{"x": {"min": (1, 3, 8)}}], r"missing opt, max"),
    (["x"], r"profile 0: expected a dict"),
    ("x", r"profiles must be a list of dicts"),
])
def test_bad_user_profiles(profiles, message) -> None:
    with pytest.raises(ProfileError, match=message):
        normalize_profiles(profiles, [X])


def test_static_inputs_fill_in_and_dynamic_ones_must_be_given() -> None:
    (full,) = complete_profiles([{"x": TensorProfile((1, 3, 8), (1, 3, 8), (2, 3, 8))}], [X, K], required=True)
    assert full["k"] == TensorProfile((2,), (2,), (2,), "static")
    with pytest.raises(MissingProfileError,
                       match=r"input 'x' has dynamic shape \['N', 3, 8\] and no profile gives one; "
                             r"CLI: --shapes x:1x3x8 \(dims the model leaves open set to 1; a range with "
                             r"--min-shapes/--opt-shapes/--max-shapes\); "
                             r"Python: profiles=\[\{'x': \(min_shape, opt_shape, max_shape\)\}\]"):
        complete_profiles([], [X, K], required=True)
    assert complete_profiles([], [X], required=False) == []


def test_the_shapes_line_to_paste_takes_the_sizes_given_for_shared_dims() -> None:
    """ids [batch, seq] given 3 x 30, mask [batch, seq] missing: the line suggests 3x30 (it said
    1x1, which the check that shared dims agree then refused); the random feeds' message too."""
    from trt_backend.errors import FeedError
    from trt_backend.session.feeds import random_feeds

    ids = node_arg("ids", h.make_tensor_type_proto(T.INT64, ["batch", "seq"]))
    mask = node_arg("mask", h.make_tensor_type_proto(T.INT64, ["batch", "seq", "heads"]))
    with pytest.raises(MissingProfileError, match=r"CLI: --shapes mask:3x30x1 "):
        complete_profiles([{"ids": TensorProfile((3, 30), (3, 30), (3, 30))}], [ids, mask], required=True)
    with pytest.raises(FeedError, match=r"\(e\.g\. --shapes mask:3x30x1\)"):
        random_feeds([ids, mask], {"ids": (3, 30)})
    pasted, _ = normalize_profiles([{"ids": ((3, 30),) * 3, "mask": ((3, 30, 1),) * 3}], [ids, mask])
    assert pasted[0]["mask"].opt == (3, 30, 1)  # what it suggests is taken


def test_shape_specs() -> None:
    assert parse_shapes("x:1x3x224x224,gpu_0/data:[2, 5],s:[],t:") == {
        "x": (1, 3, 224, 224), "gpu_0/data": (2, 5), "s": (), "t": ()}
    assert parse_shapes("input:0:4x4") == {"input:0": (4, 4)}
    for bad in ("x=1x3", "x:1xax3", "x:[1,,b]"):
        with pytest.raises(OptionsError):
            parse_shapes(bad)
    assert cli_profiles([], [], [], "x:2x3x8") == [{"x": ((2, 3, 8),) * 3}]
    assert cli_profiles(["x:1x3x8", "x:8x3x8"], ["x:2x3x8", "x:8x3x8"], ["x:4x3x8", "x:9x3x8"]) == [
        {"x": ((1, 3, 8), (2, 3, 8), (4, 3, 8))}, {"x": ((8, 3, 8), (8, 3, 8), (9, 3, 8))}]
    with pytest.raises(OptionsError, match="give --min-shapes, --opt-shapes and --max-shapes together"):
        cli_profiles(["x:1x3x8"], [], ["x:4x3x8"])


def test_symbolic_profiles_resolve_only_bound_symbols() -> None:
    binds = {"N": (1, 2, 4), "S": (1, 8, 16)}
    tp = symbolic_profile(h.make_tensor_type_proto(T.FLOAT, ["N", "S", 64]), binds)
    assert tp == TensorProfile((1, 1, 64), (2, 8, 64), (4, 16, 64), "symbolic")
    assert symbolic_profile(h.make_tensor_type_proto(T.FLOAT, ["N", "unk__0"]), binds) is None
    assert symbolic_profile(h.make_tensor_type_proto(T.FLOAT, None), binds) is None


def test_profile_json_round_trip() -> None:
    profiles = [{"a": TensorProfile((0, 3), (15, 3), (30, 3), "calibrated", None, (0,)),
                 "s": TensorProfile((2,), (2,), (2,), "calibrated", ((1, 4), (2, 4), (8, 4)))}]
    assert profiles_from_json(profiles_to_json(profiles)) == profiles


def _reshape_model() -> onnx.ModelProto:
    """x [N, 6] -> Reshape to the shape fed as input 'target' (excluded: ONNX Runtime) -> a
    TensorRT chain. The chain's input shape is data, so only calibration can find it."""
    nodes = [h.make_node("Reshape", ["x", "target"], ["r"], name="reshape"), h.make_node("Relu", ["r"], ["a"]),
             h.make_node("Mul", ["a", "a"], ["b"]), h.make_node("Add", ["b", "a"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["N", 6]),
                                  h.make_tensor_value_info("target", T.INT64, [3])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.usefixtures("oracle")
def test_calibration_with_real_feeds_where_random_data_fails(tmp_path, capsys) -> None:
    """Random data cannot derive the profile of a tensor whose shape is data (a Reshape's target
    fed as an input); real samples can: Python's calibration_feeds, and the samples every command
    runs (--inputs: run, compare and bench derived with random data, and failed on a sample the
    model runs)."""
    opts = SessionOptions(emulate=True, exclude_nodes=("reshape",), min_segment_size=1)
    profiles = [{"x": ((1, 6), (2, 6), (4, 6))}]
    with pytest.raises(CalibrationError, match=r"cannot derive profiles for r: the calibration run at profile 0 "
                                               r"(min|opt|max) shapes \(x \dx6, target 3, random values\) failed .*"
                                               r"give shapes the model runs at \(--shapes, or --min/--opt/--max-shapes"
                                               r"\), these tensors profiles, or real inputs to calibrate with "
                                               r"\(--inputs; in Python, calibration_feeds\)"):
        Session(_reshape_model(), profiles, opts)
    from trt_backend.cli import main

    path = str(tmp_path / "reshape.onnx")
    onnx.save(_reshape_model(), path)
    flags = ["--exclude-nodes", "reshape", "--min-segment-size", "1", "--emulate"]
    np.savez(tmp_path / "one.npz", x=np.arange(18, dtype=np.float32).reshape(3, 6),
             target=np.array([3, 2, 3], np.int64))
    assert main(["run", path, "--inputs", str(tmp_path / "one.npz"), *flags]) == 0
    assert "y: shape (3, 2, 3) float32" in capsys.readouterr().out
    assert main(["compare", path, "--inputs", str(tmp_path / "one.npz"), *flags]) == 0
    assert "PASSED" in capsys.readouterr().out
    assert main(["bench", path, "--inputs", str(tmp_path / "one.npz"), *flags, "--baselines", "none",
                 "--duration-s", "0.01", "--iterations", "1", "--rounds", "1", "--warmup-ms", "0",
                 "--no-progress"]) == 0
    capsys.readouterr()
    # a sample the model itself fails on is named as such, not as random values
    np.savez(tmp_path / "bad.npz", x=np.ones((3, 6), np.float32), target=np.array([4, 2, 3], np.int64))
    assert main(["run", path, "--inputs", str(tmp_path / "bad.npz"), *flags]) == 1
    err = capsys.readouterr().err
    assert "the model fails on the input sample given (profile 0 min shapes: x 3x6, target 3)" in err, err
    samples = [{"x": np.ones((n, 6), np.float32), "target": np.array([n, 2, 3], np.int64)} for n in (1, 2, 4)]
    sess = Session(_reshape_model(), profiles, opts, calibration_feeds=samples)
    r = sess.segment_profiles[1][0]["r"]
    assert (r.min, r.opt, r.max, r.source) == ((1, 2, 3), (2, 2, 3), (4, 2, 3), "calibrated")
    assert sess.run(None, samples[2])[0].shape == (4, 2, 3)


def test_a_build_derives_profiles_from_the_samples_given_as_run_and_compare_do(tmp_path, capsys) -> None:
    """``build --inputs`` and ``trt_backend.build(calibration_feeds=...)`` derive the segments'
    profiles from the samples, as a Session and compare do: a build of a model random inputs cannot
    calibrate (a graph network's node indices, here a Reshape's target) failed with an error that
    told the user to give --inputs, which the build then did not use."""
    from trt_backend import build
    from trt_backend.cli import main

    path = str(tmp_path / "reshape.onnx")
    onnx.save(_reshape_model(), path)
    samples: list[dict[str, np.ndarray]] = [{"x": np.ones((n, 6), np.float32), "target": np.array([n, 2, 3], np.int64)}
                                            for n in (1, 2, 4)]
    (tmp_path / "samples").mkdir()
    for k, sample in enumerate(samples):
        np.savez(tmp_path / "samples" / f"{k}.npz", x=sample["x"], target=sample["target"])
    ranges = ["--min-shapes", "x:1x6,target:3", "--opt-shapes", "x:2x6,target:3", "--max-shapes", "x:4x6,target:3"]
    flags = ["--exclude-nodes", "reshape", "--min-segment-size", "1", "-q"]
    assert main(["build", path, "-o", str(tmp_path / "cli"), *ranges, *flags]) == 1  # random values: refused
    assert "real inputs to calibrate with (--inputs" in capsys.readouterr().err
    assert main(["build", path, "-o", str(tmp_path / "cli"), *ranges, *flags, "--inputs",
                 str(tmp_path / "samples" / "2.npz")]) == 1  # no sample at the min or opt shapes: said so
    assert "none of the 1 real input sample(s) given has these shapes" in capsys.readouterr().err
    assert main(["build", path, "-o", str(tmp_path / "cli"), *ranges, *flags, "--inputs",
                 str(tmp_path / "samples")]) == 0
    capsys.readouterr()
    opts = SessionOptions(exclude_nodes=("reshape",), min_segment_size=1)
    profiles = [{"x": ((1, 6), (2, 6), (4, 6)), "target": ((3,), (3,), (3,))}]
    build(path, str(tmp_path / "py"), profiles, opts, calibration_feeds=samples)
    expected = Session(_reshape_model(), profiles, SessionOptions(emulate=True, exclude_nodes=("reshape",),
                                                                  min_segment_size=1),
                       calibration_feeds=samples).segment_profiles[1][0]["r"]
    assert (expected.min, expected.opt, expected.max) == ((1, 2, 3), (2, 2, 3), (4, 2, 3))
    for folder in ("cli", "py"):
        sess = Session.load(str(tmp_path / folder), SessionOptions(emulate=True))
        r = sess.segment_profiles[1][0]["r"]
        assert (r.min, r.opt, r.max, r.source) == (expected.min, expected.opt, expected.max, "calibrated"), folder
        np.testing.assert_array_equal(sess.run(None, samples[2])[0], np.full((4, 2, 3), 2, np.float32))


@pytest.mark.usefixtures("oracle")
def test_segment_input_outside_its_derived_profile_is_a_clear_error_and_an_override_fixes_it() -> None:
    opts = SessionOptions(emulate=True, exclude_nodes=("reshape",), min_segment_size=1)
    samples = [{"x": np.ones((n, 6), np.float32), "target": np.array([n, 2, 3], np.int64)} for n in (1, 2, 4)]
    sess = Session(_reshape_model(), [{"x": ((1, 6), (2, 6), (4, 6))}], opts, calibration_feeds=samples)
    feeds = {"x": np.ones((4, 6), np.float32), "target": np.array([4, 3, 2], np.int64)}
    with pytest.raises(ProfileError,
                       match=r"segment 1 \(tensorrt, executor emulated\): input 'r' has shape \(4, 3, 2\), "
                                           r"outside its profiles \(profile 0: min \(1, 2, 3\) opt \(2, 2, 3\) max "
                                           r"\(4, 2, 3\)\)\. .*give 'r' a profile"):
        sess.run(None, feeds)
    wide = [{"x": ((1, 6), (2, 6), (4, 6)), "r": ((1, 1, 1), (2, 2, 3), (4, 6, 6))}]
    sess = Session(_reshape_model(), wide, opts)  # no calibration needed: the user named the tensor
    assert sess.segment_profiles[1][0]["r"].source == "user"
    x = np.arange(24, dtype=np.float32).reshape(4, 6) - 10
    r = np.maximum(x.reshape(4, 3, 2), 0)
    np.testing.assert_allclose(sess.run(None, {**feeds, "x": x})[0], r * r + r)


@pytest.mark.usefixtures("oracle")
def test_nonzero_output_gets_its_bound_and_shape_tensors_their_values() -> None:
    nodes = [h.make_node("Greater", ["x", "half"], ["g"]), h.make_node("NonZero", ["g"], ["nz"], name="nonzero"),
             h.make_node("Transpose", ["nz"], ["idx"]), h.make_node("GatherND", ["x", "idx"], ["picked"]),
             h.make_node("Shape", ["x"], ["xs"], name="shape"), h.make_node("Reshape", ["x", "xs"], ["same"]),
             h.make_node("ReduceSum", ["picked"], ["total"], keepdims=0), h.make_node("Relu", ["same"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["N", 5])],
                     [h.make_tensor_value_info("total", T.FLOAT, None), h.make_tensor_value_info("y", T.FLOAT, None)],
                     [nh.from_array(np.array(0.5, np.float32), "half")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    sess = Session(m, [{"x": ((1, 5), (2, 5), (3, 5))}],
                   SessionOptions(emulate=True, exclude_nodes=("nonzero", "shape"), min_segment_size=1))
    seen = {n: tp for seg in sess.plan.tensorrt_segments() for p in sess.segment_profiles[seg.id]
            for n, tp in p.items()}
    assert (seen["nz"].min, seen["nz"].max, seen["nz"].data_dependent) == ((2, 0), (2, 15), (1,))  # 3 x 5 elements
    assert seen["xs"].values == ((1, 5), (2, 5), (3, 5))
    rng = np.random.default_rng(0)
    for n in (1, 3):
        x = rng.random((n, 5), dtype=np.float32)
        total, y = sess.run(None, {"x": x})
        np.testing.assert_allclose(total, x[x > 0.5].sum(), rtol=1e-6)
        np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_data_dependent_indices_read_as_data_are_not_called_a_shape_tensor(caplog) -> None:
    """A graph network's node indices reach a TensorRT segment as a small integer tensor read by
    a Gather: its values are calibrated (TensorRT could read such a tensor as a shape) but a
    widened range of them was warned about as a "shape tensor" the user should give a profile."""
    nodes = [h.make_node("Mul", ["x", "fifty"], ["x50"], name="mul"),
             h.make_node("Cast", ["x50"], ["idx"], to=T.INT64, name="cast"),
             h.make_node("Gather", ["table", "idx"], ["rows"], name="gather"), h.make_node("Relu", ["rows"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [3])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     [nh.from_array(np.arange(300, dtype=np.float32).reshape(100, 3) - 150, "table"),
                      nh.from_array(np.array(50, np.float32), "fifty")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    with caplog.at_level("WARNING"):
        sess = Session(m, [{"x": (3,)}], SessionOptions(emulate=True, exclude_nodes=("mul", "cast"),
                                                         min_segment_size=1))
    idx = next(p["idx"] for seg in sess.plan.tensorrt_segments() for p in sess.segment_profiles[seg.id])
    assert idx.values is not None and idx.values[0] != idx.values[2]  # (calibrated all the same, and widened)
    assert not [r for r in caplog.records if "idx" in r.getMessage()], caplog.text
    x = np.array([0.08, -0.14, 1.98], np.float32)  # rows 4, -7 and 99
    table = np.arange(300, dtype=np.float32).reshape(100, 3) - 150
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(table[[4, -7, 99]], 0))


def test_runner_profile_choice_is_remembered_per_shape_and_shape_tensor_value() -> None:
    from partitioner import Segment
    from trt_backend.runners.base import SegmentRunner

    class Echo(SegmentRunner):
        executor = "echo"

        def run_impl(self, inputs):  # (the form runners had before run options: still taken)
            return list(inputs)

    values = ((1, 5), (2, 5), (3, 5))
    profiles = [{"s": TensorProfile((2,), (2,), (2,), values=values), "x": TensorProfile((1, 5), (2, 5), (3, 5))},
                {"s": TensorProfile((2,), (2,), (2,), values=((4, 5), (4, 5), (6, 5))),
                 "x": TensorProfile((4, 5), (4, 5), (6, 5))}]
    r = Echo(Segment(0, "tensorrt", (0,), ("s", "x"), ("s", "x")), profiles, frozenset({"s"}))
    x2, x5 = np.zeros((2, 5), np.float32), np.zeros((5, 5), np.float32)
    for _ in range(2):  # the second round comes from the memo and must agree
        assert r.select_profile([np.array([2, 5]), x2]) == 0
        assert r.select_profile([np.array([5, 5]), x5]) == 1
        # same shapes as a remembered fit, other values: checked afresh, refused
        with pytest.raises(ProfileError, match=r"input 's' has values \(9, 5\), outside those its profiles were built "
                                               r"for"):
            r.select_profile([np.array([9, 5]), x2])
        with pytest.raises(ProfileError, match=r"input 'x' has shape \(7, 5\)"):
            r.run([np.array([2, 5]), np.zeros((7, 5), np.float32)])


def test_a_mismatch_names_the_input_that_misfits() -> None:
    """A small integer input read as data (not a shape tensor here) whose profile recorded values
    is not blamed for another input's shape: the error names the one outside its range."""
    from partitioner import Segment
    from trt_backend.runners.base import SegmentRunner

    class Echo(SegmentRunner):
        executor = "test"

        def run_impl(self, inputs):
            return list(inputs[:1])

    profile = {"count": TensorProfile((1,), (1,), (1,), "calibrated", ((0,), (3,), (100,))),
               "rows": TensorProfile((0, 4), (3, 4), (100, 4), "calibrated")}
    runner = Echo(Segment(0, "tensorrt", (0,), ("count", "rows"), ("out",)), [profile])
    with pytest.raises(ProfileError, match=r"input 'rows' has shape \(101, 4\), outside"):
        runner.run([np.array([101], np.int64), np.zeros((101, 4), np.float32)])
    assert runner.run([np.array([7], np.int64), np.zeros((7, 4), np.float32)])[0].tolist() == [7]


def test_a_profile_name_that_is_no_tensor_fails_before_planning(capsys) -> None:
    """A name that is no tensor of the model at all is refused right after loading (was: after
    planning, 8 s on SSDlite); a tensor that is not a model input is left for the plan to judge."""
    from trt_backend.cli import main
    from trt_backend.data.demo import DEMO_PATH
    from trt_backend.profiles.given import check_profile_names

    assert main(["run", DEMO_PATH, "--shapes", "images:1x3x32x32"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == ("trt-backend: error: profile 0: 'images' is not a model input (inputs: image) "
                   "nor a tensor of the model")
    graph = onnx.load(DEMO_PATH).graph
    inner = graph.node[0].output[0]
    check_profile_names([{"image": (1, 3, 32, 32), inner: (1, 3, 32, 32)}], graph)  # (no error: the plan decides)


@pytest.mark.parametrize("text, says", [
    ("image:-1x3x224x224", "dim '-1' of 'image' is not a whole number of 0 or more"),
    ("image:1.5x3", "dim '1.5' of 'image' is not a whole number of 0 or more"),
    ("a:1x2,image:1xBx3", "dim 'B' of 'image' is not a whole number of 0 or more"),
    ("x:[1,-2]", "dim '-2' of 'x' is not a whole number of 0 or more"),
    ("image=1x3", "'image=1x3' has no 'name:' before its dims"),
])
def test_a_shape_that_cannot_be_read_is_named_with_what_is_wrong(text, says) -> None:
    """The error named the whole text twice and not what was wrong; a negative dim in brackets
    was taken."""
    with pytest.raises(OptionsError, match=f"cannot read shapes {re.escape(repr(text))}: {re.escape(says)}; write"):
        parse_shapes(text)


def test_a_profile_giving_dims_named_alike_different_ranges_is_refused() -> None:
    """ids [B, T] beside mask [B, T] with T to 128 for one and to 64 for the other: the model takes
    them at one size only (feeds that differ are refused); the profile was accepted."""
    ids = node_arg("ids", h.make_tensor_type_proto(T.INT64, ["B", "T"]))
    mask = node_arg("mask", h.make_tensor_type_proto(T.FLOAT, ["B", "T"]))
    good = {"ids": ((1, 8), (2, 64), (4, 128)), "mask": ((1, 8), (2, 64), (4, 128))}
    assert normalize_profiles([good], [ids, mask])[0][0]["mask"].max == (4, 128)
    with pytest.raises(ProfileError, match=r"profile 0: inputs 'ids' and 'mask' share the dim 'T' \(dim 1 of 'ids', "
                                           r"dim 1 of 'mask'\), given as min/opt/max \(8, 64, 128\) and \(8, 32, 64\)"):
        normalize_profiles([{**good, "mask": ((1, 8), (2, 32), (4, 64))}], [ids, mask])


def test_an_input_given_two_shapes_is_refused() -> None:
    """`--shapes x:1x4,x:2x4` ran at the last one without a word."""
    with pytest.raises(OptionsError, match=r"shapes 'x:1x4,x:2x4' give input 'x' twice, as 1x4 and 2x4; give each "
                                           r"input one shape"):
        parse_shapes("x:1x4,x:2x4")
    assert parse_shapes("x:1x4,x:1x4") == {"x": (1, 4)}


@pytest.mark.parametrize("feeds, says", [({"x": np.ones((1, 6), np.float32)}, "got one mapping"),
                                         (5, "got int"), ([np.ones(3)], "a sample of type ndarray")])
def test_calibration_feeds_that_are_no_list_of_samples_are_one_error_at_both_doors(tmp_path, feeds, says) -> None:
    from trt_backend import build

    path = str(tmp_path / "reshape.onnx")
    onnx.save(_reshape_model(), path)
    profiles = [{"x": ((1, 6), (2, 6), (4, 6)), "target": ((3,), (3,), (3,))}]
    with pytest.raises(OptionsError, match=f"calibration_feeds must be a list of samples.*{says}"):
        build(path, str(tmp_path / "b"), profiles, calibration_feeds=feeds)
    with pytest.raises(OptionsError, match=f"calibration_feeds must be a list of samples.*{says}"):
        Session(path, profiles, calibration_feeds=feeds)
    assert not (tmp_path / "b").exists()


def test_a_profile_made_from_samples_says_so(tmp_path, capsys) -> None:
    """--inputs without profiles makes one spanning the samples' shapes; the folder recorded (and
    inspect showed) its source as "user"."""
    from trt_backend.cli import main
    from trt_backend.profiles import tensor_profile

    path = str(tmp_path / "reshape.onnx")
    onnx.save(_reshape_model(), path)
    (tmp_path / "samples").mkdir()
    for n in (1, 4):
        np.savez(tmp_path / "samples" / f"{n}.npz", x=np.ones((n, 6), np.float32), target=np.array([n, 2, 3], np.int64))
    assert main(["build", path, "-o", str(tmp_path / "b"), "--inputs", str(tmp_path / "samples"),
                 "--exclude-nodes", "reshape", "--min-segment-size", "1", "-q"]) == 0
    with open(tmp_path / "b" / "manifest.json") as f:
        x = json.load(f)["plan"]["input_profiles"][0]["x"]
    assert (x["min"], x["max"], x["source"]) == ([1, 6], [4, 6], "samples")
    # the Python door makes the same profile of the same samples (it asked for profiles= instead)
    from trt_backend import build

    samples = [{"x": np.ones((n, 6), np.float32), "target": np.array([n, 2, 3], np.int64)} for n in (1, 4)]
    manifest = build(path, str(tmp_path / "py"), None, SessionOptions(exclude_nodes=("reshape",), min_segment_size=1),
                     calibration_feeds=samples)
    assert manifest["plan"]["input_profiles"][0]["x"] == x
    with pytest.raises(ProfileError, match="source is one of user, samples, static, symbolic, calibrated"):
        tensor_profile({"min": (1,), "opt": (1,), "max": (1,), "source": "given"}, "profile 0, input 'x'")


def test_shapes_a_fixed_dim_refuses_are_one_error_without_a_probe_warning_first(caplog) -> None:
    """A type only a run can learn (after an op of ONNX Runtime's own domain) was probed at the
    shapes given before the profile check refused them: ONNX Runtime's words came first as a
    warning, then the error naming the dim."""
    import logging

    nodes = [h.make_node("Gelu", ["x"], ["g"], domain="com.microsoft", name="gelu"), h.make_node("Relu", ["g"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, "W"])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
    with caplog.at_level(logging.WARNING), pytest.raises(ProfileError, match="dim 0 is fixed at 1"):
        Session(m, [{"x": ((2, 8),) * 3}], SessionOptions(emulate=True))
    assert not caplog.records, caplog.text
    sess = Session(m, [{"x": ((1, 8),) * 3}], SessionOptions(emulate=True))  # (the probe runs at shapes it takes)
    assert sess.run(None, {"x": np.ones((1, 8), np.float32)})[0].shape == (1, 8)

"""Feeds from a file or from Python reach every door through one check: ``run``, ``compare`` and
``bench`` of a model file or of a build folder, and ``trt_backend.compare`` of either, refuse the
same bad feeds with the same one-line error naming the input (``compare`` of a folder used to hand
them to the reference unchecked: a traceback, or a PASSED verdict on an input fed under another
name), and a missing input is named as missing, not as an input without a profile. Inputs whose
dims the model names alike must agree on them (ONNX Runtime's broadcast error was all a user got),
unless ONNX Runtime runs the model on them: then the name was the exporter's mistake.
Samples given without a profile make one spanning their shapes at every door."""
from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import trt_backend
from trt_backend.cli import main
from trt_backend.errors import FeedError
from trt_backend.ort.threads import inference_session

pytestmark = pytest.mark.usefixtures("flavor")
FAST = ["--warmup-ms", "10", "--duration-s", "0.05", "--iterations", "2", "--rounds", "1", "--no-progress"]


def two_inputs() -> onnx.ModelProto:
    """x, y: float [N, 4] -> Relu(x + y) * x -> z, N dynamic."""
    nodes = [h.make_node("Add", ["x", "y"], ["s"]), h.make_node("Relu", ["s"], ["r"]),
             h.make_node("Mul", ["r", "x"], ["z"])]
    graph = h.make_graph(nodes, "two_inputs", [h.make_tensor_value_info(n, T.FLOAT, ["N", 4]) for n in ("x", "y")],
                         [h.make_tensor_value_info("z", T.FLOAT, ["N", 4])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("feeds")
    model = str(folder / "m.onnx")
    onnx.save(two_inputs(), model)
    built = str(folder / "m.build")
    assert main(["build", model, "-o", built, "--min-shapes", "x:1x4,y:1x4", "--opt-shapes", "x:2x4,y:2x4",
                 "--max-shapes", "x:8x4,y:8x4"]) == 0
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((2, 4)).astype(np.float32) for _ in range(2))
    files = {"good": {"x": x, "y": y}, "renamed": {"x": x, "w": y}, "missing": {"x": x},
             "float64": {"x": x, "y": y.astype(np.float64)}, "rank": {"x": x, "y": y[0]},
             "unequal": {"x": x, "y": np.concatenate([y, y[:1]])}}  # (2 rows beside 3: ONNX Runtime cannot add them)
    out = {"model": model, "folder": built}
    for name, feed in files.items():
        out[name] = str(folder / f"{name}.npz")
        np.savez(out[name], **feed)  # type: ignore[arg-type]
    return out


BAD = {"renamed": "unknown input 'w'", "missing": "missing input 'y'",
       "float64": "input 'y': expected dtype float32", "rank": "input 'y': expected rank 2",
       "unequal": "inputs 'x' and 'y' share the dim 'N' (dim 0 of 'x', dim 0 of 'y'), given as 2 and 3"}


@pytest.mark.parametrize("bad", sorted(BAD))
@pytest.mark.parametrize("door", ["run model", "run folder", "run model+shapes", "compare model", "compare folder",
                                  "compare model+shapes", "bench model", "bench folder", "bench model+shapes",
                                  "build model", "build model+shapes"])
def test_every_command_refuses_bad_feeds_in_one_line(paths, capsys, door, bad, tmp_path) -> None:
    """The same line, naming the file, before anything is printed or written: with or without
    profiles given, of a folder as of a model file (a folder, or a model given --shapes, used to
    print the session's header first and leave the file unnamed)."""
    command, target = door.split()
    extra = [*FAST] if command == "bench" else ["-o", str(tmp_path / "out")] if command == "build" else []
    if target.endswith("+shapes"):
        target, extra = "model", [*extra, "--shapes", "x:2x4,y:2x4"]
    if command != "build":
        extra.append("--emulate")
    rc = main([command, paths[target], "--inputs", paths[bad], *extra])
    out, err = capsys.readouterr()
    assert rc != 0 and err.startswith(f"trt-backend: error: --inputs {paths[bad]}: ") and "\n" not in err.strip(), err
    assert BAD[bad] in err and "Traceback" not in err and "dynamic shape" not in err
    assert out == "" and not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["run", "compare", "bench"])
def test_a_sample_outside_a_folders_profiles_is_named_before_anything_prints(paths, tmp_path, capsys, command) -> None:
    rows = np.zeros((9, 4), np.float32)  # (the folder's profile ends at 8 rows)
    np.savez(tmp_path / "nine.npz", x=rows, y=rows)
    extra = FAST if command == "bench" else []
    assert main([command, paths["folder"], "--inputs", str(tmp_path / "nine.npz"), "--emulate", *extra]) != 0
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"trt-backend: error: --inputs {tmp_path / 'nine.npz'}: input 'x': shape "
                                        "(9, 4) is outside every profile"), err


@pytest.mark.parametrize("command", ["run", "compare", "bench"])
@pytest.mark.parametrize("target", ["model", "folder"])
def test_shapes_the_samples_contradict_are_refused_not_dropped(paths, capsys, command, target) -> None:
    """``--shapes`` beside ``--inputs`` of other shapes: a folder's run ran the samples and dropped
    --shapes without a word (even shapes outside every profile); a model's built a profile the
    samples then fell outside of. One line at every door, naming both."""
    extra = FAST if command == "bench" else []
    assert main([command, paths[target], "--inputs", paths["good"], "--shapes", "x:16x4,y:16x4", "--emulate",
                 *extra]) != 0
    out, err = capsys.readouterr()
    assert out == "" and err == (f"trt-backend: error: --inputs {paths['good']}: input 'x' is 2x4, --shapes gives "
                                 "16x4: the samples run at their own shapes (give --shapes only to shape random "
                                 "inputs, or --min/--opt/--max-shapes for a profile spanning the samples)\n"), err
    assert main([command, paths[target], "--inputs", paths["good"], "--shapes", "x:2x4,y:2x4", "--emulate",
                 *extra]) == 0  # (the samples' own shapes: as without --shapes)
    capsys.readouterr()


@pytest.mark.parametrize("bad", sorted(BAD))
@pytest.mark.parametrize("target", ["model", "folder", "model+profiles"])
def test_python_compare_refuses_the_same_feeds(paths, target, bad) -> None:
    """The Python door names a bad feed as the CLI does, with profiles given too (the feeds then
    derived the segments' profiles first, and a float64 feed came out as a CalibrationError about
    an internal tensor)."""
    feed = dict(np.load(paths[bad]))
    profiles = [{"x": ((1, 4), (2, 4), (8, 4)), "y": ((1, 4), (2, 4), (8, 4))}] if target.endswith("profiles") else None
    with pytest.raises(FeedError, match=re.escape(BAD[bad])):
        trt_backend.compare(paths[target.split("+")[0]], feeds=[feed], profiles=profiles,
                            session_options=trt_backend.SessionOptions(emulate=True))


def test_samples_without_a_profile_make_one_at_every_door(paths, tmp_path, capsys) -> None:
    """``run`` of a model with a dynamic batch and ``--inputs`` takes the batch from the file (it
    asked for --shapes before, where ``compare`` and ``bench`` took them from the file), and its
    outputs are ONNX Runtime's; ``trt_backend.compare`` with feeds and no profile passes."""
    feed = dict(np.load(paths["good"]))
    out = str(tmp_path / "out.npz")
    assert main(["run", paths["model"], "--inputs", paths["good"], "--outputs", out, "--emulate"]) == 0
    ref = inference_session(paths["model"]).run(None, feed)[0]
    np.testing.assert_array_equal(np.load(out)["z"], ref)
    report = trt_backend.compare(paths["model"], feeds=[feed], session_options=trt_backend.SessionOptions(emulate=True))
    assert report.passed and report.outputs[0].elements == 8
    capsys.readouterr()
    assert main(["compare", paths["model"], "--inputs", paths["good"], "--emulate"]) == 0
    assert "inputs from" in capsys.readouterr().out


def test_an_inputs_file_that_is_no_npz_is_one_line(paths, tmp_path, capsys) -> None:
    """A single .npy array (a traceback before: numpy hands back an array, not an archive) and a
    text file (numpy's answer spoke of pickled data) each get one line saying what to give."""
    npy, text = tmp_path / "x.npy", tmp_path / "notes.npz"
    np.save(npy, np.zeros((2, 4), np.float32))
    text.write_text("x,y\n1,2\n")
    for path, what in ((npy, "a single .npy array, which names no input"), (text, "not an .npz file")):
        assert main(["run", paths["model"], "--inputs", str(path), "--emulate"]) == 1
        err = capsys.readouterr().err.strip()
        assert err == (f"trt-backend: error: --inputs {path}: {what}; give an .npz of arrays by input name, as "
                       "numpy.savez(path, name=array) writes")


def paddle_style() -> onnx.ModelProto:
    """x: float [-1, 3, '?', '?'] -> Relu -> y, as Paddle2ONNX declares a dynamic batch (-1) and
    every other dynamic dim ('?'): each means "unknown", not -1 and not one dim held equal."""
    graph = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "paddle_style",
                         [h.make_tensor_value_info("x", T.FLOAT, [-1, 3, "?", "?"])],
                         [h.make_tensor_value_info("y", T.FLOAT, [-1, 3, "?", "?"])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def test_dims_declared_as_minus_one_or_question_mark_are_unknown_at_every_door(tmp_path, capsys) -> None:
    """The model's load takes -1, 0 and '?' as unknown dims; the check of an --inputs file against
    the model's declared inputs (read from the file's bytes) took -1 as a fixed -1 and the two '?'
    as one dim that must agree (48 against 192), refusing what ONNX Runtime runs."""
    model, inputs = str(tmp_path / "p.onnx"), str(tmp_path / "in.npz")
    onnx.save(paddle_style(), model)
    x = np.random.default_rng(0).standard_normal((2, 3, 48, 192)).astype(np.float32)
    np.savez(inputs, x=x)
    out = str(tmp_path / "out.npz")
    assert main(["run", model, "--inputs", inputs, "--outputs", out, "--emulate"]) == 0
    np.testing.assert_array_equal(np.load(out)["y"], np.maximum(x, 0))
    assert main(["compare", model, "--inputs", inputs, "--emulate"]) == 0
    assert "PASSED" in capsys.readouterr().out
    report = trt_backend.compare(model, feeds=[{"x": x}], session_options=trt_backend.SessionOptions(emulate=True))
    assert report.passed and report.outputs[0].elements == x.size


def misnamed() -> onnx.ModelProto:
    """feats [1, n, w] and boxes [1, n, w], as PyTorch's exporter writes dynamic axes named alike
    by mistake (table recognition's LORE: features of 256 beside boxes of 8): each is summed over
    its last dim and the sums added, which ONNX Runtime runs at any two widths."""
    nodes = [h.make_node("ReduceSum", ["feats", "axis"], ["f"], keepdims=1),
             h.make_node("ReduceSum", ["boxes", "axis"], ["b"], keepdims=1), h.make_node("Add", ["f", "b"], ["y"])]
    graph = h.make_graph(nodes, "misnamed", [h.make_tensor_value_info(n, T.FLOAT, [1, "n", "w"])
                                             for n in ("feats", "boxes")],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, "n", 1])],
                         [h.make_tensor("axis", T.INT64, [1], [2])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def test_dim_names_the_inputs_share_by_mistake_yield_to_samples_onnx_runtime_runs(tmp_path, capsys, caplog) -> None:
    """Samples (or shapes) that size a shared dim name differently, which ONNX Runtime runs: every
    door refused them, so the model could not be used at all; the model's load now drops that
    name, with a warning, and every door runs it as ONNX Runtime does (TensorRT holds dims of one
    name equal: a build with the name kept fails)."""
    model = str(tmp_path / "lore.onnx")
    onnx.save(misnamed(), model)
    rng = np.random.default_rng(3)
    feed = {"feats": rng.random((1, 5, 6), dtype=np.float32), "boxes": rng.random((1, 5, 4), dtype=np.float32)}
    np.savez(tmp_path / "real.npz", **feed)  # type: ignore[arg-type]
    want = inference_session(model).run(None, feed)[0]
    out = str(tmp_path / "out.npz")
    assert main(["run", model, "--inputs", str(tmp_path / "real.npz"), "--outputs", out]) == 0
    np.testing.assert_array_equal(np.load(out)["y"], want)
    assert "dim name(s) the inputs share but the shapes given size differently, dropped: 'w' ('feats' dim 2 6, " \
           "'boxes' dim 2 4)" in caplog.text
    folder = str(tmp_path / "b")
    assert main(["build", model, "-o", folder, "--shapes", "feats:1x5x6,boxes:1x5x4"]) == 0
    capsys.readouterr()
    assert main(["compare", folder, "--inputs", str(tmp_path / "real.npz")]) == 0
    assert "PASSED" in capsys.readouterr().out
    assert main(["inspect", model, "--shapes", "feats:1x5x6,boxes:1x5x4"]) == 0
    sess = trt_backend.Session(model, [{"feats": ((1, 5, 6),) * 3, "boxes": ((1, 5, 4),) * 3}],
                               trt_backend.SessionOptions(emulate=True))
    assert [a.shape for a in sess.get_inputs()] == [[1, "n", None], [1, "n", None]]  # ('n' agrees: kept)
    np.testing.assert_array_equal(sess.run(None, feed)[0], want)
    assert trt_backend.compare(model, feeds=[feed], session_options=trt_backend.SessionOptions(emulate=True)).passed


def test_an_npz_whose_array_header_numpy_cannot_parse_is_one_line(paths, tmp_path, capsys) -> None:
    """A header cut short inside its dict: numpy's parser ends in a tokenizer error, which came
    out as a traceback from --inputs and from --calibration-data."""
    import struct
    import zipfile

    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (2,"
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    bad = str(tmp_path / "badhdr.npz")
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("x.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + bytes(32))
        z.writestr("y.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + bytes(32))
    said = "array 'x': its header cannot be read"
    assert main(["run", paths["model"], "--inputs", bad, "--emulate"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"trt-backend: error: --inputs {bad}: cannot read it as .npz") and \
        said in err, err
    assert main(["build", paths["model"], "-o", str(tmp_path / "b"), "--precision", "int8", "--calibration-data",
                 bad, "--shapes", "x:2x4,y:2x4"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and said in err and "calibration data" in err, err


def test_python_compare_names_a_bad_feed_before_its_samples_derive_profiles() -> None:
    """The demo's TensorRT segments read tensors ONNX Runtime makes, whose profiles the feeds
    derive: a float64 feed or a wrong name came out as a CalibrationError about an internal
    tensor (and a profile's shapes it does not have), where Session.run and the CLI say FeedError."""
    from trt_backend.data.demo import DEMO_PATH

    profiles = [{"image": ((1, 3, 32, 32), (4, 3, 32, 32), (8, 3, 32, 32))}]
    x = np.random.default_rng(0).random((2, 3, 32, 32))
    for feed, said in (({"image": x}, "feeds: input 'image': expected dtype float32 (tensor(float)), got float64"),
                       ({"img": x.astype(np.float32)}, "feeds: unknown input 'img'")):
        with pytest.raises(FeedError, match=re.escape(said)):
            trt_backend.compare(DEMO_PATH, profiles=profiles, feeds=[feed],
                                session_options=trt_backend.SessionOptions(emulate=True))

"""What a Session does where ONNX Runtime sets the expectation: an empty output list, outputs that
are the caller's inputs or the model's initializers, initializers fed as inputs, outputs listed
twice, and ``make_plan``'s shapes."""
from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import trt_backend
from partitioner.errors import OptionsError
from trt_backend.errors import FeedError
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

pytestmark = pytest.mark.usefixtures("oracle")  # needs a TensorRT parser

PROFILE = [{"x": ((1, 4), (2, 4), (4, 4))}]


def _model(path: str) -> None:
    """y = Relu(x @ W + bias); outputs y, the input mask passed through, and the initializer C.
    ``bias`` is a graph input with a default (its initializer), as older exporters write them."""
    rng = np.random.default_rng(0)
    inits = [nh.from_array(rng.standard_normal((4, 4)).astype(np.float32), "W"),
             nh.from_array(np.full((4,), 0.5, np.float32), "bias"), nh.from_array(np.arange(3, dtype=np.float32), "C")]
    nodes = [h.make_node("MatMul", ["x", "W"], ["m"]), h.make_node("Add", ["m", "bias"], ["a"]),
             h.make_node("Relu", ["a"], ["y"])]
    graph = h.make_graph(nodes, "like_ort", [h.make_tensor_value_info("x", T.FLOAT, ["n", 4]),
                                             h.make_tensor_value_info("mask", T.FLOAT, ["n", 4]),
                                             h.make_tensor_value_info("bias", T.FLOAT, [4])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["n", 4]),
                          h.make_tensor_value_info("mask", T.FLOAT, ["n", 4]),
                          h.make_tensor_value_info("C", T.FLOAT, [3])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


@pytest.fixture()
def path(tmp_path) -> str:
    p = str(tmp_path / "like_ort.onnx")
    _model(p)
    return p


def test_outputs_are_the_callers_own_arrays_never_its_inputs_or_the_sessions_constants(path) -> None:
    sess = Session(path, [{**PROFILE[0], "mask": PROFILE[0]["x"]}], SessionOptions(emulate=True))
    feeds = {"x": np.ones((2, 4), np.float32), "mask": np.zeros((2, 4), np.float32)}
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    y, mask, c = sess.run(None, feeds)
    assert all(np.array_equal(a, b) for a, b in zip((y, mask, c), ref))
    assert not np.shares_memory(mask, feeds["mask"])  # the caller's input was handed back: writing to it wrote both
    mask[:] = 99
    c[:] = -1  # (writable, and the session's constant stays as the model has it)
    assert feeds["mask"].max() == 0 and np.array_equal(sess.run(["C"], feeds)[0], np.arange(3, dtype=np.float32))
    # An empty list of outputs is every output, as ONNX Runtime takes it (it returned nothing).
    assert [o.shape for o in sess.run([], feeds)] == [(2, 4), (2, 4), (3,)]


def test_an_initializer_fed_as_an_input_is_named_as_one(path) -> None:
    """ONNX Runtime lets a feed override a graph input's default; the engine holds the default,
    so the feed is refused, saying why (it was "unknown input 'bias'")."""
    sess = Session(path, [{**PROFILE[0], "mask": PROFILE[0]["x"]}], SessionOptions(emulate=True))
    feeds = {"x": np.ones((2, 4), np.float32), "mask": np.zeros((2, 4), np.float32), "bias": np.ones(4, np.float32)}
    with pytest.raises(FeedError, match=r"'bias': the model's initializer\(s\) \(a graph input with a default value, "
                                        r"or a weight\), which trt-backend builds in as the model stores them"):
        sess.run(None, feeds)


def test_an_output_listed_twice_is_compared_once(tmp_path) -> None:
    w = h.make_tensor_value_info("w", T.FLOAT, [2, 3])
    graph = h.make_graph([h.make_node("Relu", ["x"], ["w"])], "dup", [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                         [w, w])
    p = str(tmp_path / "dup.onnx")
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), p)
    report = trt_backend.compare(p, session_options=SessionOptions(emulate=True))
    assert [(o.name, o.elements) for o in report.outputs] == [("w", 6)]  # (it said 12, twice)


def test_make_plan_takes_one_dict_of_shapes_or_a_list_and_names_what_is_wrong(path) -> None:
    one = trt_backend.make_plan(path, shapes={"x": (2, 4), "mask": (2, 4)})
    assert one.to_json() == trt_backend.make_plan(path, shapes=[{"x": (2, 4), "mask": (2, 4)}]).to_json()
    for bad, message in [("x:2x4", "shapes must be a dict of input name -> shape, or a list of them, got str"),
                         ({"x": "2x4"}, "shape of 'x' must be a list of whole numbers >= 0, got '2x4'"),
                         ({"x": (2, -1)}, r"shape of 'x' must be a list of whole numbers >= 0, got \(2, -1\)")]:
        with pytest.raises(OptionsError, match=message):
            trt_backend.make_plan(path, shapes=bad)


def test_the_onnx_backend_names_a_fed_initializer_as_the_session_does(path) -> None:
    """Through ``onnx.backend`` the same feed said "profile 0: 'bias' is not a model input"."""
    from trt_backend import onnx_backend

    rep = onnx_backend.prepare(onnx.load(path))
    feeds = {"x": np.ones((2, 4), np.float32), "mask": np.zeros((2, 4), np.float32), "bias": np.ones(4, np.float32)}
    with pytest.raises(FeedError, match=r"'bias': the model's initializer\(s\)"):
        rep.run(feeds)
    assert np.array_equal(rep.run({k: v for k, v in feeds.items() if k != "bias"})[1], feeds["mask"])


def _range_model(path: str) -> None:
    """y = float(Range(start, limit, delta)): three int64 scalars TensorRT reads as shape tensors."""
    graph = h.make_graph([h.make_node("Range", ["start", "limit", "delta"], ["r"]),
                          h.make_node("Cast", ["r"], ["rf"], to=T.FLOAT), h.make_node("Relu", ["rf"], ["y"])], "rng",
                         [h.make_tensor_value_info(n, T.INT64, []) for n in ("start", "limit", "delta")],
                         [h.make_tensor_value_info("y", T.FLOAT, None)])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), path)


def test_inputs_tensorrt_reads_as_shapes_take_their_values_from_the_samples(tmp_path, capsys) -> None:
    """A Range's limits as model inputs are shape tensors to TensorRT, whose profile must hold
    their values: build, compare and bench with --inputs refused them ("give its min/opt/max
    values", with no way to from the command line); a profile made from the samples now spans
    their values (a negative step too, which values-as-dims refused), a run outside them is
    refused naming the values, and without samples the error says how to give them."""
    from trt_backend.cli import main

    path = str(tmp_path / "range.onnx")
    _range_model(path)
    np.savez(tmp_path / "down.npz", start=np.array(10, np.int64), limit=np.array(4, np.int64),
             delta=np.array(-3, np.int64))
    inputs = str(tmp_path / "down.npz")
    assert main(["build", path, "-o", str(tmp_path / "plain")]) == 1
    assert "input 'start' is a shape tensor to TensorRT" in capsys.readouterr().err
    folder = str(tmp_path / "b")
    assert main(["build", path, "-o", folder, "--inputs", inputs]) == 0
    assert main(["compare", path, "--inputs", inputs]) == 0
    assert main(["bench", path, "--inputs", inputs, "--warmup-ms", "10", "--duration-s", "0.1", "--iterations", "3",
                 "--rounds", "1", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["inspect", folder]) == 0  # the profile table shows the values a run is held to
    assert re.search(r"delta +\[\] / \[\] / \[\]; values \(-3,\) / \(-3,\) / \(-3,\)", capsys.readouterr().out)
    sess = Session.load(folder, SessionOptions(emulate=True))
    feed = {"start": np.array(10, np.int64), "limit": np.array(4, np.int64), "delta": np.array(-3, np.int64)}
    assert sess.run(None, feed)[0].tolist() == [10.0, 7.0]
    with pytest.raises(trt_backend.errors.FeedError, match=r"input 'limit': values \(0,\) are outside every "
                                                           r"profile \(TensorRT reads it as a shape"):
        sess.run(None, {**feed, "limit": np.array(0, np.int64)})  # (the feed check's error, before anything runs)
    # In Python, values of any sign: a step from -5 to 5.
    profile = {n: {"min": (), "opt": (), "max": (), "values": ((lo,), (mid,), (hi,))}
               for n, lo, mid, hi in (("start", 0, 10, 20), ("limit", 0, 4, 20), ("delta", -5, -3, 5))}
    built = trt_backend.build(path, str(tmp_path / "py"), [profile])
    assert built["plan"]["input_profiles"][0]["delta"]["values"] == {"min": [-5], "opt": [-3], "max": [5]}


def test_a_profile_missing_an_input_is_named_without_a_probe_warning_first(tmp_path, caplog) -> None:
    """Types shape inference leaves unknown are learned by running the model at the profiles'
    shapes; an input the profile does not give got made-up dims that did not match the ones it
    shares by name with a given input, the run failed, and a misleading "types unknown" warning came
    before the one-line MissingProfileError. The made-up dims now follow the names the given shapes
    fix."""
    rng = np.random.default_rng(0)
    inits = [nh.from_array(rng.standard_normal((10, 4)).astype(np.float32), "E"),
             nh.from_array(np.array([2], np.int64), "ax")]
    nodes = [h.make_node("Gather", ["E", "ids"], ["emb"]), h.make_node("Unsqueeze", ["mask", "ax"], ["mask3"]),
             h.make_node("Mul", ["emb", "mask3"], ["y"])]
    graph = h.make_graph(nodes, "masked", [h.make_tensor_value_info("ids", T.INT64, ["b", "s"]),
                                           h.make_tensor_value_info("mask", T.FLOAT, ["b", "s"])],
                         [h.make_tensor_value_info("y", T.FLOAT, None),
                          h.make_tensor_value_info("mask", T.FLOAT, ["b", "s"])], inits)  # (mask passed through)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    path = str(tmp_path / "masked.onnx")
    onnx.save(model, path)
    with caplog.at_level("WARNING"), pytest.raises(trt_backend.errors.MissingProfileError, match="input 'mask'"):
        Session(path, [{"ids": ((1, 4), (2, 8), (4, 16))}], SessionOptions(emulate=True))
    assert "unknown after shape inference" not in caplog.text, caplog.text


def test_feeds_and_output_names_onnx_runtime_takes_are_taken() -> None:
    """ONNX Runtime runs nested lists, arrays of the other byte order and output names given as
    any iterable (a numpy array of names, dict keys); the session refused them. They are taken
    where the values are the input's as given; a list of fractions for an integer input, or
    ragged lists, is one FeedError naming the input."""
    import onnxruntime as ort

    from trt_backend.data.demo import DEMO_PATH

    sess = Session(DEMO_PATH, [{"image": ((1, 3, 32, 32), (2, 3, 32, 32), (4, 3, 32, 32))}],
                   SessionOptions(emulate=True))
    reference = ort.InferenceSession(DEMO_PATH, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).random((2, 3, 32, 32), dtype=np.float32)
    want = reference.run(None, {"image": x})
    for feed in (x.tolist(), x.astype(">f4")):
        got = sess.run(None, {"image": feed})
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    names = np.array(["top_classes", "probs"])
    got = sess.run(names, {"image": x})  # type: ignore[arg-type]
    assert [g.shape for g in got] == [w.shape for w in reference.run(list(names), {"image": x})]
    assert len(sess.run({"probs": 0}.keys(), {"image": x})) == 1  # type: ignore[arg-type]
    with pytest.raises(trt_backend.errors.FeedError, match=r"input 'image': cannot read the values as float32"):
        sess.run(None, {"image": [[1.0, 2.0], [3.0]]})
    with pytest.raises(trt_backend.errors.FeedError, match=r"input 'image': expected rank 4 .*got shape \(2, 3\)"):
        sess.run(None, {"image": [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]})  # (checked as an array is: rank, dims)
    sess.close()

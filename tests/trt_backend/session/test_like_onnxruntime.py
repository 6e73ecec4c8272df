"""What a Session does where ONNX Runtime sets the expectation: an empty output list, outputs that
are the caller's inputs or the model's initializers, initializers fed as inputs, outputs listed
twice, and ``make_plan``'s shapes."""
from __future__ import annotations

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

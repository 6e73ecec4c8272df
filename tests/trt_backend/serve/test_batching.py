"""Batching and the HTTP bodies without Ray: real emulated Sessions of the demo model, every answer
checked against whole-model ONNX Runtime."""
from __future__ import annotations

import io
import re
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from tests.helpers import model, vi
from tests.support.pipelines import digits_classifier
from trt_backend.data.demo import DEMO_PATH
from trt_backend.errors import FeedError, OptionsError, ProfileError, RequestError
from trt_backend.serve.batching import BatchRunner, Reply, batch_rows
from trt_backend.serve.codec import (
    decode_request,
    encode_reply,
    json_request,
    npz_request,
    read_reply,
)
from trt_backend.serve.options import ServeOptions
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

PROFILE = [{"image": ((1, 3, 32, 32), (4, 3, 32, 32), (8, 3, 32, 32))}]


@pytest.fixture(scope="module")
def session() -> Session:
    return Session(DEMO_PATH, PROFILE, SessionOptions(emulate=True))


@pytest.fixture(scope="module")
def reference() -> ort.InferenceSession:
    return ort.InferenceSession(DEMO_PATH, providers=["CPUExecutionProvider"])


def image(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 3, 32, 32)).astype(np.float32)


def assert_answer(got: Reply, x: np.ndarray, reference: ort.InferenceSession) -> None:
    assert isinstance(got, dict), got
    want = reference.run(None, {"image": x})
    assert list(got) == ["probs", "top_scores", "top_classes"]
    np.testing.assert_allclose(got["probs"], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["top_scores"], want[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got["top_classes"], want[2])


def test_rows_per_run_never_pass_the_profiles(session) -> None:
    assert batch_rows(session, 4) == 4
    assert batch_rows(session, 100) == 8  # the profile's max batch
    fixed = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 3])])
    assert batch_rows(Session(fixed, None, SessionOptions(emulate=True, flavor="none")), 8) is None
    # why not, said where serve prints "no batching": the tensor whose leading dim is not the others'
    assert BatchRunner(Session(fixed, None, SessionOptions(emulate=True, flavor="none")), 8).no_batching == \
        "input 'x' leads with a fixed 2, not a batch dim"
    apart = model([helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)], [vi("x", ["N", 3])], [vi("y", [])])
    assert BatchRunner(Session(apart, None, SessionOptions(emulate=True, flavor="none")), 8).no_batching == \
        "'y' is a scalar"
    assert BatchRunner(session, 4).no_batching is None


def test_serve_batches_what_export_triton_batches(tmp_path) -> None:
    """One rule for the model's batch dim at both doors: a scikit-learn classifier, whose dims
    skl2onnx leaves unnamed, batches in serve as its Triton export does (serve ran each request
    alone: it wanted a dim name); an output that does not follow the batch (found by running the
    model: shape inference cannot tell) stops both."""
    from trt_backend.errors import ExportError
    from trt_backend.export.repo import TritonOptions, triton_repo
    from trt_backend.export.source import from_model

    digits_model, X = digits_classifier()
    counted = model([helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Transpose", ["nz"], ["y"])],
                    [vi("x", [None, 3])], [vi("y", [None, 2], 7)])  # y: one row per nonzero element
    reference = ort.InferenceSession(digits_model.SerializeToString(), providers=["CPUExecutionProvider"])
    for proto, name, batches in ((digits_model, "X", True), (counted, "x", False)):
        cols = 64 if name == "X" else 3
        profile = [{name: ((1, cols), (4, cols), (8, cols))}]
        runner = BatchRunner(Session(proto, profile, SessionOptions(emulate=True)), 8)
        try:
            triton_repo(from_model(proto, profile, SessionOptions()), TritonOptions(max_batch_size=8))
            exported = True
        except ExportError as e:
            exported, refusal = False, str(e)
        assert (runner.no_batching is None) == exported == batches, (runner.no_batching, exported)
        if not batches:
            assert runner.no_batching == "output 'y' does not follow the batch: its leading dim was 3 at batch 1, " \
                                         "6 at batch 2"
            assert "'y'" in refusal and "does not follow the batch" in refusal
    runner = BatchRunner(Session(digits_model, [{"X": ((1, 64), (4, 64), (8, 64))}], SessionOptions(emulate=True)), 8)
    rows = [X[1200 + 10 * k:1200 + 10 * k + n] for k, n in enumerate((1, 3, 2, 5))]
    replies = runner.run([{"X": r} for r in rows])
    assert runner.stats.runs < len(rows)  # packed, not one run per request
    for got, r in zip(replies, rows):
        want = reference.run(None, {"X": r})
        assert isinstance(got, dict) and np.array_equal(got["label"], want[0])
        np.testing.assert_allclose(got["probabilities"], want[1], rtol=1e-5, atol=1e-6)


def test_a_model_whose_rows_depend_on_each_other_is_batched_at_neither_door(tmp_path) -> None:
    """A model that subtracts the mean over the batch passes every shape rule (its output follows
    the batch), so serve packed concurrent one-row requests into one run and split a 12-row
    request into runs of 8 and 4, answering each with other rows' statistics (HTTP 200, off by up
    to 32), and export-triton --max-batch-size let Triton's batcher do the same. A run of two rows
    against the first alone shows it: serve runs each request as sent, export refuses, in the
    same words."""
    from trt_backend.errors import ExportError
    from trt_backend.export.repo import TritonOptions, triton_repo
    from trt_backend.export.source import from_model

    centred = model([helper.make_node("Relu", ["x"], ["r"]),
                     helper.make_node("ReduceMean", ["r"], ["m"], axes=[0], keepdims=1),
                     helper.make_node("Sub", ["r", "m"], ["y"])], [vi("x", ["N", 4])], [vi("y", ["N", 4])], opset=17)
    profile = [{"x": ((1, 4), (4, 4), (8, 4))}]
    runner = BatchRunner(Session(centred, profile, SessionOptions(emulate=True)), 8)
    assert runner.no_batching is not None and runner.no_batching.startswith(
        "output 'y' differs by up to ") and "the model's rows depend on each other" in runner.no_batching
    x = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    requests = [{"x": x}, {"x": x[:1]}, {"x": x[1:2]}]
    replies = runner.run(requests)
    for got, request in zip(replies, requests):  # each as sent: its own rows' mean
        r = np.maximum(request["x"], 0)
        assert isinstance(got, dict)
        np.testing.assert_allclose(got["y"], r - r.mean(axis=0, keepdims=True), rtol=1e-6, atol=1e-6)
    with pytest.raises(ExportError, match=r"--max-batch-size 8: output 'y' differs by up to .* the model's rows "
                                          r"depend on each other"):
        triton_repo(from_model(centred, profile, SessionOptions()), TritonOptions(max_batch_size=8))


def test_a_row_check_that_cannot_run_leaves_batching_as_the_shapes_allow(tmp_path, caplog) -> None:
    """Without profiles the row check runs at made-up dims (1 for every dim but the batch), which
    a 3x3 Conv refuses: that failure turned batching off in serve and made export-triton
    --max-batch-size refuse a model it exported before. A check that cannot run is a warning;
    only a dependence measured stops batching."""
    import logging

    from onnx import TensorProto as T
    from onnx import numpy_helper as nh

    from trt_backend.export.repo import TritonOptions, triton_repo
    from trt_backend.export.source import from_model
    from trt_backend.serve.batching import no_batch_dim

    w = nh.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    conv = model([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3])],
                 [helper.make_tensor_value_info("x", T.FLOAT, ["N", 3, "H", "W"])],
                 [helper.make_tensor_value_info("y", T.FLOAT, ["N", 4, "H2", "W2"])], [w])
    options = SessionOptions(exclude_ops=("Conv",), emulate=True)
    with caplog.at_level(logging.WARNING):
        assert no_batch_dim(Session(conv, None, options)) is None
        triton_repo(from_model(conv, None, options), TritonOptions(max_batch_size=8))
    assert caplog.text.count("without checking that the model's rows are independent: a run to check failed") == 2


def test_mixed_requests_are_packed_split_and_answered(session, reference) -> None:
    runner = BatchRunner(session, 4)
    sizes = [1, 3, 2, 7, 1, 12, 4, 2]
    xs = [image(n, k) for k, n in enumerate(sizes)]
    replies = runner.run([{"image": x} for x in xs])
    for got, x in zip(replies, xs):
        assert_answer(got, x, reference)
    stats = runner.stats.as_dict()
    assert stats["split_requests"] == 2 and stats["largest_run"] == 4 and stats["rows"] == sum(sizes)
    assert stats["runs"] < sum(-(-n // 4) for n in sizes) + 1 and stats["runs"] >= -(-sum(sizes) // 4)


def test_one_bad_request_fails_alone(session, reference) -> None:
    runner = BatchRunner(session, 8)
    good = [image(2, 1), image(3, 2)]
    requests: list[Any] = [{"image": good[0]}, {"image": image(2, 3).astype(np.float64)},
                           {"image": np.zeros((1, 3, 16, 16), np.float32)}, {"image": good[1]}, {"picture": good[0]},
                           "not a mapping"]  # (the last is no mapping: Any)
    replies = runner.run(requests)
    assert_answer(replies[0], good[0], reference)
    assert_answer(replies[3], good[1], reference)
    assert isinstance(replies[1], FeedError) and "expected dtype float32" in str(replies[1])
    assert isinstance(replies[2], (FeedError, ProfileError)) and "(1, 3, 16, 16)" in str(replies[2])
    assert isinstance(replies[4], FeedError) and "'picture'" in str(replies[4])
    assert isinstance(replies[5], RequestError) and "got str" in str(replies[5])
    assert [str(replies[k]) for k in (1, 2, 4, 5) if "\n" in str(replies[k])] == []  # one line each (HTTP 400 bodies)
    # a request split into runs is refused naming the part whose shape the session names (it read
    # "got float64 array of shape (8, 3, 32, 32)" of a 12-row request)
    (split,) = runner.run([{"image": image(12, 4).astype(np.float64)}])
    assert isinstance(split, FeedError) and str(split).endswith(
        "got float64 array of shape (8, 3, 32, 32) (in rows 0..7 of the request's 12, which runs in parts of at most "
        "8 rows)"), split


def test_http_bodies_both_ways(session) -> None:
    x = image(2, 5)
    inputs = session.get_inputs()
    np.testing.assert_array_equal(decode_request(json_request({"image": x}), "application/json", inputs)["image"], x)
    nested = decode_request(b'{"inputs": {"image": ' + str(x.tolist()).encode() + b"}}", None, inputs)["image"]
    assert nested.dtype == np.float32 and np.array_equal(nested, x)  # cast to the model input's dtype
    np.testing.assert_array_equal(decode_request(npz_request({"image": x}), "application/x-npz", inputs)["image"], x)
    out = {"probs": x[:, 0, 0, :10], "top_classes": np.arange(6, dtype=np.int64).reshape(2, 3)}
    for npz, ctype in ((False, "application/json"), (True, "application/x-npz")):
        back = read_reply(encode_reply(out, npz), ctype)
        assert {k: (v.dtype, v.tolist()) for k, v in back.items()} == {k: (v.dtype, v.tolist()) for k, v in out.items()}
    for body, body_type, message in [
        (b"{nope", "application/json", "cannot read the request body as JSON"),
        (b'{"image": [1]}', "application/json", '{"inputs": {"<input name>": <array>, ...}}'),
        (b'{"inputs": {"image": {"data": [1, 2], "dtype": "float99"}}}', None, "unknown dtype 'float99'"),
        (b'{"inputs": {"image": {"data": [1, 2, 3], "shape": [2, 2]}}}', None, "3 values do not fill shape (2, 2)"),
        (b'{"inputs": {"image": [[1], [2, 3]]}}', None, "cannot read the values as float32"),
        (b"PK\x03\x04 not a zip", "application/x-npz", "cannot read the request body as .npz"),
        # numpy read other bytes as a pickle and answered "...load it unsafely using allow_pickle=..."
        (b"garbage", "application/x-npz", "the request body is not an .npz (a zip archive of arrays by input name"),
        (_npy(x), "application/x-npz", "the request body is a single .npy array, which names no input"),
        (_huge_npz(), "application/x-npz", "input 'image' in the request body: shape (1073741824, 3, 32, 32) of "
                                           "float32 needs 12.0 TiB"),
    ]:
        with pytest.raises(RequestError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                           .replace("{", r"\{").replace("}", r"\}").replace(".", r"\.")):
            decode_request(body, body_type, inputs)
    assert io.BytesIO(npz_request({"image": x})).read(2) == b"PK"


def _npy(x: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, x)
    return buffer.getvalue()


def _huge_npz() -> bytes:
    """An .npz whose member's header claims 12 TiB (a few bytes long)."""
    import zipfile

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                  "shape": (1 << 30, 3, 32, 32)})
    body = io.BytesIO()
    with zipfile.ZipFile(body, "w") as z:
        z.writestr("image.npy", b"\x93NUMPY\x01\x00" + header.getvalue()[8:] + b"\x00" * 64)
    return body.getvalue()


@pytest.mark.parametrize("kw, message", [
    ({"replicas": 0}, "replicas must be a whole number >= 1, got 0"),
    ({"max_batch_size": 16, "max_ongoing_requests": 8}, "max_ongoing_requests (8) must be >= max_batch_size (16)"),
    ({"batch_wait_ms": float("nan")}, "batch_wait_ms must be a finite number >= 0"),
    ({"port": 70000}, "port must be a whole number in 0..65535"),
    ({"route_prefix": "api"}, "route_prefix must start with '/'"),
])
def test_serve_options_are_checked(kw, message) -> None:
    with pytest.raises(OptionsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ServeOptions(**kw)


def test_an_npz_reply_loads_without_pickling_whatever_the_outputs() -> None:
    """A scikit-learn-style classifier's outputs through the batch runner as a replica serves them
    (an int64 label, ZipMap's sequence of maps, a float score) and a string output: the .npz
    reply was a pickled object array a client could load only with ``allow_pickle=True``; the
    maps now come as their JSON text (``NAME.json``), the same data the JSON reply gives."""
    import json

    from tests.support.graphs import ml_pipeline_model

    sess = Session(ml_pipeline_model(), [{"X": ((1, 4), (4, 4), (8, 4))}], SessionOptions(emulate=True))
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    names = [o.name for o in sess.get_outputs()]
    out = dict(zip(names, sess.run(None, {"X": x})))
    out["words"] = np.array(["a", "bc", "def"], dtype=object)
    with np.load(io.BytesIO(encode_reply(out, True)), allow_pickle=False) as data:
        back = {k: data[k] for k in data.files}
    assert sorted(back) == ["label", "prob_maps.json", "score", "words"]
    np.testing.assert_array_equal(back["label"], out["label"])
    np.testing.assert_array_equal(back["score"], out["score"])
    assert back["words"].tolist() == ["a", "bc", "def"]
    as_json = json.loads(encode_reply(out, False))["outputs"]
    assert json.loads(str(back["prob_maps.json"])) == as_json["prob_maps"]["data"]
    maps = json.loads(str(back["prob_maps.json"]))
    assert len(maps) == 3 and [sorted(m) for m in maps] == [["0", "1", "2"]] * 3
    assert [pytest.approx(list(m.values())) for m in maps] == [list(m.values()) for m in out["prob_maps"]]


def test_serving_a_value_that_is_no_path_is_one_error() -> None:
    """build_app and start are handed a build folder or a model file; anything else is an
    OptionsError before Ray is asked for anything (start would otherwise have started a cluster)."""
    pytest.importorskip("ray")
    from trt_backend.serve import build_app, start

    for door in (build_app, start):
        with pytest.raises(OptionsError, match=r"the source \(a build folder or a model file\) must be a path "
                                               r"\(a str or os.PathLike\), got int"):
            door(123)  # type: ignore[arg-type]


def test_json_bodies_refuse_what_a_cast_would_change_and_replies_stay_json() -> None:
    """A JSON request's values were cast as numpy casts: 1.7 for an int64 input became 1, "1"
    was taken for 1, 300 for a uint8 wrapped; a body nested a thousand deep ended in a
    RecursionError (HTTP 500); a reply holding inf or NaN was written as bare Infinity/NaN, which
    strict JSON readers refuse. Each is one error of the request now, and non-finite values travel
    as the strings "NaN", "Infinity", "-Infinity", read back as numbers."""
    import json

    from trt_backend.profiles.node_arg import NodeArg

    inputs = [NodeArg("i", [None], "tensor(int64)", 1, np.dtype(np.int64)),
              NodeArg("u", [None], "tensor(uint8)", 1, np.dtype(np.uint8)),
              NodeArg("f", [None], "tensor(float)", 1, np.dtype(np.float32))]

    def decode(doc: Any) -> dict[str, np.ndarray]:
        return decode_request(json.dumps({"inputs": doc}).encode(), "application/json", inputs)

    for doc, said in (({"i": [1.7, 0.2]}, "input 'i': int64 takes whole numbers, got 1.7"),
                      ({"i": ["1"]}, "input 'i': got text (or values of mixed kinds) where the model takes int64"),
                      ({"u": [300]}, "input 'u': values 300..300 do not fit uint8 (0..255)"),
                      ({"i": [float("inf")]}, "input 'i': int64 takes whole numbers, got inf")):
        with pytest.raises(RequestError, match=re.escape(said)):
            decode(doc)
    got = decode({"i": [1.0, 2], "u": [0, 255], "f": [1.5, "NaN", "-Infinity"]})
    assert got["i"].tolist() == [1, 2] and got["u"].dtype == np.uint8 and np.isnan(got["f"][1])
    deep = b'{"inputs": {"f": ' + b"[" * 5000 + b"]" * 5000 + b"}}"
    with pytest.raises(RequestError, match="nests deeper than a reader follows"):
        decode_request(deep, "application/json", inputs)
    body = encode_reply({"y": np.array([1.5, np.inf, np.nan, -np.inf], np.float32)}, npz=False)

    def strict(word: str) -> None:
        raise AssertionError(f"bare {word} in a JSON reply")

    json.loads(body, parse_constant=strict)
    back = read_reply(body, "application/json")["y"]
    assert back.dtype == np.float32 and back[0] == 1.5 and np.isposinf(back[1]) and np.isnan(back[2])
    assert np.isneginf(back[3])


def test_a_replica_refuses_a_folder_rebuilt_after_serving_began(tmp_path) -> None:
    """A replica that died is replaced, and the new one loads the folder again: rebuilt in the
    meantime, it served the new build beside replicas of the old one, under the old batching,
    without a word. It is refused, naming both digests."""
    import json

    from trt_backend.cli import main
    from trt_backend.errors import ServeError
    from trt_backend.serve.app import replica_session

    folder = str(tmp_path / "served")
    shapes = ["--min-shapes", "image:1x3x32x32", "--opt-shapes", "image:4x3x32x32", "--max-shapes", "image:8x3x32x32"]
    assert main(["build", DEMO_PATH, "-o", folder, *shapes]) == 0
    digest = json.load(open(f"{folder}/manifest.json"))["digest"]
    options = ServeOptions(session=SessionOptions(emulate=True))
    replica_session(folder, options, 0.0, digest).close()  # the build serving began with
    assert main(["build", DEMO_PATH, "-o", folder, *shapes[:2], "--opt-shapes", "image:2x3x32x32",
                 "--max-shapes", "image:4x3x32x32"]) == 0
    with pytest.raises(ServeError, match=r"served was rebuilt after serving began \(manifest digest sha256:.*, served "
                                         rf"{re.escape(digest[:19])}\): .*restart serve to serve the new one"):
        replica_session(folder, options, 0.0, digest)

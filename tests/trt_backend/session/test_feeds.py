"""Feed validation: every bad feed fails with one FeedError naming the input, what was expected
and what was given, before any segment runs."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from partitioner.errors import TrtBackendError
from trt_backend.data.demo import DEMO_PATH
from trt_backend.errors import FeedError
from trt_backend.profiles import TensorProfile
from trt_backend.profiles.node_arg import node_arg
from trt_backend.session.feeds import FeedValidator, random_feeds
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

pytestmark = pytest.mark.usefixtures("oracle")  # needs a TensorRT parser

PROFILES = [{"image": ((1, 3, 32, 32), (2, 3, 32, 32), (4, 3, 32, 32))},
            {"image": ((8, 3, 32, 32), (8, 3, 32, 32), (16, 3, 32, 32))}]


@pytest.fixture(scope="module")
def sess() -> Session:
    return Session(DEMO_PATH, PROFILES, SessionOptions(emulate=True))


@pytest.fixture()
def runs(sess, monkeypatch) -> list[int]:
    """Segment runs made meanwhile (to prove nothing ran)."""
    count: list[int] = []
    for runner in sess.runners:

        def counted(inputs, ro=None, _o=runner.run_impl):
            count.append(1)
            return _o(inputs, ro)

        monkeypatch.setattr(runner, "run_impl", counted)
    return count


def good(n: int = 2) -> np.ndarray:
    return np.zeros((n, 3, 32, 32), np.float32)


@pytest.mark.parametrize("feeds, message", [
    ({"image": good(), "extra": good()}, r"unknown input 'extra'; the model's inputs are: 'image' tensor\(float\) "
                                         r"\[batch, 3, 32, 32\]"),
    ({}, r"missing input 'image' \(expected tensor\(float\) of shape \[batch, 3, 32, 32\]\)"),
    ({"image": [[1.0, 2.0], [3.0]]}, r"input 'image': cannot read the values as float32"),
    ({"image": "pixels"}, r"input 'image': expected a numpy array \(tensor\(float\)\), got str"),
    ({"image": good().astype(np.float64)}, r"input 'image': expected dtype float32 \(tensor\(float\)\), "
                                           r"got float64 array of shape \(2, 3, 32, 32\)"),
    ({"image": np.zeros((3, 32, 32), np.float32)}, r"input 'image': expected rank 4 \(shape \[batch, 3, 32, 32\]\), "
                                                   r"got shape \(3, 32, 32\)"),
    ({"image": np.zeros((2, 4, 32, 32), np.float32)}, r"input 'image': dim 1 must be 3 \(shape \[batch, 3, 32, 32\]\), "
                                                      r"got shape \(2, 4, 32, 32\)"),
    ({"image": good(6)}, r"input 'image': shape \(6, 3, 32, 32\) is outside every profile: profile 0 allows min "
                         r"\(1, 3, 32, 32\) opt \(2, 3, 32, 32\) max \(4, 3, 32, 32\); profile 1 allows min "
                         r"\(8, 3, 32, 32\) opt \(8, 3, 32, 32\) max \(16, 3, 32, 32\)"),
    ([("image", good())], r"feeds must be a dict of input name -> numpy array, got list"),
])
def test_bad_feeds_fail_before_anything_runs(sess, runs, feeds, message) -> None:
    with pytest.raises(FeedError, match=message) as info:
        sess.run(None, feeds)
    assert isinstance(info.value, TrtBackendError) and "\n" not in str(info.value)
    assert runs == []


@pytest.mark.parametrize("names, message", [
    (["probs", "logits"],
     r"unknown output name\(s\) 'logits'; the model's outputs are: probs, top_scores, top_classes"),
    ("probs", r"output names must be a list of names or None, got str"),
])
def test_bad_output_names_fail_before_anything_runs(sess, runs, names, message) -> None:
    with pytest.raises(FeedError, match=message):
        sess.run(names, {"image": good()})
    assert runs == []


def test_shapes_in_any_profile_run(sess, runs) -> None:
    for n in (1, 4, 8, 16):
        assert sess.run(["probs"], {"image": good(n)})[0].shape == (n, 10)
    assert len(runs) == 4 * 3


def test_several_inputs_name_which_misses_each_profile() -> None:
    args = [node_arg("a", h.make_tensor_type_proto(T.FLOAT, ["n"])),
            node_arg("b", h.make_tensor_type_proto(T.FLOAT, ["m"]))]
    profiles = [{"a": TensorProfile((1,), (2,), (4,)), "b": TensorProfile((1,), (2,), (4,))},
                {"a": TensorProfile((8,), (8,), (9,)), "b": TensorProfile((8,), (8,), (9,))}]
    v = FeedValidator(args, [], profiles)
    assert v.check_profiles({"a": (2,), "b": (3,)}) == 0 and v.check_profiles({"a": (8,), "b": (9,)}) == 1
    with pytest.raises(FeedError, match=r"the feeds fit no profile: profile 0: input 'a' has shape \(8,\), allowed min "
                                        r"\(1,\) opt \(2,\) max \(4,\); profile 1: input 'b' has shape \(3,\)"):
        v.check_profiles({"a": (8,), "b": (3,)})


def test_string_sequence_and_optional_inputs_are_checked() -> None:
    seq = node_arg("s", h.make_sequence_type_proto(h.make_tensor_type_proto(T.FLOAT, None)))
    opt = node_arg("o", h.make_optional_type_proto(h.make_tensor_type_proto(T.FLOAT, [2])))
    text = node_arg("t", h.make_tensor_type_proto(T.STRING, [2]))
    assert (seq.type, opt.type, text.type) == ("seq(tensor(float))", "optional(tensor(float))", "tensor(string)")
    v = FeedValidator([seq, opt, text], [], [])
    fed = v.validate({"s": [np.zeros(2, np.float32)], "o": None, "t": np.array(["a", "b"])})
    assert fed["t"].dtype == object and fed["o"] is None
    with pytest.raises(FeedError, match=r"input 's': expected a list of numpy arrays \(seq\(tensor\(float\)\)\), got "
                                        r"float32 array"):
        v.validate({"s": np.zeros(2, np.float32), "o": None, "t": np.array(["a", "b"])})


def test_random_feeds_need_shapes_for_dynamic_inputs(sess) -> None:
    feeds = random_feeds(sess.get_inputs(), {"image": (3, 3, 32, 32)}, seed=1)
    assert feeds["image"].shape == (3, 3, 32, 32) and feeds["image"].dtype == np.float32
    again = random_feeds(sess.get_inputs(), {"image": (3, 3, 32, 32)}, seed=1)
    np.testing.assert_array_equal(feeds["image"], again["image"])
    with pytest.raises(FeedError, match=r"input 'image' has dynamic shape \[batch, 3, 32, 32\]; give its shape "
                                        r"\(e.g. --shapes image:1x3x32x32\)"):
        random_feeds(sess.get_inputs(), {})


def test_a_scalar_input_gets_random_data_as_a_0d_array_at_every_door(tmp_path, capsys) -> None:
    """numpy draws a bare scalar for shape (); ONNX Runtime refuses one ("Unable to handle object
    of type numpy.float32"), so compare, bench and an auto build of a model with a scalar input
    failed (bench with a traceback) unless real inputs were given."""
    import onnx

    from trt_backend.cli import main
    from trt_backend.ort.random_data import random_array

    for dtype in (np.float32, np.float16, np.int64, np.bool_):
        value = random_array(np.dtype(dtype), (), np.random.default_rng(0))
        assert isinstance(value, np.ndarray) and value.shape == () and value.dtype == dtype
    graph = h.make_graph([h.make_node("Mul", ["x", "t"], ["y"])], "scaled",
                         [h.make_tensor_value_info("x", T.FLOAT, [2, 8]), h.make_tensor_value_info("t", T.FLOAT, [])],
                         [h.make_tensor_value_info("y", T.FLOAT, [2, 8])])
    path = str(tmp_path / "scalar.onnx")
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), path)
    assert main(["compare", path]) == 0
    assert main(["bench", path, "--warmup-ms", "20", "--duration-s", "0.1", "--iterations", "3", "--rounds", "1",
                 "--no-progress"]) == 0
    assert main(["build", path, "-o", str(tmp_path / "auto"), "--precision", "auto"]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_input_names_with_slashes_read_from_npz_files(tmp_path, capsys) -> None:
    """TensorFlow-converted models name inputs like 'enc/x:0'. An .npz of one input set by name,
    and a run compare saves (inputs/<k>/<name>, outputs/<k>/<name>), read back whole; a file
    that mixes the two forms is one error naming the odd key."""
    import onnx

    from trt_backend.cli import main
    from trt_backend.session.feeds import read_feeds, read_run, write_run

    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    np.savez(tmp_path / "one.npz", **{"enc/x:0": x, "mask": x > 3})  # type: ignore[arg-type]
    (feed,) = read_feeds(str(tmp_path / "one.npz"))
    assert sorted(feed) == ["enc/x:0", "mask"] and np.array_equal(feed["enc/x:0"], x)
    write_run(str(tmp_path / "run.npz"), [{"enc/x:0": x}, {"enc/x:0": x + 1}], [{"dec/y:0": x * 2}, {"dec/y:0": x}])
    feeds, outputs = read_run(str(tmp_path / "run.npz"))
    assert [sorted(f) for f in feeds] == [["enc/x:0"]] * 2 and np.array_equal(outputs[0]["dec/y:0"], x * 2)
    np.savez(tmp_path / "mixed.npz", **{"0/enc/x:0": x, "enc/x:0": x})  # type: ignore[arg-type]
    with pytest.raises(FeedError, match=r"array 'enc/x:0' is not <k>/<name>"):
        read_feeds(str(tmp_path / "mixed.npz"))
    graph = h.make_graph([h.make_node("Relu", ["enc/x:0"], ["dec/y:0"])], "slashes",
                         [h.make_tensor_value_info("enc/x:0", T.FLOAT, [4, 8])],
                         [h.make_tensor_value_info("dec/y:0", T.FLOAT, [4, 8])])
    path = str(tmp_path / "slash.onnx")
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), path)
    np.savez(tmp_path / "in.npz", **{"enc/x:0": x})  # type: ignore[arg-type]
    assert main(["run", path, "--inputs", str(tmp_path / "in.npz")]) == 0
    saved = str(tmp_path / "saved.npz")
    assert main(["compare", path, "--inputs", str(tmp_path / "in.npz"), "--save-outputs", saved]) == 0
    assert main(["compare", path, "--load-outputs", saved]) == 0


def test_a_feed_of_a_kind_that_passed_before_is_not_checked_again_but_others_are(sess) -> None:
    """A serving loop feeds the same dtypes and shapes again and again: once such a feed passed,
    its like passes without the checks; any other kind (a dtype, a shape outside the profiles, a
    missing or extra input, a list) is still checked and refused."""
    good = {"image": np.zeros((2, 3, 32, 32), np.float32)}
    first = sess.run(None, good)
    validator = sess._validator
    assert validator._key(good) in validator._passed
    again = sess.run(None, {"image": np.zeros((2, 3, 32, 32), np.float32)})
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    for bad, message in [({"image": np.zeros((2, 3, 32, 32), np.float64)}, "expected dtype float32"),
                         ({"image": np.zeros((5, 3, 32, 32), np.float32)}, "outside every profile"),
                         ({}, "missing input 'image'"),
                         ({"image": np.zeros((2, 3, 32, 32), np.float32), "x": np.zeros(1)}, "unknown input 'x'"),
                         ({"image": np.zeros((2, 3, 32, 32), np.float32).tolist()[:1] + [[0.5]]},
                          "cannot read the values as float32")]:
        with pytest.raises(FeedError, match=message):
            sess.run(None, bad)

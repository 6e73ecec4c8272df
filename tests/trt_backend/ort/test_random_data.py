"""The one random-input generator: its ranges per dtype are the documented ones, and every door
that makes random data (run, bench, compare, --calibration-data random, profile derivation)
feeds the same seed the same data."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from partitioner import load_model
from trt_backend.accuracy.compare import compare
from trt_backend.accuracy.options import CompareOptions
from trt_backend.bench.loop import BenchOptions, run_bench
from trt_backend.bench.timing import TimingConfig
from trt_backend.cli import main
from trt_backend.engines.calibration import RANDOM, InputSpec, load_calibration
from trt_backend.errors import MemoryLimitError, OptionsError
from trt_backend.ort.random_data import FLOAT_RANGE, INT_RANGE, STRINGS, random_array, random_feed
from trt_backend.ort.values import memory_limit
from trt_backend.profiles.derive import calibrate
from trt_backend.profiles.profile import TensorProfile
from trt_backend.session.feeds import read_run
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

SEED = 7
TENSORS: list[tuple[str, np.dtype[Any], tuple[int, ...]]] = [
    ("x", np.dtype(np.float32), (2, 3)), ("i", np.dtype(np.int64), (4,)), ("b", np.dtype(np.bool_), (5,))]


def _identity_model() -> onnx.ModelProto:
    """Each input copied to an output: what a run returns is what it was fed."""
    types = {"x": (T.FLOAT, [2, 3]), "i": (T.INT64, [4]), "b": (T.BOOL, [5])}
    nodes = [h.make_node("Identity", [n], [f"{n}_out"], name=f"copy_{n}") for n in types]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, t, s) for n, (t, s) in types.items()],
                     [h.make_tensor_value_info(f"{n}_out", t, s) for n, (t, s) in types.items()])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _same(got: dict[str, Any], want: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype, name
        np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_default_ranges_are_the_documented_ones() -> None:
    rng = np.random.default_rng(0)
    f = random_array(np.dtype(np.float32), (100_000,), rng)
    assert f.dtype == np.float32 and FLOAT_RANGE == (0.0, 1.0)
    assert 0.0 <= f.min() < 0.01 and 0.99 < f.max() < 1.0
    i = random_array(np.dtype(np.int32), (10_000,), rng)
    assert INT_RANGE == (0, 2) and sorted(np.unique(i).tolist()) == [0, 1, 2]  # both ends drawn
    b = random_array(np.dtype(np.bool_), (10_000,), rng)
    assert b.dtype == np.bool_ and 0.45 < b.mean() < 0.55
    s = random_array(np.dtype(object), (1_000,), rng)
    assert set(s.tolist()) == set(STRINGS) == {"a", "b", "c"}
    c = random_array(np.dtype(np.complex64), (10_000,), rng)
    assert 0 <= c.real.min() and c.real.max() < 1 and 0 <= c.imag.min() and c.imag.max() < 1


def test_given_ranges_bound_floats_half_open_and_integers_inclusive() -> None:
    rng = np.random.default_rng(1)
    f = random_array(np.dtype(np.float64), (100_000,), rng, value_range=(-3.0, -1.0))
    assert -3.0 <= f.min() < -2.99 and -1.01 < f.max() < -1.0
    i = random_array(np.dtype(np.uint8), (10_000,), rng, value_range=(250, 255))
    assert i.dtype == np.uint8 and sorted(np.unique(i).tolist()) == [250, 251, 252, 253, 254, 255]


def test_bad_ranges_and_sizes_are_clear_errors() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(OptionsError, match=r"input 'i': value range 0..300 does not fit uint8 \(0..255\)"):
        random_array(np.dtype(np.uint8), (2,), rng, "input 'i'", (0, 300))
    with pytest.raises(OptionsError, match=r"a value range needs finite low <= high, got \(1.0, 0.0\)"):
        random_array(np.dtype(np.float32), (2,), rng, value_range=(1.0, 0.0))
    with pytest.raises(OptionsError, match=r"a value range is \(low, high\), got 'ab'"):
        random_array(np.dtype(np.float32), (2,), rng, value_range="ab")  # type: ignore[arg-type]
    with memory_limit(1000), pytest.raises(MemoryLimitError, match=r"input 'x': shape \(1000,\) of float32"):
        random_feed([("x", np.dtype(np.float32), (1000,))], 0)


def test_a_feed_is_its_seed() -> None:
    _same(random_feed(TENSORS, SEED), random_feed(TENSORS, SEED))
    other = random_feed(TENSORS, SEED + 1)
    assert not np.array_equal(other["x"], random_feed(TENSORS, SEED)["x"])


def test_run_bench_compare_calibration_and_derivation_feed_the_same_data(tmp_path, monkeypatch) -> None:
    want = random_feed(TENSORS, SEED)
    path = str(tmp_path / "m.onnx")
    onnx.save(_identity_model(), path)

    # run: the identity model's outputs are its random inputs
    out = tmp_path / "out.npz"
    assert main(["run", path, "--emulate", "--seed", str(SEED), "--outputs", str(out)]) == 0
    with np.load(out) as saved:
        _same({n.removesuffix("_out"): saved[n] for n in saved.files}, want)

    # bench: what its session is run with, seen by a spy on Session.run
    fed: list[dict[str, Any]] = []
    real_run = Session.run

    def spy(self: Session, names: Any, feeds: Any, *args: Any, **kwargs: Any) -> Any:
        fed.append(dict(feeds))
        return real_run(self, names, feeds, *args, **kwargs)

    monkeypatch.setattr(Session, "run", spy)
    timing = TimingConfig(warmup_s=0.001, duration_s=0.001, min_iterations=1, rounds=1, pause_s=0.0)
    run_bench(path, BenchOptions(baselines=(), timing=timing, build=False, seed=SEED), SessionOptions(emulate=True))
    assert fed
    for feeds in fed:
        _same(feeds, want)
    monkeypatch.undo()

    # compare: the inputs it saves; its second iteration is seed + 1
    saved_run = str(tmp_path / "run.npz")
    compare(path, CompareOptions(seed=SEED, iterations=2), save_outputs=saved_run,
            session_options=SessionOptions(emulate=True))
    saved, _ = read_run(saved_run)
    _same(saved[0], want)
    _same(saved[1], random_feed(TENSORS, SEED + 1))

    # --calibration-data random: batch k is seed + k
    specs = [InputSpec.of(vi) for vi in _identity_model().graph.input]
    data = load_calibration(RANDOM, specs, seed=SEED)
    batches = list(data.batches)
    _same(batches[0], want)
    _same(batches[1], random_feed(TENSORS, SEED + 1))

    # profile derivation: its first random run (at the profile's min shapes) is seed, then seed + 1
    runs: list[dict[str, Any]] = []

    def make_runner(fetch: Any) -> Any:
        def run(names: Any, feeds: Any) -> list[Any]:
            runs.append(dict(feeds))
            return [feeds[n] for n in names]
        return run

    model = load_model(path)
    profile = {n: TensorProfile(s, s, s) for n, _, s in TENSORS}
    inputs = Session(path, None, SessionOptions(emulate=True)).get_inputs()
    calibrate(model, ["x"], inputs, [profile], make_runner, seed=SEED)
    _same(runs[0], want)
    _same(runs[1], random_feed(TENSORS, SEED + 1))


def _embeddings() -> onnx.ModelProto:
    """BERT's embedding lookups: token ids into a 50-row table, token types (through a Cast and an
    Unsqueeze/Squeeze pair) into a 2-row one, a mask multiplied in (an integer used otherwise)."""
    rng = np.random.default_rng(0)
    tables = [onnx.numpy_helper.from_array(rng.standard_normal((rows, 4)).astype(np.float32), name)
              for name, rows in (("words", 50), ("types", 2))]
    nodes = [h.make_node("Gather", ["words", "ids"], ["w"]),
             h.make_node("Cast", ["types_in"], ["t32"], to=T.INT32),
             h.make_node("Unsqueeze", ["t32", "ax"], ["t3"]), h.make_node("Squeeze", ["t3", "ax"], ["t"]),
             h.make_node("Gather", ["types", "t"], ["e"]), h.make_node("Add", ["w", "e"], ["s"]),
             h.make_node("Cast", ["mask"], ["m"], to=T.FLOAT), h.make_node("Unsqueeze", ["m", "last"], ["m3"]),
             h.make_node("Mul", ["s", "m3"], ["y"])]
    ints = [h.make_tensor_value_info(n, T.INT64, ["B", "S"]) for n in ("ids", "types_in", "mask")]
    graph = h.make_graph(nodes, "embeddings", ints, [h.make_tensor_value_info("y", T.FLOAT, ["B", "S", 4])],
                         [*tables, onnx.numpy_helper.from_array(np.array([2], np.int64), "ax"),
                          onnx.numpy_helper.from_array(np.array([-1], np.int64), "last")])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def test_inputs_that_index_a_table_stay_within_its_rows(tmp_path, capsys) -> None:
    """Random token types were drawn from 0..2 for a 2-row table, so run and compare of a BERT
    ended in ONNX Runtime's "indices element out of data bounds". An input whose values reach a
    Gather's indices takes 0..rows-1 of its smallest table, at every door that draws random data."""
    from trt_backend.ort.random_data import index_ranges

    model = _embeddings()
    assert index_ranges(model.graph) == {"ids": INT_RANGE, "types_in": (0, 1)}  # mask: the default
    path = str(tmp_path / "emb.onnx")
    onnx.save(model, path)
    shapes = ["--shapes", "ids:2x64,types_in:2x64,mask:2x64"]
    assert main(["run", path, *shapes, "--emulate", "--outputs", str(tmp_path / "o.npz")]) == 0
    out = capsys.readouterr().out
    assert "types_in: shape (2, 64) int64  min 0 max 1" in out and "mask: shape (2, 64) int64  min 0 max 2" in out
    assert main(["compare", path, *shapes, "--emulate", "--iterations", "3"]) == 0
    assert "PASSED" in capsys.readouterr().out
    # ranges given win, at run and bench as at compare; one for a name that is no input is refused
    assert main(["run", path, *shapes, "--emulate", "--int-range", "mask:1,1", "--int-range", "ids:7,9"]) == 0
    out = capsys.readouterr().out
    assert "mask: shape (2, 64) int64  min 1 max 1" in out and "ids: shape (2, 64) int64  min 7 max 9" in out
    for command in (["run"], ["bench", "--baselines", "none", "--duration-s", "0.01", "--iterations", "1",
                              "--rounds", "1", "--warmup-ms", "0", "--no-progress"], ["compare"]):
        assert main([*command, path, *shapes, "--emulate", "--int-range", "nope:0,1"]) == (
            2 if command == ["compare"] else 1)
        assert "value range for unknown input(s) nope" in capsys.readouterr().err
    # the Python door's compare and an int8 build calibrated on random data draw the same way
    profile = {n: ((1, 1), (2, 64), (2, 64)) for n in ("ids", "types_in", "mask")}
    report = compare(path, CompareOptions(iterations=2), profiles=[profile],
                     session_options=SessionOptions(emulate=True))
    assert report.passed
    made = load_calibration(RANDOM, [InputSpec(n, np.dtype(np.int64), (None, None), (0, 1) if n == "types_in"
                                               else None) for n in ("ids", "types_in", "mask")],
                            ranges=[profile])
    assert all(int(b["types_in"].max()) <= 1 for b in made.batches)
    assert main(["build", path, "-o", str(tmp_path / "int8"), *shapes, "--precision", "int8",
                 "--calibration-data", "random"]) == 0


@pytest.mark.parametrize("kind", ["codes", "city"])
def test_inputs_a_one_hot_encoder_refuses_other_values_of_take_its_categories(tmp_path, capsys, kind) -> None:
    """scikit-learn's OneHotEncoder (handle_unknown="error") becomes an ai.onnx.ml OneHotEncoder
    with zeros=0, which fails the run on a value it does not know. Random values made every door
    fail on such a pipeline: the type probe (its MLP stayed on ONNX Runtime), and profile derivation
    even for `run --inputs` of real rows ("Unknown Category and zeros = 0"). An input whose values,
    or one column's, reach such an encoder takes that encoder's categories."""
    from tests.support.pipelines import CITIES, CODE_CATEGORIES, categorical_classifier
    from trt_backend.ort.random_data import Categories, index_ranges
    from trt_backend.planning import make_plan

    model, feed = categorical_classifier(kind)
    name = next(iter(feed))
    ranges = index_ranges(model.graph)
    # each column Gathered for its own encoder: its own categories
    assert ranges == {name: Categories((), 1, tuple(enumerate(CODE_CATEGORIES if kind == "codes" else (CITIES,))))}
    # an encoder of the whole input (through a Cast) gives every element its categories; one
    # that encodes unknown values as zeros (zeros=1, the default) bounds nothing
    for zeros, expected in ((0, {"v": Categories((5, 9))}), (1, {})):
        encoder = h.make_node("OneHotEncoder", ["w"], ["y"], domain="ai.onnx.ml", cats_int64s=[9, 5], zeros=zeros)
        graph = h.make_graph([h.make_node("Cast", ["v"], ["w"], to=T.INT64), encoder], "g",
                             [h.make_tensor_value_info("v", T.INT32, [4])],
                             [h.make_tensor_value_info("y", T.FLOAT, None)])
        assert index_ranges(graph) == expected
    drawn = random_feed([(name, feed[name].dtype, (64, feed[name].shape[1]))], SEED, ranges)[name]
    for column, known in enumerate(CODE_CATEGORIES if kind == "codes" else (CITIES,)):
        assert set(drawn[:, column].tolist()) == set(known)  # every category, and no other value
    path = str(tmp_path / f"{kind}.onnx")
    onnx.save(model, path)
    np.savez(tmp_path / "rows.npz", **{n: v.astype(str) if v.dtype == object else v for n, v in feed.items()})
    shape = f"{name}:8x{feed[name].shape[1]}"
    plan = make_plan(path, shapes=[{name: (8, feed[name].shape[1])}])  # the MLP's types learned: TensorRT's
    assert plan.model is not None
    matmuls = {i for i, node in enumerate(plan.model.proto.graph.node) if node.op_type == "MatMul"}
    assert len(matmuls) == 3 and matmuls <= {i for s in plan.tensorrt_segments() for i in s.nodes}
    assert main(["compare", path, "--shapes", shape]) == 0
    assert "PASSED" in capsys.readouterr().out
    out = tmp_path / "out.npz"
    assert main(["run", path, "--inputs", str(tmp_path / "rows.npz"), "--outputs", str(out)]) == 0
    import onnxruntime as ort

    expected = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feed)
    with np.load(out, allow_pickle=False) as got:
        np.testing.assert_array_equal(got["label"], expected[0])
        np.testing.assert_allclose(got["probabilities"], expected[1], rtol=0, atol=1e-6)
    capsys.readouterr()

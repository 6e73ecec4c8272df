"""Session API and behaviour: construction from every source, onnxruntime-like metadata, executor
choice and its one warning, output selection and pruning, freeing of intermediates, thread
safety, saved plans, options."""
from __future__ import annotations

import json
import logging
import weakref

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from partitioner import Plan
from partitioner.errors import OptionsError, TrtBackendError
from tests.helpers import in_threads, stage_spy
from tests.support.graphs import assert_same, conv_chain, ort_reference
from trt_backend.artifacts.write import build
from trt_backend.data.demo import DEMO_PATH, demo_model
from trt_backend.errors import (
    ProfileError,
    SegmentLoadError,
    SegmentRunError,
    TensorRTUnavailableError,
)
from trt_backend.runners.ort import EmulatedTensorRTRunner
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

pytestmark = pytest.mark.usefixtures("oracle")  # needs a TensorRT parser

DEMO_PROFILE = [{"image": ((1, 3, 32, 32), (2, 3, 32, 32), (4, 3, 32, 32))}]


def demo_session(**opts) -> Session:
    return Session(DEMO_PATH, DEMO_PROFILE, SessionOptions(emulate=True, **opts))


def image(n: int = 2, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3, 32, 32)).astype(np.float32)


@pytest.mark.parametrize("source", ["path", "bytes", "proto", "plan"])
def test_every_model_source_gives_the_same_outputs(source) -> None:
    model = {"path": DEMO_PATH, "bytes": demo_model().SerializeToString(), "proto": demo_model(),
             "plan": Session.make_plan(DEMO_PATH, SessionOptions(emulate=True))}[source]
    sess = Session(model, DEMO_PROFILE, SessionOptions(emulate=True))
    assert_same(sess.run(None, {"image": image()}), ort_reference(demo_model(), {"image": image()}))


def test_inputs_and_outputs_read_like_onnxruntime() -> None:
    sess = demo_session()
    ref = ort.InferenceSession(DEMO_PATH, providers=["CPUExecutionProvider"])
    for ours, theirs in ((sess.get_inputs(), ref.get_inputs()), (sess.get_outputs(), ref.get_outputs())):
        assert [(a.name, a.shape, a.type) for a in ours] == [(a.name, a.shape, a.type) for a in theirs]
    assert sess.get_inputs()[0].dtype == np.float32 and sess.get_inputs()[0].is_dynamic



def test_output_shapes_read_as_onnxruntime_reads_them_not_as_a_profile_or_inference_named_them(tmp_path) -> None:
    """Each output's shape as ONNX Runtime's session describes it: a dim inference made up a name
    for (``unk__N``) is unnamed, a declared name beside a computed number gives way to the number,
    a declared name stays, and a type learned by running the model at a profile's shapes (an op
    shape inference has no schema for, or one after it) keeps the model's own dims, not the profile's,
    also in the model a build folder keeps (which declares the types learned there)."""
    x = h.make_tensor_value_info("x", T.FLOAT, ["N", 4])
    outputs = [h.make_tensor_value_info("cat", T.FLOAT, None),  # [N + N, 4]: a made-up name
               h.make_tensor_value_info("sig", T.FLOAT, [None, None]),
               h.make_tensor_value_info("relu", T.FLOAT, ["A", "B"]),
               h.make_tensor_value_info("gelu", T.FLOAT, ["N", 4]),  # com.microsoft: typed by a run
               h.make_tensor_value_info("scaled", T.FLOAT, [None, 4])]  # after an ONNX-ML op typed by a run
    graph = h.make_graph([h.make_node("Concat", ["x", "x"], ["cat"], axis=0), h.make_node("Sigmoid", ["x"], ["sig"]),
                          h.make_node("Relu", ["x"], ["relu"]),
                          h.make_node("Gelu", ["x"], ["gelu"], domain="com.microsoft"),
                          h.make_node("Scaler", ["x"], ["s"], domain="ai.onnx.ml", offset=[0.5], scale=[2.0]),
                          h.make_node("Relu", ["s"], ["scaled"])], "g", [x], outputs)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1),
                                               h.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    profiles = [{"x": ((2, 4), (2, 4), (2, 4))}]
    sess = Session(model, profiles, SessionOptions(emulate=True))
    build(model, tmp_path / "built", profiles, SessionOptions(emulate=True))
    loaded = Session.load(tmp_path / "built", SessionOptions(emulate=True))  # (a folder's model says the same)
    for ours in (sess, loaded):
        assert [(a.name, a.shape, a.type) for a in ours.get_outputs()] == \
            [(a.name, a.shape, a.type) for a in ref.get_outputs()]
    assert [a.shape for a in sess.get_outputs()] == [[None, 4], ["N", 4], ["A", 4], ["N", 4], [None, 4]]

def test_plan_json_has_executors_and_profiles_and_reads_back() -> None:
    sess = demo_session()
    assert [s.backend for s in sess.plan.segments] == ["tensorrt", "onnxruntime", "tensorrt"]
    assert sess.segment_executors == ["emulated", "onnxruntime", "emulated"]
    data = json.loads(sess.plan.to_json())
    assert [s["executor"] for s in data["segments"]] == sess.segment_executors
    assert data["segments"][1]["profiles"] == []
    up = data["segments"][2]["profiles"][0]["up"]  # the Resize output feeding the last TensorRT segment
    assert up["min"][0] == 1 and up["opt"][0] == 2 and up["max"][0] == 4 and up["source"] in ("symbolic", "calibrated")
    assert data["input_profiles"] == [{"image": {"min": [1, 3, 32, 32], "opt": [2, 3, 32, 32], "max": [4, 3, 32, 32],
                                                 "source": "user"}}]
    back = Plan.from_dict(data)
    assert [(s.backend, s.nodes) for s in back.segments] == [(s.backend, s.nodes) for s in sess.plan.segments]


def test_output_subsets_in_the_order_asked_and_only_needed_segments_run() -> None:
    sess = demo_session()
    full = sess.run(None, {"image": image()})
    top, probs = sess.run(["top_classes", "probs"], {"image": image()})
    np.testing.assert_array_equal(top, full[2])
    np.testing.assert_array_equal(probs, full[0])
    assert [s.runner.segment.id for s in sess.schedule(["probs"])] == [0, 1, 2]


def test_pruned_schedule_skips_segments_not_needed() -> None:
    nodes = [h.make_node("Relu", ["x"], ["a"]), h.make_node("Sin", ["x"], ["b"]), h.make_node("Cos", ["b"], ["c"])]
    m = h.make_model(h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2])],
                                  [h.make_tensor_value_info("a", T.FLOAT, [2]),
                                   h.make_tensor_value_info("c", T.FLOAT, [2])]),
                     opset_imports=[h.make_opsetid("", 17)])
    sess = Session(m, options=SessionOptions(emulate=True, exclude_ops=("Sin",), min_segment_size=1))
    assert len(sess.plan.segments) == 3
    (only_a,) = sess.schedule(["a"])
    assert only_a.outputs == ("a",)
    np.testing.assert_allclose(sess.run(["c"], {"x": np.array([0.5, -1], np.float32)})[0], np.cos(np.sin([0.5, -1])),
                               rtol=1e-6)


def test_replace_runner_swaps_one_segment_and_refuses_another_segments_runner() -> None:
    sess = demo_session()
    expected = sess.run(None, {"image": image()})
    first = sess.schedule(None)
    seg = sess.plan.segments[0]
    # the same segment computing twice its output: the swap shows in the next run's results
    doubled = onnx.ModelProto()
    doubled.CopyFrom(sess.plan.extract(seg.id))
    g = doubled.graph
    out = g.output[0].name
    for node in g.node:
        node.output[:] = [f"{o}_pre" if o == out else o for o in node.output]
    g.node.append(h.make_node("Add", [f"{out}_pre", f"{out}_pre"], [out]))
    old = sess.runners[0]
    swapped = EmulatedTensorRTRunner(seg, doubled, sess.options.ort_for(3), old.profiles, old.shape_tensors)
    assert sess.replace_runner(0, swapped) is old
    assert sess.schedule(None) is not first and sess.schedule(None)[0].runner is swapped
    changed = sess.run(None, {"image": image()})
    assert not np.allclose(changed[0], expected[0])
    sess.replace_runner(0, old)
    assert_same(sess.run(None, {"image": image()}), expected)
    with pytest.raises(OptionsError,
                       match=r"cannot replace segment 0 \(tensorrt, executor emulated\): another segment"):
        sess.replace_runner(0, sess.runners[2])
    with pytest.raises(OptionsError, match=r"no segment runner 3: this Session has 3 \(0...2\)"):
        sess.replace_runner(3, old)
    swapped.close()  # a closed runner says so, in our error type
    with pytest.raises(SegmentRunError, match="segment 0 \\(tensorrt, executor emulated\\) is closed"):
        swapped.run([image()])


def test_planning_shares_one_parser_oracle_per_flavor() -> None:
    from trt_backend.planning import make_plan, parser_oracle

    make_plan(DEMO_PATH)
    before = parser_oracle.cache_info()
    a = make_plan(DEMO_PATH)
    Session.make_plan(DEMO_PATH, SessionOptions())
    after = parser_oracle.cache_info()
    assert after.hits >= before.hits + 2 and after.misses == before.misses  # no second parser/builder made
    assert a.to_json() == make_plan(DEMO_PATH).to_json()


def test_intermediates_are_dropped_once_their_last_reader_ran() -> None:
    sess = Session(conv_chain(blocks=3), [{"x": ((1, 8, 16, 16), (1, 8, 16, 16), (2, 8, 16, 16))}],
                   SessionOptions(emulate=True))
    steps = sess.schedule()
    freed = [n for s in steps for n in s.free]
    produced = [n for s in steps for n in s.outputs if n != "y"]
    assert sorted(freed) == sorted(produced)  # every intermediate freed exactly once, the output never
    for k, step in enumerate(steps):
        for name in step.free:
            assert name in step.inputs or name in step.outputs
            assert not any(name in later.inputs for later in steps[k + 1:])
    # and at run time: when a segment starts, what was freed before it is gone
    alive: dict[str, weakref.ref] = {}
    for k, step in enumerate(steps):
        runner = step.runner
        original = runner.run_impl

        def spy(inputs, ort_run_options=None, _original=original, _k=k):
            gone = {n for s in steps[:_k] for n in s.free}
            assert all(alive[n]() is None for n in gone), f"step {_k}: freed tensors still alive"
            outputs = _original(inputs, ort_run_options)
            for name, value in zip(steps[_k].outputs, outputs):
                alive[name] = weakref.ref(value)
            return outputs

        runner.run_impl = spy  # type: ignore[method-assign]
    sess.run(None, {"x": np.ones((1, 8, 16, 16), np.float32)})
    assert set(alive) == set(produced) | {"y"}


def test_auto_emulation_warns_once_and_true_never(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="trt_backend"):
        sess = Session(DEMO_PATH, DEMO_PROFILE, SessionOptions(emulate="auto"))
        sess.run(None, {"image": image()})
        sess.run(None, {"image": image(1)})
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "emulated through ONNX Runtime" in warnings[0].getMessage()
    assert "2 TensorRT segment(s)" in warnings[0].getMessage()
    assert sess.segment_executors == ["emulated", "onnxruntime", "emulated"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="trt_backend"):
        demo_session()
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_no_emulation_without_a_tensorrt_runtime_is_a_clear_error() -> None:
    with pytest.raises(TensorRTUnavailableError, match="cannot execute TensorRT segments: .*emulate=True"):
        Session(DEMO_PATH, DEMO_PROFILE, SessionOptions(emulate=False))


def test_flavor_none_runs_everything_on_onnxruntime_without_profiles() -> None:
    sess = Session(DEMO_PATH, options=SessionOptions(flavor="none"))
    assert sess.segment_executors == ["onnxruntime"] and sess.input_profiles == []
    out = sess.run(None, {"image": image(3)})
    assert_same(out, ort_reference(demo_model(), {"image": image(3)}))


def test_concurrent_runs_from_threads_match_sequential_runs() -> None:
    sess = demo_session()
    inputs = [image(1 + k % 4, seed=k) for k in range(16)]
    expected = [sess.run(None, {"image": x}) for x in inputs]
    results: dict[int, list] = {}

    def work(k: int) -> None:
        results[k] = sess.run(None, {"image": inputs[k]})

    assert in_threads(work, len(inputs)) == []
    for k in range(len(inputs)):
        assert_same(results[k], expected[k], atol=0)


def test_saved_plan_reuses_profiles_without_deriving(tmp_path) -> None:
    from trt_backend.profiles.derive import calibrate, derive_profiles

    with stage_spy([derive_profiles, calibrate]) as calls:
        first = demo_session()
    assert "trt_backend.profiles.derive.derive_profiles" in calls  # the spy sees a derivation
    saved = tmp_path / "plan.json"
    saved.write_text(first.plan.to_json())
    for plan in (str(saved), saved.read_text(), json.loads(saved.read_text())):
        with stage_spy([derive_profiles, calibrate]) as calls:
            again = Session(DEMO_PATH, options=SessionOptions(emulate=True), plan=plan)
        assert calls == []
        assert again.segment_profiles == first.segment_profiles
        assert again.input_profiles == first.input_profiles
        assert_same(again.run(None, {"image": image(4)}), first.run(None, {"image": image(4)}), atol=0)


def test_saved_plan_of_a_changed_model_or_plan_is_refused() -> None:
    saved = json.loads(demo_session().plan.to_json())
    with pytest.raises(ProfileError, match="plan of .* changed since its profiles were derived"):
        Session(DEMO_PATH, options=SessionOptions(emulate=True, exclude_ops=("Gemm",)), plan=saved)
    changed = demo_model()
    changed.graph.initializer[0].float_data[:] = []  # same structure, other weights: still valid
    w = onnx.numpy_helper.to_array(demo_model().graph.initializer[0]).copy()
    changed.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(w * 2, changed.graph.initializer[0].name))
    Session(changed, options=SessionOptions(emulate=True), plan=saved)  # weights are not the plan
    reshaped = demo_model()
    reshaped.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 33
    with pytest.raises(TrtBackendError):
        Session(reshaped, options=SessionOptions(emulate=True), plan=saved)
    with pytest.raises(ProfileError, match="differ from those"):
        Session(DEMO_PATH, [{"image": ((1, 3, 32, 32),) * 3}], SessionOptions(emulate=True), plan=saved)
    with pytest.raises(ProfileError, match="not JSON"):
        Session(DEMO_PATH, options=SessionOptions(emulate=True), plan="{broken")


@pytest.mark.parametrize("kwargs, message", [
    ({"emulate": "yes"}, "emulate must be True, False or 'auto'"),
    ({"flavor": "cuda"}, "flavor must be one of"),
    ({"graph_optimization_level": "max"}, "graph_optimization_level must be one of"),
    ({"intra_op_threads": -1}, "intra_op_threads must be a whole number"),
    ({"optimization_level": 3}, "say graph_optimization_level .* or builder_optimization_level"),
    ({"builder_optimization_level": 9}, "builder optimisation level must be a whole number in 0..5"),
    ({"exclude_op": ("Resize",)}, "SessionOptions has no option 'exclude_op'"),
    ({"ort": {"intra_op_threads": 2}}, "ort must be a OrtOptions, got dict"),
    ({"calibration_seed": "7"}, "calibration_seed must be a whole number"),
])
def test_bad_options_are_refused(kwargs, message) -> None:
    with pytest.raises(OptionsError, match=message):
        SessionOptions(**kwargs)


def test_bad_custom_op_library_and_non_options_are_refused() -> None:
    with pytest.raises(OptionsError, match="cannot load custom-op library"):
        Session(DEMO_PATH, DEMO_PROFILE, SessionOptions(emulate=True, custom_op_libraries=("/no/such/lib.so",)))
    with pytest.raises(OptionsError, match="must be a SessionOptions"):
        Session(DEMO_PATH, DEMO_PROFILE, {"emulate": True})  # type: ignore[arg-type]


def test_segment_onnxruntime_cannot_load_is_a_user_error() -> None:
    node = h.make_node("NoSuchOp", ["x"], ["y"], domain="my.domain")
    m = h.make_model(h.make_graph([node], "g", [h.make_tensor_value_info("x", T.FLOAT, [2])],
                                  [h.make_tensor_value_info("y", T.FLOAT, [2])]),
                     opset_imports=[h.make_opsetid("", 17), h.make_opsetid("my.domain", 1)])
    with pytest.raises(SegmentLoadError, match="segment 0 .*ONNX Runtime cannot load it"):
        Session(m, options=SessionOptions(emulate=True))


def test_outputs_that_are_inputs_or_constants_and_scalar_inputs() -> None:
    nodes = [h.make_node("Mul", ["x", "s"], ["y"]), h.make_node("Relu", ["y"], ["r"]), h.make_node("Neg", ["r"], ["z"])]
    const = onnx.numpy_helper.from_array(np.array([1, 2, 3], np.int64), "k")
    g = h.make_graph(nodes, "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [3]), h.make_tensor_value_info("s", T.FLOAT, [])],
                     [h.make_tensor_value_info("z", T.FLOAT, [3]), h.make_tensor_value_info("x", T.FLOAT, [3]),
                      h.make_tensor_value_info("k", T.INT64, [3])], [const])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    sess = Session(m, options=SessionOptions(emulate=True))
    x = np.array([1, -2, 3], np.float32)
    z, x_back, k = sess.run(None, {"x": x, "s": np.float32(2)})  # a numpy scalar feeds a 0-d input
    np.testing.assert_array_equal(z, -np.maximum(2 * x, 0))
    np.testing.assert_array_equal(x_back, x)
    np.testing.assert_array_equal(k, [1, 2, 3])


def test_session_options_compose_the_stages_options() -> None:
    """Each stage's options validate themselves once; the flat keywords land in the one stage that
    has a field of that name; dataclasses.replace keeps working."""
    import dataclasses

    from partitioner import PartitionOptions
    from trt_backend.engines.builder import BuildOptions
    from trt_backend.ort.options import OrtOptions
    from trt_backend.session.options import OPTION_NAMES

    composed = SessionOptions(partition=PartitionOptions(exclude_ops=("Gemm",), min_segment_size=2),
                              ort=OrtOptions(intra_op_threads=2, thread_pool="session"),
                              build=BuildOptions(precision="fp16", builder_optimization_level=3), emulate=True)
    flat = SessionOptions(exclude_ops="Gemm", min_segment_size=2, intra_op_threads=2, precision="fp16",
                          builder_optimization_level=3, emulate=True)
    assert composed == flat
    assert flat.partition.exclude_ops == ("Gemm",) and flat.ort.intra_op_threads == 2
    assert flat.build.precision == "fp16" and flat.build.builder_optimization_level == 3
    # flat keywords refine the stage object given beside them
    both = SessionOptions(partition=PartitionOptions(exclude_ops=("Gemm",)), min_segment_size=5)
    assert (both.partition.exclude_ops, both.partition.min_segment_size) == (("Gemm",), 5)
    again = dataclasses.replace(flat, emulate="auto")
    assert again.partition == flat.partition and again.ort == flat.ort and again.emulate == "auto"
    # one name per meaning: no name belongs to two stages, and the old ambiguous one is refused
    stage_names = [f.name for cls in (PartitionOptions, OrtOptions, BuildOptions) for f in dataclasses.fields(cls)]
    assert len(stage_names) == len(set(stage_names))
    assert "optimization_level" not in OPTION_NAMES and "graph_optimization_level" in OPTION_NAMES
    assert BuildOptions(builder_optimization_level=2).key_fields()["optimization_level"] == 2  # cache keys kept


def test_run_options_per_run() -> None:
    """RunOptions: outputs_on_device per run (on CPU, outputs are numpy either way); an
    onnxruntime.RunOptions reaches the ONNX Runtime segment runs (a terminated one stops them)."""
    from trt_backend.session.options import RunOptions

    sess = demo_session()
    x = np.random.default_rng(1).standard_normal((2, 3, 32, 32)).astype(np.float32)
    want = sess.run(None, {"image": x})
    got = sess.run(None, {"image": x}, RunOptions(outputs_on_device=False))
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)
    ro = ort.RunOptions()
    ro.log_severity_level = 3
    for a, b in zip(want, sess.run(None, {"image": x}, ro)):
        np.testing.assert_array_equal(a, b)
    stop = ort.RunOptions()
    stop.terminate = True
    with pytest.raises(SegmentRunError, match="segment 0 .*failed"):
        sess.run(None, {"image": x}, RunOptions(ort=stop))
    with pytest.raises(OptionsError, match="run_options must be a trt_backend RunOptions"):
        sess.run(None, {"image": x}, {"outputs_on_device": True})  # type: ignore[arg-type]
    with pytest.raises(OptionsError, match="RunOptions.ort must be an onnxruntime.RunOptions"):
        RunOptions(ort="fast")


def test_planned_only_says_what_it_means_with_and_without_a_builder(monkeypatch, caplog) -> None:
    """A Session of a model that runs its TensorRT segments as planned says a build (or compare)
    would demote what the builder refuses, where a builder is here; where none is, it does not
    promise a build that cannot happen (compare of such a model makes this very Session)."""
    import trt_backend.session.session as session_module
    from trt_backend.errors import TensorRTUnavailableError

    with caplog.at_level(logging.WARNING, logger="trt_backend.session"):
        sess = Session(DEMO_PATH, [{"image": ((1, 3, 32, 32),) * 3}], SessionOptions(emulate="auto"))
    assert sess.planned_only and "`trt-backend build` and `compare` build and demote it" in caplog.text

    def missing(flavor):
        raise TensorRTUnavailableError("no TensorRT here")

    monkeypatch.setattr(session_module, "load_flavor", missing)
    assert sess.planned_why() == ("no TensorRT builder here to build them: a segment its builder would refuse is "
                                  "emulated too")

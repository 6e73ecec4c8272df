"""ONNX Runtime thread and allocator settings of a Session's segment sessions: spinning (stopped
after each run when several segments take turns) and the optional shared CPU arena."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from partitioner import QueryResult
from tests.trt_backend.test_session_graphs import assert_same, conv_chain, ort_reference
from trt_backend.runners import OrtOptions, ort_session
from trt_backend.session import Session, SessionOptions

PROFILE = [{"x": ((1, 8, 16, 16), (2, 8, 16, 16), (4, 8, 16, 16))}]


class AcceptAll:
    """Takes every node, so the Resize exclusion alone makes the segments (no parser needed)."""

    target = "accept-all"

    def query(self, model: onnx.ModelProto) -> QueryResult:
        return QueryResult(True)


def chain_session(**opts) -> Session:
    return Session(conv_chain(3), PROFILE, SessionOptions(emulate=True, oracle=AcceptAll(), exclude_ops=("Resize",),
                                                          **opts))


def config(sess: ort.InferenceSession, key: str) -> str | None:
    try:
        return str(sess.get_session_options().get_session_config_entry(key))
    except RuntimeError:  # not set
        return None


@pytest.mark.parametrize("spin, segments, allow, while_running", [
    (None, 1, True, True),     # one session: spin as ONNX Runtime does
    (None, 5, False, True),    # several take turns: spin only while running
    (True, 5, True, False),
    (False, 5, False, False),  # never
    (False, 1, False, False),
])
def test_spinning_choice_per_segment_count(spin, segments, allow, while_running) -> None:
    o = SessionOptions(allow_spinning=spin).ort_options(segments)
    assert (o.allow_spinning, o.spin_while_running, o.share_arena) == (allow, while_running, False)


def test_ort_session_settings_reach_onnxruntime() -> None:
    model = h.make_model(h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g",
                                      [h.make_tensor_value_info("x", T.FLOAT, [2])],
                                      [h.make_tensor_value_info("y", T.FLOAT, [2])]),
                         opset_imports=[h.make_opsetid("", 17)])
    default = ort_session(model, OrtOptions(spin_while_running=True), "relu")  # spins on: nothing to stop
    assert config(default, "session.force_spinning_stop") is None
    assert config(default, "session.intra_op.allow_spinning") is None
    assert config(default, "session.use_env_allocators") is None
    stop = ort_session(model, OrtOptions(allow_spinning=False, spin_while_running=True), "relu")
    assert config(stop, "session.force_spinning_stop") == "1"
    assert config(stop, "session.intra_op.allow_spinning") is None
    never = ort_session(model, OrtOptions(allow_spinning=False), "relu")
    assert config(never, "session.intra_op.allow_spinning") == "0"
    assert config(never, "session.force_spinning_stop") is None
    shared = ort_session(model, OrtOptions(share_arena=True), "relu")
    assert config(shared, "session.use_env_allocators") == "1"
    x = np.array([-1, 2], np.float32)
    for s in (default, stop, never, shared):
        np.testing.assert_array_equal(s.run(None, {"x": x})[0], [0, 2])


@pytest.mark.parametrize("opts", [{}, {"allow_spinning": True}, {"allow_spinning": False}, {"share_arena": True}])
def test_multi_segment_outputs_match_onnxruntime_with_each_setting(opts) -> None:
    sess = chain_session(**opts)
    assert len(sess.runners) == 5
    stop = opts.get("allow_spinning", None) is None
    shared = opts.get("share_arena", False)
    for r in sess.runners:
        assert (config(r._session, "session.force_spinning_stop") == "1") == stop  # type: ignore[attr-defined]
        assert (config(r._session, "session.use_env_allocators") == "1") == shared  # type: ignore[attr-defined]
    for n in (1, 3, 4):
        x = np.random.default_rng(n).standard_normal((n, 8, 16, 16)).astype(np.float32)
        for _ in range(2):  # a second run reuses what the first freed
            assert_same(sess.run(None, {"x": x}), ort_reference(conv_chain(3), {"x": x}))


def test_shared_arena_leaves_other_sessions_alone() -> None:
    shared = chain_session(share_arena=True)
    own = chain_session()
    x = np.random.default_rng(0).standard_normal((2, 8, 16, 16)).astype(np.float32)
    expected = ort_reference(conv_chain(3), {"x": x})  # a default InferenceSession made afterwards
    assert_same(shared.run(None, {"x": x}), expected)
    assert_same(own.run(None, {"x": x}), expected)
    again = chain_session(share_arena=True)  # registered once; later sessions share it
    assert_same(again.run(None, {"x": x}), expected)

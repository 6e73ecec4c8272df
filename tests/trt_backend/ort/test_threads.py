"""ONNX Runtime thread and allocator settings of a Session's segment sessions: spinning (stopped
after each run when several segments take turns), the optional shared CPU arena, and the optional
global thread pool (process-wide, so its tests run in child processes)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from partitioner import QueryResult
from partitioner.errors import OptionsError
from tests.support.graphs import assert_same, conv_chain, ort_reference
from trt_backend.ort.options import OrtOptions
from trt_backend.ort.sessions import ort_session
from trt_backend.ort.threads import use_global_thread_pool
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

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
    o = SessionOptions(ort=OrtOptions(allow_spinning=spin)).ort_for(segments)
    assert (o.allow_spinning, o.spin_while_running, o.share_arena) == (allow, while_running, False)


def test_ort_session_settings_reach_onnxruntime() -> None:
    model = h.make_model(h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g",
                                      [h.make_tensor_value_info("x", T.FLOAT, [2])],
                                      [h.make_tensor_value_info("y", T.FLOAT, [2])]),
                         opset_imports=[h.make_opsetid("", 17)])
    default = ort_session(model, OrtOptions(allow_spinning=True), "relu")  # spins on: nothing to stop
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


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# Run in a child process: the global pool is a process-wide, one-way switch.
GLOBAL_POOL_CHILD = """
import json, sys
import numpy as np, onnxruntime as ort
from partitioner.errors import OptionsError
from trt_backend.ort.threads import global_thread_pool
from tests.trt_backend.ort.test_threads import chain_session, config, conv_chain
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session
from tests.support.graphs import ort_reference
out = {}
x0 = np.random.default_rng(0).standard_normal((2, 8, 16, 16)).astype(np.float32)
if sys.argv[1] == "ours":  # a session made before the switch keeps its own pool and keeps working
    from partitioner.errors import ModelLoadError
    try:  # a Session that fails on its model leaves the process as it was
        Session("/nonexistent/model.onnx", options=SessionOptions(thread_pool="global"))
    except ModelLoadError:
        out["pool_after_bad_model"] = global_thread_pool()
    before = ort.InferenceSession(conv_chain(3).SerializeToString(), providers=["CPUExecutionProvider"])
    y0 = before.run(None, {"x": x0})[0]
    sess = chain_session(thread_pool="global", intra_op_threads=2)
    out["before_still_runs"] = float(np.max(np.abs(before.run(None, {"x": x0})[0] - y0)))
else:  # the user switched ONNX Runtime to its global pool before we made any session
    from onnxruntime.capi import onnxruntime_pybind11_state as state
    state.set_global_thread_pool_sizes(2, 1)
    if sys.argv[1] == "user":  # our first session finds out from ONNX Runtime's refusal
        sess = chain_session()
    else:  # "user-global": the user's own global-pool session exists; we ask for the global pool
        so = ort.SessionOptions()
        so.use_per_session_threads = False
        ort.InferenceSession(conv_chain(3).SerializeToString(), so, providers=["CPUExecutionProvider"])
        sess = chain_session(thread_pool="global")
out["pool"] = global_thread_pool()
out["per_session"] = [r._session.get_session_options().use_per_session_threads for r in sess.runners]
out["spin_stop"] = [config(r._session, "session.force_spinning_stop") for r in sess.runners]
later = chain_session()  # a default Session made afterwards follows the process
out["later_per_session"] = [r._session.get_session_options().use_per_session_threads for r in later.runners]
err = []
for n in (1, 3):
    x = np.random.default_rng(n).standard_normal((n, 8, 16, 16)).astype(np.float32)
    ref = ort_reference(conv_chain(3), {"x": x})
    for s in (sess, later):
        err += [float(np.max(np.abs(a - b))) for a, b in zip(s.run(None, {"x": x}), ref)]
out["max_err"] = max(err)
try:
    chain_session(thread_pool="global", intra_op_threads=3)
    out["resize"] = None
except OptionsError as e:
    out["resize"] = str(e)
try:  # ONNX Runtime's own rule, which the README states: default sessions are refused now
    ort.InferenceSession(conv_chain(3).SerializeToString(), providers=["CPUExecutionProvider"])
    out["plain_ort"] = "accepted"
except Exception as e:
    out["plain_ort"] = "refused: " + str(e).splitlines()[0][-120:]
print("RESULT " + json.dumps(out))
"""


def run_child(mode: str) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(GLOBAL_POOL_CHILD), mode], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-2000:]
    return dict(json.loads(lines[-1][len("RESULT "):]), stderr=proc.stderr)


def test_global_thread_pool_shared_by_every_segment_session() -> None:
    out = run_child("ours")
    assert out["pool"] == [2, 0]
    assert out["before_still_runs"] == 0.0
    assert out["pool_after_bad_model"] is None
    assert out["per_session"] == [False] * 5  # all five segment sessions use the one global pool
    assert out["spin_stop"] == [None] * 5  # it spins as set up, not stopped after every segment
    assert "ignored when using a global thread pool" not in out["stderr"]  # no per-session thread counts sent
    assert out["later_per_session"] == [False] * 5
    assert out["max_err"] <= 1e-5
    assert "already exists (2 intra-op threads, default inter-op threads)" in out["resize"]
    assert "cannot be resized to 3 intra-op threads" in out["resize"]
    assert out["plain_ort"].startswith("refused") and "global thread pool" in out["plain_ort"]


@pytest.mark.parametrize("mode", ["user", "user-global"])
def test_global_thread_pool_switched_by_the_user_is_followed(mode) -> None:
    out = run_child(mode)
    assert out["pool"] == [-1, -1]  # sizes set outside trt_backend: unknown to us
    assert out["per_session"] == [False] * 5 and out["later_per_session"] == [False] * 5
    assert out["max_err"] <= 1e-5
    assert "already exists (sizes set outside trt_backend)" in out["resize"]


def test_thread_pool_option_checked() -> None:
    with pytest.raises(OptionsError, match="thread_pool must be one of session, global, got 'shared'"):
        SessionOptions(thread_pool="shared")
    with pytest.raises(OptionsError, match="allow_spinning=False applies to per-session thread pools"):
        SessionOptions(thread_pool="global", allow_spinning=False)
    with pytest.raises(OptionsError, match="intra_op_threads must be a whole number >= 0, got -1"):
        use_global_thread_pool(-1)  # refused before anything is switched
    runner = chain_session().runners[0]
    assert runner._session.get_session_options().use_per_session_threads  # type: ignore[attr-defined]

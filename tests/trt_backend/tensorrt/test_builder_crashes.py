"""Ops TensorRT's parser takes whose build crashes TensorRT's builder in native code
(``trt_backend.tensorrt.questions.BUILDER_CRASHES``): TensorRT-RTX 1.7.1 builds ONNX's Attention
(opset 23, what PyTorch's exporter makes of scaled_dot_product_attention) into a segmentation
fault where its query and key are one tensor to the builder (here: the same tensor), which took
the ``build`` command down with it (exit -11). The parser's answer now refuses such a node, from
every door (the capability oracle, the early parse, a build's head start), and it runs on ONNX
Runtime: the build ends, and its folder runs as ONNX Runtime runs the model."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from partitioner.wire import main_graph_ops
from trt_backend.planning import make_plan
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session
from trt_backend.tensorrt.questions import BUILDER_CRASHES


def attention_model(path: str) -> str:
    """RMSNormalization, a projection, an Attention of 4 heads over it, Relu: opset 23."""
    rng = np.random.default_rng(0)
    scale = numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "scale")
    wq = numpy_helper.from_array((rng.standard_normal((64, 64)) * 0.1).astype(np.float32), "wq")
    nodes = [helper.make_node("RMSNormalization", ["x", "scale"], ["n"], axis=-1, epsilon=1e-5, name="rms"),
             helper.make_node("MatMul", ["n", "wq"], ["q"], name="proj"),
             helper.make_node("Attention", ["q", "q", "q"], ["a"], q_num_heads=4, kv_num_heads=4, name="attn"),
             helper.make_node("Relu", ["a"], ["y"], name="relu")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", 64])
    graph = helper.make_graph(nodes, "attention", [x], [y], [scale, wq])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    onnx.save(model, path)
    return path


def test_the_ops_of_the_main_graph_are_read_from_the_bytes() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Attention", ["a", "a", "a"], ["b"]),
             helper.make_node("Gelu", ["b"], ["c"], domain="com.microsoft"),
             helper.make_node("Sigmoid", ["c"], ["y"], domain="ai.onnx")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    data = helper.make_model(graph).SerializeToString()
    assert main_graph_ops(data) == [("", "Relu"), ("", "Attention"), ("com.microsoft", "Gelu"), ("", "Sigmoid")]
    assert main_graph_ops(b"\x3b\x00") is None


def _crashes(flavor) -> bool:
    return any(flavor.name == name and flavor.version.startswith(version) and ("", "Attention") in ops
               for (name, version), ops in BUILDER_CRASHES.items())


def test_a_node_whose_build_crashes_the_builder_runs_on_onnx_runtime(flavor, tmp_path) -> None:
    if not _crashes(flavor):
        pytest.skip(f"{flavor.name} {flavor.version} is not known to crash on Attention")
    path = attention_model(str(tmp_path / "attention.onnx"))
    plan = make_plan(path, shapes=[{"x": (2, 5, 64)}])
    assert plan.model is not None
    backends = {plan.model.proto.graph.node[i].name: s.backend for s in plan.segments for i in s.nodes}
    assert backends == {"rms": "tensorrt", "proj": "tensorrt", "attn": "onnxruntime", "relu": "onnxruntime"}
    (attn,) = [n for n in plan.nodes if n.name == "attn"]
    assert attn.reason is not None and attn.reason.startswith("TensorRT-RTX 1.7's builder crashes on Attention where "
                                                              "its query and key")  # (not "TensorRT parser: ...")
    # The CLI (early parse, head start, the compile path's build) in a process of its own: a crash
    # there fails this test instead of ending the test run.
    out = str(tmp_path / "built")
    proc = subprocess.run([sys.executable, "-m", "trt_backend", "-v", "build", path, "-o", out, "--shapes", "x:2x5x64",
                           "--min-segment-size", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    with open(os.path.join(out, "manifest.json")) as f:
        segments = json.load(f)["segments"]
    assert [s["backend"] for s in segments] == ["tensorrt", "onnxruntime", "tensorrt"]
    x = np.random.default_rng(1).standard_normal((2, 5, 64)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    session = Session.load(out, SessionOptions(emulate=True))
    try:
        got = session.run(None, {"x": x})[0]
    finally:
        session.close()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


CRASHING_BUILD = """
import sys
import trt_backend.tensorrt.questions as questions
questions.BUILDER_CRASHES.clear()  # (the table's refusal off: TensorRT's builder meets the Attention)
from trt_backend.cli import script_main
sys.argv = ["trt-backend", *sys.argv[1:]]
script_main()
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 if hasattr(os, "sched_getaffinity") else True,
                    reason="the head start is forked only where a second CPU runs it")
def test_a_builder_crash_the_table_does_not_know_ends_in_one_error_not_a_crash(flavor, tmp_path) -> None:
    """Where TensorRT's builder crashes on a model the parser takes whole and no table entry keeps
    it from the builder (the table is emptied here), the crash happens in the build's head start,
    a child process: the build then refuses to build the same file in its own process, which would
    crash it too, and says so in one line (exit 1, no folder, no staging folder left)."""
    if not _crashes(flavor):
        pytest.skip(f"{flavor.name} {flavor.version} is not known to crash on Attention")
    path = attention_model(str(tmp_path / "attention.onnx"))
    out = tmp_path / "built"
    proc = subprocess.run([sys.executable, "-c", CRASHING_BUILD, "build", path, "-o", str(out), "--shapes", "x:2x5x64"],
                          capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trt-backend: error: ")
    assert "TensorRT's builder crashed (SIGSEGV) building the file in a child process" in lines[0]
    assert "--exclude-ops (the model's ops: Attention, MatMul, RMSNormalization, Relu)" in lines[0]
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if p.startswith(".build-")]

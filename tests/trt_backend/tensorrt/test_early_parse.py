"""``inspect MODEL`` asks TensorRT's parser about the file in a forked child while it loads onnx and
the model. The plan must be the one planning in this process makes: same JSON, same lines, on
models whose early answer is taken (a file the parser takes whole, loaded with only node names,
the IR version, weights-as-inputs or input dims fixed) and on models where it is not (a node the
parser refuses, a file changed since the child read it, a child that died). The CLI runs
as a process, where the fork happens; the in-process plan is made here, where it does not (this
process runs more than one thread)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trt_backend.cli import main
from trt_backend.tensorrt import early_parse

TAKEN = "came from its early parse"

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 if hasattr(os, "sched_getaffinity") else True,
                                reason="the early parse needs a second CPU (it is not started on one)")


def _old_exporter_model(zero_dim: bool = False, det: bool = False, opset: int = 9) -> onnx.ModelProto:
    """Conv, Relu, Conv as an IR 3 exporter wrote them: unnamed nodes, every weight listed as a
    graph input too; ``zero_dim``: the batch declared as 0 (loading takes it as unknown); ``det``:
    then a Det of each 8x8 map, which TensorRT's parser refuses (at opset 11)."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((2, 4, 1, 1)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w2"], ["y" if not det else "c"])]
    nodes += [helper.make_node("Det", ["c"], ["y"])] if det else []
    batch = 0 if zero_dim else 1
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])]
    inputs += [helper.make_tensor_value_info(w.name, TensorProto.FLOAT, list(w.dims)) for w in (w1, w2)]
    graph = helper.make_graph(nodes, "old", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[w1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11 if det else opset)])
    model.ir_version = 3
    return model


def _cli_and_here(path: str, tmp_path, capsys) -> tuple[subprocess.CompletedProcess, dict, dict, str]:
    """(the CLI process's result, its plan JSON, the plan JSON of ``main`` here, what ``main`` printed)."""
    theirs, ours = str(tmp_path / "cli.json"), str(tmp_path / "here.json")
    proc = subprocess.run([sys.executable, "-m", "trt_backend", "-vv", "inspect", path, "--json", theirs],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    capsys.readouterr()
    assert main(["inspect", path, "--json", ours]) == 0
    printed = capsys.readouterr().out
    plans = []
    for name in (theirs, ours):
        with open(name) as f:
            plans.append(json.load(f))
    return proc, plans[0], plans[1], printed


def _lines(text: str) -> list[str]:
    """The lines printed, less the planning time, the JSON file's name and what -v adds (the CLI
    process runs with -vv to log where its answer came from): each boundary tensor, and the nodes
    on ONNX Runtime under their reasons."""
    out: list[str] = []
    in_nodes = False
    for line in text.splitlines():
        if line == "Nodes on ONNX Runtime":
            in_nodes = True
            out.pop()  # (its blank line)
            continue
        if in_nodes and line.startswith("  "):
            continue
        in_nodes = False
        if line.startswith("plan written to") or re.match(r"  \S+: segment \d+ -> segment \d+", line):
            continue
        out.append(line.split(" | planned in ")[0])
    return out


@pytest.mark.parametrize("opset", [9, 7])
def test_a_file_the_parser_takes_whole_is_planned_from_the_early_answer_as_here(opset, flavor, tmp_path,
                                                                               capsys) -> None:
    """At opset 9 the IR version is raised to fit the opset; at opset 7, which IR 3 carries, to
    IR 4, where weights need not be graph inputs: loading takes the listed ones as constants."""
    path = str(tmp_path / "old.onnx")
    onnx.save(_old_exporter_model(opset=opset), path)
    proc, cli, here, printed = _cli_and_here(path, tmp_path, capsys)
    assert TAKEN in proc.stderr
    assert "named 3 unnamed" in proc.stderr and "2 graph input(s) with an initializer" in proc.stderr
    assert "IR version 3 changed to 4" in proc.stderr
    assert cli == here
    assert [s["backend"] for s in cli["segments"]] == ["tensorrt"] and len(cli["nodes"]) == 3
    assert _lines(proc.stdout) == _lines(printed)
    assert "1 parser call" in proc.stdout



def test_outputs_listed_out_of_the_order_their_nodes_write_them_take_the_early_answer(flavor, tmp_path,
                                                                                       capsys) -> None:
    """GPT-2 lists its logits before its cache: the planner's question lists the outputs as their
    nodes write them, and the parser's answer does not depend on that order (the planner had asked
    TensorRT again here, importing it, for every such model)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    nodes = [helper.make_node("Relu", ["x"], ["first"]), helper.make_node("Sigmoid", ["first"], ["second"]),
             helper.make_node("Tanh", ["second"], ["third"])]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 4]) for n in ("third", "first", "second")]
    path = str(tmp_path / "reordered.onnx")
    graph = helper.make_graph(nodes, "g", [x], outputs)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    proc, cli, here, printed = _cli_and_here(path, tmp_path, capsys)
    assert TAKEN in proc.stderr and cli == here and _lines(proc.stdout) == _lines(printed)
    assert [s["backend"] for s in cli["segments"]] == ["tensorrt"]

def test_where_the_early_answer_does_not_hold_the_planner_asks_here(flavor, tmp_path, capsys) -> None:
    path = str(tmp_path / "model.onnx")
    onnx.save(_old_exporter_model(det=True), path)  # (a node the parser refuses)
    proc, cli, here, printed = _cli_and_here(path, tmp_path, capsys)
    assert TAKEN not in proc.stderr
    assert cli == here
    assert _lines(proc.stdout) == _lines(printed)
    assert {s["backend"] for s in cli["segments"]} == {"tensorrt", "onnxruntime"}


@pytest.mark.parametrize("declared", ["a 0 batch", "'?' on three dims"])
def test_input_dims_loading_takes_as_unknown_are_asked_about_as_loading_leaves_them(declared, flavor, tmp_path,
                                                                                    capsys) -> None:
    """A batch declared 0 (the parser would read an empty dim) or "?" on three dims (Paddle2ONNX's
    classifiers: dims the parser would hold equal) is an unknown dim once loaded: the child asks
    the parser about the file with those dims as loading leaves them, and its answer is taken."""
    path = str(tmp_path / "model.onnx")
    proto = _old_exporter_model(zero_dim=True)
    if declared != "a 0 batch":
        for d, name in zip(proto.graph.input[0].type.tensor_type.shape.dim, ["?", None, "?", "?"]):
            if name is not None:
                d.Clear()
                d.dim_param = name
    onnx.save(proto, path)
    proc, cli, here, printed = _cli_and_here(path, tmp_path, capsys)
    assert TAKEN + " (asked of the file as it is, its inputs' unknown dims as loading leaves them)" in proc.stderr
    assert cli == here
    assert _lines(proc.stdout) == _lines(printed)
    assert [s["backend"] for s in cli["segments"]] == ["tensorrt"]


CHILD = textwrap.dedent("""
    import logging, os, signal, sys
    logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format="%(message)s")
    from trt_backend.tensorrt import early_parse
    path, what = sys.argv[1], sys.argv[2]
    early = early_parse.fork_question(path)
    print("STARTED", early is not None)
    if what == "changed":
        early.answer()  # (the child has read the file)
        info = os.stat(path)
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))
    elif what == "died":
        os.kill(early.child.pid, signal.SIGKILL)
    from trt_backend.planning import make_plan
    plan = make_plan(path)
    print("SEGMENTS", [s.backend for s in plan.segments], "CALLS", plan.oracle_calls)
""")


@pytest.mark.parametrize("what", ["changed", "died", "as it is"])
def test_a_file_changed_since_the_child_read_it_or_a_dead_child_leaves_the_question_here(what, flavor,
                                                                                         tmp_path) -> None:
    path = str(tmp_path / "old.onnx")
    onnx.save(_old_exporter_model(), path)
    proc = subprocess.run([sys.executable, "-c", CHILD, path, what], capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "STARTED True" in proc.stdout
    assert "SEGMENTS ['tensorrt'] CALLS 1" in proc.stdout
    assert (TAKEN in proc.stdout) == (what == "as it is")


def test_no_child_is_forked_from_a_process_running_other_threads(tmp_path) -> None:
    path = str(tmp_path / "old.onnx")
    onnx.save(_old_exporter_model(), path)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert early_parse.fork_question(path) is None
    finally:
        stop.set()
        other.join()
    assert early_parse.take(path, "auto") is None


def test_the_plan_cache_key_is_the_same_with_the_tensorrt_the_child_imported(flavor, tmp_path, capsys) -> None:
    """A plan kept by planning here (no child: TensorRT imported here) is a hit for the CLI, whose
    key takes TensorRT's name and versions from its child's first message instead."""
    path, cache = str(tmp_path / "old.onnx"), str(tmp_path / "cache")
    onnx.save(_old_exporter_model(), path)
    assert main(["inspect", path, "--cache-dir", cache]) == 0
    kept = capsys.readouterr().out
    proc = subprocess.run([sys.executable, "-m", "trt_backend", "-vv", "inspect", path, "--cache-dir", cache],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "plan taken from the plan cache" in proc.stderr
    assert _lines(proc.stdout)[1:] == _lines(kept)[1:]

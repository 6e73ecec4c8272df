"""Graphs far deeper than Python's recursion limit: every walk of the planner and of profile
derivation is iterative. The graph bounds walk a 60,000-node chain back to the model input; the
CLI runs, builds and compares a chain whose one TensorRT segment's input is bounded that way
(the walk that used to end in RecursionError)."""
from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.support.chains import DEEP_CHAIN_EXCLUDE, deep_chain
from partitioner import PartitionOptions, load_model, plan_model
from tests.helpers import const, model, vi
from trt_backend.cli import main
from trt_backend.profiles.bounds import DimBounds

DEPTH = 60_000
SHALLOWER = 20_000  # still 20x the recursion limit: the other walks, and the CLI (see its test)


def test_graph_bounds_walk_a_60k_node_chain_to_the_input() -> None:
    m = load_model(deep_chain(DEPTH))
    assert DEPTH > 50 * sys.getrecursionlimit()
    bounds = DimBounds(m, {"x": (4, 64)})
    # chain_out's batch dim has no name: its bound is x's max, through 60,000 nodes and the Reshape
    assert m.index.types["chain_out"].tensor_type.shape.dim[0].dim_param.startswith("unk__")
    assert bounds.bound("chain_out", 0) == (4, False)
    assert bounds.bound("chain_out", 1) == (64, False)


def test_shape_values_walk_a_deep_chain_of_shape_ops() -> None:
    """Shape, then 20,000 Identity nodes on the shape tensor, read by ConstantOfShape: its dims
    are bounded through all of them."""
    nodes = [helper.make_node("Shape", ["x"], ["s0"])]
    nodes += [helper.make_node("Identity", [f"s{k}"], [f"s{k + 1}"]) for k in range(SHALLOWER)]
    nodes.append(helper.make_node("ConstantOfShape", [f"s{SHALLOWER}"], ["y"]))
    m = load_model(model(nodes, [vi("x", ["N", 3])], [vi("y", None)]))
    bounds = DimBounds(m, {"x": (7, 3)})
    assert bounds.value_bounds(f"s{SHALLOWER}") == [(7, False), (3, False)]
    assert bounds.bound("y", 0) == (7, False)


def test_a_deep_chain_of_constant_only_nodes_is_placed() -> None:
    """Constant-only nodes are emitted before their first consumer, producers first: a 20,000
    deep chain of them (an initializer through Relu after Relu) feeding one Add of the input."""
    nodes = [helper.make_node("Relu", ["c" if k == 0 else f"c{k - 1}"], [f"c{k}"], name=f"relu_{k}")
             for k in range(SHALLOWER)]
    nodes.append(helper.make_node("Add", ["x", f"c{SHALLOWER - 1}"], ["y"], name="add"))
    m = model(nodes, [vi("x", [4])], [vi("y", [4])], [const("c", np.ones(4, np.float32))])
    plan = plan_model(m, None, PartitionOptions(min_segment_size=1))
    assert [(s.backend, len(s.nodes)) for s in plan.segments] == [("tensorrt", SHALLOWER + 1)]
    assert list(plan.segments[0].nodes) == list(range(SHALLOWER + 1))


@pytest.mark.slow
@pytest.mark.usefixtures("flavor")
def test_run_build_and_compare_a_deep_chain(tmp_path, capsys) -> None:
    """``run``, ``build`` and ``compare`` of a 20,000-node chain (20x the recursion limit): its
    TensorRT head's input is bounded by walking the whole chain. (At 60,000 nodes the three
    commands take about 110 s of CPU on a 2-core machine, a third of it ONNX Runtime making
    sessions of the chain: past this test's time; ``benchmarks/deep_chain.py`` runs them.)"""
    path = str(tmp_path / "deep.onnx")
    onnx.save(deep_chain(SHALLOWER), path)
    assert SHALLOWER > 10 * sys.getrecursionlimit()
    flags = ["--exclude-ops", ",".join(DEEP_CHAIN_EXCLUDE)]
    shapes = ["--min-shapes", "x:1x64", "--opt-shapes", "x:2x64", "--max-shapes", "x:4x64"]
    outputs = str(tmp_path / "out.npz")
    assert main(["run", path, "--shapes", "x:3x64", "--outputs", outputs, *flags]) == 0
    out = capsys.readouterr().out
    assert f"{SHALLOWER + 3} nodes" in out and "emulated x1" in out
    folder = str(tmp_path / "built")
    assert main(["build", path, "-o", folder, *shapes, *flags]) == 0
    assert "segment 1: tensorrt" in capsys.readouterr().out
    assert main(["compare", folder]) == 0
    assert "PASSED" in capsys.readouterr().out
    y = np.load(outputs)["y"]
    assert y.shape == (3, 64) and np.isfinite(y).all() and y.max() > 0
    assert os.path.isfile(os.path.join(folder, "segment_1.engine"))

"""Cutting TensorRT segments whose weights pass a limit: the fewest pieces, at the cheapest
boundaries, each within the limit; plans stay valid and run the same nodes."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from partitioner import PartitionOptions, build_plan, load_model, plan_model
from partitioner.graph import GraphIndex
from partitioner.split import split_by_weights, weight_bytes
from tests.helpers import assert_plan_valid, const, model, vi

MIB = 1 << 20


def mlp(widths: list[int], name: str = "w") -> onnx.ModelProto:
    """MatMul+Relu blocks on [N, widths[k]] -> [N, widths[k+1]] (fp32 weights)."""
    nodes, inits, prev = [], [], "x"
    for k in range(len(widths) - 1):
        w = f"{name}{k}"
        inits.append(const(w, np.zeros((widths[k], widths[k + 1]), np.float32)))
        nodes.append(helper.make_node("MatMul", [prev, w], [f"m{k}"], name=f"matmul_{k}"))
        nodes.append(helper.make_node("Relu", [f"m{k}"], [f"r{k}"], name=f"relu_{k}"))
        prev = f"r{k}"
    nodes[-1].output[0] = "y"
    return model(nodes, [vi("x", ["N", widths[0]])], [vi("y", ["N", widths[-1]])], inits)


def trt_segments(plan) -> list:
    return plan.tensorrt_segments()


def test_no_cut_when_the_weights_fit() -> None:
    m = load_model(mlp([512] * 5))  # 4 x 1 MiB
    plan = plan_model(m, None, PartitionOptions())
    again = build_plan(m, [_verdict(n) for n in plan.nodes], None, max_segment_weights=4 * MIB)
    assert [s.nodes for s in again.segments] == [s.nodes for s in plan.segments]


def test_fewest_pieces_each_within_the_limit() -> None:
    m = load_model(mlp([512] * 9))  # 8 x 1 MiB
    plan = plan_model(m, None, PartitionOptions())
    assert len(trt_segments(plan)) == 1
    cut = build_plan(m, [_verdict(n) for n in plan.nodes], None, max_segment_weights=3 * MIB)
    pieces = trt_segments(cut)
    assert len(pieces) == 3  # ceil(8 / 3): no cover of 8 MiB by pieces of 3 MiB has fewer
    assert all(weight_bytes(m.index, s.members) <= 3 * MIB for s in pieces)
    assert sorted(i for s in cut.segments for i in s.nodes) == list(range(len(m.proto.graph.node)))
    assert_plan_valid_allowing_cuts(cut)


def test_the_cut_goes_where_the_least_crosses() -> None:
    """Widths 512 -> 2048 -> 16 -> 2048 -> 512: the cheapest place to cut the four 1-4 MiB
    weights (2 pieces) is where the [N, 16] tensor crosses, not a [N, 2048] one."""
    m = load_model(mlp([512, 512, 16, 512, 512]))
    nodes = m.index.order
    weights = weight_bytes(m.index, nodes)
    pieces = split_by_weights(m.index, nodes, weights - 1)
    assert len(pieces) == 2
    first = {m.proto.graph.node[i].name for i in pieces[0]}
    assert {"matmul_0", "relu_0", "matmul_1"} <= first and "matmul_2" not in first  # an [N, 16] tensor crosses


def test_a_weight_read_on_both_sides_counts_in_each() -> None:
    """MatMul, Add, Add, MatMul, the MatMuls sharing one 1 MiB weight, each Add with one of its
    own: within 2 MiB the only cut in two is in the middle, and both pieces load the shared one."""
    w = np.zeros((512, 512), np.float32)
    nodes = [helper.make_node("MatMul", ["x", "shared"], ["a"], name="a"),
             helper.make_node("Add", ["a", "own0"], ["b"], name="b"),
             helper.make_node("Add", ["b", "own1"], ["c"], name="c"),
             helper.make_node("MatMul", ["c", "shared"], ["y"], name="d")]
    m = load_model(model(nodes, [vi("x", [512, 512])], [vi("y", [512, 512])],
                         [const("shared", w), const("own0", w), const("own1", w)]))
    assert weight_bytes(m.index, [0, 1, 2, 3]) == 3 * MIB  # once each for the whole
    pieces = split_by_weights(m.index, [0, 1, 2, 3], 2 * MIB)
    assert pieces == [(0, 1), (2, 3)]
    assert all(weight_bytes(m.index, p) == 2 * MIB for p in pieces)
    assert split_by_weights(m.index, [0, 3], MIB) == [(0, 3)]  # only the shared weight: a cut saves nothing


def test_a_node_heavier_than_the_limit_is_a_piece_of_its_own() -> None:
    m = load_model(mlp([512, 1024, 512, 512]))  # 2 MiB, 2 MiB, 1 MiB
    pieces = split_by_weights(m.index, m.index.order, MIB + MIB // 2)
    names = [[m.proto.graph.node[i].op_type for i in p] for p in pieces]
    assert len(pieces) == 3 and all(p.count("MatMul") == 1 for p in names)


def test_constant_only_nodes_go_with_their_consumer() -> None:
    """A Constant feeding the second half is computed there, not handed over from the first."""
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["a"], name="mm0"),
             helper.make_node("Constant", [], ["shift"], name="shift", value=helper.make_tensor(
                 "v", 1, [512], np.ones(512, np.float32).tolist())),
             helper.make_node("Add", ["a", "shift"], ["b"], name="add"),
             helper.make_node("MatMul", ["b", "w1"], ["y"], name="mm1")]
    m = load_model(model(nodes, [vi("x", ["N", 512])], [vi("y", ["N", 512])],
                         [const("w0", np.zeros((512, 512), np.float32)),
                          const("w1", np.zeros((512, 512), np.float32))]))
    plan = plan_model(m, None, PartitionOptions(min_segment_size=1, boundary_cost=None))
    cut = build_plan(m, [_verdict(n) for n in plan.nodes], None, 1, cost=None, max_segment_weights=MIB)
    segs = trt_segments(cut)
    assert len(segs) == 2
    holder = next(s for s in segs if 2 in s.members)  # the Add
    assert 1 in holder.members  # the Constant is computed where it is read
    assert "shift" not in (segs[0].outputs + segs[1].inputs)
    assert_plan_valid_allowing_cuts(cut)


def test_a_60k_node_segment_is_cut_without_recursion_or_quadratic_time() -> None:
    """Linear in the segment's size: a 60,000-node chain of Adds on a 1 MiB weight each way."""
    n = 60_000
    nodes = [helper.make_node("Add", ["x" if k == 0 else f"t{k - 1}", f"c{k % 4}"], [f"t{k}"], name=f"add_{k}")
             for k in range(n)]
    nodes[-1].output[0] = "y"
    inits = [const(f"c{j}", np.zeros(MIB // 4, np.float32)) for j in range(4)]
    index = GraphIndex.build(model(nodes, [vi("x", [MIB // 4])], [vi("y", [MIB // 4])], inits).graph)
    pieces = split_by_weights(index, index.order, 2 * MIB)
    assert len(pieces) == n // 2 and all(weight_bytes(index, p) <= 2 * MIB for p in pieces)


def _verdict(node):
    from partitioner import Verdict

    return Verdict(node.verdict, node.reason)


def assert_plan_valid_allowing_cuts(plan) -> None:
    """:func:`tests.helpers.assert_plan_valid`, where two TensorRT segments may now be neighbours."""
    try:
        assert_plan_valid(plan)
    except AssertionError as e:
        if "adjacent segments share a backend" not in str(e):
            raise
        graph = plan.model.proto.graph
        available = {i.name for i in graph.input} | {t.name for t in graph.initializer}
        for seg in plan.segments:
            assert all(name in available for name in seg.inputs), f"segment {seg.id} reads ahead"
            available.update(o for i in seg.members for o in graph.node[i].output if o)

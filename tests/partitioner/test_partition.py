"""Partitioning on hand-made graphs: diamonds, merges that would create cycles, minimum size,
constants, determinism; plus invariants on random DAGs."""
from __future__ import annotations

import json
import random

import numpy as np
import onnx
import pytest
from onnx import helper

from partitioner import (
    PartitionOptions,
    Plan,
    Verdict,
    build_plan,
    load_model,
    plan_model,
)
from tests.helpers import (
    assert_plan_valid,
    const,
    constant_derived,
    model,
    shared_constants_model,
    vi,
)

ORT_OP = "Sin"  # excluded by option below: lets tests pick the fallback nodes exactly


def opts(min_size: int = 1, **kw) -> PartitionOptions:
    kw.setdefault("boundary_cost", None)  # the structure under test, not the price of its boundaries
    return PartitionOptions(exclude_ops=(ORT_OP,), min_segment_size=min_size, **kw)


def chain(ops: list[str]) -> onnx.ModelProto:
    nodes, prev = [], "x"
    for k, op in enumerate(ops):
        nodes.append(helper.make_node(op, [prev], [f"t{k}"], name=f"n{k}"))
        prev = f"t{k}"
    nodes[-1].output[0] = "y"
    return model(nodes, [vi("x", ["N", 4])], [vi("y", ["N", 4])])


def backends(plan) -> list[tuple[str, tuple[int, ...]]]:
    return [(s.backend, s.nodes) for s in plan.segments]


def test_chain_alternates_segments() -> None:
    plan = plan_model(chain(["Relu", "Relu", ORT_OP, "Relu", "Relu"]), None, opts())
    assert backends(plan) == [("tensorrt", (0, 1)), ("onnxruntime", (2,)), ("tensorrt", (3, 4))]
    assert plan.segments[0].outputs == ("t1",) and plan.segments[1].inputs == ("t1",)
    assert plan.segments[2].outputs == ("y",)
    assert plan.nodes[2].reason == "excluded by user (op type Sin)"
    assert_plan_valid(plan)


def test_merge_that_would_create_a_cycle_is_not_made() -> None:
    # a -> s(ORT) -> c ; a -> c.  Merging a and c would make a cycle through s.
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="a"),
             helper.make_node(ORT_OP, ["a"], ["s"], name="s"),
             helper.make_node("Add", ["a", "s"], ["y"], name="c")]
    plan = plan_model(model(nodes, [vi("x", ["N", 4])], [vi("y", ["N", 4])]), None, opts())
    assert backends(plan) == [("tensorrt", (0,)), ("onnxruntime", (1,)), ("tensorrt", (2,))]
    assert plan.segments[2].inputs == ("a", "s")
    assert_plan_valid(plan)


def test_independent_branches_merge_into_one_segment() -> None:
    # x -> r1 -> s(ORT) -> r3 ; x -> r2 -> r4 : r1, r2, r4 all fit before s
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r1"),
             helper.make_node(ORT_OP, ["a"], ["b"], name="s"),
             helper.make_node("Relu", ["b"], ["y1"], name="r3"),
             helper.make_node("Relu", ["x"], ["c"], name="r2"),
             helper.make_node("Relu", ["c"], ["y2"], name="r4")]
    plan = plan_model(model(nodes, [vi("x", ["N", 4])], [vi("y1", ["N", 4]), vi("y2", ["N", 4])]), None, opts())
    assert backends(plan) == [("tensorrt", (0, 3, 4)), ("onnxruntime", (1,)), ("tensorrt", (2,))]
    assert plan.segments[0].outputs == ("a", "y2")
    assert_plan_valid(plan)


def test_diamond_with_fallback_on_one_arm() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="top"),
             helper.make_node(ORT_OP, ["a"], ["l"], name="left"),
             helper.make_node("Sigmoid", ["a"], ["r"], name="right"),
             helper.make_node("Add", ["l", "r"], ["y"], name="join")]
    plan = plan_model(model(nodes, [vi("x", ["N", 4])], [vi("y", ["N", 4])]), None, opts())
    assert backends(plan) == [("tensorrt", (0, 2)), ("onnxruntime", (1,)), ("tensorrt", (3,))]
    assert_plan_valid(plan)


def test_min_segment_size_demotes_small_groups_and_merges_fallbacks() -> None:
    plan = plan_model(chain(["Relu", "Relu", "Relu", ORT_OP, "Relu", ORT_OP, "Relu", "Relu", "Relu"]), None, opts(3))
    assert backends(plan) == [("tensorrt", (0, 1, 2)), ("onnxruntime", (3, 4, 5)), ("tensorrt", (6, 7, 8))]
    assert plan.nodes[4].verdict == "onnxruntime"
    assert plan.nodes[4].reason == "demoted: TensorRT group of 1 node(s) is below the minimum segment size 3"
    assert_plan_valid(plan)


def test_heavy_op_keeps_a_small_segment() -> None:
    w = const("w", np.ones((4, 4), np.float32))
    nodes = [helper.make_node(ORT_OP, ["x"], ["a"], name="s1"),
             helper.make_node("MatMul", ["a", "w"], ["b"], name="mm"),
             helper.make_node(ORT_OP, ["b"], ["y"], name="s2")]
    plan = plan_model(model(nodes, [vi("x", ["N", 4])], [vi("y", ["N", 4])], [w]), None, opts(3))
    assert backends(plan) == [("onnxruntime", (0,)), ("tensorrt", (1,)), ("onnxruntime", (2,))]


def test_constant_node_lands_with_its_consumer() -> None:
    nodes = [helper.make_node(ORT_OP, ["x"], ["a"], name="s"),
             helper.make_node("Relu", ["a"], ["b"], name="r"),
             helper.make_node("Constant", [], ["k"], name="k", value=const("kv", np.ones((1,), np.float32))),
             helper.make_node("Add", ["b", "k"], ["y"], name="add")]
    plan = plan_model(model(nodes, [vi("x", ["N", 4])], [vi("y", ["N", 4])]), None, opts())
    assert backends(plan) == [("onnxruntime", (0,)), ("tensorrt", (1, 2, 3))]
    assert plan.segments[1].inputs == ("a",)


def test_constant_feeding_only_fallback_is_placed_in_onnxruntime_segment() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"),
             helper.make_node("Constant", [], ["k"], name="k", value=const("kv", np.ones((1,), np.float32))),
             helper.make_node(ORT_OP, ["k"], ["ks"], name="s"),
             helper.make_node("Add", ["a", "ks"], ["y"], name="add")]
    plan = plan_model(model(nodes, [vi("x", ["N", 4])], [vi("y", ["N", 4])]), None, opts())
    seg_of_k = plan.nodes[1].segment
    assert plan.segments[seg_of_k].backend == "onnxruntime"
    assert plan.nodes[1].reason == "constant-only node placed with its ONNX Runtime consumer"
    assert_plan_valid(plan)


def test_constants_read_by_two_tensorrt_segments_are_copied_not_passed(oracle) -> None:
    """A Constant, a ConstantOfShape->Cast chain (and an initializer) read by Gather/Reshape nodes
    on both sides of an ONNX Runtime node: the later TensorRT segment computes its own copy."""
    plan = plan_model(shared_constants_model(), oracle, opts(3))
    assert backends(plan) == [("tensorrt", (0, 1, 2, 3, 4, 5, 6)), ("onnxruntime", (7,)),
                              ("tensorrt", tuple(range(8, 20)))]
    assert [s.copies for s in plan.segments] == [(), (), (0, 1, 2)]
    assert [s.inputs for s in plan.segments] == [("x",), ("a",), ("s", "ga", "gb", "ra")]
    assert plan.segments[0].outputs == ("a", "ga", "gb", "ra")  # k, shp: not handed over
    constants = constant_derived(plan)
    assert {"k", "shp", "idx", "neg"} <= constants
    assert not [(s.id, t) for s in plan.segments for t in s.inputs if t in constants]
    assert [n.segment for n in plan.nodes[:3]] == [0, 0, 0]  # the originals stay with their first reader
    assert_plan_valid(plan)


def test_copies_in_plan_json_and_read_back(oracle) -> None:
    plan = plan_model(shared_constants_model(), oracle, opts(3))
    data = json.loads(plan.to_json())
    assert [list(s) for s in data["segments"]][2] == ["id", "backend", "nodes", "copies", "inputs", "outputs"]
    assert data["segments"][2]["copies"] == [0, 1, 2]
    assert "copies" not in data["segments"][0]
    back = Plan.from_dict(data)
    assert back.segments == plan.segments and back.segments[2].members == tuple(range(3)) + tuple(range(8, 20))
    old = {**data, "segments": [{k: v for k, v in s.items() if k != "copies"} for s in data["segments"]]}
    assert [s.copies for s in Plan.from_dict(old).segments] == [(), (), ()]  # plans written before copies


def test_constant_only_graph_output_is_still_produced_once(oracle) -> None:
    plan = plan_model(shared_constants_model(shape_output=True), oracle, opts(3))
    producers = [s.id for s in plan.segments if "shp" in s.outputs]
    assert producers == [0] and plan.segments[2].copies == (0, 1, 2)
    assert_plan_valid(plan)


def test_plans_without_shared_constants_have_no_copies_field() -> None:
    nodes = [helper.make_node("Constant", [], ["k"], name="k", value=const("kv", np.ones((1,), np.float32))),
             helper.make_node("Add", ["x", "k"], ["a"], name="add"),
             helper.make_node(ORT_OP, ["a"], ["s"], name="s"),
             helper.make_node("Relu", ["s"], ["y"], name="r")]
    plan = plan_model(model(nodes, [vi("x", ["N", 4])], [vi("y", ["N", 4])]), None, opts())
    assert [s.copies for s in plan.segments] == [(), (), ()]
    assert '"copies"' not in plan.to_json()


def test_plan_json_is_byte_identical_across_runs(tmp_path) -> None:
    m = chain(["Relu", ORT_OP, "Relu", "Relu", ORT_OP, "Relu"])
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    a = plan_model(str(path), None, opts(1)).to_json()
    b = plan_model(str(path), None, opts(1)).to_json()
    assert a == b
    assert a.count('"backend": "onnxruntime"') == 2
    assert plan_model(m, None, opts(1)).to_json() == plan_model(m, None, opts(1)).to_json()


def random_dag(rng: random.Random, n: int) -> onnx.ModelProto:
    nodes, names = [], ["x"]
    for i in range(n):
        k = rng.randint(1, min(3, len(names)))
        ins = rng.sample(names[-6:], min(k, len(names[-6:])))
        op = "Sum" if len(ins) > 1 else "Relu"
        nodes.append(helper.make_node(op, ins, [f"t{i}"], name=f"n{i}"))
        names.append(f"t{i}")
    consumed = {i for nd in nodes for i in nd.input}
    outs = [vi(t, ["N", 4]) for t in names[1:] if t not in consumed]
    return model(nodes, [vi("x", ["N", 4])], outs)


@pytest.mark.parametrize("seed", range(40))
def test_random_dags_give_valid_maximal_plans(seed: int) -> None:
    rng = random.Random(seed)
    m = load_model(random_dag(rng, rng.randint(5, 60)))
    verdicts = [Verdict("tensorrt") if rng.random() < 0.7 else Verdict("onnxruntime", "test")
                for _ in m.proto.graph.node]
    plan = build_plan(m, verdicts, None, min_segment_size=1)
    assert_plan_valid(plan)
    # maximal: segment k (k >= 2) exists only because something in it waited on segment k-1;
    # otherwise it could have joined segment k-2, which has the same backend
    graph = m.proto.graph
    for k in range(2, len(plan.segments)):
        before = {o for i in plan.segments[k - 1].nodes for o in graph.node[i].output}
        assert any(name in before for i in plan.segments[k].nodes for name in graph.node[i].input), \
            f"segment {k} does not depend on segment {k - 1}: it could have joined segment {k - 2}"

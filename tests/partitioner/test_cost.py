"""Fragmentation has a price: a TensorRT group without a heavy op stays only
where its estimated saving beats what its boundaries cost; the estimate is from the inferred
shapes, and the reason names it."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from partitioner import (
    BoundaryCost,
    OptionsError,
    PartitionOptions,
    load_model,
    plan_model,
)
from partitioner.cost import group_cost, node_flops
from partitioner.report import boundary_crossing, summary
from tests.helpers import const, model, vi

SHAPE = [1, 1024, 1024]  # 4 MiB of float per tensor


def sandwich(light_ops: int, shape=SHAPE) -> onnx.ModelProto:
    """Sin (ONNX Runtime) -> ``light_ops`` Relu/Neg alternating (TensorRT) -> Sin (ONNX Runtime)."""
    nodes = [helper.make_node("Sin", ["x"], ["a"], name="sin_in")]
    prev = "a"
    for k in range(light_ops):
        nodes.append(helper.make_node("Relu" if k % 2 == 0 else "Neg", [prev], [f"l{k}"], name=f"light{k}"))
        prev = f"l{k}"
    nodes.append(helper.make_node("Sin", [prev], ["y"], name="sin_out"))
    return model(nodes, [vi("x", shape)], [vi("y", shape)])


def options(**kw) -> PartitionOptions:
    return PartitionOptions(exclude_ops=("Sin",), **kw)


def backends(plan) -> list[str]:
    return [s.backend for s in plan.segments]


def test_a_few_cheap_nodes_between_fallbacks_go_to_onnxruntime_with_the_estimate() -> None:
    # 3 element-wise ops on 4 MiB: TensorRT saves (2-1) x 6 x 4 MiB / 1 TB/s = 25 us; the two
    # hand-overs cost 2 x 10 us + 2 x 4 MiB / 100 GB/s = 104 us
    plan = plan_model(sandwich(3), None, options())
    assert backends(plan) == ["onnxruntime"]
    reason = plan.nodes[1].reason
    assert reason is not None
    assert reason.startswith("demoted: its TensorRT group does not pay for its boundaries: estimated to save 25.")
    assert "against 103.89 us for 2 hand-over(s) of 8.39 MB" in reason
    # without the price (or with min_segment_size 1) the group stays
    assert (backends(plan_model(sandwich(3), None, options(boundary_cost=None)))
            == ["onnxruntime", "tensorrt", "onnxruntime"])
    assert (backends(plan_model(sandwich(3), None, options(min_segment_size=1)))
            == ["onnxruntime", "tensorrt", "onnxruntime"])


def test_enough_work_pays_for_the_same_boundaries() -> None:
    # 40 ops: saves 40 x 2 x 4 MiB / 1 TB/s = 336 us > 104 us
    plan = plan_model(sandwich(40), None, options())
    assert backends(plan) == ["onnxruntime", "tensorrt", "onnxruntime"]
    assert plan.model is not None
    est = group_cost(plan.model.index, plan.segments[1].nodes, [n.segment for n in plan.nodes], BoundaryCost())
    assert est.boundaries == 2 and est.crossing_bytes == 2 * 4 * 2**20 and est.pays
    # one FLOP per element at 20 TFLOP/s, 8 bytes moved per element at 1 TB/s
    assert est.saved_us == pytest.approx(40 * 2**20 / 20e6 + 40 * 2 * 4 * 2**20 / 1e6, rel=1e-9)
    # a dearer launch or a slower hand-over moves the line; overridable constants
    assert backends(plan_model(sandwich(40), None,
                               options(boundary_cost=BoundaryCost(launch_us=200.0)))) == ["onnxruntime"]
    assert backends(plan_model(sandwich(40), None,
                               options(boundary_cost=BoundaryCost(handover_gbps=10.0)))) == ["onnxruntime"]


def test_a_heavy_op_group_is_kept_whatever_its_boundaries() -> None:
    w = const("w", np.ones((8, 8), np.float32))
    nodes = [helper.make_node("Sin", ["x"], ["a"]), helper.make_node("MatMul", ["a", "w"], ["b"]),
             helper.make_node("Sin", ["b"], ["y"])]
    plan = plan_model(model(nodes, [vi("x", [1, 8])], [vi("y", [1, 8])], [w]), None, options())
    assert backends(plan) == ["onnxruntime", "tensorrt", "onnxruntime"]


def test_flops_from_inferred_shapes() -> None:
    w = const("w", np.ones((64, 32), np.float32))
    k = const("k", np.ones((16, 3, 3, 3), np.float32))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Conv", ["img", "k"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"])]
    m = load_model(model(nodes, [vi("x", ["batch", 64]), vi("img", [1, 3, 10, 10])],
                         [vi("m", None), vi("r", None)], [w, k]))
    cost = BoundaryCost()
    assert node_flops(m.index, 0, cost) == 2 * 8 * 32 * 64  # the symbolic batch counts as 8
    assert node_flops(m.index, 0, BoundaryCost(symbolic_dim=2)) == 2 * 2 * 32 * 64
    assert node_flops(m.index, 1, cost) == 2 * (16 * 10 * 10) * (3 * 3 * 3)
    assert node_flops(m.index, 2, cost) == 16 * 10 * 10


def test_inspect_prints_what_crosses_per_run() -> None:
    plan = plan_model(sandwich(3), None, options(boundary_cost=None))
    crossing = boundary_crossing(plan)
    assert crossing is not None
    assert (crossing.tensors, crossing.bytes, crossing.unknown) == (2, 2 * 4 * 2**20, 0)
    # every dim known: no stand-in said (it read "symbolic dims counted as 8" of a model without any)
    assert "Boundaries: 2 tensors handed between segments per run, 8.39 MB\n" in summary(plan)
    whole = plan_model(sandwich(3), None, options())
    crossing = boundary_crossing(whole)
    assert crossing is not None and crossing.tensors == 0


@pytest.mark.parametrize("bad", [{"launch_us": -1.0}, {"handover_gbps": 0}, {"speedup": 0.5},
                                 {"symbolic_dim": 0}, {"device_tflops": float("nan")}])
def test_bad_constants_are_one_clear_error(bad) -> None:
    with pytest.raises(OptionsError, match="boundary cost"):
        BoundaryCost(**bad)


def test_the_shapes_given_size_the_named_dims_of_the_estimate_and_the_report() -> None:
    # 12 element-wise ops on N x 64 KiB: with N at its stand-in 8 the group saves 97 x 8 x 16384 / 1e6 =
    # 12.7 us against 20 + 10.5 us of hand-overs; at N = 128 it saves 203 us against 188 us
    m = sandwich(12, ["N", 1024, 16])
    assert backends(plan_model(m, None, options())) == ["onnxruntime"]
    index = load_model(m).index
    at_128 = BoundaryCost().at_shapes(index, {"x": (128, 1024, 16)})
    assert at_128.dims == (("N", 128),)
    plan = plan_model(m, None, options(boundary_cost=at_128))
    assert backends(plan) == ["onnxruntime", "tensorrt", "onnxruntime"]
    crossing = boundary_crossing(plan, at_128)
    assert crossing is not None and crossing.bytes == 2 * 128 * 1024 * 16 * 4
    assert "16.8 MB (at the shapes given: N=128)" in summary(plan, at_128)
    assert summary(plan) == summary(plan, at_128)  # the plan is reported as it was priced
    # priced without the shapes: the stand-in, said
    assert "1.05 MB (symbolic dims counted as 8)" in summary(plan, BoundaryCost())


def test_a_named_dim_the_shapes_size_twice_keeps_its_stand_in_and_unknown_dims_are_said() -> None:
    nodes = [helper.make_node("Sin", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Add", ["b", "z"], ["c"]), helper.make_node("Sin", ["c"], ["y"])]
    m = model(nodes, [vi("x", ["N", 4]), vi("z", [None, "N"])], [vi("y", None)])
    index = load_model(m).index
    assert BoundaryCost().at_shapes(index, {"x": (2, 4), "z": (2, 2)}).dims == (("N", 2),)
    assert BoundaryCost().at_shapes(index, {"x": (2, 4), "z": (2, 3)}).dims == ()
    plan = plan_model(m, None, options(boundary_cost=None, min_segment_size=1))
    assert backends(plan) == ["onnxruntime", "tensorrt", "onnxruntime"]
    # a [N, 4] at N = 2: 32 B; c, Add's broadcast of [N, 4] and [?, N], has an unknown first dim: 64 x 4 x 4 B
    assert ("2 tensors handed between segments per run, 1.06 kB (at the shapes given: N=2; unknown dims counted as "
            "64 in 1 of the 2 tensors)") in summary(plan, BoundaryCost(dims={"N": 2}))
    with pytest.raises(OptionsError, match=r"boundary cost dims\['N'\] must be"):
        BoundaryCost(dims={"N": -1})

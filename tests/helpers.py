"""Builders for hand-made test graphs and plan invariants."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def vi(name: str, shape: Sequence[int | str] | None, dtype: int = F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def const(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
          inits: Sequence[onnx.TensorProto] = (), opset: int = 17, extra_opsets: Sequence[tuple[str, int]] = (),
          ir: int = 8) -> onnx.ModelProto:
    m = helper.make_model(helper.make_graph(nodes, "test", inputs, outputs, list(inits)),
                          opset_imports=[helper.make_opsetid("", opset)]
                          + [helper.make_opsetid(d, v) for d, v in extra_opsets])
    m.ir_version = ir
    return m


def crop_resize(inp: str, out: str, name: str | None = None) -> tuple[onnx.NodeProto, list[onnx.TensorProto]]:
    """A shape-preserving Resize in ``tf_crop_and_resize`` mode, which TensorRT's parser rejects."""
    roi, scales = f"{out}.roi", f"{out}.scales"
    node = helper.make_node("Resize", [inp, roi, scales], [out], name=name or out, mode="linear",
                            coordinate_transformation_mode="tf_crop_and_resize")
    return node, [const(roi, np.array([0, 0, 0, 0, 1, 1, 1, 1], np.float32)),
                  const(scales, np.array([1, 1, 1, 1], np.float32))]


def assert_plan_valid(plan) -> None:
    """Invariants every plan must hold: a partition of the nodes into backend-homogeneous
    segments whose inputs all come from earlier segments or the graph (so no cycle)."""
    graph = plan.model.proto.graph
    n = len(graph.node)
    seen = sorted(i for s in plan.segments for i in s.nodes)
    assert seen == list(range(n)), "every node in exactly one segment"
    available = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    for k, seg in enumerate(plan.segments):
        assert seg.id == k
        for name in seg.inputs:
            assert name in available, f"segment {seg.id} reads '{name}' before any segment makes it"
        for i in seg.nodes:
            assert plan.nodes[i].segment == seg.id
            on_trt = plan.nodes[i].verdict == "tensorrt" or plan.nodes[i].verdict.startswith("plugin:")
            assert on_trt == (seg.backend == "tensorrt"), f"node {i} verdict {plan.nodes[i].verdict} in {seg.backend}"
        if k:
            assert seg.backend != plan.segments[k - 1].backend, "adjacent segments share a backend"
        available.update(o for i in seg.nodes for o in graph.node[i].output if o)
    for o in graph.output:
        assert o.name in available


def conv_resize_chain(blocks: int = 2) -> onnx.ModelProto:
    """x -> [Conv -> Resize(tf_crop_and_resize) -> Relu] * blocks -> y."""
    nodes, inits, prev = [], [const("w", np.ones((4, 4, 3, 3), np.float32))], "x"
    for b in range(blocks):
        resize, extra = crop_resize(f"c{b}", f"r{b}", name=f"resize{b}")
        nodes += [helper.make_node("Conv", [prev, "w"], [f"c{b}"], name=f"conv{b}", pads=[1, 1, 1, 1]), resize,
                  helper.make_node("Relu", [f"r{b}"], [f"y{b}"], name=f"relu{b}")]
        inits += extra
        prev = f"y{b}"
    nodes[-1].output[0] = "y"
    return model(nodes, [vi("x", [1, 4, 8, 8])], [vi("y", [1, 4, 8, 8])], inits)

"""Synthetic models for the benchmarks: long chains of cheap TensorRT-supported ops with an
op TensorRT's parser rejects every so often.

The rejected op is ``Det`` (tensorrt_rtx 1.7: ``UNSUPPORTED_NODE in checkDet``), the op of the
6k-node chain that plan_time.py measures. ``Det`` does not keep the chain's shape, so it sits in a
four-node block that does and keeps the graph a pure chain::

    [N, 64] -Reshape-> [N, 8, 8] -Det-> [N] -Unsqueeze-> [N, 1] -Expand-> [N, 64]
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WIDTH = 64  # [N, WIDTH] float tensor, N symbolic
OPSET = 17
CHEAP_OPS = ("Add", "Mul", "Relu", "Sigmoid", "Tanh")
UNSUPPORTED_OP = "Det"
_DET_BLOCK = 4  # Reshape, Det, Unsqueeze, Expand


def long_chain(n_nodes: int, unsupported_every: int = 300, seed: int = 0) -> onnx.ModelProto:
    """A chain of ``n_nodes`` nodes on a ``[N, 64]`` float tensor (``N`` symbolic).

    Cheap ops (Add/Mul with a per-node ``[64]`` constant, Relu, Sigmoid, Tanh) picked at random
    with ``seed``; a Det block (see module doc) starts at every multiple of ``unsupported_every``
    (``0`` for none), so a 6000-node chain with ``unsupported_every=1000`` holds five Det nodes.
    Every node is named; the model passes the ONNX checker."""
    if n_nodes < 1:
        raise ValueError(f"n_nodes must be >= 1, got {n_nodes}")
    if unsupported_every and unsupported_every <= _DET_BLOCK:
        raise ValueError(f"unsupported_every must be 0 or > {_DET_BLOCK}, got {unsupported_every}")
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = [
        numpy_helper.from_array(np.array([-1, 8, 8], np.int64), "det_in_shape"),
        numpy_helper.from_array(np.array([1], np.int64), "det_axes"),
        numpy_helper.from_array(np.array([1, WIDTH], np.int64), "det_out_shape"),
    ]
    current = "x"
    i = 0
    while i < n_nodes:
        if unsupported_every and i > 0 and i % unsupported_every == 0 and n_nodes - i >= _DET_BLOCK:
            current = _det_block(nodes, current, i)
            i += _DET_BLOCK
            continue
        op = CHEAP_OPS[int(rng.integers(len(CHEAP_OPS)))]
        out = f"t{i}"
        if op in ("Add", "Mul"):
            const = f"c{i}"
            center = 0.0 if op == "Add" else 1.0
            inits.append(numpy_helper.from_array(
                (center + 0.01 * rng.standard_normal(WIDTH)).astype(np.float32), const))
            nodes.append(helper.make_node(op, [current, const], [out], name=f"{op.lower()}_{i}"))
        else:
            nodes.append(helper.make_node(op, [current], [out], name=f"{op.lower()}_{i}"))
        current = out
        i += 1
    nodes[-1].output[0] = "y"
    used = {name for node in nodes for name in node.input}
    graph = helper.make_graph(
        nodes, f"long_chain_{n_nodes}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", WIDTH])],
        [t for t in inits if t.name in used])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="trt-backend-benchmarks")
    model.ir_version = 8  # opset 17 needs IR 8; keeps the file loadable by older runtimes
    return model


def deep_chain(n_nodes: int, seed: int = 0) -> onnx.ModelProto:
    """A chain whose last tensor's batch dim is bounded only by walking the whole chain: ``x``
    ``[N, 64]`` reshaped to ``[-1, 64]`` (a dim shape inference cannot name), ``n_nodes`` cheap
    ops (as :func:`long_chain`, no Det), then a TensorRT head: MatMul by a ``[64, 64]`` weight
    and Relu. Planned with Sigmoid and Tanh excluded (``--exclude-ops Sigmoid,Tanh``), the chain
    runs in ONNX Runtime (its TensorRT pieces are too small to pay for their boundaries) and the
    head's input gets its profile from the bound of that dim: every node of the chain, then the
    Reshape, back to ``x``'s profile."""
    model = long_chain(n_nodes, unsupported_every=0, seed=seed)
    graph = model.graph
    graph.node[0].input[0] = "x_rows"
    graph.node[-1].output[0] = "chain_out"
    graph.node.insert(0, helper.make_node("Reshape", ["x", "rows_shape"], ["x_rows"], name="rows_reshape"))
    rng = np.random.default_rng(seed + 1)
    weight = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
    graph.node.extend([helper.make_node("MatMul", ["chain_out", "head_w"], ["head_mm"], name="head_matmul"),
                       helper.make_node("Relu", ["head_mm"], ["y"], name="head_relu")])
    graph.initializer.extend([numpy_helper.from_array(np.array([-1, WIDTH], np.int64), "rows_shape"),
                              numpy_helper.from_array(weight, "head_w")])
    graph.name = f"deep_chain_{n_nodes}"
    return model


DEEP_CHAIN_EXCLUDE = ("Sigmoid", "Tanh")  # (what sends deep_chain's chain to ONNX Runtime)


def _det_block(nodes: list[onnx.NodeProto], current: str, i: int) -> str:
    names = [f"t{i + k}" for k in range(_DET_BLOCK)]
    nodes.append(helper.make_node("Reshape", [current, "det_in_shape"], [names[0]], name=f"reshape_{i}"))
    nodes.append(helper.make_node(UNSUPPORTED_OP, [names[0]], [names[1]], name=f"det_{i + 1}"))
    nodes.append(helper.make_node("Unsqueeze", [names[1], "det_axes"], [names[2]], name=f"unsqueeze_{i + 2}"))
    nodes.append(helper.make_node("Expand", [names[2], "det_out_shape"], [names[3]], name=f"expand_{i + 3}"))
    return names[3]


def count_ops(model: onnx.ModelProto, op_type: str) -> int:
    return sum(1 for n in model.graph.node if n.op_type == op_type)

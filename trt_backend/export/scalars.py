"""Scalars across Triton models. Triton's model configuration cannot declare a scalar input or
output in a model without batching (``dims`` must not be empty, and an empty ``reshape`` is
refused there), yet segment boundaries carry scalars (a count, a Loop's trip count, a shape
element). An ONNX model can wrap them: each scalar input becomes a ``[1]`` input named
``<name>__1d`` reshaped to the scalar the graph reads, each scalar output is reshaped to a
``[1]`` output ``<name>__1d``; the ensemble tensor keeps the original name, with dims ``[1]``."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

SUFFIX = "__1d"


def is_scalar(vi: onnx.ValueInfoProto) -> bool:
    tt = vi.type.tensor_type
    return vi.type.HasField("tensor_type") and tt.HasField("shape") and len(tt.shape.dim) == 0


def scalar_io(proto: onnx.ModelProto, inputs: Sequence[str], outputs: Sequence[str]) -> tuple[list[str], list[str]]:
    """The scalar tensors among ``inputs`` and ``outputs`` of the model's graph."""
    ins = {vi.name: vi for vi in proto.graph.input}
    outs = {vi.name: vi for vi in proto.graph.output}
    return ([n for n in inputs if n in ins and is_scalar(ins[n])],
            [n for n in outputs if n in outs and is_scalar(outs[n])])


def _names(graph: onnx.GraphProto) -> set[str]:
    names = {vi.name for vi in list(graph.input) + list(graph.output) + list(graph.value_info)}
    names |= {t.name for t in graph.initializer}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
    return names


def wrap_scalars(proto: onnx.ModelProto, inputs: Sequence[str], outputs: Sequence[str]) -> tuple[onnx.ModelProto,
                                                                                                dict[str, str]]:
    """A copy of ``proto`` whose scalar ``inputs`` and ``outputs`` travel as ``[1]`` tensors, and
    the new model-side name of each."""
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    graph = model.graph
    taken = _names(graph)

    def fresh(base: str) -> str:
        name = base
        while name in taken:
            name += "_"
        taken.add(name)
        return name

    renamed: dict[str, str] = {}
    # the target shapes of the Reshapes, each only where one reads it (ONNX Runtime warns of an
    # initializer nothing reads, each time it loads the model)
    to_scalar = fresh("triton_scalar_shape") if any(vi.name in inputs for vi in graph.input) else ""
    to_1d = fresh("triton_1d_shape") if any(vi.name in outputs for vi in graph.output) else ""
    if to_scalar:
        graph.initializer.append(numpy_helper.from_array(np.zeros((0,), np.int64), to_scalar))
    if to_1d:
        graph.initializer.append(numpy_helper.from_array(np.ones((1,), np.int64), to_1d))
    head = []
    for vi in graph.input:
        if vi.name in inputs:
            new = fresh(vi.name + SUFFIX)
            head.append(helper.make_node("Reshape", [new, to_scalar], [vi.name], name=fresh(f"{vi.name}/to_scalar")))
            renamed[vi.name] = new
            vi.name = new
            vi.type.tensor_type.shape.dim.add().dim_value = 1
    for vi in graph.output:
        if vi.name in outputs:
            new = fresh(vi.name + SUFFIX)
            graph.node.append(helper.make_node("Reshape", [vi.name, to_1d], [new], name=fresh(f"{vi.name}/to_1d")))
            renamed[vi.name] = new
            vi.name = new
            vi.type.tensor_type.shape.dim.add().dim_value = 1
    nodes = head + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    return model, renamed

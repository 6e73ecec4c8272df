"""A small CNN saved as a file, with the shapes and profiles the build tests give it."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SHAPES = ["--min-shapes", "x:1x3x16x16", "--opt-shapes", "x:2x3x16x16", "--max-shapes", "x:4x3x16x16"]
PROFILES = [{"x": ((1, 3, 16, 16), (2, 3, 16, 16), (4, 3, 16, 16))}]


def small_cnn(path: str, *, named: bool = True, old_format: bool = False) -> str:
    """Conv (weights past the size that goes to TensorRT by address) -> Relu -> Conv -> pool ->
    Gemm, every node named (``named=False``: the first is not, which loading fixes).
    ``old_format``: as exporters of IR version 3 wrote it: no node named, the weights listed as
    graph inputs too, opset 9."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array((rng.standard_normal((64, 3, 3, 3)) * 0.2).astype(np.float32), "w0"),
             numpy_helper.from_array((rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((64, 10)) * 0.1).astype(np.float32), "fw")]
    named = named and not old_format
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1], name="conv0" if named else ""),
             helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
             helper.make_node("Conv", ["r0", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("GlobalAveragePool", ["c1"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "fw"], ["y"], name="fc")]
    graph = helper.make_graph(nodes, "small_cnn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9 if old_format else 17)])
    model.ir_version = 8
    if old_format:
        for node in model.graph.node:
            node.name = ""
        model.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in inits)
        model.ir_version = 3
    onnx.save(model, path)
    return path

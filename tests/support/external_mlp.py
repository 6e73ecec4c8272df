"""An MLP whose weights live in external data, written in chunks (never held twice).

``blocks`` MatMul+Add+Gelu blocks on a ``[N, hidden]`` float tensor (``N`` symbolic), with a
block TensorRT's parser refuses in the middle (``Det``, see :mod:`tests.support.chains`), so a plan
has at least three segments::

    h -Reshape-> [N, hidden/64, 8, 8] -Det-> [N, hidden/64] -Tanh-> -Unsqueeze-> -Expand->
      [N, hidden/64, 64] -Reshape-> [N, hidden] -Add(h)-> h

Weights are scaled by 1/sqrt(hidden) so activations stay near 1 through any depth. The same
generator makes the ~3 GiB model of ``large_model.py`` and the few-MiB ones of the tests."""
from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 20  # Gelu


def _external(name: str, shape: tuple[int, ...], location: str, offset: int) -> onnx.TensorProto:
    t = onnx.TensorProto()
    t.name, t.data_type = name, TensorProto.FLOAT
    t.dims.extend(shape)
    t.data_location = TensorProto.EXTERNAL
    nbytes = int(np.prod(shape)) * 4
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(nbytes))):
        e = t.external_data.add()
        e.key, e.value = key, value
    return t


def write_mlp(path: str, hidden: int = 256, blocks: int = 8, *, seed: int = 0,
              location: str | None = None) -> int:
    """Write the model to ``path`` and its weights to ``location`` beside it (default
    ``<name>.data``), one weight at a time; returns the weight bytes written."""
    if hidden % 64:
        raise ValueError(f"hidden must be a multiple of 64, got {hidden}")
    folder = os.path.dirname(os.path.abspath(path))
    location = location or os.path.basename(path) + ".data"
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = [
        numpy_helper.from_array(np.array([0, hidden // 64, 8, 8], np.int64), "det_in_shape"),
        numpy_helper.from_array(np.array([2], np.int64), "det_axes"),
        numpy_helper.from_array(np.array([1, 1, 64], np.int64), "det_expand"),
        numpy_helper.from_array(np.array([0, hidden], np.int64), "det_out_shape"),
    ]
    offset = 0
    current = "x"
    scale = np.float32(1.0 / np.sqrt(hidden))
    tmp = os.path.join(folder, location + ".part")
    with open(tmp, "wb") as data:
        for b in range(blocks):
            if b == blocks // 2:
                current = _det_block(nodes, current, b)
            w, bias = f"w{b}", f"b{b}"
            for name, shape in ((w, (hidden, hidden)), (bias, (hidden,))):
                rows = shape[0] if len(shape) == 2 else 1
                step = max(1, (64 << 20) // (4 * hidden))  # ~64 MiB of rows at a time
                for r in range(0, rows, step):
                    n = min(step, rows - r)
                    chunk = rng.standard_normal((n, hidden) if len(shape) == 2 else (hidden,), np.float32)
                    data.write((chunk * scale if len(shape) == 2 else chunk * np.float32(0.1)).tobytes())
                inits.append(_external(name, shape, location, offset))
                offset += int(np.prod(shape)) * 4
            nodes.append(helper.make_node("MatMul", [current, w], [f"mm{b}"], name=f"matmul_{b}"))
            nodes.append(helper.make_node("Add", [f"mm{b}", bias], [f"add{b}"], name=f"add_{b}"))
            out = "y" if b == blocks - 1 else f"h{b}"
            nodes.append(helper.make_node("Gelu", [f"add{b}"], [out], name=f"gelu_{b}"))
            current = out
    os.replace(tmp, os.path.join(folder, location))
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", hidden])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="external_mlp")
    model.ir_version = 9
    tmp_model = path + ".part"
    with open(tmp_model, "wb") as f:
        f.write(model.SerializeToString())
    os.replace(tmp_model, path)
    return offset


def _det_block(nodes: list[onnx.NodeProto], current: str, b: int) -> str:
    p = f"det{b}_"
    nodes += [
        helper.make_node("Reshape", [current, "det_in_shape"], [p + "sq"], name=p + "reshape"),
        helper.make_node("Det", [p + "sq"], [p + "det"], name=p + "det"),
        helper.make_node("Tanh", [p + "det"], [p + "tanh"], name=p + "tanh"),
        helper.make_node("Unsqueeze", [p + "tanh", "det_axes"], [p + "col"], name=p + "unsqueeze"),
        helper.make_node("Expand", [p + "col", "det_expand"], [p + "wide"], name=p + "expand"),
        helper.make_node("Reshape", [p + "wide", "det_out_shape"], [p + "flat"], name=p + "flatten"),
        helper.make_node("Add", [current, p + "flat"], [p + "out"], name=p + "residual"),
    ]
    return p + "out"

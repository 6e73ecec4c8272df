"""Seed models and seeded mutations for the fuzzer (``tests/support/fuzzing.py``, run by
``benchmarks/conformance/fuzz.py``).

Seeds are built here (no download): the bundled demo model, a model whose weights are external
data, one with If and Loop subgraphs, one with ai.onnx.ml ops, and a multi-segment CNN. A mutant
is a function of (seed, id) alone, so ``--only ID`` rebuilds exactly the mutant a run reported."""
from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WEIGHTS = "weights.bin"


@dataclass
class SeedModel:
    """A model to mutate: its proto (external tensors still referenced), the external data file's
    bytes where it has one, and the shapes its dynamic inputs are run at."""

    name: str
    proto: onnx.ModelProto
    weights: bytes | None = None
    shapes: str | None = None


@dataclass
class Mutant:
    """One mutated model, written as a folder: ``model.onnx`` (+ its external data file, + files
    a mutation plants around it)."""

    id: int
    seed: str
    mutation: str
    detail: str
    files: dict[str, bytes] = field(default_factory=dict)
    shapes: str | None = None

    def write(self, folder: str) -> str:
        """Write the mutant's files into ``folder`` (names may reach one level up: a '..' attack
        finds its target there); return the model's path."""
        for name, data in self.files.items():
            path = os.path.normpath(os.path.join(folder, name))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        return os.path.join(folder, "model.onnx")


# ------------------------------------------------------------------ seeds


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           inits: list[onnx.TensorProto], opsets: tuple[tuple[str, int], ...] = (("", 17),)) -> onnx.ModelProto:
    m = h.make_model(h.make_graph(nodes, "fuzz", inputs, outputs, inits),
                     opset_imports=[h.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = 8
    return m


def _w(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> onnx.TensorProto:
    return nh.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)


def _crop_resize(inp: str, out: str) -> tuple[onnx.NodeProto, list[onnx.TensorProto]]:
    """A Resize in tf_crop_and_resize mode: TensorRT's parser rejects it, so it cuts segments."""
    node = h.make_node("Resize", [inp, f"{out}.roi", f"{out}.scales"], [out], mode="linear",
                       coordinate_transformation_mode="tf_crop_and_resize")
    return node, [nh.from_array(np.array([0, 0, 0, 0, 1, 1, 1, 1], np.float32), f"{out}.roi"),
                  nh.from_array(np.ones(4, np.float32), f"{out}.scales")]


def cnn(blocks: int = 3) -> onnx.ModelProto:
    """Conv/Relu blocks cut by crop-and-resize Resizes: 2 * blocks - 1 segments. x: [1, 4, 8, 8]."""
    rng = np.random.default_rng(0)
    nodes, inits, cur = [], [], "x"
    for b in range(blocks):
        inits.append(_w(f"w{b}", (4, 4, 3, 3), rng))
        nodes += [h.make_node("Conv", [cur, f"w{b}"], [f"c{b}"], pads=[1, 1, 1, 1], name=f"conv{b}"),
                  h.make_node("Relu", [f"c{b}"], [f"r{b}"], name=f"relu{b}")]
        cur = f"r{b}"
        if b < blocks - 1:
            node, consts = _crop_resize(cur, f"z{b}")
            nodes.append(node)
            inits += consts
            cur = f"z{b}"
    nodes.append(h.make_node("ReduceMean", [cur], ["y"], axes=[2, 3], keepdims=0, name="mean"))
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 8, 8])],
                  [h.make_tensor_value_info("y", T.FLOAT, [1, 4])], inits)


def external() -> tuple[onnx.ModelProto, bytes]:
    """A Conv/Gemm model saved with every tensor in one external file (``weights.bin``)."""
    import tempfile

    rng = np.random.default_rng(1)
    inits = [_w("w", (4, 3, 3, 3), rng), _w("fc", (4, 5), rng), _w("fb", (5,), rng)]
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["r"]),
             h.make_node("GlobalAveragePool", ["r"], ["p"]), h.make_node("Flatten", ["p"], ["f"]),
             h.make_node("Gemm", ["f", "fc", "fb"], ["y"])]
    m = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 8, 8])],
               [h.make_tensor_value_info("y", T.FLOAT, [2, 5])], inits)
    with tempfile.TemporaryDirectory() as d:
        onnx.save_model(m, os.path.join(d, "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=WEIGHTS, size_threshold=0)
        proto = onnx.load(os.path.join(d, "model.onnx"), load_external_data=False)
        with open(os.path.join(d, WEIGHTS), "rb") as f:
            return proto, f.read()


def subgraphs() -> onnx.ModelProto:
    """An If on a computed condition (both branches read an outer-scope value) and a Loop that
    accumulates, around TensorRT-friendly elementwise ops. x: [2, 3]."""
    then = h.make_graph([h.make_node("Mul", ["t0", "two"], ["tb"])], "then", [],
                        [h.make_tensor_value_info("tb", T.FLOAT, [2, 3])])
    other = h.make_graph([h.make_node("Sub", ["t0", "two"], ["eb"])], "else", [],
                         [h.make_tensor_value_info("eb", T.FLOAT, [2, 3])])
    body = h.make_graph([h.make_node("Add", ["acc", "t0"], ["acc_out"]),
                         h.make_node("Identity", ["cond"], ["cond_out"])],
                        "body",
                        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond", T.BOOL, []),
                         h.make_tensor_value_info("acc", T.FLOAT, [2, 3])],
                        [h.make_tensor_value_info("cond_out", T.BOOL, []),
                         h.make_tensor_value_info("acc_out", T.FLOAT, [2, 3])])
    inits = [nh.from_array(np.array(2.0, np.float32), "two"), nh.from_array(np.array(0.5, np.float32), "half"),
             nh.from_array(np.array(3, np.int64), "trips"), nh.from_array(np.array(True), "true")]
    nodes = [h.make_node("Relu", ["x"], ["t0"]), h.make_node("ReduceMean", ["t0"], ["m"], keepdims=0),
             h.make_node("Greater", ["m", "half"], ["cond"]),
             h.make_node("If", ["cond"], ["branch"], then_branch=then, else_branch=other, name="if"),
             h.make_node("Loop", ["trips", "true", "branch"], ["looped"], body=body, name="loop"),
             h.make_node("Sigmoid", ["looped"], ["s"]), h.make_node("Mul", ["s", "two"], ["y"])]
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                  [h.make_tensor_value_info("y", T.FLOAT, [2, 3])], inits)


def ml_ops() -> onnx.ModelProto:
    """Standard ops around ai.onnx.ml Scaler, ArrayFeatureExtractor, LinearClassifier and ZipMap
    (hand-built: no skl2onnx needed). X: [2, 4]."""
    rng = np.random.default_rng(3)
    inits = [nh.from_array(rng.standard_normal(4).astype(np.float32), "bias"),
             nh.from_array(np.array([0, 2, 3], np.int64), "cols")]
    ml = "ai.onnx.ml"
    nodes = [h.make_node("Add", ["X", "bias"], ["p0"]), h.make_node("Relu", ["p0"], ["p1"]),
             h.make_node("Scaler", ["p1"], ["scaled"], domain=ml, offset=[0.5] * 4, scale=[1.5] * 4),
             h.make_node("ArrayFeatureExtractor", ["scaled", "cols"], ["picked"], domain=ml),
             h.make_node("LinearClassifier", ["picked"], ["label", "probs"], domain=ml,
                         coefficients=rng.standard_normal(9).tolist(), intercepts=rng.standard_normal(3).tolist(),
                         classlabels_ints=[0, 1, 2], post_transform="SOFTMAX"),
             h.make_node("ZipMap", ["probs"], ["prob_maps"], domain=ml, classlabels_int64s=[0, 1, 2]),
             h.make_node("Exp", ["probs"], ["e"]), h.make_node("ReduceSum", ["e"], ["score"], keepdims=0)]
    seq_map = h.make_sequence_type_proto(h.make_map_type_proto(T.INT64, h.make_tensor_type_proto(T.FLOAT, [])))
    outs = [h.make_tensor_value_info("label", T.INT64, [2]), h.make_value_info("prob_maps", seq_map),
            h.make_tensor_value_info("score", T.FLOAT, [])]
    return _model(nodes, [h.make_tensor_value_info("X", T.FLOAT, [2, 4])], outs, inits, (("", 17), (ml, 3)))


def seed_models() -> list[SeedModel]:
    demo = onnx.load(os.path.join(ROOT, "trt_backend", "data", "demo.onnx"))
    ext, weights = external()
    return [SeedModel("demo", demo, shapes="image:2x3x32x32"), SeedModel("external", ext, weights),
            SeedModel("subgraphs", subgraphs()), SeedModel("ml", ml_ops()), SeedModel("cnn", cnn())]


# ------------------------------------------------------------------ mutations

Edit = Callable[[random.Random, onnx.ModelProto, dict[str, bytes]], str]  # returns the detail text
BYTE_MUTATIONS = ("bit_flips", "truncate", "duplicate_span", "zero_span")


def _byte_mutation(kind: str, rng: random.Random, data: bytes) -> tuple[bytes, str]:
    b = bytearray(data)
    n = len(b)
    if kind == "bit_flips":
        k = rng.randint(1, 8)
        spots = [rng.randrange(n) for _ in range(k)]
        for s in spots:
            b[s] ^= 1 << rng.randrange(8)
        return bytes(b), f"{k} bit(s) at {sorted(spots)[:4]}"
    if kind == "truncate":
        cut = rng.randrange(n)
        return bytes(b[:cut]), f"kept {cut}/{n} bytes"
    start, length = rng.randrange(n), rng.randint(1, max(1, n // 8))
    if kind == "duplicate_span":
        span = b[start:start + length]
        return bytes(b[:start] + span + b[start:]), f"bytes {start}..{start + len(span)} doubled"
    b[start:start + length] = bytes(len(b[start:start + length]))
    return bytes(b), f"bytes {start}..{min(n, start + length)} zeroed"


def _node(rng: random.Random, m: onnx.ModelProto) -> tuple[int, onnx.NodeProto]:
    i = rng.randrange(len(m.graph.node))
    return i, m.graph.node[i]


def _io(rng: random.Random, m: onnx.ModelProto) -> onnx.ValueInfoProto:
    values = list(m.graph.input) + list(m.graph.output)
    return values[rng.randrange(len(values))]


def rename_op(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    i, n = _node(rng, m)
    new = rng.choice(["NoSuchOp", "", "conv", n.op_type + "X", "Relu", "Loop", "If", "Scaler", "Resize", "TopK"])
    old, n.op_type = n.op_type, new
    return f"node {i} {old} -> {new!r}"


def delete_node(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    i, n = _node(rng, m)
    del m.graph.node[i]
    return f"node {i} ({n.op_type}) deleted"


def dangling_input(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    i, n = _node(rng, m)
    if not n.input:
        n.input.append("nowhere")
    else:
        n.input[rng.randrange(len(n.input))] = "nowhere"
    return f"node {i} ({n.op_type}) reads 'nowhere'"


def wrong_attribute_type(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    nodes = [n for n in m.graph.node if n.attribute] or list(m.graph.node)
    n = rng.choice(nodes)
    if not n.attribute:
        n.attribute.append(h.make_attribute("axis", "bogus"))
        return f"{n.op_type}: added string attribute axis"
    a = rng.choice(list(n.attribute))
    choice = rng.randrange(4)
    if choice == 0:  # declared type disagrees with the field set
        a.type = rng.choice([onnx.AttributeProto.STRING, onnx.AttributeProto.FLOAT, onnx.AttributeProto.GRAPH,
                             onnx.AttributeProto.TENSORS, onnx.AttributeProto.UNDEFINED])
        return f"{n.op_type}.{a.name}: type field set to {a.type}"
    new = rng.choice([h.make_attribute(a.name, "text"), h.make_attribute(a.name, 1.5),
                      h.make_attribute(a.name, [1, 2, 3]), h.make_attribute(a.name, 2**62),
                      h.make_attribute(a.name, -(2**62)), h.make_attribute(a.name, [0.0])])
    a.CopyFrom(new)
    return f"{n.op_type}.{a.name} replaced by a {onnx.AttributeProto.AttributeType.Name(new.type)}"


def _dim_edit(rng: random.Random, m: onnx.ModelProto, values: list[int], what: str) -> str:
    vi = rng.choice(list(m.graph.input) or list(m.graph.output))
    dims = vi.type.tensor_type.shape.dim
    if not dims:
        for _ in range(len(values)):
            dims.add()
    for k, v in zip(rng.sample(range(len(dims)), min(len(values), len(dims))), values):
        dims[k].dim_value = v
    return f"'{vi.name}' {what}: {[d.dim_value if d.HasField('dim_value') else d.dim_param for d in dims]}"


def negative_dim(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    return _dim_edit(rng, m, [rng.choice([-1, -3, -(2**40)])], "negative dim")


def huge_dim(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    return _dim_edit(rng, m, [rng.choice([2**31, 2**40, 2**62, 2**63 - 1])], "huge dim")


def overflow_dims(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    return _dim_edit(rng, m, [2**40, 2**40, 2**40], "dims whose product passes int64")


def zero_dim(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    return _dim_edit(rng, m, [0], "zero dim")


def elem_type(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    vi = _io(rng, m)
    if vi.type.WhichOneof("value") != "tensor_type":
        vi.type.Clear()
        return f"'{vi.name}' type cleared"
    t = rng.choice([0, 0, 99, 17, 25, 16, 8, 2**31 - 1])
    vi.type.tensor_type.elem_type = t
    return f"'{vi.name}' elem_type {t}"


def value_info_type(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    vi = m.graph.value_info.add()
    n = rng.choice(list(m.graph.node))
    vi.name = n.output[0] if n.output else "x"
    vi.type.CopyFrom(h.make_tensor_type_proto(rng.choice([0, 7, 99, 12]), rng.choice([[-4], [0, 2**62], None, []])))
    return f"value_info for '{vi.name}': {vi.type.tensor_type.elem_type}"


def duplicate_output(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    if rng.random() < 0.5:
        m.graph.output.append(m.graph.output[0])
        return f"graph output '{m.graph.output[0].name}' listed twice"
    i, n = _node(rng, m)
    j, other = _node(rng, m)
    if n.output and other.output:
        n.output[0] = other.output[-1]
    return f"node {i} writes '{other.output[-1] if other.output else ''}' as node {j} does"


def bad_opset(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    o = rng.choice(list(m.opset_import))
    old = o.version
    o.version = rng.choice([0, 1, 6, 99, 2**40, -3])
    return f"opset {o.domain or 'ai.onnx'} {old} -> {o.version}"


def missing_opset(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    k = rng.randrange(len(m.opset_import))
    dom = m.opset_import[k].domain or "ai.onnx"
    if rng.random() < 0.3:
        m.opset_import.add(domain=rng.choice(["", "com.bogus"]), version=5)
        return f"extra opset import (duplicate domain or unknown) besides {dom}"
    del m.opset_import[k]
    return f"opset import {dom} removed"


def ir_version(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    m.ir_version = rng.choice([0, 1, 3, 99, -1])
    return f"ir_version {m.ir_version}"


def cycle(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    if len(m.graph.node) < 2:
        return dangling_input(rng, m, files)
    i = rng.randrange(len(m.graph.node) - 1)
    j = rng.randrange(i + 1, len(m.graph.node))
    a, b = m.graph.node[i], m.graph.node[j]
    if a.input and b.output:
        a.input[0] = b.output[0]
    if rng.random() < 0.5 and a.output and b.input:
        b.input[0] = a.output[0]  # a true two-node loop
    return f"node {i} ({a.op_type}) reads node {j}'s output"


def empty_name(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    choice = rng.randrange(3)
    if choice == 0:
        vi = _io(rng, m)
        old, vi.name = vi.name, ""
        return f"graph value '{old}' renamed ''"
    i, n = _node(rng, m)
    if choice == 1 and n.output:
        n.output[0] = ""
        return f"node {i} ({n.op_type}) output 0 named ''"
    if n.input:
        n.input[0] = ""
    return f"node {i} ({n.op_type}) input 0 named ''"


def initializer_edit(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    inits = [t for t in m.graph.initializer] or []
    if not inits:
        return rename_op(rng, m, files)
    t = rng.choice(inits)
    choice = rng.randrange(5)
    if choice == 0:
        t.dims.append(7)
        return f"initializer '{t.name}' dims {list(t.dims)} disagree with its data"
    if choice == 1:
        t.data_type = rng.choice([0, 8, 99, T.INT64, T.STRING])
        return f"initializer '{t.name}' data_type {t.data_type}"
    if choice == 2 and t.raw_data:
        t.raw_data = t.raw_data[: len(t.raw_data) // 2]
        return f"initializer '{t.name}' raw_data halved"
    if choice == 3:
        del t.dims[:]
        t.dims.extend([2**31, 2**31])
        return f"initializer '{t.name}' dims [2^31, 2^31]"
    t.name = m.graph.initializer[0].name
    return f"initializer '{t.name}' duplicated name"


def initializer_values(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    """Same dtype and dims, extreme values: shapes, indices, scales and k that the ops cannot take."""
    inits = [t for t in m.graph.initializer if t.data_location != T.EXTERNAL]
    if not inits:
        return attribute_value(rng, m, files)
    t = rng.choice(inits)
    arr = nh.to_array(t)
    value: float | int | bool
    if arr.dtype.kind == "u":
        value = rng.choice([0, int(np.iinfo(arr.dtype).max)])
    elif arr.dtype.kind == "i":
        value = rng.choice([-1, 0, -(2**31), 2**31 - 1] + ([2**62, -(2**62)] if arr.dtype.itemsize == 8 else []))
    elif arr.dtype.kind == "f":
        value = rng.choice([float("nan"), float("inf"), -float("inf"), 0.0, -1e30])
    else:
        value = not bool(arr.flat[0]) if arr.size else True
    new = np.full(arr.shape, value, dtype=arr.dtype)
    t.CopyFrom(nh.from_array(new, t.name))
    return f"initializer '{t.name}' {list(arr.shape)} all {value}"


def symbolic_dim(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    """A fixed dim of a graph input becomes symbolic (or the shape is dropped: unknown rank)."""
    vi = rng.choice(list(m.graph.input))
    shape = vi.type.tensor_type.shape
    if rng.random() < 0.3 or not shape.dim:
        vi.type.tensor_type.ClearField("shape")
        return f"'{vi.name}' has unknown rank"
    d = shape.dim[rng.randrange(len(shape.dim))]
    d.dim_param = rng.choice(["N", "", "batch", "?"])
    return f"'{vi.name}' dim made symbolic {d.dim_param!r}"


def attribute_value(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    """Valid attribute types with values the op cannot take (axis far out, zero kernel, ...)."""
    n = rng.choice(list(m.graph.node))
    name = rng.choice(["axis", "axes", "pads", "strides", "kernel_shape", "group", "k", "keepdims", "perm", "to"])
    value = rng.choice([2**62, -(2**62), 0, -1, [0, 0], [2**40] * 4, [-5, -5, -5, -5], 99])
    kept = [a for a in n.attribute if a.name != name]
    del n.attribute[:]
    n.attribute.extend(kept + [h.make_attribute(name, value)])
    return f"{n.op_type}.{name} = {value}"


def subgraph_edit(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    holders = [(n, a) for n in m.graph.node for a in n.attribute if a.type == onnx.AttributeProto.GRAPH]
    if not holders:
        return attribute_value(rng, m, files)
    n, a = rng.choice(holders)
    g = a.g
    choice = rng.randrange(6)
    if choice == 0 and g.node:
        del g.node[rng.randrange(len(g.node))]
        return f"{n.op_type}.{a.name}: a body node deleted"
    if choice == 1 and g.output:
        g.output[0].name = "unmade"
        return f"{n.op_type}.{a.name}: output 0 renamed 'unmade'"
    if choice == 2:
        g.input.append(h.make_tensor_value_info("extra", T.FLOAT, [1]))
        return f"{n.op_type}.{a.name}: an extra input"
    if choice == 3:
        del n.attribute[[x.name for x in n.attribute].index(a.name)]
        return f"{n.op_type}: attribute {a.name} removed"
    if choice == 4 and g.node:
        g.node[0].input[0] = "nowhere" if g.node[0].input else ""
        return f"{n.op_type}.{a.name}: body node reads 'nowhere'"
    if g.output:
        g.output[0].type.tensor_type.elem_type = rng.choice([0, 99, T.INT8])
    return f"{n.op_type}.{a.name}: output type {g.output[0].type.tensor_type.elem_type if g.output else '-'}"


def external_data_edit(rng: random.Random, m: onnx.ModelProto, files: dict[str, bytes]) -> str:
    tensors = [t for t in m.graph.initializer if t.data_location == T.EXTERNAL]
    if not tensors:
        return initializer_edit(rng, m, files)
    t = rng.choice(tensors)
    entries = {e.key: e for e in t.external_data}
    choice = rng.randrange(8)
    if choice == 0:
        entries["location"].value = "../outside.bin"
        files["../outside.bin"] = files[WEIGHTS]
        return f"'{t.name}' location '../outside.bin' (the file exists there)"
    if choice == 1:
        entries["location"].value = "/etc/hostname" if rng.random() < 0.5 else "/nonexistent/w.bin"
        return f"'{t.name}' absolute location {entries['location'].value}"
    if choice == 2:
        del files[WEIGHTS]
        return "external data file missing"
    if choice == 3:
        files[WEIGHTS] = files[WEIGHTS][: rng.randrange(len(files[WEIGHTS]))]
        return f"external data file truncated to {len(files[WEIGHTS])} bytes"
    if choice == 4:
        if "offset" not in entries:
            entries["offset"] = t.external_data.add(key="offset", value="0")
        entries["offset"].value = rng.choice(["99999999", "-8", "abc", str(2**63)])
        return f"'{t.name}' offset {entries['offset'].value}"
    if choice == 5:
        if "length" not in entries:
            entries["length"] = t.external_data.add(key="length", value="0")
        entries["length"].value = rng.choice(["4", "0", str(2**40), "-1"])
        return f"'{t.name}' length {entries['length'].value}"
    if choice == 6:
        t.external_data.add(key="bogus_key", value="1")
        return f"'{t.name}' unknown external-data key"
    entries["location"].value = rng.choice(["", "weights.bin\0x", "sub/../weights.bin", "."])
    return f"'{t.name}' location {entries['location'].value!r}"


SEMANTIC: dict[str, Edit] = {f.__name__: f for f in (
    rename_op, delete_node, dangling_input, wrong_attribute_type, negative_dim, huge_dim, overflow_dims, zero_dim,
    elem_type, value_info_type, duplicate_output, bad_opset, missing_opset, ir_version, cycle, empty_name,
    initializer_edit, initializer_values, symbolic_dim, attribute_value, subgraph_edit, external_data_edit)}
MUTATIONS = BYTE_MUTATIONS + tuple(SEMANTIC)
_SPECIFIC = {"subgraph_edit": "subgraphs", "external_data_edit": "external"}  # mutation -> the seed it fits


def make_mutant(seeds: list[SeedModel], mutant_id: int, seed: int) -> Mutant:
    """Mutant ``mutant_id`` of run ``seed``: a seed model (round robin) and one to three edits
    drawn from a generator seeded by (seed, id) only."""
    rng = random.Random(seed * 1_000_003 + mutant_id)
    base = seeds[mutant_id % len(seeds)]
    files: dict[str, bytes] = {}
    if base.weights is not None:
        files[WEIGHTS] = base.weights
    kinds = [k for k in MUTATIONS if k not in _SPECIFIC or base.name == _SPECIFIC[k]]
    kind = rng.choice(kinds + [k for k, s in _SPECIFIC.items() if s == base.name] * 3)  # weighted up where they apply
    proto = onnx.ModelProto()
    proto.CopyFrom(base.proto)
    if kind in BYTE_MUTATIONS:
        data, detail = _byte_mutation(kind, rng, proto.SerializeToString())
    else:
        details = [SEMANTIC[kind](rng, proto, files)]
        if rng.random() < 0.2:  # now and then a second, different edit on top
            extra = rng.choice(tuple(SEMANTIC))
            try:
                details.append(f"{extra}: {SEMANTIC[extra](rng, proto, files)}")
            except (IndexError, ValueError, KeyError):  # the first edit left nothing for it to edit
                details.append(f"{extra}: nothing left to edit")
        data, detail = proto.SerializeToString(), "; ".join(details)
    files["model.onnx"] = data
    return Mutant(mutant_id, base.name, kind, detail, files, base.shapes)

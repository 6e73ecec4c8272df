"""Reading initializers' raw_data lengths from a serialized model: the same answer protobuf's
parse gives, on exported models and on the wire forms protobuf merges (a field twice, unknown
fields), and no answer where the bytes hold something the reader does not follow. And the bytes
TensorRT's parser is handed where an input declares dims it would read otherwise than loading."""
from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from partitioner.model import FIX_INPUT_DIMS, load_model
from partitioner.wire import external_locations, initializer_raw_lengths, matches, untied_inputs
from tests.helpers import const, model, vi


def parsed_lengths(data: bytes) -> list[int | None]:
    proto = onnx.ModelProto.FromString(data)
    return [len(t.raw_data) if t.HasField("raw_data") else None for t in proto.graph.initializer]


def matmul(weights: list[TensorProto]) -> onnx.ModelProto:
    nodes = [helper.make_node("Identity", ["x"], ["y"])]
    return model(nodes, [vi("x", [4])], [vi("y", [4])], weights)


def field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def test_lengths_of_the_onnx_packages_models_match_the_parse(light_dir) -> None:
    paths = sorted(glob.glob(os.path.join(light_dir, "*.onnx")))
    assert len(paths) >= 5
    for path in paths:
        data = open(path, "rb").read()
        got = initializer_raw_lengths(data)
        assert got == parsed_lengths(data), path
        assert got is not None and sum(n or 0 for n in got) > 0, path
        view = memoryview(data)
        assert initializer_raw_lengths(view) == got, path


def test_every_kind_of_initializer() -> None:
    inline = const("w", np.arange(64, dtype=np.float32))
    typed = helper.make_tensor("f", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])  # float_data, no raw_data
    empty = const("e", np.zeros((0, 4), np.float32))  # raw_data present and empty
    external = onnx.TensorProto(name="x_w", data_type=TensorProto.FLOAT, dims=[2])
    external.data_location = TensorProto.EXTERNAL
    entry = external.external_data.add()
    entry.key, entry.value = "location", "w.bin"
    data = matmul([inline, typed, empty, external]).SerializeToString()
    assert initializer_raw_lengths(data) == [256, None, 0, None] == parsed_lengths(data)


def test_a_field_twice_is_read_as_protobuf_merges_it() -> None:
    small = const("w", np.arange(4, dtype=np.float32)).SerializeToString()
    twice = small + field(9, b"\0" * 10)  # raw_data again: the last one is kept
    graph = field(5, twice) + field(1, helper.make_node("Identity", ["x"], ["y"]).SerializeToString())
    extra = field(5, const("v", np.arange(3, dtype=np.int64)).SerializeToString())
    base = matmul([]).SerializeToString()
    data = base + field(7, graph) + field(7, extra)  # the graph twice: its initializers are added in turn
    assert parsed_lengths(data) == [10, 24]
    assert initializer_raw_lengths(data) == [10, 24]


def test_unknown_fields_are_skipped() -> None:
    tensor = const("w", np.arange(8, dtype=np.float32)).SerializeToString()
    unknown = (_varint(90 << 3 | 0) + _varint(300) + _varint(91 << 3 | 1) + b"\1" * 8 + _varint(92 << 3 | 5)
               + b"\2" * 4 + field(93, b"anything"))
    data = matmul([]).SerializeToString() + field(7, unknown + field(5, unknown + tensor + unknown)) + unknown
    assert parsed_lengths(data) == [32]
    assert initializer_raw_lengths(data) == [32]


def test_what_it_does_not_follow_gives_no_answer() -> None:
    good = matmul([const("w", np.arange(8, dtype=np.float32))]).SerializeToString()
    group = _varint(95 << 3 | 3) + _varint(95 << 3 | 4)  # an empty group: protobuf parses it, this reader does not
    assert initializer_raw_lengths(good + group) is None
    assert initializer_raw_lengths(good[:-3]) is None  # cut short
    assert initializer_raw_lengths(good + b"\xff" * 11) is None  # a varint past 64 bits
    assert initializer_raw_lengths(good + _varint(7 << 3 | 0) + _varint(1)) is None  # graph as a number


def test_matches_needs_one_entry_per_initializer_and_a_length_exactly_where_raw_data_is() -> None:
    assert matches([4, None, 0], [True, False, True])
    assert not matches(None, [True])
    assert not matches([4], [True, False])
    assert not matches([4, None], [True, True])
    assert not matches([None], [True])
    assert matches([], [])


def test_external_data_files_are_named_without_parsing(tmp_path) -> None:
    """A model whose weights went to data files names them, as the parsed model does; one holding
    them inline names none; bytes the reader does not follow give no answer."""
    w = onnx.numpy_helper.from_array(np.arange(4096, dtype=np.float32), "w")
    v = onnx.numpy_helper.from_array(np.ones(4096, dtype=np.float32), "v")
    nodes = [helper.make_node("Add", ["x", "w"], ["t"]), helper.make_node("Mul", ["t", "v"], ["y"])]
    inline = model(nodes, [vi("x", [4096])], [vi("y", [4096])], [w, v])
    assert external_locations(inline.SerializeToString()) == set()
    path = str(tmp_path / "m.onnx")
    onnx.save(inline, path, save_as_external_data=True, all_tensors_to_one_file=False, size_threshold=0)
    with open(path, "rb") as f:
        data = f.read()
    parsed = onnx.load(path, load_external_data=False)
    named = {e.value for t in parsed.graph.initializer for e in t.external_data if e.key == "location"}
    assert external_locations(data) == named and len(named) == 2
    assert external_locations(b"\x00\x01garbage") is None


def test_graph_inputs_are_the_inputs_no_initializer_gives() -> None:
    """The declared inputs minus those a dense or sparse initializer gives (older exporters
    declare every weight as an input too), in order, each with its ValueInfoProto's bytes, as the
    parsed model says; None for bytes the reader does not follow."""
    from partitioner.wire import graph_inputs

    def graph_input_names(data: bytes) -> list[str] | None:
        found = graph_inputs(data)
        return None if found is None else [name for name, _ in found]

    w = onnx.numpy_helper.from_array(np.ones(4, np.float32), "w")
    sparse_values = onnx.numpy_helper.from_array(np.ones(1, np.float32), "s")
    sparse = helper.make_sparse_tensor(sparse_values, onnx.numpy_helper.from_array(np.zeros(1, np.int64), "i"), [4])
    nodes = [helper.make_node("Add", ["x", "w"], ["a"]), helper.make_node("Add", ["a", "s"], ["b"]),
             helper.make_node("Mul", ["b", "mask"], ["y"])]
    graph = helper.make_graph(nodes, "g", [vi("x", [4]), vi("w", [4]), vi("s", [4]), vi("mask", [4])], [vi("y", [4])],
                              [w], sparse_initializer=[sparse])
    data = helper.make_model(graph).SerializeToString()
    assert graph_input_names(data) == ["x", "mask"]
    for path in sorted(glob.glob(os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/*.onnx")))[:3]:
        with open(path, "rb") as f:
            raw = f.read()
        proto = onnx.ModelProto.FromString(raw)
        inits = {t.name for t in proto.graph.initializer}
        assert graph_inputs(raw) == [(i.name, i.SerializeToString()) for i in proto.graph.input if i.name not in inits]
    assert graph_input_names(b"\x3b\x00") is None  # (wire type 3, a group: not followed)


def _input_dims(proto: onnx.ModelProto) -> list[list[int | str | None]]:
    """Each graph input's declared dims: a number, a name, or None for a dim holding no value."""
    return [[getattr(d, d.WhichOneof("value")) if d.WhichOneof("value") else None
             for d in v.type.tensor_type.shape.dim] for v in proto.graph.input]


@pytest.mark.parametrize("inputs, untied", [
    ([["?", 3, "?", "?"]], [[None, 3, None, None]]),  # (Paddle2ONNX's classifiers: "?" on three dims)
    ([[-1, 3, "?", "?"]], [[None, 3, None, None]]),
    ([["?", 3, 8, 8], ["?", 3, 8, 8]], [[None, 3, 8, 8], [None, 3, 8, 8]]),
    ([[0, 3, "h", "w"]], [[None, 3, "h", "w"]]),
    ([[-1, 3, "?", "w"]], None),  # (one "?": the parser reads it as dynamic, as loading takes it)
    ([[-1, 3, 8, 8], ["n", 3, 8, 8]], None),
])
def test_untied_inputs_are_the_inputs_loading_leaves(inputs, untied) -> None:
    """Where TensorRT's parser would read an input's declared dim otherwise than loading takes it
    (a 0 as an empty dim, "?" on two dims as dims held equal), the file's bytes handed to it have
    every unknown dim of the inputs holding no value, as the loaded model has them; outputs, nodes,
    weights and the rest stay as the file has them."""
    names = [f"x{k}" for k in range(len(inputs))]
    nodes = [helper.make_node("Add", [n, "w"], [f"r{k}"]) for k, n in enumerate(names)]
    outs = [vi(f"r{k}", ["?", 0, -1, "?"]) for k in range(len(names))]
    proto = model(nodes, [vi(n, dims) for n, dims in zip(names, inputs)], outs,
                  [const("w", np.arange(8, dtype=np.float32))])
    data = proto.SerializeToString()
    got = untied_inputs(data)
    loaded = load_model(proto)
    assert (FIX_INPUT_DIMS in loaded.fix_kinds) == (untied is not None)
    if untied is None:
        assert got is None
        return
    assert got is not None
    handed = onnx.ModelProto.FromString(got)
    assert _input_dims(handed) == untied == _input_dims(loaded.proto)
    del proto.graph.input[:], handed.graph.input[:]
    assert handed == proto  # (everything else as the file has it)


def test_untied_inputs_count_inputs_as_loading_does() -> None:
    """A weight an old exporter also lists as an input is no input to the parser or to loading: its
    "?" dims do not tie the one input's; a type other than a tensor's declares no dims; a graph
    given twice (protobuf merges the two) is not followed."""
    w = const("w", np.ones((2, 4), np.float32))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    listed = model(nodes, [vi("x", ["?", 2]), vi("w", ["?", "?"])], [vi("y", ["?", 4])], [w])
    assert FIX_INPUT_DIMS not in load_model(listed).fix_kinds
    assert untied_inputs(listed.SerializeToString()) is None
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, ["?", "?"])
    nodes = [helper.make_node("SequenceLength", ["s"], ["n"]), helper.make_node("Relu", ["x"], ["y"])]
    with_seq = model(nodes, [seq, vi("x", ["?", 3])], [vi("n", []), vi("y", ["?", 3])])
    assert untied_inputs(with_seq.SerializeToString()) is None
    tied = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", ["?", "?"])], [vi("y", ["?", "?"])])
    data = tied.SerializeToString()
    assert untied_inputs(data) is not None
    assert untied_inputs(data + field(7, tied.graph.SerializeToString())) is None

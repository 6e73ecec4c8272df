"""Weights as external data through load, planning and extraction: never read into the proto,
locations checked (no ``..``, no absolute paths, file present and long enough), a tensor past
TensorRT's 2^31-1 elements a verdict, a >2 GiB model in memory a clear error naming the fix."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.support.external_mlp import write_mlp
from partitioner import (
    ModelLoadError,
    ModelTooLargeError,
    PartitionOptions,
    load_model,
    plan_model,
)
from partitioner.capability import QueryResult
from partitioner.weights import (
    ALLOWED_KEYS,
    INLINE_MAX_BYTES,
    inline_payloads,
    is_external,
    refuse_embedded_past_limit,
    structure_sha256,
    tensor_array,
)
from tests.helpers import model, vi

HIDDEN = 256  # weights of 256 KiB each: above INLINE_MAX_BYTES, so they stay external


@pytest.fixture
def mlp(tmp_path) -> str:
    path = str(tmp_path / "mlp.onnx")
    write_mlp(path, HIDDEN, 4)
    return path


def test_big_weights_stay_external_and_small_ones_are_read_in(mlp) -> None:
    m = load_model(mlp)
    by_name = {t.name: t for t in m.proto.graph.initializer}
    assert is_external(by_name["w0"]) and not is_external(by_name["b0"])  # 256 KiB vs 1 KiB
    assert m.proto.ByteSize() < 20_000 < 4 * HIDDEN * HIDDEN * 4
    assert m.base_dir == os.path.dirname(mlp)
    w0 = tensor_array(by_name["w0"], m.base_dir)
    raw = np.fromfile(mlp + ".data", np.float32, count=HIDDEN * HIDDEN).reshape(HIDDEN, HIDDEN)
    assert w0.shape == (HIDDEN, HIDDEN) and np.array_equal(w0, raw)
    assert HIDDEN * HIDDEN * 4 > INLINE_MAX_BYTES


class _AllTensorRT:
    target = "fake"

    def query(self, sub: onnx.ModelProto) -> QueryResult:
        return QueryResult(True)


def test_segments_reference_the_original_data_file(mlp) -> None:
    plan = plan_model(load_model(mlp), _AllTensorRT(), PartitionOptions())
    seg = plan.extract(0)
    external = [t for t in seg.graph.initializer if is_external(t)]
    assert {t.name for t in external} == {"w0", "w1", "w2", "w3"}
    for t in external:
        keys = {e.key: e.value for e in t.external_data}
        assert set(keys) <= ALLOWED_KEYS and keys["location"] == "mlp.onnx.data"
        assert int(keys["length"]) == HIDDEN * HIDDEN * 4
    assert seg.ByteSize() < 20_000


def _edit_location(path: str, tmp_path, value: str) -> str:
    proto = onnx.load(path, load_external_data=False)
    for t in proto.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = value
    out = str(tmp_path / "edited.onnx")
    onnx.save(proto, out)
    return out


@pytest.mark.parametrize("location, message", [
    ("../mlp.onnx.data", r"tensor 'w0' names external data '\.\./mlp\.onnx\.data' outside the model's folder"),
    ("sub/../../x.data", r"outside the model's folder \('\.\.' is refused\)"),
    ("/etc/passwd", r"tensor 'w0' names its external data by the absolute path '/etc/passwd'"),
])
def test_locations_leaving_the_folder_are_refused(mlp, tmp_path, location, message) -> None:
    with pytest.raises(ModelLoadError, match=message):
        load_model(_edit_location(mlp, tmp_path, location))


def test_missing_and_truncated_data_files_name_file_and_tensor(mlp) -> None:
    data = mlp + ".data"
    size = os.path.getsize(data)
    with open(data, "r+b") as f:
        f.truncate(size - 100)
    with pytest.raises(ModelLoadError, match=r"external data file 'mlp\.onnx\.data' is truncated: tensor 'b3' "
                                             rf"needs bytes {size - HIDDEN * 4}\.\.{size}, the file has {size - 100}"):
        load_model(mlp)
    os.remove(data)
    with pytest.raises(ModelLoadError, match=r"external data file 'mlp\.onnx\.data' of tensor '\w+' not found"):
        load_model(mlp)


def test_unknown_external_data_keys_are_refused(mlp, tmp_path) -> None:
    proto = onnx.load(mlp, load_external_data=False)
    e = proto.graph.initializer[4].external_data.add()
    e.key, e.value = "basepath", "/tmp"
    out = tmp_path / "keys.onnx"
    onnx.save(proto, str(out))
    with pytest.raises(ModelLoadError, match=r"tensor 'w0' has external-data key\(s\) basepath; only checksum, "
                                             "length, location, offset are accepted"):
        load_model(str(out))


class _PastTwoGiB:
    """Stands in for a ModelProto holding 3 GiB of weights inside (ByteSize is what is asked)."""

    def ByteSize(self) -> int:
        return 3 * 2**30


def test_a_model_in_memory_past_two_gib_is_refused_naming_the_fix() -> None:
    with pytest.raises(ModelTooLargeError, match=r"<ModelProto>: the model holds 3\.00 GiB of weights inside its "
                                                 r"protobuf.*save it with external data \(onnx\.save\(model, "
                                                 r"'model\.onnx', save_as_external_data=True"):
        refuse_embedded_past_limit(_PastTwoGiB(), "<ModelProto>")  # type: ignore[arg-type]


def test_a_tensor_past_two_to_the_31_elements_goes_to_onnx_runtime(tmp_path) -> None:
    big = 2**31 + 64  # int8: a sparse data file of 2 GiB takes no disk space
    w = onnx.TensorProto()
    w.name, w.data_type = "huge", onnx.TensorProto.INT8
    w.dims.append(big)
    w.data_location = onnx.TensorProto.EXTERNAL
    for k, v in (("location", "huge.bin"), ("offset", "0"), ("length", str(big))):
        e = w.external_data.add()
        e.key, e.value = k, v
    with open(tmp_path / "huge.bin", "wb") as f:
        f.truncate(big)
    nodes = [helper.make_node("Shape", ["huge"], ["s"], name="shape_of_huge"),
             helper.make_node("Cast", ["s"], ["sf"], to=onnx.TensorProto.FLOAT, name="cast"),
             helper.make_node("Add", ["x", "sf"], ["y"], name="add")]
    m = model(nodes, [vi("x", [1])], [vi("y", [1])], [w])
    onnx.save(m, str(tmp_path / "huge.onnx"))
    plan = plan_model(load_model(str(tmp_path / "huge.onnx")), _AllTensorRT(), PartitionOptions(min_segment_size=1))
    verdicts = {n.name: (n.verdict, n.reason) for n in plan.nodes}
    assert verdicts["shape_of_huge"] == ("onnxruntime", f"tensor 'huge' has {big} elements, more than the "
                                         "2147483647 (2^31-1) a TensorRT tensor can hold")
    assert verdicts["add"][0] == "tensorrt"


def _inline(mlp: str, path: str) -> onnx.ModelProto:
    proto = onnx.load(mlp)  # the external weights read in: saved inline below
    onnx.save(proto, path)
    return proto


def test_inline_payloads_say_where_each_initializer_holds_its_bytes(mlp, tmp_path) -> None:
    path = str(tmp_path / "inline.onnx")
    proto = _inline(mlp, path)
    found = inline_payloads(path)
    with open(path, "rb") as f:
        content = f.read()
    inits = list(proto.graph.initializer)
    assert sorted(found) == sorted(t.name for t in inits) and len(found) == 4 * 2 + 4  # weights, biases, Det's shapes
    for t in inits:
        p = found[t.name]
        assert (p.length, p.data_type, p.dims) == (len(t.raw_data), t.data_type, tuple(t.dims))
        assert content[p.offset:p.offset + p.length] == t.raw_data
    assert found["w0"].length == HIDDEN * HIDDEN * 4 and found["w0"].offset % 4096 != 0  # where protobuf put it


def test_inline_payloads_leave_out_what_cannot_be_referred_to(mlp, tmp_path) -> None:
    path = str(tmp_path / "dup.onnx")
    proto = _inline(mlp, path)
    proto.graph.initializer[1].name = proto.graph.initializer[0].name  # a name given twice: neither is taken
    dup = proto.graph.initializer[0].name
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())
    found = inline_payloads(path)
    assert dup not in found and len(found) == len(proto.graph.initializer) - 2
    (tmp_path / "notes.txt").write_text("not a model at all")
    (tmp_path / "empty.onnx").write_bytes(b"")
    assert inline_payloads(str(tmp_path / "notes.txt")) == {} and inline_payloads(str(tmp_path / "empty.onnx")) == {}
    # external data: only the Det block's small shape tensors hold raw_data inside the file
    assert sorted(inline_payloads(mlp)) == ["det_axes", "det_expand", "det_in_shape", "det_out_shape"]
    with pytest.raises(ModelLoadError, match="not an ONNX model"):
        structure_sha256(str(tmp_path / "notes.txt"))


def test_structure_digest_skips_the_weights_bytes_only(mlp, tmp_path) -> None:
    path = str(tmp_path / "inline.onnx")
    proto = _inline(mlp, path)
    before, size = structure_sha256(path), os.path.getsize(path)
    w0 = inline_payloads(path)["w0"]
    with open(path, "r+b") as f:  # other weights, same place and size: the structure is the same
        f.seek(w0.offset + 16)
        f.write(b"\x01\x02\x03\x04")
    assert structure_sha256(path) == before
    assert proto.graph.node[0].name == "matmul_0"
    proto.graph.node[0].name = "matmul_X"  # another graph of the same size
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())
    assert os.path.getsize(path) == size and structure_sha256(path) != before

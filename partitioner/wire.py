"""What a serialized ModelProto says about its main graph's initializers, read from the protobuf
wire format without parsing the message: tags and lengths only, the weights' bytes are skipped,
so a 100 MB model costs the few pages its headers sit on.

Two readers use it. Loading checks that every inline weight holds as many bytes as its dims and
dtype need; asking the parsed message, ``len(tensor.raw_data)``, copies the bytes (protobuf's upb
hands a bytes field over as a new ``bytes`` object): ~30 ms for ResNet-50's 100 MB, where
:func:`initializer_raw_lengths` reads the lengths in front of them. And a build folder that refers
to the weights inside the user's model file (``--weights-by-reference``) needs where each one's
bytes sit in that file: :func:`initializer_payloads`. A build that hands TensorRT the model file
early, before onnx is loaded, reads which external data files it names
(:func:`external_locations`), whether each is one a model may name (:func:`location_problem`) and
what it records of the file to tell later that it is still the one read (:func:`file_status`). And
where loading takes dims declared on the model's inputs otherwise than TensorRT's parser reads them,
the parser is asked about the file with those dims as loading leaves them (:func:`untied_inputs`,
which writes the few bytes of the inputs' declarations anew and copies the rest). A question to the
parser names the ops of its nodes (:func:`main_graph_ops`) to leave out those whose build crashes
TensorRT's builder (``trt_backend.tensorrt.questions``), in a child that has no onnx loaded too."""
from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

Buffer = bytes | bytearray | memoryview | mmap.mmap  # anything indexed to byte values

# Field numbers of onnx.proto
_MODEL_GRAPH = 7  # ModelProto.graph
_GRAPH_NODE, _GRAPH_INITIALIZER = 1, 5  # GraphProto.node, GraphProto.initializer
_GRAPH_INPUT, _GRAPH_SPARSE_INITIALIZER = 11, 15  # GraphProto.input, GraphProto.sparse_initializer
_VALUE_INFO_NAME, _SPARSE_VALUES = 1, 1  # ValueInfoProto.name, SparseTensorProto.values
_TENSOR_DIMS, _TENSOR_DATA_TYPE, _TENSOR_NAME, _TENSOR_RAW_DATA = 1, 2, 8, 9  # TensorProto fields
_TENSOR_EXTERNAL_DATA, _ENTRY_KEY, _ENTRY_VALUE = 13, 1, 2  # TensorProto.external_data, StringStringEntryProto
_VALUE_INFO_TYPE, _TYPE_TENSOR = 2, 1  # ValueInfoProto.type, TypeProto.tensor_type
_TYPE_ONEOF = frozenset({1, 4, 5, 8, 9})  # TypeProto's value: tensor, sequence, map, sparse tensor, optional
_TENSOR_TYPE_SHAPE, _SHAPE_DIM = 2, 1  # TypeProto.Tensor.shape, TensorShapeProto.dim
_DIM_VALUE, _DIM_PARAM = 1, 2  # TensorShapeProto.Dimension's value: a number or a name
_NODE_OP_TYPE, _NODE_DOMAIN = 4, 7  # NodeProto.op_type, NodeProto.domain
# Wire types
_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5


class _Unfollowed(ValueError):
    """The bytes hold something this reader does not follow (groups, a malformed varint, field
    number 0, a field running past its message): the caller asks the parsed message instead, or
    says the file is no ONNX model."""


@dataclass(frozen=True)
class Payload:
    """Where the ``raw_data`` bytes of one main-graph initializer sit inside an ONNX file, with
    the dtype and dims the file gives it."""

    offset: int
    length: int
    data_type: int
    dims: tuple[int, ...]


def fields(view: Buffer, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, value start, value end) of each field of the message held in
    ``view[start:end]``, in order; a varint's value is given as a number in place of its start
    (its end is where the next field begins). ValueError for anything else."""
    pos = start
    while pos < end:
        tag, pos = _varint(view, pos, end)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise _Unfollowed("field number 0")
        if wire == _VARINT:
            value, pos = _varint(view, pos, end)
            yield number, wire, value, pos
            continue
        if wire == _LENGTH_DELIMITED:
            size, pos = _varint(view, pos, end)
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
        else:  # groups (3, 4), long deprecated and never written by ONNX exporters, and unknown types
            raise _Unfollowed(f"wire type {wire}")
        if pos + size > end:
            raise _Unfollowed("a field runs past its message")
        yield number, wire, pos, pos + size
        pos += size


def _length_delimited(view: Buffer, start: int, end: int, wanted: int) -> Iterator[tuple[int, int]]:
    """(start, end) of the payload of every occurrence of field ``wanted``, which must be
    length-delimited, in the message held in ``view[start:end]``."""
    for number, wire, a, b in fields(view, start, end):
        if number == wanted:
            if wire != _LENGTH_DELIMITED:
                raise _Unfollowed(f"field {wanted} with wire type {wire}")
            yield a, b


def initializer_raw_lengths(data: Buffer) -> list[int | None] | None:
    """For the ModelProto serialized in ``data``, per initializer of its main graph in the order
    protobuf parses them: the length of its ``raw_data`` (the last one where the field appears
    twice, as protobuf keeps it), or None where it has none. A graph field that appears twice adds
    its initializers after the first one's, as protobuf merges them. None when ``data`` holds
    anything this reader does not follow; a caller also compares the answer with the parsed
    message (:func:`matches`) before trusting it."""
    lengths: list[int | None] = []
    try:
        for start, end in _length_delimited(data, 0, len(data), _MODEL_GRAPH):
            for t_start, t_end in _length_delimited(data, start, end, _GRAPH_INITIALIZER):
                length = None
                for r_start, r_end in _length_delimited(data, t_start, t_end, _TENSOR_RAW_DATA):
                    length = r_end - r_start
                lengths.append(length)
    except _Unfollowed:
        return None
    return lengths


def matches(lengths: Sequence[int | None] | None, has_raw_data: Sequence[bool]) -> bool:
    """Whether ``lengths`` (from :func:`initializer_raw_lengths`) fits the parsed initializers,
    given whether each has a ``raw_data`` field: one entry each, a length exactly where one is."""
    return lengths is not None and len(lengths) == len(has_raw_data) and all(
        (n is not None) == has for n, has in zip(lengths, has_raw_data))


def main_graph_nodes(view: Buffer) -> int | None:
    """How many nodes the main graph of the ModelProto serialized in ``view`` holds; None where the
    bytes hold anything this reader does not follow."""
    try:
        return sum(1 for start, end in _length_delimited(view, 0, len(view), _MODEL_GRAPH)
                   for _ in _length_delimited(view, start, end, _GRAPH_NODE))
    except _Unfollowed:
        return None


def main_graph_ops(view: Buffer) -> list[tuple[str, str]] | None:
    """The (domain, op type) of each node of the main graph of the ModelProto serialized in
    ``view``, in order, the default domain as ""; None where the bytes hold anything this reader
    does not follow (or a name that is not UTF-8)."""
    try:
        ops = []
        for start, end in _length_delimited(view, 0, len(view), _MODEL_GRAPH):
            for a, b in _length_delimited(view, start, end, _GRAPH_NODE):
                domain = _last_string(view, a, b, _NODE_DOMAIN)
                ops.append(("" if domain == "ai.onnx" else domain, _last_string(view, a, b, _NODE_OP_TYPE)))
    except (_Unfollowed, UnicodeDecodeError):
        return None
    return ops


def graph_inputs(view: Buffer) -> list[tuple[str, bytes]] | None:
    """The inputs a caller feeds to the main graph of the ModelProto serialized in ``view``: its
    declared inputs that no initializer (dense or sparse) gives a value, in order, each as its name
    and its serialized ValueInfoProto (a few bytes: parse it for the type). None where the bytes
    hold anything this reader does not follow (or a name that is not UTF-8)."""
    try:
        declared: list[tuple[str, bytes]] = []
        valued: set[str] = set()
        for start, end in _length_delimited(view, 0, len(view), _MODEL_GRAPH):
            for number, wire, a, b in fields(view, start, end):
                if wire != _LENGTH_DELIMITED:
                    continue
                if number == _GRAPH_INPUT:
                    declared.append((_last_string(view, a, b, _VALUE_INFO_NAME), bytes(view[a:b])))
                elif number == _GRAPH_INITIALIZER:
                    valued.add(_last_string(view, a, b, _TENSOR_NAME))
                elif number == _GRAPH_SPARSE_INITIALIZER:
                    for v_start, v_end in _length_delimited(view, a, b, _SPARSE_VALUES):
                        valued.add(_last_string(view, v_start, v_end, _TENSOR_NAME))
    except (_Unfollowed, UnicodeDecodeError):
        return None
    return [(name, info) for name, info in declared if name not in valued]


def untied_inputs(view: Buffer) -> bytes | None:
    """The ModelProto serialized in ``view`` with the dims its main graph's inputs declare as
    unknown (a number of 0 or less, or the name "?") holding no value, as loading leaves them
    (``partitioner.model._unknown_dims``), where TensorRT's parser would read one of them
    otherwise: a 0 (an empty dim to the parser), or "?" where it names two dims or more of the
    inputs (dims the parser holds equal). The inputs are those no initializer gives a value, as
    loading counts them. None where no input declares such a dim, or where the bytes hold anything
    this reader does not follow (a graph or an input's type given twice, which protobuf merges)."""
    try:
        graphs = list(_length_delimited(view, 0, len(view), _MODEL_GRAPH))
        if len(graphs) != 1:
            return None
        g_start, g_end = graphs[0]
        valued = {_last_string(view, a, b, _TENSOR_NAME)
                  for a, b in _length_delimited(view, g_start, g_end, _GRAPH_INITIALIZER)}
        inputs = [(a, b) for a, b in _length_delimited(view, g_start, g_end, _GRAPH_INPUT)
                  if _last_string(view, a, b, _VALUE_INFO_NAME) not in valued]
        dims = [d for a, b in inputs for d in _declared_dims(view, a, b)]
        unnamed = sum(d == "?" for d in dims)
        if not any(d == 0 or (d == "?" and unnamed > 1) for d in dims):
            return None
        kept = {a for a, _ in inputs}
        graph = _rewritten(view, g_start, g_end, lambda number, a, b: _value_info_untied(view, a, b)
                           if number == _GRAPH_INPUT and a in kept else None)
        return _rewritten(view, 0, len(view), lambda number, a, b: graph if number == _MODEL_GRAPH else None)
    except (_Unfollowed, UnicodeDecodeError):
        return None


def _tensor_shape(view: Buffer, start: int, end: int) -> tuple[int, int] | None:
    """(start, end) of the TensorShapeProto of the ValueInfoProto in ``view[start:end]``, where its
    type is a tensor's with a shape; None otherwise."""
    types = list(_length_delimited(view, start, end, _VALUE_INFO_TYPE))
    if len(types) > 1:
        raise _Unfollowed("a type given twice")
    if not types:
        return None
    oneof = [(number, a, b) for number, _, a, b in fields(view, *types[0]) if number in _TYPE_ONEOF]
    if not oneof or oneof[-1][0] != _TYPE_TENSOR:
        return None
    if sum(number == _TYPE_TENSOR for number, _, _ in oneof) > 1:
        raise _Unfollowed("a tensor type given twice")
    shapes = list(_length_delimited(view, oneof[-1][1], oneof[-1][2], _TENSOR_TYPE_SHAPE))
    if len(shapes) > 1:
        raise _Unfollowed("a shape given twice")
    return shapes[0] if shapes else None


def _dim(view: Buffer, start: int, end: int) -> int | str | None:
    """The TensorShapeProto.Dimension in ``view[start:end]``: its number, its name, or None."""
    value: int | str | None = None
    for number, wire, a, b in fields(view, start, end):
        if number == _DIM_VALUE and wire == _VARINT:
            value = _signed(a)
        elif number == _DIM_PARAM and wire == _LENGTH_DELIMITED:
            value = bytes(view[a:b]).decode("utf-8")
        elif number in (_DIM_VALUE, _DIM_PARAM):
            raise _Unfollowed(f"dim field {number} with wire type {wire}")
    return value


def _unknown(dim: int | str | None) -> bool:
    """Whether a declared dim means "unknown" (``partitioner.model.declared_unknown``)."""
    return dim == "?" if isinstance(dim, str) else dim is not None and dim <= 0


def _declared_dims(view: Buffer, start: int, end: int) -> list[int | str | None]:
    """The dims the ValueInfoProto in ``view[start:end]`` declares for its tensor."""
    shape = _tensor_shape(view, start, end)
    return [] if shape is None else [_dim(view, a, b) for a, b in _length_delimited(view, *shape, _SHAPE_DIM)]


def _value_info_untied(view: Buffer, start: int, end: int) -> bytes | None:
    """The ValueInfoProto in ``view[start:end]`` with its tensor's unknown dims holding no value;
    None where it has none."""
    def in_type(number: int, a: int, b: int) -> bytes | None:
        return _rewritten(view, a, b, in_tensor) if number == _TYPE_TENSOR else None

    def in_tensor(number: int, a: int, b: int) -> bytes | None:
        return _rewritten(view, a, b, in_shape) if number == _TENSOR_TYPE_SHAPE else None

    def in_shape(number: int, a: int, b: int) -> bytes | None:
        return b"" if number == _SHAPE_DIM and _unknown(_dim(view, a, b)) else None

    return _rewritten(view, start, end, lambda number, a, b: _rewritten(view, a, b, in_type)
                      if number == _VALUE_INFO_TYPE else None)


def _rewritten(view: Buffer, start: int, end: int, change: Callable[[int, int, int], bytes | None]) -> bytes | None:
    """The message in ``view[start:end]`` with each length-delimited field for which
    ``change(field number, payload start, payload end)`` gives bytes holding those bytes instead;
    None where it gives none."""
    out, pos, changed = bytearray(), start, False
    for number, wire, a, b in fields(view, start, end):
        new = change(number, a, b) if wire == _LENGTH_DELIMITED else None
        if new is None:
            out += view[pos:b]
        else:
            out += _varint_bytes(number << 3 | _LENGTH_DELIMITED) + _varint_bytes(len(new)) + new
            changed = True
        pos = b
    return bytes(out) if changed else None


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _last_string(view: Buffer, start: int, end: int, wanted: int) -> str:
    """The string field ``wanted`` of the message in ``view[start:end]`` (its last occurrence, as
    protobuf keeps it; "" where it has none)."""
    text = ""
    for a, b in _length_delimited(view, start, end, wanted):
        text = bytes(view[a:b]).decode("utf-8")
    return text


def external_locations(view: Buffer) -> set[str] | None:
    """The files (``location``, as written) that the main graph's initializers of the ModelProto
    serialized in ``view`` keep their data in; None where the bytes hold anything this reader does
    not follow, or an initializer keeps its data outside without naming a file."""
    found: set[str] = set()
    try:
        for start, end in _length_delimited(view, 0, len(view), _MODEL_GRAPH):
            for t_start, t_end in _length_delimited(view, start, end, _GRAPH_INITIALIZER):
                entries = {_last_string(view, a, b, _ENTRY_KEY): _last_string(view, a, b, _ENTRY_VALUE)
                           for a, b in _length_delimited(view, t_start, t_end, _TENSOR_EXTERNAL_DATA)}
                if entries:
                    if not entries.get("location"):
                        return None
                    found.add(entries["location"])
    except (_Unfollowed, UnicodeDecodeError):
        return None
    return found


def location_problem(location: str) -> str | None:
    """Why ``location`` is not a place a model may keep external data (it must be relative, inside
    the model's folder, without ``..``): ``"absolute"``, ``"outside"`` or ``"empty"``; None where it may."""
    if not location:
        return "empty"
    norm = location.replace("\\", "/")
    if os.path.isabs(location) or norm.startswith("/") or (len(norm) > 1 and norm[1] == ":"):
        return "absolute"
    return "outside" if ".." in norm.split("/") else None


def external_bytes(data: bytes, folder: str) -> int | None:
    """The size of the files in ``folder`` that the model serialized in ``data`` keeps weights in
    (0: it keeps none outside); None where that cannot be told: bytes the wire reader does not
    follow, a file named outside ``folder`` (loading refuses it) or not there."""
    locations = external_locations(data)
    if locations is None:
        return None
    total = 0
    for location in locations:
        if location_problem(location) is not None:
            return None
        try:
            total += os.path.getsize(os.path.join(folder, location))
        except OSError:
            return None
    return total


def file_status(info: os.stat_result) -> tuple[int, int, int, int]:
    """What a reader of a model file records of it, to tell later that a file is still the one it
    read: its size, modification time (ns), inode and device."""
    return info.st_size, info.st_mtime_ns, info.st_ino, info.st_dev


def initializer_payloads(view: Buffer) -> tuple[dict[str, Payload], list[tuple[int, int]]]:
    """(the raw_data payload of each main-graph initializer by name, the (offset, length) of every
    one of them, in file order) of the ModelProto serialized in ``view``. A name given twice is
    left out of the first. ValueError where the bytes are no protobuf
    message this reader follows, or the graph is missing or split over several fields."""
    graphs = list(_length_delimited(view, 0, len(view), _MODEL_GRAPH))
    if len(graphs) != 1:  # No graph, or one split over fields that protobuf merges: nothing to refer to.
        raise _Unfollowed(f"{len(graphs)} graph fields")
    payloads: dict[str, Payload] = {}
    twice: set[str] = set()
    ranges: list[tuple[int, int]] = []
    start, end = graphs[0]
    for a, b in _length_delimited(view, start, end, _GRAPH_INITIALIZER):
        name, payload = _tensor_payload(view, a, b)
        if payload is None:
            continue
        ranges.append((payload.offset, payload.length))
        if name is None or name in payloads or name in twice:
            twice.add(name or "")
            payloads.pop(name or "", None)
        else:
            payloads[name] = payload
    return payloads, ranges


def _tensor_payload(view: Buffer, start: int, end: int) -> tuple[str | None, Payload | None]:
    name: str | None = None
    raw: tuple[int, int] | None = None
    data_type = 0
    dims: list[int] = []
    for number, wire, a, b in fields(view, start, end):
        if number == _TENSOR_NAME and wire == _LENGTH_DELIMITED:
            name = bytes(view[a:b]).decode("utf-8", errors="replace")
        elif number == _TENSOR_RAW_DATA and wire == _LENGTH_DELIMITED:
            raw = (a, b - a)
        elif number == _TENSOR_DATA_TYPE and wire == _VARINT:
            data_type = a
        elif number == _TENSOR_DIMS and wire == _VARINT:
            dims.append(_signed(a))
        elif number == _TENSOR_DIMS and wire == _LENGTH_DELIMITED:  # packed
            pos = a
            while pos < b:
                value, pos = _varint(view, pos, b)
                dims.append(_signed(value))
    return name, (Payload(raw[0], raw[1], data_type, tuple(dims)) if raw is not None else None)


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _varint(view: Buffer, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Unfollowed("a malformed varint")
        byte = view[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7

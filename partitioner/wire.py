"""What a serialized ModelProto says about its main graph's initializers, read from the protobuf
wire format without parsing the message: the length of each one's ``raw_data``.

Loading checks that every inline weight holds as many bytes as its dims and dtype need. Asking
the parsed message, ``len(tensor.raw_data)``, copies the bytes (protobuf's upb hands a bytes field
over as a new ``bytes`` object): ~30 ms for ResNet-50's 100 MB. The serialized model states each
length in front of its bytes, so reading the few fields around them answers without a copy."""
from __future__ import annotations

from collections.abc import Sequence

Buffer = bytes | bytearray | memoryview

# Field numbers and wire types of onnx.proto: ModelProto.graph = 7, GraphProto.initializer = 5,
# TensorProto.raw_data = 9, each length-delimited (wire type 2).
_MODEL_GRAPH = 7
_GRAPH_INITIALIZER = 5
_TENSOR_RAW_DATA = 9
_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5


class _Unfollowed(Exception):
    """The bytes hold something this reader does not follow (groups, a malformed varint, a field
    of ours with another wire type): the caller asks the parsed message instead."""


def initializer_raw_lengths(data: Buffer) -> list[int | None] | None:
    """For the ModelProto serialized in ``data`` (bytes, or a memoryview of unsigned bytes), per
    initializer of its main graph in the order protobuf parses them: the length of its
    ``raw_data`` (the last one where the field appears twice, as protobuf keeps it), or None
    where it has none. A graph field that appears twice adds its initializers after the first
    one's, as protobuf merges them. None when ``data`` holds anything this reader does not
    follow; a caller also compares the answer with the parsed message (one entry per
    initializer, ``HasField("raw_data")`` where a length is given) before trusting it."""
    lengths: list[int | None] = []
    try:
        for start, end in _message_fields(data, 0, len(data), _MODEL_GRAPH):
            for t_start, t_end in _message_fields(data, start, end, _GRAPH_INITIALIZER):
                length = None
                for r_start, r_end in _message_fields(data, t_start, t_end, _TENSOR_RAW_DATA):
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


def _message_fields(view: Buffer, pos: int, end: int, wanted: int) -> list[tuple[int, int]]:
    """(start, end) of the payload of every occurrence of length-delimited field ``wanted`` in
    the message held in ``view[pos:end]``, in order."""
    found = []
    while pos < end:
        key, pos = _varint(view, pos, end)
        number, wire_type = key >> 3, key & 7
        if wire_type == _LENGTH_DELIMITED:
            size, pos = _varint(view, pos, end)
            if pos + size > end:
                raise _Unfollowed
            if number == wanted:
                found.append((pos, pos + size))
            pos += size
        elif number == wanted or number == 0:
            raise _Unfollowed
        elif wire_type == _VARINT:
            _, pos = _varint(view, pos, end)
        elif wire_type == _FIXED64:
            pos += 8
        elif wire_type == _FIXED32:
            pos += 4
        else:  # groups (3, 4), long deprecated and never written by ONNX exporters, and unknown types
            raise _Unfollowed
    if pos != end:
        raise _Unfollowed
    return found


def _varint(view: Buffer, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Unfollowed
        byte = view[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7

"""Load and normalize an ONNX model: one entry point for paths, bytes and ModelProtos.

Normalization makes node names unique and stable, fits the IR version to the opset imports
(and to what the installed runtime accepts), and runs ONNX shape inference keeping symbolic
dims. Models whose inputs have unknown dims or unknown rank are accepted."""
from __future__ import annotations

import logging
import mmap
import os
import stat
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import onnx
from google.protobuf.message import DecodeError, EncodeError

from partitioner.errors import InvalidModelError, ModelLoadError, ModelTooLargeError
from partitioner.folding import fold_for_inference
from partitioner.graph import GraphIndex, node_reads, subgraphs
from partitioner.walk import is_typed, types_past_inference
from partitioner.weights import (
    check_external,
    external_reference,
    external_tensors,
    is_external,
    raw_nbytes,
    refuse_embedded_past_limit,
    tensor_nbytes,
    uses_external_data,
)
from partitioner.wire import file_status, initializer_raw_lengths, matches

log = logging.getLogger(__name__)

ModelSource = Union[str, "os.PathLike[str]", bytes, onnx.ModelProto]

# Initializers above this size are shown to shape inference and the checker as external
# references: both need dims and dtypes, not values, and copying weights costs time and memory.
_WEIGHTLESS_THRESHOLD = 1024
_CHECKER_MAX_BYTES = 2_000_000_000  # protobuf's serialization limit is 2 GiB


@dataclass
class Model:
    """A loaded, normalized model and its dependency index."""

    proto: onnx.ModelProto
    source: str
    base_dir: str | None
    index: GraphIndex
    fixes: list[str] = field(default_factory=list)
    # what kinds of fix ``fixes`` holds (the FIX_* names below)
    fix_kinds: set[str] = field(default_factory=set)
    # Highest IR version the caller's runtime accepts (None: the onnx package's own); extracted
    # segments are written within it too.
    max_ir_version: int | None = None
    # tensor -> how its type was learned where shape inference could not tell (see learn_types)
    learned: dict[str, str] = field(default_factory=dict)
    # node name -> what a rewrite pass made of it (see partitioner.qdq)
    rewritten: dict[str, str] = field(default_factory=dict)
    # the input shapes (one tuple of (input, shape) pairs per run) the learned types were learned
    # at, by whoever learned them (a runtime; the partitioner only records it)
    probe_shapes: tuple[tuple[tuple[str, tuple[int, ...]], ...], ...] = ()
    # the graph outputs' types as ONNX Runtime describes them (see described_output), taken when
    # the model was loaded, from what its ops compute of its inputs: not from a type a run learned
    # (one learned at some input shapes holds those shapes); empty: the graph outputs' own
    output_types: tuple[onnx.TypeProto, ...] = ()
    # the size, modification time (ns), inode and device of the file the model was read from, as
    # it was read (partitioner.wire.file_status); empty: not read from a file
    file_status: tuple[int, ...] = ()
    # what shapes_at found, by the input shapes asked (and the node count, should nodes change)
    sized: dict[Any, dict[str, tuple[int, ...]]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def nodes(self) -> list[onnx.NodeProto]:
        return list(self.proto.graph.node)


def load_model(source: ModelSource | Model, *, base_dir: str | None = None,
               max_ir_version: int | None = None) -> Model:
    """Read and normalize ``source``; raise :class:`ModelLoadError`/:class:`InvalidModelError`.
    ``max_ir_version``: the highest IR version the runtime that will run the model accepts
    (passed in by the caller, as the capability oracle is; None: the onnx package's own)."""
    if isinstance(source, Model):
        return source
    proto, name, base_dir, raw_lengths, status = _read(source, base_dir)
    model = normalize(proto, name=name, base_dir=base_dir, max_ir_version=max_ir_version, raw_lengths=raw_lengths)
    model.file_status = status
    return model


RawLengths = Sequence[int | None]


def _read(source: ModelSource, base_dir: str | None
          ) -> tuple[onnx.ModelProto, str, str | None, RawLengths | None, tuple[int, ...]]:
    """The parsed model, its name, the folder its external data is relative to, where they were
    read from its bytes, the ``raw_data`` lengths of its initializers (see :func:`_parse`), and
    the status of the file it was read from (``Model.file_status``)."""
    raw_lengths: RawLengths | None = None
    status: tuple[int, ...] = ()
    if isinstance(source, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(source)
        name = "<ModelProto>"
    elif isinstance(source, (bytes, bytearray, memoryview)):
        proto, raw_lengths = _parse(bytes(source), "<bytes>")
        name = "<bytes>"
    elif isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        name = path
        if not os.path.exists(path):
            raise ModelLoadError(f"{path}: no such file")
        if os.path.isdir(path):
            raise ModelLoadError(f"{path}: is a directory, not an ONNX model file")
        proto, raw_lengths, status = _read_file(path)
        base_dir = base_dir if base_dir is not None else os.path.dirname(os.path.abspath(path))
    else:
        raise ModelLoadError(f"cannot load a model from {type(source).__name__}; "
                             "pass a path, bytes or an onnx.ModelProto")
    _load_external(proto, name, base_dir)
    return proto, name, base_dir, raw_lengths, status


def _read_file(path: str) -> tuple[onnx.ModelProto, RawLengths | None, tuple[int, ...]]:
    """Parse the model file at ``path``, and its status (:func:`~partitioner.wire.file_status`). A
    regular file is mapped into memory and parsed from there, which spares a copy of its bytes
    (``read()`` of a 100 MB file costs about as long as parsing it); anything else (a pipe, a
    device, a file that cannot be mapped) is read. (Another process cutting the file short while it is parsed would
    end this one with SIGBUS; the files this package writes are replaced by renaming, never
    rewritten in place.)"""
    try:
        with open(path, "rb") as f:
            info = os.fstat(f.fileno())
            mapped = None
            if stat.S_ISREG(info.st_mode) and info.st_size > 0:
                try:
                    mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                except (OSError, ValueError):  # a file system that cannot map files
                    mapped = None
            if mapped is None:
                return (*_parse(f.read(), path), file_status(info))
            with mapped, memoryview(mapped) as view:
                return (*_parse(view, path), file_status(info))
    except OSError as e:
        raise ModelLoadError(f"{path}: cannot read it ({e.strerror or e})") from None


# Below this many bytes of the serialized model per entry of its main graph (node, initializer,
# value_info, input, output), reading the initializers' lengths from the bytes (:mod:`partitioner.wire`,
# ~1-3 us per entry) costs more than copying their raw data to measure it (~0.3 ms per MB).
_WIRE_READ_MIN_BYTES_PER_ENTRY = 4096


def _parse(data: bytes | memoryview, name: str) -> tuple[onnx.ModelProto, RawLengths | None]:
    """The ModelProto in ``data``, and the ``raw_data`` length of each of its main graph's
    initializers where reading them from ``data`` is cheaper than asking the parsed message
    (which copies the bytes): None otherwise, or where ``data`` holds something that reading
    does not follow."""
    if not data:
        raise ModelLoadError(f"{name}: file is empty")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise ModelLoadError(f"{name}: not an ONNX model or truncated ({e})") from None
    if not proto.HasField("graph") or not proto.opset_import:
        raise ModelLoadError(f"{name}: not an ONNX model (no graph or no opset imports)")
    graph = proto.graph
    entries = (len(graph.node) + len(graph.initializer) + len(graph.value_info) + len(graph.input)
               + len(graph.output))
    if len(data) < _WIRE_READ_MIN_BYTES_PER_ENTRY * entries:
        return proto, None
    lengths = initializer_raw_lengths(data)
    return proto, (lengths if matches(lengths, [t.HasField("raw_data") for t in graph.initializer]) else None)


def _load_external(proto: onnx.ModelProto, name: str, base_dir: str | None) -> None:
    """External data stays where it is: checked (see :mod:`partitioner.weights`), small tensors
    read in; a model in memory with more than 2 GiB inside is refused, naming the fix."""
    if not uses_external_data(proto):
        if name == "<ModelProto>":
            refuse_embedded_past_limit(proto, name)
        return
    refs = check_external(proto, base_dir, name)
    if refs:
        log.info("%s: %d tensor(s), %.1f MiB, stay in external data", name, len(refs),
                 sum(r.length for r in refs) / 2**20)


def normalize(proto: onnx.ModelProto, *, name: str = "<ModelProto>", base_dir: str | None = None,
              max_ir_version: int | None = None, raw_lengths: RawLengths | None = None) -> Model:
    """Validate and normalize ``proto`` in place; return the :class:`Model`. ``raw_lengths``: the
    ``raw_data`` length of each initializer, where the caller read them from the bytes it parsed
    ``proto`` from (see :func:`check_model`)."""
    graph = proto.graph
    if len(graph.node) == 0:
        raise InvalidModelError(f"{name}: the graph has no nodes")
    bad = _names_not_utf8(proto)
    if bad is not None:
        raise InvalidModelError(f"{name}: invalid ONNX model: {_utf8_problem(bad)}")
    fixes = _Fixes()
    _unknown_dims(graph, name, fixes)
    _check_declared_types(graph, name)
    _unique_node_names(graph, fixes)
    _constant_initializer_inputs(graph, fixes)
    _fit_ir_version(proto, fixes, max_ir_version)
    index = GraphIndex.build(graph, where=name)  # structure first: clearer errors than the checker's
    check_model(proto, where=name, raw_lengths=raw_lengths)
    own = _dim_names([*graph.input, *graph.output])
    declared_outputs = [onnx.TypeProto.FromString(o.type.SerializeToString()) for o in graph.output]
    computed: list[onnx.TypeProto] = []
    declared = _infer_shapes(proto, name, fixes, computed)
    index.refresh_types()
    if fixes:
        log.info("%s: %s", name, "; ".join(fixes))
    described = [described_output(c, d, own) for c, d in zip(computed, declared_outputs)] \
        if len(computed) == len(declared_outputs) else []
    return Model(proto=proto, source=name, base_dir=base_dir, index=index, fixes=list(fixes),
                 fix_kinds=set(fixes.kinds), max_ir_version=max_ir_version,
                 learned=dict.fromkeys(declared, DECLARED), output_types=tuple(described))


def _dim_names(values: Sequence[onnx.ValueInfoProto]) -> set[str]:
    """The dim names (dim_param) in the tensor types of ``values``."""
    return {d.dim_param for vi in values if vi.type.WhichOneof("value") == "tensor_type"
            for d in vi.type.tensor_type.shape.dim if d.WhichOneof("value") == "dim_param"}


def describe_outputs(proto: onnx.ModelProto, model: Model) -> onnx.ModelProto:
    """``proto`` (a copy of ``model``'s) with its graph outputs' types set to those ``model``
    describes them with (``Model.output_types``): what a model saved for loading again declares,
    so that it describes its outputs as the model it was loaded from did."""
    if len(model.output_types) == len(proto.graph.output):
        for out, tp in zip(proto.graph.output, model.output_types):
            out.type.CopyFrom(tp)
    return proto


def described_output(computed: onnx.TypeProto, declared: onnx.TypeProto, own: Collection[str]) -> onnx.TypeProto:
    """A graph output's type as ONNX Runtime describes it: ``declared`` (the model's own), with
    ``computed`` (what shape inference computes from the inputs, without the model's value_info:
    a folder's model declares the types a probe learned at its profile's shapes there) where the
    declaration leaves a dim open. Per dim: a declared number; a computed number over a declared
    name; a declared name; a computed name the model's declarations use (``own``: the dim names
    of its graph inputs and outputs), where a name inference made up (``unk__N``) is left unnamed.
    A computed number against a declared one, or another rank, leaves every dim unknown (ONNX
    Runtime's lenient merge)."""
    if computed.WhichOneof("value") != "tensor_type" or declared.WhichOneof("value") != "tensor_type" \
            or not declared.tensor_type.HasField("shape"):
        out = onnx.TypeProto.FromString(computed.SerializeToString())
        if out.WhichOneof("value") == "tensor_type":
            for d in out.tensor_type.shape.dim:
                if d.WhichOneof("value") == "dim_param" and d.dim_param not in own:
                    d.Clear()
        return out
    out = onnx.TypeProto()
    out.tensor_type.elem_type = declared.tensor_type.elem_type or computed.tensor_type.elem_type
    shape = out.tensor_type.shape
    shape.SetInParent()
    dd = declared.tensor_type.shape.dim
    if not computed.tensor_type.HasField("shape"):
        shape.CopyFrom(declared.tensor_type.shape)
        return out
    cd = computed.tensor_type.shape.dim
    if len(cd) != len(dd):
        out.tensor_type.ClearField("shape")
        return out
    conflict = False
    for c, d in zip(cd, dd):
        dim = shape.dim.add()
        c_kind, d_kind = c.WhichOneof("value"), d.WhichOneof("value")
        if d_kind == "dim_value":
            dim.dim_value = d.dim_value
            conflict |= c_kind == "dim_value" and c.dim_value != d.dim_value
        elif c_kind == "dim_value":
            dim.dim_value = c.dim_value
        elif d_kind == "dim_param":
            dim.dim_param = d.dim_param
        elif c_kind == "dim_param" and c.dim_param in own:
            dim.dim_param = c.dim_param
    if conflict:
        for dim in shape.dim:
            dim.Clear()
    return out


# The kinds of fix loading makes. The first five leave what TensorRT's parser makes of the model as
# the file's own: node names (the parser names nodes by index), the IR version, weights an old
# exporter also listed as graph inputs (the parser takes such an input as its initializer), dims
# declared -1 or "?" that the parser reads as dynamic too (it reads declared dims of the main
# graph's inputs only; see _unknown_dims), and graph output shapes the ops contradict (of a graph
# output the parser reads its name and element type only, and shape inference keeps a declared
# element type as it is). Input dims it reads otherwise are FIX_INPUT_DIMS.
FIX_NODE_NAMES, FIX_IR_VERSION, FIX_CONSTANT_INPUTS = "node names", "IR version", "constant inputs"
FIX_UNKNOWN_DIMS, FIX_INPUT_DIMS = "unknown dims", "input dims"
FIX_OUTPUT_SHAPES, FIX_QDQ = "output shapes", "Q/DQ rewrite"
FIX_DIM_NAMES = "dim names"  # names shapes given contradict (untie_contradicted_dims): never the file as it is
PARSER_NEUTRAL_FIXES = frozenset({FIX_NODE_NAMES, FIX_IR_VERSION, FIX_CONSTANT_INPUTS, FIX_UNKNOWN_DIMS,
                                  FIX_OUTPUT_SHAPES})
# The fixes of a model whose file TensorRT's parser may still be handed in its place: the neutral
# ones, and input dims, which the file's bytes are given on their way to the parser too
# (partitioner.wire.untied_inputs makes the dims loading takes as unknown hold no value).
FILE_HANDED_FIXES = PARSER_NEUTRAL_FIXES | {FIX_INPUT_DIMS}


class _Fixes(list[str]):
    """What loading fixed, in words, and the kinds of fix that are (``FIX_*``)."""

    def __init__(self) -> None:
        super().__init__()
        self.kinds: set[str] = set()

    def add(self, kind: str, text: str) -> None:
        self.append(text)
        self.kinds.add(kind)


def untie_contradicted_dims(model: Model, runs: Sequence[Mapping[str, Sequence[int]]]) -> list[str]:
    """Dim names the model's inputs share that shapes given for them contradict (in one of
    ``runs``, input -> shape, two inputs hold the name at different sizes) are dropped: each dim
    of that name becomes unknown, in every graph input and output, and types are inferred again;
    returns those names, a fix of kind FIX_DIM_NAMES and a warning saying so. An exporter's
    dynamic axes named alike by mistake (PyTorch's ``dynamic_axes`` of two inputs, [batch, height,
    width] for features [1, N, 256] and boxes [1, N, 8]) are no constraint to ONNX Runtime, which
    runs such a model; TensorRT holds dims of one name equal and refuses the profile, and the
    shapes, which the user gave, are what the model is run at."""
    graph = model.proto.graph
    weights = {t.name for t in graph.initializer}
    inputs = [vi for vi in graph.input if vi.name not in weights and vi.type.WhichOneof("value") == "tensor_type"]
    clashes: dict[str, list[str]] = {}
    for run in runs:
        held: dict[str, dict[int, str]] = {}  # name -> size -> where
        for vi in inputs:
            shape, dims = run.get(vi.name), vi.type.tensor_type.shape.dim
            if shape is None or len(shape) != len(dims):
                continue
            for axis, d in enumerate(dims):
                if d.WhichOneof("value") == "dim_param" and d.dim_param:
                    held.setdefault(d.dim_param, {}).setdefault(int(shape[axis]), f"'{vi.name}' dim {axis}")
        for name, sizes in held.items():
            if len(sizes) > 1 and name not in clashes:
                clashes[name] = [f"{where} {size}" for size, where in sizes.items()]
    if not clashes:
        return []
    for vi in (*graph.input, *graph.output):
        if vi.type.WhichOneof("value") == "tensor_type":
            for d in vi.type.tensor_type.shape.dim:
                if d.WhichOneof("value") == "dim_param" and d.dim_param in clashes:
                    d.Clear()
    said = "; ".join(f"'{name}' ({', '.join(where)})" for name, where in clashes.items())
    text = (f"dim name(s) the inputs share but the shapes given size differently, dropped: {said} (ONNX Runtime "
            "does not hold named dims equal; TensorRT would, and refuse the shapes)")
    log.warning("%s: %s", model.source, text)
    model.fixes.append(text)
    model.fix_kinds.add(FIX_DIM_NAMES)
    reindex(model)
    return list(clashes)


def reindex(model: Model) -> None:
    """Index ``model`` again and infer its types after a pass edited its graph (the pass drops
    the value_info of tensors whose producer it replaced)."""
    model.index = GraphIndex.build(model.proto.graph, where=model.source)
    _infer_shapes(model.proto, model.source)
    model.index.refresh_types()


# How a tensor typed only by the model's own value_info (shape inference could not tell) is recorded
# in ``Model.learned``: a runtime that can run the model checks such types (trt_backend's probe).
DECLARED = "the model's value_info"

_KNOWN_ELEM_TYPES = frozenset(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED}
_INT64_MAX = 2**63 - 1


def _check_declared_types(graph: onnx.GraphProto, name: str, scope: str = "") -> None:
    """Graph inputs, outputs and value_info, subgraphs' too, declare dtypes ONNX knows (not
    UNDEFINED; initializers and tensor attributes too) and no dims whose product passes int64 (the
    checker lets these through; they would fail later, far from their cause, in a runtime's
    message, or in shape inference's ValueError, that names no tensor)."""
    tensors = [(f"initializer '{t.name}'", t) for t in graph.initializer]
    tensors += [(f"node '{n.name or n.op_type}' ({n.op_type}) attribute '{a.name}'", a.t)
                for n in graph.node for a in n.attribute if a.HasField("t")]
    for what, t in tensors:
        if t.data_type not in _KNOWN_ELEM_TYPES:
            raise InvalidModelError(f"{name}: {scope}{what} has data_type {t.data_type}, "
                                    "which is not an ONNX data type")
    for node in graph.node:
        for attr in node.attribute:
            for k, sub in enumerate([attr.g] if attr.HasField("g") else list(attr.graphs)):
                label = attr.name if attr.HasField("g") else f"{attr.name}[{k}]"
                _check_declared_types(sub, name,
                                      f"{scope}node '{node.name or node.op_type}' ({node.op_type}) {label}: ")
    for kind, values in (("input", graph.input), ("output", graph.output), ("value_info", graph.value_info)):
        what = scope + (f"graph {kind}" if kind != "value_info" else "value_info of")
        for vi in values:
            if vi.type.WhichOneof("value") != "tensor_type":
                continue
            tt = vi.type.tensor_type
            if tt.elem_type not in _KNOWN_ELEM_TYPES:
                problem = (f"elem_type {tt.elem_type}, which is not an ONNX data type" if tt.elem_type
                           else "no data type (elem_type 0, UNDEFINED)")
                raise InvalidModelError(f"{name}: {what} '{vi.name}' declares {problem}")
            product = 1
            for d in tt.shape.dim:
                if d.WhichOneof("value") == "dim_value":
                    product *= max(d.dim_value, 0)
            if product > _INT64_MAX:
                dims = [x.dim_value if x.WhichOneof("value") == "dim_value" else x.dim_param or "?"
                        for x in tt.shape.dim]
                raise InvalidModelError(f"{name}: {what} '{vi.name}' declares shape {dims}, whose element count "
                                        "passes int64 (2^63 - 1)")


def declared_unknown(d: onnx.TensorShapeProto.Dimension) -> bool:
    """Whether a declared dim means "unknown" (see :func:`_unknown_dims`): a number of 0 or less,
    or the name "?". Every reader of a model's declared shapes takes them so."""
    which = d.WhichOneof("value")
    return (which == "dim_value" and d.dim_value <= 0) or (which == "dim_param" and d.dim_param == "?")


def _unknown_dims(graph: onnx.GraphProto, name: str, fixes: _Fixes) -> None:
    """Dims declared as a negative number (Paddle2ONNX and older tf2onnx write -1 for a dynamic
    batch) in graph inputs, outputs and value_info, subgraphs' too, and 0 in graph inputs and
    outputs (some exporters write 0 there), become unknown dims, as ONNX Runtime takes them; one
    warning says so. A 0 in value_info is left to shape inference, which computes a real empty
    tensor as one and overrides a declaration that contradicts the ops (a declaration it cannot
    check, of a tensor it cannot type, has its 0 dims made unknown: see _infer_shapes). Dims named
    "?", which Paddle2ONNX writes for every dynamic dim, become unknown too: a name says that the
    dims holding it are equal, and TensorRT holds a model to that (an image's height and width both
    named "?" cannot differ), while ONNX Runtime does not.

    TensorRT's parser reads the declared dims of the main graph's inputs only: -1 as dynamic, 0 as
    an empty dim, a name as dynamic and equal to every other input dim of that name. A fix it reads
    otherwise (a 0, or a "?" on two dims or more of the inputs) is of kind FIX_INPUT_DIMS, for
    which a build hands TensorRT the file with those dims as loading leaves them
    (:func:`partitioner.wire.untied_inputs`, which follows this rule); the rest are
    FIX_UNKNOWN_DIMS, which a build may hand TensorRT the file for as it is."""
    found: list[str] = []
    weights = {t.name for t in graph.initializer}
    inputs = [vi for vi in graph.input if vi.name not in weights and vi.type.WhichOneof("value") == "tensor_type"]
    unnamed = sum(d.WhichOneof("value") == "dim_param" and d.dim_param == "?"
                  for vi in inputs for d in vi.type.tensor_type.shape.dim)
    parser_read = {id(vi) for vi in inputs}
    read_otherwise: list[str] = []  # (of found: dims the parser reads otherwise)

    def visit(g: onnx.GraphProto, scope: str) -> None:
        for node in g.node:
            for attr in node.attribute:
                for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                    visit(sub, f"{scope}{node.name or node.op_type}/")
        interface = {id(vi) for vi in (*g.input, *g.output)}
        for vi in (*g.input, *g.output, *g.value_info):
            if vi.type.WhichOneof("value") != "tensor_type":
                continue
            for axis, d in enumerate(vi.type.tensor_type.shape.dim):
                # (a 0 inside the graph can be a real empty tensor, as shape inference writes one; one
                # that is not yields there to what the ops compute, see _infer_shapes)
                if declared_unknown(d) and (id(vi) in interface or d.WhichOneof("value") != "dim_value"
                                            or d.dim_value < 0):
                    declared = repr(d.dim_param) if d.dim_param else str(d.dim_value)
                    found.append(f"{scope}{vi.name}[{axis}]={declared}")
                    if id(vi) in parser_read and (d.dim_value == 0 if d.WhichOneof("value") == "dim_value"
                                                  else unnamed > 1):
                        read_otherwise.append(found[-1])
                    d.Clear()

    visit(graph, "")
    if found:
        shown = ", ".join(found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")
        log.warning("%s: %d dim(s) declared as -1, 0 or '?' (%s) taken as unknown dims, as ONNX Runtime takes them",
                    name, len(found), shown)
        fixes.add(FIX_INPUT_DIMS if read_otherwise else FIX_UNKNOWN_DIMS,
                  f"{len(found)} dim(s) declared as -1, 0 or '?' taken as unknown")


def _names_not_utf8(proto: onnx.ModelProto) -> tuple[str, bytes | str] | None:
    """The first name ``proto`` gives that is not UTF-8 text, as ONNX requires (a node's name, op
    type, domain, inputs and outputs, a graph input's, output's, value_info's or initializer's name,
    an opset's domain; in the main graph or a subgraph), as :func:`not_utf8` gives it; None where
    every one is. ONNX's checker takes such a name; nothing downstream can print or record it
    (protobuf hands it over as bytes). Names only: :func:`not_utf8` reads every field, too slowly
    for every load of a graph of 60,000 nodes."""
    for k, opset in enumerate(proto.opset_import):
        if isinstance(opset.domain, bytes):
            return f"opset_import[{k}].domain", opset.domain
    stack = [(proto.graph, "graph")]
    while stack:
        graph, path = stack.pop()
        for part in ("input", "output", "value_info", "initializer"):
            for k, v in enumerate(getattr(graph, part)):
                if isinstance(v.name, bytes):
                    return f"{path}.{part}[{k}].name", v.name
        for i, node in enumerate(graph.node):
            inputs, outputs = node.input, node.output
            if bytes in {type(node.name), type(node.op_type), type(node.domain)} \
                    or any(type(t) is bytes for t in inputs) or any(type(t) is bytes for t in outputs):
                for part, value in (("name", node.name), ("op_type", node.op_type), ("domain", node.domain),
                                    *((f"input[{k}]", t) for k, t in enumerate(inputs)),
                                    *((f"output[{k}]", t) for k, t in enumerate(outputs))):
                    if type(value) is bytes:
                        return f"{path}.node[{i}].{part}", value
            for a, attr in enumerate(node.attribute):
                where = f"{path}.node[{i}].attribute[{a}]"
                stack.extend([(attr.g, f"{where}.g")] if attr.type == onnx.AttributeProto.GRAPH else
                             [(g, f"{where}.graphs[{k}]") for k, g in enumerate(attr.graphs)])
    return None


def _utf8_problem(bad: tuple[str, bytes | str]) -> str:
    path, value = bad
    return f"a name or string in it is not valid UTF-8: {path} is {value!r}"


def _unique_node_names(graph: onnx.GraphProto, fixes: _Fixes) -> None:
    taken = {n.name for n in graph.node if n.name}
    seen: set[str] = set()
    renamed = 0
    for i, node in enumerate(graph.node):
        if node.name and node.name not in seen:
            seen.add(node.name)
            continue
        base = f"{node.op_type}_{i}"
        candidate, k = base, 1
        while candidate in taken or candidate in seen:
            candidate, k = f"{base}_{k}", k + 1
        node.name = candidate
        seen.add(candidate)
        taken.add(candidate)
        renamed += 1
    if renamed:
        fixes.add(FIX_NODE_NAMES, f"named {renamed} unnamed or duplicate-named node(s)")


def _constant_initializer_inputs(graph: onnx.GraphProto, fixes: _Fixes) -> None:
    """Graph inputs that are also initializers (IR 3 exporters list every weight as an input) are
    taken as constants: TensorRT cannot build weights that arrive at run time."""
    init = {t.name for t in graph.initializer}
    keep = [vi for vi in graph.input if vi.name not in init]
    if len(keep) != len(graph.input):
        fixes.add(FIX_CONSTANT_INPUTS,
                  f"{len(graph.input) - len(keep)} graph input(s) with an initializer taken as constant(s)")
        del graph.input[:]
        graph.input.extend(keep)


def required_ir_version(proto: onnx.ModelProto) -> int:
    """Lowest IR version that can carry the model's opset imports and its initializers: IR 3
    required every initializer of a graph to be one of the graph's inputs too, IR 4 lifted that
    (ONNX Runtime loads an IR 3 model either way; ONNX's checker holds it to the rule)."""
    opsets = [o for o in proto.opset_import if o.domain in ("", "ai.onnx", "ai.onnx.ml", "ai.onnx.training")]
    try:
        need = int(onnx.helper.find_min_ir_version_for(opsets, ignore_unknown=True))
    except ValueError:
        need = 3
    return 4 if need < 4 and _initializer_not_input(proto.graph) else need


def _initializer_not_input(graph: onnx.GraphProto) -> bool:
    """Whether an initializer of ``graph`` or of a subgraph in it is not one of its graph's inputs."""
    stack = [graph]
    while stack:
        g = stack.pop()
        if g.initializer and not {t.name for t in g.initializer} <= {vi.name for vi in g.input}:
            return True
        stack.extend(sub for node in g.node for sub in subgraphs(node))
    return False


def fitting_ir_version(proto: onnx.ModelProto, max_ir_version: int | None = None) -> int:
    """IR version to write: the model's own if consistent, raised to what its opsets need,
    lowered to ``max_ir_version`` (what the runtime accepts; None: the onnx package's own IR
    version) when the opsets allow it."""
    need = required_ir_version(proto)
    ir = max(int(proto.ir_version), need)
    cap = int(onnx.IR_VERSION) if max_ir_version is None else max_ir_version
    if ir > cap:
        ir = max(need, cap)
    return ir


def _fit_ir_version(proto: onnx.ModelProto, fixes: _Fixes, max_ir_version: int | None) -> None:
    ir = fitting_ir_version(proto, max_ir_version)
    if ir != proto.ir_version:
        initializers = " and initializers that are no graph inputs (IR 3 requires them to be)" \
            if proto.ir_version < 4 <= ir and _initializer_not_input(proto.graph) else ""
        fixes.add(FIX_IR_VERSION, f"IR version {proto.ir_version} changed to {ir} to fit opset imports "
                  + ", ".join(f"{o.domain or 'ai.onnx'}:{o.version}" for o in proto.opset_import) + initializers)
        proto.ir_version = ir


def serialize(proto: onnx.ModelProto, what: str, *, deterministic: bool = False) -> bytes:
    """``proto`` as bytes, or :class:`ModelTooLargeError` past protobuf's 2 GiB message limit
    (which models with weights beyond it, kept as external data, reach)."""
    try:
        return bytes(proto.SerializeToString(deterministic=deterministic))
    except ValueError as e:
        raise ModelTooLargeError(f"{what} is larger than the 2 GiB a serialized ONNX model can hold ({e}); "
                                 "keep the weights in external data "
                                 "(save the model with save_as_external_data=True)") from None


def weightless_copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Copy of ``proto`` whose large initializers are external references (dims kept, no bytes),
    made without copying the weights (shape inference, the checker and fingerprints need dims
    and dtypes only)."""
    return structure_copy(proto, _weightless_tensor)


def _weightless_tensor(t: onnx.TensorProto) -> onnx.TensorProto | None:
    if not _is_large(t):
        return None
    return external_reference(t, "__weightless__")


def _is_large(t: onnx.TensorProto) -> bool:
    """An initializer worth not copying: held inline past the threshold, or external."""
    if is_external(t):
        return True
    return (raw_nbytes(t) > _WEIGHTLESS_THRESHOLD or len(t.float_data) * 4 > _WEIGHTLESS_THRESHOLD
            or len(t.int64_data) * 8 > _WEIGHTLESS_THRESHOLD or len(t.int32_data) * 4 > _WEIGHTLESS_THRESHOLD
            or len(t.double_data) * 8 > _WEIGHTLESS_THRESHOLD)


def _copy_fields(src: Any, dst: Any, skip: str) -> None:
    for fd, value in src.ListFields():
        if fd.name == skip:
            continue
        if fd.is_repeated:
            getattr(dst, fd.name).extend(value)
        elif fd.message_type is not None:
            getattr(dst, fd.name).CopyFrom(value)
        else:
            setattr(dst, fd.name, value)


def structure_copy(proto: onnx.ModelProto, replace: Callable[[onnx.TensorProto], onnx.TensorProto | None],
                   keep: Callable[[onnx.TensorProto], bool] | None = None) -> onnx.ModelProto:
    """Copy of ``proto`` with each main-graph initializer ``t`` replaced by ``replace(t)``
    (None: copied as is; left out where ``keep(t)`` is False), without copying the whole
    message (and its weights) first."""
    copy = onnx.ModelProto()
    graph = proto.graph
    inits = list(graph.initializer)
    if not inits:
        copy.CopyFrom(proto)
        return copy
    _copy_fields(proto, copy, skip="graph")
    _copy_fields(graph, copy.graph, skip="initializer")
    copy.graph.SetInParent()
    for t in inits:
        if keep is not None and not keep(t):
            continue
        new = replace(t)
        if new is None:
            copy.graph.initializer.add().CopyFrom(t)
        else:
            copy.graph.initializer.append(new)
    return copy


def check_model(proto: onnx.ModelProto, *, where: str, full: bool = False,
                raw_lengths: RawLengths | None = None) -> None:
    """ONNX checker, minus its one rule that rejects models ONNX Runtime loads: graph inputs and
    outputs without a shape field (unknown rank). With ``full``, also strict shape inference.
    ``raw_lengths``: ``len(raw_data)`` of each main-graph initializer (None where it has none), as
    read from the serialized model (:mod:`partitioner.wire`), so that the check of inline weights'
    lengths need not copy their bytes to measure them; None: measured here."""
    try:
        checked = _checkable(proto, raw_lengths)
        if checked is None:
            log.warning("%s: external data inside subgraphs or attributes, skipping the ONNX checker "
                        "(structure is still validated)", where)
        else:
            unshaped = [vi for vi in list(checked.graph.input) + list(checked.graph.output)
                        if vi.type.WhichOneof("value") == "tensor_type"
                        and not vi.type.tensor_type.HasField("shape")]
            for vi in unshaped:  # patched for the checker only, restored below
                vi.type.tensor_type.shape.SetInParent()
            try:
                data = _serialized_for_checker(checked)  # (once: the checker would serialize it again)
            finally:
                for vi in unshaped:
                    vi.type.tensor_type.ClearField("shape")
            if data is None:
                log.warning("%s: over 2 GB, skipping the ONNX checker (structure is still validated)", where)
            else:
                onnx.checker.check_model(data)
        if full:
            onnx.shape_inference.infer_shapes(weightless_copy(proto), check_type=True, strict_mode=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise InvalidModelError(f"{where}: invalid ONNX model: {onnx_error_text(e, proto)}") from None
    except UnicodeError as e:  # the checker's own message about the model could not be decoded
        raise InvalidModelError(f"{where}: invalid ONNX model: {onnx_error_text(e, proto)}") from None


def _serialized_for_checker(proto: onnx.ModelProto) -> bytes | None:
    """``proto``'s bytes for ONNX's checker, or None past what protobuf serializes (2 GiB). A graph
    of a million entries or more is sized first, so that one past 2 GiB is never copied."""
    graph = proto.graph
    if len(graph.node) + len(graph.initializer) + len(graph.value_info) >= 1_000_000 \
            and proto.ByteSize() >= _CHECKER_MAX_BYTES:
        return None
    try:
        data = proto.SerializeToString()
    except (ValueError, EncodeError):
        return None
    return data if len(data) < _CHECKER_MAX_BYTES else None


def onnx_error_text(error: Exception, proto: onnx.ModelProto) -> str:
    """One line saying what ONNX's checker or shape inference found wrong in ``proto``. Its own
    first line where it gave one; where it gave none (some ONNX builds raise an empty
    ValidationError, others a UnicodeDecodeError, for a name that is not UTF-8) or only its class
    name, ours: the name or string that is not valid UTF-8 and where it sits, else the first node
    of the main graph the checker rejects on its own, else what was run and which ONNX said so."""
    text = str(error).strip()
    if text and text not in (type(error).__name__, type(error).__qualname__) and not isinstance(error, UnicodeError):
        return text.splitlines()[0]
    bad = not_utf8(proto)
    if bad is not None:
        return _utf8_problem(bad)
    node = _first_rejected_node(proto)
    if node is not None:
        return node
    what = "shape inference" if isinstance(error, onnx.shape_inference.InferenceError) else "checker"
    return (f"ONNX's {what} (onnx {onnx.__version__}) rejected it with {type(error).__name__} and no message; "
            f"no name, string or single node of the main graph is at fault on its own")


def not_utf8(proto: onnx.ModelProto) -> tuple[str, bytes | str] | None:
    """The first string field of ``proto`` (a name, an op type, an attribute's string, ...) that
    is not valid UTF-8, as (its field path such as ``graph.node[1].attribute[0].name``, its
    value); None when every one is. Protobuf hands such a field over as bytes."""
    stack: list[tuple[str, Any]] = [("", proto)]
    while stack:
        path, msg = stack.pop()
        found: list[tuple[str, Any]] = []
        for fd, value in msg.ListFields():
            items = list(value) if _repeated(fd) else [value]
            for i, item in enumerate(items):
                where = f"{path}.{fd.name}" if path else fd.name
                where = f"{where}[{i}]" if _repeated(fd) else where
                if fd.type == fd.TYPE_MESSAGE:
                    found.append((where, item))
                elif fd.type == fd.TYPE_STRING and not _is_utf8(item):
                    return where, item
        stack.extend(reversed(found))
    return None


def _repeated(fd: Any) -> bool:
    is_repeated = getattr(fd, "is_repeated", None)
    return bool(is_repeated) if is_repeated is not None else fd.label == fd.LABEL_REPEATED


def _is_utf8(value: bytes | str) -> bool:
    try:
        (value.decode("utf-8") if isinstance(value, bytes) else value.encode("utf-8"))
        return True
    except UnicodeError:
        return False


def _first_rejected_node(proto: onnx.ModelProto) -> str | None:
    """The first node of the main graph without subgraphs that ONNX's checker rejects on its own,
    with the checker's message, as ``node 3 'r' (Relu): ...``; None when none is."""
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = proto.ir_version
    ctx.opset_imports = {o.domain: o.version for o in proto.opset_import}
    for i, node in enumerate(proto.graph.node):
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            continue  # its subgraph may read the outer graph's values, which a lone node check lacks
        try:
            onnx.checker.check_node(node, ctx)
        except (onnx.checker.ValidationError, UnicodeError) as e:
            text = str(e).strip().splitlines()[0] if str(e).strip() else "rejected by the checker without a message"
            return f"node {i} '{node.name}' ({node.op_type}): {text}"
    return None


def _checkable(proto: onnx.ModelProto, raw_lengths: RawLengths | None = None) -> onnx.ModelProto | None:
    """``proto`` as the ONNX checker should see it: large initializers (external ones, whose files
    were checked at load, and inline ones, checked for length here) as graph inputs of their
    dtype and shape, so the checker neither looks for data files in the current directory nor
    serializes the weights. None when external tensors sit elsewhere (subgraphs, attributes)."""
    inits = proto.graph.initializer
    if raw_lengths is not None and not matches(raw_lengths, [t.HasField("raw_data") for t in inits]):
        raw_lengths = None  # not this graph's (a caller edited it since): measured here instead
    for i, t in enumerate(inits):  # Every one: sizes are taken from dims and dtype after this, see raw_nbytes.
        _check_inline_length(t, raw_lengths[i] if raw_lengths is not None else None)
    external = [t for t in proto.graph.initializer if is_external(t)]
    if len(external) != len(external_tensors(proto)):
        return None
    large = [t for t in proto.graph.initializer if _is_large(t)]
    if not large:
        return proto
    names = {t.name for t in large}
    copy = structure_copy(proto, lambda t: None, keep=lambda t: t.name not in names)
    for t in large:
        copy.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return copy


def _check_inline_length(t: onnx.TensorProto, length: int | None = None) -> None:
    """The one checker rule on a weight's values: raw bytes as many as dims and dtype need.
    ``length``: ``len(t.raw_data)`` where the caller knows it (None: measured, which copies them)."""
    if is_external(t) or not t.HasField("raw_data"):
        return
    need = tensor_nbytes(t)
    if need is None:
        return
    have = length if length is not None else len(t.raw_data)
    if have != need:
        raise onnx.checker.ValidationError(f"TensorProto (tensor name: {t.name}) raw_data size "
                                           f"({have} bytes) does not match its shape and type "
                                           f"({need} bytes required)")


def learn_types(model: Model, types: Mapping[str, onnx.TypeProto], how: str) -> None:
    """Give ``model`` the types of tensors that shape inference left unknown (a runtime learned
    them, e.g. by running the model; the partitioner cannot), then infer again so what follows
    from them is known too. Records each tensor in ``model.learned`` as learned by ``how``."""
    if not types:
        return
    graph = model.proto.graph
    kept = [vi for vi in graph.value_info if vi.name not in types]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    for name, tp in types.items():
        vi = graph.value_info.add()
        vi.name = name
        vi.type.CopyFrom(tp)
    _infer_from_what_is_known(model.proto, model.source)
    model.index.refresh_types()
    model.learned.update(dict.fromkeys(types, how))
    log.info("%s: types of %d tensor(s) learned by %s: %s", model.source, len(types), how, ", ".join(types))


def forget_types(model: Model, names: Collection[str]) -> None:
    """Drop what ``model`` was told of the types of ``names`` (learned or declared: about to be
    learned again, where a runtime running the model with the old types could fail on them)."""
    if not names:
        return
    graph = model.proto.graph
    kept = [vi for vi in graph.value_info if vi.name not in names]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    _infer_shapes(model.proto, model.source)
    model.index.refresh_types()
    for name in names:
        model.learned.pop(name, None)


def unknown_tensor_types(model: Model) -> list[str]:
    """Outputs of the main graph's nodes whose dtype or rank shape inference left unknown (what a
    TensorRT input cannot be), in graph order, where something reads them or they are graph
    outputs (an unused optional output, such as an old Dropout's mask, matters to nobody); values
    typed as sequences, maps or optionals are known and not listed."""
    index = model.index
    wanted = set(index.consumers) | set(index.graph_outputs)
    out = []
    for node in model.proto.graph.node:
        for name in node.output:
            if not name or name not in wanted:
                continue
            tp = model.index.types.get(name)
            if tp is None or not is_typed(tp):
                out.append(name)
    return out


def _infer_shapes(proto: onnx.ModelProto, name: str, fixes: _Fixes | None = None,
                  computed_outputs: list[onnx.TypeProto] | None = None) -> list[str]:
    """Annotate value_info with inferred types and (symbolic) shapes; never fatal. Shape inference
    runs without the model's own value_info first (ONNX keeps a declared shape that contradicts
    what the ops compute: an exporter's wrong dim would survive into every segment). Where it
    leaves tensors untyped, a walk past what ONNX has no rule for (:mod:`partitioner.walk`) and
    then constant folding (:mod:`partitioner.folding`) each may type more, inference running again
    from what they found. A declared type is used only for a tensor all of that cannot type, and
    inference then runs once more from it. Returns those tensors, typed by the declaration alone
    (not verified)."""
    graph = proto.graph
    declared: dict[str, onnx.ValueInfoProto] = {}
    outside = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    for vi in graph.value_info:
        if vi.name not in outside and vi.type.WhichOneof("value") is not None:
            declared.setdefault(vi.name, vi)  # The first of several declarations of one name.
    declared_outputs = [onnx.TypeProto.FromString(o.type.SerializeToString()) for o in graph.output]
    copy = weightless_copy(proto)
    del copy.graph.value_info[:]
    _clear_output_shapes(copy.graph)  # Declared output shapes are compared below, not trusted.
    inferred = _run_inference(copy, name)
    if inferred is None:
        return []
    typed = _typed_names(inferred)
    constants: list[onnx.ValueInfoProto] = []
    untyped = _untyped(inferred, typed)
    # What the ops compute from the inputs alone, as ONNX Runtime reads it: its own inference goes no
    # further than ONNX's (with folding's constants), so the walk's types are not part of it.
    computed = [o.type for o in inferred.graph.output]
    walked = types_past_inference(inferred) if untyped else {}
    if walked:
        # A Reshape before opset 14 whose target is computed at run time has no inference rule, and
        # a Loop's final loop-carried values none for their shapes: typed past them by a walk of the
        # graph (partitioner.walk), and inferred again from there.
        outputs = {o.name: o for o in copy.graph.output}
        for n, tp in walked.items():
            (outputs[n] if n in outputs else copy.graph.value_info.add(name=n)).type.CopyFrom(tp)
        again = _run_inference(copy, name)
        if again is not None:
            inferred, typed = again, _typed_names(again)
            untyped = _untyped(inferred, typed)
    if untyped:
        # Some tensor's type may follow from constant shape arithmetic inference has no rule for:
        # inferred again over a copy with those values evaluated (partitioner.folding).
        folded = fold_for_inference(copy)
        again = _run_inference(folded, name) if folded is not None else None
        typed_again = _typed_names(again) if again is not None else set()
        if folded is not None and again is not None and _untyped(again, typed_again) < untyped:
            held = {vi.name for vi in again.graph.value_info}
            constants = [vi for vi in inferred.graph.value_info if vi.name not in held]  # (the folded nodes')
            copy, inferred = folded, again
            typed = typed_again | {vi.name for vi in constants}
            if not walked:
                computed = [o.type for o in inferred.graph.output]
    if computed_outputs is not None:
        computed_outputs[:] = computed
    fallback = [_zero_dims_unknown(vi) for n, vi in declared.items() if n not in typed]
    if fallback:
        copy.graph.value_info.extend(fallback)
        inferred = _run_inference(copy, name) or inferred
    inferred.graph.value_info.extend(constants)
    known = {vi.name for vi in list(graph.input) + list(graph.output)}
    del graph.value_info[:]
    graph.value_info.extend(vi for vi in inferred.graph.value_info if vi.name not in known)
    symbols = _dim_names(graph.input)
    for mine, theirs, before in zip(graph.output, inferred.graph.output, declared_outputs):
        merged, conflict = _merge_declared(theirs.type, before, symbols)
        mine.type.CopyFrom(merged)
        if conflict and fixes is not None:
            fixes.add(FIX_OUTPUT_SHAPES, f"graph output '{mine.name}' declared as {_shape_text(before)}, computed as "
                         f"{_shape_text(theirs.type)}: the computed shape kept")
    return [vi.name for vi in fallback]


def _infer_from_what_is_known(proto: onnx.ModelProto, name: str) -> None:
    """Inference once more over a model whose value_info :func:`_infer_shapes` wrote, with types
    added to it (learned by running the model): what follows from them is typed, what was typed
    stays. One pass with that value_info kept: it holds only what inference computed, what
    folding typed and declarations taken for tensors inference cannot type, all of which
    :func:`_infer_shapes` would take again (it would infer without them, fold and infer with them
    once more: three passes where this is one)."""
    graph = proto.graph
    copy = weightless_copy(proto)
    _clear_output_shapes(copy.graph)
    inferred = _run_inference(copy, name)
    if inferred is None:
        return
    known = {vi.name for vi in list(graph.input) + list(graph.output)}
    del graph.value_info[:]
    graph.value_info.extend(vi for vi in inferred.graph.value_info if vi.name not in known)
    symbols = _dim_names(graph.input)
    for mine, theirs in zip(graph.output, inferred.graph.output):
        mine.type.CopyFrom(_merge_declared(theirs.type, mine.type, symbols)[0])


def shapes_at(model: Model, shapes: Mapping[str, Sequence[int]]) -> dict[str, tuple[int, ...]]:
    """The dims of the main graph's tensors where the model runs at ``shapes`` (model input ->
    its shape), each tensor shape inference then sizes in full: inference over a weightless copy
    with those inputs' dims set (a detector's feature maps, whose sizes follow its image's: from
    symbolic inputs inference leaves them unknown). Tensors it cannot size are left out; once
    per model and shapes."""
    key = (tuple(sorted((n, tuple(int(d) for d in v)) for n, v in shapes.items())), len(model.proto.graph.node))
    if key not in model.sized:
        model.sized[key] = _sized(model, shapes)
    return model.sized[key]


def _sized(model: Model, shapes: Mapping[str, Sequence[int]]) -> dict[str, tuple[int, ...]]:
    copy = weightless_copy(model.proto)
    graph = copy.graph
    for vi in graph.input:
        shape = shapes.get(vi.name)
        if shape is None or vi.type.WhichOneof("value") != "tensor_type":
            continue
        dims = vi.type.tensor_type.shape.dim
        if vi.type.tensor_type.HasField("shape") and len(dims) != len(shape):
            continue
        vi.type.tensor_type.ClearField("shape")
        for d in shape:
            vi.type.tensor_type.shape.dim.add().dim_value = int(d)
    del graph.value_info[:]
    _clear_output_shapes(graph)
    inferred = _run_inference(copy, str(model.source or "model"))
    if inferred is None:
        return {}
    out: dict[str, tuple[int, ...]] = {}
    for vi in [*inferred.graph.value_info, *inferred.graph.output]:
        tt = vi.type.tensor_type if vi.type.WhichOneof("value") == "tensor_type" else None
        if tt is not None and tt.HasField("shape") and all(
                d.WhichOneof("value") == "dim_value" and d.dim_value >= 0 for d in tt.shape.dim):
            out[vi.name] = tuple(int(d.dim_value) for d in tt.shape.dim)
    return out


def _clear_output_shapes(graph: onnx.GraphProto) -> None:
    for out in graph.output:
        if out.type.WhichOneof("value") == "tensor_type":
            out.type.tensor_type.ClearField("shape")


def _zero_dims_unknown(vi: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
    """A declaration taken on faith (inference could not type its tensor), its 0 dims unknown: an
    exporter's 0 there says "dynamic" as often as "empty", and nothing computed says which."""
    if vi.type.WhichOneof("value") != "tensor_type" or not any(
            d.WhichOneof("value") == "dim_value" and d.dim_value == 0 for d in vi.type.tensor_type.shape.dim):
        return vi
    out = onnx.ValueInfoProto()
    out.CopyFrom(vi)
    for d in out.type.tensor_type.shape.dim:
        if d.WhichOneof("value") == "dim_value" and d.dim_value == 0:
            d.Clear()
    return out


def _run_inference(proto: onnx.ModelProto, name: str) -> onnx.ModelProto | None:
    try:
        return onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError, ValueError) as e:
        log.warning("%s: shape inference failed, continuing without it: %s", name, e)
        return None


def _typed_names(inferred: onnx.ModelProto) -> set[str]:
    """The tensors ``inferred`` gives a dtype and a rank (see :func:`partitioner.walk.is_typed`): its value_info
    entries, and its graph outputs, whose types inference writes on the outputs. (An exporter that
    declares a graph output in value_info as well, as Paddle2ONNX does, declares nothing inference
    has not typed.)"""
    return {vi.name for vi in [*inferred.graph.value_info, *inferred.graph.output] if is_typed(vi.type)}


def _untyped(inferred: onnx.ModelProto, typed: set[str]) -> int:
    """How many node outputs of ``inferred`` have no dtype or rank where something reads them or
    they are graph outputs (as :func:`unknown_tensor_types` counts them: an unused optional output,
    such as an old Dropout's mask, stays untyped and matters to nobody). ``typed``: what
    :func:`_typed_names` says of ``inferred``."""
    graph = inferred.graph
    known = typed | {t.name for t in graph.initializer}
    wanted = {name for n in graph.node for name in node_reads(n)} | {o.name for o in graph.output}
    return sum(1 for n in graph.node for o in n.output if o and o in wanted and o not in known)


def _merge_declared(inferred: onnx.TypeProto, declared: onnx.TypeProto,
                    symbols: set[str]) -> tuple[onnx.TypeProto, bool]:
    """A graph output's type from what inference computed and what the model declared: per dim,
    a computed number or graph input dim name (``symbols``), else a declared number or name, else
    a computed name (one inference made up). A declared rank or number that the computation
    contradicts yields to it (True: a conflict)."""
    if inferred.WhichOneof("value") != "tensor_type" or declared.WhichOneof("value") != "tensor_type":
        return (inferred if _richer(inferred, declared) or declared.WhichOneof("value") is None else declared), False
    ti, td = inferred.tensor_type, declared.tensor_type
    out = onnx.TypeProto()
    out.tensor_type.elem_type = ti.elem_type or td.elem_type
    if not ti.HasField("shape"):
        if td.HasField("shape"):
            out.tensor_type.shape.CopyFrom(td.shape)
        return out, False
    if not td.HasField("shape"):
        out.tensor_type.shape.CopyFrom(ti.shape)
        return out, False
    if len(ti.shape.dim) != len(td.shape.dim):
        out.tensor_type.shape.CopyFrom(ti.shape)
        return out, True
    conflict = False
    shape = out.tensor_type.shape
    shape.SetInParent()
    for a, b in zip(ti.shape.dim, td.shape.dim):
        d = shape.dim.add()
        if a.WhichOneof("value") == "dim_value":
            d.dim_value = a.dim_value
            conflict |= b.WhichOneof("value") == "dim_value" and b.dim_value != a.dim_value
        elif a.WhichOneof("value") == "dim_param" and a.dim_param in symbols:
            d.dim_param = a.dim_param
            conflict |= b.WhichOneof("value") == "dim_value"
        elif b.WhichOneof("value") == "dim_value":
            d.dim_value = b.dim_value
        elif b.WhichOneof("value") == "dim_param":
            d.dim_param = b.dim_param
        elif a.WhichOneof("value") == "dim_param":
            d.dim_param = a.dim_param
    return out, conflict


def _shape_text(tp: onnx.TypeProto) -> str:
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return "(unknown rank)"
    return "[" + ", ".join(str(d.dim_value) if d.WhichOneof("value") == "dim_value" else (d.dim_param or "?")
                           for d in tp.tensor_type.shape.dim) + "]"


def _richer(a: onnx.TypeProto, b: onnx.TypeProto) -> bool:
    """True when ``a`` says more than ``b`` about a tensor (a dtype or a rank that ``b`` lacks)."""
    if a.WhichOneof("value") is None:
        return False
    if b.WhichOneof("value") is None:
        return True
    if a.WhichOneof("value") == "tensor_type" and b.WhichOneof("value") == "tensor_type":
        ta, tb = a.tensor_type, b.tensor_type
        if ta.elem_type and not tb.elem_type:
            return True
        return ta.HasField("shape") and not tb.HasField("shape")
    return False

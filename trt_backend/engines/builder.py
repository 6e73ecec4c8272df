"""Segment ModelProto -> serialized TensorRT engine, for TensorRT 10/11 and TensorRT-RTX.

A fresh builder, network and parser per segment (kept referenced together: a parser outliving its
network segfaults); builder settings by enum *name* and optional API by ``hasattr``, since enum
values changed between TensorRT 10 and 11. Precision is an ONNX-level transform
(:mod:`trt_backend.engines.precision`), so networks are strongly typed everywhere."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import onnx
from onnx.inliner import inline_local_functions

from partitioner.errors import ModelTooLargeError, OptionsError
from partitioner.model import FILE_HANDED_FIXES, Model, serialize, structure_copy
from partitioner.qdq import EMULATED_DOC
from partitioner.wire import file_status
from partitioner.weights import (
    external_reference,
    external_tensors,
    is_external,
    raw_nbytes,
    read_in,
    tensor_nbytes,
    uses_external_data,
    weights_sha256,
)
from trt_backend._files import sha256_bytes
from trt_backend.engines.config import add_profiles, configure
from trt_backend.engines.memory import EngineFile, engine_bytes, stream_engine
from trt_backend.engines.options import BuildOptions
from trt_backend.engines.precision import (
    apply_precision,
    fp32_subgraphs,
    stored_reduced,
)
from trt_backend.engines.precision_plan import pinned_of
from trt_backend.engines.quantize import (
    QDQ_OPS,
    carries_qdq,
    int8_or_fp16,
    with_fp16_remainder,
)
from trt_backend.errors import PrecisionError, SegmentBuildError
from trt_backend.ort.sizes import WHOLE_FILE_MAX_BYTES, room_beside
from trt_backend.profiles import TensorProfile, tensor_profile
from trt_backend.tensorrt.flavor import (
    Flavor,
    captured_messages,
    create_builder,
    failure_reasons,
    load_flavor,
    native_stderr,
    network_flags,
    quiet_messages,
    shared_logger,
    tensorrt_entered,
    waited_for_tensorrt,
)
from trt_backend.tensorrt.questions import asked_of, describe_parser_error

log = logging.getLogger(__name__)



# ---------------------------------------------------------------- profiles

ProfileSpec = Mapping[str, Any]  # tensor name -> TensorProfile | (min, opt, max) | {"min", "opt", "max"[, "values"]}
SegmentProfiles = Mapping[int, Sequence[ProfileSpec]]  # segment id -> profiles
ProfilesArg = Sequence[ProfileSpec] | SegmentProfiles | Callable[[Any], SegmentProfiles]


def segment_ranges(model: onnx.ModelProto, profiles: Sequence[ProfileSpec]) -> list[dict[str, TensorProfile]]:
    """Profiles restricted to ``model``'s inputs, as TensorProfiles, checked against declared shapes."""
    declared = {v.name: v for v in model.graph.input}
    out: list[dict[str, TensorProfile]] = []
    for k, profile in enumerate(profiles):
        ranges: dict[str, TensorProfile] = {}
        for name, value in profile.items():
            if name not in declared:
                continue
            r = tensor_profile(value, f"profile {k} for '{name}'")
            dims = declared[name].type.tensor_type.shape.dim
            if len(dims) != len(r.min) and declared[name].type.tensor_type.HasField("shape"):
                raise OptionsError(f"profile {k} gives '{name}' rank {len(r.min)}, "
                                   f"the segment input has rank {len(dims)}")
            for axis, d in enumerate(dims):
                if d.HasField("dim_value") and not r.min[axis] == r.max[axis] == d.dim_value:
                    raise OptionsError(f"profile {k} for '{name}': axis {axis} is fixed at {d.dim_value}, "
                                       f"profile says {r.min[axis]}..{r.max[axis]}")
            ranges[name] = r
        out.append(ranges)
    return out


# ---------------------------------------------------------------- one segment

@dataclass(frozen=True)
class SegmentEngine:
    engine: bytes | EngineFile  # A file where the build streamed it into one: see compile_segment.
    layers: int
    seconds: float
    precision: str  # what was applied ("fp32" when a transform failed and the build fell back)
    pinned: tuple[str, ...] = ()  # nodes kept fp32: the precision plan's, and those TensorRT refused in it
    model: onnx.ModelProto | None = None  # the form the engine was built from (see :func:`prepare_segment`)


def build_segment(segment_model: onnx.ModelProto, profiles: Sequence[ProfileSpec], options: BuildOptions | None = None,
                  flavor: Flavor | str = "auto", *, weights_dir: str | None = None) -> bytes:
    """One segment's serialized engine; raises :class:`SegmentBuildError` naming blamed nodes.
    ``weights_dir``: the folder the segment's external data locations are relative to."""
    return engine_bytes(compile_segment(segment_model, profiles, options, flavor, weights_dir=weights_dir).engine)


def compile_segment(segment_model: onnx.ModelProto, profiles: Sequence[ProfileSpec],
                    options: BuildOptions | None = None, flavor: Flavor | str = "auto",
                    timing: Any = None, quantize: Callable[[onnx.ModelProto], onnx.ModelProto] | None = None, *,
                    weights_dir: str | None = None, weights: HeldWeights | None = None,
                    engine_path: str | None = None, model_file: str | None = None) -> SegmentEngine:
    """:func:`build_segment` with layer count, seconds and the precision applied.
    ``engine_path``: stream the engine into this file as it is built (where the flavor can)
    and return it as an :class:`~trt_backend.engines.memory.EngineFile`, never in memory.
    ``timing`` is a :class:`trt_backend.engines.cache.TimingCacheFile` or None; ``quantize``
    (int8, required there) inserts the segment's Q/DQ (:class:`~trt_backend.engines.quantize.SegmentQuantizer`).
    The parser gets the segment with a path in ``weights_dir`` and reads external weights from their
    files; inline weights go to it by address where it takes user-managed weights (see :func:`parse_into`),
    also those the segment holds by reference only (``weights``, see :func:`by_reference`).
    ``model_file``: the model's file, which a segment built as it is is the whole of (see
    :func:`file_as_is`): TensorRT is handed the file instead, as a head start hands it."""
    options = options or BuildOptions()
    fl = flavor if isinstance(flavor, Flavor) else load_flavor(flavor)
    start, waited = time.perf_counter(), waited_for_tensorrt()
    ranges = segment_ranges(segment_model, profiles)
    form = prepare_segment(segment_model, options, fl, quantize, weights_dir)
    segment_model, prepared, precision = form.source, form.model, form.precision
    try:
        try:
            engine, layers = _compile(prepared, ranges, options, fl, timing, names_from=segment_model,
                                      weights_dir=weights_dir, weights=weights, engine_path=engine_path,
                                      model_file=model_file if prepared is segment_model else None)
        except SegmentBuildError as e:
            if e.stage != "build" or precision in ("fp32", "tf32") or not e.names:
                raise
            form, engine, layers = _pinned_where_refused(form, e, ranges, options, fl, timing, quantize,
                                                         weights_dir, weights, engine_path)
            prepared, precision = form.model, form.precision
    except SegmentBuildError as e:
        if e.stage == "parse" and prepared is not segment_model:
            _compile(segment_model, ranges, options, fl, None, parse_only=True,  # blame original nodes
                     weights_dir=weights_dir, weights=weights)
            log.warning("%s: TensorRT rejects its %s form (%s); building it in fp32", segment_model.graph.name,
                        options.precision, e.message)
            engine, layers = _compile(segment_model, ranges, options, fl, timing, weights_dir=weights_dir,
                                      weights=weights, engine_path=engine_path)
            precision = "fp32"
        else:
            raise
    if precision == "fp32" and form.precision != "fp32":  # TensorRT rejected the reduced form.
        form = Prepared(segment_model, segment_model, "fp32", ())
    # (its own time: not the wait for another segment's build, see tensorrt_lock)
    seconds = time.perf_counter() - start - (waited_for_tensorrt() - waited)
    return SegmentEngine(engine, layers, seconds, form.precision, form.pinned, form.model)


def _gist(message: str, most: int = 160) -> str:
    """The start of TensorRT's message, its first line up to ``most`` characters."""
    line = message.strip().splitlines()[0] if message.strip() else message
    return line if len(line) <= most else line[:most - 3] + "..."


# Builds of a reduced-precision segment again with the nodes TensorRT's builder names kept fp32,
# each round keeping those it named in the last, before the failure goes to the fallback.
MAX_PINNING_BUILDS = 3


def _pinned_where_refused(form: Prepared, error: SegmentBuildError, ranges: Any, options: BuildOptions,
                          flavor: Flavor, timing: Any, quantize: Callable[..., onnx.ModelProto] | None,
                          weights_dir: str | None, weights: HeldWeights | None, engine_path: str | None
                          ) -> tuple[Prepared, Any, int]:
    """A reduced-precision segment whose build TensorRT's builder refuses, naming nodes, built
    again with those nodes kept fp32 (a ConvTranspose TensorRT-RTX builds in fp16 and fp32 but
    not in bf16: "Could not infer output types ... deconv"), as nodes its parser refuses in a
    precision are kept (:func:`refused_in_precision`): (the form built, engine, layers). The
    first error where pinning does not get it built (a node that fails in fp32 too goes to the
    fallback, which demotes it)."""
    names = {n.name for n in form.source.graph.node}
    pinned = list(form.pinned)
    for _ in range(MAX_PINNING_BUILDS):
        more = [n for n in error.names if n in names and n not in pinned]
        if not more:
            break
        pinned += more
        log.warning("%s: TensorRT's builder refuses %s in %s (%s); building %s in fp32", form.source.graph.name,
                    ", ".join(f"'{n}'" for n in more), form.precision, _gist(error.message),
                    "it" if len(more) == 1 else "them")
        model, precision = prepared_segment(form.source, options, quantize, tuple(pinned))
        try:
            engine, layers = _compile(model, ranges, options, flavor, timing, names_from=form.source,
                                      weights_dir=weights_dir, weights=weights, engine_path=engine_path)
        except SegmentBuildError as again:
            if again.stage != "build" or not again.names:
                raise error from None
            error = again
            continue
        return Prepared(form.source, model, precision, tuple(pinned)), engine, layers
    raise error


@dataclass(frozen=True)
class Prepared:
    """A segment as its engine is built: ``model`` (the precision transform applied: casts for
    fp16/bf16, Q/DQ for int8, ``pinned`` nodes kept fp32), the ``precision`` it computes in, and
    ``source``, the segment it was made from (external weights read in where transformed)."""

    source: onnx.ModelProto
    model: onnx.ModelProto
    precision: str
    pinned: tuple[str, ...]


def prepare_segment(segment_model: onnx.ModelProto, options: BuildOptions, flavor: Flavor | None,
                    quantize: Callable[..., onnx.ModelProto] | None = None,
                    weights_dir: str | None = None) -> Prepared:
    """The segment in the form its engine is built from, the one function both the builder and
    emulation use. In a reduced precision, nodes ``flavor``'s parser refuses there are kept fp32
    (no flavor: no parser asked); a transform that fails, or weights that cannot be read in for
    it, leave the whole segment fp32, with a warning, as the build does."""
    precision, planned = segment_precision(segment_model, options)
    if precision in ("fp32", "tf32"):
        return Prepared(segment_model, segment_model, precision, ())
    name = segment_model.graph.name
    source, kept = weights_for_transform(segment_model, weights_dir, name)
    if kept is not None:
        log.warning("%s; building it in fp32", kept)
        return Prepared(segment_model, segment_model, "fp32", ())
    try:
        refused, taken = _refusals(source, options, flavor, quantize) if flavor is not None else ((), None)
        prepared, precision = taken or prepared_segment(source, options, quantize, refused)
    except PrecisionError as e:
        log.warning("%s: %s; building it in fp32", name, e)
        return Prepared(source, source, "fp32", ())
    pinned = tuple(dict.fromkeys((*planned, *refused)))  # the precision plan's pins, then TensorRT's refusals
    return Prepared(source, prepared, precision, pinned if precision != "fp32" else ())


def built_form(segment_model: onnx.ModelProto, options: BuildOptions, precision: str, pinned: Sequence[str],
               quantize: Callable[..., onnx.ModelProto] | None = None, weights_dir: str | None = None
               ) -> onnx.ModelProto:
    """The model an engine reported as built in ``precision`` with ``pinned`` nodes kept fp32 was
    built from (for engines that came from the cache: the transform is deterministic)."""
    if precision in ("fp32", "tf32"):
        return segment_model
    source, _ = weights_for_transform(segment_model, weights_dir, segment_model.graph.name)
    return prepared_segment(source, options, quantize, tuple(pinned))[0]


def weights_for_transform(segment: onnx.ModelProto, weights_dir: str | None,
                          where: str) -> tuple[onnx.ModelProto, str | None]:
    """``segment`` ready for a precision transform, which rewrites weights: its external ones
    read in (:func:`partitioner.weights.read_in`, up to its limit). ``(segment, None)``, or
    ``(segment as it was, why it stays fp32)`` where they cannot be. Model-local functions are
    inlined first: the transforms and ONNX Runtime's quantizer rewrite the main graph only, so a
    function's body would otherwise stay fp32 (or, quantized, be lost)."""
    if segment.functions:
        segment = inline_local_functions(segment)
    if not uses_external_data(segment):
        return segment, None
    try:
        inline = read_in(segment, weights_dir, where)
    except ModelTooLargeError as e:
        return segment, str(e)
    if uses_external_data(inline):
        return segment, (f"{where}: its subgraphs or attributes hold external data, which the precision "
                         "transform does not rewrite")
    return inline, None


def segment_precision(segment_model: onnx.ModelProto, options: BuildOptions) -> tuple[str, tuple[str, ...]]:
    """(precision, nodes pinned to fp32) of a segment under ``options`` (auto: its precision plan's)."""
    if options.precision == "auto":
        return pinned_of(options.precision_plan, [n.name for n in segment_model.graph.node])
    return options.precision, ()


def prepared_segment(segment_model: onnx.ModelProto, options: BuildOptions,
                     quantize: Callable[..., onnx.ModelProto] | None = None,
                     also_pinned: Sequence[str] = ()) -> tuple[onnx.ModelProto, str]:
    """The segment as it is built in its precision (fp16/bf16 transform, int8 Q/DQ, pinned
    nodes and ``also_pinned`` left in fp32), and that precision. PrecisionError when the
    transform fails."""
    precision, pinned = segment_precision(segment_model, options)
    pinned = tuple(dict.fromkeys((*pinned, *also_pinned)))
    if precision == "int8":
        if quantize is None:
            raise OptionsError("an int8 build needs the segment's quantizer (build through build_engines, or pass "
                               "quantize=SegmentQuantizer(...))")
        with_qdq = quantize(segment_model, pinned) if pinned else quantize(segment_model)
        built = int8_or_fp16(with_qdq, segment_model)
        if built == "fp32":  # nothing quantized and nothing lowered: built as it is, as fp16 would be
            _warn_unreduced(segment_model, precision)
            return segment_model, built
        return with_qdq, built
    if precision in ("fp16", "bf16"):
        quantized = quantized_nodes(segment_model)
        if quantized:
            _warn_quantized(segment_model, precision, len(quantized))
            if precision == "fp16" and carries_qdq(segment_model):  # Q/DQ kept, as int8 keeps its own.
                return with_fp16_remainder(segment_model, options.keep_fp32_ops, (*pinned, *quantized)), precision
            pinned = (*pinned, *quantized)
        result = apply_precision(segment_model, precision, options.keep_fp32_ops, pinned)
        if not result.lowered:  # (a model stored in fp16: nothing of it computes lower; built, labelled and
            _warn_unreduced(segment_model, precision)  # emulated as the fp32 build of it is, the model's own types)
            return segment_model, "fp32"
        return result.model, precision
    return segment_model, precision


def quantized_nodes(segment_model: onnx.ModelProto) -> list[str]:
    """The nodes of a segment that compute its quantization: its Q/DQ, and the float nodes a Q/DQ
    rewrite emulates a pair with (:data:`partitioner.qdq.EMULATED_DOC`). A reduced precision
    applies outside them: they compute as the model has them."""
    return [n.name for n in segment_model.graph.node if n.op_type in QDQ_OPS or n.doc_string == EMULATED_DOC]


# What has been warned of, by segment (its graph's name and its nodes' names: every model's first
# segment is "segment_0") and what: a build prepares a segment more than once (its refusal rounds,
# its emulation), and each says it once.
_warned: set[tuple[str, int, str]] = set()


def _warn_once(segment_model: onnx.ModelProto, what: str, message: str, *args: Any) -> None:
    key = (segment_model.graph.name, hash(tuple(n.name for n in segment_model.graph.node)), what)
    if key not in _warned:
        _warned.add(key)
        log.warning(message, *args)


def _warn_unreduced(segment_model: onnx.ModelProto, precision: str) -> None:
    """The precision asked reduces nothing of a segment, which is built as it is: a warning where
    it holds no float32 arithmetic to reduce (a model stored in fp16 or bf16) or all of it is
    inside If/Loop/Scan bodies (which the transform keeps float32)."""
    stored = [k for k in ("fp16", "bf16") if stored_reduced(segment_model).get(k)]
    held = fp32_subgraphs(segment_model)
    if stored:
        _warn_once(segment_model, f"unreduced {precision}", "%s: %s asked, but it holds no float32 arithmetic to "
                   "reduce: it computes in the model's own %s types, as built", segment_model.graph.name, precision,
                   " and ".join(stored))
    elif held:
        _warn_once(segment_model, f"unreduced {precision}", "%s: %s asked, but none of its nodes computes in a reduced "
                   "precision: its float arithmetic is the %d node(s) inside its %s subgraphs, which compute in fp32; "
                   "built in fp32", segment_model.graph.name, precision, held["inner"], " and ".join(held["ops"]))
    # (else nothing of it computes in floating point: its label says fp32, its entry why)


def _warn_quantized(segment_model: onnx.ModelProto, precision: str, count: int) -> None:
    _warn_once(segment_model, f"quantized {precision}", "%s carries quantization (%d Q/DQ or emulated Q/DQ "
               "node(s)): %s applies outside it, the quantized arithmetic computes as the model has it",
               segment_model.graph.name, count, precision)


MAX_REFUSAL_ROUNDS = 4


def refused_in_precision(segment_model: onnx.ModelProto, options: BuildOptions, flavor: Flavor,
                         quantize: Callable[..., onnx.ModelProto] | None = None) -> tuple[str, ...]:
    """Nodes the TensorRT parser refuses in the segment's reduced precision but takes in fp32
    (e.g. HardSwish in bf16): parsed, the blamed nodes kept fp32, parsed again (bounded rounds).
    The rest of the segment keeps its precision; an engine is never silently all fp32 for one op."""
    return _refusals(segment_model, options, flavor, quantize)[0]


def _refusals(segment_model: onnx.ModelProto, options: BuildOptions, flavor: Flavor,
              quantize: Callable[..., onnx.ModelProto] | None = None
              ) -> tuple[tuple[str, ...], tuple[onnx.ModelProto, str] | None]:
    """:func:`refused_in_precision`, and the prepared segment the parser took (None if none)."""
    if segment_precision(segment_model, options)[0] in ("fp32", "tf32"):
        return (), None
    refused: list[str] = []
    for _ in range(MAX_REFUSAL_ROUNDS):
        prepared = prepared_segment(segment_model, options, quantize, refused)
        try:
            _compile(prepared[0], (), options, flavor, None, parse_only=True)
            return tuple(refused), prepared
        except SegmentBuildError as e:
            own = {n.name: n.op_type for n in segment_model.graph.node}
            # A refusal is by op type and dtype: the parser stops at the first, so its kin go too.
            types = {own[n] for n in e.names if n in own and n not in refused}
            blamed = [n for n, t in own.items() if t in types and n not in refused]
            if not blamed:
                return tuple(refused), None  # Not a precision matter: the build reports it.
            log.info("%s: TensorRT refuses %s in %s; kept fp32", segment_model.graph.name, ", ".join(blamed),
                     segment_precision(segment_model, options)[0])
            refused.extend(blamed)
    return tuple(refused), None


def _compile(model: onnx.ModelProto, ranges: Sequence[Mapping[str, TensorProfile]], options: BuildOptions,
             flavor: Flavor,
             timing: Any, parse_only: bool = False, names_from: onnx.ModelProto | None = None,
             weights_dir: str | None = None, weights: HeldWeights | None = None,
             engine_path: str | None = None, model_file: str | None = None) -> tuple[bytes | EngineFile, int]:
    """Parse and build ``model``; build errors blame nodes of ``names_from`` (default ``model``).
    With ``engine_path`` (and a builder that streams) the engine goes into that file. With
    ``model_file`` (the file ``model`` is the whole of, see :func:`file_as_is`) the parser reads
    that file, where the network it makes has ``model``'s inputs and outputs; else ``model``."""
    trt = flavor.module
    logger = shared_logger(flavor)
    # One thread in TensorRT at a time (see tensorrt_lock); what TensorRT made is released inside
    # it, also when the build fails (the error's traceback must not keep it to a later moment).
    with tensorrt_entered(), captured_messages() as errors:
        builder = network = parser = config = cache = held = None
        try:
            builder = create_builder(flavor, logger)
            network = builder.create_network(network_flags(flavor))
            parser = trt.OnnxParser(network, logger)  # ``network`` stays referenced while ``parser`` lives
            parsed = False
            if model_file is not None:
                with quiet_messages():
                    parsed = _parse_file(parser, model_file) and _same_ends(network, model)
                if not parsed:  # (the segment, on a fresh network)
                    del parser, network
                    network = builder.create_network(network_flags(flavor))
                    parser = trt.OnnxParser(network, logger)
            if not parsed:
                with quiet_messages():  # the parser's complaints come back as get_error() and are reported
                    parsed, held = parse_into(parser, model, flavor, weights_dir, weights)
            if not parsed:
                raise _parse_error(parser, model)
            if parse_only:
                return b"", network.num_layers
            config = builder.create_builder_config()
            configure(config, options, flavor)
            add_profiles(builder, config, network, ranges)
            cache = timing.attach(config) if timing is not None else None
            if engine_path is not None and flavor.has("Builder.build_serialized_network_to_stream"):
                with native_stderr():
                    streamed = stream_engine(trt, builder, network, config, engine_path)
                if streamed is None:
                    raise _build_error(names_from or model, errors)
                if cache is not None:
                    timing.merge(config, cache)
                return streamed, int(network.num_layers)
            with native_stderr():
                serialized = builder.build_serialized_network(network, config)
            if serialized is None:
                raise _build_error(names_from or model, errors)
            for message in errors:  # Captured, and not reported by a failure: say them here.
                log.warning("%s: TensorRT built the engine but reported: %s", model.graph.name, message)
            if cache is not None:
                timing.merge(config, cache)
            layers = int(network.num_layers)
            # the parser's weights go before the engine is copied out
            config = parser = network = builder = cache = held = None
            engine = bytes(serialized)
            del serialized
        finally:
            del config, parser, network, builder, cache, held
    return engine, layers


def file_as_is(model: Model, segment_model: onnx.ModelProto) -> str | None:
    """The file ``model`` was read from, where ``segment_model`` is the whole of it as TensorRT's
    parser reads it: every node, and loading changed nothing the parser reads otherwise (it named
    unnamed nodes, fitted the IR version, took weights also listed as inputs as constants:
    ``PARSER_NEUTRAL_FIXES``; no rewrite) but the inputs' unknown dims, which the parser is handed
    as loading leaves them (``FILE_HANDED_FIXES``, see :func:`_parse_file`); a file of at most
    ``WHOLE_FILE_MAX_BYTES`` with its external data and a quarter of the memory available
    (:func:`trt_backend.ort.sizes.room_beside`), unchanged since it was read. None otherwise.

    Such a segment is built from the file as it is: the network TensorRT makes of the file is the
    segment's, but the names it gives layers where a node had none, and where it took weights
    listed as inputs, are its own, and they are written into the engine. A build from the file
    and one that hands TensorRT the file early (a head start) then write the same engine."""
    whole = len(segment_model.graph.node) == len(model.proto.graph.node)
    if not whole or not model.file_status or not isinstance(model.source, str) or model.rewritten \
            or not model.fix_kinds <= FILE_HANDED_FIXES:
        return None
    path = os.path.abspath(model.source)
    external = sum(tensor_nbytes(t) or 0 for t in external_tensors(model.proto))
    if not room_beside(model.file_status[0] + external, WHOLE_FILE_MAX_BYTES):
        return None  # (read whole beside what this process holds: as a head start is held)
    if external and (model.base_dir is None or os.path.abspath(model.base_dir) != os.path.dirname(path)):
        return None  # (its data files are read from another folder than the parser would read them from)
    try:
        if file_status(os.stat(path)) != model.file_status:
            return None
    except OSError:
        return None
    return path


def _parse_file(parser: Any, path: str) -> bool:
    """Whether ``parser`` took the model file ``path`` whole (False where it cannot be read); with
    its inputs' unknown dims as loading leaves them, where the parser would read them otherwise
    (:func:`~trt_backend.tensorrt.questions.asked_of`, as a head start asks and builds)."""
    try:
        with open(path, "rb") as f:
            data, _ = asked_of(f.read())
    except OSError:
        return False
    return bool(parser.parse(data, path))


def _same_ends(network: Any, model: onnx.ModelProto) -> bool:
    """Whether ``network`` has ``model``'s inputs and outputs, in its order."""
    return ([network.get_input(i).name for i in range(network.num_inputs)] == [v.name for v in model.graph.input]
            and [network.get_output(i).name for i in range(network.num_outputs)]
            == [v.name for v in model.graph.output])


def _build_error(source: onnx.ModelProto, errors: Sequence[str]) -> SegmentBuildError:
    message = "; ".join(failure_reasons(list(errors))) or "the TensorRT builder made no engine"
    blamed = _blame(source, errors)
    return SegmentBuildError("build", blamed, message, [source.graph.node[k].name for k in blamed])


def _parse_error(parser: Any, model: onnx.ModelProto) -> SegmentBuildError:
    nodes: list[int] = []
    messages: list[str] = []
    for i in range(parser.num_errors):
        err = parser.get_error(i)
        k = int(err.node())
        if 0 <= k < len(model.graph.node) and k not in nodes:
            nodes.append(k)
        messages.append(describe_parser_error(err)
                        + (f" (node {k} '{model.graph.node[k].name}')" if 0 <= k < len(model.graph.node) else ""))
    return SegmentBuildError("parse", nodes, "; ".join(messages) or "the ONNX parser rejected the segment",
                             [model.graph.node[k].name for k in nodes])


def _blame(model: onnx.ModelProto, errors: Sequence[str]) -> list[int]:
    """Nodes whose names appear in TensorRT's build errors (layers are named after nodes)."""
    text = "\n".join(errors)
    found = []
    for k, node in enumerate(model.graph.node):
        if node.name and re.search(r"(?<![\w/.])" + re.escape(node.name) + r"(?![\w])", text):
            found.append(k)
    return found


# ---------------------------------------------------------------- weights

USER_WEIGHTS_MIN_BYTES = 64 * 1024  # inline weights from this size go to the parser by address


def parse_into(parser: Any, model: onnx.ModelProto, flavor: Flavor, weights_dir: str | None,
               weights: HeldWeights | None = None) -> tuple[bool, list[Any]]:
    """Parse ``model`` into ``parser``'s network; (parsed, buffers the parser reads from, to be
    kept alive as long as it and its network live).

    Where the parser takes user-managed weights (``load_model_proto``/``load_initializer``/
    ``parse_model_proto``: TensorRT 10.13+, TensorRT-RTX 1.7) and the segment holds large inline
    weights, it gets the model without them and each weight by address, so the weights are never
    serialized into a protobuf. Otherwise ``parse(bytes, path)``. External data is read by the
    parser from ``weights_dir`` either way. Initializers held by reference (see :func:`by_reference`)
    take their bytes from ``weights``."""
    path = segment_path(weights_dir)
    large = large_weights(model, weights)
    if not large or not flavor.has("OnnxParser.load_model_proto"):
        if any(is_held(t) for t in model.graph.initializer):  # A parser without user-managed weights: inline them.
            model = structure_copy(model, lambda t: large.get(t.name) if is_held(t) else None)
        return bool(parser.parse(serialize(model, "a segment to build"), path)), []
    import numpy as np

    weightless = serialize(structure_copy(model, lambda t: _user_managed(t) if t.name in large else None),
                           "a segment to build")
    if not parser.load_model_proto(weightless, path):
        return False, []
    held = []
    for name, t in large.items():
        buf = np.frombuffer(t.raw_data, np.uint8)
        held.append(buf)
        if not parser.load_initializer(name, buf.ctypes.data, buf.nbytes):
            return False, held
    return bool(parser.parse_model_proto()), held


HeldWeights = Mapping[str, onnx.TensorProto]  # initializers by name, for segments holding them by reference
HELD = "__user_managed__"


def by_reference(held: HeldWeights) -> Callable[[onnx.TensorProto], onnx.TensorProto | None]:
    """For :meth:`partitioner.Plan.extract`: large inline weights of ``held`` (the model's own
    initializers) as references (:data:`HELD`), so a segment is extracted without copying them;
    :func:`parse_into` and :func:`key_material` read them from ``held``. Only for a segment built
    as it is (fp32): the precision transforms rewrite weights and need them in the segment."""
    def refer(t: onnx.TensorProto) -> onnx.TensorProto | None:
        own = held.get(t.name)
        if own is None or is_external(own) or raw_nbytes(own) < USER_WEIGHTS_MIN_BYTES:
            return None
        return _user_managed(own)
    return refer


def is_held(t: onnx.TensorProto) -> bool:
    """An initializer held by reference (:func:`by_reference`)."""
    return t.data_location == onnx.TensorProto.EXTERNAL and any(
        e.key == "location" and e.value == HELD for e in t.external_data)


def large_weights(model: onnx.ModelProto, weights: HeldWeights | None) -> dict[str, onnx.TensorProto]:
    """Initializers past :data:`USER_WEIGHTS_MIN_BYTES` with their bytes: inline ones, and those
    held by reference found in ``weights`` (a held one without them: OptionsError)."""
    large = {}
    for t in model.graph.initializer:
        if is_held(t):
            own = weights.get(t.name) if weights is not None else None
            if own is None or not own.HasField("raw_data"):
                raise OptionsError(f"initializer '{t.name}' of segment {model.graph.name} is held by reference "
                                   "and its bytes were not given (weights=...)")
            large[t.name] = own
        elif raw_nbytes(t) >= USER_WEIGHTS_MIN_BYTES:
            large[t.name] = t
    return large


def _user_managed(t: onnx.TensorProto) -> onnx.TensorProto:
    return external_reference(t, HELD)  # Never opened: load_initializer gives the bytes.


def segment_path(weights_dir: str | None) -> str | None:
    """The path handed to the parser with a segment's bytes: only its folder matters, where the
    parser resolves external data locations (None: the segment holds its weights)."""
    return os.path.join(weights_dir, "segment.onnx") if weights_dir else None


def key_material(segment_model: onnx.ModelProto, ranges: Sequence[Mapping[str, TensorProfile]], options: BuildOptions,
                 flavor: Flavor, target: str, *, weights_dir: str | None = None,
                 with_weights: bool = True, weights: HeldWeights | None = None) -> dict[str, Any]:
    """Everything an engine depends on: model bytes (weights included: large inline ones by the
    SHA-256 of their bytes, external data by the SHA-256 of the bytes each tensor references,
    so no weight is serialized for a key), profiles, options, TensorRT flavor/version/parser,
    target GPU. ``with_weights=False``: large weights by name only, which tells apart the segments
    of one model (a build's own memo) but not two models (an engine cache needs the hashes)."""
    large = list(large_weights(segment_model, weights).values())
    names = {t.name for t in large}
    structure = structure_copy(segment_model, lambda t: _user_managed(t) if t.name in names else None) \
        if large else segment_model
    data = serialize(structure, "a segment to build", deterministic=True)
    profiles = [{name: r.key_json() for name, r in sorted(p.items())} for p in ranges]
    material = {"model_sha256": sha256_bytes(data), "profiles": json.loads(json.dumps(profiles)),
                "options": options.key_fields(), "flavor": flavor.name, "version": flavor.version,
                "parser": flavor.parser_version, "target": target}
    if not with_weights:
        return material
    if large:  # Absent for models without large inline weights: their keys are unchanged.
        h = hashlib.sha256()
        for t in sorted(large, key=lambda t: t.name):
            h.update(f"{t.name}\0{sha256_bytes(t.raw_data)}\0".encode())
        material["inline_weights_sha256"] = h.hexdigest()
    external = weights_sha256(segment_model, weights_dir, skip=is_held)  # Held ones are hashed above.
    if external is not None:  # Absent for models holding their weights: their keys are unchanged.
        material["external_weights_sha256"] = external
    return material

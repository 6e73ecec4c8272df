"""Precision as an ONNX-level transform of a segment, so it works on TensorRT 10, 11 and
TensorRT-RTX alike (TensorRT 11 and RTX are strongly typed: no FP16 builder flag).

``fp16``/``bf16``: float32 tensors inside the segment become 16-bit where the op's schema (at the
model's opset) admits it; ops on the keep list, ops without a schema (custom domains, plugins) and
ops with subgraphs stay in float32 with casts around them; float32 initializers are converted in
place (or copied when float32 readers remain). The segment's inputs and outputs keep their dtypes,
with casts at the boundary. ``fp32`` and ``tf32`` leave the model as it is (TF32 is a builder flag).
"""
from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from partitioner.errors import InvalidModelError
from partitioner.graph import fresh_name, subgraphs
from partitioner.model import check_model, fitting_ir_version, onnx_error_text, weightless_copy
from trt_backend.engines.options import DEFAULT_KEEP_FP32, validate_precision
from trt_backend.errors import PrecisionError
from trt_backend.ort.sessions import max_ir_version
from trt_backend.ort.threads import inference_session

log = logging.getLogger(__name__)

LOW_TYPES = {"fp16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16}

# Output dtype chosen by an attribute or by randomness, not by the inputs: never lowered.
_NEVER_LOWER = frozenset({"EyeLike", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                          "Bernoulli", "Multinomial"})
BF16_OPSET = 22  # the opset in which ONNX admitted bfloat16 for most ops (Conv, Relu, Pool, ...)
_FP16_MAX = float(np.finfo(np.float16).max)
F32 = TensorProto.FLOAT


def stored_reduced(model: onnx.ModelProto) -> dict[str, int]:
    """The 16-bit float types ``model`` itself holds ("fp16", "bf16": tensors of its main graph's
    inputs, outputs, initializers and value_info), with how many tensors each, and "fp32" with
    its count beside them; empty where it holds none. TensorRT's strongly typed networks compute
    a model stored in fp16 in fp16 whatever precision the build asks for, which the segment's
    label says (:func:`trt_backend.commands._segment_notes.stored_label`)."""
    graph = model.graph
    names = {TensorProto.FLOAT: "fp32", TensorProto.FLOAT16: "fp16", TensorProto.BFLOAT16: "bf16"}
    counts: dict[str, int] = {}
    for vi in (*graph.input, *graph.output, *graph.value_info):
        name = names.get(vi.type.tensor_type.elem_type) if vi.type.HasField("tensor_type") else None
        if name:
            counts[name] = counts.get(name, 0) + 1
    for t in graph.initializer:
        name = names.get(t.data_type)
        if name:
            counts[name] = counts.get(name, 0) + 1
    return counts if any(k != "fp32" for k in counts) else {}


# The precisions asked that lower a segment (a segment asked one of them and built fp32 reduced nothing)
REDUCED = frozenset({"fp16", "bf16", "int8"})


def unreduced(asked: str | None, built: str, model: onnx.ModelProto) -> bool:
    """Whether a segment built in ``built`` from ``model`` where ``asked`` was asked is one the
    precision asked lowered none of the nodes of: built fp32 though a reduced precision was asked,
    and not a model stored in fp16 or bf16 (which computes in its own types, as its label says).
    The build folder's entry records it; compare of a model says it the same way."""
    return asked in REDUCED and built == "fp32" and not stored_reduced(model)


def fp32_subgraphs(model: onnx.ModelProto) -> dict[str, Any]:
    """The nodes of ``model``'s main graph with subgraphs (If, Loop, Scan), which the fp16/bf16
    transform keeps float32 whole, and how many nodes their subgraphs hold (nested ones counted):
    ``{"nodes": [names], "ops": [op types], "inner": count}``; empty where there are none. A
    reduced-precision segment computes those in fp32 (and int8 quantizes nothing inside them),
    which its label alone would not say."""
    def inner(graph: onnx.GraphProto) -> int:
        return sum(1 + sum(inner(g) for g in subgraphs(n)) for n in graph.node if n.op_type != "Constant")

    holders = [n for n in model.graph.node if subgraphs(n)]
    count = sum(inner(g) for n in holders for g in subgraphs(n))
    if not holders or not count:
        return {}
    return {"nodes": [n.name or n.op_type for n in holders], "ops": sorted({n.op_type for n in holders}),
            "inner": count}


@dataclass(frozen=True)
class PrecisionResult:
    """The transformed model and what changed (``modified`` False for fp32/tf32)."""

    model: onnx.ModelProto
    modified: bool
    precision: str
    lowered: int = 0  # nodes now computing in 16 bits
    kept: tuple[str, ...] = ()  # names of float nodes kept in float32
    casts: int = 0
    clipped: int = 0  # initializer values clipped to the fp16 range


def apply_precision(model: onnx.ModelProto, precision: str,
                    keep_fp32_ops: Sequence[str] = DEFAULT_KEEP_FP32,
                    keep_fp32_nodes: Iterable[str] = ()) -> PrecisionResult:
    """``model`` transformed to ``precision`` (a new ModelProto; the argument is untouched).
    ``keep_fp32_nodes``: names of nodes kept in float32 besides the op types of ``keep_fp32_ops``
    (the nodes ``--precision auto`` pins)."""
    return PrecisionPass(precision, keep_fp32_ops, keep_fp32_nodes)(model)


class PrecisionPass:
    """``requires`` -> ``call`` -> ``ensures``, like an onnx_ir pass."""

    def __init__(self, precision: str, keep_fp32_ops: Sequence[str] = DEFAULT_KEEP_FP32,
                 keep_fp32_nodes: Iterable[str] = ()) -> None:
        validate_precision(precision, keep_fp32_ops)
        self.precision = precision
        self.keep = frozenset(keep_fp32_ops)
        self.keep_nodes = frozenset(keep_fp32_nodes)

    def __call__(self, model: onnx.ModelProto) -> PrecisionResult:
        self.requires(model)
        result = self.call(model)
        if result.modified:
            self.ensures(model, result.model)
        return result

    def requires(self, model: onnx.ModelProto) -> None:
        if not isinstance(model, onnx.ModelProto) or not model.graph.node:
            raise PrecisionError("the precision transform needs a ModelProto with at least one node")

    def ensures(self, before: onnx.ModelProto, after: onnx.ModelProto) -> None:
        """Same I/O names and dtypes; checker-valid; types consistent under strict inference."""
        def io(m: onnx.ModelProto) -> list[tuple[str, int]]:
            return [(v.name, v.type.tensor_type.elem_type) for v in (*m.graph.input, *m.graph.output)]
        if io(before) != io(after):
            raise PrecisionError("precision transform changed the segment's inputs or outputs")
        try:  # On copies without the weights: their bytes are checked nowhere here, only dims and dtypes.
            check_model(after, where=f"the {self.precision} form of {after.graph.name}")
            if _strictly_typed(before):  # a model that fails strict inference already proves nothing
                onnx.shape_inference.infer_shapes(_types_only(after), check_type=True, strict_mode=True)
        except InvalidModelError as e:
            raise PrecisionError(f"{self.precision} transform produced an invalid model: {e}") from e
        except onnx.shape_inference.InferenceError as e:
            raise PrecisionError(f"{self.precision} transform produced an invalid model: "
                                 f"{onnx_error_text(e, after)}") from e

    def call(self, model: onnx.ModelProto) -> PrecisionResult:
        if self.precision not in LOW_TYPES:
            return PrecisionResult(model, False, self.precision)
        if self.precision == "bf16":
            model = with_opset(model, BF16_OPSET, "bf16")
        return _Lowering(model, self.precision, self.keep, self.keep_nodes).run()


class _Lowering:
    """One run of the fp16/bf16 rewrite over the main graph."""

    def __init__(self, model: onnx.ModelProto, precision: str, keep: frozenset[str],
                 keep_nodes: frozenset[str] = frozenset()) -> None:
        self.src = model
        self.precision = precision
        self.low = LOW_TYPES[precision]
        self.keep = keep
        self.keep_nodes = keep_nodes
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        inferred = onnx.shape_inference.infer_shapes(weightless_copy(model))  # Types only: weights not copied.
        g = inferred.graph
        self.types: dict[str, int] = {}
        for v in (*g.input, *g.value_info, *g.output):
            if v.type.WhichOneof("value") == "tensor_type" and v.type.tensor_type.elem_type:
                self.types[v.name] = v.type.tensor_type.elem_type
        for t in g.initializer:
            self.types[t.name] = t.data_type
        self.names: set[str] = {n for node in g.node for n in (*node.input, *node.output)} | set(self.types)
        self.too_large = _beyond_fp16(model) if self.low == TensorProto.FLOAT16 else frozenset()
        self.guarded = _guards_fp16_flushes(model) if self.low == TensorProto.FLOAT16 else frozenset()

    def fresh(self, base: str) -> str:
        return fresh_name(base, self.names)

    # -- decisions: what dtype each node wants for each input and makes for each output
    def decide(self, node: onnx.NodeProto) -> tuple[list[int | None], list[int | None], bool]:
        """(wanted input dtypes, output dtypes, lowered?); None means 'unknown, leave alone'."""
        ins = [self.types.get(n) if n else None for n in node.input]
        outs = [self.types.get(n) if n else None for n in node.output]
        if node.op_type == "Constant":
            if _float_constant(node):
                return ins, [self.low], True
            return ins, outs, False
        if node.op_type == "Cast":  # reads any dtype: take the input as it comes
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            return [None] * len(ins), ([self.low] if to == F32 else outs), to == F32
        schema = self._schema(node)
        if schema is None:
            return ins, outs, False
        params = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
        bound: dict[str, list[int | None]] = {}
        in_params = [_formal(schema.inputs, k) for k in range(len(ins))]
        out_params = [_formal(schema.outputs, k) for k in range(len(outs))]
        for p, t in zip(in_params, ins):
            bound.setdefault(p, []).append(t)
        low_str = "tensor(bfloat16)" if self.low == TensorProto.BFLOAT16 else "tensor(float16)"
        lowered = {p for p, ts in bound.items()
                   if p in params and low_str in params[p] and ts and all(t == F32 for t in ts)}
        lowered = {p for p in lowered if all(t in (F32, None) for q, t in zip(out_params, outs) if q == p)}
        if node.op_type == "ConstantOfShape" and _float_fill(node) and low_str in params.get("T2", ()):
            lowered.add("T2")
        # A type read by one input and made by no output (Shape, Size, ...) takes what comes, if
        # 16 bits are among what it takes (QuantizeLinear's x before opset 19 is float32 only).
        free = {p for p, ts in bound.items() if len(ts) == 1 and p not in out_params and low_str in params.get(p, ())}
        wanted = [None if p in free else self.low if p in lowered else t for p, t in zip(in_params, ins)]
        made = [self.low if p in lowered else t for p, t in zip(out_params, outs)]
        return wanted, made, bool(lowered - free)

    def _schema(self, node: onnx.NodeProto) -> Any:
        if node.domain not in ("", "ai.onnx") or node.op_type in self.keep or node.op_type in _NEVER_LOWER:
            return None
        if node.name and node.name in self.keep_nodes:
            return None
        if self.too_large and any(name in self.too_large for name in node.input):
            return None  # Its weights do not fit fp16: a trained BatchNormalization's variance of 1e5.
        if self.guarded and node.output and node.output[0] in self.guarded:
            return None  # log(x + 1e-10): an epsilon fp16 flushes to 0, and what it guards.
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            return None
        try:
            return onnx.defs.get_schema(node.op_type, self.opset, "")
        except onnx.defs.SchemaError:
            return None

    # -- rewrite
    def run(self) -> PrecisionResult:
        model = onnx.ModelProto()
        model.CopyFrom(self.src)
        g = model.graph
        decisions = [self.decide(n) for n in g.node]
        _keep_unwanted_constants(g, decisions, self.low)
        wants = _initializer_wants(g, decisions)
        graph_inputs = {v.name for v in g.input}
        home: dict[str, dict[int, str]] = {}  # tensor -> dtype -> name holding it
        clipped = 0
        new_inits: list[TensorProto] = []
        for t in g.initializer:
            wanted_types = wants.get(t.name, set())
            if t.data_type != F32 or t.name in graph_inputs or self.low not in wanted_types:
                new_inits.append(t)
                continue
            name = t.name if wanted_types == {self.low} else self.fresh(f"{t.name}_{self.precision}")
            converted, n = _convert(t, self.low, name)
            clipped += n
            if name != t.name:
                new_inits.append(t)
            new_inits.append(converted)
            home[t.name] = {self.low: name} | ({F32: t.name} if name != t.name else {})
        outputs = {v.name for v in g.output}
        nodes: list[onnx.NodeProto] = []
        relabel: set[str] = set()  # tensors now 16-bit under their own name
        casts = lowered_count = 0
        kept: list[str] = []
        for node, (wanted, made, lowered) in zip(g.node, decisions):
            lowered_count += lowered
            if not lowered and any(t == F32 for t in (*wanted, *made)):
                kept.append(node.name or node.op_type)
            for k, name in enumerate(node.input):
                want = wanted[k]
                if not name or want not in (F32, self.low):
                    continue
                have = home.setdefault(name, {F32: name} if self.types.get(name) == F32 else {})
                if want in have or not have:
                    node.input[k] = have.get(want, name)
                    continue
                src = next(iter(have.values()))
                out = self.fresh(f"{name}_{'fp32' if want == F32 else self.precision}")
                nodes.append(helper.make_node("Cast", [src], [out], to=want, name=self.fresh(f"{out}_cast")))
                casts += 1
                have[want] = out
                node.input[k] = out
            casts += self._outer_reads_in_fp32(node, home, nodes)
            self._rewrite_attributes(node, lowered)
            after: list[onnx.NodeProto] = []
            for k, name in enumerate(node.output):
                if not name or made[k] != self.low or self.types.get(name) != F32:
                    continue
                if name in outputs:  # the output keeps its name and dtype: cast right after
                    inner = self.fresh(f"{name}_{self.precision}")
                    node.output[k] = inner
                    after.append(helper.make_node("Cast", [inner], [name], to=F32, name=self.fresh(f"{name}_cast")))
                    casts += 1
                    home[name] = {self.low: inner, F32: name}
                else:
                    home[name] = {self.low: name}
                    relabel.add(name)
            nodes.append(node)
            nodes.extend(after)
        del g.node[:]
        g.node.extend(nodes)
        del g.initializer[:]
        g.initializer.extend(new_inits)
        for v in g.value_info:
            if v.name in relabel and v.type.tensor_type.elem_type == F32:
                v.type.tensor_type.elem_type = self.low
        if clipped:
            log.warning("%s: %d initializer value(s) beyond the %s range were clipped", model.graph.name, clipped,
                        self.precision)
        return PrecisionResult(model, True, self.precision, lowered_count, tuple(kept), casts, clipped)

    def _outer_reads_in_fp32(self, node: onnx.NodeProto, home: dict[str, dict[int, str]],
                             nodes: list[onnx.NodeProto]) -> int:
        """Subgraphs (kept float32) read lowered outer tensors through a cast; returns casts made."""
        renames: dict[str, str] = {}
        for name in sorted(_subgraph_reads(node)):
            have = home.get(name, {})
            if self.low in have and F32 not in have:
                out = self.fresh(f"{name}_fp32")
                nodes.append(helper.make_node("Cast", [have[self.low]], [out], to=F32, name=self.fresh(f"{out}_cast")))
                have[F32] = renames[name] = out
        if renames:
            for a in node.attribute:
                for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    _rename_reads(sub, renames)
        return len(renames)

    def _rewrite_attributes(self, node: onnx.NodeProto, lowered: bool) -> None:
        if not lowered:
            return
        for a in node.attribute:
            if node.op_type == "Cast" and a.name == "to":
                a.i = self.low
            elif node.op_type in ("Constant", "ConstantOfShape") and a.name == "value" and a.t.data_type == F32:
                a.t.CopyFrom(_convert(a.t, self.low, a.t.name)[0])
        if node.op_type == "Constant":  # value_float(s): the same numbers as a 16-bit ``value`` tensor
            for k, a in enumerate(node.attribute):
                if a.name in ("value_float", "value_floats"):
                    array = np.array(a.f if a.name == "value_float" else list(a.floats), np.float32)
                    del node.attribute[k]
                    tensor = _convert(numpy_helper.from_array(array), self.low, "")[0]
                    node.attribute.append(helper.make_attribute("value", tensor))
                    break
        elif node.op_type == "ConstantOfShape" and not any(a.name == "value" for a in node.attribute):
            zero = _convert(numpy_helper.from_array(np.zeros(1, np.float32)), self.low, "")[0]
            node.attribute.append(helper.make_attribute("value", zero))  # the default fill is float32 0


def with_opset(model: onnx.ModelProto, target: int, why: str = "fp16 Q/DQ") -> onnx.ModelProto:
    """``model`` converted up to opset ``target`` when older (bf16 needs it, and Q/DQ with fp16
    scales); as is on failure."""
    current = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), target)
    if current >= target:
        return model
    from onnx import version_converter

    try:
        converted = version_converter.convert_version(model, target)
    except (RuntimeError, ValueError, onnx.checker.ValidationError) as e:
        log.warning("%s: opset %d -> %d conversion for %s failed (%s); ops whose opset-%d schema lacks "
                    "its 16-bit type stay in float32", model.graph.name, current, target, why, e, current)
        return model
    converted.ir_version = fitting_ir_version(converted, max_ir_version())
    return converted


def _types_only(model: onnx.ModelProto) -> onnx.ModelProto:
    """A weightless copy whose graph outputs and value_info keep their dtypes, not their shapes:
    what the transform must keep consistent is types. Exporters declare output shapes ONNX Runtime
    does not hold them to (a TorchScript export declares [1, seqlen] for a [21, 1, 8210] output),
    and the higher opset bf16 needs infers more of them, so a declared shape proves nothing here."""
    copy = weightless_copy(model)
    for v in (*copy.graph.output, *copy.graph.value_info):
        if v.type.WhichOneof("value") == "tensor_type":
            v.type.tensor_type.ClearField("shape")
    return copy


def _strictly_typed(model: onnx.ModelProto) -> bool:
    try:
        onnx.shape_inference.infer_shapes(_types_only(model), check_type=True, strict_mode=True)
        return True
    except onnx.shape_inference.InferenceError:
        return False


def _formal(formals: Sequence[Any], k: int) -> str:
    """The type string of actual argument ``k`` (variadic formals absorb the tail)."""
    if not formals:
        return ""
    return str(formals[min(k, len(formals) - 1)].type_str)


def _float_constant(node: onnx.NodeProto) -> bool:
    """A Constant whose value is float32, in any of its forms (value, value_float, value_floats)."""
    return any((a.name == "value" and a.t.data_type == F32) or a.name in ("value_float", "value_floats")
               for a in node.attribute)


def _float_fill(node: onnx.NodeProto) -> bool:
    """A ConstantOfShape filling float32 (a float32 ``value``, or none: the default is float32 0)."""
    value = next((a for a in node.attribute if a.name == "value"), None)
    return value is None or value.t.data_type == F32


def _keep_unwanted_constants(graph: onnx.GraphProto, decisions: list[tuple[list[int | None], list[int | None], bool]],
                             low: int) -> None:
    """A Constant/ConstantOfShape none of whose readers computes in 16 bits stays float32 (Resize
    scales, Range limits, ...): lowering it would only add a cast back. So does a Cast to float32
    none of whose readers computes in 16 bits: a dim read by Shape made a float for Range (the
    anchor grids of a YOLO head), which a round trip through 16 bits would make inexact, and
    TensorRT then refuses (its shape arithmetic mixes the two types)."""
    wanted: dict[str, set[int | None]] = {}
    for node, (ins, _, _) in zip(graph.node, decisions):
        for name, want in zip(node.input, ins):
            wanted.setdefault(name, set()).add(want)
        for name in _subgraph_reads(node):
            wanted.setdefault(name, set()).add(F32)
    outputs = {v.name for v in graph.output}
    for k, node in enumerate(graph.node):
        if node.op_type in ("Constant", "ConstantOfShape", "Cast") and decisions[k][2]:
            name = node.output[0]
            if low not in wanted.get(name, set()) and name not in outputs:
                ins, _, _ = decisions[k]
                decisions[k] = (ins, [F32], False)


def _initializer_wants(graph: onnx.GraphProto, decisions: Sequence[tuple[list[int | None], Any, Any]]
                       ) -> dict[str, set[int]]:
    """Initializer -> the dtypes its readers want (float32 for graph outputs and subgraph reads)."""
    wants: dict[str, set[int]] = {}
    for node, (wanted, _, _) in zip(graph.node, decisions):
        for name, want in zip(node.input, wanted):
            if name and want is not None:
                wants.setdefault(name, set()).add(want)
        for name in _subgraph_reads(node):
            wants.setdefault(name, set()).add(F32)
    for v in graph.output:
        wants.setdefault(v.name, set()).add(F32)
    return wants


def _subgraph_reads(node: onnx.NodeProto) -> set[str]:
    reads: set[str] = set()
    for a in node.attribute:
        for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
            for inner in sub.node:
                reads.update(n for n in inner.input if n)
                reads |= _subgraph_reads(inner)
    return reads


def _rename_reads(graph: onnx.GraphProto, renames: Mapping[str, str]) -> None:
    for inner in graph.node:
        for k, name in enumerate(inner.input):
            if name in renames:
                inner.input[k] = renames[name]
        for a in inner.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                _rename_reads(sub, renames)


SENTINEL = 1e9  # magnitudes from here on are stand-ins for infinity (attention masks): fp16 may clip them


def _beyond_fp16(model: onnx.ModelProto) -> frozenset[str]:
    """float32 initializers and Constant nodes' values (Paddle2ONNX writes a BatchNormalization's
    variance as a Constant node) holding a finite value fp16 cannot: above its largest (65504) and
    below SENTINEL. The nodes reading them stay fp32, where clipping would change their result."""
    def too_large(t: TensorProto) -> bool:
        if t.data_type != F32 or t.data_location == TensorProto.EXTERNAL:
            return False
        arr = np.abs(np.asarray(numpy_helper.to_array(t), dtype=np.float32))
        return bool(arr.size and np.any((arr > _FP16_MAX) & (arr < SENTINEL)))

    out = {t.name for t in model.graph.initializer if too_large(t)}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output:
            for a in node.attribute:
                if (a.name == "value" and a.type == onnx.AttributeProto.TENSOR and too_large(a.t)) or \
                        (a.name == "value_float" and _FP16_MAX < abs(a.f) < SENTINEL):
                    out.add(node.output[0])
    return frozenset(out)


# An epsilon is a constant of a few values; in a larger tensor (a weight) values fp16 flushes to 0
# are what an fp16 engine computes without, as TensorRT's own conversion of weights does.
_EPSILON_MOST = 16
_FP16_FLUSHED = float(np.finfo(np.float16).smallest_subnormal) / 2  # magnitudes up to it round to 0
# What an epsilon guards: the ops that turn a 0 into -inf, inf or nan (a divisor, a log's argument).
_GUARDED_OPS = frozenset({"Log", "Sqrt", "Reciprocal", "Div", "Pow"})


def _guards_fp16_flushes(model: onnx.ModelProto) -> frozenset[str]:
    """The first outputs of the nodes that stay float32 because fp16 would flush an epsilon they
    read to 0: a float32 constant of at most ``_EPSILON_MOST`` values holding a nonzero one below
    half fp16's smallest subnormal (1e-8 to 1e-12 in audio front-ends' ``log(x + eps)``,
    ``max(x, eps)``), its readers, and those of their readers in ``_GUARDED_OPS``: in fp16 the
    guard is 0 and the log of a silent bin -inf (a pitch tracker's confidences NaN)."""
    def flushed(t: TensorProto) -> bool:
        if t.data_type != F32 or t.data_location == TensorProto.EXTERNAL or math.prod(t.dims) > _EPSILON_MOST:
            return False
        arr = np.asarray(numpy_helper.to_array(t), dtype=np.float32)
        with np.errstate(over="ignore"):  # (values past fp16's largest: another rule's)
            return bool(np.any((arr != 0) & np.isfinite(arr) & (arr.astype(np.float16) == 0)))

    tiny = {t.name for t in model.graph.initializer if flushed(t)}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output:
            for a in node.attribute:
                if (a.name == "value" and a.type == onnx.AttributeProto.TENSOR and flushed(a.t)) or \
                        (a.name == "value_float" and a.f != 0 and abs(a.f) <= _FP16_FLUSHED):
                    tiny.add(node.output[0])
    if not tiny:
        return frozenset()
    nodes = [n for n in model.graph.node if n.output and n.op_type != "Constant"]
    readers = [n for n in nodes if any(i in tiny for i in n.input)]
    made = {o for n in readers for o in n.output}
    guarded = [n for n in nodes if n.op_type in _GUARDED_OPS and any(i in made for i in n.input)]
    return frozenset(n.output[0] for n in readers + guarded)


def _convert(tensor: TensorProto, low: int, name: str) -> tuple[TensorProto, int]:
    """``tensor`` (float32) as ``low``; returns it and the number of values clipped."""
    # Np.asarray throughout: numpy turns 0-d results into scalars, which cannot be assigned into.
    arr = np.asarray(numpy_helper.to_array(tensor), dtype=np.float32)
    clipped = 0
    if low == TensorProto.FLOAT16:
        clipped = int(np.count_nonzero(np.isfinite(arr) & (np.abs(arr) > _FP16_MAX)))
        out = np.asarray(np.where(np.isinf(arr), arr, np.clip(arr, -_FP16_MAX, _FP16_MAX))).astype(np.float16)
    else:
        import ml_dtypes  # an onnx dependency; imported here to keep module import light

        # float32's extremes (attention masks' -3.4e38) round to inf in bf16: clip to its largest finite
        top = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
        clipped = int(np.count_nonzero(np.isfinite(arr) & (np.abs(arr) > top)))
        out = np.asarray(np.where(np.isinf(arr), arr, np.clip(arr, -top, top))).astype(ml_dtypes.bfloat16)
    return numpy_helper.from_array(out, name), max(clipped, 0)


def compare_outputs(original: onnx.ModelProto, transformed: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
                    *, atol: float = 1e-2, rtol: float = 1e-2) -> dict[str, float]:
    """Run both models on ONNX Runtime CPU with ``feeds``; return each output's worst error in
    units of its tolerance (<= 1 passes). Raises PrecisionError listing outputs that exceed it."""

    def run(m: onnx.ModelProto) -> list[np.ndarray]:
        sess = inference_session(m.SerializeToString())
        return list(sess.run(None, dict(feeds)))

    scores: dict[str, float] = {}
    for out, a, b in zip(original.graph.output, run(original), run(transformed)):
        if a.shape != b.shape or a.dtype != b.dtype:
            raise PrecisionError(f"output '{out.name}': {a.dtype}{a.shape} became {b.dtype}{b.shape}")
        if not np.issubdtype(a.dtype, np.floating):
            scores[out.name] = 0.0 if np.array_equal(a, b) else float("inf")
            continue
        err = np.abs(a.astype(np.float64) - b.astype(np.float64))
        bound = atol + rtol * np.abs(a.astype(np.float64))
        scores[out.name] = float(np.max(err / bound)) if err.size else 0.0
    bad = {k: v for k, v in scores.items() if v > 1.0}
    if bad:
        raise PrecisionError("outputs beyond tolerance (error / tolerance): "
                             + ", ".join(f"{k} {v:.2f}" for k, v in bad.items()))
    return scores

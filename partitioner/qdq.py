"""Explicit quantization in the forms TensorRT takes.

TensorRT takes QuantizeLinear/DequantizeLinear with constant, symmetric (zero point 0) scales,
per-tensor or per-channel. ``onnxruntime.quantization.quantize_static`` with its defaults
writes asymmetric activations and int32 bias DequantizeLinear, which TensorRT refuses only
for their form, so such a model fragments into a segment per Conv. This pass rewrites them into
nodes TensorRT takes, with ONNX's reference numerics:

* a DequantizeLinear of a constant that TensorRT refuses (int32 input, a nonzero zero point,
  a type TensorRT has no Q/DQ for, or a scalar) is folded into a float32 initializer,
  ``(x - zero_point) * scale`` computed as ONNX defines it (per axis where the scale is 1-D);
* an asymmetric QuantizeLinear whose every reader is a DequantizeLinear with the same constant
  scale and zero point is float arithmetic: ``Div(scale) -> Round -> Add(zp) -> Clip(qmin, qmax)``
  under the QuantizeLinear's name, ``Sub(zp) -> Mul(scale)`` under each DequantizeLinear's.

That is the ``exact`` rewrite: ONNX's numerics to the bit, but TensorRT then computes those
tensors in float, and the int8 speed-up is gone. The ``int8`` rewrite keeps int8 instead: each
asymmetric pair is re-quantized to symmetric int8 (zero point 0) over the range the original
quantization covers (``(qmin - zp) * scale .. (qmax - zp) * scale``, the calibrated range, so the
scale grows at most about twofold), and each constant DequantizeLinear with a nonzero zero point
(or of a type TensorRT has no Q/DQ for) becomes symmetric int8 weights with scales from their
values; an int32 bias is folded as in the exact rewrite (TensorRT takes float biases). Its error
against the original is measured with ``trt-backend compare``.

Both rewrites also fold a Cast of a constant int8/uint8 tensor to float (weights kept in 8 bits
and scaled by a Mul, without DequantizeLinear), which TensorRT's builder refuses: an 8-bit constant
only goes before a DequantizeLinear there. The float initializer holds the same values.

What TensorRT already takes (symmetric int8, per-channel weights) and what cannot be rewritten
exactly (non-constant scales, blocked quantization, float8/int4, non-float32 scales, unknown
ranks) stays as it was. ``requires`` -> ``call`` -> ``ensures``, like an onnx_ir pass."""
from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from partitioner.errors import InvalidModelError, OptionsError
from partitioner.graph import fresh_name, node_reads
from partitioner.model import FIX_QDQ, Model, check_model, reindex
from partitioner.weights import tensor_array

log = logging.getLogger(__name__)

# Zero-point types whose Q/DQ TensorRT's importer takes when the zero point is 0.
_TENSORRT_QTYPES = frozenset({TensorProto.INT8, TensorProto.UINT8, TensorProto.INT4, TensorProto.UINT4,
                              TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT4E2M1})
# Integer types whose quantization is emulated exactly in float32 (|values| < 2**24, so exact)
_EMULATED: dict[int, type[np.integer[Any]]] = {TensorProto.INT8: np.int8, TensorProto.UINT8: np.uint8,
             TensorProto.INT16: np.int16, TensorProto.UINT16: np.uint16}
# ... and types a constant DequantizeLinear is folded from (int32: bias).
_FOLDABLE: dict[int, type[np.integer[Any]]] = {**_EMULATED, TensorProto.INT32: np.int32}
ROUND_OPSET = 11  # Round and Clip-with-inputs exist from opset 11
QDQ_REWRITES = ("exact", "int8")
# doc_string of the float nodes that emulate a Q/DQ pair: a precision transform keeps them fp32
EMULATED_DOC = "trt-backend: quantization emulated in float32"
_INT8_MAX = 127


@dataclass(frozen=True)
class QdqResult:
    """The model (rewritten in place) and, per rewritten node name, what became of it."""

    model: Model
    modified: bool
    rewritten: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Quant:
    """A Q or DQ node's constant quantization parameters."""

    scale: np.ndarray  # float32, scalar or 1-D
    zero_point: np.ndarray  # same shape as scale, of the quantized type
    qtype: int  # TensorProto type of the quantized values
    axis: int | None  # normalized axis for 1-D scales, else None

    def same(self, other: _Quant) -> bool:
        return (self.qtype == other.qtype and self.axis == other.axis
                and np.array_equal(self.scale, other.scale) and np.array_equal(self.zero_point, other.zero_point)
                and self.scale.shape == other.scale.shape and self.zero_point.shape == other.zero_point.shape)

    @property
    def tensorrt_takes(self) -> bool:
        return self.qtype in _TENSORRT_QTYPES and not np.any(self.zero_point)

    def along(self, value: np.ndarray, rank: int) -> np.ndarray:
        """``value`` (scalar or per-axis 1-D) shaped to broadcast against a rank-``rank`` tensor."""
        if self.axis is None or value.ndim == 0:
            return value.reshape(())
        shape = [1] * rank
        shape[self.axis] = value.size
        return value.reshape(shape)


class QdqPass:
    """Rewrite the explicit quantization TensorRT refuses only for its form (see the module):
    ``mode`` "exact" (float nodes, ONNX's numerics) or "int8" (symmetric int8, int8 kept)."""

    def __init__(self, mode: str = "exact") -> None:
        if mode not in QDQ_REWRITES:
            raise OptionsError(f"the Q/DQ rewrite is one of {', '.join(QDQ_REWRITES)}, got {mode!r}")
        self.mode = mode

    def __call__(self, model: Model) -> QdqResult:
        self.requires(model)
        before = _io(model.proto)
        result = self.call(model)
        if result.modified:
            self.ensures(before, result)
        return result

    def requires(self, model: Model) -> None:
        if not isinstance(model, Model) or not model.proto.graph.node:
            raise InvalidModelError("the Q/DQ rewrite needs a loaded Model with at least one node")

    def ensures(self, before: list[tuple[str, int]], result: QdqResult) -> None:
        """Same graph inputs and outputs; structurally valid; checker-valid; every rewritten
        Q/DQ gone (so a second pass finds nothing: a saved model plans as it was planned)."""
        proto = result.model.proto
        if _io(proto) != before:
            raise InvalidModelError(f"{result.model.source}: the Q/DQ rewrite changed the graph's inputs or outputs")
        left = {n.name for n in proto.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")
                and not _is_symmetric_int8(n, proto)}
        if left & set(result.rewritten):
            raise InvalidModelError(f"{result.model.source}: the Q/DQ rewrite left rewritten nodes behind: "
                                    + ", ".join(sorted(left & set(result.rewritten))))
        check_model(proto, where=f"{result.model.source} (after the Q/DQ rewrite)")

    def call(self, model: Model) -> QdqResult:
        rewrite = _Rewrite(model, self.mode)
        if not rewrite.plan():
            return QdqResult(model, False)
        rewrite.apply()
        reindex(model)
        model.fixes.append("; ".join(rewrite_summary(rewrite.rewritten)))
        model.fix_kinds.add(FIX_QDQ)
        model.rewritten.update(rewrite.rewritten)
        log.info("%s: %s", model.source, model.fixes[-1])
        return QdqResult(model, True, dict(rewrite.rewritten))


def rewrite_qdq(model: Model, mode: str = "exact") -> QdqResult:
    """:class:`QdqPass` applied to ``model`` (in place)."""
    return QdqPass(mode)(model)


_FLOAT_Q = "emulated in float32"
_CAST_FOLD = "folded into a float initializer"
# 8-bit constants TensorRT takes only before a DequantizeLinear, and the float types a Cast of one is folded to
_CAST_FOLDED = frozenset({TensorProto.INT8, TensorProto.UINT8})
_FLOAT_TYPES: dict[int, type[np.floating[Any]]] = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}
_INT8_Q = "re-quantized to symmetric int8"
_STEP = re.compile(r"step x([0-9.]+)")
_FOLD_WHY = re.compile(r"^constant DequantizeLinear \((.+?)\) folded")


def rewrite_summary(rewritten: Mapping[str, str]) -> list[str]:
    """What the rewrite did and what it costs, in lines (``inspect`` prints them): pairs
    emulated in float (int8 lost there), pairs re-quantized to int8 (int8 kept; how much
    coarser their step got), constants folded or re-quantized."""
    texts = list(rewritten.values())
    floated = sum(t.startswith("QuantizeLinear") and _FLOAT_Q in t for t in texts)
    requantized = [t for t in texts if t.startswith("QuantizeLinear") and _INT8_Q in t]
    folded = [t for t in texts if "folded into float32" in t]
    weights = sum(t.startswith("constant DequantizeLinear") and _INT8_Q in t for t in texts)
    casts = sum(_CAST_FOLD in t for t in texts)
    lines = []
    if floated:
        lines.append(f"{floated} asymmetric Q/DQ pair(s) TensorRT refuses emulated in float32 (exact; TensorRT "
                     "computes them in float: int8 lost there; the int8 rewrite keeps it)")
    if requantized:
        steps = [float(m.group(1)) for t in requantized if (m := _STEP.search(t))]
        worst = f"; quantization step up to {max(steps):.2f}x the original's" if steps else ""
        lines.append(f"{len(requantized)} asymmetric Q/DQ pair(s) re-quantized to symmetric int8 (int8 kept{worst}; "
                     "compare measures the error)")
    if weights:
        lines.append(f"{weights} constant DequantizeLinear(s) re-quantized to symmetric int8 weights (int8 kept)")
    if folded:  # why TensorRT refused each, as found: "int32", "nonzero zero point", another type
        why = Counter(m.group(1) for t in folded if (m := _FOLD_WHY.search(t)))
        reasons = ", ".join(f"{n} {w}" for w, n in sorted(why.items(), key=lambda item: -item[1]))
        lines.append(f"{len(folded)} constant DequantizeLinear(s) TensorRT refuses ({reasons}) folded into float32 "
                     "initializers (exact)")
    if casts:
        lines.append(f"{casts} Cast(s) of constant 8-bit weights folded into float initializers (exact; TensorRT "
                     "takes 8-bit constants only before a DequantizeLinear)")
    return lines


def _io(proto: onnx.ModelProto) -> list[tuple[str, int]]:
    return [(v.name, v.type.tensor_type.elem_type) for v in (*proto.graph.input, *proto.graph.output)]


class _Rewrite:
    """One run over the main graph: :meth:`plan` decides, :meth:`apply` edits."""

    def __init__(self, model: Model, mode: str = "exact") -> None:
        self.model = model
        self.mode = mode
        self.requantized: dict[int, np.ndarray] = {}  # constant DQ node -> its float values (int8 mode)
        # Q nodes re-quantized to symmetric int8 (int8 mode; a per-axis lopsided range is rewritten exactly)
        self.int8_pairs: set[int] = set()
        self.graph = model.proto.graph
        self.index = model.index
        self.opset = next((o.version for o in model.proto.opset_import if o.domain in ("", "ai.onnx")), 0)
        self.outputs = set(self.index.graph_outputs)
        self.folds: dict[int, np.ndarray] = {}  # DQ node -> its value
        self.pairs: dict[int, tuple[_Quant, list[int]]] = {}  # Q node -> its parameters, its DQ readers
        self.rewritten: dict[str, str] = {}
        self.names = {t.name for t in self.graph.initializer} | {i.name for i in self.graph.input}
        self.names.update(o for n in self.graph.node for o in n.output)
        self.names.update(n.name for n in self.graph.node)

    # -- deciding -------------------------------------------------------------------------
    def plan(self) -> bool:
        for i, node in enumerate(self.graph.node):
            if node.domain not in ("", "ai.onnx"):
                continue
            if node.op_type == "DequantizeLinear":
                self._plan_fold(i, node)
            elif node.op_type == "QuantizeLinear":
                self._plan_pair(i, node)
            elif node.op_type == "Cast":
                self._plan_cast(i, node)
        return bool(self.folds or self.pairs or self.requantized)

    def _plan_fold(self, i: int, node: onnx.NodeProto) -> None:
        xp = self.constant_proto(node.input[0])
        if xp is None or node.output[0] in self.outputs or _attr(node, "output_dtype", 0) not in (0, TensorProto.FLOAT):
            return
        quant = self.quant(node, x_rank=len(xp.dims))
        # A scalar TensorRT's builder refuses in any type ("Quantized constant ... is only allowed before DQ",
        # measured with TensorRT-RTX 1.7; of shape [1] it takes it): the scalar constants of an activation
        # (GELU's 0.5 and 1/sqrt(2)) ONNX Runtime's symmetric quantizer writes.
        scalar = not xp.dims
        if quant is None or quant.tensorrt_takes and not scalar or quant.qtype not in _FOLDABLE \
                or xp.data_type != quant.qtype:
            return  # Decided from dims and dtype: a constant left as it is, often a large weight, is not read.
        x = self.constant(node.input[0])
        if x is None:
            return
        self.folds[i] = dequantize(x, quant)
        why = "int32" if quant.qtype == TensorProto.INT32 else (
            "nonzero zero point" if np.any(quant.zero_point) else
            "scalar" if scalar else onnx.helper.tensor_dtype_to_string(quant.qtype))
        if self.mode == "int8" and quant.qtype != TensorProto.INT32 and not scalar:
            self.requantized[i] = self.folds.pop(i)
            self.rewritten[node.name] = f"constant DequantizeLinear ({why}) {_INT8_Q} weights (zero point 0)"
            return
        self.rewritten[node.name] = (f"constant DequantizeLinear ({why}) folded into float32 initializer "
                                     f"'{node.output[0]}'")

    def _plan_cast(self, i: int, node: onnx.NodeProto) -> None:
        """A Cast of a constant int8/uint8 tensor to a float type (weights stored in int8 and scaled by
        a Mul: a weight-only quantization some exporters write without DequantizeLinear). TensorRT
        takes an 8-bit constant only where a DequantizeLinear reads it: its builder refuses the
        whole segment ("Quantized constant ... is only allowed before DQ"). Folded into an
        initializer of the Cast's type: the same values, exactly."""
        to = _attr(node, "to", 0)
        xp = self.constant_proto(node.input[0]) if node.input else None
        if xp is None or xp.data_type not in _CAST_FOLDED or to not in _FLOAT_TYPES or not node.output[0] \
                or node.output[0] in self.outputs:
            return
        x = self.constant(node.input[0])
        if x is None:
            return
        self.folds[i] = x.astype(_FLOAT_TYPES[to])
        self.rewritten[node.name] = (f"Cast of constant {onnx.helper.tensor_dtype_to_string(xp.data_type)} "
                                     f"'{node.input[0]}' (TensorRT takes 8-bit constants only before a "
                                     f"DequantizeLinear) {_CAST_FOLD} '{node.output[0]}'")

    def _plan_pair(self, i: int, node: onnx.NodeProto) -> None:
        if self.opset < ROUND_OPSET or not node.output[0] or node.output[0] in self.outputs:
            return
        if _elem_type(self.index.types.get(node.input[0])) != TensorProto.FLOAT:
            return
        if _attr(node, "precision", 0) not in (0, TensorProto.FLOAT):
            return
        rank = _rank(self.index.types.get(node.input[0]))
        quant = self.quant(node, x_rank=rank)
        if quant is None or quant.tensorrt_takes or quant.qtype not in _EMULATED:
            return
        if quant.axis is not None and rank is None:
            return
        readers = self.index.consumers.get(node.output[0], [])
        if not readers:
            return
        for r in readers:
            dq = self.graph.node[r]
            if dq.op_type != "DequantizeLinear" or dq.domain not in ("", "ai.onnx") or dq.input[0] != node.output[0]:
                return
            if _attr(dq, "output_dtype", 0) not in (0, TensorProto.FLOAT):
                return
            theirs = self.quant(dq, x_rank=rank)
            if theirs is None or not theirs.same(quant):
                return
        self.pairs[i] = (quant, readers)
        zp = quant.zero_point.ravel()
        what = f"zero point {zp[0]}" if zp.size == 1 else f"zero points per axis {quant.axis}"
        type_name = onnx.helper.tensor_dtype_to_string(quant.qtype).replace("TensorProto.", "").lower()
        lo, hi = quant_range(quant)
        if self.mode == "int8" and (quant.axis is None or np.allclose(lo, -hi)):
            self.int8_pairs.add(i)
            scale = symmetric_scale(lo, hi, quant.scale)
            step = float(np.max(scale / quant.scale))
            self.rewritten[node.name] = (f"QuantizeLinear ({type_name}, {what}) {_INT8_Q}: range "
                                         f"{float(np.min(lo)):.4g}..{float(np.max(hi)):.4g} kept, step x{step:.2f}")
            for r in readers:
                self.rewritten[self.graph.node[r].name] = (f"DequantizeLinear of QuantizeLinear '{node.name}' "
                                                           f"{_INT8_Q}")
            return
        self.rewritten[node.name] = (f"QuantizeLinear ({type_name}, {what}) {_FLOAT_Q}: Div, Round, Add, Clip")
        for r in readers:
            self.rewritten[self.graph.node[r].name] = (f"DequantizeLinear of QuantizeLinear '{node.name}' {_FLOAT_Q}: "
                                                       "Sub, Mul")

    def quant(self, node: onnx.NodeProto, x_rank: int | None) -> _Quant | None:
        """The node's constant float32 scale and zero point, per tensor or per axis; None
        when they are not constants, blocked, or not what this pass emulates."""
        if _attr(node, "block_size", 0):
            return None
        scale = self.constant(node.input[1]) if len(node.input) > 1 else None
        if scale is None or scale.dtype != np.float32 or scale.ndim > 1:
            return None
        zp_name = node.input[2] if len(node.input) > 2 else ""
        if zp_name:
            zp = self.constant(zp_name)
            proto = self.constant_proto(zp_name)
            if zp is None or proto is None or zp.size != scale.size or proto.data_type not in _FOLDABLE:
                return None
            qtype = proto.data_type
        else:
            qtype = _attr(node, "output_dtype", 0) or TensorProto.UINT8
            if node.op_type == "DequantizeLinear":
                qtype = _elem_type(self.index.types.get(node.input[0])) or TensorProto.UINT8
            if qtype not in _FOLDABLE:
                return None
            zp = np.zeros(scale.shape, _FOLDABLE[qtype])
        axis: int | None = None
        if scale.size == 1:  # A 1-element vector is per tensor, as ONNX Runtime takes it.
            scale, zp = scale.reshape(()), zp.reshape(())
        else:
            if x_rank is None:
                return None
            axis = _attr(node, "axis", 1)
            axis = axis + x_rank if axis < 0 else axis
            if not 0 <= axis < x_rank:
                return None
        return _Quant(scale, zp, qtype, axis)

    def constant_proto(self, name: str) -> onnx.TensorProto | None:
        """An initializer or a Constant node's ``value``; None for anything else."""
        proto = self.index.initializer_protos.get(name)
        if proto is None and name in self.index.producer:
            node = self.graph.node[self.index.producer[name]]
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                proto = next((a.t for a in node.attribute if a.name == "value"), None)
        return proto

    def constant(self, name: str) -> np.ndarray | None:
        """The value of :meth:`constant_proto` where it is float32 or an integer type this pass
        reads; external data is read from the model's folder (``Model.base_dir``), never from the
        current directory."""
        proto = self.constant_proto(name)
        if proto is None or proto.data_type not in (*_FOLDABLE, TensorProto.FLOAT):
            return None
        return np.asarray(tensor_array(proto, self.model.base_dir))

    # -- editing --------------------------------------------------------------------------
    def apply(self) -> None:
        readers = {r: q for q, (_, rs) in self.pairs.items() for r in rs}
        replaced = [self.graph.node[i] for i in (*self.folds, *self.pairs, *readers, *self.requantized)]
        released = {name for node in replaced for name in node.input if name}
        params: dict[int, tuple[str, str]] = {}  # Q node -> its scale and zero point initializers
        nodes: list[onnx.NodeProto] = []
        for i, node in enumerate(self.graph.node):
            if i in self.folds:
                self.graph.initializer.append(numpy_helper.from_array(self.folds[i], node.output[0]))
            elif i in self.requantized:
                nodes.append(self._int8_weights(node, self.requantized[i]))
            elif i in self.int8_pairs:
                clamp = self._clamp(node, self.pairs[i][0])
                if clamp is not None:
                    nodes.append(clamp)
                    node = self._reading(node, clamp.output[0])
                nodes.append(self._with_params(node, params.setdefault(i, self._int8_params(node, i))))
            elif i in readers and readers[i] in self.int8_pairs:
                nodes.append(self._with_params(node, params[readers[i]]))
            elif i in self.pairs:
                nodes.extend(self._quantize(node, self.pairs[i][0], params.setdefault(i, self._params(node, i))))
            elif i in readers:
                nodes.extend(self._dequantize(node, params[readers[i]]))
            else:
                nodes.append(node)
        read = {name for node in nodes for name in node_reads(node)} | self.outputs
        dead = released - read  # what only the replaced nodes read: quantized biases, their scales
        del self.graph.node[:]
        self.graph.node.extend(n for n in nodes if not (n.op_type == "Constant" and n.output[0] in dead))
        kept = [t for t in self.graph.initializer if t.name not in dead]
        del self.graph.initializer[:]
        self.graph.initializer.extend(kept)
        changed = {node.output[0] for node in replaced}  # Their value_info is stale: a Q's output changed type.
        info = [vi for vi in self.graph.value_info if vi.name not in changed]
        del self.graph.value_info[:]
        self.graph.value_info.extend(info)

    def _params(self, q: onnx.NodeProto, i: int) -> tuple[str, str]:
        quant = self.pairs[i][0]
        rank = _rank(self.index.types.get(q.input[0])) or 0
        return (self.initializer(f"{q.name}/scale", quant.along(quant.scale, rank)),
                self.initializer(f"{q.name}/zero_point", quant.along(quant.zero_point.astype(np.float32), rank)))

    def _int8_params(self, q: onnx.NodeProto, i: int) -> tuple[str, str]:
        """Symmetric int8 scale and zero point (0) over the range the pair's quantization covers."""
        quant = self.pairs[i][0]
        scale = symmetric_scale(*quant_range(quant), quant.scale).astype(np.float32)
        shape = scale.shape if quant.axis is not None else ()
        return (self.initializer(f"{q.name}/int8_scale", scale.reshape(shape)),
                self.initializer(f"{q.name}/int8_zero_point", np.zeros(shape, np.int8)))

    def _clamp(self, q: onnx.NodeProto, quant: _Quant) -> onnx.NodeProto | None:
        """What the asymmetric range clamped that the symmetric one does not: a range from 0 (an
        exporter drops the Relu before such a Q: the zero point at qmin does its work) is a
        Relu, any other lopsided range a Clip to it; None when the range is symmetric."""
        lo, hi = quant_range(quant)
        amax = np.maximum(np.abs(lo), np.abs(hi))
        if np.allclose(lo, -amax) and np.allclose(hi, amax):
            return None
        out = self.fresh(f"{q.name}/clamp_output")
        if not np.any(lo) and quant.axis is None:
            return helper.make_node("Relu", [q.input[0]], [out], name=self.fresh(f"{q.name}/Relu"))
        low = self.initializer(f"{q.name}/clamp_min", np.array(float(lo), np.float32))
        high = self.initializer(f"{q.name}/clamp_max", np.array(float(hi), np.float32))
        return helper.make_node("Clip", [q.input[0], low, high], [out], name=self.fresh(f"{q.name}/Clip"))

    @staticmethod
    def _reading(node: onnx.NodeProto, name: str) -> onnx.NodeProto:
        out = onnx.NodeProto()
        out.CopyFrom(node)
        out.input[0] = name
        return out

    def _with_params(self, node: onnx.NodeProto, params: tuple[str, str]) -> onnx.NodeProto:
        out = onnx.NodeProto()
        out.CopyFrom(node)
        del out.input[:]
        out.input.extend([node.input[0], *params])
        kept = [a for a in out.attribute if a.name != "output_dtype"]  # Int8 follows from the zero point.
        del out.attribute[:]
        out.attribute.extend(kept)
        return out

    def _int8_weights(self, dq: onnx.NodeProto, value: np.ndarray) -> onnx.NodeProto:
        """A constant DequantizeLinear as symmetric int8 weights: per axis where it was."""
        quant = self.quant(dq, x_rank=value.ndim)
        assert quant is not None  # Planned from the same node.
        axis = quant.axis
        if axis is None:
            amax = np.abs(value).max(initial=0.0)
        else:
            amax = np.abs(value).max(axis=tuple(k for k in range(value.ndim) if k != axis), initial=0.0)
        scale = (np.where(amax > 0, amax, 1.0) / _INT8_MAX).astype(np.float32)
        q = np.clip(np.rint(value / quant.along(scale, value.ndim)), -_INT8_MAX, _INT8_MAX).astype(np.int8)
        weights = self.initializer(f"{dq.name}/int8_weights", q)
        zero = self.initializer(f"{dq.name}/int8_zero_point", np.zeros(scale.shape, np.int8))
        out = self._with_params(dq, (self.initializer(f"{dq.name}/int8_scale", scale), zero))
        out.input[0] = weights
        return out

    def _quantize(self, q: onnx.NodeProto, quant: _Quant, params: tuple[str, str]) -> Iterator[onnx.NodeProto]:
        scale, zp = params
        info = np.iinfo(_EMULATED[quant.qtype])
        qmin = self.initializer(f"{q.name}/qmin", np.array(info.min, np.float32))
        qmax = self.initializer(f"{q.name}/qmax", np.array(info.max, np.float32))
        divided, rounded, shifted = (self.fresh(f"{q.name}/{op}_output") for op in ("Div", "Round", "Add"))
        for node in (helper.make_node("Div", [q.input[0], scale], [divided], name=self.fresh(f"{q.name}/Div")),
                     helper.make_node("Round", [divided], [rounded], name=self.fresh(f"{q.name}/Round")),
                     helper.make_node("Add", [rounded, zp], [shifted], name=self.fresh(f"{q.name}/Add")),
                     helper.make_node("Clip", [shifted, qmin, qmax], [q.output[0]], name=self.fresh(f"{q.name}/Clip"))):
            node.doc_string = EMULATED_DOC
            yield node

    def _dequantize(self, dq: onnx.NodeProto, params: tuple[str, str]) -> Iterator[onnx.NodeProto]:
        scale, zp = params
        centred = self.fresh(f"{dq.name}/Sub_output")
        for node in (helper.make_node("Sub", [dq.input[0], zp], [centred], name=self.fresh(f"{dq.name}/Sub")),
                     helper.make_node("Mul", [centred, scale], [dq.output[0]], name=self.fresh(f"{dq.name}/Mul"))):
            node.doc_string = EMULATED_DOC
            yield node

    def initializer(self, base: str, value: np.ndarray) -> str:
        name = self.fresh(base)
        self.graph.initializer.append(numpy_helper.from_array(np.array(value, order="C"), name))  # 0-d stays 0-d.
        return name

    def fresh(self, base: str) -> str:
        return fresh_name(base, self.names)


def quant_range(quant: _Quant) -> tuple[np.ndarray, np.ndarray]:
    """The real values a quantization covers, per tensor or per axis: ``(qmin - zp) * scale`` to
    ``(qmax - zp) * scale``."""
    info = np.iinfo(_FOLDABLE[quant.qtype])
    zp = quant.zero_point.astype(np.float64)
    return (info.min - zp) * quant.scale, (info.max - zp) * quant.scale


def symmetric_scale(lo: np.ndarray, hi: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """The symmetric int8 scale that covers ``lo..hi`` (``fallback`` where the range is empty)."""
    amax = np.maximum(np.abs(lo), np.abs(hi))
    return np.where(amax > 0, amax / _INT8_MAX, fallback).astype(np.float32)


def _is_symmetric_int8(node: onnx.NodeProto, proto: onnx.ModelProto) -> bool:
    """Whether a Q/DQ node reads an int8 zero point of all zeros (the form TensorRT takes)."""
    if len(node.input) < 3 or not node.input[2]:
        return False
    zp = next((t for t in proto.graph.initializer if t.name == node.input[2]), None)
    return zp is not None and zp.data_type == TensorProto.INT8 and not np.any(numpy_helper.to_array(zp))


def dequantize(x: np.ndarray, quant: _Quant) -> np.ndarray:
    """ONNX DequantizeLinear on a constant: ``(x - zero_point) * scale`` in float32, the
    difference taken in integers first (as ONNX Runtime does), per axis where the scale is 1-D."""
    diff = x.astype(np.int64) - quant.along(quant.zero_point, x.ndim).astype(np.int64)
    return (diff.astype(np.float32) * quant.along(quant.scale, x.ndim)).astype(np.float32)


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(a.i)
    return default


def _elem_type(tp: onnx.TypeProto | None) -> int:
    if tp is None or tp.WhichOneof("value") != "tensor_type":
        return 0
    return int(tp.tensor_type.elem_type)


def _rank(tp: onnx.TypeProto | None) -> int | None:
    if tp is None or tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return None
    return len(tp.tensor_type.shape.dim)

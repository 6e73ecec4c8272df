"""int8 for TensorRT segments: explicit Q/DQ inserted by ONNX Runtime's static quantizer, in the
form TensorRT takes (TensorRT 11 and RTX have no int8 calibrators: Q/DQ is the only int8).

The quantizer's settings are NVIDIA's preset for TensorRT: QDQ format, int8 activations with
symmetric ranges (``ActivationSymmetric``), per-channel symmetric int8 weights, no bias
quantization (``QuantizeBias=False``: TensorRT refuses int32 bias DQ), and Q/DQ only on the inputs
of compute ops (Conv, ConvTranspose, MatMul, Gemm): no op's output is quantized, so nothing but a
compute op reads a Q/DQ pair and TensorRT fuses each into its int8 kernel.

``int8`` means int8 with fp16 for everything not quantized, as trtexec's ``--int8 --fp16``: in a
strongly typed network that is the Q/DQ graph with its float tensors in fp16 (the fp16 transform of
:mod:`trt_backend.engines.precision` run on the quantized segment, at opset 19 or later, where
QuantizeLinear/DequantizeLinear take fp16 scales). What stays float32: the ops of ``keep_fp32_ops``
(LayerNorm, Softmax, reductions), the nodes pinned to fp32, and any Q/DQ node whose scale fp16
cannot hold as a normal number (below 2^-14 or above 65504: such a scale would flush or round
coarsely; the node then runs in fp32 between casts). TensorRT fuses the Q/DQ pairs in front of a
compute op into one int8 kernel and requires their scales to share a dtype (Myelin refuses a
MatMul whose operand scales are fp32 and fp16), so such a node takes with it every Q/DQ node whose
scale meets its own in a compute op, and those compute ops: all keep fp32 together.

A segment is calibrated on its own inputs: the whole model runs on the calibration batches with
the segment's inputs tapped (fp32, as the reference computes them). Quantized segments are kept
by (segment SHA-256, data SHA-256, method) for the life of the quantizer; engine cache keys hold
the data's SHA-256 and the method (``BuildOptions.key_fields``). A segment that already carries
Q/DQ keeps its own (no double quantization)."""
from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from partitioner import Model
from partitioner.model import fitting_ir_version, serialize
from trt_backend._files import sha256_bytes
from trt_backend.engines.calibration import (
    Batches,
    CalibrationData,
    ShapeRanges,
    load_calibration,
    model_inputs,
)
from trt_backend.engines.precision import DEFAULT_KEEP_FP32, apply_precision, with_opset
from trt_backend.errors import CalibrationDataError, PrecisionError, SegmentRunError
from trt_backend.ort.options import OrtOptions
from trt_backend.ort.sessions import max_ir_version, tapped_session

log = logging.getLogger(__name__)

COMPUTE_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
QDQ_FP16_OPSET = 19  # the opset in which QuantizeLinear/DequantizeLinear admit float16 scales
_FP16_NORMAL = (2.0 ** -14, 65504.0)
TAP_CACHE_BYTES = 256 << 20  # segment inputs of every calibration batch kept up to this size


def carries_qdq(model: onnx.ModelProto) -> bool:
    return any(n.op_type in QDQ_OPS for n in model.graph.node)


def qdq_types(model: onnx.ModelProto) -> dict[str, int]:
    """How many Q/DQ nodes of ``model``'s main graph quantize to each type ("int8", "int4",
    "uint8", "int32" for a bias, "float8e4m3fn", ...): a DequantizeLinear's input's type (a
    QuantizeLinear's before it), a QuantizeLinear's zero point's, else its ``output_dtype``, else
    uint8 (ONNX's default); "?" where the graph does not say."""
    graph = model.graph
    types = {t.name: t.data_type for t in graph.initializer}
    types.update({vi.name: vi.type.tensor_type.elem_type for vi in (*graph.input, *graph.value_info)
                  if vi.type.WhichOneof("value") == "tensor_type"})
    for node in graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value" and a.HasField("t"):
                    types[node.output[0]] = a.t.data_type
    counts: dict[str, int] = {}
    for node in graph.node:
        if node.op_type == "DequantizeLinear":
            qtype = types.get(node.input[0], 0)
        elif node.op_type == "QuantizeLinear":
            attr = next((a.i for a in node.attribute if a.name == "output_dtype"), 0)
            qtype = types.get(node.input[2], 0) if len(node.input) > 2 and node.input[2] else \
                attr or onnx.TensorProto.UINT8
            types[node.output[0]] = qtype  # (what a DequantizeLinear after it reads)
        else:
            continue
        try:
            name = onnx.TensorProto.DataType.Name(qtype).lower() if qtype else "?"  # ("INT4" -> "int4")
        except ValueError:
            name = "?"
        counts[name] = counts.get(name, 0) + 1
    return counts


def int8_or_fp16(quantized: onnx.ModelProto, source: onnx.ModelProto) -> str:
    """The precision a segment the int8 quantizer made of ``source`` computes in: int8 where it
    holds Q/DQ. One with nothing quantized (no compute op, or every one pinned fp32) is only the
    fp16 remainder: fp16 where that lowered some of it (it holds more fp16 weights or casts to fp16
    than ``source``), else fp32 (all its float arithmetic inside If/Loop/Scan bodies, which the
    transform keeps float32; a model stored in fp16 computing in its own types)."""
    if carries_qdq(quantized):
        return "int8"
    return "fp16" if _fp16_marks(quantized) > _fp16_marks(source) else "fp32"


def _fp16_marks(model: onnx.ModelProto) -> int:
    """fp16 weights and casts to fp16 in ``model``'s main graph: what lowering a node adds."""
    return (sum(t.data_type == onnx.TensorProto.FLOAT16 for t in model.graph.initializer)
            + sum(n.op_type == "Cast" and any(a.name == "to" and a.i == onnx.TensorProto.FLOAT16 for a in n.attribute)
                  for n in model.graph.node))


class SegmentQuantizer:
    """``quantizer(segment_model)`` -> the segment with TensorRT-friendly Q/DQ, calibrated on the
    segment's inputs as the whole ``model`` computes them from the calibration data."""

    def __init__(self, model: Model, data_source: str, method: str = "minmax",
                 batch_sizes: Mapping[str, int] | None = None, options: OrtOptions | None = None,
                 seed: int = 0, keep_fp32_ops: Sequence[str] = DEFAULT_KEEP_FP32, ranges: ShapeRanges = ()) -> None:
        self.model = model
        self.method = method
        self.keep_fp32_ops = tuple(keep_fp32_ops)
        self.options = options or OrtOptions()
        self.data: CalibrationData = load_calibration(data_source, model_inputs(model.proto), batch_sizes, seed,
                                                      ranges)
        if method != "minmax" and self.data.shapes > 1:
            # (ONNX Runtime's histogram calibrators stack every batch's values of a tensor into one
            # array: batches of two shapes fail there, deep in a segment's build)
            if self.data.sample_shapes > 1:
                raise CalibrationDataError(f"calibration data {data_source}: --calibration-method {method} takes "
                                           f"samples of one shape, and the data holds {self.data.sample_shapes} "
                                           "(ONNX Runtime's histogram calibrator stacks them); use minmax, or samples "
                                           "of one shape")
            kept = self.data.of_commonest_shape()  # (a last batch short of the batch size: left out)
            log.info("calibration data %s: %s calibration takes %d batch(es) of one shape, of %d", data_source,
                     method, len(kept.batches), len(self.data.batches))
            self.data = kept
        self._taps: dict[str, list[Any]] = {}  # tensor -> its value per calibration batch (while they fit)
        self._done: dict[str, onnx.ModelProto] = {}
        self._lock = threading.Lock()

    def __call__(self, segment: onnx.ModelProto, exclude: Sequence[str] = ()) -> onnx.ModelProto:
        """``segment`` with Q/DQ; the compute nodes named in ``exclude`` stay float."""
        if carries_qdq(segment):  # its own Q/DQ kept (no double quantization); the float rest in fp16
            log.info("%s already carries Q/DQ: kept as they are", segment.graph.name)
            if holds_fp16(segment):  # Quantized here before, or a model already mixed by its author.
                return segment
            exclude = (*exclude, *(n.name for n in segment.graph.node if n.op_type in QDQ_OPS))
        key = sha256_bytes(serialize(segment, "a segment to quantize", deterministic=True)) + "|" + ",".join(
            sorted(exclude))
        with self._lock:  # Parallel segment builds: one calibration run at a time, and each once.
            if key not in self._done:
                quantized = segment if carries_qdq(segment) else self._quantize(segment, frozenset(exclude))
                self._done[key] = with_fp16_remainder(quantized, self.keep_fp32_ops, exclude)
            return self._done[key]

    def segment_feeds(self, names: Sequence[str]) -> Sequence[dict[str, Any]]:
        """The values of ``names`` per calibration batch: one tapped run of the whole model per
        batch. Kept for the next segment while they take at most TAP_CACHE_BYTES; beyond that
        they are streamed (the model runs again on each pass), so the data may exceed memory."""
        missing = [n for n in names if n not in self._taps]
        if not missing:
            return [{n: self._taps[n][k] for n in names} for k in range(len(self.data.batches))]
        run = tapped_session(self.model, list(names), self.options, f"calibration run of {self.model.source}")

        def stream() -> Iterator[dict[str, Any]]:
            for k, feed in enumerate(self.data.batches):
                env = self._run(run, k, feed, names)
                yield {n: env[n] for n in names}

        kept: list[dict[str, Any]] = []
        held = 0
        for values in stream():
            held += sum(int(getattr(v, "nbytes", 0)) for v in values.values())
            if held > TAP_CACHE_BYTES:
                log.info("calibration: the inputs of %s take over %d MiB: streamed, the model runs on each pass",
                         ", ".join(names[:3]), TAP_CACHE_BYTES >> 20)
                return Batches(stream, len(self.data.batches))
            kept.append(values)
        for n in missing:
            self._taps[n] = [v[n] for v in kept]
        return kept

    def _run(self, run: Any, k: int, feed: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
        try:
            env: dict[str, Any] = run(feed, names)
            return env
        except SegmentRunError as e:
            what = ("'random' (the profile's opt shapes, floats N(0, 1), integers 0)" if self.data.random
                    else repr(self.data.source))
            raise CalibrationDataError(f"the model does not run on calibration data {what}, batch {k} "
                                       f"({', '.join(f'{n} {v.shape}' for n, v in feed.items())}): {e}; "
                                       "give data shaped as the model takes it") from None

    def _quantize(self, segment: onnx.ModelProto, exclude: frozenset[str] = frozenset()) -> onnx.ModelProto:
        from onnxruntime.quantization import (  # heavy: loaded on first use
            CalibrationMethod,
            QuantFormat,
            QuantType,
            quantize_static,
        )

        inits = {t.name for t in segment.graph.initializer}
        names = [v.name for v in segment.graph.input if v.name not in inits]
        feeds = self.segment_feeds(names)
        compute = [n.name for n in segment.graph.node if n.op_type in COMPUTE_OPS and n.name not in exclude]
        if not compute:
            log.info("%s has no Conv/MatMul/Gemm: nothing to quantize", segment.graph.name)
            return segment
        method = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
                  "percentile": CalibrationMethod.Percentile}[self.method]
        extra = {"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False,
                 "OpTypesToExcludeOutputQuantization": list(COMPUTE_OPS), "DedicatedQDQPair": False}
        with tempfile.TemporaryDirectory(prefix="trt-backend-int8-") as tmp:
            src, dst = os.path.join(tmp, "segment.onnx"), os.path.join(tmp, "segment_int8.onnx")
            onnx.save(segment, src)
            try:
                with _quiet_root_logger():  # the quantizer warns through the root logger (pre-processing advice...)
                    quantize_static(src, dst, _Reader(feeds), quant_format=QuantFormat.QDQ,
                                    op_types_to_quantize=list(COMPUTE_OPS), nodes_to_quantize=compute, per_channel=True,
                                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                                    calibrate_method=method, extra_options=extra)
            except (ValueError, RuntimeError, KeyError, IndexError) as e:  # The quantizer's own failures.
                raise PrecisionError(f"{segment.graph.name}: ONNX Runtime's quantizer failed: {e}") from e
            quantized = onnx.load(dst)
        _drop_unused_opsets(quantized, segment)
        quantized.ir_version = fitting_ir_version(quantized, max_ir_version())
        qdq = sum(n.op_type in QDQ_OPS for n in quantized.graph.node)
        log.info("%s: %d Q/DQ node(s) inserted around %d compute op(s) (%s calibration, %d batch(es))",
                 segment.graph.name, qdq, len(compute), self.method, len(feeds))
        return quantized


def holds_fp16(model: onnx.ModelProto) -> bool:
    """Whether ``model`` already has fp16 weights or casts to fp16."""
    return _fp16_marks(model) > 0


def with_fp16_remainder(quantized: onnx.ModelProto, keep_fp32_ops: Sequence[str] = DEFAULT_KEEP_FP32,
                        pinned: Sequence[str] = ()) -> onnx.ModelProto:
    """``quantized`` (a segment with Q/DQ) with every float tensor not quantized in fp16, save the
    ops of ``keep_fp32_ops``, the ``pinned`` nodes and the Q/DQ nodes whose scales fp16 cannot hold
    (see the module doc). PrecisionError when the fp16 transform fails."""
    model = with_opset(quantized, QDQ_FP16_OPSET)
    scaled = fp32_scale_groups(model)
    kept = set(pinned) | {n.name for n in scaled}
    if kept - set(pinned):
        log.info("%s: %d Q/DQ node(s) keep fp32 scales (beyond fp16's normal range, or meeting such a scale "
                 "in a compute op), %d other node(s) with them", model.graph.name,
                 sum(n.op_type in QDQ_OPS for n in scaled), sum(n.op_type not in QDQ_OPS for n in scaled))
    return apply_precision(model, "fp16", keep_fp32_ops, kept).model


def fp32_scale_groups(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The nodes that keep fp32 for the sake of the Q/DQ scales fp16 cannot hold
    (:func:`fp32_scaled_qdq`): such a Q/DQ node, the Q/DQ nodes whose scales TensorRT combines with
    its own (a QuantizeLinear and its DequantizeLinears, the DequantizeLinears a node reads
    together) and the nodes reading those DequantizeLinears, so that every compute op sees operand
    scales of one dtype, computing in fp32 right after them (no cast between a DQ and its reader)."""
    nodes = list(model.graph.node)
    root = list(range(len(nodes)))

    def find(k: int) -> int:
        while root[k] != k:
            root[k] = root[root[k]]
            k = root[k]
        return k

    def join(a: int, b: int) -> None:
        root[find(a)] = find(b)

    made = {o: k for k, n in enumerate(nodes) if n.op_type in QDQ_OPS for o in n.output if o}
    for k, node in enumerate(nodes):
        for name in node.input:
            src = made.get(name)
            if src is not None and (node.op_type == "DequantizeLinear" or nodes[src].op_type == "DequantizeLinear"):
                join(k, src)  # A DQ and its Q, a reader and the DQs it reads.
    fp32 = set(fp32_scaled_qdq(model))
    groups = {find(k) for k, n in enumerate(nodes) if n.name in fp32}
    return [n for k, n in enumerate(nodes) if find(k) in groups]


def fp32_scaled_qdq(model: onnx.ModelProto) -> list[str]:
    """Names of the Q/DQ nodes whose scale has a value fp16 holds only as a subnormal, zero or inf."""
    inits = {t.name: t for t in model.graph.initializer}
    out = []
    for node in model.graph.node:
        if node.op_type not in QDQ_OPS or len(node.input) < 2 or node.input[1] not in inits:
            continue
        scale = np.abs(np.asarray(numpy_helper.to_array(inits[node.input[1]]), dtype=np.float64))
        if scale.size and (scale.min() < _FP16_NORMAL[0] or scale.max() > _FP16_NORMAL[1]):
            out.append(node.name)
    return out


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """The quantizer's root-logger warnings and its calibrators' prints (on stdout, where the CLI
    writes its report) go to this module's debug log."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            yield
    finally:
        root.setLevel(level)
        if printed.getvalue():
            log.debug("quantizer: %s", printed.getvalue().strip())


def _drop_unused_opsets(quantized: onnx.ModelProto, original: onnx.ModelProto) -> None:
    """Keep the quantized model's opset imports those of the segment (the quantizer may add
    com.microsoft, which TensorRT's parser need not know) unless a node uses another domain."""
    used = {n.domain for n in quantized.graph.node}
    keep = [o for o in quantized.opset_import if o.domain in ("", "ai.onnx") or o.domain in used]
    del quantized.opset_import[:]
    quantized.opset_import.extend(keep)


class _Reader:
    """An onnxruntime CalibrationDataReader over feeds, read as it asks (its base class is a
    plain ABC)."""

    def __init__(self, feeds: Sequence[Mapping[str, Any]]) -> None:
        self._feeds = feeds
        self._it: Iterator[Mapping[str, Any]] = iter(self._feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        feed = next(self._it, None)
        return None if feed is None else {k: np.asarray(v) for k, v in feed.items()}

    def rewind(self) -> None:
        self._it = iter(self._feeds)



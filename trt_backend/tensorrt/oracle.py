"""The TensorRT ONNX parser as a capability oracle (partitioner.CapabilityOracle)."""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
import weakref
from typing import Any

import onnx

from partitioner.capability import Piece, QueryResult
from partitioner.model import serialize, structure_copy
from partitioner.weights import external_reference, is_external, is_stand_in, raw_nbytes
from trt_backend._files import new_folder
from trt_backend._progress import progress
from trt_backend.tensorrt.flavor import (
    Flavor,
    create_builder,
    load_flavor,
    native_stderr,
    network_flags,
    tensorrt_lock,
)
from trt_backend.tensorrt.questions import UNNAMED, importer_op, parser_errors, supports

log = logging.getLogger(__name__)


class ParserOracle:
    """Asks a TensorRT flavor's ``OnnxParser.supports_model_v2`` about standalone models.

    Each question gets a fresh network and parser, kept referenced together (a parser whose
    network was a temporary segfaults when used). Models whose weights are external data are
    handed over with a path in ``weights_dir`` (the planner sets it to the model's folder), so
    the parser reads the weights from their files; the bytes it gets hold no weights."""

    def __init__(self, flavor: Flavor | str = "auto") -> None:
        self.flavor = flavor if isinstance(flavor, Flavor) else load_flavor(flavor)
        trt = self.flavor.module
        # Rejections are expected here and come back through get_error(); a native logger at
        # INTERNAL_ERROR keeps the parser from calling into Python thousands of times per query.
        self._logger = trt.Logger(trt.Logger.INTERNAL_ERROR)
        self._builder = create_builder(self.flavor, self._logger)
        self.weights_dir: str | None = None
        self._zeros: _ZeroWeights | None = None

    @property
    def target(self) -> str:
        return self.flavor.target

    def _path(self) -> str | None:
        """A file name in the folder external data locations are relative to (never opened)."""
        return os.path.join(self.weights_dir, "capability_query.onnx") if self.weights_dir else None

    takes_stand_ins = True  # capability queries may carry weights as stand-ins (partitioner.weights.stand_in)

    def _question(self, model: onnx.ModelProto) -> tuple[bytes, str | None]:
        """What the parser is given: the model's bytes and the path its external data is relative
        to. Large float weights (stand-ins, or held inline) are handed over as references into a
        sparse file of zeros: their values do not decide capability, and serializing them cost
        more than the parse. Real external data stays readable there through symlinks."""
        if not any(is_stand_in(t) or _zeroable(t) for t in model.graph.initializer):
            return serialize(model, "a capability query"), self._path()
        if self._zeros is None:
            self._zeros = _ZeroWeights()
        return serialize(self._zeros.stand_in(model, self.weights_dir), "a capability query"), self._zeros.path

    def query(self, model: onnx.ModelProto) -> QueryResult:
        progress("planning: asking the TensorRT parser about %d node(s)", len(model.graph.node))
        data, path = self._question(model)
        with tensorrt_lock:  # (see tensorrt_lock: the network and parser also go inside it)
            supported, pieces, errors = self._supported(data, path)
        if not supported and not any(k >= 0 for k in errors):  # some versions reject a model without naming a node
            errors = {**self._parse_errors(data, path), **errors}
        unnamed = errors.pop(UNNAMED, None)
        op = importer_op(unnamed) if unnamed is not None else None  # (importInput names no op of the graph)
        blamed = (op,) if op is not None and any(n.op_type == op for n in model.graph.node) else ()
        return QueryResult(supported, pieces, errors, unnamed=unnamed, blamed_ops=blamed)

    def _supported(self, data: bytes, path: str | None) -> tuple[bool, tuple[Piece, ...], dict[int, str]]:
        supported, pieces, errors = supports(self.flavor, self._builder, self._logger, data, path)
        return supported, tuple(Piece(nodes, verified) for nodes, verified in pieces), errors

    def _parse_errors(self, data: bytes, path: str | None) -> dict[int, str]:
        trt = self.flavor.module
        errors: dict[int, str] = {}
        with tensorrt_lock:
            network = self._builder.create_network(network_flags(self.flavor))
            parser: Any = trt.OnnxParser(network, self._logger)
            with native_stderr():
                parsed = bool(parser.parse(data, path))
            if not parsed:
                errors = parser_errors(parser)
            del parser, network
        return errors

    def __del__(self) -> None:
        with tensorrt_lock:  # The builder and logger go inside it, in whichever thread lets the oracle go.
            self.__dict__.pop("_builder", None)
            self.__dict__.pop("_logger", None)


_ZEROABLE = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                       onnx.TensorProto.DOUBLE})
_ZEROS_MIN_BYTES = 64 * 1024


def _zeroable(t: onnx.TensorProto) -> bool:
    return t.data_type in _ZEROABLE and raw_nbytes(t) >= _ZEROS_MIN_BYTES


class _ZeroWeights:
    """A sparse file of zeros (no disk blocks) that large float weights of a capability query
    point into instead of travelling inside its bytes."""

    def __init__(self) -> None:
        # (named with this process, so that a later run removes it where this one is killed)
        folder = self._folder = new_folder(tempfile.gettempdir(), "trt-backend-zeros-")
        self._done = weakref.finalize(self, shutil.rmtree, folder, True)
        self.path = os.path.join(folder, "query.onnx")
        self._file = os.path.join(folder, "zeros.bin")
        self._size = 0
        open(self._file, "wb").close()

    def stand_in(self, model: onnx.ModelProto, weights_dir: str | None) -> onnx.ModelProto:
        """``model`` with each large float weight a reference to its own range of the file
        (TensorRT names weights by address: shared ranges would collide)."""
        offsets: dict[str, tuple[int, int]] = {}
        end = 0
        for t in model.graph.initializer:
            n = _stand_in_length(t)
            if n is not None:
                offsets[t.name] = (end, n)
                end += n
            elif is_external(t) and weights_dir is not None:
                self._link(t, weights_dir)
        if end > self._size:
            os.truncate(self._file, end)
            self._size = end

        def reference(t: onnx.TensorProto) -> onnx.TensorProto | None:
            if t.name not in offsets:
                return None
            offset, length = offsets[t.name]
            return external_reference(t, "zeros.bin", offset, length)

        return structure_copy(model, reference)

    def _link(self, t: onnx.TensorProto, weights_dir: str) -> None:
        location = next(e.value for e in t.external_data if e.key == "location")
        link = os.path.join(self._folder, location)
        if not os.path.lexists(link):
            os.makedirs(os.path.dirname(link), exist_ok=True)
            os.symlink(os.path.join(os.path.abspath(weights_dir), location), link)


def _stand_in_length(t: onnx.TensorProto) -> int | None:
    if is_stand_in(t):
        return int(next(e.value for e in t.external_data if e.key == "length"))
    return raw_nbytes(t) if _zeroable(t) else None

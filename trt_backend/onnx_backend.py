"""The ``onnx.backend`` API over :class:`~trt_backend.session.session.Session`.

``prepare(model, "CPU")`` runs the whole pipeline (plan, profiles, segments) with TensorRT
segments emulated through ONNX Runtime; ``"CUDA"`` asks for real TensorRT execution. A model
whose dynamic inputs have no profile gets one per distinct set of input shapes it is run with
(min = opt = max = those shapes), planned once."""
from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

from partitioner import Plan
from partitioner.model import onnx_error_text
from partitioner.errors import OptionsError
from trt_backend.errors import (
    CalibrationError,
    FeedError,
    MissingProfileError,
    ProfileError,
)
from trt_backend.gpu.status import tensorrt_status
from trt_backend.session.feeds import fed_initializers
from trt_backend.session.options import OPTION_NAMES, RENAMED_OPTIONS, SessionOptions
from trt_backend.session.session import Session

log = logging.getLogger(__name__)

_OPTION_NAMES = OPTION_NAMES
_MAX_SHAPE_SESSIONS = 8


def _device_type(device: str) -> int:
    try:
        return int(Device(device).type)
    except (AttributeError, ValueError):
        raise OptionsError(f"unknown device {device!r}; use 'CPU' or 'CUDA' (optionally 'CUDA:<id>')") from None


def _options(device: str, kwargs: Mapping[str, Any]) -> SessionOptions:
    base = kwargs.get("options")
    if base is not None and not isinstance(base, SessionOptions):
        raise OptionsError(f"options must be a SessionOptions, got {type(base).__name__}")
    given = {k: v for k, v in kwargs.items() if k in _OPTION_NAMES or k in RENAMED_OPTIONS}  # Renamed: its error.
    ignored = sorted(set(kwargs) - _OPTION_NAMES - set(RENAMED_OPTIONS) - {"options", "profiles"})
    if ignored:
        log.debug("prepare: ignoring unknown keyword(s) %s", ", ".join(ignored))
    emulate = _device_type(device) == DeviceType.CPU
    opts = replace(base, **given) if base is not None else SessionOptions(**given)
    return replace(opts, emulate=emulate)


class TrtBackendRep(BackendRep):
    """A prepared model. ``run`` takes a list (graph input order), a dict, or one array."""

    def __init__(self, plan: Plan, options: SessionOptions, profiles: Sequence[Mapping[str, Any]] | None) -> None:
        self.plan = plan
        self.options = options
        self._profiles = profiles
        self._by_shapes: OrderedDict[tuple[Any, ...], Session] = OrderedDict()
        self.session: Session | None = None
        try:
            self.session = Session(plan, profiles, options)
        except (MissingProfileError, CalibrationError) as e:
            log.info("%s: %s; deriving profiles from the inputs of each run instead", plan.model_name, e)

    def _session_for(self, feeds: Mapping[str, Any], fresh: bool = False) -> Session:
        if self.session is not None:
            return self.session
        shapes = {n: tuple(np.shape(v)) for n, v in feeds.items() if isinstance(v, np.ndarray)}
        key = tuple(sorted(shapes.items()))
        sess = None if fresh else self._by_shapes.get(key)
        if sess is None:
            sess = Session(self.plan, [{n: (s, s, s) for n, s in shapes.items()}], self.options,
                           calibration_feeds=[feeds])
            self._by_shapes[key] = sess
            if len(self._by_shapes) > _MAX_SHAPE_SESSIONS:
                self._by_shapes.popitem(last=False)[1].close()
        else:
            self._by_shapes.move_to_end(key)
        return sess

    def input_names(self) -> list[str]:
        assert self.plan.model is not None
        return [vi.name for vi in self.plan.model.proto.graph.input]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        names = self.input_names()
        if isinstance(inputs, Mapping):
            feeds = dict(inputs)
        elif isinstance(inputs, (list, tuple)):
            if len(inputs) != len(names):
                raise FeedError(f"got {len(inputs)} input(s), the model has {len(names)}: {', '.join(names)}")
            feeds = dict(zip(names, inputs))
        elif len(names) == 1:
            feeds = {names[0]: inputs}
        else:
            raise FeedError(f"pass a list or dict of inputs; the model has {len(names)}: {', '.join(names)}")
        feeds = {k: (np.asarray(v) if isinstance(v, np.generic) else v) for k, v in feeds.items()}
        assert self.plan.model is not None
        fixed = [k for k in feeds if k not in names and k in {t.name for t in self.plan.model.proto.graph.initializer}]
        if fixed:  # (before a session is made for these feeds: its profiles would name it first)
            raise fed_initializers(fixed)
        sess = self._session_for(feeds)
        try:
            outputs = sess.run(None, feeds)
        except ProfileError:
            if sess is self.session:
                raise
            # derived from other inputs of these shapes: shape-tensor values differ; derive again
            sess = self._session_for(feeds, fresh=True)
            outputs = sess.run(None, feeds)
        out_names = [a.name for a in sess.get_outputs()]
        return namedtupledict("Outputs", out_names)(*outputs)


class TrtBackend(Backend):
    """trt-backend as an ``onnx.backend``: ``prepare``, ``run_model``, ``run_node``."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> TrtBackendRep:
        """Plan ``model`` (path, bytes or ModelProto) and make its segments. Keywords: any
        SessionOptions field, ``options=SessionOptions(...)``, ``profiles=[...]``."""
        options = _options(device, kwargs)
        plan = model if isinstance(model, Plan) else Session.make_plan(model, options)
        return TrtBackendRep(plan, options, kwargs.get("profiles"))

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[Any, tuple[int, ...]]] | None = None, **kwargs: Any) -> tuple[Any, ...]:
        """Run one node: a one-node model is made from it and the inputs' dtypes and shapes."""
        model = node_model(node, inputs, outputs_info, kwargs.pop("opset_version", None))
        names = [vi.name for vi in model.graph.input]
        values = [v for n, v in zip(node.input, _as_list(inputs, node)) if n]
        return cls.prepare(model, device, **kwargs).run(dict(zip(names, values)))

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            kind = _device_type(device)
        except OptionsError:
            return False
        if kind == DeviceType.CPU:
            return True
        return tensorrt_status()[0]


def _as_list(inputs: Any, node: onnx.NodeProto) -> list[Any]:
    if isinstance(inputs, Mapping):
        return [inputs.get(n) for n in node.input]
    return list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]


def _value_info(name: str, value: Any) -> onnx.ValueInfoProto:
    if isinstance(value, list):
        elem = onnx.helper.np_dtype_to_tensor_dtype(np.asarray(value[0]).dtype) if value else onnx.TensorProto.FLOAT
        return onnx.helper.make_tensor_sequence_value_info(name, elem, None)
    arr = np.asarray(value)
    return onnx.helper.make_tensor_value_info(name, onnx.helper.np_dtype_to_tensor_dtype(arr.dtype), arr.shape)


def node_model(node: onnx.NodeProto, inputs: Any, outputs_info: Sequence[tuple[Any, tuple[int, ...]]] | None,
               opset_version: int | None) -> onnx.ModelProto:
    """A one-node model whose inputs are typed from ``inputs`` and outputs from ``outputs_info``."""
    values = _as_list(inputs, node)
    if len(values) < len([n for n in node.input if n]):
        raise FeedError(f"node {node.op_type} reads {len(node.input)} input(s), got {len(values)}")
    graph_inputs = [_value_info(n, v) for n, v in zip(node.input, values) if n]
    if outputs_info is not None:
        graph_outputs = [onnx.helper.make_tensor_value_info(
                             n, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dt)), shape)
                         for n, (dt, shape) in zip(node.output, outputs_info)]
    else:
        graph_outputs = [onnx.helper.make_empty_tensor_value_info(n) for n in node.output if n]
    graph = onnx.helper.make_graph([node], f"{node.op_type}_node", graph_inputs, graph_outputs)
    version = opset_version or onnx.defs.onnx_opset_version()
    opsets = [onnx.helper.make_opsetid("", version)]
    if node.domain not in ("", "ai.onnx"):
        opsets.append(onnx.helper.make_opsetid(node.domain, 1 if node.domain != "ai.onnx.ml" else 5))
    model = onnx.helper.make_model(graph, opset_imports=opsets, producer_name="trt-backend")
    if outputs_info is None:  # output types from shape inference: a graph output needs one
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as e:
            raise FeedError(f"node {node.op_type}: cannot infer its output types ({onnx_error_text(e, model)}); "
                            "pass outputs_info") from None
        known = {vi.name: vi.type for vi in list(inferred.graph.value_info) + list(inferred.graph.output)
                 if vi.type.WhichOneof("value")}
        for vi in model.graph.output:
            if vi.name not in known:
                raise FeedError(f"node {node.op_type}: cannot infer the type of output '{vi.name}'; pass outputs_info")
            vi.type.CopyFrom(known[vi.name])
    return model


prepare = TrtBackend.prepare
run_model = TrtBackend.run_model
run_node = TrtBackend.run_node
supports_device = TrtBackend.supports_device
is_compatible = TrtBackend.is_compatible

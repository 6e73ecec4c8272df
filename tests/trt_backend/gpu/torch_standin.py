"""A stand-in for the TensorRT runner on a GPU machine without TensorRT: it executes a TensorRT
segment's ONNX model on the GPU through PyTorch (``onnx2torch``), on the session's own CUDA
stream, so everything around an engine is real: device feeds taken in place, device-resident
intermediates handed between segments, the session's stream and an event, outputs left on the
device. Only the engine is replaced.

The device machine has no internet: carry onnx2torch with
``pip install --no-deps --target .device-pylib onnx2torch`` and put ``.device-pylib`` on
PYTHONPATH (benchmarks/device/gpu_device_check.sh does both)."""
from __future__ import annotations

import sys
import types
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import onnx

from partitioner import Segment
from trt_backend.gpu import device as dev
from trt_backend.gpu import memory as mem
from trt_backend.ort.values import to_numpy
from trt_backend.profiles import Profile
from trt_backend.runners.base import TENSORRT, SegmentRunner


def import_onnx2torch() -> Any:
    """onnx2torch, which imports torchvision at import time for its NMS and RoiAlign converters.
    Where torchvision is missing, a module whose ops raise stands in for it (the segments run
    here use neither op)."""
    try:
        import torchvision  # noqa: F401
    except ImportError:
        def missing(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("torchvision is not installed here (onnx2torch import shim)")

        shim, ops = types.ModuleType("torchvision"), types.ModuleType("torchvision.ops")
        ops.nms = ops.box_convert = ops.roi_align = missing  # type: ignore[attr-defined]
        shim.ops = ops  # type: ignore[attr-defined]
        sys.modules.setdefault("torchvision", shim)
        sys.modules.setdefault("torchvision.ops", ops)
    import onnx2torch

    return onnx2torch


def torch_module(model: onnx.ModelProto) -> Any:
    """The segment model as a ``torch.nn.Module`` (on the CPU; ``.to(device)`` moves it)."""
    return import_onnx2torch().convert(model).eval()


def flatten(result: Any) -> list[Any]:
    """The module's outputs in graph order (a multi-output node such as TopK comes as a nested tuple)."""
    if isinstance(result, (tuple, list)):
        return [t for part in result for t in flatten(part)]
    return [result]


class TorchStandInRunner(SegmentRunner):
    """Runs one TensorRT segment's ONNX model through PyTorch on ``device_id``, on the calling
    thread's session stream (wrapped as a ``torch.cuda.ExternalStream``); takes the TensorRT
    runner's keywords."""

    executor: ClassVar[str] = TENSORRT

    def __init__(self, segment: Segment, model: onnx.ModelProto, profiles: Sequence[Profile] = (),
                 shape_tensors: frozenset[str] = frozenset(), *, streams: dev.ThreadStreams,
                 pool: Any = None, outputs_on_device: bool = True, allow_host_code: bool = False,
                 device_id: int | None = None, **ignored: Any) -> None:
        super().__init__(segment, profiles, shape_tensors)
        import torch

        torch.backends.cudnn.allow_tf32 = False  # fp32 as ONNX Runtime computes it, not TF32
        torch.backends.cuda.matmul.allow_tf32 = False
        self.torch = torch
        self.device_id = device_id if device_id is not None else dev.current_device()
        self.device = torch.device("cuda", self.device_id)
        self.module = torch_module(model).to(self.device)
        self.model_inputs = [i.name for i in model.graph.input]
        self.model_outputs = [o.name for o in model.graph.output]
        self.streams = streams
        self.outputs_on_device = outputs_on_device
        self.device_inputs = 0  # inputs taken in place from device memory
        self.host_inputs = 0  # inputs copied from the host

    def run_impl(self, inputs: Sequence[Any], ort_run_options: Any = None) -> list[Any]:
        torch = self.torch
        by_name = dict(zip(self.input_names, inputs))
        stream = self.streams.current()
        torch_stream = torch.cuda.ExternalStream(stream.ptr, device=self.device)
        with torch.cuda.device(self.device), torch.cuda.stream(torch_stream), torch.inference_mode():
            args = [self._tensor(by_name[n], stream) for n in self.model_inputs]
            result = self.module(*args)
            results = flatten(result)
            produced = {n: t.contiguous() for n, t in zip(self.model_outputs, results)}
        return [self._value(produced[n], stream) for n in self.output_names]

    def _tensor(self, value: Any, stream: dev.Stream) -> Any:
        view = mem.as_device_array(value)
        if view is not None:
            self.device_inputs += 1
            if view.stream is not None:
                stream.wait_for(view.stream)  # as the TensorRT runner orders after the producer
            return self.torch.as_tensor(view, device=self.device)  # no copy
        self.host_inputs += 1
        return self.torch.from_numpy(np.ascontiguousarray(to_numpy(value))).to(self.device)

    def _value(self, t: Any, stream: dev.Stream) -> Any:
        dtype = np.dtype(str(t.dtype).replace("torch.", ""))
        if self.outputs_on_device:
            return mem.DeviceArray(t.data_ptr(), tuple(t.shape), dtype, owner=t, stream=stream,
                                   device_id=self.device_id)
        stream.synchronize()
        return t.cpu().numpy()

    def close(self) -> None:
        self.module = None

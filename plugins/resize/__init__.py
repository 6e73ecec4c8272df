"""The Resize plugin: all of ONNX Resize (opsets 10 to 19) as one TensorRT plugin.

Loads onnx and numpy only; the host build (g++), NVRTC and TensorRT load on first use."""
from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from ..registry import PluginRecord
from . import node as _node
from .spec import (
    MODES,
    PLUGIN_NAME,
    PLUGIN_NAMESPACE,
    ResizeAttributes,
    ResizeParams,
    SpecError,
    kernel_source,
    make_params,
    read_attributes,
)

RTX_NOTE = ("TensorRT-RTX 1.7 has no Python plugin support (no add_plugin_v3, no tensorrt_rtx.plugin, "
            "and its parser aborts on Python plugins)")

__all__ = ["MODES", "PLUGIN_NAME", "PLUGIN_NAMESPACE", "ResizeAttributes", "ResizeParams", "SpecError",
           "kernel_source", "make_params", "read_attributes", "record"]


def _output_shape(params: ResizeParams, in_shape: Any) -> list[Any]:
    return params.output_shape(in_shape)


def _same_dtype(elem_type: int) -> int:
    return elem_type


def _host_reference(params: ResizeParams, x: np.ndarray) -> np.ndarray:
    from .host import run

    return run(params, x)


def _register(trt: ModuleType) -> None:
    from .tensorrt import register

    register(trt)


def record() -> PluginRecord:
    """The Resize plugin record (ai.onnx Resize, opsets 10 and up)."""
    return PluginRecord(
        name="resize", domain="", op_type="Resize", opsets=(10, 10_000), plugin_op=PLUGIN_NAME,
        plugin_namespace=PLUGIN_NAMESPACE, check=_node.check, params=_node.params, output_shape=_output_shape,
        output_dtype=_same_dtype, kernel_source=kernel_source, host_reference=_host_reference,
        make_stand_in=_node.stand_in, register=_register, targets=("tensorrt",),
        target_notes={"tensorrt_rtx": RTX_NOTE})

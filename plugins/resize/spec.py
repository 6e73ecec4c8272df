"""ONNX Resize, opsets 10 to 19: node attributes, plugin parameters and the output shape rule.

:class:`ResizeParams` is what the plugin carries (the fields of the TensorRT plugin and of the
kernel's parameter block): every ONNX attribute as a number, and roi/scales/sizes expanded to
the full rank. Shapes follow ONNX Runtime's arithmetic (float32 products, truncation), which is
what the emulated path and the reference runtime compute."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np
import onnx

from plugins.errors import SpecError

MODES = {"nearest": 0, "linear": 1, "cubic": 2}
COORDINATE_MODES = {"half_pixel": 0, "asymmetric": 1, "pytorch_half_pixel": 2, "tf_half_pixel_for_nn": 3,
                    "align_corners": 4, "tf_crop_and_resize": 5, "half_pixel_symmetric": 6}
NEAREST_MODES = {"simple": 0, "round_prefer_floor": 1, "round_prefer_ceil": 2, "floor": 3, "ceil": 4}
POLICIES = ("stretch", "not_larger", "not_smaller")
DTYPE_CODES = {"float32": 0, "float16": 1, "bfloat16": 2}
ONNX_DTYPES = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.FLOAT16: "float16",
               onnx.TensorProto.BFLOAT16: "bfloat16"}
MAX_RANK = 8
PLUGIN_NAMESPACE = "trt_backend"
PLUGIN_NAME = "TrtBackendResize"  # op type of rewritten nodes and the TensorRT plugin's name

Dim = int | str | None  # a known size, a symbolic name, or unknown


@dataclass(frozen=True)
class ResizeAttributes:
    """A Resize node's attributes with the defaults of its schema version."""

    version: int
    mode: str = "nearest"
    coordinate_mode: str = "half_pixel"
    nearest_mode: str = "round_prefer_floor"
    cubic_coeff_a: float = -0.75
    exclude_outside: int = 0
    extrapolation_value: float = 0.0
    antialias: int = 0
    axes: tuple[int, ...] | None = None
    keep_aspect_ratio_policy: str = "stretch"


def schema_version(opset: int) -> int:
    """The Resize schema (since-version) in force at ``opset`` of the default domain."""
    if opset < 10:
        raise SpecError(f"opset {opset} has no Resize (it arrived in opset 10)")
    return int(onnx.defs.get_schema("Resize", opset, "").since_version)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_attributes(node: onnx.NodeProto, opset: int) -> ResizeAttributes:
    """Attributes of ``node`` under ``opset``; :class:`SpecError` for values outside the spec."""
    version = schema_version(opset)
    raw = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    mode = _text(raw.get("mode", "nearest"))
    if mode not in MODES:
        raise SpecError(f"mode '{mode}' is not nearest, linear or cubic")
    if version == 10:  # Resize-10: asymmetric coordinates, ONNX Runtime's "simple" nearest rounding
        return ResizeAttributes(version, mode, "asymmetric", "simple")
    ctm = _text(raw.get("coordinate_transformation_mode", "half_pixel"))
    if ctm not in COORDINATE_MODES:
        raise SpecError(f"coordinate_transformation_mode '{ctm}' is not an ONNX mode")
    nearest = _text(raw.get("nearest_mode", "round_prefer_floor"))
    if nearest not in NEAREST_MODES or nearest == "simple":
        raise SpecError(f"nearest_mode '{nearest}' is not an ONNX nearest mode")
    policy = _text(raw.get("keep_aspect_ratio_policy", "stretch")) if version >= 18 else "stretch"
    if policy not in POLICIES:
        raise SpecError(f"keep_aspect_ratio_policy '{policy}' is not stretch, not_larger or not_smaller")
    axes = tuple(int(a) for a in raw["axes"]) if version >= 18 and "axes" in raw else None
    return ResizeAttributes(version, mode, ctm, nearest, float(raw.get("cubic_coeff_a", -0.75)),
                            int(raw.get("exclude_outside", 0)), float(raw.get("extrapolation_value", 0.0)),
                            int(raw.get("antialias", 0)) if version >= 18 else 0, axes, policy)


def f32_scaled(scale: float, size: int) -> int:
    """``(int64)(scale * size)`` in float32, as ONNX Runtime computes an output length."""
    return int(np.float32(scale) * np.float32(size))


@dataclass(frozen=True)
class ResizeParams:
    """Plugin parameters. Per axis: ``scales[d] == 0`` means out/in computed at run time (sizes
    given); ``sizes[d] == -1`` means ``floor(scale * in)`` at run time. ``roi``: starts, then ends."""

    rank: int
    mode: int
    ctm: int
    nearest_mode: int
    cubic_a: float
    exclude_outside: int
    antialias: int
    extrapolation: float
    scales: tuple[float, ...]
    sizes: tuple[int, ...]
    roi: tuple[float, ...]

    def output_dim(self, d: int, size: Dim) -> Dim:
        """Output length of axis ``d`` for an input length ``size`` (None when unknown)."""
        if self.sizes[d] >= 0:
            return self.sizes[d]
        if self.scales[d] == 1.0:
            return size
        return f32_scaled(self.scales[d], size) if isinstance(size, int) else None

    def output_shape(self, in_shape: Sequence[Dim]) -> list[Any]:
        if len(in_shape) != self.rank:
            raise ValueError(f"input rank {len(in_shape)} does not match Resize rank {self.rank}")
        return [self.output_dim(d, s) for d, s in enumerate(in_shape)]

    def to_attributes(self) -> dict[str, Any]:
        """The plugin's fields, as attributes of the rewritten ONNX node (ints and floats only)."""
        return {"mode": self.mode, "coordinate_transformation_mode": self.ctm, "nearest_mode": self.nearest_mode,
                "cubic_coeff_a": self.cubic_a, "exclude_outside": self.exclude_outside, "antialias": self.antialias,
                "extrapolation_value": self.extrapolation, "scales": list(self.scales), "sizes": list(self.sizes),
                "roi": list(self.roi)}

    @classmethod
    def from_attributes(cls, attrs: Mapping[str, Any]) -> ResizeParams:
        scales = tuple(float(s) for s in attrs["scales"])
        return cls(len(scales), int(attrs["mode"]), int(attrs["coordinate_transformation_mode"]),
                   int(attrs["nearest_mode"]), float(attrs["cubic_coeff_a"]), int(attrs["exclude_outside"]),
                   int(attrs["antialias"]), float(attrs["extrapolation_value"]), scales,
                   tuple(int(s) for s in attrs["sizes"]), tuple(float(r) for r in attrs["roi"]))


def _axes(attrs: ResizeAttributes, rank: int) -> tuple[int, ...]:
    if attrs.axes is None:
        return tuple(range(rank))
    axes = tuple(a + rank if a < 0 else a for a in attrs.axes)
    if any(not 0 <= a < rank for a in axes):
        raise SpecError(f"axes {list(attrs.axes)} out of range for a rank-{rank} input")
    if len(set(axes)) != len(axes):
        raise SpecError(f"axes {list(attrs.axes)} repeat an axis")
    return axes


def make_params(attrs: ResizeAttributes, in_shape: Sequence[Dim], roi: np.ndarray | None,
                scales: np.ndarray | None, sizes: np.ndarray | None) -> ResizeParams:
    """Plugin parameters from attributes and the constant inputs (None or empty: not given)."""
    rank = len(in_shape)
    if not 1 <= rank <= MAX_RANK:
        raise SpecError(f"input rank {rank}: the kernel takes ranks 1 to {MAX_RANK}")
    axes = _axes(attrs, rank)
    scales = None if scales is None or scales.size == 0 else scales.astype(np.float32).reshape(-1)
    sizes = None if sizes is None or sizes.size == 0 else sizes.astype(np.int64).reshape(-1)
    if scales is not None and sizes is not None:
        raise SpecError("inconsistent inputs: both scales and sizes are given (exactly one is allowed)")
    if scales is None and sizes is None:
        raise SpecError("neither scales nor sizes is given")
    given = scales if scales is not None else sizes
    assert given is not None
    if given.size != len(axes):
        what = "scales" if scales is not None else "sizes"
        raise SpecError(f"inconsistent inputs: {what} has {given.size} values for {len(axes)} resized axes")
    full_scales, full_sizes = [1.0] * rank, [-1] * rank
    if scales is not None:
        if not np.all(np.isfinite(scales)) or np.any(scales <= 0):
            raise SpecError(f"scales {scales.tolist()} must be finite and > 0")
        for a, s in zip(axes, scales.tolist()):
            full_scales[a] = float(np.float32(s))
    elif sizes is not None:
        if np.any(sizes <= 0):
            raise SpecError(f"sizes {sizes.tolist()} must be > 0")
        for a, s in zip(axes, sizes.tolist()):
            full_scales[a], full_sizes[a] = 0.0, int(s)
        if attrs.keep_aspect_ratio_policy != "stretch":
            _apply_policy(attrs.keep_aspect_ratio_policy, axes, in_shape, full_scales, full_sizes)
    full_roi = [0.0] * rank + [1.0] * rank
    if attrs.coordinate_mode == "tf_crop_and_resize" and roi is not None and roi.size:
        if roi.size != 2 * len(axes):
            raise SpecError(f"roi has {roi.size} values; tf_crop_and_resize needs 2 x {len(axes)} (starts, ends)")
        values = roi.astype(np.float32).reshape(-1).tolist()
        for k, a in enumerate(axes):
            full_roi[a], full_roi[rank + a] = float(values[k]), float(values[len(axes) + k])
    return ResizeParams(rank, MODES[attrs.mode], COORDINATE_MODES[attrs.coordinate_mode],
                        NEAREST_MODES[attrs.nearest_mode], attrs.cubic_coeff_a, attrs.exclude_outside,
                        attrs.antialias, attrs.extrapolation_value, tuple(full_scales), tuple(full_sizes),
                        tuple(full_roi))


def _apply_policy(policy: str, axes: Sequence[int], in_shape: Sequence[Dim], scales: list[float],
                  sizes: list[int]) -> None:
    """keep_aspect_ratio_policy, as ONNX Runtime applies it: one scale (min or max of out/in over
    the axes), output lengths rounded half away from zero. Needs the input lengths."""
    lengths = {a: in_shape[a] for a in axes}
    unknown = [a for a, n in lengths.items() if not isinstance(n, int)]
    if unknown:
        raise SpecError(f"keep_aspect_ratio_policy {policy} needs static input lengths on axes {unknown}")
    ratios = [np.float32(1.0) if lengths[a] == 0 else np.float32(sizes[a]) / np.float32(lengths[a]) for a in axes]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    for a in axes:
        scales[a] = float(scale)
        sizes[a] = int(math.floor(float(np.float32(scale) * np.float32(lengths[a])) + 0.5))


def kernel_source() -> str:
    """The CUDA C source of the Resize kernel (also valid C++ for the host build)."""
    return resources.files(__package__).joinpath("kernel.cu").read_text(encoding="utf-8")

"""What an engine runs on: the compute capabilities a TensorRT-RTX build targets, the target a
build records (cache keys, build folders), whether a GPU is covered by it, and where builds may
run at the same time."""
from __future__ import annotations

from typing import Protocol

from trt_backend.errors import CudaError
from trt_backend.gpu import device as _gpu
from trt_backend.gpu.device import compute_capability, current_device
from trt_backend.tensorrt.flavor import Flavor


class _TargetOptions(Protocol):
    """What of a :class:`~trt_backend.engines.builder.BuildOptions` decides the target."""

    @property
    def compute_capabilities(self) -> tuple[str, ...]: ...

    @property
    def hardware_compatibility(self) -> str: ...

# TensorRT-RTX's default build targets: "compute capability 8.0, 8.6, 8.9, 12.0, and later"; Turing
# (SM 7.5), which it runs on, only when asked for (its "CPU-only AOT" and support-matrix docs).
RTX_DEFAULT_MIN_SM = (8, 0)


def rtx_targets(flavor: Flavor, options: _TargetOptions) -> tuple[str, ...]:
    """The compute capabilities a TensorRT-RTX build is told to target (empty: its defaults): the
    options' own, else SM75 when the GPU the build is for (the current one) is a Turing part,
    which the defaults leave out."""
    if options.compute_capabilities or not flavor.has("IBuilderConfig.set_compute_capability"):
        return options.compute_capabilities
    sm = current_sm()
    if sm is not None and (int(sm[:-1]), int(sm[-1])) < RTX_DEFAULT_MIN_SM and flavor.has("ComputeCapability.SM75"):
        return ("SM75",)
    return ()


def build_target(flavor: Flavor, options: _TargetOptions) -> str:
    """What the engine runs on, for cache keys and manifests: compute capabilities (RTX), a
    hardware compatibility level, or the current GPU's SM (full TensorRT builds for it)."""
    targets = rtx_targets(flavor, options)
    if targets:
        return "cc:" + ",".join(targets)
    if options.hardware_compatibility != "none":
        return "hw:" + options.hardware_compatibility
    if flavor.has("ComputeCapability"):
        return "cc:default"
    return "sm:" + (current_sm() or "unknown")


def target_covers(target: str | None, sm: tuple[int, int], built_on: str | None = None) -> bool:
    """Whether engines built for ``target`` (:func:`build_target`) run on a GPU of compute
    capability ``sm``; ``built_on``: the SM of the GPU they were built on (``"86"``), where known."""
    kind, _, value = (target or "").partition(":")
    here = f"{sm[0]}{sm[1]}"
    if kind == "cc":
        if value == "default":
            return sm >= RTX_DEFAULT_MIN_SM
        names = value.split(",")
        return f"SM{here}" in names or ("CURRENT" in names and built_on == here)
    if kind == "hw":
        if value == "ampere_plus":
            return sm >= (8, 0)
        return built_on == here  # same_compute_capability: the build GPU's
    return kind == "sm" and value == here


def describe_target(target: str | None) -> str:
    kind, _, value = (target or "?").partition(":")
    if kind == "cc":
        return ("TensorRT-RTX's default targets (SM 8.0 and later, not 7.5)" if value == "default"
                else "compute capabilities " + value.replace(",", ", "))
    if kind == "hw":
        return {"ampere_plus": "any GPU from Ampere (SM 8.0) on"}.get(
            value, "GPUs of the build GPU's compute capability")
    return f"SM {value[:-1]}.{value[-1:]}" if kind == "sm" and value.isdigit() else str(target)


def current_sm() -> str | None:
    """The current CUDA device's compute capability as ``"86"``, or None without a usable GPU."""
    if _gpu.driver_absent():  # Looked up on the module: tests put a fake GPU layer in its place.
        return None
    try:
        major, minor = compute_capability(current_device())
    except (CudaError, RuntimeError, OSError):
        return None
    return f"{major}{minor}"

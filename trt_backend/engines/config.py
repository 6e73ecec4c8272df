"""A TensorRT builder configuration from build options and profiles: the settings of an
IBuilderConfig (:func:`configure`) and the optimisation profiles of a network's dynamic inputs
(:func:`add_profiles`), loaded without onnx or numpy (a build's head start configures its engine
with them while those load: :mod:`trt_backend.engines.head_start`)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from partitioner.errors import OptionsError
from trt_backend.engines.options import BuildOptions
from trt_backend.engines.targets import rtx_targets
from trt_backend.tensorrt.flavor import Flavor

if TYPE_CHECKING:
    from trt_backend.profiles import TensorProfile


def check_build_options(options: BuildOptions, flavor: Flavor) -> None:
    """OptionsError, before any build, for a builder setting ``flavor`` does not take (it would
    otherwise fail, or be ignored with a warning, once per segment)."""
    if options.hardware_compatibility != "none" and flavor.is_rtx:
        raise OptionsError(f"hardware compatibility '{options.hardware_compatibility}' is a full TensorRT option; "
                           f"{flavor.target} ignores it (its engines run on the compute capabilities they are built "
                           "for: give those instead)")
    if options.compute_capabilities and not flavor.has("IBuilderConfig.set_compute_capability"):
        raise OptionsError(f"{flavor.target} builds for the GPU it runs on; compute capabilities are a "
                           "TensorRT-RTX option (use hardware compatibility for portable engines)")


def configure(config: Any, options: BuildOptions, flavor: Flavor) -> None:
    """Apply ``options`` to an IBuilderConfig: enum members by name, optional API by hasattr."""
    trt = flavor.module
    if options.workspace_bytes is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, options.workspace_bytes)
    if options.builder_optimization_level is not None:
        _require(flavor, "IBuilderConfig.builder_optimization_level", "builder optimisation level")
        config.builder_optimization_level = options.builder_optimization_level
    if options.precision in ("fp32", "tf32") and flavor.has("BuilderFlag.TF32"):
        (config.set_flag if options.precision == "tf32" else config.clear_flag)(trt.BuilderFlag.TF32)
    if options.hardware_compatibility != "none":
        level = options.hardware_compatibility.upper()
        _require(flavor, f"HardwareCompatibilityLevel.{level}", f"hardware compatibility '{level.lower()}'")
        config.hardware_compatibility_level = getattr(trt.HardwareCompatibilityLevel, level)
    if options.compute_capabilities and not flavor.has("IBuilderConfig.set_compute_capability"):
        raise OptionsError(f"{flavor.target} builds for the GPU it runs on; compute capabilities are a "
                           "TensorRT-RTX option (use hardware compatibility for portable engines)")
    targets = rtx_targets(flavor, options)
    if targets:
        config.num_compute_capabilities = len(targets)
        for i, name in enumerate(targets):
            _require(flavor, f"ComputeCapability.{name}", f"compute capability {name}")
            config.set_compute_capability(getattr(trt.ComputeCapability, name), i)
    if options.max_aux_streams is not None:
        _require(flavor, "IBuilderConfig.max_aux_streams", "max auxiliary streams")
        config.max_aux_streams = options.max_aux_streams
    if options.version_compatible:
        config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE)
        if options.exclude_lean_runtime:
            config.set_flag(trt.BuilderFlag.EXCLUDE_LEAN_RUNTIME)


def _require(flavor: Flavor, dotted: str, what: str) -> None:
    if not flavor.has(dotted):
        raise OptionsError(f"{what} is not available in {flavor.target}")


Dynamic = Sequence[tuple[str, tuple[int, ...], bool]]  # network inputs that need a profile: (name, shape, shape tensor)


def dynamic_inputs(network: Any) -> list[tuple[str, tuple[int, ...], bool]]:
    """The inputs of ``network`` a profile must cover: dynamic dims, or a shape tensor."""
    out = []
    for i in range(network.num_inputs):
        t = network.get_input(i)
        shape = tuple(t.shape)
        if -1 in shape or t.is_shape_tensor:
            out.append((t.name, shape, bool(t.is_shape_tensor)))
    return out


def profile_settings(dynamic: Dynamic,
                     ranges: Sequence[Mapping[str, TensorProfile]]) -> list[dict[str, tuple[Any, ...]]]:
    """What each optimisation profile sets for the ``dynamic`` inputs: name -> (min, opt, max,
    shape-tensor values or None); OptionsError for a dynamic input no profile covers."""
    if not dynamic:
        return []
    if not ranges:
        names = ", ".join(f"'{name}' {shape}" for name, shape, _ in dynamic)
        raise OptionsError(f"segment inputs {names} are dynamic but no optimisation profile covers them")
    settings = []
    for k, profile_ranges in enumerate(ranges):
        entry: dict[str, tuple[Any, ...]] = {}
        for name, shape, is_shape_tensor in dynamic:
            r = profile_ranges.get(name)
            if r is None:
                raise OptionsError(f"profile {k} gives no shape range for dynamic segment input '{name}' {shape}")
            if is_shape_tensor and r.values is None:
                raise OptionsError(f"profile {k}: input '{name}' is a shape tensor to TensorRT (its values "
                                   "are read as a shape), so its profile needs the values it takes: give real "
                                   "inputs (--inputs FILE.npz: the profile made from them spans their values), or "
                                   f"in Python {{'{name}': {{'min': ..., 'opt': ..., 'max': ..., "
                                   "'values': (lowest, typical, highest)}}")
            entry[name] = (r.min, r.opt, r.max, r.values if is_shape_tensor else None)
        settings.append(entry)
    return settings


def add_profiles(builder: Any, config: Any, network: Any,
                 ranges: Sequence[Mapping[str, TensorProfile]]) -> list[dict[str, tuple[Any, ...]]]:
    """Give ``config`` one optimisation profile per entry of ``ranges`` for the network's dynamic
    inputs (:func:`profile_settings`); returns the settings."""
    dynamic = dynamic_inputs(network)
    settings = profile_settings(dynamic, ranges)
    for entry in settings:
        profile = builder.create_optimization_profile()
        for name, shape, _ in dynamic:
            lo, opt, hi, values = entry[name]
            if -1 in shape:
                profile.set_shape(name, lo, opt, hi)
            if values is not None:
                profile.set_shape_input(name, *values)
        config.add_optimization_profile(profile)
    return settings

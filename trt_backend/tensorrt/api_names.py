"""Every TensorRT name trt-backend uses, builder and runtime paths, in one place.

The GPU runtime cannot run on CI machines, so a misspelt method there would only fail on a
user's GPU. ``tests/trt_backend/tensorrt/test_api_names.py`` checks these lists against the installed
``tensorrt_rtx`` module, against the text of ``tensorrt-stubs`` 10.13 (full TensorRT 10) and
against the names in the bindings of full TensorRT 11 (the ``tensorrt-cu13-bindings`` wheel, read
without loading it), and checks that the code's ``trt.X.Y`` chains and ``flavor.has("X.Y")``
strings are listed here.

Keys are class paths (``""`` for the module itself); values are attribute names: methods,
properties and enum members alike. Add a name here in the same change that starts using it."""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

SurfaceMap = Mapping[str, tuple[str, ...]]

# Present in full TensorRT (10.13 stubs, 11.x bindings) and in TensorRT-RTX.
COMMON: SurfaceMap = {
    "": ("Builder", "OnnxParser", "Runtime", "ILogger", "Logger", "BuilderFlag", "MemoryPoolType",
         "HardwareCompatibilityLevel", "NetworkDefinitionCreationFlag", "TensorIOMode", "DataType",
         "IOutputAllocator", "IProgressMonitor", "ICudaEngine", "IExecutionContext", "IBuilderConfig",
         "INetworkDefinition", "ITensor", "IOptimizationProfile", "ITimingCache", "IHostMemory", "ParserError",
         "TensorLocation", "TensorFormat", "IStreamWriter", "get_nv_onnx_parser_version", "nptype", "__version__",
         "ExecutionContextAllocationStrategy", "IRuntimeConfig"),
    # builder path
    "Builder": ("create_network", "create_builder_config", "create_optimization_profile",
                "build_serialized_network", "build_serialized_network_to_stream"),
    "OnnxParser": ("parse", "num_errors", "get_error", "supports_model_v2", "num_subgraphs", "get_subgraph_nodes",
                   "is_subgraph_supported", "load_model_proto", "load_initializer", "parse_model_proto"),
    "ParserError": ("node", "code", "desc", "func"),
    "INetworkDefinition": ("num_inputs", "get_input", "num_layers"),
    "ITensor": ("name", "shape", "is_shape_tensor"),
    "IOptimizationProfile": ("set_shape", "set_shape_input"),
    "IBuilderConfig": ("add_optimization_profile", "set_memory_pool_limit", "builder_optimization_level", "set_flag",
                       "clear_flag", "hardware_compatibility_level", "max_aux_streams", "create_timing_cache",
                       "set_timing_cache"),
    "ITimingCache": ("combine", "serialize"),
    "MemoryPoolType": ("WORKSPACE",),
    "BuilderFlag": ("TF32", "VERSION_COMPATIBLE", "EXCLUDE_LEAN_RUNTIME"),
    "HardwareCompatibilityLevel": ("NONE", "AMPERE_PLUS", "SAME_COMPUTE_CAPABILITY"),
    "NetworkDefinitionCreationFlag": ("STRONGLY_TYPED",),
    "ILogger": ("Severity",),
    "ILogger.Severity": ("INTERNAL_ERROR", "ERROR", "WARNING", "INFO", "VERBOSE"),
    "Logger": ("INTERNAL_ERROR",),
    # runtime path (GPU; cannot execute on CI)
    "Runtime": ("deserialize_cuda_engine", "engine_host_code_allowed", "load_runtime"),
    "ICudaEngine": ("create_execution_context", "num_io_tensors", "get_tensor_name", "get_tensor_mode",
                    "get_tensor_dtype", "get_tensor_shape", "get_tensor_location", "get_tensor_profile_shape",
                    "num_optimization_profiles", "num_layers", "serialize", "create_runtime_config"),
    "ExecutionContextAllocationStrategy": ("STATIC", "ON_PROFILE_CHANGE"),
    "IRuntimeConfig": ("set_execution_context_allocation_strategy",),
    "IExecutionContext": ("set_input_shape", "set_tensor_address", "execute_async_v3", "get_tensor_shape",
                          "set_optimization_profile_async", "set_output_allocator", "get_output_allocator",
                          "infer_shapes", "all_binding_shapes_specified", "set_input_consumed_event"),
    "TensorIOMode": ("INPUT", "OUTPUT", "NONE"),
    "TensorLocation": ("DEVICE", "HOST"),
    "TensorFormat": ("LINEAR",),
    "DataType": ("FLOAT", "HALF", "BF16", "INT8", "INT32", "INT64", "BOOL", "UINT8", "FP8", "INT4", "FP4", "E8M0"),
}

# Only in full TensorRT 10, by design (TensorRT-RTX and TensorRT 11 dropped them): checked against
# the 10.13 stubs, and absent from RTX and the 11.x bindings.
TENSORRT_ONLY: SurfaceMap = {
    "BuilderFlag": ("FP16",),  # feature detection only: its presence means weak typing still exists
}

# Only in TensorRT-RTX: checked against the installed module, and absent from full TensorRT's text.
RTX_ONLY: SurfaceMap = {
    "": ("ComputeCapability", "EngineValidity", "EngineInvalidityDiagnostics", "IRuntimeCache"),
    "IBuilderConfig": ("num_compute_capabilities", "set_compute_capability"),
    "ComputeCapability": ("CURRENT", "SM75", "SM80", "SM86", "SM89", "SM120", "SM121"),
    "Runtime": ("get_engine_validity",),
    "EngineValidity": ("VALID", "INVALID"),
    "IRuntimeConfig": ("create_runtime_cache", "set_runtime_cache"),
    "IRuntimeCache": ("serialize", "deserialize"),
}

# Methods our subclasses implement (TensorRT calls them): they live in docstrings or trampolines,
# so they are checked in the stub text of their class only.
CALLBACKS: SurfaceMap = {
    "ILogger": ("log",),
    "IOutputAllocator": ("reallocate_output", "reallocate_output_async", "notify_shape"),
    "IProgressMonitor": ("phase_start", "step_complete", "phase_finish"),
    "IStreamWriter": ("write",),
}


def dotted(surface: SurfaceMap) -> Iterator[str]:
    """``"Class.member"`` (or ``"name"`` at module level) for every entry of ``surface``."""
    for owner, members in surface.items():
        for m in members:
            yield f"{owner}.{m}" if owner else m


def all_names() -> set[str]:
    """Every listed dotted name, whichever flavor it belongs to, plus the class paths."""
    names: set[str] = set()
    for surface in (COMMON, TENSORRT_ONLY, RTX_ONLY, CALLBACKS):
        names.update(dotted(surface))
        names.update(k for k in surface if k)
    return names


def missing_in_module(module: Any, surface: SurfaceMap) -> list[str]:
    """Dotted names of ``surface`` that ``module`` lacks (attribute lookup, no calls)."""
    missing = []
    for name in dotted(surface):
        obj: Any = module
        for part in name.split("."):
            if not hasattr(obj, part):
                missing.append(name)
                break
            obj = getattr(obj, part)
    return missing

"""The Resize plugin's registration with full TensorRT through ``tensorrt.plugin``.

Thin on purpose: it cannot run without full TensorRT and a GPU. ``register(trt)`` defines the
plugin (``@register``: output shape and dtype), its ahead-of-time implementation (``@aot_impl``,
TensorRT >= 10.9: PTX baked into the engine, no Python when serving) and, for 10.6 to 10.8, a
just-in-time ``@impl`` that launches the same kernel through cuda-python. Every TensorRT name
used is listed in TENSORRT_API / TENSORRT_PLUGIN_API for the API-surface test.

No ``from __future__ import annotations`` here: ``tensorrt.plugin`` reads the annotations of
the decorated functions at definition time to learn the plugin's attribute types."""
# mypy: disable-error-code="name-defined"
# The annotations name classes of the tensorrt.plugin module handed in at run time.
import ctypes
import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from .aot import BLOCK_SIZE, KERNEL_NAME, aot_source
from .node import dyadic_shift
from .spec import PLUGIN_NAME, PLUGIN_NAMESPACE, ResizeParams, f32_scaled

PLUGIN_ID = f"{PLUGIN_NAMESPACE}::{PLUGIN_NAME}"

# Names on the TensorRT module (checked against tensorrt_rtx and the tensorrt-stubs text).
TENSORRT_API = ("__version__", "DataType.FLOAT", "DataType.HALF", "DataType.BF16", "TensorFormat.LINEAR")
# Names in ``tensorrt.plugin`` (full TensorRT only; checked against its public API list).
TENSORRT_PLUGIN_API = ("register", "impl", "aot_impl", "autotune", "AutoTuneCombination", "TensorDesc", "Tensor",
                       "ShapeExpr", "ShapeExprs", "KernelLaunchParams", "SymInt32", "SymIntExprs", "cdiv",
                       "TensorDesc.like", "TensorDesc.shape_expr", "TensorDesc.dtype", "ShapeExpr.is_fake",
                       "ShapeExpr.is_constant", "ShapeExpr.constant_value", "ShapeExprs.numel",
                       "KernelLaunchParams.grid_x", "KernelLaunchParams.block_x", "KernelLaunchParams.shared_mem",
                       "Tensor.data_ptr", "Tensor.shape", "Tensor.dtype")
DTYPES = {"FLOAT": "float32", "HALF": "float16", "BF16": "bfloat16"}


def _scalar(value: Any) -> Any:
    """A plugin attribute's one value (attributes are declared as 1-element arrays, see :func:`register`)."""
    return np.asarray(value).reshape(-1)[0].item()


def plugin_params(attrs: Mapping[str, Any]) -> ResizeParams:
    """The node's parameters from the plugin's attributes, as ``tensorrt.plugin`` hands them over."""
    return ResizeParams.from_attributes({
        "mode": _scalar(attrs["mode"]),
        "coordinate_transformation_mode": _scalar(attrs["coordinate_transformation_mode"]),
        "nearest_mode": _scalar(attrs["nearest_mode"]), "cubic_coeff_a": _scalar(attrs["cubic_coeff_a"]),
        "exclude_outside": _scalar(attrs["exclude_outside"]), "antialias": _scalar(attrs["antialias"]),
        "extrapolation_value": _scalar(attrs["extrapolation_value"]), "scales": np.asarray(attrs["scales"]).tolist(),
        "sizes": np.asarray(attrs["sizes"]).tolist(), "roi": np.asarray(attrs["roi"]).tolist()})


def _params(mode: Any, ctm: Any, nearest: Any, cubic_a: Any, exclude: Any, antialias: Any, extrapolation: Any,
            scales: Any, sizes: Any, roi: Any) -> ResizeParams:
    return plugin_params({"mode": mode, "coordinate_transformation_mode": ctm, "nearest_mode": nearest,
                          "cubic_coeff_a": cubic_a, "exclude_outside": exclude, "antialias": antialias,
                          "extrapolation_value": extrapolation, "scales": scales, "sizes": sizes, "roi": roi})


def output_dim(params: ResizeParams, d: int, size: Any) -> Any:
    """The output length of axis ``d`` as an int or a TensorRT shape expression of ``size``."""
    if params.sizes[d] >= 0:
        return params.sizes[d]
    scale = params.scales[d]
    if scale == 1.0:
        return size
    if not size.is_fake and size.is_constant:
        return f32_scaled(scale, size.constant_value())
    if scale == int(scale):
        return size * int(scale)
    shift = dyadic_shift(scale)
    if shift is None:  # the predicate refuses such nodes; reaching here is a bug
        raise ValueError(f"axis {d}: scale {scale} on a dynamic length has no exact shape expression")
    return size // (1 << shift)


def _dtype_name(trt: ModuleType, dtype: Any) -> str:
    for member, name in DTYPES.items():
        if dtype == getattr(trt.DataType, member):
            return name
    raise ValueError(f"Resize plugin: unsupported dtype {dtype}")


I32 = npt.NDArray[np.int32]
F32 = npt.NDArray[np.float32]


def register(trt: ModuleType) -> None:
    """Define the plugin in ``trt.plugin`` (full TensorRT >= 10.6). Never call with TensorRT-RTX:
    it has no ``tensorrt_rtx.plugin``, and its parser aborts on Python plugins.

    Every attribute is declared as a numpy array, the scalars as 1-element ones: the creator of
    TensorRT 10.x to 11.1 turns a field declared ``int``/``float`` into a value with
    ``int(field.data)``, which NumPy 2.4 refuses for the 1-element array the ONNX parser hands it,
    while arrays go through ``field.data.astype(...)`` in every version. The ahead-of-time
    implementation takes the ``tactic`` argument its validator requires (TensorRT 10.9+)."""
    trtp = importlib.import_module(f"{trt.__name__}.plugin")

    @trtp.register(PLUGIN_ID)
    def resize_desc(inp0: trtp.TensorDesc, mode: I32, coordinate_transformation_mode: I32, nearest_mode: I32,
                    cubic_coeff_a: F32, exclude_outside: I32, antialias: I32, extrapolation_value: F32,
                    scales: F32, sizes: I32, roi: F32) -> trtp.TensorDesc:
        p = _params(mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a, exclude_outside, antialias,
                    extrapolation_value, scales, sizes, roi)
        out = inp0.like()
        for d in range(p.rank):
            out.shape_expr[d] = output_dim(p, d, inp0.shape_expr[d])
        return out

    @trtp.autotune(PLUGIN_ID)
    def resize_autotune(inp0: trtp.TensorDesc, outputs: tuple[trtp.TensorDesc]) -> list[trtp.AutoTuneCombination]:
        return [trtp.AutoTuneCombination("FP32|FP16|BF16, FP32|FP16|BF16", "LINEAR")]

    if hasattr(trtp, "aot_impl"):  # TensorRT >= 10.9
        @trtp.aot_impl(PLUGIN_ID)
        def resize_aot(inp0: trtp.TensorDesc, mode: I32, coordinate_transformation_mode: I32, nearest_mode: I32,
                       cubic_coeff_a: F32, exclude_outside: I32, antialias: I32, extrapolation_value: F32,
                       scales: F32, sizes: I32, roi: F32, outputs: tuple[trtp.TensorDesc], tactic: int
                       ) -> tuple[str | bytes, str | bytes, trtp.KernelLaunchParams, trtp.SymIntExprs]:
            from ..nvrtc import check_ptx_for_driver, compile_ptx

            p = _params(mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a, exclude_outside,
                        antialias, extrapolation_value, scales, sizes, roi)
            ptx = compile_ptx(aot_source(p, _dtype_name(trt, inp0.dtype)), "sm_75", name="resize_aot.cu")
            check_ptx_for_driver(ptx)  # The engine carries this PTX; this machine's driver JIT-compiles it.
            out = outputs[0].shape_expr
            launch = trtp.KernelLaunchParams()
            launch.grid_x = trtp.cdiv(out.numel(), BLOCK_SIZE)
            launch.block_x = BLOCK_SIZE
            launch.shared_mem = 0
            lengths = [inp0.shape_expr[d] for d in range(p.rank)] + [out[d] for d in range(p.rank)] + [out.numel()]
            extra = trtp.SymIntExprs.from_tuple([trtp.SymInt32(e) for e in lengths])
            return KERNEL_NAME.encode(), ptx, launch, extra

    @trtp.impl(PLUGIN_ID)
    def resize_impl(inp0: trtp.Tensor, mode: I32, coordinate_transformation_mode: I32, nearest_mode: I32,
                    cubic_coeff_a: F32, exclude_outside: I32, antialias: I32, extrapolation_value: F32,
                    scales: F32, sizes: I32, roi: F32, outputs: tuple[trtp.Tensor], stream: int) -> None:
        p = _params(mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a, exclude_outside, antialias,
                    extrapolation_value, scales, sizes, roi)
        _launch_generic(p, _dtype_name(trt, inp0.dtype), tuple(inp0.shape), inp0.data_ptr, outputs[0].data_ptr,
                        stream)


# The loaded CUDA module and its kernel, per CUDA context (a cache, not a registry): a module
# belongs to the context it was loaded in, and a process may run engines on several GPUs.
_modules: dict[int, Any] = {}


def _launch_generic(p: ResizeParams, dtype: str, in_shape: tuple, x_ptr: int, y_ptr: int, stream: int) -> None:
    """Just-in-time path: the generic kernel (parameters by value) through the CUDA driver API."""
    from cuda.bindings import driver

    from ..nvrtc import check_ptx_for_driver, compile_ptx
    from .host import make_struct
    from .spec import kernel_source

    err, context = driver.cuCtxGetCurrent()  # (TensorRT runs the plugin in the engine's context)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"Resize plugin: no current CUDA context ({err})")
    key = int(context)
    if key not in _modules:
        ptx = compile_ptx(kernel_source(), "sm_75")
        check_ptx_for_driver(ptx)
        err, module = driver.cuModuleLoadData(ptx + b"\0")
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"Resize plugin: loading the kernel failed ({err})")
        err, function = driver.cuModuleGetFunction(module, b"trt_backend_resize")
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"Resize plugin: finding the kernel failed ({err})")
        _modules[key] = (module, function)
    function = _modules[key][1]
    struct = make_struct(p, in_shape, np.dtype(np.float32))
    struct.dtype = {"float32": 0, "float16": 1, "bfloat16": 2}[dtype]
    n = int(np.prod(p.output_shape(in_shape)))
    args = [struct, ctypes.c_void_p(x_ptr), ctypes.c_void_p(y_ptr), ctypes.c_longlong(n)]
    pointers = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
    grid = max(1, min((n + BLOCK_SIZE - 1) // BLOCK_SIZE, 65535))
    (err,) = driver.cuLaunchKernel(function, grid, 1, 1, BLOCK_SIZE, 1, 1, 0, driver.CUstream(stream),
                                   ctypes.addressof(pointers), 0)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"Resize plugin: kernel launch failed ({err})")

"""The Resize plugin's registration with full TensorRT through ``tensorrt.plugin``.

Thin on purpose: it cannot run without full TensorRT and a GPU. ``register(trt)`` defines the
plugin (``@register``: output shape and dtype), its ahead-of-time implementation (``@aot_impl``,
TensorRT >= 10.9: PTX baked into the engine, no Python when serving) and, for 10.6 to 10.8, a
just-in-time ``@impl`` that launches the same kernel through cuda-python. Every TensorRT name
used is listed in TENSORRT_API / TENSORRT_PLUGIN_API for the API-surface test.

No ``from __future__ import annotations`` here: ``tensorrt.plugin`` reads the annotations of
the decorated functions at definition time to learn the plugin's attribute types."""
# mypy: disable-error-code="name-defined"
# (the annotations name classes of the tensorrt.plugin module handed in at run time)
import ctypes
import importlib
from types import ModuleType
from typing import Any, List, Tuple, Union

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


def _params(mode: int, ctm: int, nearest: int, cubic_a: float, exclude: int, antialias: int, extrapolation: float,
            scales: Any, sizes: Any, roi: Any) -> ResizeParams:
    return ResizeParams.from_attributes({
        "mode": mode, "coordinate_transformation_mode": ctm, "nearest_mode": nearest, "cubic_coeff_a": cubic_a,
        "exclude_outside": exclude, "antialias": antialias, "extrapolation_value": extrapolation,
        "scales": np.asarray(scales).tolist(), "sizes": np.asarray(sizes).tolist(), "roi": np.asarray(roi).tolist()})


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


def register(trt: ModuleType) -> None:
    """Define the plugin in ``trt.plugin`` (full TensorRT >= 10.6). Never call with TensorRT-RTX:
    it has no ``tensorrt_rtx.plugin``, and its parser aborts on Python plugins."""
    trtp = importlib.import_module(f"{trt.__name__}.plugin")

    @trtp.register(PLUGIN_ID)
    def resize_desc(inp0: trtp.TensorDesc, mode: int, coordinate_transformation_mode: int, nearest_mode: int,
                    cubic_coeff_a: float, exclude_outside: int, antialias: int, extrapolation_value: float,
                    scales: npt.NDArray[np.float32], sizes: npt.NDArray[np.int32],
                    roi: npt.NDArray[np.float32]) -> trtp.TensorDesc:
        p = _params(mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a, exclude_outside, antialias,
                    extrapolation_value, scales, sizes, roi)
        out = inp0.like()
        for d in range(p.rank):
            out.shape_expr[d] = output_dim(p, d, inp0.shape_expr[d])
        return out

    @trtp.autotune(PLUGIN_ID)
    def resize_autotune(inp0: trtp.TensorDesc, outputs: Tuple[trtp.TensorDesc]) -> List[trtp.AutoTuneCombination]:
        return [trtp.AutoTuneCombination("FP32|FP16|BF16, FP32|FP16|BF16", "LINEAR")]

    if hasattr(trtp, "aot_impl"):  # TensorRT >= 10.9
        @trtp.aot_impl(PLUGIN_ID)
        def resize_aot(inp0: trtp.TensorDesc, mode: int, coordinate_transformation_mode: int, nearest_mode: int,
                       cubic_coeff_a: float, exclude_outside: int, antialias: int, extrapolation_value: float,
                       scales: npt.NDArray[np.float32], sizes: npt.NDArray[np.int32], roi: npt.NDArray[np.float32],
                       outputs: Tuple[trtp.TensorDesc]
                       ) -> Tuple[Union[str, bytes], Union[str, bytes], trtp.KernelLaunchParams, trtp.SymIntExprs]:
            from ..nvrtc import compile_ptx

            p = _params(mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a, exclude_outside,
                        antialias, extrapolation_value, scales, sizes, roi)
            ptx = compile_ptx(aot_source(p, _dtype_name(trt, inp0.dtype)), "sm_75", name="resize_aot.cu")
            out = outputs[0].shape_expr
            launch = trtp.KernelLaunchParams()
            launch.grid_x = trtp.cdiv(out.numel(), BLOCK_SIZE)
            launch.block_x = BLOCK_SIZE
            launch.shared_mem = 0
            lengths = [inp0.shape_expr[d] for d in range(p.rank)] + [out[d] for d in range(p.rank)] + [out.numel()]
            extra = trtp.SymIntExprs.from_tuple([trtp.SymInt32(e) for e in lengths])
            return KERNEL_NAME.encode(), ptx, launch, extra

    @trtp.impl(PLUGIN_ID)
    def resize_impl(inp0: trtp.Tensor, mode: int, coordinate_transformation_mode: int, nearest_mode: int,
                    cubic_coeff_a: float, exclude_outside: int, antialias: int, extrapolation_value: float,
                    scales: npt.NDArray[np.float32], sizes: npt.NDArray[np.int32], roi: npt.NDArray[np.float32],
                    outputs: Tuple[trtp.Tensor], stream: int) -> None:
        p = _params(mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a, exclude_outside, antialias,
                    extrapolation_value, scales, sizes, roi)
        _launch_generic(p, _dtype_name(trt, inp0.dtype), tuple(inp0.shape), inp0.data_ptr, outputs[0].data_ptr,
                        stream)


_modules: dict[str, Any] = {}  # the loaded CUDA module, per process (a cache, not a registry)


def _launch_generic(p: ResizeParams, dtype: str, in_shape: tuple, x_ptr: int, y_ptr: int, stream: int) -> None:
    """Just-in-time path: the generic kernel (parameters by value) through the CUDA driver API."""
    from cuda.bindings import driver

    from ..nvrtc import compile_ptx
    from .host import make_struct
    from .spec import kernel_source

    if "generic" not in _modules:
        ptx = compile_ptx(kernel_source(), "sm_75")
        err, module = driver.cuModuleLoadData(ptx + b"\0")
        err2, function = driver.cuModuleGetFunction(module, b"trt_backend_resize")
        if err != driver.CUresult.CUDA_SUCCESS or err2 != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"Resize plugin: loading the kernel failed ({err}, {err2})")
        _modules["generic"] = (module, function)
    function = _modules["generic"][1]
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

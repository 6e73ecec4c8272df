"""Kernel source specialised for one Resize node, for TensorRT's ahead-of-time plugin path.

An AOT plugin's attributes are not serialized into the engine, and its kernel receives only
tensors and int32 scalars (input and output lengths). So the node's parameters are baked into
the source as constants (exact float bit patterns), and the entry point takes the lengths."""
from __future__ import annotations

import struct

from .spec import DTYPE_CODES, ResizeParams, kernel_source

KERNEL_NAME = "trt_backend_resize_aot"
BLOCK_SIZE = 256


def _bits(value: float) -> str:
    return f"rz_from_bits(0x{struct.unpack('<I', struct.pack('<f', value))[0]:08x}u)"


def aot_source(params: ResizeParams, dtype: str) -> str:
    """kernel.cu plus ``rz_aot_params`` (the baked parameters) and the AOT entry point
    ``trt_backend_resize_aot(x, in_0.., out_0.., n, y)``; on the host, ``rz_host_aot``."""
    r = params.rank
    body = [f"  p->rank = {r}; p->mode = {params.mode}; p->ctm = {params.ctm};",
            f"  p->nearest_mode = {params.nearest_mode};",
            f"  p->exclude_outside = {params.exclude_outside}; p->antialias = {params.antialias};",
            f"  p->dtype = {DTYPE_CODES[dtype]}; p->reserved = 0;",
            f"  p->cubic_a = {_bits(params.cubic_a)}; p->extrapolation = {_bits(params.extrapolation)};"]
    for d in range(r):
        body.append(f"  p->in_dims[{d}] = in_dims[{d}]; p->out_dims[{d}] = out_dims[{d}]; "
                    f"p->scales[{d}] = {_bits(params.scales[d])};")
        body.append(f"  p->roi_start[{d}] = {_bits(params.roi[d])}; p->roi_end[{d}] = {_bits(params.roi[r + d])};")
    ins = ", ".join(f"int in_{d}" for d in range(r))
    outs = ", ".join(f"int out_{d}" for d in range(r))
    in_list = ", ".join(f"in_{d}" for d in range(r))
    out_list = ", ".join(f"out_{d}" for d in range(r))
    return "\n".join([
        kernel_source(),
        "// ---- generated: parameters of one node, baked in -------------------------------------",
        "RZ_HD void rz_aot_params(RzParams* p, const int* in_dims, const int* out_dims) {",
        *body,
        "}",
        "#if defined(__CUDACC__)",
        f'extern "C" __global__ void {KERNEL_NAME}(const void* x, {ins}, {outs}, int n, void* y) {{',
        f"  const int in_dims[{r}] = {{{in_list}}};",
        f"  const int out_dims[{r}] = {{{out_list}}};",
        "  RzParams p;",
        "  rz_aot_params(&p, in_dims, out_dims);",
        "  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;",
        "  if (i < n) rz_store(y, p.dtype, i, rz_output_element(&p, x, i));",
        "}",
        "#else",
        'extern "C" long long rz_host_aot(const void* x, const int* in_dims, const int* out_dims, void* y) {',
        "  RzParams p;",
        "  rz_aot_params(&p, in_dims, out_dims);",
        "  long long n = 1;",
        "  for (int d = 0; d < p.rank; d++) n *= p.out_dims[d];",
        "  for (long long i = 0; i < n; i++) rz_store(y, p.dtype, i, rz_output_element(&p, x, i));",
        "  return n;",
        "}",
        "#endif",
        "",
    ])

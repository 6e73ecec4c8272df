// ONNX Resize (opsets 10, 11, 13, 18, 19) for the trt-backend TensorRT plugin.
//
// One source, two compilers: NVRTC builds it for the GPU (the __global__ entries at the end),
// g++ builds it for the host with __host__/__device__ defined away (the C ABI at the end), so
// the per-output-element math below is checked numerically against ONNX Runtime on a CPU.
//
// The numbers follow ONNX Runtime's CPU Resize, including its float/double mix in coordinate
// transforms: the emulated path and the reference runtime are ONNX Runtime, and a nearest-mode
// index decided one ulp differently is a whole pixel off. Where ONNX Runtime differs from the
// ONNX reference (an axis whose scale is exactly 1 is copied, roi ignored; align_corners uses the
// integer output length) we do what ONNX Runtime does.
#if !defined(__CUDACC__)
#include <math.h>
#define __host__
#define __device__
#endif

#define RZ_MAX_RANK 8
#define RZ_HD __host__ __device__ static inline

enum { RZ_NEAREST = 0, RZ_LINEAR = 1, RZ_CUBIC = 2 };
enum {
  RZ_HALF_PIXEL = 0, RZ_ASYMMETRIC = 1, RZ_PYTORCH_HALF_PIXEL = 2, RZ_TF_HALF_PIXEL_FOR_NN = 3,
  RZ_ALIGN_CORNERS = 4, RZ_TF_CROP_AND_RESIZE = 5, RZ_HALF_PIXEL_SYMMETRIC = 6
};
enum { RZ_SIMPLE = 0, RZ_ROUND_PREFER_FLOOR = 1, RZ_ROUND_PREFER_CEIL = 2, RZ_FLOOR = 3, RZ_CEIL = 4 };
enum { RZ_FLOAT32 = 0, RZ_FLOAT16 = 1, RZ_BFLOAT16 = 2 };
enum { RZ_AX_IDENT = 0, RZ_AX_NEAREST = 1, RZ_AX_LINEAR = 2, RZ_AX_CUBIC = 3, RZ_AX_AA = 4 };

// Everything one Resize call needs. scales[d] == 0 means "out_dims[d] / in_dims[d]" (sizes given).
typedef struct RzParams {
  int rank, mode, ctm, nearest_mode, exclude_outside, antialias, dtype, reserved;
  float cubic_a, extrapolation;
  long long in_dims[RZ_MAX_RANK], out_dims[RZ_MAX_RANK];
  float scales[RZ_MAX_RANK], roi_start[RZ_MAX_RANK], roi_end[RZ_MAX_RANK];
} RzParams;

// The taps of one output coordinate along one axis, computed once per element and axis.
typedef struct RzAxis {
  int kind, count, cubic_filter;
  long long first, second, length;
  float w[4];
  float center, support, inv_scale, total, left_extra, right_extra, a;
} RzAxis;

// ---- element types: bit-exact conversions, no cuda_fp16.h needed ------------------------------
typedef union { float f; unsigned int u; } RzBits;

RZ_HD float rz_from_bits(unsigned int u) { RzBits b; b.u = u; return b.f; }
RZ_HD unsigned int rz_to_bits(float f) { RzBits b; b.f = f; return b.u; }

RZ_HD float rz_half_to_float(unsigned short h) {
  unsigned int sign = (unsigned int)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    float v = (float)m * 5.9604644775390625e-08f;  // m * 2^-24, exact
    return sign ? -v : v;
  }
  if (e == 31) return rz_from_bits(sign | 0x7f800000u | (m << 13));
  return rz_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

RZ_HD unsigned short rz_float_to_half(float f) {  // round to nearest even
  unsigned int x = rz_to_bits(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (unsigned short)(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {  // below 2^-14: a half subnormal or zero
    int shift = 126 - (int)(ax >> 23);
    if (shift > 24) return (unsigned short)sign;
    unsigned int full = (ax & 0x7fffffu) | 0x800000u, h = full >> shift;
    unsigned int rem = full & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) h++;
    return (unsigned short)(sign | h);
  }
  unsigned int h = (ax >> 13) - (112u << 10), rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
  return (unsigned short)(sign | h);
}

RZ_HD float rz_bf16_to_float(unsigned short b) { return rz_from_bits((unsigned int)b << 16); }

RZ_HD unsigned short rz_float_to_bf16(float f) {
  unsigned int u = rz_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}

RZ_HD float rz_load(const void* x, int dtype, long long i) {
  if (dtype == RZ_FLOAT16) return rz_half_to_float(((const unsigned short*)x)[i]);
  if (dtype == RZ_BFLOAT16) return rz_bf16_to_float(((const unsigned short*)x)[i]);
  return ((const float*)x)[i];
}

RZ_HD void rz_store(void* y, int dtype, long long i, float v) {
  if (dtype == RZ_FLOAT16) ((unsigned short*)y)[i] = rz_float_to_half(v);
  else if (dtype == RZ_BFLOAT16) ((unsigned short*)y)[i] = rz_float_to_bf16(v);
  else ((float*)y)[i] = v;
}

// ---- coordinates (ONNX Runtime's GetOriginalCoordinateFromResizedCoordinate) ------------------
RZ_HD float rz_coordinate(int ctm, float x, float scale, float len_resized, float len_original,
                          float roi_start, float roi_end) {
  switch (ctm) {
    case RZ_ASYMMETRIC: return x / scale;
    case RZ_PYTORCH_HALF_PIXEL: return len_resized > 1 ? (x + 0.5f) / scale - 0.5f : 0.0f;
    case RZ_TF_HALF_PIXEL_FOR_NN: return (x + 0.5f) / scale;
    case RZ_ALIGN_CORNERS: return len_resized == 1 ? 0.0f : x * (len_original - 1) / (len_resized - 1);
    case RZ_TF_CROP_AND_RESIZE: {
      if (len_resized > 1)
        return roi_start * (len_original - 1) + (x * (roi_end - roi_start) * (len_original - 1)) / (len_resized - 1);
      return (float)(0.5 * (double)(roi_start + roi_end) * (double)(len_original - 1));
    }
    case RZ_HALF_PIXEL_SYMMETRIC: {
      float output_width = scale * len_original;
      float adjustment = len_resized / output_width;
      float center = len_original / 2;
      float offset = center * (1 - adjustment);
      return (float)((double)offset + ((double)x + 0.5) / (double)scale - 0.5);
    }
    default: return ((x + 0.5f) / scale) - 0.5f;  // half_pixel
  }
}

RZ_HD long long rz_nearest(int nearest_mode, float x, int downsample) {
  switch (nearest_mode) {
    case RZ_SIMPLE: return downsample ? (long long)ceilf(x) : (long long)x;
    case RZ_ROUND_PREFER_CEIL: return (long long)roundf(x);
    case RZ_FLOOR: return (long long)floorf(x);
    case RZ_CEIL: return (long long)ceilf(x);
    default:  // round_prefer_floor
      if (x == (float)(long long)x + 0.5f) return (long long)floorf(x);
      return (long long)roundf(x);
  }
}

RZ_HD void rz_cubic_coeffs(float s, float a, float* c) {  // Keys' kernel at distances 1+s, s, 1-s, 2-s
  float t = fabsf(s);
  c[0] = ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a;
  c[1] = ((a + 2) * t - (a + 3)) * t * t + 1;
  c[2] = ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1;
  c[3] = ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a;
}

RZ_HD float rz_filter(const RzAxis* ax, float x) {  // antialias filters (triangle or Keys)
  if (x < 0.0f) x = -x;
  if (!ax->cubic_filter) return x < 1.0f ? 1.0f - x : 0.0f;
  if (x < 1.0f) return ((ax->a + 2.0f) * x - (ax->a + 3.0f)) * x * x + 1;
  if (x < 2.0f) return (((x - 5.0f) * x + 8.f) * x - 4.f) * ax->a;
  return 0.0f;
}

RZ_HD float rz_aa_weight(const RzAxis* ax, long long i) {
  return rz_filter(ax, ((float)i - ax->center + 0.5f) * ax->inv_scale);
}

// ---- one axis: which input positions an output coordinate reads, with which weights ----------
// Returns 0 when the element takes the extrapolation value (tf_crop_and_resize outside the roi).
RZ_HD int rz_axis_setup(const RzParams* p, int d, long long o, RzAxis* ax) {
  long long in_len = p->in_dims[d], out_len = p->out_dims[d];
  float scale = p->scales[d] != 0.0f ? p->scales[d] : (in_len == 0 ? 1.0f : (float)out_len / (float)in_len);
  int extrapolate = p->ctm == RZ_TF_CROP_AND_RESIZE;
  ax->length = in_len;
  ax->count = 1;
  ax->first = o;
  if (scale == 1.0f) { ax->kind = RZ_AX_IDENT; return 1; }  // ONNX Runtime copies such an axis
  float x = rz_coordinate(p->ctm, (float)o, scale, (float)out_len, (float)in_len, p->roi_start[d], p->roi_end[d]);
  int outside = x < 0 || x > (float)(in_len - 1);
  if (p->antialias && p->mode != RZ_NEAREST) {
    if (extrapolate && outside) return 0;
    if (out_len == in_len) { ax->kind = RZ_AX_IDENT; return 1; }  // ONNX Runtime copies this axis
    float sc = 1.0f / scale;
    ax->kind = RZ_AX_AA;
    ax->cubic_filter = p->mode == RZ_CUBIC;
    ax->a = p->cubic_a;
    float half_support = ax->cubic_filter ? 2.0f : 1.0f;
    ax->support = sc >= 1.0f ? half_support * sc : half_support;
    ax->inv_scale = sc >= 1.0f ? 1.0f / sc : 1.0f;
    ax->center = 0.5f + x;
    long long window = (long long)ceilf(ax->support) * 2 + 1;
    long long real_min = (long long)floorf(ax->center - ax->support + 0.5f);
    long long span = (long long)floorf(ax->center + ax->support + 0.5f) - real_min;
    long long real_max = real_min + (span < 0 ? 0 : (span > window ? window : span));
    long long lo = real_min < 0 ? 0 : (real_min > in_len ? in_len : real_min);
    long long hi = real_max < 0 ? 0 : (real_max > in_len ? in_len : real_max);
    ax->first = lo;
    ax->count = (int)(hi - lo);
    float total = 0.0f, left = 0.0f, right = 0.0f;
    long long from = p->exclude_outside ? lo : real_min, to = p->exclude_outside ? hi : real_max;
    for (long long i = from; i < to; i++) {
      float w = rz_aa_weight(ax, i);
      total += w;
      if (i < 0) left += w;
      if (i >= in_len) right += w;
    }
    ax->total = total;
    ax->left_extra = left;  // weights that fall outside the input go to the edge pixels
    ax->right_extra = right;
    return 1;
  }
  if (p->mode == RZ_NEAREST) {
    ax->kind = RZ_AX_NEAREST;
    if (extrapolate && outside) return 0;
    long long i = rz_nearest(p->nearest_mode, x, scale < 1);
    ax->first = i > in_len - 1 ? in_len - 1 : (i < 0 ? 0 : i);
    return 1;
  }
  if (extrapolate && outside) return 0;
  if (p->mode == RZ_LINEAR) {
    float v = x < 0.0f ? 0.0f : (x > (float)(in_len - 1) ? (float)(in_len - 1) : x);
    long long i1 = (long long)v < in_len - 1 ? (long long)v : in_len - 1;
    long long i2 = i1 + 1 < in_len - 1 ? i1 + 1 : in_len - 1;
    ax->kind = RZ_AX_LINEAR;
    ax->count = 2;
    ax->first = i1;
    ax->second = i2;
    if (i1 == i2) { ax->w[0] = 0.5f; ax->w[1] = 0.5f; }
    else { ax->w[0] = fabsf(v - (float)i2); ax->w[1] = fabsf(v - (float)i1); }
    return 1;
  }
  long long base = (long long)floorf(x);  // cubic
  float c[4];
  rz_cubic_coeffs(x - (float)base, p->cubic_a, c);
  float sum = 1.0f;
  if (p->exclude_outside) {
    sum = 0.0f;
    for (int k = 0; k < 4; k++) {
      long long i = base - 1 + k;
      if (i < 0 || i >= in_len) c[k] = 0.0f;
      sum += c[k];
    }
  }
  ax->kind = RZ_AX_CUBIC;
  ax->count = 4;
  ax->first = base - 1;
  for (int k = 0; k < 4; k++) ax->w[k] = c[k] / sum;
  return 1;
}

RZ_HD float rz_axis_tap(const RzAxis* ax, int k, long long* index) {
  switch (ax->kind) {
    case RZ_AX_LINEAR:
      *index = k == 0 ? ax->first : ax->second;
      return ax->w[k];
    case RZ_AX_CUBIC: {
      long long i = ax->first + k;
      *index = i < 0 ? 0 : (i > ax->length - 1 ? ax->length - 1 : i);
      return ax->w[k];
    }
    case RZ_AX_AA: {
      long long i = ax->first + k;
      float w = rz_aa_weight(ax, i);
      if (i == 0) w += ax->left_extra;
      if (i == ax->length - 1) w += ax->right_extra;
      *index = i;
      return w * (ax->total == 0.0f ? 1.0f : 1.0f / ax->total);
    }
    default:
      *index = ax->first;
      return 1.0f;
  }
}

// ---- one output element ----------------------------------------------------------------------
RZ_HD float rz_output_element(const RzParams* p, const void* x, long long out_index) {
  long long coord[RZ_MAX_RANK], stride[RZ_MAX_RANK];
  int same = 1;
  long long rest = out_index, s = 1;
  for (int d = p->rank - 1; d >= 0; d--) {
    coord[d] = rest % p->out_dims[d];
    rest /= p->out_dims[d];
    stride[d] = s;
    s *= p->in_dims[d];
    same = same && p->in_dims[d] == p->out_dims[d];
  }
  if (same) return rz_load(x, p->dtype, out_index);  // ONNX Runtime copies when no dim changes
  RzAxis ax[RZ_MAX_RANK];
  for (int d = 0; d < p->rank; d++) {
    if (!rz_axis_setup(p, d, coord[d], &ax[d])) return p->extrapolation;
    if (ax[d].count == 0) return 0.0f;
  }
  int k[RZ_MAX_RANK];
  for (int d = 0; d < p->rank; d++) k[d] = 0;
  float acc = 0.0f;
  for (;;) {
    float w = 1.0f;
    long long offset = 0, index;
    for (int d = 0; d < p->rank; d++) {
      w *= rz_axis_tap(&ax[d], k[d], &index);
      offset += index * stride[d];
    }
    if (w != 0.0f) acc += w * rz_load(x, p->dtype, offset);
    int d = p->rank - 1;
    while (d >= 0 && ++k[d] == ax[d].count) k[d--] = 0;
    if (d < 0) break;
  }
  return acc;
}

#if defined(__CUDACC__)
// Generic entry: parameters by value, one thread per output element (grid-stride).
extern "C" __global__ void trt_backend_resize(RzParams p, const void* x, void* y, long long n) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x)
    rz_store(y, p.dtype, i, rz_output_element(&p, x, i));
}
#else
// Host entry (C ABI for ctypes): the same per-element math over every output element.
extern "C" long long rz_host_resize(const RzParams* p, const void* x, void* y) {
  long long n = 1;
  for (int d = 0; d < p->rank; d++) n *= p->out_dims[d];
  for (long long i = 0; i < n; i++) rz_store(y, p->dtype, i, rz_output_element(p, x, i));
  return n;
}
extern "C" unsigned short rz_host_float_to_half(float f) { return rz_float_to_half(f); }
extern "C" float rz_host_half_to_float(unsigned short h) { return rz_half_to_float(h); }
extern "C" unsigned short rz_host_float_to_bf16(float f) { return rz_float_to_bf16(f); }
extern "C" long long rz_host_params_size(void) { return (long long)sizeof(RzParams); }
#endif

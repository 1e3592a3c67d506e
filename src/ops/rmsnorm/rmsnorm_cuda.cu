// One thread block per row. Each thread owns the same elements in both passes
// (4 consecutive ones a unit where dim % 4 == 0 and the pointers allow: 16-byte
// f32 loads, 8-byte bf16 ones; else 1), so the fused add's write of x is read
// back by the thread that made it and needs no barrier. Pass 1 reads x (and
// delta), writes x + delta and sums squares; the block reduces the sum; pass 2
// reads x again (from L1/L2: the row was just touched) and writes out.

#include "ops/rmsnorm/rmsnorm_cuda.cuh"

#include <algorithm>

#include "core/cuda/cuda_check.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx.cuh"
#include "ops/matmul/fp8_quant.cuh"
#include "ops/matmul/linear_cuda_layout.cuh"

namespace nanoserve {

namespace {

constexpr int kMaxThreads = 512;
constexpr int kMaxWarps = kMaxThreads / 32;

__device__ __forceinline__ float bf16_bits_to_f32(uint32_t bits16) {
  return __uint_as_float(bits16 << 16);
}

// Round to nearest even, NaN kept NaN (as core/half.h's f32_to_bf16).
__device__ __forceinline__ uint32_t f32_to_bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x0040u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// The block's sum of v, in a fixed order; every thread gets it.
__device__ __forceinline__ float block_sum(float v, float* warp_sums) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  float total = 0.0f;
  const int warps = blockDim.x / 32;
  for (int i = 0; i < warps; ++i) total += warp_sums[i];
  return total;
}

// delta's own norm (kPost): its scale, the block's sum of squares of the
// row in the same fixed order as x's.
template <bool kVec>
__device__ __forceinline__ float delta_scale(const uint16_t* __restrict__ dr, int32_t dim, float eps,
                                             float* warp_sums) {
  float ss = 0.0f;
  if constexpr (kVec) {
    for (int32_t u = threadIdx.x; u < dim / 4; u += blockDim.x) {
      const uint2 d = reinterpret_cast<const uint2*>(dr)[u];
      const float v0 = bf16_bits_to_f32(d.x & 0xffffu), v1 = bf16_bits_to_f32(d.x >> 16);
      const float v2 = bf16_bits_to_f32(d.y & 0xffffu), v3 = bf16_bits_to_f32(d.y >> 16);
      ss += v0 * v0;
      ss += v1 * v1;
      ss += v2 * v2;
      ss += v3 * v3;
    }
  } else {
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) {
      const float v = bf16_bits_to_f32(dr[i]);
      ss += v * v;
    }
  }
  return rsqrtf(block_sum(ss, warp_sums) / static_cast<float>(dim) + eps);
}

// kAdd: x += delta first. kPost: x += rmsnorm(delta) * post_w instead (the
// products rounded one at a time, as the CPU's (d * scale) * w, then added).
// kVec: units of 4 elements. kOut: out as RmsNormOut says (kVec only but
// kNatural); kFp8Tokens puts the codes at out and the row scales at out_scale. delta_bias (kAdd without kPost; null: none): x += delta + bias,
// the sum in f32 (gpt-oss's o_proj bias).
template <bool kAdd, bool kVec, RmsNormOut kOut, bool kPost = false>
__global__ void rmsnorm_kernel(float* __restrict__ x, const uint16_t* __restrict__ delta,
                               const float* __restrict__ w, float eps, int32_t dim,
                               uint16_t* __restrict__ out, const float* __restrict__ post_w = nullptr,
                               const float* __restrict__ delta_bias = nullptr, float* __restrict__ out_scale = nullptr) {
  static_assert(kAdd || !kPost, "the post norm is of the added delta");
  static_assert(kVec || kOut == RmsNormOut::kNatural, "the linears' orders are of units of 4");
  constexpr bool kPermuted = kOut == RmsNormOut::kLinearTiled;
  __shared__ float warp_sums[kMaxWarps];
  __shared__ float post_sums[kMaxWarps];  // delta's reduction: no barrier between the two
  cuda::wait_primary_grid();              // launched dependent (core/cuda/launch.cuh)
  cuda::launch_dependents();
  const int64_t base = static_cast<int64_t>(blockIdx.x) * dim;
  float* xr = x + base;
  uint16_t* outr = out + base;
  float ds = 1.0f;  // delta's norm scale (kPost)
  if constexpr (kPost) ds = delta_scale<kVec>(delta + base, dim, eps, post_sums);
  // delta element i joined to x: as it is, or normed (kPost).
  auto joined = [&](uint32_t bits16, int32_t i) {
    const float d = bf16_bits_to_f32(bits16);
    if constexpr (kPost) return __fmul_rn(__fmul_rn(d, ds), post_w[i]);
    return delta_bias != nullptr ? d + delta_bias[i] : d;
  };
  float ss = 0.0f;
  if constexpr (kVec) {
    float4* x4 = reinterpret_cast<float4*>(xr);
    for (int32_t u = threadIdx.x; u < dim / 4; u += blockDim.x) {
      float4 v = x4[u];
      if constexpr (kAdd) {
        const uint2 d = reinterpret_cast<const uint2*>(delta + base)[u];
        v.x += joined(d.x & 0xffffu, 4 * u);
        v.y += joined(d.x >> 16, 4 * u + 1);
        v.z += joined(d.y & 0xffffu, 4 * u + 2);
        v.w += joined(d.y >> 16, 4 * u + 3);
        x4[u] = v;
      }
      ss += v.x * v.x;
      ss += v.y * v.y;
      ss += v.z * v.z;
      ss += v.w * v.w;
    }
  } else {
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) {
      float v = xr[i];
      if constexpr (kAdd) {
        v += joined(delta[base + i], i);
        xr[i] = v;
      }
      ss += v * v;
    }
  }
  const float total = block_sum(ss, warp_sums);
  const float scale = rsqrtf(total / static_cast<float>(dim) + eps);
  if constexpr (kOut == RmsNormOut::kFp8Tokens) {
    // The bf16 rows as kNatural writes them, then their E4M3 codes as
    // linear_cuda quantizes a token: scale = max |row| / 448 (1 for a zero
    // row), code = row / scale to nearest even, saturated.
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    auto normed = [&](int32_t u) {
      const float4 v = x4[u], g = w4[u];
      return make_float4(bf16_bits_to_f32(f32_to_bf16_bits(v.x * scale * g.x)),
                         bf16_bits_to_f32(f32_to_bf16_bits(v.y * scale * g.y)),
                         bf16_bits_to_f32(f32_to_bf16_bits(v.z * scale * g.z)),
                         bf16_bits_to_f32(f32_to_bf16_bits(v.w * scale * g.w)));
    };
    float mx = 0.0f;
    for (int32_t u = threadIdx.x; u < dim / 4; u += blockDim.x) {
      const float4 o = normed(u);
      mx = fmaxf(mx, fmaxf(fmaxf(fabsf(o.x), fabsf(o.y)), fmaxf(fabsf(o.z), fabsf(o.w))));
    }
    __shared__ float warp_max[kMaxWarps];
    const float sc = linear_detail::e4m3_block_scale(mx, warp_max);
    if (threadIdx.x == 0) out_scale[blockIdx.x] = sc;
    auto code = [&](float v) { return linear_detail::e4m3_code(v, sc); };
    uint32_t* codes = reinterpret_cast<uint32_t*>(reinterpret_cast<uint8_t*>(out) + base);
    for (int32_t u = threadIdx.x; u < dim / 4; u += blockDim.x) {
      const float4 o = normed(u);
      codes[u] = code(o.x) | code(o.y) << 8 | code(o.z) << 16 | code(o.w) << 24;
    }
  } else if constexpr (kVec) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    uint2* o2 = reinterpret_cast<uint2*>(outr);
    for (int32_t u = threadIdx.x; u < dim / 4; u += blockDim.x) {
      const float4 v = x4[u], g = w4[u];
      const uint2 o =
          make_uint2(f32_to_bf16_bits(v.x * scale * g.x) | (f32_to_bf16_bits(v.y * scale * g.y) << 16),
                     f32_to_bf16_bits(v.z * scale * g.z) | (f32_to_bf16_bits(v.w * scale * g.w) << 16));
      if constexpr (kPermuted) {  // words 2 u and 2 u + 1 of the row, each to its place in its chunk
        using linear_detail::kChunkWords;
        using linear_detail::permuted_word;
        uint32_t* chunk = reinterpret_cast<uint32_t*>(outr) + (2 * u) / kChunkWords * kChunkWords;
        chunk[permuted_word((2 * u) % kChunkWords)] = o.x;
        chunk[permuted_word((2 * u + 1) % kChunkWords)] = o.y;
      } else {
        o2[u] = o;
      }
    }
  } else {
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) {
      outr[i] = static_cast<uint16_t>(f32_to_bf16_bits(xr[i] * scale * w[i]));
    }
  }
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

void check_args(const char* op, const Tensor& x, const Tensor* delta, const Tensor& w, const Tensor& out,
                RmsNormOut order, const Tensor* post_w = nullptr) {
  if (post_w != nullptr) {
    NS_CHECK(post_w->device() == Device::kCUDA && post_w->dtype() == DType::kF32 &&
             post_w->numel() == x.dim(1) && post_w->is_contiguous() && aligned16(post_w->data()))
        << op << ": post_w must be a 16-byte aligned [" << x.dim(1) << "] f32 device tensor, got "
        << dtype_name(post_w->dtype()) << post_w->shape_string();
  }
  NS_CHECK(x.device() == Device::kCUDA && w.device() == Device::kCUDA && out.device() == Device::kCUDA &&
           (delta == nullptr || delta->device() == Device::kCUDA))
      << op << ": device tensors";
  NS_CHECK(x.dtype() == DType::kF32 && x.ndim() == 2 && x.is_contiguous())
      << op << ": x must be a contiguous [T, dim] f32 tensor, got " << dtype_name(x.dtype())
      << x.shape_string();
  NS_CHECK(w.dtype() == DType::kF32 && w.numel() == x.dim(1) && w.is_contiguous())
      << op << ": w must be [" << x.dim(1) << "] f32, got " << dtype_name(w.dtype()) << w.shape_string();
  if (order == RmsNormOut::kFp8Tokens) {
    const int64_t bytes = linear_detail::fp8_tokens_bytes(x.dim(0), x.dim(1));
    NS_CHECK(out.dtype() == DType::kBF16 && out.is_contiguous() && out.numel() * 2 >= bytes)
        << op << ": out must be an FP8 linear's scratch of at least " << (bytes + 1) / 2 << " bf16, got "
        << dtype_name(out.dtype()) << out.shape_string();
  } else {
    NS_CHECK(out.dtype() == DType::kBF16 && out.shape() == x.shape() && out.is_contiguous())
        << op << ": out must be a contiguous " << x.shape_string() << " bf16 tensor, got "
        << dtype_name(out.dtype()) << out.shape_string();
  }
  if (delta != nullptr) {
    NS_CHECK(delta->dtype() == DType::kBF16 && delta->shape() == x.shape() && delta->is_contiguous())
        << op << ": delta must be a contiguous " << x.shape_string() << " bf16 tensor, got "
        << dtype_name(delta->dtype()) << delta->shape_string();
  }
  NS_CHECK(x.dim(0) <= INT32_MAX && x.dim(1) > 0 && x.dim(1) <= INT32_MAX)
      << op << ": shape " << x.shape_string();
}

template <bool kAdd, bool kPost = false>
void launch(const Tensor& x, const uint16_t* delta, const Tensor& w, float eps, const Tensor& out,
            cuda::Stream s, RmsNormOut order, const float* post_w = nullptr,
            const float* delta_bias = nullptr) {
  const int64_t rows = x.dim(0);
  if (rows == 0) return;
  const int32_t dim = static_cast<int32_t>(x.dim(1));
  const bool vec = dim % 4 == 0 && aligned16(x.data()) && aligned16(w.data()) &&
                   reinterpret_cast<uintptr_t>(out.data()) % 8 == 0 &&
                   (delta == nullptr || reinterpret_cast<uintptr_t>(delta) % 8 == 0);
  const int32_t units = vec ? dim / 4 : dim;
  // A function of dim (and the pointers' alignment) only: never of T.
  const int threads = std::clamp((units + 31) / 32 * 32, 32, kMaxThreads);
  float* xp = x.data_as<float>();
  const float* wp = w.data_as<const float>();
  uint16_t* op = out.data_as<uint16_t>();
  const dim3 grid(static_cast<unsigned>(rows));
  if (order != RmsNormOut::kNatural) {
    NS_CHECK(vec && dim % 64 == 0 && aligned16(out.data()))
        << "rmsnorm_cuda: a linear's order needs dim % 64 == 0 and 16-byte aligned tensors (dim " << dim << ")";
  }
  if (order == RmsNormOut::kLinearTiled) {
    cuda::launch_pdl(rmsnorm_kernel<kAdd, true, RmsNormOut::kLinearTiled, kPost>, grid, dim3(threads), 0, s, xp,
                     delta, wp, eps, dim, op, post_w, delta_bias, nullptr);
  } else if (order == RmsNormOut::kFp8Tokens) {
    auto* scales = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(op) + linear_detail::fp8_scales_offset(rows, dim));
    cuda::launch_pdl(rmsnorm_kernel<kAdd, true, RmsNormOut::kFp8Tokens, kPost>, grid, dim3(threads), 0, s, xp,
                     delta, wp, eps, dim, op, post_w, delta_bias, scales);
  } else if (vec) {
    cuda::launch_pdl(rmsnorm_kernel<kAdd, true, RmsNormOut::kNatural, kPost>, grid, dim3(threads), 0, s, xp,
                     delta, wp, eps, dim, op, post_w, delta_bias, nullptr);
  } else {
    cuda::launch_pdl(rmsnorm_kernel<kAdd, false, RmsNormOut::kNatural, kPost>, grid, dim3(threads), 0, s, xp,
                     delta, wp, eps, dim, op, post_w, delta_bias, nullptr);
  }
  NS_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rmsnorm_cuda(const Tensor& x, const Tensor& w, float eps, const Tensor& out, cuda::Stream s,
                  RmsNormOut order) {
  check_args("rmsnorm_cuda", x, nullptr, w, out, order);
  launch<false>(x, nullptr, w, eps, out, s, order);
}

void add_rmsnorm_cuda(const Tensor& x, const Tensor& delta, const Tensor& w, float eps, const Tensor& out,
                      cuda::Stream s, RmsNormOut order, const Tensor* delta_bias) {
  check_args("add_rmsnorm_cuda", x, &delta, w, out, order);
  if (delta_bias != nullptr) {
    NS_CHECK(delta_bias->device() == Device::kCUDA && delta_bias->dtype() == DType::kF32 &&
             delta_bias->numel() == x.dim(1) && delta_bias->is_contiguous())
        << "add_rmsnorm_cuda: delta_bias must be a [" << x.dim(1) << "] f32 device tensor, got "
        << dtype_name(delta_bias->dtype()) << delta_bias->shape_string();
  }
  launch<true>(x, delta.data_as<const uint16_t>(), w, eps, out, s, order, nullptr,
               delta_bias != nullptr ? delta_bias->data_as<const float>() : nullptr);
}

void post_norm_add_rmsnorm_cuda(const Tensor& x, const Tensor& delta, const Tensor& post_w, const Tensor& w,
                                float eps, const Tensor& out, cuda::Stream s, RmsNormOut order) {
  check_args("post_norm_add_rmsnorm_cuda", x, &delta, w, out, order, &post_w);
  launch<true, true>(x, delta.data_as<const uint16_t>(), w, eps, out, s, order,
                     post_w.data_as<const float>());
}

}  // namespace nanoserve

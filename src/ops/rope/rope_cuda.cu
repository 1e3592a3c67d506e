// Grid (T, groups): thread block (t, g) handles work items g * threads ..
// (g + 1) * threads - 1 of token t. An item is C consecutive elements of one
// head of qkv[t] (C = 8: one 16-byte load and store, where head_dim % 8 == 0
// and the pointers allow; else C = 2: one pair). Items run over the heads in
// qkv order (q, k, v), so item j is head j / (head_dim / C) at element
// (j % (head_dim / C)) * C. A token with no slot has only its q items.
//
// The angle is f32(positions[t]) * inv_freq[i] rounded to f32, as rope_ref
// computes it; its sine and cosine come from sincosf, whose range reduction is
// exact for any angle (positions to 10^5 and beyond), so the rotation differs
// from the reference's double math by a few f32 ulps before the bf16 rounding.

#include "ops/rope/rope_cuda.cuh"

#include <algorithm>
#include <string>

#include "core/cuda/cuda_check.cuh"
#include "core/cuda/kv_quant.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx.cuh"

namespace nanoserve {

namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ float bf16_bits_to_f32(uint32_t bits16) {
  return __uint_as_float(bits16 << 16);
}

__device__ __forceinline__ uint32_t f32_to_bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x0040u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

struct RopeArgs {
  const uint16_t* qkv;  // [T, (n_heads + 2 n_kv) * head_dim]
  const int32_t* positions;
  const int32_t* slot_mapping;
  const float* inv_freq;  // [rope_half]
  uint16_t* q_out;        // [T, n_heads, head_dim]
  void* k_pool;           // [num_blocks, block_size, n_kv, head_dim] bf16, or E4M3 bytes with f8
  void* v_pool;
  RopeKvExtras extras;
  bool f8;                 // E4M3 pools: each bf16 K/V element quantized (cuda::kv_f8_quantize)
  float k_scale, v_scale;  // their scales (KvScales)
  int64_t num_slots;  // num_blocks * block_size
  int32_t rope_half, n_heads, n_kv, head_dim;
};

// Words of C bf16 elements: a pair in one 32-bit word, or 8 in a uint4.
template <int C>
struct Chunk {
  uint32_t w[C / 2];
};

template <int C>
__device__ __forceinline__ Chunk<C> load_chunk(const uint16_t* p) {
  Chunk<C> c;
  if constexpr (C == 8) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    c.w[0] = v.x, c.w[1] = v.y, c.w[2] = v.z, c.w[3] = v.w;
  } else {
    c.w[0] = *reinterpret_cast<const uint32_t*>(p);
  }
  return c;
}

template <int C>
__device__ __forceinline__ void store_chunk(uint16_t* p, const Chunk<C>& c) {
  if constexpr (C == 8) {
    *reinterpret_cast<uint4*>(p) = make_uint4(c.w[0], c.w[1], c.w[2], c.w[3]);
  } else {
    *reinterpret_cast<uint32_t*>(p) = c.w[0];
  }
}

// The chunk's bf16 elements quantized to E4M3 bytes at p: 8 bytes (C = 8) or 2.
template <int C>
__device__ __forceinline__ void store_chunk_f8(uint8_t* p, const Chunk<C>& c, float scale) {
  uint32_t q[2] = {0u, 0u};
#pragma unroll
  for (int e = 0; e < C; ++e) {
    const uint32_t b =
        cuda::kv_f8_quantize(bf16_bits_to_f32((c.w[e / 2] >> (16 * (e % 2))) & 0xffffu), scale);
    q[e / 4] |= b << (8 * (e % 4));
  }
  if constexpr (C == 8) {
    *reinterpret_cast<uint2*>(p) = make_uint2(q[0], q[1]);
  } else {
    *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(q[0]);
  }
}

// The sum of v over the `lanes` consecutive lanes (a power of two <= 32,
// aligned) that hold one head; the same order in every lane, so every lane
// gets the same bits.
__device__ __forceinline__ float head_sum(float v, int lanes) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const unsigned mask = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u) << (lane & ~(lanes - 1));
  for (int off = lanes / 2; off > 0; off /= 2) v += __shfl_xor_sync(mask, v, off);
  return v;
}

template <int C>
__global__ void __launch_bounds__(kThreads) rope_kv_write_kernel(RopeArgs a) {
  cuda::wait_primary_grid();  // launched dependent (core/cuda/launch.cuh)
  cuda::launch_dependents();
  const int32_t t = static_cast<int32_t>(blockIdx.x);
  const int64_t slot = a.slot_mapping[t];
  const bool write_kv = slot >= 0 && slot < a.num_slots;
  const int32_t chunks = a.head_dim / C;  // items per head
  const int32_t heads = a.n_heads + (write_kv ? 2 * a.n_kv : 0);
  const int32_t j = static_cast<int32_t>(blockIdx.y) * kThreads + static_cast<int32_t>(threadIdx.x);
  if (j >= heads * chunks) return;  // whole heads return together
  const int32_t head = j / chunks;             // in qkv order: q heads, k heads, v heads
  const int32_t e0 = (j - head * chunks) * C;  // first element of the item within its head
  const int32_t row_heads = a.n_heads + 2 * a.n_kv;
  Chunk<C> c = load_chunk<C>(a.qkv + (static_cast<int64_t>(t) * row_heads + head) * a.head_dim + e0);
  // The destination: q_out, or the element offset into a pool.
  const float* norm = nullptr;
  void* pool = nullptr;
  int64_t off = 0;
  float kv_scale = 1.0f;
  if (head < a.n_heads) {
    norm = a.extras.q_norm;
  } else if (head < a.n_heads + a.n_kv) {
    pool = a.k_pool, off = (slot * a.n_kv + head - a.n_heads) * a.head_dim + e0, kv_scale = a.k_scale;
    norm = a.extras.k_norm;
  } else {
    pool = a.v_pool, off = (slot * a.n_kv + head - a.n_heads - a.n_kv) * a.head_dim + e0,
    kv_scale = a.v_scale;
  }
  // An fp8 pool takes the bf16 row the bf16 pool would hold, quantized.
  auto store = [&](const Chunk<C>& out) {
    if (pool == nullptr) {
      store_chunk<C>(a.q_out + (static_cast<int64_t>(t) * a.n_heads + head) * a.head_dim + e0, out);
    } else if (a.f8) {
      store_chunk_f8<C>(static_cast<uint8_t*>(pool) + off, out, kv_scale);
    } else {
      store_chunk<C>(static_cast<uint16_t*>(pool) + off, out);
    }
  };
  const bool rotate = head < a.n_heads + a.n_kv;
  if (!rotate && a.extras.qkv_bias == nullptr) {  // v as is: bitwise
    store(c);
    return;
  }
  float x[C];
#pragma unroll
  for (int p = 0; p < C / 2; ++p) {
    x[2 * p] = bf16_bits_to_f32(c.w[p] & 0xffffu);
    x[2 * p + 1] = bf16_bits_to_f32(c.w[p] >> 16);
  }
  if (a.extras.qkv_bias != nullptr) {
    const float* b = a.extras.qkv_bias + head * a.head_dim + e0;
#pragma unroll
    for (int e = 0; e < C; ++e) x[e] += b[e];
  }
  if (norm != nullptr) {  // uniform over a head's lanes: q and k heads of a norming family
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < C; ++e) ss += x[e] * x[e];
    const float r = rsqrtf(head_sum(ss, chunks) / static_cast<float>(a.head_dim) + a.extras.norm_eps);
#pragma unroll
    for (int e = 0; e < C; ++e) x[e] = x[e] * r * norm[e0 + e];
  }
  if (rotate) {  // the pairs below rope_dim
    const float pos = static_cast<float>(a.positions[t]);
#pragma unroll
    for (int p = 0; p < C / 2; ++p) {
      const int32_t i = e0 / 2 + p;  // the pair (2i, 2i + 1) of the head
      if (i < a.rope_half) {
        const float angle = pos * a.inv_freq[i];
        float sn, cs;
        sincosf(angle, &sn, &cs);
        const float x0 = x[2 * p], x1 = x[2 * p + 1];
        x[2 * p] = x0 * cs - x1 * sn;
        x[2 * p + 1] = x0 * sn + x1 * cs;
      }
    }
    if (a.extras.rotated_scale != 1.0f) {  // as the CPU forward: the rotated head times the factor
#pragma unroll
      for (int e = 0; e < C; ++e) x[e] *= a.extras.rotated_scale;
    }
  }
#pragma unroll
  for (int p = 0; p < C / 2; ++p) c.w[p] = f32_to_bf16_bits(x[2 * p]) | (f32_to_bf16_bits(x[2 * p + 1]) << 16);
  store(c);
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

void rope_kv_write_cuda(const Tensor& qkv, const int32_t* positions, const int32_t* slot_mapping,
                        const float* inv_freq, int32_t rope_dim, int32_t n_heads, int32_t n_kv_heads,
                        const Tensor& q_out, const Tensor& k_pool, const Tensor& v_pool, cuda::Stream s,
                        const RopeKvExtras& extras, const KvScales& kv_scales) {
  const char* op = "rope_kv_write_cuda";
  NS_CHECK(qkv.device() == Device::kCUDA && q_out.device() == Device::kCUDA &&
           k_pool.device() == Device::kCUDA && v_pool.device() == Device::kCUDA)
      << op << ": device tensors";
  NS_CHECK(n_heads > 0 && n_kv_heads > 0) << op << ": n_heads " << n_heads << ", n_kv_heads " << n_kv_heads;
  NS_CHECK(q_out.dtype() == DType::kBF16 && q_out.ndim() == 3 && q_out.is_contiguous() &&
           q_out.dim(1) == n_heads)
      << op << ": q_out must be a contiguous [T, " << n_heads << ", head_dim] bf16 tensor, got "
      << dtype_name(q_out.dtype()) << q_out.shape_string();
  const int64_t T = q_out.dim(0), hd = q_out.dim(2);
  NS_CHECK(hd > 0 && hd % 2 == 0) << op << ": head_dim " << hd << " must be even";
  NS_CHECK(rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= hd)
      << op << ": rope_dim " << rope_dim << " must be even and in (0, head_dim " << hd << "]";
  NS_CHECK(qkv.dtype() == DType::kBF16 && qkv.ndim() == 2 && qkv.is_contiguous() && qkv.dim(0) == T &&
           qkv.dim(1) == (n_heads + 2 * int64_t{n_kv_heads}) * hd)
      << op << ": qkv must be a contiguous [" << T << ", " << (n_heads + 2 * int64_t{n_kv_heads}) * hd
      << "] bf16 tensor, got " << dtype_name(qkv.dtype()) << qkv.shape_string();
  const bool f8 = k_pool.dtype() == DType::kF8E4M3;
  for (const Tensor* pool : {&k_pool, &v_pool}) {
    NS_CHECK(pool->dtype() == k_pool.dtype() && (f8 || pool->dtype() == DType::kBF16) && pool->ndim() == 4 &&
             pool->is_contiguous() && pool->dim(2) == n_kv_heads && pool->dim(3) == hd)
        << op << ": a pool must be a contiguous [num_blocks, block_size, " << n_kv_heads << ", " << hd
        << "] bf16 or f8e4m3 tensor, got " << dtype_name(pool->dtype()) << pool->shape_string();
  }
  NS_CHECK(!f8 || (kv_scale_valid(kv_scales.k) && kv_scale_valid(kv_scales.v)))
      << op << ": KV scales " << kv_scales.k << ", " << kv_scales.v << " must be finite and > 0";
  NS_CHECK((extras.q_norm == nullptr) == (extras.k_norm == nullptr)) << op << ": q_norm and k_norm go together";
  NS_CHECK(k_pool.shape() == v_pool.shape())
      << op << ": k_pool " << k_pool.shape_string() << " vs v_pool " << v_pool.shape_string();
  NS_CHECK(T <= INT32_MAX && (n_heads + 2 * int64_t{n_kv_heads}) * hd <= INT32_MAX) << op << ": too large";
  if (T == 0) return;
  NS_CHECK(positions != nullptr && slot_mapping != nullptr && inv_freq != nullptr) << op << ": null pointer";

  RopeArgs a;
  a.qkv = qkv.data_as<const uint16_t>();
  a.positions = positions;
  a.slot_mapping = slot_mapping;
  a.inv_freq = inv_freq;
  a.q_out = q_out.data_as<uint16_t>();
  a.k_pool = k_pool.data();
  a.v_pool = v_pool.data();
  a.extras = extras;
  a.f8 = f8;
  a.k_scale = kv_scales.k;
  a.v_scale = kv_scales.v;
  a.num_slots = k_pool.dim(0) * k_pool.dim(1);
  a.rope_half = rope_dim / 2;
  a.n_heads = n_heads;
  a.n_kv = n_kv_heads;
  a.head_dim = static_cast<int32_t>(hd);
  for (const void* p : {static_cast<const void*>(a.qkv), static_cast<const void*>(a.q_out),
                        static_cast<const void*>(a.k_pool), static_cast<const void*>(a.v_pool)}) {
    NS_CHECK(reinterpret_cast<uintptr_t>(p) % 4 == 0) << op << ": tensors must be 4-byte aligned";
  }
  const bool vec =
      hd % 8 == 0 && aligned16(a.qkv) && aligned16(a.q_out) && aligned16(a.k_pool) && aligned16(a.v_pool);
  if (extras.q_norm != nullptr) {
    NS_CHECK(vec && hd >= 16 && hd <= 256 && (hd & (hd - 1)) == 0)
        << op << ": the q/k norm needs a power-of-two head_dim in [16, 256] (got " << hd
        << ") and 16-byte aligned tensors";
  }
  const int64_t items = (n_heads + 2 * int64_t{n_kv_heads}) * (hd / (vec ? 8 : 2));
  const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>((items + kThreads - 1) / kThreads));
  if (vec) {
    cuda::launch_pdl(rope_kv_write_kernel<8>, dim3(grid), dim3(kThreads), 0, s, a);
  } else {
    cuda::launch_pdl(rope_kv_write_kernel<2>, dim3(grid), dim3(kThreads), 0, s, a);
  }
  NS_CUDA_CHECK_LAUNCH();
}

}  // namespace nanoserve

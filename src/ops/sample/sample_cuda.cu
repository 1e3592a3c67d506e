// First, over all rows at once (every SM): l = value(x, T), the logits over
// the temperature, into the scratch (the one division an element). Then one
// thread block of 1024 threads per row over l; the row stays in global memory
// (L2 after the first pass) and every pass streams it again, 8 loads in
// flight a thread. Per sampled row:
//   1. max: the largest (logit, id) key, a block reduction (exact);
//   2. top-k set: a radix select of the k-th key, 8 bits a pass from the top,
//      stopping as soon as the digit's bucket is taken whole (warp-aggregated
//      shared-memory histograms; counts are integers, so the result is
//      independent of the order threads add in);
//   3. z (top-p only): the Sampler's block_total of the set's weights, one
//      thread per (1024-id block, lane) summing its 128 ids in order;
//   4. the window: the top min(k, 1024) keys, then if needed min(k, 8192),
//      gathered into shared memory and bitonic-sorted (keys are unique);
//   5. one thread walks the window in rank order with the Sampler's f64 adds
//      (the top-p / min-p cut, the running mass), and the draw is a binary
//      search of u * total in that running mass (non-decreasing, so the first
//      index past u is the linear walk's);
// and with no filter, the Sampler's id-order draw: block sums, then one
// thread walks the chosen block. Every float operation is an explicit _rn
// intrinsic, so nvcc fuses nothing the CPU build does not (sampler.cc is built
// with -ffp-contract=off).
//
// Shared memory: ~180 KB a block (the window's keys, weights and running
// mass), so one block per SM; R rows are R blocks.

#include "ops/sample/sample_cuda.cuh"

#include <climits>
#include <mutex>

#include "core/cuda/cuda_check.cuh"

namespace nanoserve {

namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 8;
constexpr int kSumBlock = 1024;  // engine/sampler.cc's block_total
constexpr int kLanes = 8;
constexpr int kMaxBlocks = kSampleMaxVocab / kSumBlock;
constexpr int kFirstWindow = 1024;
constexpr unsigned kFull = 0xffffffffu;

// (value, id) as one integer; unsigned long long for the shuffle and max overloads.
using Key = unsigned long long;

struct Smem {
  Key keys[kSampleWindow];            // the window, ranked: key descending
  double prefix[kSampleWindow];       // running f64 mass in rank order
  float w[kSampleWindow];             // window weights; the no-filter draw's block weights
  double lanes[kMaxBlocks * kLanes];  // block_total's lane sums
  double block_sums[kMaxBlocks];
  uint32_t hist[256];
  Key warp_keys[kWarps];
  Key key;
  double total, acc, u_total;
  uint32_t count;
  int32_t digit, need, done, block, token, n_keep;
};

// ---- keys: one total order, (value desc, id asc) as a u64 compare -------------------

// The value the ranking sees: NaN as -inf, -0 as +0 (the Sampler's compare ties them).
__device__ __forceinline__ float canon(float x) {
  if (isnan(x)) return -INFINITY;
  return x == 0.0f ? 0.0f : x;
}

// l = x / T as Sampler::process_logits (T == 1: untouched).
__device__ __forceinline__ float value(float x, float T) {
  return canon(T != 1.0f ? __fdiv_rn(x, T) : x);
}

__device__ __forceinline__ uint32_t ord(float x) {
  const uint32_t b = __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float unord(uint32_t o) {
  return __uint_as_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}

// Larger key = better rank. Never 0 (ord(-inf) > 0), so 0 pads a sort.
__device__ __forceinline__ Key make_key(float v, int32_t i) {
  return (static_cast<Key>(ord(v)) << 32) | (0xffffffffu - static_cast<uint32_t>(i));
}
__device__ __forceinline__ float key_value(Key k) {
  return unord(static_cast<uint32_t>(k >> 32));
}
__device__ __forceinline__ int32_t key_id(Key k) {
  return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(k));
}

// engine/sampler.cc's exp_nonpos, operation for operation.
__device__ __forceinline__ float exp_nonpos(float x_in) {
  const float x = x_in < -87.0f ? -87.0f : x_in;
  const float n = __fsub_rn(__fadd_rn(__fmul_rn(x, 1.44269504f), 12582912.0f), 12582912.0f);
  const float r = __fsub_rn(__fsub_rn(x, __fmul_rn(n, 0.693145752f)), __fmul_rn(n, 1.42860677e-6f));
  float q = __fdiv_rn(1.0f, 5040.0f);
  q = __fadd_rn(__fmul_rn(q, r), __fdiv_rn(1.0f, 720.0f));
  q = __fadd_rn(__fmul_rn(q, r), __fdiv_rn(1.0f, 120.0f));
  q = __fadd_rn(__fmul_rn(q, r), __fdiv_rn(1.0f, 24.0f));
  q = __fadd_rn(__fmul_rn(q, r), __fdiv_rn(1.0f, 6.0f));
  q = __fadd_rn(__fmul_rn(q, r), 0.5f);
  q = __fadd_rn(__fmul_rn(q, r), 1.0f);
  q = __fadd_rn(__fmul_rn(q, r), 1.0f);
  const float scale = __int_as_float((__float2int_rz(n) + 127) << 23);
  return x_in == -INFINITY ? 0.0f : __fmul_rn(q, scale);
}

__device__ __forceinline__ float weight(float v, float m) {
  return exp_nonpos(__fsub_rn(v, m));
}

// ---- block-wide passes ---------------------------------------------------------------

// f(i, x, valid) for every i < V, x = row[i]; warp-uniform trip count, so f may
// use warp collectives (invalid lanes pass valid = false).
template <typename F>
__device__ __forceinline__ void for_each(const float* __restrict__ row, int32_t V, F&& f) {
  for (int32_t base = 0; base < V; base += kThreads * kUnroll) {
    float x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t i = base + u * kThreads + static_cast<int32_t>(threadIdx.x);
      x[u] = i < V ? row[i] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t i = base + u * kThreads + static_cast<int32_t>(threadIdx.x);
      f(i, x[u], i < V);
    }
  }
}

// The largest key any thread holds; all threads get it.
__device__ Key block_max(Key k, Smem& sm) {
  for (int off = 16; off > 0; off >>= 1) k = max(k, __shfl_xor_sync(kFull, k, off));
  if (threadIdx.x % 32 == 0) sm.warp_keys[threadIdx.x / 32] = k;
  __syncthreads();
  if (threadIdx.x < 32) {
    k = sm.warp_keys[threadIdx.x];
    for (int off = 16; off > 0; off >>= 1) k = max(k, __shfl_xor_sync(kFull, k, off));
    if (threadIdx.x == 0) sm.key = k;
  }
  __syncthreads();
  k = sm.key;
  __syncthreads();
  return k;
}

__device__ Key row_max_key(const float* row, int32_t V, float T, Smem& sm) {
  Key best = 0;
  for_each(row, V, [&](int32_t i, float x, bool valid) {
    if (valid) best = max(best, make_key(value(x, T), i));
  });
  return block_max(best, sm);
}

// Warp 0: the digit (from 255 down) where the count of keys above reaches
// `need`; sets sm.digit, sm.need (what is still needed inside the digit) and
// sm.done (the digit's bucket is taken whole).
__device__ void pick_digit(Smem& sm, int32_t need) {
  const int lane = static_cast<int>(threadIdx.x);
  const int top = 255 - lane * 8;  // this lane's bins: top, top - 1, ..., top - 7
  uint32_t c[8], sum = 0;
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    c[q] = sm.hist[top - q];
    sum += c[q];
  }
  uint32_t incl = sum;
  for (int off = 1; off < 32; off <<= 1) {
    const uint32_t n = __shfl_up_sync(kFull, incl, off);
    if (lane >= off) incl += n;
  }
  const uint32_t excl = incl - sum, want = static_cast<uint32_t>(need);
  if (excl < want && incl >= want) {  // exactly one lane: the counts reach need somewhere
    uint32_t above = excl;
    int q = 0;
    while (q < 7 && above + c[q] < want) above += c[q++];
    sm.digit = top - q;
    sm.need = static_cast<int32_t>(want - above);
    sm.done = c[q] == want - above;
  }
}

// The K-th largest key (1 <= K <= V) as a threshold: exactly K keys are >= it.
__device__ Key select_kth(const float* row, int32_t V, float T, int32_t K, Smem& sm) {
  Key prefix = 0;
  int32_t need = K;
  for (int shift = 56;; shift -= 8) {
    for (int i = static_cast<int>(threadIdx.x); i < 256; i += kThreads) sm.hist[i] = 0;
    __syncthreads();
    const Key hi_mask = shift == 56 ? 0 : ~Key{0} << (shift + 8);
    for_each(row, V, [&](int32_t i, float x, bool valid) {
      const Key key = make_key(value(x, T), i);
      const bool in = valid && (key & hi_mask) == prefix;
      const uint32_t digit = in ? static_cast<uint32_t>(key >> shift) & 255u : 256u;
      const uint32_t peers = __match_any_sync(kFull, digit);
      if (in && static_cast<int>(threadIdx.x % 32) == __ffs(peers) - 1)
        atomicAdd(&sm.hist[digit], static_cast<uint32_t>(__popc(peers)));
    });
    __syncthreads();
    if (threadIdx.x < 32) pick_digit(sm, need);
    __syncthreads();
    prefix |= static_cast<Key>(sm.digit) << shift;
    need = sm.need;
    const bool done = sm.done != 0 || shift == 0;
    __syncthreads();
    if (done) return prefix;
  }
}

// engine/sampler.cc's block_total of w(i) = exp_nonpos(l_i - m) for keys >= thr
// (0: every id), 0 elsewhere. Leaves the block sums in sm.block_sums.
__device__ double block_total(const float* __restrict__ row, int32_t V, float T, float m, Key thr, Smem& sm) {
  const int32_t nb = (V + kSumBlock - 1) / kSumBlock;
  for (int32_t p = static_cast<int32_t>(threadIdx.x); p < nb * kLanes; p += kThreads) {
    const int32_t b = p / kLanes, end = min(V, (b + 1) * kSumBlock);
    double acc = 0.0;
#pragma unroll 8
    for (int32_t i = b * kSumBlock + p % kLanes; i < end; i += kLanes) {
      const float v = value(row[i], T);
      const float w = make_key(v, i) >= thr ? weight(v, m) : 0.0f;
      acc = __dadd_rn(acc, static_cast<double>(w));
    }
    sm.lanes[p] = acc;
  }
  __syncthreads();
  for (int32_t b = static_cast<int32_t>(threadIdx.x); b < nb; b += kThreads) {
    const double* l = sm.lanes + b * kLanes;
    sm.block_sums[b] = __dadd_rn(__dadd_rn(__dadd_rn(l[0], l[1]), __dadd_rn(l[2], l[3])),
                                 __dadd_rn(__dadd_rn(l[4], l[5]), __dadd_rn(l[6], l[7])));
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0.0;
    for (int32_t b = 0; b < nb; ++b) t = __dadd_rn(t, sm.block_sums[b]);
    sm.total = t;
  }
  __syncthreads();
  const double t = sm.total;
  __syncthreads();
  return t;
}

// The n keys >= thr (exactly n of them, n <= kSampleWindow) into sm.keys[0, n),
// ranked; returns nothing else. Keys are unique, so the sorted order is one.
__device__ void gather_ranked(const float* row, int32_t V, float T, Key thr, int32_t n, Smem& sm) {
  if (threadIdx.x == 0) sm.count = 0;
  __syncthreads();
  const unsigned lane = threadIdx.x % 32;
  for_each(row, V, [&](int32_t i, float x, bool valid) {
    const Key key = make_key(value(x, T), i);
    const bool take = valid && key >= thr;
    const unsigned ballot = __ballot_sync(kFull, take);
    if (ballot == 0) return;
    const int leader = __ffs(ballot) - 1;
    uint32_t base = 0;
    if (static_cast<int>(lane) == leader) base = atomicAdd(&sm.count, static_cast<uint32_t>(__popc(ballot)));
    base = __shfl_sync(kFull, base, leader);
    const uint32_t pos = base + static_cast<uint32_t>(__popc(ballot & ((1u << lane) - 1u)));
    if (take && pos < static_cast<uint32_t>(kSampleWindow)) sm.keys[pos] = key;
  });
  __syncthreads();
  int32_t n_pad = 1;
  while (n_pad < n) n_pad <<= 1;
  for (int32_t i = n + static_cast<int32_t>(threadIdx.x); i < n_pad; i += kThreads) sm.keys[i] = 0;
  __syncthreads();
  // Bitonic sort, descending.
  for (int32_t size = 2; size <= n_pad; size <<= 1) {
    for (int32_t stride = size / 2; stride > 0; stride >>= 1) {
      for (int32_t i = static_cast<int32_t>(threadIdx.x); i < n_pad; i += kThreads) {
        const int32_t j = i ^ stride;
        if (j > i) {
          const Key a = sm.keys[i], b = sm.keys[j];
          const bool descending = (i & size) == 0;
          if (descending ? a < b : a > b) {
            sm.keys[i] = b;
            sm.keys[j] = a;
          }
        }
      }
      __syncthreads();
    }
  }
}

// ---- one row ---------------------------------------------------------------------------

// Sampler::sample's no-filter draw: id order, block sums first.
__device__ int32_t draw_unfiltered(const float* row, int32_t V, float T, float m, double u, Smem& sm) {
  const double total = block_total(row, V, T, m, 0, sm);
  const int32_t nb = (V + kSumBlock - 1) / kSumBlock;
  if (threadIdx.x == 0) {
    const double ut = __dmul_rn(u, total);
    double acc = 0.0;
    int32_t b = 0;
    while (b + 1 < nb && ut >= __dadd_rn(acc, sm.block_sums[b])) acc = __dadd_rn(acc, sm.block_sums[b++]);
    sm.block = b;
    sm.acc = acc;
    sm.u_total = ut;
  }
  __syncthreads();
  const int32_t b = sm.block, begin = b * kSumBlock, end = min(V, begin + kSumBlock);
  for (int32_t i = begin + static_cast<int32_t>(threadIdx.x); i < end; i += kThreads)
    sm.w[i - begin] = weight(value(row[i], T), m);
  __syncthreads();
  if (threadIdx.x == 0) {
    const double ut = sm.u_total;
    double acc = sm.acc;
    int32_t chosen = -1;
    for (int32_t i = begin; i < end; ++i) {
      acc = __dadd_rn(acc, static_cast<double>(sm.w[i - begin]));
      if (ut < acc) {
        chosen = i;
        break;
      }
    }
    if (chosen < 0) {  // rounding left u past the block's last step: its last token with weight
      chosen = end - 1;
      while (chosen > begin && sm.w[chosen - begin] == 0.0f) --chosen;
    }
    sm.token = chosen;
  }
  __syncthreads();
  const int32_t token = sm.token;
  __syncthreads();
  return token;
}

// One thread: the cut over the ranked window sm.keys[0, n), as Sampler::sample's
// walk; sm.n_keep = the kept count, or -1 when the window ends before the cut
// and the set goes on (n < k).
__device__ void walk_window(int32_t n, int32_t k, float m, bool use_top_p, bool use_min_p, double target,
                            float min_p, Smem& sm) {
  for (int32_t j = static_cast<int32_t>(threadIdx.x); j < n; j += kThreads)
    sm.w[j] = weight(key_value(sm.keys[j]), m);
  __syncthreads();
  if (threadIdx.x == 0) {
    double cum = 0.0;
    int32_t n_keep = -1;
    for (int32_t j = 0; j < n; ++j) {
      const float w = sm.w[j];
      // A token stays while the mass ranked above it is below top_p.
      if ((use_top_p || use_min_p) && j > 0 && (cum >= target || w < min_p)) {
        n_keep = j;
        break;
      }
      cum = __dadd_rn(cum, static_cast<double>(w));
      sm.prefix[j] = cum;
    }
    if (n_keep < 0 && n == k) n_keep = k;
    sm.n_keep = n_keep;
  }
  __syncthreads();
}

// Over the scaled row (the temperature already applied).
__device__ int32_t draw_ranked(const float* row, int32_t V, const SampleRowParams& p, float m, Smem& sm) {
  constexpr float T = 1.0f;
  const int32_t k = (p.top_k > 0 && p.top_k < V) ? p.top_k : V;
  const bool use_top_p = p.top_p<1.0f, use_min_p = p.min_p> 0.0f;
  if (k > kSampleWindow && !use_top_p && !use_min_p) return kSampleOnHost;
  const Key thr_k = k < V ? select_kth(row, V, T, k, sm) : 0;
  const double target = use_top_p
                            ? __dmul_rn(static_cast<double>(p.top_p), block_total(row, V, T, m, thr_k, sm))
                            : static_cast<double>(INFINITY);
  int32_t n_keep = -1;
  // A small window first (most nuclei are small); pure top-k needs all k at once.
  const int32_t windows[2] = {(use_top_p || use_min_p) ? kFirstWindow : kSampleWindow, kSampleWindow};
  for (int t = 0; t < 2; ++t) {
    const int32_t n = min(k, windows[t]);
    gather_ranked(row, V, T, n == k ? thr_k : select_kth(row, V, T, n, sm), n, sm);
    walk_window(n, k, m, use_top_p, use_min_p, target, p.min_p, sm);
    n_keep = sm.n_keep;
    if (n_keep >= 0 || n == k) break;
  }
  if (n_keep < 0) return kSampleOnHost;
  if (threadIdx.x == 0) {
    const double ut = __dmul_rn(p.u, sm.prefix[n_keep - 1]);
    int32_t lo = 0, hi = n_keep;  // the first j with ut < prefix[j]
    while (lo < hi) {
      const int32_t mid = (lo + hi) / 2;
      if (ut < sm.prefix[mid]) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    if (lo == n_keep) {  // rounding left u past the end: the last kept token with weight
      lo = n_keep - 1;
      while (lo > 0 && sm.w[lo] == 0.0f) --lo;
    }
    sm.token = key_id(sm.keys[lo]);
  }
  __syncthreads();
  const int32_t token = sm.token;
  __syncthreads();
  return token;
}

// Sampler::logprobs of the raw row for `token`.
__device__ void row_logprobs(const float* row, int32_t V, int32_t token, int32_t n, SampleRowLogprobs& out,
                             Smem& sm) {
  const float m = key_value(row_max_key(row, V, 1.0f, sm));
  const double lse = __dadd_rn(static_cast<double>(m), log(block_total(row, V, 1.0f, m, 0, sm)));
  n = max(0, min(n, min(kSampleMaxLogprobs, V)));
  if (n > 0) gather_ranked(row, V, 1.0f, select_kth(row, V, 1.0f, n, sm), n, sm);
  if (threadIdx.x == 0) {
    out.logprob = __double2float_rn(__dsub_rn(static_cast<double>(row[token]), lse));
    out.n = n;
    for (int32_t j = 0; j < n; ++j) {
      const int32_t id = key_id(sm.keys[j]);
      out.top_ids[j] = id;
      out.top_logprobs[j] = __double2float_rn(__dsub_rn(static_cast<double>(row[id]), lse));
    }
  }
}

// scaled[r][i] = value(logits[r][i], T_r) for the sampled rows (grid: column
// blocks x rows, 4 ids a thread).
constexpr int kScaleThreads = 256;
__global__ void __launch_bounds__(kScaleThreads)
    scale_kernel(const float* __restrict__ logits, float* __restrict__ scaled, int32_t V,
                 const SampleRowParams* __restrict__ params) {
  const float T = params[blockIdx.y].temperature;
  if (T == 0.0f) return;
  const int64_t base = static_cast<int64_t>(blockIdx.y) * V;
  for (int32_t i = (static_cast<int32_t>(blockIdx.x) * kScaleThreads + static_cast<int32_t>(threadIdx.x)) * 4;
       i < V; i += static_cast<int32_t>(gridDim.x) * kScaleThreads * 4) {
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (i + u < V) scaled[base + i + u] = value(logits[base + i + u], T);
    }
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    sample_kernel(const float* __restrict__ logits, const float* __restrict__ scaled, int32_t V,
                  const SampleRowParams* __restrict__ params, const int32_t* __restrict__ argmax,
                  int32_t* __restrict__ tokens, SampleRowLogprobs* __restrict__ logprobs) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  const int32_t r = static_cast<int32_t>(blockIdx.x);
  const float* row = logits + static_cast<int64_t>(r) * V;
  // The row over its temperature: value(l, 1) = l from here on (canon is idempotent).
  const float* l = scaled + static_cast<int64_t>(r) * V;
  const SampleRowParams p = params[r];
  int32_t token = argmax[r];
  if (p.temperature != 0.0f) {
    const float m = key_value(row_max_key(l, V, 1.0f, sm));
    if (isfinite(m)) {
      const int32_t k = (p.top_k > 0 && p.top_k < V) ? p.top_k : V;
      token = (k == V && !(p.top_p < 1.0f) && !(p.min_p > 0.0f)) ? draw_unfiltered(l, V, 1.0f, m, p.u, sm)
                                                                 : draw_ranked(l, V, p, m, sm);
    }
  }
  if (threadIdx.x == 0) tokens[r] = token;
  if (logprobs != nullptr && p.num_logprobs >= 0 && token >= 0 && token < V)
    row_logprobs(row, V, token, p.num_logprobs, logprobs[r], sm);
}

}  // namespace

void sample_cuda(const Tensor& logits, const Tensor& scaled, const SampleRowParams* params,
                 const int32_t* argmax, int32_t* tokens, SampleRowLogprobs* logprobs, cuda::Stream s) {
  NS_CHECK(logits.device() == Device::kCUDA) << "sample_cuda: logits must be on the device";
  NS_CHECK(logits.dtype() == DType::kF32 && logits.ndim() == 2 && logits.is_contiguous())
      << "sample_cuda: logits must be a contiguous [R, V] f32 tensor, got " << dtype_name(logits.dtype())
      << logits.shape_string();
  const int64_t R = logits.dim(0), V = logits.dim(1);
  NS_CHECK(V > 0 && V <= kSampleMaxVocab && R <= INT32_MAX)
      << "sample_cuda: shape " << logits.shape_string() << " (V must be in [1, " << kSampleMaxVocab << "])";
  NS_CHECK(scaled.device() == Device::kCUDA && scaled.dtype() == DType::kF32 && scaled.is_contiguous() &&
           scaled.numel() >= R * V)
      << "sample_cuda: the scratch must be >= " << R * V << " contiguous f32 on the device, got "
      << dtype_name(scaled.dtype()) << scaled.shape_string();
  if (R == 0) return;
  NS_CHECK(R <= 65535) << "sample_cuda: " << R << " rows (at most 65535)";
  NS_CHECK(params != nullptr && argmax != nullptr && tokens != nullptr) << "sample_cuda: null buffer";
  static std::once_flag once;  // the opt-in is per function, not per launch
  std::call_once(once, [] {
    NS_CUDA_CHECK(cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(sizeof(Smem))));
  });
  const int32_t col_blocks = static_cast<int32_t>((V + kScaleThreads * 4 - 1) / (kScaleThreads * 4));
  scale_kernel<<<dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(R)), kScaleThreads, 0, s>>>(
      logits.data_as<const float>(), scaled.data_as<float>(), static_cast<int32_t>(V), params);
  NS_CUDA_CHECK_LAUNCH();
  sample_kernel<<<static_cast<unsigned>(R), kThreads, sizeof(Smem), s>>>(
      logits.data_as<const float>(), scaled.data_as<const float>(), static_cast<int32_t>(V), params, argmax,
      tokens, logprobs);
  NS_CUDA_CHECK_LAUNCH();
}

}  // namespace nanoserve

// The query-tiled attention kernel (PagedAttentionTuning::query_tiles):
// prefill on tensor cores the way flash attention lays it out, for the steps
// that gave up batch invariance (--cublas-prefill).
//
// A thread block of four warps owns a tile of 64 query slots of one kv head:
// R = 64 / n_rep consecutive rows of one sequence x the n_rep query heads
// that share the kv head (slot m: row m / n_rep, head m % n_rep), warp w
// slots 16 w .. 16 w + 15 as the A operand (rows) of mma.m16n8k16. The block
// walks the sequence's keys [0, last row's position] in tiles of 64, each
// staged in shared memory by cp.async (two stages; 16-byte chunks XOR-swizzled
// by row so that ldmatrix is conflict-free), computes S = Q K^T for its 16
// slots x 64 keys, the online softmax of each slot (f32, log2 domain, masked
// at the slot's own position), and O += P V with P rounded to the KV dtype.
// A warp whose slots all end before a tile skips its products. Every K/V byte
// of a tile serves 64 slots, against 16 columns in the split kernel, and no
// split or merge is needed: one block sees a slot's whole context.
//
// The arithmetic of a row is not the split kernel's (its keys are summed in
// another order), so a row computed here differs in its last bits from the
// same row computed there: this kernel is used only where invariance was
// given up. The tile list (the first row of each tile, one block's work) is
// written on the device by a one-block kernel before it, from the step's
// metadata; the host sizes the grid from the same count over its pinned copy.

#include "ops/paged_attention/paged_attention_query_tiles.h"

#include <cub/block/block_scan.cuh>

#include "core/cuda/cuda_check.cuh"
#include "ops/paged_attention/paged_attention_common.cuh"

namespace nanoserve::paged_attention_kernels {

namespace {

constexpr int kSlots = 64;  // query slots (row, head) a block
constexpr int kKeys = 64;   // keys a tile
constexpr int kTileThreads = 128;
constexpr int kListThreads = 1024;

template <typename T>
struct TileParams {
  const T* q;  // [T, n_heads, HD]
  T* out;      // [T, n_heads, HD]
  const T* k_pool;
  const T* v_pool;
  PoolStrides strides;       // elements: a block, a head, a slot
  const int32_t* row_meta;   // [T][2] the sequence of each token, its first position this step
  const int32_t* positions;  // [T]
  const int32_t* block_tables;
  const int32_t* tiles;  // [n_tiles] the first row of each tile
  int n_tiles;
  int num_tokens;
  int n_heads;
  int n_rep;
  int rows_per_tile;  // kSlots / n_rep
  int block_size_log2;
  int max_blocks_per_seq;
  float scale_log2;
};

// One block: the first row of every tile, in row order.
template <typename T>
__global__ void __launch_bounds__(kListThreads)
    tile_list_kernel(const __grid_constant__ TileParams<T> p, int32_t* __restrict__ tiles) {
  using Scan = cub::BlockScan<int, kListThreads>;
  __shared__ typename Scan::TempStorage scan;
  launch_dependents();
  wait_primary_grid();  // the previous layer's list may be read until the kernel before has finished
  int base = 0;
  for (int r0 = 0; r0 < p.num_tokens; r0 += kListThreads) {
    const int t = r0 + static_cast<int>(threadIdx.x);
    const int flag =
        t < p.num_tokens && query_tile_starts(p.row_meta, p.positions, t, p.rows_per_tile) ? 1 : 0;
    int at = 0, total = 0;
    Scan(scan).ExclusiveSum(flag, at, total);
    if (flag) tiles[base + at] = t;
    base += total;
    __syncthreads();  // the scan's storage is reused
  }
}

// Byte offset of 16-byte chunk c of row r in a [kKeys][HD] tile.
template <int HD>
__device__ __forceinline__ uint32_t tile_offset(int r, int c) {
  return static_cast<uint32_t>(r * HD * 2 + ((c ^ (r & 7)) << 4));
}

template <typename T, int HD>
__global__ void __launch_bounds__(kTileThreads) query_tile_kernel(const __grid_constant__ TileParams<T> p) {
  constexpr int kChunks = HD / 8;                  // 16-byte chunks of a row
  constexpr int kKS = HD / 16;                     // k-steps of S (16 dims)
  constexpr int kDT = HD / 8;                      // n-tiles of O (8 dims)
  constexpr int kNT = kKeys / 8;                   // n-tiles of S (8 keys)
  constexpr uint32_t kTileBytes = kKeys * HD * 2;  // K (or V) of a tile
  extern __shared__ uint4 smem_raw[];              // [2 stages][K, V][kKeys][HD], swizzled
  const uint32_t smem = cuda::smem_addr(smem_raw);

  launch_dependents();
  wait_primary_grid();  // q, the pools' rows of this step and the tile list come from the kernels before
  const int kvh = blockIdx.x;
  const int t0 = __ldg(p.tiles + (p.n_tiles - 1 - static_cast<int>(blockIdx.y)));  // the longest rows first
  const int seq = __ldg(p.row_meta + 2 * t0);
  const int R = p.rows_per_tile, G = p.n_rep;
  const int i = static_cast<int>(threadIdx.x);
  const int n_rows =
      __syncthreads_count(i < R && t0 + i < p.num_tokens && __ldg(p.row_meta + 2 * (t0 + i)) == seq);
  const int pos0 = __ldg(p.positions + t0);
  const int kv_end = pos0 + n_rows;  // keys [0, kv_end): the last row's context
  const int n_kv_tiles = (kv_end + kKeys - 1) / kKeys;
  const int32_t* table = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks_per_seq;
  const int bs_mask = (1 << p.block_size_log2) - 1;

  const int warp = i / 32, lane = i % 32, gid = lane / 4, tig = lane % 4;
  const int n_slots = n_rows * G;
  // The lane's two slots (A rows gid and gid + 8): their positions (-1: none) and q rows.
  int slot_pos[2];
  const uint32_t* q_words[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int s = 16 * warp + gid + 8 * e;
    const bool valid = s < n_slots;
    const int r = valid ? s / G : 0, h = valid ? s % G : 0;
    slot_pos[e] = valid ? pos0 + r : -1;
    q_words[e] = reinterpret_cast<const uint32_t*>(
        p.q + (static_cast<int64_t>(t0 + r) * p.n_heads + kvh * G + h) * HD);
  }
  const int warp_last = min(16 * warp + 15, n_slots - 1);
  const int warp_tiles = warp_last < 16 * warp ? 0 : (pos0 + warp_last / G) / kKeys + 1;

  uint32_t qa[kKS][4];
#pragma unroll
  for (int ks = 0; ks < kKS; ++ks) {
    const int w0 = 8 * ks + tig;  // the word of dims 16 ks + 2 tig, 2 tig + 1
    qa[ks][0] = slot_pos[0] >= 0 ? __ldg(q_words[0] + w0) : 0u;
    qa[ks][1] = slot_pos[1] >= 0 ? __ldg(q_words[1] + w0) : 0u;
    qa[ks][2] = slot_pos[0] >= 0 ? __ldg(q_words[0] + w0 + 4) : 0u;
    qa[ks][3] = slot_pos[1] >= 0 ? __ldg(q_words[1] + w0 + 4) : 0u;
  }

  // Tile `tile`'s K and V rows into stage `st`; keys past kv_end are zeros.
  // A thread copies chunk c of rows r0, r0 + kRowStep, ... of both.
  constexpr int kRowStep = kTileThreads / kChunks;
  const int c = i % kChunks, r0 = i / kChunks;
  auto load = [&](int tile, int st) {
#pragma unroll 4
    for (int r = r0; r < kKeys; r += kRowStep) {
      const int j = tile * kKeys + r;
      const bool valid = j < kv_end;
      int64_t off = 0;
      if (valid) {
        off = __ldg(table + (j >> p.block_size_log2)) * p.strides.block + (j & bs_mask) * p.strides.token +
              kvh * p.strides.head + c * 8;
      }
      const uint32_t dst = smem + 2 * st * kTileBytes + tile_offset<HD>(r, c);
      cuda::cp_async_16(dst, p.k_pool + off, valid);
      cuda::cp_async_16(dst + kTileBytes, p.v_pool + off, valid);
    }
  };

  float o[kDT][4];
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
  for (int dt = 0; dt < kDT; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;

  load(0, 0);
  cuda::cp_async_commit();
  for (int tile = 0; tile < n_kv_tiles; ++tile) {
    if (tile + 1 < n_kv_tiles) {
      load(tile + 1, (tile + 1) & 1);
      cuda::cp_async_commit();
      cuda::cp_async_wait<1>();
    } else {
      cuda::cp_async_wait<0>();
    }
    __syncthreads();
    if (tile < warp_tiles) {
      const uint32_t k_base = smem + 2 * (tile & 1) * kTileBytes, v_base = k_base + kTileBytes;
      float s[kNT][4];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
        // S = Q K^T: K's rows are B's columns; one ldmatrix.x4 gives two n-tiles of one k-step.
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks) {
#pragma unroll
        for (int pr = 0; pr < kNT / 2; ++pr) {
          uint32_t b[4];
          cuda::ldmatrix_x4(b, k_base + tile_offset<HD>(16 * pr + (lane >> 4) * 8 + (lane & 7),
                                                        2 * ks + ((lane >> 3) & 1)));
          cuda::Elem<T>::mma(s[2 * pr], qa[ks], b[0], b[1]);
          cuda::Elem<T>::mma(s[2 * pr + 1], qa[ks], b[2], b[3]);
        }
      }
      // The online softmax of the lane's two slots (its quad holds a slot's 64 keys).
      float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int e = r >> 1, j = tile * kKeys + 8 * nt + 2 * tig + (r & 1);
          s[nt][r] = j <= slot_pos[e] ? s[nt][r] * p.scale_log2 : -INFINITY;
          tile_max[e] = fmaxf(tile_max[e], s[nt][r]);
        }
      }
      float base[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        tile_max[e] = fmaxf(tile_max[e], __shfl_xor_sync(0xffffffffu, tile_max[e], 1));
        tile_max[e] = fmaxf(tile_max[e], __shfl_xor_sync(0xffffffffu, tile_max[e], 2));
        const float m_new = fmaxf(m[e], tile_max[e]);
        const float corr = m_new == -INFINITY ? 1.0f : cuda::exp2_approx(m[e] - m_new);
        base[e] = m_new == -INFINITY ? 0.0f : m_new;
        m[e] = m_new;
        l[e] *= corr;
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt) {
          o[dt][2 * e] *= corr;
          o[dt][2 * e + 1] *= corr;
        }
      }
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          s[nt][r] = cuda::exp2_approx(s[nt][r] - base[r >> 1]);
          l[r >> 1] += s[nt][r];
        }
      }
      // O += P V: P's accumulators are the A fragments of its 16-key k-steps;
      // V's rows are B's k, read transposed, two d n-tiles an ldmatrix.x4.
#pragma unroll
      for (int kk = 0; kk < kNT / 2; ++kk) {
        const uint32_t a[4] = {cuda::Elem<T>::pack2(s[2 * kk][0], s[2 * kk][1]),
                               cuda::Elem<T>::pack2(s[2 * kk][2], s[2 * kk][3]),
                               cuda::Elem<T>::pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                               cuda::Elem<T>::pack2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int qd = 0; qd < kDT / 2; ++qd) {
          uint32_t b[4];
          cuda::ldmatrix_x4_trans(b, v_base + tile_offset<HD>(16 * kk + ((lane >> 3) & 1) * 8 + (lane & 7),
                                                              2 * qd + (lane >> 4)));
          cuda::Elem<T>::mma(o[2 * qd], a, b[0], b[1]);
          cuda::Elem<T>::mma(o[2 * qd + 1], a, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with the stage before it is refilled
  }

#pragma unroll
  for (int e = 0; e < 2; ++e) {
    l[e] += __shfl_xor_sync(0xffffffffu, l[e], 1);
    l[e] += __shfl_xor_sync(0xffffffffu, l[e], 2);
    if (slot_pos[e] < 0) continue;
    const int s = 16 * warp + gid + 8 * e;
    const float inv = 1.0f / l[e];
    uint32_t* dst = reinterpret_cast<uint32_t*>(
        p.out + (static_cast<int64_t>(t0 + s / G) * p.n_heads + kvh * G + s % G) * HD);
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) {
      dst[4 * dt + tig] = cuda::Elem<T>::pack2(o[dt][2 * e] * inv, o[dt][2 * e + 1] * inv);
    }
  }
}

template <typename T, int HD>
void launch(const TileParams<T>& p, int n_kv, int32_t* tiles, cuda::Stream stream, bool dependent_launch) {
  constexpr int smem = 2 * 2 * kKeys * HD * 2;
  static const bool configured = [] {
    NS_CUDA_CHECK(
        cudaFuncSetAttribute(query_tile_kernel<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
  }();
  (void)configured;
  cudaLaunchAttribute pdl[1];
  pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t lcfg{};
  lcfg.gridDim = dim3(1);
  lcfg.blockDim = dim3(kListThreads);
  lcfg.stream = stream;
  lcfg.attrs = pdl;
  lcfg.numAttrs = dependent_launch ? 1 : 0;
  NS_CUDA_CHECK(cudaLaunchKernelEx(&lcfg, tile_list_kernel<T>, p, tiles));
  NS_CUDA_CHECK_LAUNCH();
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(n_kv), static_cast<unsigned>(p.n_tiles));
  cfg.blockDim = dim3(kTileThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = pdl;
  cfg.numAttrs = 1;  // after the list kernel, always
  NS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, query_tile_kernel<T, HD>, p));
  NS_CUDA_CHECK_LAUNCH();
}

}  // namespace

int query_tile_count(const DeviceBatch& batch, int n_rep) {
  NS_CHECK(n_rep >= 1 && n_rep <= kSlots)
      << "query tiles: n_rep " << n_rep << " outside [1, " << kSlots << "]";
  int n = 0;
  for (int t = 0; t < batch.num_tokens(); ++t)
    n += query_tile_starts(batch.host_row_meta(), batch.host_positions(), t, kSlots / n_rep);
  return n;
}

void launch_query_tiles(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool, const DeviceBatch& batch,
                        int n_rep, float scale, PagedAttentionWorkspaceCuda& ws, const Tensor& out,
                        cuda::Stream stream, int block_size_log2, bool dependent_launch) {
  const int64_t block_size = int64_t{1} << block_size_log2, n_kv = k_pool.dim(2), hd = k_pool.dim(3);
  const int n_tiles = query_tile_count(batch, n_rep);
  NS_CHECK(n_tiles <= int64_t{ws.max_rows()} * PagedAttentionWorkspaceCuda::kMaxSplits && n_tiles <= 65535)
      << "query tiles: " << n_tiles << " tiles exceed the workspace";
  auto fill = [&]<typename T>(TileParams<T>& p) {
    p.q = q.data_as<const T>();
    p.out = out.data_as<T>();
    p.k_pool = k_pool.data_as<const T>();
    p.v_pool = v_pool.data_as<const T>();
    p.strides = pool_strides(block_size, n_kv, hd);
    p.row_meta = batch.row_meta();
    p.positions = batch.positions();
    p.block_tables = batch.block_tables();
    p.tiles = ws.items();
    p.n_tiles = n_tiles;
    p.num_tokens = batch.num_tokens();
    p.n_heads = static_cast<int>(n_kv * n_rep);
    p.n_rep = n_rep;
    p.rows_per_tile = kSlots / n_rep;
    p.block_size_log2 = block_size_log2;
    p.max_blocks_per_seq = batch.max_blocks_per_seq();
    p.scale_log2 = scale * kLog2e;
  };
  auto run = [&]<typename T>() {
    TileParams<T> p{};
    fill.template operator()<T>(p);
    if (hd == 64) {
      launch<T, 64>(p, static_cast<int>(n_kv), ws.items(), stream, dependent_launch);
    } else {
      NS_CHECK(hd == 128) << "query tiles: head_dim " << hd << " (64 or 128)";
      launch<T, 128>(p, static_cast<int>(n_kv), ws.items(), stream, dependent_launch);
    }
  };
  if (k_pool.dtype() == DType::kBF16) {
    run.template operator()<__nv_bfloat16>();
  } else {
    NS_CHECK(k_pool.dtype() == DType::kF16) << "query tiles: KV dtype " << dtype_name(k_pool.dtype());
    run.template operator()<__half>();
  }
}

}  // namespace nanoserve::paged_attention_kernels

// The tile arithmetic's kernels (PagedAttentionKernel::kTiles; the arithmetic
// itself is paged_attention_tiles.cuh): the query-tiled kernel here, for the
// rows of sequences with several rows in the step, and the decode kernel
// (paged_attention_tile_decode.cuh) for a sequence's single row. A row's
// output is bitwise the same whichever of them computes it, alone or in any
// batch.
//
// The query-tiled kernel lays a prefill out as flash attention does. A
// thread block of four warps owns a tile of 64 query slots of one kv head:
// R = 64 / n_rep consecutive rows of one sequence x the n_rep query heads
// that share the kv head (slot m: row m / n_rep, head m % n_rep), warp w
// slots 16 w .. 16 w + 15 as the A operand (rows) of mma.m16n8k16. The block
// walks the sequence's keys [0, last row's position] in tiles of 64, each
// staged in shared memory by cp.async (two stages; 16-byte chunks
// XOR-swizzled by row so that ldmatrix is conflict-free), computes S = Q K^T
// for its 16 slots x 64 keys, the online softmax of each slot, and O += P V.
// Each slot follows its own split plan: where one of its splits ends, the
// lane folds the slot's (m, l, O) into the slot's running fold (O in shared
// memory, m and l in registers) and starts the next split afresh, as the
// decode kernel's partials are folded. A warp whose slots all end before a
// tile skips it. Every K/V byte of a tile serves 64 slots, against 16 in the
// decode kernel's block.
//
// The tile list (the first row of each tile, one block's work) is written on
// the device by a one-block kernel before it, from the step's metadata; the
// host sizes the grid from the same count over its pinned copy.

#include "ops/paged_attention/paged_attention_tiles.h"

#include <algorithm>
#include <climits>
#include <type_traits>

#include <cub/block/block_scan.cuh>

#include "core/cuda/cuda_check.cuh"
#include "core/cuda/launch.cuh"
#include "ops/paged_attention/paged_attention_tile_decode.cuh"
#include "ops/paged_attention/paged_attention_tiles.cuh"

namespace nanoserve::paged_attention_kernels {

namespace {

constexpr int kSlots = 64;  // query slots (row, head) a block
constexpr int kKeys = kTileKeys;
constexpr int kListThreads = 1024;

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
        t < p.num_tokens && query_tile_starts(p.row_meta, p.positions, t, p.rows_per_tile, p.num_tokens) ? 1
                                                                                                         : 0;
    int at = 0, total = 0;
    Scan(scan).ExclusiveSum(flag, at, total);
    if (flag) tiles[base + at] = t;
    base += total;
    __syncthreads();  // the scan's storage is reused
  }
}

template <typename T, typename KV, int HD>
__global__ void __launch_bounds__(kTileThreads) query_tile_kernel(const __grid_constant__ TileParams<T> p) {
  constexpr int kKS = HD / 16;                       // k-steps of S (16 dims)
  constexpr int kDT = HD / 8;                        // n-tiles of O (8 dims)
  constexpr int kNT = kKeys / 8;                     // n-tiles of S (8 keys)
  constexpr uint32_t kTileBytes = tile_bytes<HD>();  // K (or V) of a tile
  constexpr bool kF8 = !std::is_same_v<T, KV>;
  using P = ProductT<T, KV>;  // the products' element
  constexpr uint32_t kConv = converted_bytes<T, KV, HD>(2), kStage = stage_bytes<KV, HD>();
  // [the converted tile (fp8 pools)][2 stages][K, V][kKeys][HD], then the folds
  extern __shared__ uint4 smem_raw[];
  char* const smem_ptr = reinterpret_cast<char*>(smem_raw);
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
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
      const int e = reg & 1;
      qa[ks][reg] = slot_pos[e] >= 0 ? q_fragment<T, KV>(q_words[e], ks, tig, reg) : 0u;
    }
  }

  // Each slot's splits (tile_plan of its own context): the tile that ends
  // its current split (fold_at; INT_MAX once its last is folded), a split's
  // tiles, the slot's last tile.
  int fold_at[2], per[2], last[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const SplitPlan plan = tile_plan(max(slot_pos[e], 0) + 1);
    per[e] = plan.split_len / kKeys;
    last[e] = max(slot_pos[e], 0) / kKeys;
    fold_at[e] = slot_pos[e] >= 0 ? min(per[e] - 1, last[e]) : INT_MAX;
  }
  // The slots' running folds: O in shared memory after the stages (each lane
  // its own elements; rows padded by 8 floats against bank conflicts), m and
  // l here.
  float* acc_o = reinterpret_cast<float*>(smem_ptr + kConv + 2 * kStage);
  float acc_m[2] = {-INFINITY, -INFINITY}, acc_l[2] = {0.0f, 0.0f};

  TileLoader<KV, T, HD> loader(p, table, kvh, 0, kv_end, i);
  auto load = [&](int tile, int st) { loader.copy(tile, smem + kConv + st * kStage); };

  float o[kDT][4], lf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  float m[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int dt = 0; dt < kDT; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  const uint32_t ones = ones_column<P>(gid);

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
    uint32_t k_base = smem + (tile & 1) * kStage;
    if constexpr (kF8) {  // the landed stage into the f16 tile every warp reads
      convert_rows<HD, 0, 2 * kKeys>(smem_ptr + kConv + (tile & 1) * kStage, smem_ptr, i);
      __syncthreads();
      k_base = smem;
    }
    if (tile < warp_tiles) {
      const uint32_t v_base = k_base + kTileBytes;
      float s[kNT][4];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
        // S = Q K^T: K's rows are B's columns; one ldmatrix.x4 gives two n-tiles of one k-step.
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks) {
#pragma unroll
        for (int pr = 0; pr < kNT / 2; ++pr) {
          uint32_t b[4];
          cuda::ldmatrix_x4(b, k_base + tile_offset<HD>(16 * pr + x4_row(lane), 2 * ks + x4_chunk(lane)));
          cuda::Elem<P>::mma(s[2 * pr], qa[ks], b[0], b[1]);
          cuda::Elem<P>::mma(s[2 * pr + 1], qa[ks], b[2], b[3]);
        }
      }
      // The online softmax of the lane's two slots (its quad holds a slot's 64 keys).
      float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int e = r >> 1;
          s[nt][r] =
              tile_score(s[nt][r], tile * kKeys + 8 * nt + 2 * tig + (r & 1), slot_pos[e], p.scale_log2);
          tile_max[e] = fmaxf(tile_max[e], s[nt][r]);
        }
      }
      SoftmaxStep st[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        tile_max[e] = fmaxf(tile_max[e], __shfl_xor_sync(0xffffffffu, tile_max[e], 1));
        tile_max[e] = fmaxf(tile_max[e], __shfl_xor_sync(0xffffffffu, tile_max[e], 2));
        st[e] = softmax_step(m[e], tile_max[e]);
      }
      rescale(o, lf, st);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int r = 0; r < 4; ++r) s[nt][r] = tile_prob(s[nt][r], st[r >> 1].base);
      }
      // O += P V: P's accumulators are the A fragments of its 16-key k-steps;
      // V's rows are B's k, read transposed, two d n-tiles an ldmatrix.x4; l
      // the n-tile of the ones column.
#pragma unroll
      for (int kk = 0; kk < kNT / 2; ++kk) {
        pv_kstep<P, kDT / 2>(
            o, lf, p_fragment<P>(s[2 * kk], s[2 * kk + 1]),
            [&](int qd, uint32_t(&b)[4]) {
              cuda::ldmatrix_x4_trans(
                  b, v_base +
                         tile_offset<HD>(16 * kk + ((lane >> 3) & 1) * 8 + (lane & 7), 2 * qd + (lane >> 4)));
            },
            ones);
      }
      // A slot whose split ends here: its (m, l, O) into its fold, then afresh.
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float l = __shfl_sync(0xffffffffu, lf[2 * e], lane & ~3);
        if (tile != fold_at[e]) continue;
        float* row = acc_o + (16 * warp + gid + 8 * e) * (HD + 8) + 2 * tig;
        if (tile < per[e]) {  // the first split: taken as is
          acc_m[e] = m[e];
          acc_l[e] = l;
#pragma unroll
          for (int dt = 0; dt < kDT; ++dt) {
            *reinterpret_cast<float2*>(row + 8 * dt) = make_float2(o[dt][2 * e], o[dt][2 * e + 1]);
          }
        } else {
          float a, b;
          fold_weights(acc_m[e], m[e], a, b);
          acc_l[e] = fold(acc_l[e], a, l, b);
#pragma unroll
          for (int dt = 0; dt < kDT; ++dt) {
            const float2 x = *reinterpret_cast<const float2*>(row + 8 * dt);
            *reinterpret_cast<float2*>(row + 8 * dt) =
                make_float2(fold(x.x, a, o[dt][2 * e], b), fold(x.y, a, o[dt][2 * e + 1], b));
          }
        }
        m[e] = -INFINITY;
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt) o[dt][2 * e] = o[dt][2 * e + 1] = 0.0f;
        lf[2 * e] = lf[2 * e + 1] = 0.0f;
        fold_at[e] = tile == last[e] ? INT_MAX : min(tile + per[e], last[e]);
      }
    }
    __syncthreads();  // every warp is done with the stage before it is refilled
  }

#pragma unroll
  for (int e = 0; e < 2; ++e) {
    if (slot_pos[e] < 0) continue;
    const int s = 16 * warp + gid + 8 * e;
    const float inv = out_scale(acc_l[e], p.v_scale);
    const float* row = acc_o + s * (HD + 8) + 2 * tig;
    uint32_t* dst = reinterpret_cast<uint32_t*>(
        p.out + (static_cast<int64_t>(t0 + s / G) * p.n_heads + kvh * G + s % G) * HD);
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) {
      const float2 x = *reinterpret_cast<const float2*>(row + 8 * dt);
      dst[4 * dt + tig] = cuda::Elem<T>::pack2(out_elem(x.x, inv), out_elem(x.y, inv));
    }
  }
}

// The converted f16 tile (fp8 pools), two stages of K and V, the slots' folds.
template <typename T, typename KV, int HD>
constexpr int query_smem_bytes() {
  return converted_bytes<T, KV, HD>(2) + 2 * static_cast<int>(stage_bytes<KV, HD>()) + kSlots * (HD + 8) * 4;
}

template <typename T, typename KV, int HD>
void opt_in() {
  NS_CUDA_CHECK(cudaFuncSetAttribute(query_tile_kernel<T, KV, HD>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     query_smem_bytes<T, KV, HD>()));
  NS_CUDA_CHECK(cudaFuncSetAttribute(tile_decode_kernel<T, KV, HD, 2>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     decode_smem_bytes<T, KV, HD>(2)));
  NS_CUDA_CHECK(cudaFuncSetAttribute(tile_decode_kernel<T, KV, HD, 3>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     decode_smem_bytes<T, KV, HD>(3)));
}

// The query tiles: the list kernel, then the tiles (after it, always dependent).
template <typename T, typename KV, int HD>
void launch_query(const TileParams<T>& p, int n_kv, int32_t* tiles, cuda::Stream stream,
                  bool dependent_launch) {
  cuda::launch_maybe_pdl(dependent_launch, tile_list_kernel<T>, dim3(1), dim3(kListThreads), 0, stream, p,
                         tiles);
  NS_CUDA_CHECK_LAUNCH();
  cuda::launch_pdl(query_tile_kernel<T, KV, HD>,
                   dim3(static_cast<unsigned>(n_kv), static_cast<unsigned>(p.n_tiles)), dim3(kTileThreads),
                   query_smem_bytes<T, KV, HD>(), stream, p);
  NS_CUDA_CHECK_LAUNCH();
}

// The decode rows, in launches of at most the workspace's rows: the splits,
// p.split_group a block, then (where a row has several) their fold.
template <typename T, typename KV, int HD>
void launch_decode(TileParams<T> p, int n_kv, int n_decode, int grid_splits, int stages, int max_rows,
                   cuda::Stream stream, bool dependent_launch) {
  auto kernel = stages == 2 ? tile_decode_kernel<T, KV, HD, 2> : tile_decode_kernel<T, KV, HD, 3>;
  const int grid_y = (grid_splits + p.split_group - 1) / p.split_group;
  for (int r0 = 0, rows = 0; r0 < n_decode; r0 += rows) {
    rows = std::min({max_rows, n_decode - r0, int{65535}});
    p.decode_offset = r0;
    cuda::launch_maybe_pdl(
        dependent_launch, kernel,
        dim3(static_cast<unsigned>(n_kv), static_cast<unsigned>(grid_y), static_cast<unsigned>(rows)),
        dim3(kTileThreads), decode_smem_bytes<T, KV, HD>(stages), stream, p);
    NS_CUDA_CHECK_LAUNCH();
    if (grid_splits > 1) {
      cuda::launch_pdl(tile_reduce_kernel<T, HD>,
                       dim3(static_cast<unsigned>(rows), static_cast<unsigned>(p.n_heads)), dim3(32), 0,
                       stream, p);
      NS_CUDA_CHECK_LAUNCH();
    }
  }
}

}  // namespace

void opt_in_tile_kernels() {
  opt_in<__nv_bfloat16, __nv_bfloat16, 64>();
  opt_in<__nv_bfloat16, __nv_bfloat16, 128>();
  opt_in<__half, __half, 64>();
  opt_in<__half, __half, 128>();
  opt_in<__nv_bfloat16, uint8_t, 64>();
  opt_in<__nv_bfloat16, uint8_t, 128>();
}

int query_tile_count(const DeviceBatch& batch, int n_rep) {
  NS_CHECK(n_rep >= 1 && n_rep <= kSlots)
      << "query tiles: n_rep " << n_rep << " outside [1, " << kSlots << "]";
  int n = 0;
  for (int t = 0; t < batch.num_tokens(); ++t)
    n += query_tile_starts(batch.host_row_meta(), batch.host_positions(), t, kSlots / n_rep,
                           batch.num_tokens());
  return n;
}

int tile_decode_splits(const DeviceBatch& batch) {
  if (batch.num_decode_rows() == 0) return 0;
  const int tiles = (batch.max_context_len() + kTileKeys - 1) / kTileKeys;
  return std::min(kMaxSplits, (tiles + kMinSplitTiles - 1) / kMinSplitTiles);
}

TileDecodeShape tile_decode_shape(const DeviceBatch& batch, int n_kv, int sm_count, DType kv_dtype, int group,
                                  int stages) {
  const int splits = tile_decode_splits(batch);
  const int64_t blocks = int64_t{batch.num_decode_rows()} * n_kv * splits;
  if (group == 0) {
    group = 1;
    while (kv_dtype == DType::kF8E4M3 && 2 * group <= kMaxSplitGroup && 4 * group <= splits &&
           blocks / (2 * group) >= kGroupBlocksPerSm * int64_t{sm_count})
      group *= 2;
  }
  NS_CHECK(group >= 1 && group <= kMaxSplitGroup && (group & (group - 1)) == 0)
      << "tile decode: split group " << group << " (1, 2 or 4)";
  const int64_t grid_blocks = int64_t{batch.num_decode_rows()} * n_kv * ((splits + group - 1) / group);
  if (stages == 0) stages = grid_blocks <= 2 * int64_t{sm_count} ? 3 : 2;
  NS_CHECK(stages >= 2 && stages <= 3) << "tile decode: stages " << stages << " outside [2, 3]";
  return {group, stages};
}

void launch_tiles(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool, const DeviceBatch& batch,
                  int n_rep, float scale, PagedAttentionWorkspaceCuda& ws, const Tensor& out,
                  cuda::Stream stream, int block_size_log2, bool dependent_launch, bool early_kv,
                  TileDecodeShape decode, const KvScales& kv_scales) {
  const int64_t block_size = int64_t{1} << block_size_log2, n_kv = k_pool.dim(2), hd = k_pool.dim(3);
  NS_CHECK(n_rep <= kTileMaxRep) << "tile attention: n_rep " << n_rep << " over " << kTileMaxRep;
  const int n_tiles = query_tile_count(batch, n_rep);
  NS_CHECK(n_tiles <= int64_t{ws.max_rows()} * PagedAttentionWorkspaceCuda::kMaxSplits && n_tiles <= 65535)
      << "query tiles: " << n_tiles << " tiles exceed the workspace";
  const int n_decode = batch.num_decode_rows();
  const int grid_splits = tile_decode_splits(batch);
  const bool fp8 = k_pool.dtype() == DType::kF8E4M3;
  const PoolStrides strides = pool_strides(block_size, n_kv, hd);
  NS_CHECK(strides.block <= INT32_MAX)
      << "tile attention: a KV block of " << strides.block << " elements (TileLoader's strides are 32-bit)";
  auto fill = [&]<typename T>(TileParams<T>& p) {
    p.q = q.data_as<const T>();
    p.out = out.data_as<T>();
    p.k_pool = k_pool.data();
    p.v_pool = v_pool.data();
    p.v_scale = fp8 ? kv_scales.v : 1.0f;
    p.strides = strides;
    p.row_meta = batch.row_meta();
    p.positions = batch.positions();
    p.block_tables = batch.block_tables();
    p.tiles = ws.items();
    p.n_tiles = n_tiles;
    p.decode_rows = batch.decode_rows();
    p.all_decode = n_decode == batch.num_tokens();
    p.partial_o = ws.partial_out();
    p.partial_ml = reinterpret_cast<float2*>(ws.partial_ml());
    p.num_tokens = batch.num_tokens();
    p.n_heads = static_cast<int>(n_kv * n_rep);
    p.n_rep = n_rep;
    p.rows_per_tile = kSlots / n_rep;
    p.block_size_log2 = block_size_log2;
    p.max_blocks_per_seq = batch.max_blocks_per_seq();
    p.scale_log2 = scale * kLog2e;
    if (fp8) p.scale_log2 *= kv_scales.k;  // the codes' scores times k_scale
    p.early_kv = early_kv && dependent_launch;
    p.split_group = decode.group;
  };
  auto run = [&]<typename T, typename KV, int HD>() {
    TileParams<T> p{};
    fill.template operator()<T>(p);
    // The query tiles first: the decode launch's early copies then overlap their tail.
    if (n_tiles > 0) launch_query<T, KV, HD>(p, static_cast<int>(n_kv), ws.items(), stream, dependent_launch);
    if (n_decode > 0) {
      launch_decode<T, KV, HD>(p, static_cast<int>(n_kv), n_decode, grid_splits, decode.stages, ws.max_rows(),
                               stream, dependent_launch || n_tiles > 0);
    }
  };
  auto by_hd = [&]<typename T, typename KV>() {
    if (hd == 64) return run.template operator()<T, KV, 64>();
    NS_CHECK(hd == 128) << "tile attention: head_dim " << hd << " (64 or 128)";
    run.template operator()<T, KV, 128>();
  };
  if (k_pool.dtype() == DType::kBF16) {
    by_hd.template operator()<__nv_bfloat16, __nv_bfloat16>();
  } else if (k_pool.dtype() == DType::kF8E4M3) {
    by_hd.template operator()<__nv_bfloat16, uint8_t>();  // bf16 q and out (paged_attention_cuda checked)
  } else {
    NS_CHECK(k_pool.dtype() == DType::kF16) << "tile attention: KV dtype " << dtype_name(k_pool.dtype());
    by_hd.template operator()<__half, __half>();
  }
}

}  // namespace nanoserve::paged_attention_kernels

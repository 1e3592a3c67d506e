// CUDA paged attention: KV write, split-KV attention (decode and extend in one
// kernel), and the split reduction. See paged_attention_cuda.cuh for the layout and
// docs/kernels.md for the design, its versions, predictions and measurements.
// This file is the host side (metadata upload, workspace, launch choices); the
// kernels are in paged_attention_kernels.cuh, paged_attention_reduce.cuh and
// paged_kv_write.cuh.
//
// Attention kernel (v9), one thread block of 4 warps per (query row, split, kv
// head group):
//  - the G <= 8 query heads that share a kv head are the n = 8 columns of
//    mma.m16n8k16 tiles whose A operand is K (or V), so each K/V byte of the
//    split is read from memory once for all of them (GQA), and S^T = K Q^T and
//    O^T += V^T P^T each cost one mma per 16 tokens x 16 dims instead of
//    scalar FMA chains;
//  - each warp streams its own tokens global -> shared with tensor copies
//    (TMA): one copy moves a 128-byte line of every slot of one head in one
//    pool block (a 5-d tensor map over the pool), so a warp-stage of 16 tokens
//    at head_dim 128 and block size 16 is 4 copies, not 32 row copies (a copy
//    costs the issuing warp about 70 cycles whatever its size). They complete
//    on the warp's mbarrier for that stage, 2 to 4 stages deep, land
//    128-byte-swizzled so ldmatrix is conflict-free, and are read back with
//    ldmatrix (.trans for V): warps never wait for each other until the end
//    of the split;
//  - launched with programmatic dependent launch, a block copies the rows of
//    positions written by earlier steps before it waits for the kernel before
//    it (one stage at a time: a stage's once the stage before has landed),
//    and only this step's rows (and q) after; the copies ask L2 to evict
//    their lines first (the history is read once a step);
//  - in a launch that fits at two blocks an SM (a small batch, one wave), a
//    split longer than its three stages holds its first tile in registers
//    and refills that stage at once: before the wait where the tile lies
//    before this step's rows (then all four tiles are resident when the wait
//    returns), else once q's loads are issued after it. The resident tiles
//    are computed as one batch (their S products are independent), bitwise
//    as one tile at a time;
//  - the softmax is online, in f32, in the log2 domain; P is rounded to the KV
//    dtype for the P V product (as flash attention does), l stays f32;
//  - in a step with a sequence of several rows, rows p and p + 1 (p even) of
//    one sequence share a block where the head group leaves room (2 G <= 8):
//    their G heads each are the 8 columns, each column masked at its own
//    row's causal end, so every column does the single-row operations and
//    the pair reads each K/V tile once (the block of row p + 1 returns);
//  - at the end the warps are merged in warp order through shared memory. A
//    row longer than one split writes (o, lse) partials, combined in split
//    order by one warp per head (the reduce kernel, one warp a block);
//  - over fp8 (E4M3) pools the copies move one byte an element, unswizzled,
//    and the warp dequantizes each landed stage in shared memory to the bf16
//    layout above (bf16(f32(q) * scale)): the rest is the bf16 kernel.

#include "ops/paged_attention/paged_attention_cuda.cuh"
#include "ops/paged_attention/paged_attention_tuning.cuh"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>

#include "core/cuda/cuda_check.cuh"
#include "ops/paged_attention/paged_attention_items.cuh"
#include "ops/paged_attention/paged_attention_kernels.cuh"
#include "ops/paged_attention/paged_attention_tiles.cuh"
#include "ops/paged_attention/paged_attention_tiles.h"
#include "ops/paged_attention/paged_kv_write.cuh"

namespace nanoserve {

namespace {

using namespace paged_attention_kernels;

// ---- dispatch ------------------------------------------------------------------

// Calls f.template operator()<T, HD, G>() for the runtime (dtype, head_dim, G).
template <typename F>
void dispatch(DType dtype, int head_dim, int g, F&& f) {
  auto by_g = [&]<typename T, int HD>() {
    switch (g) {
      case 1: return f.template operator()<T, HD, 1>();
      case 2: return f.template operator()<T, HD, 2>();
      case 4: return f.template operator()<T, HD, 4>();
      case 8: return f.template operator()<T, HD, 8>();
    }
    NS_CHECK(false) << "unsupported head group " << g;
  };
  auto by_hd = [&]<typename T>() {
    if (head_dim == 64) return by_g.template operator()<T, 64>();
    if (head_dim == 128) return by_g.template operator()<T, 128>();
    if (head_dim == 256) return by_g.template operator()<T, 256>();
    NS_CHECK(false) << "unsupported head_dim " << head_dim << " (64, 128 or 256)";
  };
  if (dtype == DType::kBF16) return by_hd.template operator()<__nv_bfloat16>();
  if (dtype == DType::kF16) return by_hd.template operator()<__half>();
  NS_CHECK(false) << "unsupported KV dtype " << dtype_name(dtype) << " (bf16 or f16)";
}

// The split kernel a launch runs, over a pool of KV (T, or E4M3 bytes). At
// head_dim 256 only the plain one: a held tile (128 more registers a thread
// there) and two column tiles (o and q doubled) would spill, and the plan asks
// for neither (plan_launch).
template <typename T, int HD, int G, typename KV = T>
auto split_kernel(bool hold, int col_tiles) {
  if constexpr (HD == 256) {
    NS_CHECK(!hold && col_tiles == 1) << "head_dim 256 runs the plain split kernel";
    return paged_attention_split_kernel<T, HD, G, false, 1, KV>;
  } else {
    return hold             ? paged_attention_split_kernel<T, HD, G, true, 1, KV>
           : col_tiles == 2 ? paged_attention_split_kernel<T, HD, G, false, 2, KV>
                            : paged_attention_split_kernel<T, HD, G, false, 1, KV>;
  }
}

int head_group_size(int n_rep) {
  return n_rep <= 1 ? 1 : n_rep <= 2 ? 2 : n_rep <= 4 ? 4 : 8;
}

// block_size, n_kv_heads, head_dim of a pool [num_blocks, block_size, n_kv_heads, head_dim].
struct PoolDims {
  int64_t block_size, n_kv, head_dim;
};
PoolDims pool_dims(const Tensor& pool) {
  return {pool.dim(1), pool.dim(2), pool.dim(3)};
}

// The 5-d tensor map of AttnParams over `pool` (bf16, f16 or f8e4m3, 16-byte
// aligned), with boxes of one line (64 elements: 128 bytes, swizzled; an fp8
// pool's 64 bytes, dense) of box_rows slots of one head.
CUtensorMap pool_tensor_map(void* encode_fn, const Tensor& pool, int box_rows) {
  const auto [block_size, n_kv, hd] = pool_dims(pool);
  const bool f8 = pool.dtype() == DType::kF8E4M3;
  const cuuint64_t elem = f8 ? 1 : 2;
  const cuuint64_t row = static_cast<cuuint64_t>(hd) * elem;  // bytes of one head's row
  // Innermost first: elements of a line, lines of a row, head, slot, block.
  const cuuint64_t dims[5] = {static_cast<cuuint64_t>(kLineElems), static_cast<cuuint64_t>(hd / kLineElems),
                              static_cast<cuuint64_t>(n_kv), static_cast<cuuint64_t>(block_size),
                              static_cast<cuuint64_t>(pool.dim(0))};
  // Bytes, dimensions 1..4.
  const cuuint64_t strides[4] = {kLineElems * elem, row, row * dims[2], row * dims[2] * dims[3]};
  const cuuint32_t box[5] = {static_cast<cuuint32_t>(kLineElems), 1, 1, static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t elem_strides[5] = {1, 1, 1, 1, 1};
  NS_CHECK(reinterpret_cast<uintptr_t>(pool.data()) % 16 == 0) << "a pool must be 16-byte aligned";
  CUtensorMap map;
  const CUresult r = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(encode_fn)(
      &map, f8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_UINT16, 5,
      const_cast<void*>(pool.data()), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      f8 ? CU_TENSOR_MAP_SWIZZLE_NONE : CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  NS_CHECK(r == CUDA_SUCCESS) << "cuTensorMapEncodeTiled failed (" << static_cast<int>(r) << ") for pool "
                              << pool.shape_string();
  return map;
}

int log2_exact(int64_t x) {
  int r = 0;
  while ((int64_t{1} << r) < x) ++r;
  return (int64_t{1} << r) == x ? r : -1;
}

}  // namespace

// ---- workspace -----------------------------------------------------------------

PagedAttentionWorkspaceCuda::PagedAttentionWorkspaceCuda(int32_t max_rows, int32_t n_heads, int32_t head_dim)
    : max_rows_(max_rows), n_heads_(n_heads), head_dim_(head_dim) {
  NS_CHECK(max_rows > 0 && n_heads > 0 && (head_dim == 64 || head_dim == 128 || head_dim == 256))
      << "workspace: rows " << max_rows << ", heads " << n_heads << ", head_dim " << head_dim;
  partial_out_ = cuda::empty(DType::kF32, {max_rows, n_heads, kMaxSplits, head_dim});
  partial_lse_ = cuda::empty(DType::kF32, {max_rows, n_heads, kMaxSplits});
  partial_ml_ = cuda::empty(DType::kF32, {max_rows, n_heads, kMaxSplits, 2});
  items_ = cuda::empty(DType::kI32, {int64_t{max_rows} * kMaxSplits});
  int device = 0;
  NS_CUDA_CHECK(cudaGetDevice(&device));
  NS_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
  // The driver's tensor map encoder, through the runtime (no link to the driver library).
  cudaDriverEntryPointQueryResult found{};
  NS_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &encode_tensor_map_, 12000,
                                                 cudaEnableDefault, &found));
  NS_CHECK(found == cudaDriverEntryPointSuccess && encode_tensor_map_ != nullptr)
      << "the CUDA driver has no cuTensorMapEncodeTiled";
  // Opt every attention kernel into its dynamic shared memory (over the 48 KB
  // default) once, here, outside any step loop or graph capture.
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int hd : {64, 128, 256}) {
      for (int g : {1, 2, 4, 8}) {
        dispatch(dt, hd, g, [&]<typename T, int HD, int G>() {
          auto opt_in = [&]<typename KV>() {
            const bool plain_only = HD == 256;
            for (auto [hold, col_tiles] : {std::pair{false, 1}, std::pair{true, 1}, std::pair{false, 2}}) {
              if (plain_only && (hold || col_tiles != 1)) continue;
              NS_CUDA_CHECK(cudaFuncSetAttribute(split_kernel<T, HD, G, KV>(hold, col_tiles),
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 smem_bytes(HD, max_stages(HD))));
            }
          };
          opt_in.template operator()<T>();
          // The fp8 pool's kernels (bf16 q): a stage is the bf16 one, dequantized in place.
          if constexpr (std::is_same_v<T, __nv_bfloat16>) opt_in.template operator()<uint8_t>();
        });
      }
    }
  }
  opt_in_tile_kernels();
}

// ---- the launch plan ---------------------------------------------------------------

namespace {

// What a call launches, from the host's view of the batch: every value here
// is baked into a launch (and so into a captured graph).
struct LaunchPlan {
  int n_groups = 0, grid_splits = 0, stages = 0;
  bool hold = false;
  bool pair_rows = false;  // PagedAttentionTuning::pair_rows, with a sequence of several rows
  int col_tiles = 1;       // the kernel's column tiles: 2 where rows share blocks and no tile is held
  int window = 1;          // with pair_rows, the rows of a window (window_rows)
  int tile = 0, max_splits = 0, min_tiles = 0;
  int sliding_window = 0;  // AttnParams::sliding_window
};

// The rows [r0, r0 + rows) of a call in one launch each (the workspace's rows
// at most, and grid.z's 65535): f(r0, rows).
template <typename F>
void for_each_launch(int64_t t_all, const PagedAttentionWorkspaceCuda& ws, F&& f) {
  for (int64_t r0 = 0, rows = 0; r0 < t_all; r0 += rows) {
    rows = std::min<int64_t>({ws.max_rows(), t_all - r0, 65535});
    f(r0, rows);
  }
}

// With pair_rows, the length of a launch's block list (attention_items_kernel's), from the host's metadata.
int launch_items(const DeviceBatch& batch, const LaunchPlan& lp, int64_t r0, int64_t rows) {
  int n = 0;
  for (int64_t t = r0; t < r0 + rows; ++t) {
    n += row_blocks(batch.host_row_meta(), batch.host_positions(), static_cast<int>(r0),
                    static_cast<int>(r0 + rows), static_cast<int>(t), lp.window, lp.tile, lp.max_splits,
                    lp.min_tiles, lp.sliding_window);
  }
  return n;
}

LaunchPlan plan_launch(const DeviceBatch& batch, int64_t n_kv, int n_rep, int64_t hd,
                       const PagedAttentionWorkspaceCuda& ws, const PagedAttentionTuning& options,
                       int sliding_window) {
  const int max_splits = options.max_splits > 0 ? options.max_splits : kMaxSplits;
  const int min_tiles = options.min_split_tiles > 0 ? options.min_split_tiles : kMinSplitTiles;
  LaunchPlan lp;
  const int g = head_group_size(n_rep);
  lp.n_groups = (n_rep + g - 1) / g;
  // n_splits is not monotonic in ctx (2048 tokens may split 32 ways, 2100 only
  // 17), so the grid covers the most any row up to the longest context can have.
  const int tile = tile_tokens(static_cast<int>(hd));
  lp.tile = tile;
  lp.max_splits = max_splits;
  lp.min_tiles = min_tiles;
  lp.grid_splits =
      std::min(max_splits, ((batch.max_context_len() + tile - 1) / tile + min_tiles - 1) / min_tiles);
  // Deeper pipelines cost occupancy; they pay when the grid is one short wave
  // (a small batch), where each block's latency chain is the whole call. Three
  // stages (two blocks an SM) rather than four (one) let the next call's blocks
  // start their early copies beside this call's.
  const int64_t blocks =
      std::min<int64_t>({ws.max_rows(), batch.num_tokens(), 65535}) * lp.grid_splits * n_kv * lp.n_groups;
  // A stage beyond the longest split's tiles would only cost shared memory.
  const int split_tiles = plan_splits(batch.max_context_len(), tile, max_splits, min_tiles).split_len / tile;
  lp.stages =
      options.stages > 0
          ? options.stages
          : std::max(2, std::min(split_tiles, blocks <= 2 * int64_t{ws.sm_count()} ? 3 : kDefaultStages));
  NS_CHECK(lp.stages >= 2 && lp.stages <= max_stages(static_cast<int>(hd)))
      << "stages " << lp.stages << " at head_dim " << hd;
  const bool plain_only = hd == 256;  // split_kernel
  // Holding a tile in registers costs the third block an SM: only for a
  // launch that fits at two (at its depth of three stages), and only if a
  // split has a tile to refill.
  lp.hold = options.hold_first_tile && !plain_only && blocks <= 2 * int64_t{ws.sm_count()} &&
            lp.stages == kHoldStages && split_tiles > lp.stages;
  lp.pair_rows = options.pair_rows && batch.num_tokens() > batch.num_seqs();
  lp.col_tiles = lp.pair_rows && !lp.hold && !plain_only ? 2 : 1;
  lp.window = lp.pair_rows ? window_rows(g, lp.col_tiles) : 1;
  lp.sliding_window = sliding_window;
  return lp;
}

}  // namespace

uint64_t paged_attention_cuda_launch_key(const DeviceBatch& batch, const Tensor& k_pool, int n_rep,
                                         const PagedAttentionWorkspaceCuda& ws,
                                         const PagedAttentionTuning& options, int sliding_window) {
  NS_CHECK(batch.num_tokens() <= ws.max_rows())
      << "a launch key is for a call of one launch: " << batch.num_tokens() << " tokens, " << ws.max_rows()
      << " workspace rows";
  if (options.tiles) {
    const TileDecodeShape decode = tile_decode_shape(batch, static_cast<int>(k_pool.dim(2)), ws.sm_count(),
                                                     k_pool.dtype(), options.split_group, options.stages);
    return uint64_t{1} << 63 | static_cast<uint64_t>(query_tile_count(batch, n_rep)) |
           static_cast<uint64_t>(batch.num_decode_rows()) << 24 |
           static_cast<uint64_t>(tile_decode_splits(batch)) << 48 |
           static_cast<uint64_t>(decode.stages) << 56 | static_cast<uint64_t>(decode.group) << 59;
  }
  const auto [block_size, n_kv, hd] = pool_dims(k_pool);
  (void)block_size;
  const LaunchPlan lp = plan_launch(batch, n_kv, n_rep, hd, ws, options, sliding_window);
  const uint64_t items =
      lp.pair_rows ? static_cast<uint64_t>(launch_items(batch, lp, 0, batch.num_tokens())) : 0;
  return static_cast<uint64_t>(lp.grid_splits) | static_cast<uint64_t>(lp.stages) << 8 |
         static_cast<uint64_t>(lp.hold) << 16 | static_cast<uint64_t>(lp.pair_rows) << 17 |
         static_cast<uint64_t>(lp.col_tiles) << 18 | items << 32;
}

// ---- entry points --------------------------------------------------------------

bool paged_attention_tiles_support(int head_dim, int n_rep, int sliding_window, float softcap, bool sinks,
                                   DType kv_dtype) {
  return (head_dim == 64 || head_dim == 128) && n_rep >= 1 && n_rep <= kTileMaxRep && sliding_window == 0 &&
         softcap == 0.0f && !sinks &&
         (kv_dtype == DType::kBF16 || kv_dtype == DType::kF16 || kv_dtype == DType::kF8E4M3);
}

int paged_attention_cuda_num_splits(int ctx, int head_dim, const PagedAttentionTuning& options) {
  const int max_splits = options.max_splits > 0 ? options.max_splits : kMaxSplits;
  const int min_tiles = options.min_split_tiles > 0 ? options.min_split_tiles : kMinSplitTiles;
  return plan_splits(ctx, tile_tokens(head_dim), max_splits, min_tiles).n_splits;
}

void paged_kv_write_cuda(const Tensor& k, const Tensor& v, const DeviceBatch& batch, const Tensor& k_pool,
                         const Tensor& v_pool, cuda::Stream stream, const KvScales& scales) {
  NS_CHECK(k.device() == Device::kCUDA && v.device() == Device::kCUDA && k_pool.device() == Device::kCUDA &&
           v_pool.device() == Device::kCUDA)
      << "paged_kv_write_cuda: tensors must be on the CUDA device";
  NS_CHECK(k_pool.ndim() == 4 && k_pool.shape() == v_pool.shape()) << "pools " << k_pool.shape_string();
  const bool f8 = k_pool.dtype() == DType::kF8E4M3;
  const DType kv_dt = f8 ? DType::kBF16 : k_pool.dtype();
  NS_CHECK(k.dtype() == kv_dt && v.dtype() == kv_dt && v_pool.dtype() == k_pool.dtype())
      << "K/V dtype must equal the pool dtype (bf16 into an fp8 pool)";
  NS_CHECK(!f8 || (kv_scale_valid(scales.k) && kv_scale_valid(scales.v)))
      << "KV scales " << scales.k << ", " << scales.v << " must be finite and > 0";
  const auto [block_size, n_kv, hd] = pool_dims(k_pool);
  const int bs_log2 = log2_exact(block_size);
  NS_CHECK(bs_log2 >= 0) << "block_size " << block_size << " must be a power of two";
  NS_CHECK(k.ndim() == 3 && k.dim(0) == batch.num_tokens() && k.dim(1) == n_kv && k.dim(2) == hd &&
           v.shape() == k.shape())
      << "k " << k.shape_string() << " for " << batch.num_tokens() << " tokens into pool "
      << k_pool.shape_string();
  const int64_t head_bytes = dtype_bytes(k.dtype(), hd);
  NS_CHECK(head_bytes % 16 == 0) << "a head's row must be whole 16-byte chunks";
  if (batch.num_tokens() == 0) return;
  if (f8) {
    const int head_items = static_cast<int>(hd / 8);
    const int items = static_cast<int>(n_kv) * head_items;
    const int threads = std::min(256, (items + 31) / 32 * 32);
    paged_kv_write_f8_kernel<<<batch.num_tokens(), threads, 0, stream>>>(
        k.data_as<const uint4>(), v.data_as<const uint4>(), k_pool.data_as<uint2>(), v_pool.data_as<uint2>(),
        batch.slot_mapping(), static_cast<int>(n_kv), head_items, bs_log2,
        pool_strides(block_size, n_kv, head_items), scales.k, scales.v);
    NS_CUDA_CHECK_LAUNCH();
    return;
  }
  const int head_chunks = static_cast<int>(head_bytes / 16);
  const int chunks = static_cast<int>(n_kv) * head_chunks;
  const int threads = std::min(256, (chunks + 31) / 32 * 32);
  paged_kv_write_kernel<<<batch.num_tokens(), threads, 0, stream>>>(
      k.data_as<const uint4>(), v.data_as<const uint4>(), k_pool.data_as<uint4>(), v_pool.data_as<uint4>(),
      batch.slot_mapping(), static_cast<int>(n_kv), head_chunks, bs_log2,
      pool_strides(block_size, n_kv, head_chunks));
  NS_CUDA_CHECK_LAUNCH();
}

void paged_attention_cuda(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                          const DeviceBatch& batch, int n_rep, float scale, PagedAttentionWorkspaceCuda& ws,
                          const Tensor& out, cuda::Stream stream, const PagedAttentionTuning& options,
                          int sliding_window, float softcap, const float* sinks, const KvScales& kv_scales) {
  NS_CHECK(q.device() == Device::kCUDA && out.device() == Device::kCUDA && k_pool.device() == Device::kCUDA &&
           v_pool.device() == Device::kCUDA)
      << "paged_attention_cuda: tensors must be on the CUDA device";
  NS_CHECK(k_pool.ndim() == 4 && k_pool.shape() == v_pool.shape()) << "pools " << k_pool.shape_string();
  const bool f8 = k_pool.dtype() == DType::kF8E4M3;
  const DType dt = f8 ? DType::kBF16 : k_pool.dtype();  // of q and out
  NS_CHECK(q.dtype() == dt && out.dtype() == dt && v_pool.dtype() == k_pool.dtype())
      << "q, out and pools must share a dtype (bf16 q and out over fp8 pools)";
  NS_CHECK(!f8 || (kv_scale_valid(kv_scales.k) && kv_scale_valid(kv_scales.v)))
      << "KV scales " << kv_scales.k << ", " << kv_scales.v << " must be finite and > 0";
  const auto [block_size, n_kv, hd] = pool_dims(k_pool);
  const int bs_log2 = log2_exact(block_size);
  NS_CHECK(bs_log2 >= 3) << "block_size " << block_size << " must be a power of two >= 8";
  NS_CHECK(n_rep >= 1) << "n_rep " << n_rep;
  const int64_t n_heads = n_kv * n_rep;
  const int64_t t_all = batch.num_tokens();
  NS_CHECK(q.ndim() == 3 && q.dim(0) == t_all && q.dim(1) == n_heads && q.dim(2) == hd &&
           out.shape() == q.shape())
      << "q " << q.shape_string() << ", out " << out.shape_string() << " for " << t_all << " tokens, "
      << n_heads << " heads of " << hd;
  NS_CHECK(ws.n_heads() == n_heads && ws.head_dim() == hd) << "workspace made for other heads";
  NS_CHECK(static_cast<int64_t>(batch.max_context_len()) <= int64_t{batch.max_blocks_per_seq()} * block_size)
      << "context " << batch.max_context_len() << " exceeds the block table";
  const int max_splits = options.max_splits > 0 ? options.max_splits : kMaxSplits;
  const int min_tiles = options.min_split_tiles > 0 ? options.min_split_tiles : kMinSplitTiles;
  NS_CHECK(max_splits <= kMaxSplits) << "max_splits " << max_splits;
  NS_CHECK(sliding_window >= 0) << "sliding window " << sliding_window;
  NS_CHECK(softcap >= 0.0f && std::isfinite(softcap)) << "softcap " << softcap;
  if (t_all == 0) return;
  if (options.tiles) {
    NS_CHECK(paged_attention_tiles_support(static_cast<int>(hd), n_rep, sliding_window, softcap,
                                           sinks != nullptr, k_pool.dtype()))
        << "the tile arithmetic serves bf16, f16 and fp8 pools of head_dim 64 or 128, at most " << kTileMaxRep
        << " query heads a kv head, without a sliding window, soft-capping or sinks";
    launch_tiles(q, k_pool, v_pool, batch, n_rep, scale, ws, out, stream, bs_log2, options.dependent_launch,
                 options.early_kv,
                 tile_decode_shape(batch, static_cast<int>(k_pool.dim(2)), ws.sm_count(), k_pool.dtype(),
                                   options.split_group, options.stages),
                 kv_scales);
    return;
  }

  const LaunchPlan plan = plan_launch(batch, n_kv, n_rep, hd, ws, options, sliding_window);
  const int g = head_group_size(n_rep);
  const int n_groups = plan.n_groups, grid_splits = plan.grid_splits;
  // The launches for a pool of KV elements (T, or E4M3 bytes).
  auto launch = [&]<typename T, int HD, int G, typename KV>() {
    AttnParams<T> p{};
    const int box_rows = static_cast<int>(std::min<int64_t>(block_size, Geometry<HD>::kWarpTokens));
    p.k_map = pool_tensor_map(ws.encode_tensor_map(), k_pool, box_rows);
    p.v_map = pool_tensor_map(ws.encode_tensor_map(), v_pool, box_rows);
    p.q = q.data_as<const T>();
    p.out = out.data_as<T>();
    p.row_meta = batch.row_meta();
    p.positions = batch.positions();
    p.block_tables = batch.block_tables();
    p.partial_out = ws.partial_out();
    p.partial_lse = ws.partial_lse();
    p.n_heads = static_cast<int>(n_heads);
    p.n_kv_heads = static_cast<int>(n_kv);
    p.n_rep = n_rep;
    p.n_groups = n_groups;
    p.block_size_log2 = bs_log2;
    p.max_blocks_per_seq = batch.max_blocks_per_seq();
    p.max_splits = max_splits;
    p.min_split_tiles = min_tiles;
    p.stages = plan.stages;
    const bool hold = plan.hold;
    p.early_kv = options.early_kv && options.dependent_launch;
    p.pair_rows = plan.pair_rows;
    p.hold_before_wait = options.hold_before_wait;
    p.scale_log2 = scale * kLog2e;
    p.sliding_window = plan.sliding_window;
    p.softcap = softcap;
    p.scale = scale;
    p.sinks = sinks;
    p.k_scale = kv_scales.k;
    p.v_scale = kv_scales.v;
    p.items = ws.items();
    for_each_launch(t_all, ws, [&](int64_t r0, int64_t rows) {
      p.row_offset = static_cast<int>(r0);
      p.row_end = static_cast<int>(r0 + rows);
      cudaLaunchAttribute pdl[1];
      pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      pdl[0].val.programmaticStreamSerializationAllowed = 1;
      // (splits, rows) beyond the head groups, or the block list's items.
      dim3 grid(static_cast<unsigned>(n_kv * n_groups), grid_splits, static_cast<unsigned>(rows));
      if (plan.pair_rows) {
        p.n_items = launch_items(batch, plan, r0, rows);
        constexpr int kMaxY = 32768;
        grid.y = static_cast<unsigned>(std::min(p.n_items, kMaxY));
        grid.z = static_cast<unsigned>((p.n_items + kMaxY - 1) / kMaxY);
        cudaLaunchConfig_t icfg{};
        icfg.gridDim = dim3(1);
        icfg.blockDim = dim3(kItemsThreads);
        icfg.stream = stream;
        icfg.attrs = pdl;
        icfg.numAttrs = options.dependent_launch ? 1 : 0;
        auto items_kernel = attention_items_kernel<T, HD, window_rows(G, 1)>;
        if constexpr (HD != 256) {
          if (plan.col_tiles == 2) items_kernel = attention_items_kernel<T, HD, window_rows(G, 2)>;
        }
        NS_CUDA_CHECK(cudaLaunchKernelEx(&icfg, items_kernel, p, ws.items()));
        NS_CUDA_CHECK_LAUNCH();
      }
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = grid;
      cfg.blockDim = dim3(kThreads);
      cfg.dynamicSmemBytes = static_cast<size_t>(smem_bytes(HD, p.stages));
      cfg.stream = stream;
      cfg.attrs = pdl;
      cfg.numAttrs = options.dependent_launch ? 1 : 0;
      NS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, split_kernel<T, HD, G, KV>(hold, plan.col_tiles), p));
      NS_CUDA_CHECK_LAUNCH();
      if (grid_splits > 1) {
        cudaLaunchConfig_t rcfg{};
        // One warp a block: a small batch's partials spread over as many SMs as there are heads.
        rcfg.gridDim = dim3(static_cast<unsigned>(rows), static_cast<unsigned>(n_heads));
        rcfg.blockDim = dim3(32);
        rcfg.stream = stream;
        rcfg.attrs = pdl;
        rcfg.numAttrs = 1;
        NS_CUDA_CHECK(cudaLaunchKernelEx(&rcfg, paged_attention_reduce_kernel<T, HD>, p));
        NS_CUDA_CHECK_LAUNCH();
      }
    });
  };
  dispatch(dt, static_cast<int>(hd), g, [&]<typename T, int HD, int G>() {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      if (f8) return launch.template operator()<T, HD, G, uint8_t>();
    }
    launch.template operator()<T, HD, G, T>();
  });
}

namespace {

PagedAttentionTuning tuning_of(PagedAttentionKernel kernel) {
  PagedAttentionTuning t;
  t.tiles = kernel == PagedAttentionKernel::kTiles;
  return t;
}

}  // namespace

void paged_attention_cuda(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                          const DeviceBatch& batch, int n_rep, float scale, PagedAttentionWorkspaceCuda& ws,
                          const Tensor& out, cuda::Stream stream, PagedAttentionKernel kernel,
                          int sliding_window, float softcap, const float* sinks, const KvScales& kv_scales) {
  paged_attention_cuda(q, k_pool, v_pool, batch, n_rep, scale, ws, out, stream, tuning_of(kernel),
                       sliding_window, softcap, sinks, kv_scales);
}

uint64_t paged_attention_cuda_launch_key(const DeviceBatch& batch, const Tensor& k_pool, int n_rep,
                                         const PagedAttentionWorkspaceCuda& ws, PagedAttentionKernel kernel,
                                         int sliding_window) {
  return paged_attention_cuda_launch_key(batch, k_pool, n_rep, ws, tuning_of(kernel), sliding_window);
}

}  // namespace nanoserve

#pragma once
// The CUDA paged attention's split kernel (device code, decode and extend),
// included only by paged_attention_cuda.cu, which launches it. What the
// kernels share is in paged_attention_common.cuh, the split reduction in
// paged_attention_reduce.cuh, the KV write in paged_kv_write.cuh. See
// paged_attention_cuda.cu for the design summary and docs/kernels.md for its
// versions and measurements.

#include <type_traits>

#include "ops/paged_attention/paged_attention_common.cuh"
#include "ops/paged_attention/paged_attention_fp8.cuh"
#include "ops/paged_attention/paged_attention_reduce.cuh"

namespace nanoserve::paged_attention_kernels {

// kHold: at kHoldStages stages, a split with more tiles than stages reads its
// first tile into registers and refills its stage at once, rather than after
// the tile is computed: before the dependency wait where the tile lies before
// this step's rows (hold_before_wait), else once q's loads are issued after
// it; then it computes its resident tiles (four, or three) as one batch (64
// more registers: two blocks an SM).
//
// kNT: column tiles of the mma (8 columns each): with 2, twice the rows of a
// sequence's window share a block (launches with rows of several positions).
// Blocks an SM the registers must allow: three, two where a tile is held,
// one at head_dim 256 (its shared memory fits only one).
constexpr int split_min_blocks(int head_dim, bool hold) {
  return head_dim == 256 ? 1 : hold ? 2 : 3;
}

// KV: the pool's element, T or uint8_t (E4M3 with the layer's scales). An
// fp8 tile lands dense (each 64-element line of a row is 64 bytes, at the
// start of its region) and is dequantized in place, once it has landed, to the
// swizzled T layout a tensor copy of a T pool leaves: from there on the
// kernel is the T kernel, over the dequantized values.
template <typename T, int HD, int G, bool kHold, int kNT, typename KV = T>
__global__ void __launch_bounds__(kThreads, split_min_blocks(HD, kHold))
    paged_attention_split_kernel(const __grid_constant__ AttnParams<T> p) {
  using Geo = Geometry<HD>;
  constexpr bool kF8 = std::is_same_v<KV, uint8_t>;
  static_assert(kF8 || std::is_same_v<KV, T>, "a pool of T or of E4M3 bytes");
  constexpr int kCopyLineBytes = kF8 ? kLineBytes / 2 : kLineBytes;  // a line of the pool, as copied
  constexpr int kWT = Geo::kWarpTokens;
  // S^T = K Q^T and O^T += V^T P^T: K and V are the mma's A operand (16
  // tokens, or 16 dims, a tile), the head group its n = 8 columns.
  constexpr int kMT = kWT / 16;  // token m-tiles of S^T (16 tokens each)
  constexpr int kKS = HD / 16;   // k-steps of S^T (16 dims each)
  constexpr int kDT = HD / 16;   // dim m-tiles of O^T (16 dims each)
  static_assert(G <= 8, "a head group fills at most the 8 columns of the mma tile");
  static_assert(kNT == 1 || (kNT == 2 && !kHold), "two column tiles only in the plain kernel");
  constexpr int kCols = 8 * kNT;
  constexpr int kWindow = window_rows(G, kNT);
  static_assert(Geometry<HD>::kTileTokens % kWindow == 0, "a window of rows ends its contexts in one tile");
  // From the first 1024-byte boundary: [kWarps][stages][K,V][kHalves][kWT
  // lines], then the mbarriers [kWarps][kMaxStages]; the stages are reused by
  // the merge.
  extern __shared__ uint4 smem_raw[];
  char* smem = reinterpret_cast<char*>(smem_raw) +
               ((kSwizzleAlign - cuda::smem_addr(smem_raw) % kSwizzleAlign) % kSwizzleAlign);

  launch_dependents();  // the next kernel may be scheduled while this grid runs

  // Head groups vary fastest in the grid: the blocks of all kv heads of one
  // (row, split) run together and read whole slots (n_kv_heads x head_dim
  // contiguous) between them, not one head's 1/n_kv of every DRAM page.
  // Beyond them, the grid is (split, row), or with pair_rows the launch's
  // list of (leading row, split), the kernel before's output.
  const int head_group = blockIdx.x;
  int split = blockIdx.y, row_local = blockIdx.z;
  if (p.pair_rows) {
    wait_primary_grid();
    const int64_t i = blockIdx.y + static_cast<int64_t>(gridDim.y) * blockIdx.z;
    if (i >= p.n_items) return;
    const int item = __ldcg(p.items + i);
    split = item & ((1 << kItemSplitBits) - 1);
    row_local = item >> kItemSplitBits;
  }
  const int t = p.row_offset + row_local;
  const int kvh = head_group / p.n_groups;
  const int group = head_group % p.n_groups;
  const RowInfo ri = row_info(p, t);
  // With a sliding window the splits cover [first, ctx) (sliding_first).
  const int first = sliding_first(ri.ctx, p.sliding_window, Geo::kTileTokens);
  const SplitPlan plan = plan_splits(ri.ctx - first, Geo::kTileTokens, p.max_splits, p.min_split_tiles);
  if (split >= plan.n_splits) return;
  // The rows of t's window in this launch share its block (the list holds
  // only a window's leading row): the columns are G heads of row t, then G
  // of row t + 1, and so on. Every column performs the single-row kernel's
  // operations with its own row's end; the copies and the tiles run to the
  // last row's end.
  int n_rows = 1;
  if (p.pair_rows) {
#pragma unroll
    for (int i = 1; i < kWindow; ++i) n_rows += n_rows == i && continues_window(p, t, ri, i, kWindow);
  }
  const int begin = first + split * plan.split_len;
  const int end = min(ri.ctx + n_rows - 1, begin + plan.split_len);  // the block's: its last row's
  const int n_tiles = (end - begin + Geo::kTileTokens - 1) / Geo::kTileTokens;

  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int32_t* table = p.block_tables + static_cast<int64_t>(ri.seq) * p.max_blocks_per_seq;
  // The block-table entries of this warp's part of `tile`: its kWT tokens span
  // at most 4 blocks (aligned, block_size >= 8), lane j < 4 holds the j-th.
  auto table_entries = [&](int tile) {
    const int first_pos = begin + tile * Geo::kTileTokens + warp * kWT;
    const int blk = (first_pos >> p.block_size_log2) + lane;
    return lane < 4 && tile < n_tiles && (blk << p.block_size_log2) < end ? __ldg(table + blk) : 0;
  };
  const int stages = p.stages;
  int32_t entries[kMaxStages];
#pragma unroll
  for (int i = 0; i < kMaxStages; ++i) entries[i] = i < stages ? table_entries(i) : 0;
  const bool hold = kHold && stages == kHoldStages && n_tiles > stages;
  const int32_t hold_entry = hold ? table_entries(stages) : 0;  // the first refill's
  const int bs_mask = (1 << p.block_size_log2) - 1;
  constexpr int kStageBytes = Geo::kStageBytes;
  char* warp_smem = smem + warp * stages * kStageBytes;
  // One mbarrier a stage of this warp, after every stage's rows.
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + kWarps * stages * kStageBytes) + warp * kMaxStages;
  if (lane < stages) mbarrier_init(bars + lane, 1);
  fence_for_async_proxy();  // the inits, before the copy engine writes here
  __syncwarp();

  // A warp's kWT tokens of a tile are n_box boxes of box_rows slots of one
  // block each (block_size >= 8 and warp ranges aligned, so at most 4). For
  // each box, K and V, and each line of the row, one lane issues one tensor
  // copy. `part` picks the boxes: 0 those wholly before `early_until` (their
  // rows were written by earlier steps), 1 the others, 2 all. With `expect`,
  // the stage's barrier is first told the bytes of every box inside the split.
  // Rows of a box past the split's end are copied too (the block is the
  // sequence's); they are masked out of S, and their V rows zeroed on arrival.
  const int box_rows = min(1 << p.block_size_log2, kWT);
  const int n_box = kWT / box_rows;
  const int per_kv = n_box * Geo::kHalves;  // copies of K (or V) a warp-stage
  auto issue = [&](int tile, int slot, int32_t entry, bool expect, int part, int early_until) {
    char* sk = warp_smem + slot * kStageBytes;
    const int warp_begin = begin + tile * Geo::kTileTokens + warp * kWT;
    const int boxes =
        tile < n_tiles && warp_begin < end ? min(n_box, (end - warp_begin + box_rows - 1) / box_rows) : 0;
    if (expect) {
      if (lane == 0)
        mbarrier_arrive_expect_tx(bars + slot, boxes * 2 * Geo::kHalves * box_rows * kCopyLineBytes);
      __syncwarp();  // expected before any copy can complete
    }
    const int r = lane % per_kv, b = r / Geo::kHalves, h = r % Geo::kHalves;
    const int first = warp_begin + b * box_rows;
    const int32_t blk = __shfl_sync(0xffffffffu, entry, min(3, (b * box_rows) >> p.block_size_log2));
    const bool early = first + box_rows <= early_until;
    if (lane < 2 * per_kv && b < boxes && (part == 2 || (part == 0) == early)) {
      const bool is_v = lane >= per_kv;
      const int in_block = first & bs_mask;
      void* dst = sk + (is_v ? Geo::kKvBytes : 0) + h * Geo::kRegionBytes + b * box_rows * kCopyLineBytes;
      const CUtensorMap* map = is_v ? &p.v_map : &p.k_map;
      // Evict first: the history is read once a step; q, the partials and the metadata stay cached.
      tensor_copy_5d_hinted(dst, map, 0, h, kvh, in_block, blk, bars + slot, cuda::l2_evict_first_policy());
    }
  };

  const int gid = lane / 4, tig = lane % 4;  // mma fragment coordinates
  const float scale_log2 = p.scale_log2;
  // Soft-capping as the reference writes it: softcap * tanh((s scale) /
  // softcap), a division as transformers has it, then to the log2 domain.
  // The branch is uniform over the launch; without a cap the arithmetic is
  // the one before, bit for bit.
  auto capped_log2 = [&](float s) {
    return __fmul_rn(__fmul_rn(p.softcap, tanhf(__fdiv_rn(__fmul_rn(s, p.scale), p.softcap))), kLog2e);
  };
  const int head0 = group * G;  // first head of the group within the kv head's n_rep
  // Column c is head head0 + c % G of row t + c / G; column tile j holds
  // columns 8 j .. 8 j + 7.
  bool head_valid[kNT];
  int col_end[kNT][2];    // the end of the lane's two columns' rows in each column tile
  int col_begin[kNT][2];  // and their first visible position (a sliding window's; else 0)
#pragma unroll
  for (int j = 0; j < kNT; ++j) {
    head_valid[j] = 8 * j + gid < G * n_rows && head0 + (8 * j + gid) % G < p.n_rep;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int col_ctx = ri.ctx + (8 * j + 2 * tig + e) / G;
      col_end[j][e] = min(col_ctx, begin + plan.split_len);
      col_begin[j][e] = p.sliding_window > 0 ? max(0, col_ctx - p.sliding_window) : 0;
    }
  }

  // The A fragments, read from a stage: K's for tokens 16 mt .. 16 mt + 15
  // at k-step ks (the four 8x8 matrices: tokens 0-7 and 8-15 of dims 0-7, then
  // of dims 8-15), and V^T's for dims 16 dt .. 16 dt + 15 of the same tokens
  // (transposed: dims 0-7 and 8-15 of tokens 0-7, then of tokens 8-15).
  // A lane's row is at row_chunk_offset(16 mt + r, 2 ks + c) for its r
  // and c in 0..1. Its swizzle depends on r & 7 and on (2 ks + c) & 7 only, so
  // it is one of four per-lane offsets (ks & 3), and the rest of the address
  // is a constant: no swizzle arithmetic per ldmatrix.
  uint32_t k_off[4], v_off[4];
#pragma unroll
  for (int q4 = 0; q4 < 4; ++q4) {
    k_off[q4] = row_chunk_offset<HD>((lane & 7) + 8 * ((lane >> 3) & 1), 2 * q4 + (lane >> 4));
    v_off[q4] =
        Geo::kKvBytes + row_chunk_offset<HD>((lane & 7) + 8 * (lane >> 4), 2 * q4 + ((lane >> 3) & 1));
  }
  // stage: the warp-stage's shared address.
  auto smem_k = [&](uint32_t stage) {
    return [stage, &k_off](int mt, int ks, uint32_t(&a)[4]) {
      ldmatrix_x4(a, stage + k_off[ks & 3] + (ks >> 2) * Geo::kRegionBytes + mt * 16 * kLineBytes);
    };
  };
  auto smem_v = [&](uint32_t stage) {
    return [stage, &v_off](int mt, int dt, uint32_t(&a)[4]) {
      ldmatrix_x4_trans(a, stage + v_off[dt & 3] + (dt >> 2) * Geo::kRegionBytes + mt * 16 * kLineBytes);
    };
  };
  const uint32_t warp_stages = cuda::smem_addr(warp_smem);

  // An fp8 stage, once landed, to the T layout (paged_attention_fp8.cuh).
  auto dequantize_stage = [&](int slot) {
    if constexpr (kF8) dequantize_f8_stage<T, HD>(warp_smem + slot * kStageBytes, lane, p.k_scale, p.v_scale);
  };

  // The first tile (whole: the split has more) into registers, then its
  // stage refilled at once.
  uint32_t hk[kMT][kKS][4], hv[kMT][kDT][4];
  auto hold_first_tile = [&](int part, int early_until) {
    mbarrier_wait(bars, 0);
    dequantize_stage(0);
    const auto from_k = smem_k(warp_stages);
    const auto from_v = smem_v(warp_stages);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks) from_k(mt, ks, hk[mt][ks]);
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) from_v(mt, dt, hv[mt][dt]);
    }
    // The reads have completed once their registers are used.
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks) {
        asm volatile("" : "+r"(hk[mt][ks][0]), "+r"(hk[mt][ks][1]), "+r"(hk[mt][ks][2]), "+r"(hk[mt][ks][3]));
      }
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) {
        asm volatile("" : "+r"(hv[mt][dt][0]), "+r"(hv[mt][dt][1]), "+r"(hv[mt][dt][2]), "+r"(hv[mt][dt][3]));
      }
    }
    __syncwarp();
    issue(stages, 0, hold_entry, true, part, early_until);
  };
  // Every stage in flight from the start. Launched with programmatic dependent
  // launch, the kernel before this one may still be writing q, this step's K/V
  // or reading the partials; positions before this step's first were written
  // by earlier steps, so their rows are copied before the wait, the rest after.
  // A split wholly before them paces its early copies: stage i's once stage
  // i - 1 has landed.
  const int early_until = p.early_kv ? ri.stable : 0;
  const bool paced = end <= early_until;
#pragma unroll
  for (int i = 0; i < kMaxStages; ++i) {
    if (i < stages && i < n_tiles) {
      if (paced && i >= 1) mbarrier_wait(bars + i - 1, 0);
      issue(i, i, entries[i], true, 0, early_until);
    }
  }
  // With the first tile wholly written by earlier steps, it can be held (and
  // its stage refilled with the history part of the next tile) before the
  // wait, paced like one more stage: then no refill is on the chain after it.
  const bool hold_early = hold && p.hold_before_wait && begin + Geo::kTileTokens <= early_until;
  if (kHold && hold_early) {
    if (paced) mbarrier_wait(bars + stages - 1, 0);
    hold_first_tile(0, early_until);
  }
  wait_primary_grid();
  // The rest of the first stages' copies, in the stages whose tokens reach this
  // step's rows (for a decode row, at most the last split's last tile). The
  // others skip the issue code: after the wait it is the chain's first piece.
#pragma unroll
  for (int i = 0; i < kMaxStages; ++i) {
    if (i < stages && i < n_tiles && min(end, begin + (i + 1) * Geo::kTileTokens) > early_until) {
      issue(i, i, entries[i], false, 1, early_until);
    }
  }
  if (kHold && hold_early && min(end, begin + (stages + 1) * Geo::kTileTokens) > early_until) {
    issue(stages, 0, hold_entry, false, 1, early_until);  // the refilled tile's rows of this step
  }

  // Q^T as mma B fragments: column 8 j + gid of column tile j (zero past the rows' heads).
  uint32_t qb[kNT][kKS][2];
#pragma unroll
  for (int j = 0; j < kNT; ++j) {
    // The lane's pairs of q: words 8 ks + tig and 8 ks + 4 + tig of its row,
    // one base address and immediate offsets.
    const int c = 8 * j + gid;
    const uint32_t* q_words =
        reinterpret_cast<const uint32_t*>(
            p.q + (static_cast<int64_t>(t + c / G) * p.n_heads + kvh * p.n_rep + head0 + c % G) * HD) +
        tig;
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks) qb[j][ks][0] = qb[j][ks][1] = 0u;
    if (head_valid[j]) {
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks) {
        qb[j][ks][0] = q_words[8 * ks];
        qb[j][ks][1] = q_words[8 * ks + 4];
      }
    }
  }

  if (kHold && hold && !hold_early) hold_first_tile(2, 0);  // after q's loads, which would queue behind it

  // The lane's two columns of each column tile j: 8 j + 2 tig + e, e = 0, 1.
  float m[kNT][2], l[kNT][2];  // running max (the same in the 8 lanes of a column); this lane's share
                               // of the running sum (its tokens)
  float o[kNT][kDT][4];  // O^T fragments: [e] dim 16 dt + gid, [2 + e] dim 16 dt + gid + 8; column 2 tig + e
#pragma unroll
  for (int j = 0; j < kNT; ++j) {
    m[j][0] = m[j][1] = -INFINITY;
    l[j][0] = l[j][1] = 0.0f;
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) o[j][dt][0] = o[j][dt][1] = o[j][dt][2] = o[j][dt][3] = 0.0f;
  }

  // N tiles of this warp's kWT tokens each, from warp_begin[n]: S^T = K Q^T,
  // the online softmax down each column, O^T += V^T P^T. k_frag(n, mt, ks, a)
  // gives tile n's K fragment for tokens 16 mt .. 16 mt + 15 at k-step ks;
  // v_frag(n, mt, dt, a) its V^T fragment for dims 16 dt .. 16 dt + 15 of the
  // same tokens. P^T's C fragment becomes the B fragment of the P V product by
  // transposing its two 8x8 halves in registers (movmatrix). The S products of
  // all N tiles are independent and computed first; the softmax and O then take
  // the tiles in order, with the same operations as one tile at a time, so the
  // result is bitwise that of N single-tile calls: only the latency differs.
  // The softmax arithmetic uses explicitly rounded operations (__fmul_rn and
  // kin), which the compiler never contracts into a fused multiply-add: whether
  // it would fuse l * corr + p depends on the shape of the code around it, and
  // the held and the plain kernel must agree to the bit.
  auto compute_tiles = [&]<int N>(const int(&warp_begin)[N], auto&& k_frag, auto&& v_frag) {
    float s[N][kMT][kNT][4];  // [e] token 16 mt + gid, [2 + e] token 16 mt + gid + 8; column 2 tig + e
#pragma unroll
    for (int n = 0; n < N; ++n) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int j = 0; j < kNT; ++j)
          s[n][mt][j][0] = s[n][mt][j][1] = s[n][mt][j][2] = s[n][mt][j][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < kKS; ++ks) {
          uint32_t a[4];
          k_frag(n, mt, ks, a);
#pragma unroll
          for (int j = 0; j < kNT; ++j) Elem<T>::mma(s[n][mt][j], a, qb[j][ks][0], qb[j][ks][1]);
        }
      }
    }
#pragma unroll
    for (int n = 0; n < N; ++n) {
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        // Online softmax down each column (the 8 lanes of a column hold 2 tokens
        // of each m-tile).
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int pos = warp_begin[n] + 16 * mt + gid + 8 * (r >> 1);
            const bool visible = pos < col_end[j][r & 1] && pos >= col_begin[j][r & 1];
            s[n][mt][j][r] = !visible           ? -INFINITY
                             : p.softcap > 0.0f ? capped_log2(s[n][mt][j][r])
                                                : __fmul_rn(s[n][mt][j][r], scale_log2);
            tile_max[r & 1] = fmaxf(tile_max[r & 1], s[n][mt][j][r]);
          }
        }
        float corr[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
#pragma unroll
          for (int off = 4; off < 32; off <<= 1) {
            tile_max[e] = fmaxf(tile_max[e], __shfl_xor_sync(0xffffffffu, tile_max[e], off));
          }
          const float m_new = fmaxf(m[j][e], tile_max[e]);
          // exp2(-inf) = 0 on the first visible tile.
          corr[e] = m_new == -INFINITY ? 1.0f : cuda::exp2_approx(__fsub_rn(m[j][e], m_new));
          m[j][e] = m_new;
          l[j][e] = __fmul_rn(l[j][e], corr[e]);
        }
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt) {
#pragma unroll
          for (int r = 0; r < 4; ++r) o[j][dt][r] = __fmul_rn(o[j][dt][r], corr[r & 1]);
        }
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int e = r & 1;
            s[n][mt][j][r] =
                m[j][e] == -INFINITY ? 0.0f : cuda::exp2_approx(__fsub_rn(s[n][mt][j][r], m[j][e]));
            l[j][e] = __fadd_rn(l[j][e], s[n][mt][j][r]);
          }
        }
      }
      // O^T += V^T P^T, 16 tokens (one S^T m-tile) per k-step; a V fragment serves every column tile.
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        uint32_t pb[kNT][2];
#pragma unroll
        for (int j = 0; j < kNT; ++j) {
          pb[j][0] = cuda::movmatrix_trans(Elem<T>::pack2(s[n][mt][j][0], s[n][mt][j][1]));
          pb[j][1] = cuda::movmatrix_trans(Elem<T>::pack2(s[n][mt][j][2], s[n][mt][j][3]));
        }
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt) {
          uint32_t a[4];
          v_frag(n, mt, dt, a);
#pragma unroll
          for (int j = 0; j < kNT; ++j) Elem<T>::mma(o[j][dt], a, pb[j][0], pb[j][1]);
        }
      }
    }
  };
  // V rows past the end (copied with their box, or never copied): P is 0
  // there, which keeps O exact only if the rows are finite.
  auto zero_v_past_end = [&](int slot, int warp_begin) {
    if (warp_begin + kWT <= end) return;
    char* sv = warp_smem + slot * kStageBytes + Geo::kKvBytes;
    const int valid = max(0, end - warp_begin);
    for (int i = lane; i < Geo::kHalves * kWT * (kLineBytes / 16); i += 32) {
      const int line = i / (kLineBytes / 16), row = line % kWT;
      if (row >= valid) {
        *reinterpret_cast<uint4*>(sv + line * kLineBytes + i % (kLineBytes / 16) * 16) =
            make_uint4(0, 0, 0, 0);
      }
    }
    __syncwarp();
  };
  int tile = 0, slot = 0, phase = 0;
  if constexpr (kHold) {
    if (hold) {
      // The resident tiles at once: the first from registers, the others
      // from their stages (tile n in stage n % kHoldStages), which are then
      // refilled. Held before the wait, the first tile's stage already holds
      // the fourth tile.
      const auto from_k = [&](int n, int mt, int ks, uint32_t(&a)[4]) {
        if (n == 0) {
#pragma unroll
          for (int i = 0; i < 4; ++i) a[i] = hk[mt][ks][i];
        } else {
          smem_k(warp_stages + n % kHoldStages * kStageBytes)(mt, ks, a);
        }
      };
      const auto from_v = [&](int n, int mt, int dt, uint32_t(&a)[4]) {
        if (n == 0) {
#pragma unroll
          for (int i = 0; i < 4; ++i) a[i] = hv[mt][dt][i];
        } else {
          smem_v(warp_stages + n % kHoldStages * kStageBytes)(mt, dt, a);
        }
      };
      auto batch = [&]<int N>() {
        int warp_begin[N];
#pragma unroll
        for (int n = 0; n < N; ++n) {
          warp_begin[n] = begin + n * Geo::kTileTokens + warp * kWT;
          if (n > 0) {
            mbarrier_wait(bars + n % kHoldStages, (n / kHoldStages) & 1);
            dequantize_stage(n % kHoldStages);
          }
        }
        if constexpr (N > kHoldStages) zero_v_past_end(0, warp_begin[kHoldStages]);  // a last tile
        compute_tiles(warp_begin, from_k, from_v);
      };
      if (hold_early) {
        batch.template operator()<kHoldStages + 1>();
      } else {
        batch.template operator()<kHoldStages>();
      }
      const int done = hold_early ? kHoldStages + 1 : kHoldStages;
      // Every lane is done reading the stages: refill them (held after the
      // wait, the first stage's refill is already in flight).
      __syncwarp();
#pragma unroll
      for (int i = 0; i < kHoldStages; ++i) {
        const int next = done + i;
        if ((hold_early || i > 0) && next < n_tiles) {
          issue(next, next % kHoldStages, table_entries(next), true, 2, 0);
        }
      }
      tile = done, slot = done % kHoldStages, phase = (done / kHoldStages) & 1;
    }
  }
  int32_t next_entry = table_entries(tile + stages);
  for (; tile < n_tiles; ++tile) {
    mbarrier_wait(bars + slot, phase);  // the stage's rows have landed
    dequantize_stage(slot);
    const uint32_t stage = warp_stages + slot * kStageBytes;
    const int warp_begin = begin + tile * Geo::kTileTokens + warp * kWT;
    zero_v_past_end(slot, warp_begin);
    const int wb[1] = {warp_begin};
    compute_tiles(
        wb, [&](int, int mt, int ks, uint32_t(&a)[4]) { smem_k(stage)(mt, ks, a); },
        [&](int, int mt, int dt, uint32_t(&a)[4]) { smem_v(stage)(mt, dt, a); });
    __syncwarp();  // every lane is done reading this stage: refill it
    if (tile + stages < n_tiles) issue(tile + stages, slot, next_entry, true, 2, 0);
    next_entry = table_entries(tile + stages + 1);  // a whole iteration to arrive
    if (++slot == stages) slot = 0, phase ^= 1;
  }
#pragma unroll
  for (int j = 0; j < kNT; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
#pragma unroll
      for (int off = 4; off < 32; off <<= 1) l[j][e] += __shfl_xor_sync(0xffffffffu, l[j][e], off);
    }
  }
  __syncthreads();  // every warp is done with its stages: reuse them for the merge

  // Merge the warps, in warp order, through shared memory.
  // A head's row is padded by 4 floats: the 4 columns a store writes at
  // once then fall in different banks.
  constexpr int kOS = HD + 4;
  constexpr int kC = kCols;
  float* sm_o = reinterpret_cast<float*>(smem);  // [kWarps][kC][kOS]
  float* sm_m = sm_o + kWarps * kC * kOS;        // [kWarps][kC]
  float* sm_l = sm_m + kWarps * kC;              // [kWarps][kC]
  const int n_cols = G * n_rows;
#pragma unroll
  for (int j = 0; j < kNT; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int g = 8 * j + 2 * tig + e;
      if (g < n_cols) {
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt) {
          sm_o[(warp * kC + g) * kOS + 16 * dt + gid] = o[j][dt][e];
          sm_o[(warp * kC + g) * kOS + 16 * dt + gid + 8] = o[j][dt][2 + e];
        }
        if (gid == 0) {
          sm_m[warp * kC + g] = m[j][e];
          sm_l[warp * kC + g] = l[j][e];
        }
      }
    }
  }
  __syncthreads();

  // Four consecutive dims a thread: one 16-byte store of the partial.
  for (int idx = tid; idx < n_cols * HD / 4; idx += kThreads) {
    const int g = 4 * idx / HD, d = 4 * idx % HD;
    const int hg = g % G, tr = t + g / G, row_r = row_local + g / G;  // the column's head and row
    if (head0 + hg >= p.n_rep) continue;
    float m_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, sm_m[w * kC + g]);
    float l_all = 0.0f;
    float a_all[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = sm_m[w * kC + g];
      const float f = mw == -INFINITY ? 0.0f : exp2f(__fsub_rn(mw, m_all));
      l_all = fmaf(sm_l[w * kC + g], f, l_all);
      const float4 ow = *reinterpret_cast<const float4*>(sm_o + (w * kC + g) * kOS + d);
      a_all[0] = fmaf(ow.x, f, a_all[0]);
      a_all[1] = fmaf(ow.y, f, a_all[1]);
      a_all[2] = fmaf(ow.z, f, a_all[2]);
      a_all[3] = fmaf(ow.w, f, a_all[3]);
    }
    const int qh = kvh * p.n_rep + head0 + hg;
    // One division, then products: four IEEE divisions are four branchy
    // sequences on the chain, and they split the wide store. A row of one
    // split takes its sink into the denominator here (a partial never does:
    // combine_splits adds it once).
    if (p.sinks != nullptr && plan.n_splits == 1) {
      l_all = __fadd_rn(l_all, exp2f(__fsub_rn(__fmul_rn(__ldg(p.sinks + qh), kLog2e), m_all)));
    }
    const float inv = 1.0f / l_all;
#pragma unroll
    for (int k = 0; k < 4; ++k) a_all[k] = __fmul_rn(a_all[k], inv);
    if (plan.n_splits == 1) {
      uint2 packed;
      packed.x = Elem<T>::pack2(a_all[0], a_all[1]);
      packed.y = Elem<T>::pack2(a_all[2], a_all[3]);
      *reinterpret_cast<uint2*>(p.out + (static_cast<int64_t>(tr) * p.n_heads + qh) * HD + d) = packed;
    } else {
      const int64_t ph = static_cast<int64_t>(row_r) * p.n_heads + qh;
      *reinterpret_cast<float4*>(p.partial_out + (ph * kMaxSplits + split) * HD + d) =
          make_float4(a_all[0], a_all[1], a_all[2], a_all[3]);
      if (d == 0) p.partial_lse[ph * kMaxSplits + split] = m_all + log2f(l_all);
    }
  }
}

}  // namespace nanoserve::paged_attention_kernels

#pragma once
// The decode kernel of the tile arithmetic (paged_attention_tiles.cuh), device
// code included only by paged_attention_tiles.cu: a sequence's single row of
// the step, one thread block of four warps per (row, kv head, split).
//
// The row's n_rep heads are the slots (A rows 0 .. n_rep - 1 of the mma; at
// most 16). The block walks its split's 64-key tiles through S cp.async
// stages (a launch choice: it changes no sum); for each tile
//   warp w computes S for keys 16 w .. 16 w + 15 (the query-tiled kernel's
//   n-tiles 2 w and 2 w + 1, from the same operands), and its max per slot;
//   the four maxima meet in shared memory: every warp takes the same step;
//   warp w writes P's A fragment of k-step w, and after a barrier reads all
//   four and computes O's n-tiles of dims HD / 4 w .. HD / 4 (w + 1) - 1, and
//   l's n-tile, over the four k-steps in order.
// A row of one split writes O / l; a row of several writes (m, l, O) partials,
// folded in split order by tile_reduce_kernel. A block walks p.split_group
// consecutive splits of its row (a launch choice: it changes no sum): the
// stages stream on across a split's end, where the block writes the split's
// partial and starts the next afresh, as a block of its own would.
//
// Launched with programmatic dependent launch, a block copies the tiles whose
// keys were all written by earlier steps (every tile of a decode row but its
// last) before it waits for the kernel before it; q after.
//
// Over an fp8 pool (KV = uint8_t) the stages hold the copied bytes. At a
// landed stage each warp reads its K fragments' codes into registers
// (k_codes: ldmatrix on the bytes, in the relabelled k order) while the
// block converts V into one f16 tile of its codes (ahead of the stages); one
// barrier later the stage is free and refilled, and the products run in f16
// (paged_attention_tiles.cuh).

#include "ops/paged_attention/paged_attention_tiles.cuh"

namespace nanoserve::paged_attention_kernels {

// The converted V tile (fp8 pools), the stages, then the four warps' maxima ([4][16] f32) and P's A
// fragments ([4][32] x 16 bytes).
template <typename T, typename KV, int HD>
constexpr int decode_smem_bytes(int stages) {
  return converted_bytes<T, KV, HD>(1) + stages * static_cast<int>(stage_bytes<KV, HD>()) + 4 * 16 * 4 +
         4 * 32 * 16;
}

// Entry i of this launch's decode rows: a step of decode rows alone is its
// rows in order (no load on the chain).
template <typename T>
__device__ __forceinline__ int decode_row(const TileParams<T>& p, int i) {
  return p.all_decode ? p.decode_offset + i : __ldg(p.decode_rows + p.decode_offset + i);
}

template <typename T, typename KV, int HD, int S>
requires(S == 2 || S == 3) __global__ void __launch_bounds__(kTileThreads, S == 3 ? 2 : 3)
    tile_decode_kernel(const __grid_constant__ TileParams<T> p) {
  constexpr int kKS = HD / 16;   // k-steps of S
  constexpr int kWDT = HD / 32;  // O's n-tiles (8 dims) a warp
  constexpr uint32_t kTileBytes = tile_bytes<HD>();
  constexpr bool kF8 = !std::is_same_v<T, KV>;
  using P = ProductT<T, KV>;  // the products' element
  constexpr uint32_t kConv = converted_bytes<T, KV, HD>(1), kStage = stage_bytes<KV, HD>();
  // [the converted V tile][stages][K, V][kTileKeys][HD], then red, then pa
  extern __shared__ uint4 smem_raw[];
  char* const smem_ptr = reinterpret_cast<char*>(smem_raw);
  const uint32_t smem = cuda::smem_addr(smem_raw);
  float* red = reinterpret_cast<float*>(smem_ptr + kConv + S * kStage);
  uint4* pa = reinterpret_cast<uint4*>(red + 4 * 16);  // [4 k-steps][32 lanes]

  launch_dependents();
  const int kvh = blockIdx.x, split0 = static_cast<int>(blockIdx.y) * p.split_group;
  // The step's metadata was uploaded before its first kernel: stable here.
  const int t = decode_row(p, static_cast<int>(blockIdx.z));
  const int seq = __ldg(p.row_meta + 2 * t), stable = __ldg(p.row_meta + 2 * t + 1);
  const int pos = __ldg(p.positions + t), ctx = pos + 1;
  const SplitPlan plan = tile_plan(ctx);
  if (split0 >= plan.n_splits) return;
  const int per = plan.split_len / kTileKeys;
  const int tile0 = split0 * per;
  const int n_t = min(per * p.split_group, (ctx + kTileKeys - 1) / kTileKeys - tile0);
  const int32_t* table = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks_per_seq;
  const int i = static_cast<int>(threadIdx.x);
  const int warp = i / 32, lane = i % 32, gid = lane / 4, tig = lane % 4;
  TileLoader<KV, T, HD> loader(p, table, kvh, tile0, ctx, i);
  auto load = [&](int n) { loader.copy(tile0 + n, smem + kConv + (n % S) * kStage); };
  // Tile n's landed stage, made readable: the address of its V tile. Over an
  // fp8 pool the warp's K codes go into `codes` and V is converted into the
  // f16 tile; a barrier orders the conversion before the reads, and the
  // stage is then free.
  auto ready = [&](int n, uint32_t(&codes)[kKS / 2][4]) -> uint32_t {
    if constexpr (kF8) {
#pragma unroll
      for (int pr = 0; pr < kKS / 2; ++pr)
        k_codes<HD>(codes[pr], smem + kConv + (n % S) * kStage, 16 * warp, pr, lane);
      convert_rows<HD, kTileKeys, 2 * kTileKeys>(smem_ptr + kConv + (n % S) * kStage, smem_ptr, i);
      __syncthreads();
      return smem;
    } else {
      return smem + (n % S) * kStage + kTileBytes;
    }
  };
  // Tile n's K B fragments of k-step ks: from the codes (fp8) or by ldmatrix from its stage.
  auto k_frag = [&](int n, const uint32_t(&codes)[kKS / 2][4], int ks, uint32_t(&b)[4]) {
    if constexpr (kF8) {
      k_fragment<HD>(codes, ks, b);
    } else {
      cuda::ldmatrix_x4(
          b, smem + (n % S) * kStage + tile_offset<HD>(16 * warp + x4_row(lane), 2 * ks + x4_chunk(lane)));
    }
  };

  // The first stages: those wholly written by earlier steps before the wait.
  // One commit group a tile (empty past the split), in tile order.
  int issued = 0;
  if (p.early_kv) {
    while (issued < S && issued < n_t && min(ctx, (tile0 + issued + 1) * kTileKeys) <= stable) {
      load(issued);
      cuda::cp_async_commit();
      ++issued;
    }
  }
  // At three stages, a split of more tiles holds its first tile's fragments
  // in registers and refills that stage with tile S at once: the whole split
  // (four tiles) is then in flight, before the wait where its first stages
  // were issued before it. The group of tile S follows the S first ones.
  uint32_t hk[kKS][4], hv[4][kWDT / 2][4];
  const bool hold = S == 3 && n_t > S;
  auto hold_first_tile = [&] {
    cuda::cp_async_wait<S - 1>();  // S groups committed: tile 0 has landed
    __syncthreads();
    uint32_t codes[kKS / 2][4];
    const uint32_t v_base = ready(0, codes);
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks) k_frag(0, codes, ks, hk[ks]);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (int qd = 0; qd < kWDT / 2; ++qd) {
        cuda::ldmatrix_x4_trans(hv[kk][qd],
                                v_base + tile_offset<HD>(16 * kk + ((lane >> 3) & 1) * 8 + (lane & 7),
                                                         2 * (warp * (kWDT / 2) + qd) + (lane >> 4)));
      }
    }
    __syncthreads();  // every warp has read the stage (and the converted tile)
    load(S);
    cuda::cp_async_commit();
  };
  const bool hold_early = hold && issued == S;
  if (hold_early) hold_first_tile();
  wait_primary_grid();  // q and this step's K/V come from the kernels before
  for (; issued < S; ++issued) {
    if (issued < n_t) load(issued);
    cuda::cp_async_commit();
  }
  if (hold && !hold_early) hold_first_tile();

  uint32_t qa[kKS][4];
  {
    const int h0 = gid, h1 = gid + 8;
    const uint32_t* q0 = reinterpret_cast<const uint32_t*>(
        p.q + (static_cast<int64_t>(t) * p.n_heads + kvh * p.n_rep + min(h0, p.n_rep - 1)) * HD);
    const uint32_t* q1 = reinterpret_cast<const uint32_t*>(
        p.q + (static_cast<int64_t>(t) * p.n_heads + kvh * p.n_rep + min(h1, p.n_rep - 1)) * HD);
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks) {
      qa[ks][0] = h0 < p.n_rep ? q_fragment<T, KV>(q0, ks, tig, 0) : 0u;
      qa[ks][1] = h1 < p.n_rep ? q_fragment<T, KV>(q1, ks, tig, 1) : 0u;
      qa[ks][2] = h0 < p.n_rep ? q_fragment<T, KV>(q0, ks, tig, 2) : 0u;
      qa[ks][3] = h1 < p.n_rep ? q_fragment<T, KV>(q1, ks, tig, 3) : 0u;
    }
  }

  float m[2] = {-INFINITY, -INFINITY};
  float o[kWDT][4], lf[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int dt = 0; dt < kWDT; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  const uint32_t ones = ones_column<P>(gid);

  // Tile n: k_frag(ks, b) gives the B fragment of S's n-tiles 2 w, 2 w + 1
  // at k-step ks, v_frag(kk, qd, b) V's for O's n-tiles of pair qd at k-step kk.
  auto tile_step = [&](int n, auto&& k_frag, auto&& v_frag) {
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks) {
      uint32_t b[4];
      k_frag(ks, b);
      cuda::Elem<P>::mma(s[0], qa[ks], b[0], b[1]);
      cuda::Elem<P>::mma(s[1], qa[ks], b[2], b[3]);
    }
    const int key0 = (tile0 + n) * kTileKeys + 16 * warp;
    float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        s[nt][r] = tile_score(s[nt][r], key0 + 8 * nt + 2 * tig + (r & 1), pos, p.scale_log2);
        tmax[r >> 1] = fmaxf(tmax[r >> 1], s[nt][r]);
      }
    }
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      tmax[e] = fmaxf(tmax[e], __shfl_xor_sync(0xffffffffu, tmax[e], 1));
      tmax[e] = fmaxf(tmax[e], __shfl_xor_sync(0xffffffffu, tmax[e], 2));
      if (tig == 0) red[warp * 16 + gid + 8 * e] = tmax[e];
    }
    __syncthreads();  // the four warps' maxima
    SoftmaxStep st[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = gid + 8 * e;
      const float tm = fmaxf(fmaxf(red[r], red[16 + r]), fmaxf(red[32 + r], red[48 + r]));
      st[e] = softmax_step(m[e], tm);
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int r = 0; r < 4; ++r) s[nt][r] = tile_prob(s[nt][r], st[r >> 1].base);
    }
    pa[warp * 32 + lane] = p_fragment<P>(s[0], s[1]);
    rescale(o, lf, st);
    __syncthreads();  // P's four k-steps
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      pv_kstep<P, kWDT / 2>(
          o, lf, pa[kk * 32 + lane], [&](int qd, uint32_t(&b)[4]) { v_frag(kk, qd, b); }, ones);
    }
  };

  // Split `split` ends: its O / l (a row of one split) or its partial, then
  // the next split's state afresh.
  const int64_t list_row = blockIdx.z;
  auto finish = [&](int split) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float l = __shfl_sync(0xffffffffu, lf[2 * e], lane & ~3);
      const int h = gid + 8 * e;
      if (h >= p.n_rep) continue;
      const int qh = kvh * p.n_rep + h;
      if (plan.n_splits == 1) {
        const float inv = out_scale(l, p.v_scale);
        uint32_t* dst = reinterpret_cast<uint32_t*>(p.out + (static_cast<int64_t>(t) * p.n_heads + qh) * HD);
#pragma unroll
        for (int dt = 0; dt < kWDT; ++dt) {
          dst[4 * (warp * kWDT + dt) + tig] =
              cuda::Elem<T>::pack2(out_elem(o[dt][2 * e], inv), out_elem(o[dt][2 * e + 1], inv));
        }
      } else {
        const int64_t ps = (list_row * p.n_heads + qh) * kMaxSplits + split;
        float2* dst = reinterpret_cast<float2*>(p.partial_o + ps * HD);
#pragma unroll
        for (int dt = 0; dt < kWDT; ++dt)
          dst[4 * (warp * kWDT + dt) + tig] = make_float2(o[dt][2 * e], o[dt][2 * e + 1]);
        if (warp == 0 && tig == 0) p.partial_ml[ps] = make_float2(m[e], l);
      }
    }
    m[0] = m[1] = -INFINITY;
#pragma unroll
    for (int r = 0; r < 4; ++r) lf[r] = 0.0f;
#pragma unroll
    for (int dt = 0; dt < kWDT; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  };
  int split = split0, split_left = per;  // the current split, its tiles not yet done
  auto split_end = [&](int n) {
    if (--split_left == 0 || n + 1 == n_t) {
      finish(split++);
      split_left = per;
    }
  };

  int n = 0;
  if (hold) {
    tile_step(
        0,
        [&](int ks, uint32_t(&b)[4]) {
          for (int j = 0; j < 4; ++j) b[j] = hk[ks][j];
        },
        [&](int kk, int qd, uint32_t(&b)[4]) {
          for (int j = 0; j < 4; ++j) b[j] = hv[kk][qd][j];
        });
    split_end(0);
    n = 1;
  }
  // Three barriers a tile: tile n landed (and every warp done with tile
  // n - 1), the maxima, P. Tile k's group is the k-th (a held tile's refill
  // is tile S's).
  //   16-bit pools: tile n - 1's stage is refilled after the first barrier,
  //   with tile n - 1 + S; tile n is done when at most S - 1 groups are
  //   pending at the first wait, S - 2 after.
  //   fp8 pools: a fourth barrier, after tile n's K codes are read and its V
  //   converted; the stage is then free and refilled at once with tile n + S,
  //   so S tiles are in flight during the products, not S - 1. S + n groups
  //   are committed at tile n's wait, which leaves S - 1 pending.
  for (; n < n_t; ++n) {
    if (kF8 || n == (hold ? 1 : 0)) {
      cuda::cp_async_wait<S - 1>();
    } else {
      cuda::cp_async_wait<S - 2>();
    }
    __syncthreads();
    if (!kF8 && n >= (hold ? 2 : 1)) {
      if (n - 1 + S < n_t) load(n - 1 + S);
      cuda::cp_async_commit();
    }
    uint32_t codes[kKS / 2][4];
    const uint32_t v_base = ready(n, codes);
    if (kF8) {
      if (n + S < n_t) load(n + S);
      cuda::cp_async_commit();
    }
    tile_step(
        n, [&](int ks, uint32_t(&b)[4]) { k_frag(n, codes, ks, b); },
        [&](int kk, int qd, uint32_t(&b)[4]) {
          cuda::ldmatrix_x4_trans(b, v_base + tile_offset<HD>(16 * kk + ((lane >> 3) & 1) * 8 + (lane & 7),
                                                              2 * (warp * (kWDT / 2) + qd) + (lane >> 4)));
        });
    split_end(n);
  }
}

// One warp per (decode row, query head): the row's split partials folded in
// split order, then O / l. Lane s holds split s's (m, l); lane j owns dims
// HD / 32 j ... The partials of kDepth splits are loaded before any is used:
// one round trip to L2 for up to kDepth splits, not one a split.
template <typename T, int HD>
__global__ void __launch_bounds__(32) tile_reduce_kernel(const __grid_constant__ TileParams<T> p) {
  constexpr int kVec = HD / 32;
  constexpr int kDepth = 16;
  launch_dependents();
  const int t = decode_row(p, static_cast<int>(blockIdx.x));
  const int qh = blockIdx.y;
  const int n_splits = tile_plan(__ldg(p.positions + t) + 1).n_splits;
  if (n_splits == 1) return;  // the decode kernel wrote this row
  wait_primary_grid();
  const int lane = static_cast<int>(threadIdx.x);
  const int64_t ps = (static_cast<int64_t>(blockIdx.x) * p.n_heads + qh) * kMaxSplits;
  const float2 ml = lane < n_splits ? __ldcg(p.partial_ml + ps + lane) : make_float2(0.0f, 0.0f);
  float v[kDepth][kVec];
  auto load = [&](int s0) {
#pragma unroll
    for (int i = 0; i < kDepth; ++i) {
      const float* src = p.partial_o + (ps + s0 + i) * HD + lane * kVec;
#pragma unroll
      for (int k = 0; k < kVec; k += 2) {
        const float2 x =
            s0 + i < n_splits ? __ldcg(reinterpret_cast<const float2*>(src + k)) : make_float2(0.0f, 0.0f);
        v[i][k] = x.x, v[i][k + 1] = x.y;
      }
    }
  };
  float acc_m = 0.0f, acc_l = 0.0f, acc[kVec];
  for (int s0 = 0; s0 < n_splits; s0 += kDepth) {
    load(s0);
#pragma unroll
    for (int i = 0; i < kDepth; ++i) {
      const int s = s0 + i;
      const float m_s = __shfl_sync(0xffffffffu, ml.x, s & 31), l_s = __shfl_sync(0xffffffffu, ml.y, s & 31);
      if (s >= n_splits) break;
      if (s == 0) {  // the first split, as is
        acc_m = m_s, acc_l = l_s;
#pragma unroll
        for (int k = 0; k < kVec; ++k) acc[k] = v[i][k];
      } else {
        float a, b;
        fold_weights(acc_m, m_s, a, b);
        acc_l = fold(acc_l, a, l_s, b);
#pragma unroll
        for (int k = 0; k < kVec; ++k) acc[k] = fold(acc[k], a, v[i][k], b);
      }
    }
  }
  const float inv = out_scale(acc_l, p.v_scale);
  T* dst = p.out + (static_cast<int64_t>(t) * p.n_heads + qh) * HD + lane * kVec;
#pragma unroll
  for (int k = 0; k < kVec; k += 2) {
    *reinterpret_cast<uint32_t*>(dst + k) =
        cuda::Elem<T>::pack2(out_elem(acc[k], inv), out_elem(acc[k + 1], inv));
  }
}

}  // namespace nanoserve::paged_attention_kernels

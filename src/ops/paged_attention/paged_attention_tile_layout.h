#pragma once
// Where the tile arithmetic's operands sit (paged_attention_tiles.cuh): the
// swizzled layouts of a tile and of a landed fp8 stage, the relabelled k
// order over fp8 pools, and the rows a lane addresses for ldmatrix.x4. Host
// and device: the kernels index with it, and
// tests/ops/paged_attention/paged_attention_tile_layout_test.cc checks on
// the host that both kernels' fragments pair the same dims of q and K and
// that the fp8 stage's ldmatrix reads are free of bank conflicts.
//
// mma.m16n8k16's fragments, for lane (gid, tig) = (lane / 4, lane % 4): A
// register r holds row gid + 8 (r & 1) at logical k 2 tig + 8 (r >> 1) and
// the next; B register r holds column gid at logical k 2 tig + 8 r and the
// next. Over fp8 pools a k-step's logical k are relabelled (the same 16 dims
// a step, so the same sums): logical 2 t, 2 t + 1 are dims 4 t, 4 t + 1 and
// logical 2 t + 8, 2 t + 9 dims 4 t + 2, 4 t + 3, so that a lane's K
// fragment is four consecutive bytes of a key row.

#include <cstdint>

#include "core/host_device.h"

namespace nanoserve::paged_attention_kernels {

constexpr int kTileKeys = 64;  // keys a tile

// Byte offset of 16-byte chunk c of row r in a [kTileKeys][HD] tile of 16-bit
// elements (XOR swizzled by row, so ldmatrix is conflict-free).
template <int HD>
NS_HOST_DEVICE constexpr uint32_t tile_offset(int r, int c) {
  return static_cast<uint32_t>(r * HD * 2 + ((c ^ (r & 7)) << 4));
}

// The same in a landed fp8 stage (HD bytes a row): chunk c of row r XOR
// swizzled so that the eight rows of an ldmatrix fall in eight distinct
// 16-byte units of a 128-byte line.
template <int HD>
NS_HOST_DEVICE constexpr uint32_t fp8_stage_offset(int r, int c) {
  constexpr int kChunks = HD / 16;
  return static_cast<uint32_t>(r * HD + ((c ^ ((r * kChunks / 8) & (kChunks - 1))) << 4));
}

// The word (element pair) of q's row that S's A register `reg` of k-step ks
// holds: dims 16 ks + 2 tig (+ 8 for reg 2, 3), or relabelled (fp8 pools)
// 16 ks + 4 tig (+ 2).
NS_HOST_DEVICE constexpr int q_word(bool relabelled, int ks, int tig, int reg) {
  const int hi = reg >> 1;
  return relabelled ? 8 * ks + 2 * tig + hi : 8 * ks + tig + 4 * hi;
}

// A relabelled K row's f16 chunk pair (16 dims: words 0 .. 3 the first
// chunk, 4 .. 7 the second): word w holds the code pair (dims 2 p, 2 p + 1
// of the step) p = relabelled_pair(w).
NS_HOST_DEVICE constexpr int relabelled_pair(int w) {
  return w < 4 ? 2 * w : 2 * (w - 4) + 1;
}

// ldmatrix.x4 over two 8-row n-tiles x two 16-byte chunks: lane gives the
// address of row x4_row(lane) (of 16) and chunk x4_chunk(lane) (of two), so
// that matrix j = lane / 8 is n-tile j / 2's chunk j % 2.
NS_HOST_DEVICE constexpr int x4_row(int lane) {
  return (lane >> 4) * 8 + (lane & 7);
}
NS_HOST_DEVICE constexpr int x4_chunk(int lane) {
  return (lane >> 3) & 1;
}

}  // namespace nanoserve::paged_attention_kernels

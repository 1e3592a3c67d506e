// The tile arithmetic's operand layout (paged_attention_tile_layout.h),
// checked on the host by following each lane's ldmatrix and mma fragment
// rules by hand:
//   - over fp8 pools, the decode kernel's K fragments (ldmatrix.x4 on the
//     landed fp8 stage, four codes a lane) and the query kernel's (the K rows
//     converted in the relabelled order, then ldmatrix.x4 on the f16 tile)
//     give each (lane, register, half) the same key and dim, and that dim is
//     the one q_word gives the A fragment at the same logical k;
//   - a k-step reads exactly its own 16 dims, in either order;
//   - every address of those reads is a distinct 16-byte unit, and each
//     ldmatrix phase of eight rows touches eight distinct bank groups.
// ldmatrix (non-transposed, b16): lane L gives the row address of matrix
// L / 8; lane (gid, tig) receives, of each matrix, row gid's 32-bit word tig.
// mma.m16n8k16: A register r is row gid + 8 (r & 1) at logical k 2 tig +
// 8 (r >> 1) + {0, 1}; B register r is column gid at logical k 2 tig + 8 r +
// {0, 1}.

#include "ops/paged_attention/paged_attention_tile_layout.h"

#include <gtest/gtest.h>

#include <utility>
#include <set>

namespace nanoserve::paged_attention_kernels {
namespace {

// A dim of a key row, with its key.
struct KeyDim {
  int key, dim;
  bool operator==(const KeyDim&) const = default;
};

// Inverse of an address formula over a [rows][chunks] layout: (row, chunk) of a 16-byte unit.
template <typename F>
std::pair<int, int> unit_at(F offset, int rows, int chunks, uint32_t addr) {
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < chunks; ++c) {
      if (offset(r, c) == addr) return {r, c};
    }
  }
  ADD_FAILURE() << "no unit at byte " << addr;
  return {0, 0};
}

// Each layout is a permutation of 16-byte units within a row (rows apart).
template <int HD>
void expect_units_distinct() {
  std::set<uint32_t> fp8, f16;
  for (int r = 0; r < kTileKeys; ++r) {
    for (int c = 0; c < HD / 16; ++c) {
      const uint32_t a = fp8_stage_offset<HD>(r, c);
      EXPECT_EQ(a % 16, 0u);
      EXPECT_EQ(a / HD, static_cast<uint32_t>(r)) << "fp8 row " << r << " chunk " << c;
      fp8.insert(a);
    }
    for (int c = 0; c < HD / 8; ++c) f16.insert(tile_offset<HD>(r, c));
  }
  EXPECT_EQ(fp8.size(), static_cast<size_t>(kTileKeys * HD / 16));
  EXPECT_EQ(f16.size(), static_cast<size_t>(kTileKeys * HD / 8));
}

// The decode kernel's K: k_codes(pr) for the warp's keys key0 .. key0 + 15
// (ldmatrix.x4 on the fp8 stage), then k_fragment(ks): what lane (gid, tig)
// multiplies at B register `reg` (0, 1: n-tile 0; 2, 3: n-tile 1), half h.
template <int HD>
KeyDim decode_k(int key0, int ks, int lane, int reg, int h) {
  const int gid = lane / 4, tig = lane % 4;
  const int pr = ks / 2, nt = reg / 2;
  const int j = 2 * nt + ks % 2;     // the matrix k_fragment takes
  const int src_lane = 8 * j + gid;  // the lane that addressed row gid of matrix j
  const uint32_t addr = fp8_stage_offset<HD>(key0 + x4_row(src_lane), 2 * pr + x4_chunk(src_lane));
  const auto [row, chunk] =
      unit_at([](int r, int c) { return fp8_stage_offset<HD>(r, c); }, kTileKeys, HD / 16, addr);
  // Word tig of the 16-byte row: bytes 4 tig .. 4 tig + 3; register reg % 2
  // is its pair reg % 2 (bytes 0, 1 or 2, 3), half h the pair's element.
  return {row, 16 * chunk + 4 * tig + 2 * (reg % 2) + h};
}

// The query kernel's K: the block's conversion writes K row r's fp8 chunk c
// (dims 16 c ..) as f16 chunks 2 c, 2 c + 1 whose word w holds code pair
// relabelled_pair(w); ldmatrix.x4 then reads n-tiles pr2, pr2 + 1 (keys 16
// pr2 ..) at k-step ks.
template <int HD>
KeyDim query_k(int pr2, int ks, int lane, int reg, int h) {
  const int gid = lane / 4, tig = lane % 4;
  const int nt = reg / 2, j = 2 * nt + reg % 2;  // matrix j gives register j (b[0..3])
  const int src_lane = 8 * j + gid;
  const uint32_t addr = tile_offset<HD>(16 * pr2 + x4_row(src_lane), 2 * ks + x4_chunk(src_lane));
  const auto [row, f16_chunk] =
      unit_at([](int r, int c) { return tile_offset<HD>(r, c); }, kTileKeys, HD / 8, addr);
  const int fp8_chunk = f16_chunk / 2, w = 4 * (f16_chunk % 2) + tig;
  return {row, 16 * fp8_chunk + 2 * relabelled_pair(w) + h};
}

// The dim q_word gives A register `reg` (rows gid / gid + 8), half h, at k-step ks.
int q_dim(bool relabelled, int ks, int tig, int reg, int h) {
  return 2 * q_word(relabelled, ks, tig, reg) + h;
}

template <int HD>
void expect_fragments_pair_q_and_k() {
  constexpr int kKS = HD / 16;
  for (int ks = 0; ks < kKS; ++ks) {
    std::set<int> step_dims;
    for (int lane = 0; lane < 32; ++lane) {
      const int gid = lane / 4, tig = lane % 4;
      for (int reg = 0; reg < 4; ++reg) {
        for (int h = 0; h < 2; ++h) {
          // B register reg % 2 holds logical k 2 tig + 8 (reg % 2) + h: A register 2 (reg % 2) there.
          const int a_reg = 2 * (reg % 2);
          const int q = q_dim(true, ks, tig, a_reg, h);
          EXPECT_EQ(q, q_dim(true, ks, tig, a_reg + 1, h)) << "rows gid and gid + 8 share a k";
          for (int warp = 0; warp < 4; ++warp) {
            const KeyDim d = decode_k<HD>(16 * warp, ks, lane, reg, h);
            EXPECT_EQ(d, (KeyDim{16 * warp + 8 * (reg / 2) + gid, q}))
                << "decode: HD " << HD << " ks " << ks << " lane " << lane << " reg " << reg << " half " << h;
            const KeyDim k = query_k<HD>(warp, ks, lane, reg, h);
            EXPECT_EQ(k, d) << "query: HD " << HD << " ks " << ks << " lane " << lane << " reg " << reg;
          }
          step_dims.insert(q);
        }
      }
    }
    // Each k-step reads its own 16 dims, both in the natural order and relabelled.
    std::set<int> natural;
    for (int tig = 0; tig < 4; ++tig) {
      for (int reg = 0; reg < 4; ++reg) {
        for (int h = 0; h < 2; ++h) natural.insert(q_dim(false, ks, tig, reg, h));
      }
    }
    std::set<int> expected;
    for (int d = 16 * ks; d < 16 * ks + 16; ++d) expected.insert(d);
    EXPECT_EQ(step_dims, expected) << "relabelled k-step " << ks;
    EXPECT_EQ(natural, expected) << "natural k-step " << ks;
  }
}

// An ldmatrix phase (eight lanes' rows) and a quarter-warp's 16-byte loads
// or stores are conflict-free when their eight units fall in eight distinct
// 16-byte bank groups (address / 16 mod 8).
template <typename F>
void expect_groups_distinct(F addr_of, const char* what) {
  std::set<uint32_t> groups;
  for (int l = 0; l < 8; ++l) groups.insert((addr_of(l) / 16) % 8);
  EXPECT_EQ(groups.size(), 8u) << what;
}

template <int HD>
void expect_fp8_stage_conflict_free() {
  constexpr int kChunks = HD / 16;
  for (int key0 = 0; key0 < kTileKeys; key0 += 16) {
    for (int pr = 0; pr < HD / 32; ++pr) {
      for (int j = 0; j < 4; ++j) {  // k_codes: matrix j's eight rows
        expect_groups_distinct(
            [&](int l) {
              return fp8_stage_offset<HD>(key0 + x4_row(8 * j + l), 2 * pr + x4_chunk(8 * j + l));
            },
            "k_codes phase");
      }
    }
  }
  // The copies and the conversion: thread i handles chunk i % kChunks of row
  // i / kChunks (+ whole passes), eight consecutive threads a phase.
  for (int i0 = 0; i0 < 128; i0 += 8) {
    expect_groups_distinct(
        [&](int l) { return fp8_stage_offset<HD>((i0 + l) / kChunks, (i0 + l) % kChunks); }, "copy phase");
  }
}

TEST(PagedAttentionTileLayout, Fp8FragmentsPairQAndKInBothKernels) {
  expect_fragments_pair_q_and_k<64>();
  expect_fragments_pair_q_and_k<128>();
}

TEST(PagedAttentionTileLayout, LayoutsAreConflictFreePermutations) {
  expect_units_distinct<64>();
  expect_units_distinct<128>();
  expect_fp8_stage_conflict_free<64>();
  expect_fp8_stage_conflict_free<128>();
}

TEST(PagedAttentionTileLayout, NaturalOrderIsTheFragmentsOwn) {
  // 16-bit pools: A register reg holds dims 16 ks + 2 tig + 8 (reg >> 1) + {0, 1}.
  for (int ks = 0; ks < 8; ++ks) {
    for (int tig = 0; tig < 4; ++tig) {
      for (int reg = 0; reg < 4; ++reg) {
        EXPECT_EQ(q_dim(false, ks, tig, reg, 0), 16 * ks + 2 * tig + 8 * (reg >> 1));
      }
    }
  }
}

}  // namespace
}  // namespace nanoserve::paged_attention_kernels

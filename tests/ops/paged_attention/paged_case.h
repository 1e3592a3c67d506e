#pragma once
// A paged-attention test case for the CPU kernels' options (soft-cap, sinks,
// windows): one layer of sequences over shuffled blocks, the kernel's
// arguments, and attend_row over each history copied out of the blocks (the
// gather path's arithmetic) to compare the fused read against bit for bit.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "ops/attention/attend_row.h"
#include "ops/attention/attention.h"
#include "ops/paged_attention/paged_attention.h"

namespace nanoserve::testing {

// One layer of sequences (context, new tokens) over shuffled blocks of 16.
struct PagedCase {
  static constexpr int32_t kBlock = 16, kKv = 2, kRep = 4, kHd = 64;
  std::vector<float> q, k, v;
  std::vector<int32_t> tables, ctx, starts{0}, pos;
  int32_t max_blocks = 0, num_blocks = 0;

  explicit PagedCase(const std::vector<std::pair<int32_t, int32_t>>& seqs, uint32_t seed) {
    std::mt19937 rng(seed);
    for (auto [c, n] : seqs) max_blocks = std::max(max_blocks, (c + kBlock - 1) / kBlock);
    num_blocks = static_cast<int32_t>(seqs.size()) * max_blocks;
    std::vector<int32_t> perm(num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    tables = perm;
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    k.resize(size_t{1} * num_blocks * kBlock * kKv * kHd);
    v.resize(k.size());
    for (float& x : k)
      x = 4.0f * u(rng);  // scores of several units: a cap of 2 and sinks of a few units bite
    for (float& x : v) x = u(rng);
    for (auto [c, n] : seqs) {
      ctx.push_back(c);
      for (int32_t i = 0; i < n; ++i) pos.push_back(c - n + i);
      starts.push_back(starts.back() + n);
    }
    q.resize(size_t{1} * pos.size() * kKv * kRep * kHd);
    for (float& x : q) x = u(rng);
  }
  PagedAttentionArgs args(float* out, int32_t window, float softcap, const float* sinks = nullptr) const {
    PagedAttentionArgs a;
    a.q = q.data();
    a.k_pool = k.data();
    a.v_pool = v.data();
    a.block_tables = tables.data();
    a.context_lens = ctx.data();
    a.seq_starts = starts.data();
    a.positions = pos.data();
    a.out = out;
    a.num_tokens = static_cast<int32_t>(pos.size());
    a.num_seqs = static_cast<int32_t>(ctx.size());
    a.num_blocks = num_blocks;
    a.block_size = kBlock;
    a.max_blocks_per_seq = max_blocks;
    a.n_heads = kKv * kRep;
    a.n_kv_heads = kKv;
    a.head_dim = kHd;
    a.scale = 1.0f / 8.0f;
    a.window = window;
    a.softcap = softcap;
    a.sinks = sinks;
    return a;
  }
  // attend_row over each sequence's history copied out of the blocks.
  std::vector<float> gather(int32_t window, float softcap, const float* sinks = nullptr) const {
    const int64_t row = int64_t{kKv} * kHd;
    std::vector<float> out(q.size(), NAN);
    for (size_t b = 0; b < ctx.size(); ++b) {
      std::vector<float> kc(ctx[b] * row), vc(ctx[b] * row), scores(ctx[b]);
      for (int64_t p = 0; p < ctx[b]; ++p) {
        const int64_t slot = int64_t{tables[b * max_blocks + p / kBlock]} * kBlock + p % kBlock;
        std::copy_n(k.data() + slot * row, row, kc.data() + p * row);
        std::copy_n(v.data() + slot * row, row, vc.data() + p * row);
      }
      for (int32_t t = starts[b]; t < starts[b + 1]; ++t) {
        for (int64_t h = 0; h < kKv * kRep; ++h) {
          const int64_t kvh = h / kRep, off = (int64_t{t} * kKv * kRep + h) * kHd;
          attend_row(
              q.data() + off, kHd, attention_window_begin(pos[t], window), pos[t] + 1,
              [&](int64_t p) { return kc.data() + p * row + kvh * kHd; },
              [&](int64_t p) { return vc.data() + p * row + kvh * kHd; }, 1.0f / 8.0f, scores.data(),
              out.data() + off, softcap, sinks != nullptr ? sinks + h : nullptr);
        }
      }
    }
    return out;
  }
};

}  // namespace nanoserve::testing

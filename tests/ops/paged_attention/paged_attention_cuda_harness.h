#pragma once
// The harness of the CUDA paged attention tests (paged_attention_cuda_test.cc
// and paged_attention_determinism_cuda_test.cc): a random paged problem on the
// host (pools with NaN in every unused slot, the step's K/V, q), its run on
// the device through paged_kv_write_cuda and paged_attention_cuda, and the
// check against the frozen CPU reference (paged_attention_reference, f64
// accumulation over f32 inputs).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/device_memory.cuh"
#include "core/half.h"
#include "core/skip_without_gpu.h"
#include "ops/paged_attention/paged_attention.h"
#include "ops/paged_attention/paged_attention_cuda.cuh"
#include "ops/paged_attention/paged_attention_tuning.cuh"

namespace nanoserve::paged_attention_test {

// Relative error ||out - ref|| / ||ref|| per token row (all its heads).
inline double tolerance(DType dt) {
  return dt == DType::kBF16 ? 1e-2 : 2e-3;
}

inline uint16_t to_half_bits(DType dt, float x) {
  return dt == DType::kBF16 ? f32_to_bf16(x) : f32_to_fp16(x);
}
inline float from_half_bits(DType dt, uint16_t h) {
  return dt == DType::kBF16 ? bf16_to_f32(h) : fp16_to_f32(h);
}

// Cheap uniform numbers in [-1, 1): the pools run to tens of millions of values.
struct FastRng {
  uint64_t s;
  float next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return static_cast<float>(static_cast<int64_t>(s >> 40) - (int64_t{1} << 23)) /
           static_cast<float>(1 << 23);
  }
};

struct Shape {
  DType dtype = DType::kBF16;
  int head_dim = 128;
  int block_size = 16;
  int n_kv = 2;
  int n_rep = 4;
  int window = 0;        // a sliding window (0: the whole history)
  float softcap = 0.0f;  // soft-capping of the scaled scores (Gemma 2; 0: none)
  bool sinks = false;    // a sink logit a query head (gpt-oss), Problem::sinks
};

// One step of a paged batch, on the host (f32 values that are exactly
// representable in the pool dtype, plus their 16-bit encodings) and the device.
struct Problem {
  Shape shape;
  int n_heads = 0, num_blocks = 0, max_blocks = 0, num_tokens = 0;
  ForwardBatch batch;
  std::vector<float> q, k_pool, v_pool;  // f32 truth; pools hold this step's K/V too
  std::vector<float> sinks;              // [n_heads] with Shape::sinks: uniform in [-2, 4]; else empty
  std::vector<uint16_t> q16, k_new16, v_new16, k_pool16,
      v_pool16;                                        // pools without this step's K/V (NaN there)
  std::vector<uint16_t> k_pool16_full, v_pool16_full;  // with them: what the write must produce
};

// seqs: (context_len after this step, new tokens this step).
inline Problem make_problem(uint64_t seed, const Shape& s, const std::vector<std::pair<int, int>>& seqs) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  FastRng fr{seed * 0x9E3779B97F4A7C15ull + 1};
  Problem p;
  p.shape = s;
  p.n_heads = s.n_kv * s.n_rep;
  const int b_count = static_cast<int>(seqs.size());
  int total_blocks = 0;
  for (auto [ctx, n] : seqs) {
    const int blocks = (ctx + s.block_size - 1) / s.block_size;
    total_blocks += blocks;
    p.max_blocks = std::max(p.max_blocks, blocks);
    p.num_tokens += n;
  }
  p.max_blocks = std::max(p.max_blocks, 1);
  p.num_blocks = total_blocks + 3;  // spare blocks stay NaN
  std::vector<int32_t> perm(p.num_blocks);
  for (int i = 0; i < p.num_blocks; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);

  ForwardBatch& fb = p.batch;
  fb.max_blocks_per_seq = p.max_blocks;
  fb.block_tables.assign(static_cast<size_t>(b_count) * p.max_blocks, -1);
  fb.seq_starts.push_back(0);
  int next_block = 0;
  for (int b = 0; b < b_count; ++b) {
    const auto [ctx, n] = seqs[b];
    fb.seq_ids.push_back(b);
    fb.context_lens.push_back(ctx);
    for (int i = 0; i < (ctx + s.block_size - 1) / s.block_size; ++i) {
      fb.block_tables[static_cast<size_t>(b) * p.max_blocks + i] = perm[next_block++];
    }
    for (int i = 0; i < n; ++i) {
      const int pos = ctx - n + i;
      fb.tokens.push_back(0);
      fb.positions.push_back(pos);
      fb.slot_mapping.push_back(fb.block_tables[static_cast<size_t>(b) * p.max_blocks + pos / s.block_size] *
                                    s.block_size +
                                pos % s.block_size);
    }
    fb.seq_starts.push_back(static_cast<int32_t>(fb.tokens.size()));
  }

  const int64_t row = static_cast<int64_t>(s.n_kv) * s.head_dim;  // elements of one slot
  const int64_t pool_elems = static_cast<int64_t>(p.num_blocks) * s.block_size * row;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  p.k_pool.assign(pool_elems, nan);
  p.v_pool.assign(pool_elems, nan);
  // A random magnitude per problem: some softmaxes flat, some peaked.
  const float q_gain = 1.0f + 3.0f * (0.5f + 0.5f * fr.next());
  auto rnd = [&](float gain) { return from_half_bits(s.dtype, to_half_bits(s.dtype, gain * fr.next())); };
  for (int b = 0; b < b_count; ++b) {
    for (int pos = 0; pos < seqs[b].first; ++pos) {
      const int64_t slot =
          static_cast<int64_t>(fb.block_tables[static_cast<size_t>(b) * p.max_blocks + pos / s.block_size]) *
              s.block_size +
          pos % s.block_size;
      for (int64_t e = 0; e < row; ++e) {
        p.k_pool[slot * row + e] = rnd(1.0f);
        p.v_pool[slot * row + e] = rnd(1.0f);
      }
    }
  }
  p.q.resize(static_cast<size_t>(p.num_tokens) * p.n_heads * s.head_dim);
  for (float& x : p.q) x = rnd(q_gain);
  // Sinks about the scores' own size and above: each takes a share of its
  // softmax from nothing to most of it.
  if (s.sinks) {
    for (int h = 0; h < p.n_heads; ++h) p.sinks.push_back(1.0f + 3.0f * fr.next());
  }

  auto encode = [&](const std::vector<float>& v) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = to_half_bits(s.dtype, v[i]);
    return h;
  };
  p.q16 = encode(p.q);
  p.k_pool16_full = encode(p.k_pool);
  p.v_pool16_full = encode(p.v_pool);
  p.k_pool16 = p.k_pool16_full;
  p.v_pool16 = p.v_pool16_full;
  p.k_new16.resize(static_cast<size_t>(p.num_tokens) * row);
  p.v_new16.resize(p.k_new16.size());
  const uint16_t nan16 = to_half_bits(s.dtype, nan);
  for (int t = 0; t < p.num_tokens; ++t) {
    const int64_t slot = fb.slot_mapping[t];
    for (int64_t e = 0; e < row; ++e) {
      p.k_new16[t * row + e] = p.k_pool16_full[slot * row + e];
      p.v_new16[t * row + e] = p.v_pool16_full[slot * row + e];
      p.k_pool16[slot * row + e] = nan16;  // only the write kernel puts this step's K/V in
      p.v_pool16[slot * row + e] = nan16;
    }
  }
  return p;
}

// Sequence b of p alone: the same pools, sinks and block tables, its rows
// (q and the step's K/V) and nothing else. Its output rows are p's rows
// seq_starts[b] .. seq_starts[b + 1] - 1.
inline Problem sequence_alone(const Problem& p, size_t b) {
  const Shape& s = p.shape;
  const int64_t row_elems = int64_t{s.n_kv} * s.n_rep * s.head_dim, kv_row = int64_t{s.n_kv} * s.head_dim;
  Problem alone = p;
  ForwardBatch& fb = alone.batch;
  const int t0 = p.batch.seq_starts[b], t1 = p.batch.seq_starts[b + 1];
  fb.seq_ids = {0};
  fb.context_lens = {p.batch.context_lens[b]};
  fb.block_tables.assign(p.batch.block_tables.begin() + static_cast<int64_t>(b) * p.max_blocks,
                         p.batch.block_tables.begin() + static_cast<int64_t>(b + 1) * p.max_blocks);
  fb.seq_starts = {0, t1 - t0};
  fb.tokens.assign(t1 - t0, 0);
  fb.positions.assign(p.batch.positions.begin() + t0, p.batch.positions.begin() + t1);
  fb.slot_mapping.assign(p.batch.slot_mapping.begin() + t0, p.batch.slot_mapping.begin() + t1);
  alone.num_tokens = t1 - t0;
  alone.q16.assign(p.q16.begin() + t0 * row_elems, p.q16.begin() + t1 * row_elems);
  alone.k_new16.assign(p.k_new16.begin() + t0 * kv_row, p.k_new16.begin() + t1 * kv_row);
  alone.v_new16.assign(p.v_new16.begin() + t0 * kv_row, p.v_new16.begin() + t1 * kv_row);
  return alone;
}

// The same rows, each sequence's rows of this step cut into chunks of at most
// `chunk` rows, each chunk a sequence of its own over the same blocks (1:
// every row a decode row). The pools already hold every row of the step, as
// the earlier chunks' steps would have left them (a chunk's copies of
// positions before its first row may start before the write of this step
// lands); the write puts the same values in again. q and the step's K/V keep
// their row order.
inline Problem as_chunks(const Problem& p, int chunk) {
  Problem c = p;
  ForwardBatch& fb = c.batch;
  fb.seq_ids.clear();
  fb.context_lens.clear();
  fb.block_tables.clear();
  fb.seq_starts = {0};
  c.k_pool16 = p.k_pool16_full;
  c.v_pool16 = p.v_pool16_full;
  for (size_t b = 0; b + 1 < p.batch.seq_starts.size(); ++b) {
    for (int t0 = p.batch.seq_starts[b]; t0 < p.batch.seq_starts[b + 1]; t0 += chunk) {
      const int t1 = std::min(t0 + chunk, p.batch.seq_starts[b + 1]);
      fb.seq_ids.push_back(static_cast<int>(fb.seq_ids.size()));
      fb.context_lens.push_back(p.batch.positions[t1 - 1] + 1);
      fb.block_tables.insert(fb.block_tables.end(),
                             p.batch.block_tables.begin() + static_cast<int64_t>(b) * p.max_blocks,
                             p.batch.block_tables.begin() + static_cast<int64_t>(b + 1) * p.max_blocks);
      fb.seq_starts.push_back(t1);
    }
  }
  return c;
}

inline Tensor device_from(const std::vector<uint16_t>& v, DType dt, std::vector<int64_t> shape) {
  Tensor host = Tensor::view(const_cast<uint16_t*>(v.data()), dt, std::move(shape), nullptr);
  return cuda::to_device(host);
}

struct DeviceRun {
  Tensor k_pool, v_pool, out;
};

// Uploads the problem, writes the step's K/V, runs attention; returns the device tensors.
inline DeviceRun run_on_device(const Problem& p, const PagedAttentionTuning& opt = {}, int max_rows = 0) {
  const Shape& s = p.shape;
  const int64_t hd = s.head_dim;
  DeviceRun r;
  r.k_pool = device_from(p.k_pool16, s.dtype, {p.num_blocks, s.block_size, s.n_kv, hd});
  r.v_pool = device_from(p.v_pool16, s.dtype, {p.num_blocks, s.block_size, s.n_kv, hd});
  const Tensor q = device_from(p.q16, s.dtype, {p.num_tokens, p.n_heads, hd});
  const Tensor k_new = device_from(p.k_new16, s.dtype, {p.num_tokens, s.n_kv, hd});
  const Tensor v_new = device_from(p.v_new16, s.dtype, {p.num_tokens, s.n_kv, hd});
  r.out = cuda::empty(s.dtype, {p.num_tokens, p.n_heads, hd});
  cuda::fill_bytes(r.out, 0xFF);  // NaN in bf16 and f16

  DeviceBatch batch(p.num_tokens, static_cast<int32_t>(p.batch.seq_ids.size()), p.max_blocks);
  batch.upload(p.batch);
  PagedAttentionWorkspaceCuda ws(max_rows > 0 ? max_rows : p.num_tokens, p.n_heads, s.head_dim);
  Tensor sinks;
  if (!p.sinks.empty()) {
    sinks = cuda::to_device(Tensor::view(const_cast<float*>(p.sinks.data()), DType::kF32,
                                         {static_cast<int64_t>(p.sinks.size())}, nullptr));
  }
  paged_kv_write_cuda(k_new, v_new, batch, r.k_pool, r.v_pool, nullptr);
  paged_attention_cuda(q, r.k_pool, r.v_pool, batch, s.n_rep, 1.0f / std::sqrt(static_cast<float>(hd)), ws,
                       r.out, nullptr, opt, s.window, s.softcap,
                       sinks.defined() ? sinks.data_as<const float>() : nullptr);
  cuda::synchronize();
  return r;
}

inline std::vector<uint16_t> download16(const Tensor& dev) {
  std::vector<uint16_t> h(static_cast<size_t>(dev.numel()));
  cuda::copy_to_host(dev, Tensor::view(h.data(), dev.dtype(), dev.shape(), nullptr));
  return h;
}

// The reference over the sequences in `check` (a sub-batch sharing the pools)
// with `window`: each checked row's relative error, (token, error).
inline std::vector<std::pair<int, double>> reference_errors(const Problem& p,
                                                            const std::vector<uint16_t>& out16,
                                                            const std::vector<int>& check, int window) {
  const Shape& s = p.shape;
  const int64_t hd = s.head_dim;
  const int64_t row_elems = static_cast<int64_t>(p.n_heads) * hd;
  // Sub-batch: the checked sequences, their tokens and block tables.
  std::vector<int32_t> seq_starts{0}, positions, tables, ctx_lens;
  std::vector<float> q;
  std::vector<int> token_of;  // sub-batch token -> problem token
  for (int b : check) {
    ctx_lens.push_back(p.batch.context_lens[b]);
    tables.insert(tables.end(), p.batch.block_tables.begin() + static_cast<int64_t>(b) * p.max_blocks,
                  p.batch.block_tables.begin() + static_cast<int64_t>(b + 1) * p.max_blocks);
    for (int t = p.batch.seq_starts[b]; t < p.batch.seq_starts[b + 1]; ++t) {
      positions.push_back(p.batch.positions[t]);
      q.insert(q.end(), p.q.begin() + t * row_elems, p.q.begin() + (t + 1) * row_elems);
      token_of.push_back(t);
    }
    seq_starts.push_back(static_cast<int32_t>(positions.size()));
  }
  std::vector<float> ref(q.size(), std::numeric_limits<float>::quiet_NaN());
  PagedAttentionArgs a;
  a.q = q.data();
  a.k_pool = p.k_pool.data();
  a.v_pool = p.v_pool.data();
  a.block_tables = tables.data();
  a.context_lens = ctx_lens.data();
  a.seq_starts = seq_starts.data();
  a.positions = positions.data();
  a.out = ref.data();
  a.num_tokens = static_cast<int32_t>(positions.size());
  a.num_seqs = static_cast<int32_t>(check.size());
  a.num_blocks = p.num_blocks;
  a.block_size = s.block_size;
  a.max_blocks_per_seq = p.max_blocks;
  a.n_heads = p.n_heads;
  a.n_kv_heads = s.n_kv;
  a.head_dim = s.head_dim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  a.window = window;
  a.softcap = s.softcap;
  a.sinks = p.sinks.empty() ? nullptr : p.sinks.data();
  paged_attention_reference(a);

  std::vector<std::pair<int, double>> errors;
  for (size_t i = 0; i < token_of.size(); ++i) {
    const int t = token_of[i];
    double err = 0.0, norm = 0.0;
    for (int64_t e = 0; e < row_elems; ++e) {
      const double r = ref[i * row_elems + e];
      const double d = from_half_bits(s.dtype, out16[t * row_elems + e]) - r;
      err += d * d;
      norm += r * r;
    }
    errors.emplace_back(t, std::sqrt(err / std::max(norm, 1e-30)));
  }
  return errors;
}

// The reference (with the shape's window) compared row by row with the
// device output. Every device row is NaN-checked.
inline void expect_matches_reference(const Problem& p, const std::vector<uint16_t>& out16,
                                     const std::vector<int>& check) {
  const Shape& s = p.shape;
  const int64_t row_elems = static_cast<int64_t>(p.n_heads) * s.head_dim;
  for (size_t i = 0; i < out16.size(); ++i) {
    ASSERT_FALSE(std::isnan(from_half_bits(s.dtype, out16[i])))
        << "unwritten or NaN output at token " << i / row_elems << ", element " << i % row_elems;
  }
  double worst = 0.0;
  for (const auto& [t, rel] : reference_errors(p, out16, check, s.window)) {
    worst = std::max(worst, rel);
    ASSERT_LE(rel, tolerance(s.dtype)) << "token " << t << " at position " << p.batch.positions[t];
  }
  ::testing::Test::RecordProperty("worst_rel_err", std::to_string(worst));
  std::printf("    checked rows of %zu sequences: worst relative error %.2e\n", check.size(), worst);
}

inline std::string describe(const Shape& s) {
  return std::string(dtype_name(s.dtype)) + " head_dim " + std::to_string(s.head_dim) + " block " +
         std::to_string(s.block_size) + " n_kv " + std::to_string(s.n_kv) + " n_rep " +
         std::to_string(s.n_rep) + (s.window > 0 ? " window " + std::to_string(s.window) : "") +
         (s.softcap > 0.0f ? " softcap " + std::to_string(s.softcap) : "") + (s.sinks ? " sinks" : "");
}

inline uint64_t fresh_seed() {
  return (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
}

// Runs one problem and checks the pools (bitwise, after the write) and the output.
// Returns the output.
inline std::vector<uint16_t> check_problem(const Shape& s, const std::vector<std::pair<int, int>>& seqs,
                                           std::vector<int> check = {}, const PagedAttentionTuning& opt = {},
                                           uint64_t seed = 0) {
  if (seed == 0) seed = fresh_seed();
  SCOPED_TRACE(describe(s) + ", seed " + std::to_string(seed));
  const Problem p = make_problem(seed, s, seqs);
  const DeviceRun r = run_on_device(p, opt);
  EXPECT_TRUE(download16(r.k_pool) == p.k_pool16_full) << "K pool after the write";
  EXPECT_TRUE(download16(r.v_pool) == p.v_pool16_full) << "V pool after the write";
  if (check.empty()) {
    for (size_t b = 0; b < seqs.size(); ++b) check.push_back(static_cast<int>(b));
  }
  std::vector<uint16_t> out = download16(r.out);
  expect_matches_reference(p, out, check);
  return out;
}

}  // namespace nanoserve::paged_attention_test

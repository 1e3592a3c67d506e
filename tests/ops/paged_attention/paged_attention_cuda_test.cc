// The CUDA paged attention kernels against the frozen CPU reference
// (paged_attention_reference, f64 accumulation over f32 inputs), on fresh
// random inputs: contexts 1, 17, 97, 2048 and 16384; batches of 1, 3, 64 and
// 256 uneven sequences; n_rep 1, 3, 4, 8 and 12; head_dim 64 and 128; block
// sizes 8, 16, 32 and 64; bf16 and f16; decode and causal extend chunks;
// slot-major and head-major pools (bitwise the same output). The
// step's K/V go into the pools through paged_kv_write_cuda, the output is
// NaN-filled before every call, and unused pool slots hold NaN so that a read
// outside a context shows. Big batches check a sample of sequences against the
// reference (every output row is still checked for NaN).
// Without a CUDA device every test reports SKIPPED with the runtime's reason.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/device_memory.cuh"
#include "core/half.h"
#include "ops/paged_attention/paged_attention.h"
#include "ops/paged_attention/paged_attention_cuda.cuh"

namespace nanoserve {
namespace {

#define NS_SKIP_WITHOUT_GPU()                                                     \
  do {                                                                            \
    std::string why;                                                              \
    if (cuda::device_count(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)

// Relative error ||out - ref|| / ||ref|| per token row (all its heads).
double tolerance(DType dt) {
  return dt == DType::kBF16 ? 1e-2 : 2e-3;
}

uint16_t to_half_bits(DType dt, float x) {
  return dt == DType::kBF16 ? f32_to_bf16(x) : f32_to_fp16(x);
}
float from_half_bits(DType dt, uint16_t h) {
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
};

// One step of a paged batch, on the host (f32 values that are exactly
// representable in the pool dtype, plus their 16-bit encodings) and the device.
struct Problem {
  Shape shape;
  int n_heads = 0, num_blocks = 0, max_blocks = 0, num_tokens = 0;
  ForwardBatch batch;
  std::vector<float> q, k_pool, v_pool;  // f32 truth; pools hold this step's K/V too
  std::vector<uint16_t> q16, k_new16, v_new16, k_pool16,
      v_pool16;                                        // pools without this step's K/V (NaN there)
  std::vector<uint16_t> k_pool16_full, v_pool16_full;  // with them: what the write must produce
};

// seqs: (context_len after this step, new tokens this step).
Problem make_problem(uint64_t seed, const Shape& s, const std::vector<std::pair<int, int>>& seqs) {
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

Tensor device_from(const std::vector<uint16_t>& v, DType dt, std::vector<int64_t> shape) {
  Tensor host = Tensor::view(const_cast<uint16_t*>(v.data()), dt, std::move(shape), nullptr);
  return cuda::to_device(host);
}

// A slot-major pool [nb, bs, n_kv, hd] as head-major [nb, n_kv, bs, hd], or back.
std::vector<uint16_t> permute_pool(const std::vector<uint16_t>& v, const Shape& s, int num_blocks,
                                   bool to_head_major) {
  std::vector<uint16_t> r(v.size());
  const int64_t hd = s.head_dim, bs = s.block_size, nkv = s.n_kv;
  for (int64_t b = 0; b < num_blocks; ++b) {
    for (int64_t i = 0; i < bs; ++i) {
      for (int64_t h = 0; h < nkv; ++h) {
        const int64_t slot_major = ((b * bs + i) * nkv + h) * hd;
        const int64_t head_major = ((b * nkv + h) * bs + i) * hd;
        const int64_t from = to_head_major ? slot_major : head_major;
        const int64_t to = to_head_major ? head_major : slot_major;
        std::copy(v.begin() + from, v.begin() + from + hd, r.begin() + to);
      }
    }
  }
  return r;
}

struct DeviceRun {
  Tensor k_pool, v_pool, out;  // pools in the layout the run used
};

// Uploads the problem, writes the step's K/V, runs attention; returns the device tensors.
DeviceRun run_on_device(const Problem& p, const PagedAttentionCudaOptions& opt = {}, int max_rows = 0) {
  const Shape& s = p.shape;
  const int64_t hd = s.head_dim;
  DeviceRun r;
  if (opt.layout == PagedKvLayout::kHeadMajor) {
    r.k_pool = device_from(permute_pool(p.k_pool16, s, p.num_blocks, true), s.dtype,
                           {p.num_blocks, s.n_kv, s.block_size, hd});
    r.v_pool = device_from(permute_pool(p.v_pool16, s, p.num_blocks, true), s.dtype,
                           {p.num_blocks, s.n_kv, s.block_size, hd});
  } else {
    r.k_pool = device_from(p.k_pool16, s.dtype, {p.num_blocks, s.block_size, s.n_kv, hd});
    r.v_pool = device_from(p.v_pool16, s.dtype, {p.num_blocks, s.block_size, s.n_kv, hd});
  }
  const Tensor q = device_from(p.q16, s.dtype, {p.num_tokens, p.n_heads, hd});
  const Tensor k_new = device_from(p.k_new16, s.dtype, {p.num_tokens, s.n_kv, hd});
  const Tensor v_new = device_from(p.v_new16, s.dtype, {p.num_tokens, s.n_kv, hd});
  r.out = cuda::empty(s.dtype, {p.num_tokens, p.n_heads, hd});
  cuda::fill_bytes(r.out, 0xFF);  // NaN in bf16 and f16

  PagedBatchCuda batch(p.num_tokens, static_cast<int32_t>(p.batch.seq_ids.size()), p.max_blocks);
  batch.upload(p.batch);
  PagedAttentionWorkspaceCuda ws(max_rows > 0 ? max_rows : p.num_tokens, p.n_heads, s.head_dim);
  paged_kv_write_cuda(k_new, v_new, batch, r.k_pool, r.v_pool, nullptr, opt.layout);
  paged_attention_cuda(q, r.k_pool, r.v_pool, batch, s.n_rep, 1.0f / std::sqrt(static_cast<float>(hd)), ws,
                       r.out, nullptr, opt);
  cuda::synchronize();
  return r;
}

std::vector<uint16_t> download16(const Tensor& dev) {
  std::vector<uint16_t> h(static_cast<size_t>(dev.numel()));
  cuda::copy_to_host(dev, Tensor::view(h.data(), dev.dtype(), dev.shape(), nullptr));
  return h;
}

// The reference over the sequences in `check` (a sub-batch sharing the pools),
// compared row by row with the device output. Every device row is NaN-checked.
void expect_matches_reference(const Problem& p, const std::vector<uint16_t>& out16,
                              const std::vector<int>& check) {
  const Shape& s = p.shape;
  const int64_t hd = s.head_dim;
  const int64_t row_elems = static_cast<int64_t>(p.n_heads) * hd;
  for (size_t i = 0; i < out16.size(); ++i) {
    ASSERT_FALSE(std::isnan(from_half_bits(s.dtype, out16[i])))
        << "unwritten or NaN output at token " << i / row_elems << ", element " << i % row_elems;
  }
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
  paged_attention_reference(a);

  double worst = 0.0;
  for (size_t i = 0; i < token_of.size(); ++i) {
    const int t = token_of[i];
    double err = 0.0, norm = 0.0;
    for (int64_t e = 0; e < row_elems; ++e) {
      const double r = ref[i * row_elems + e];
      const double d = from_half_bits(s.dtype, out16[t * row_elems + e]) - r;
      err += d * d;
      norm += r * r;
    }
    const double rel = std::sqrt(err / std::max(norm, 1e-30));
    worst = std::max(worst, rel);
    ASSERT_LE(rel, tolerance(s.dtype)) << "token " << t << " at position " << p.batch.positions[t];
  }
  ::testing::Test::RecordProperty("worst_rel_err", std::to_string(worst));
  std::printf("    checked %zu rows of %zu sequences: worst relative error %.2e\n", token_of.size(),
              check.size(), worst);
}

std::string describe(const Shape& s) {
  return std::string(dtype_name(s.dtype)) + " head_dim " + std::to_string(s.head_dim) + " block " +
         std::to_string(s.block_size) + " n_kv " + std::to_string(s.n_kv) + " n_rep " +
         std::to_string(s.n_rep);
}

uint64_t fresh_seed() {
  return (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
}

// Runs one problem and checks the pools (bitwise, after the write) and the output.
// Returns the output.
std::vector<uint16_t> check_problem(const Shape& s, const std::vector<std::pair<int, int>>& seqs,
                                    std::vector<int> check = {}, const PagedAttentionCudaOptions& opt = {},
                                    uint64_t seed = 0) {
  if (seed == 0) seed = fresh_seed();
  SCOPED_TRACE(describe(s) + ", seed " + std::to_string(seed) +
               (opt.layout == PagedKvLayout::kHeadMajor ? ", head-major pools" : ""));
  const Problem p = make_problem(seed, s, seqs);
  const DeviceRun r = run_on_device(p, opt);
  const bool hm = opt.layout == PagedKvLayout::kHeadMajor;
  auto slot_major = [&](const Tensor& pool) {
    const std::vector<uint16_t> h = download16(pool);
    return hm ? permute_pool(h, s, p.num_blocks, false) : h;
  };
  EXPECT_TRUE(slot_major(r.k_pool) == p.k_pool16_full) << "K pool after the write";
  EXPECT_TRUE(slot_major(r.v_pool) == p.v_pool16_full) << "V pool after the write";
  if (check.empty()) {
    for (size_t b = 0; b < seqs.size(); ++b) check.push_back(static_cast<int>(b));
  }
  std::vector<uint16_t> out = download16(r.out);
  expect_matches_reference(p, out, check);
  return out;
}

// ---- decode: one query token a sequence ---------------------------------------

struct DecodeParam {
  DType dtype;
  int head_dim, block_size, n_rep;
};

class PagedAttentionCudaDecode : public ::testing::TestWithParam<DecodeParam> {};

TEST_P(PagedAttentionCudaDecode, AwkwardContextsMatchReference) {
  NS_SKIP_WITHOUT_GPU();
  const DecodeParam& d = GetParam();
  const Shape s{d.dtype, d.head_dim, d.block_size, 2, d.n_rep};
  check_problem(s, {{1, 1}, {17, 1}, {97, 1}, {2048, 1}, {16384, 1}});
}

std::vector<DecodeParam> decode_params() {
  std::vector<DecodeParam> v;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int hd : {64, 128}) {
      for (int bs : {16, 32}) {
        for (int n_rep : {1, 4, 8}) v.push_back({dt, hd, bs, n_rep});
      }
    }
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedAttentionCudaDecode, ::testing::ValuesIn(decode_params()),
                         [](const ::testing::TestParamInfo<DecodeParam>& info) {
                           const DecodeParam& d = info.param;
                           return std::string(d.dtype == DType::kBF16 ? "bf16" : "f16") + "_hd" +
                                  std::to_string(d.head_dim) + "_bs" + std::to_string(d.block_size) + "_rep" +
                                  std::to_string(d.n_rep);
                         });

// Batches of uneven decode sequences; the reference checks a sample (the
// shortest, the longest and random others).
void check_uneven_batch(int batch, int max_ctx, const Shape& s) {
  std::mt19937 rng(static_cast<uint32_t>(fresh_seed()));
  std::uniform_int_distribution<int> len(1, max_ctx);
  std::vector<std::pair<int, int>> seqs;
  for (int b = 0; b < batch; ++b) seqs.push_back({len(rng), 1});
  std::vector<int> check;
  if (batch <= 8) {
    for (int b = 0; b < batch; ++b) check.push_back(b);
  } else {
    const auto [lo, hi] = std::minmax_element(seqs.begin(), seqs.end());
    check = {static_cast<int>(lo - seqs.begin()), static_cast<int>(hi - seqs.begin())};
    std::uniform_int_distribution<int> pick(0, batch - 1);
    while (check.size() < 8) check.push_back(pick(rng));
    std::sort(check.begin(), check.end());
    check.erase(std::unique(check.begin(), check.end()), check.end());
  }
  check_problem(s, seqs, check);
}

TEST(PagedAttentionCuda, UnevenBatchesMatchReference) {
  NS_SKIP_WITHOUT_GPU();
  check_uneven_batch(1, 4096, {DType::kBF16, 128, 16, 8, 4});
  check_uneven_batch(3, 3000, {DType::kBF16, 128, 16, 8, 4});
  check_uneven_batch(64, 2500, {DType::kBF16, 128, 32, 4, 8});
  check_uneven_batch(256, 1200, {DType::kBF16, 128, 16, 2, 4});
  check_uneven_batch(256, 700, {DType::kF16, 64, 32, 2, 1});
}

// Other block sizes (any power of two >= 8) and GQA groups that are not a power
// of two (SmolLM2's 3) or more than one head group (12).
TEST(PagedAttentionCuda, OtherBlockSizesAndGroupsMatchReference) {
  NS_SKIP_WITHOUT_GPU();
  check_problem({DType::kBF16, 64, 8, 3, 3}, {{1, 1}, {97, 1}, {2049, 1}});
  check_problem({DType::kBF16, 128, 64, 1, 12}, {{17, 1}, {700, 1}, {5000, 1}});
  check_problem({DType::kF16, 128, 128, 2, 2}, {{255, 1}, {256, 1}, {257, 1}});
  // A shorter context can have more splits than the longest one in the batch.
  check_problem({DType::kBF16, 128, 16, 8, 4}, {{2100, 1}, {2048, 1}, {1000, 1}});
}

// Head-major pools: the write puts each head's row in its place, and the
// attention output matches the reference and is bitwise the slot-major one
// (same arithmetic, other addresses).
TEST(PagedAttentionCuda, HeadMajorPoolsMatchReferenceAndSlotMajor) {
  NS_SKIP_WITHOUT_GPU();
  PagedAttentionCudaOptions hm;
  hm.layout = PagedKvLayout::kHeadMajor;
  const std::vector<std::pair<Shape, std::vector<std::pair<int, int>>>> cases{
      {{DType::kBF16, 128, 16, 8, 4}, {{1, 1}, {97, 1}, {4096, 1}, {300, 40}}},
      {{DType::kF16, 64, 32, 2, 8}, {{17, 1}, {2048, 1}, {37, 37}}},
      {{DType::kBF16, 64, 8, 3, 3}, {{5000, 1}, {200, 200}}},
      {{DType::kBF16, 128, 64, 1, 12}, {{700, 1}, {31, 7}}},
  };
  for (const auto& [s, seqs] : cases) {
    const uint64_t seed = fresh_seed();
    const std::vector<uint16_t> a = check_problem(s, seqs, {}, hm, seed);
    const std::vector<uint16_t> b = check_problem(s, seqs, {}, {}, seed);
    EXPECT_TRUE(a == b) << describe(s) << ", seed " << seed << ": head-major output differs from slot-major";
  }
}

// ---- extend: several query tokens a sequence, causal within the chunk ----------

TEST(PagedAttentionCuda, ExtendChunksMatchReference) {
  NS_SKIP_WITHOUT_GPU();
  // (context after the step, tokens this step): a fresh prompt, chunks over a
  // history, a chunk that crosses split boundaries, and decodes in the same batch.
  const std::vector<std::pair<int, int>> seqs{{1, 1}, {37, 37}, {120, 20}, {1000, 300}, {2048, 1}, {5, 2}};
  check_problem({DType::kBF16, 128, 16, 2, 4}, seqs);
  check_problem({DType::kF16, 64, 32, 2, 8}, seqs);
  check_problem({DType::kBF16, 64, 8, 3, 3}, {{200, 200}, {31, 7}});
}

// Extend rows paired in a block (pair_rows, the default) against every row in
// a block of its own, bitwise: whole prefills, chunks starting at odd and even
// positions, decodes beside them, several launches (a 3-row workspace splits
// pairs at launch boundaries), head groups that leave room for a second row
// (G = 1, 2, 4, one of them partly empty) and one that does not (G = 8). Also
// against the CPU reference, so a pair that is equal but wrong fails too.
TEST(PagedAttentionCuda, PairedExtendRowsEqualSingleRows) {
  NS_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<int, int>> seqs{{1024, 1024}, {778, 301}, {5, 1}, {300, 40}, {2, 2}, {9, 3}};
  PagedAttentionCudaOptions single;
  single.pair_rows = false;
  for (const Shape& s : {Shape{DType::kBF16, 128, 16, 2, 4}, Shape{DType::kBF16, 64, 16, 2, 2},
                         Shape{DType::kF16, 128, 32, 1, 3}, Shape{DType::kBF16, 64, 8, 2, 1},
                         Shape{DType::kBF16, 128, 16, 1, 8}}) {
    const uint64_t seed = fresh_seed();
    const std::vector<uint16_t> paired = check_problem(s, seqs, {}, {}, seed);
    const Problem p = make_problem(seed, s, seqs);
    EXPECT_TRUE(download16(run_on_device(p, single).out) == paired)
        << describe(s) << ", seed " << seed << ": paired rows differ from single rows";
    EXPECT_TRUE(download16(run_on_device(p, {}, 3).out) == paired)
        << describe(s) << ", seed " << seed << ": paired rows differ over launches of 3 rows";
  }
}

// ---- write kernel --------------------------------------------------------------

TEST(PagedAttentionCuda, KvWriteSkipsNegativeSlots) {
  NS_SKIP_WITHOUT_GPU();
  const Shape s{DType::kBF16, 64, 16, 2, 1};
  Problem p = make_problem(fresh_seed(), s, {{20, 3}});
  const int32_t skipped = p.batch.slot_mapping[1];
  p.batch.slot_mapping[1] = -1;  // a padding token: its slot must stay as it was (NaN)
  const int64_t row = int64_t{s.n_kv} * s.head_dim;
  std::vector<uint16_t> expect_k = p.k_pool16_full;
  for (int64_t e = 0; e < row; ++e) expect_k[skipped * row + e] = p.k_pool16[skipped * row + e];
  const DeviceRun r = run_on_device(p);
  EXPECT_TRUE(download16(r.k_pool) == expect_k);
}

// ---- determinism ---------------------------------------------------------------

// The split plan depends on a row's own context only, and both reductions sum
// the splits in split order with the same arithmetic: a sequence's output is
// bitwise the same alone, in a batch, over several launches (small workspace),
// with either reduction, any pipeline depth, the first K/V copies before or
// after the dependency wait, paced or not, with or without the L2 hint, and
// with or without the first tile held in registers (before or after the
// wait).
// Two batches: splits up to 12 and up to 29 a row.
void expect_output_independent_of_batch_and_reduction(const std::vector<std::pair<int, int>>& seqs) {
  const Shape s{DType::kBF16, 128, 16, 2, 4};
  const Problem p = make_problem(fresh_seed(), s, seqs);
  const std::vector<uint16_t> base = download16(run_on_device(p).out);
  for (SplitReduce r : {SplitReduce::kKernel, SplitReduce::kLastBlock}) {
    PagedAttentionCudaOptions o;
    o.reduce = r;
    EXPECT_TRUE(download16(run_on_device(p, o).out) == base) << "reduction " << static_cast<int>(r);
  }
  PagedAttentionCudaOptions late_kv;
  late_kv.early_kv = false;
  EXPECT_TRUE(download16(run_on_device(p, late_kv).out) == base)
      << "K/V copies all after the dependency wait";
  PagedAttentionCudaOptions unpaced;
  unpaced.early_window = 0;
  EXPECT_TRUE(download16(run_on_device(p, unpaced).out) == base) << "early copies not paced";
  for (int window : {3, 5}) {  // as deep as the held kernel's stages, and deeper
    PagedAttentionCudaOptions windowed;
    windowed.early_window = window;
    EXPECT_TRUE(download16(run_on_device(p, windowed).out) == base)
        << "early copies " << window << " stages at a time";
  }
  PagedAttentionCudaOptions cached;
  cached.kv_evict_first = false;
  EXPECT_TRUE(download16(run_on_device(p, cached).out) == base) << "K/V copies without the L2 hint";
  PagedAttentionCudaOptions unheld;
  unheld.hold_first_tile = false;
  EXPECT_TRUE(download16(run_on_device(p, unheld).out) == base) << "first tile not held in registers";
  PagedAttentionCudaOptions single;
  single.pair_rows = false;
  EXPECT_TRUE(download16(run_on_device(p, single).out) == base) << "extend rows one a block";
  PagedAttentionCudaOptions held_late;
  held_late.hold_before_wait = false;
  EXPECT_TRUE(download16(run_on_device(p, held_late).out) == base) << "first tile held after the wait";
  for (int stages : {2, 3, 4}) {
    PagedAttentionCudaOptions deeper;
    deeper.stages = stages;
    deeper.dependent_launch = false;
    EXPECT_TRUE(download16(run_on_device(p, deeper).out) == base) << stages << " pipeline stages";
  }
  EXPECT_TRUE(download16(run_on_device(p, {}, 3).out) == base) << "workspace of 3 rows (several launches)";

  const int64_t row_elems = int64_t{s.n_kv} * s.n_rep * s.head_dim;
  for (size_t b = 0; b < seqs.size(); ++b) {
    Problem alone = p;  // the same pools and block tables, one sequence
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
    const int64_t kv_row = int64_t{s.n_kv} * s.head_dim;
    alone.k_new16.assign(p.k_new16.begin() + t0 * kv_row, p.k_new16.begin() + t1 * kv_row);
    alone.v_new16.assign(p.v_new16.begin() + t0 * kv_row, p.v_new16.begin() + t1 * kv_row);
    const std::vector<uint16_t> out = download16(run_on_device(alone).out);
    EXPECT_TRUE(std::equal(out.begin(), out.end(), base.begin() + t0 * row_elems))
        << "sequence " << b << " alone";
  }
}

TEST(PagedAttentionCuda, OutputIndependentOfBatchAndReduction) {
  NS_SKIP_WITHOUT_GPU();
  expect_output_independent_of_batch_and_reduction({{3000, 1}, {5, 1}, {300, 40}, {64, 1}});
  expect_output_independent_of_batch_and_reduction({{3000, 1}, {5, 1}, {9000, 1}, {300, 40}, {64, 1}});
}

// The diagnostic trace: every thread block of the attention grid stamps its
// points on the critical path in order, by the timer and by its cycle counter,
// every block of the reduction its three, and the output is the untraced one.
TEST(PagedAttentionCuda, TraceStampsEveryBlockInOrder) {
  NS_SKIP_WITHOUT_GPU();
  const Shape s{DType::kBF16, 128, 16, 2, 4};
  const Problem p = make_problem(fresh_seed(), s, {{3000, 1}, {5, 1}});  // 12 splits and 1
  const std::vector<uint16_t> base = download16(run_on_device(p).out);
  Tensor trace = cuda::empty(DType::kI32, {int64_t{2} << 21});  // 2^21 u64 slots
  cuda::fill_bytes(trace, 0);
  PagedAttentionCudaOptions traced;
  traced.trace = trace.data_as<uint64_t>();
  EXPECT_TRUE(download16(run_on_device(p, traced).out) == base);
  std::vector<uint64_t> t(size_t{1} << 21);
  const Tensor host = cuda::to_host(trace);
  std::memcpy(t.data(), host.data(), t.size() * 8);
  constexpr int kPoints = kPagedAttentionTracePoints, kSlots = 2 * kPoints;
  // Entry, early copies issued, wait returned, remaining copies issued, q
  // loaded, first tile landed, tiles done, partials written.
  const int plain_order[] = {0, 1, 2, 8, 9, 5, 3, 4};
  // A split of four tiles (row 0's first 11; the 12th has 3) holds its first
  // tile in registers, and it lies before the step's row, so it is held before
  // the wait: landed before the early copies are done.
  const int held_order[] = {0, 5, 1, 2, 8, 9, 3, 4};
  // Attention grid: (kv heads x groups = 2, splits = 12, rows = 2); row 1 has one split.
  int blocks = 0, idle = 0;
  for (int b = 0; b < 2 * 12 * 2; ++b) {
    const uint64_t* v = t.data() + kSlots * b;
    ASSERT_NE(v[0], 0u) << "block " << b << " did not stamp its entry";
    if (v[4] == 0) {
      ++idle;  // a split beyond its row's plan returns early
      continue;
    }
    ++blocks;
    const int split = b / 2 % 12, row = b / 24;
    const int* order = row == 0 && split < 11 ? held_order : plain_order;
    for (int k = 1; k < 8; ++k) {
      EXPECT_LE(v[order[k - 1]], v[order[k]]) << "block " << b << " point " << order[k];
      EXPECT_LE(v[kPoints + order[k - 1]], v[kPoints + order[k]]) << "block " << b << " cycles " << order[k];
    }
  }
  EXPECT_EQ(blocks, 2 * 12 + 2 * 1);
  EXPECT_EQ(idle, 2 * 11);
  // Reduction grid: (rows = 2, heads / 4 = 2); row 0's blocks wait and combine.
  for (int b = 0; b < 2 * 2; ++b) {
    const uint64_t* v = t.data() + (size_t{1} << 20) + kSlots * b;
    ASSERT_NE(v[0], 0u) << "reduction block " << b;
    if (b % 2 == 0) {  // row 0
      EXPECT_LE(v[0], v[1]);
      EXPECT_LE(v[1], v[2]);
    }
  }
}

TEST(PagedAttentionCuda, SplitPlanDependsOnContextOnly) {
  // Host-side: no device needed.
  EXPECT_EQ(paged_attention_cuda_num_splits(1, 128), 1);
  EXPECT_EQ(paged_attention_cuda_num_splits(128, 128), 1);
  EXPECT_GT(paged_attention_cuda_num_splits(4096, 128), 1);
  EXPECT_LE(paged_attention_cuda_num_splits(1 << 20, 128), PagedAttentionWorkspaceCuda::kMaxSplits);
  for (int ctx : {1, 17, 97, 2048, 16384, 100000}) {
    PagedAttentionCudaOptions four;
    four.max_splits = 4;
    EXPECT_LE(paged_attention_cuda_num_splits(ctx, 64, four), 4);
  }
}

}  // namespace
}  // namespace nanoserve

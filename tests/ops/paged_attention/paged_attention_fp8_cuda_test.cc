// The CUDA paged attention over FP8 (E4M3) pools with per-layer scales:
//   - the KV writes (paged_kv_write_cuda, rope_kv_write_cuda) store exactly
//     the CPU rule's bytes (core/kv_quant.h: every bf16 bit pattern, so
//     ties, saturation, subnormals, infinities and NaN included);
//   - the tile arithmetic over fp8 pools (its own: f16 products of the
//     codes, the scales on the scores and the output) matches the frozen
//     reference over the dequantized values within the bf16 tolerance, and
//     equals itself bit for bit whichever kernel computes a row (decode
//     rows, query-tiled rows in chunks of 5 and 64), in launches of 3 decode
//     rows, with late copies, at 2 and 3 decode stages with 1, 2 and 4
//     splits a block, and alone as in a batch, at both head dims and head
//     groups of 1 to 16;
//   - the split kernel over fp8 pools equals, bit for bit, the bf16 kernel
//     over the dequantized pools (bf16(f32(q) * scale), which is what the fp8
//     kernel dequantizes a landed tile to), with every tuning variant (held
//     tiles, paired rows, stage depths), decode and extend rows, a sliding
//     window, and scales that saturate; at head_dim 256 (Gemma), with
//     soft-capping and with attention sinks (gpt-oss) too; and the frozen
//     reference over the dequantized values within the bf16 tolerance.
// Without a CUDA device every test reports SKIPPED with the runtime's reason.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/kv_quant.h"
#include "ops/paged_attention/paged_attention_cuda_harness.h"
#include "ops/rope/rope_cuda.cuh"

namespace nanoserve {
namespace {

using namespace paged_attention_test;

Tensor device_bytes(const std::vector<uint8_t>& v, std::vector<int64_t> shape) {
  return cuda::to_device(
      Tensor::view(const_cast<uint8_t*>(v.data()), DType::kF8E4M3, std::move(shape), nullptr));
}
std::vector<uint8_t> download8(const Tensor& dev) {
  std::vector<uint8_t> h(static_cast<size_t>(dev.numel()));
  cuda::copy_to_host(dev, Tensor::view(h.data(), dev.dtype(), dev.shape(), nullptr));
  return h;
}
std::vector<uint8_t> quantize(const std::vector<uint16_t>& bf16, float scale) {
  std::vector<uint8_t> q(bf16.size());
  for (size_t i = 0; i < bf16.size(); ++i) q[i] = kv_f8_quantize(bf16_to_f32(bf16[i]), scale);
  return q;
}

// Every bf16 bit pattern as K (and, shifted, as V) of 256 tokens: the write
// kernel's bytes against kv_f8_quantize, with a scale of 1 and an awkward one.
TEST(PagedAttentionFp8Cuda, KvWriteQuantizesEveryBf16LikeTheCpu) {
  NS_SKIP_WITHOUT_GPU();
  constexpr int kT = 256, kKv = 2, kHd = 128, kBs = 16, kBlocks = kT / kBs + 2;
  std::vector<uint16_t> k(kT * kKv * kHd), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<uint16_t>(i);
    v[i] = static_cast<uint16_t>(i * 40503u + 7u);  // another order of all patterns
  }
  ForwardBatch fb;
  fb.seq_ids = {0};
  fb.seq_starts = {0, kT};
  fb.context_lens = {kT};
  fb.max_blocks_per_seq = kT / kBs;
  std::vector<int32_t> table;
  for (int i = 0; i < kT / kBs; ++i) table.push_back(kBlocks - 1 - i);  // blocks in reverse
  fb.block_tables = table;
  for (int t = 0; t < kT; ++t) {
    fb.tokens.push_back(0);
    fb.positions.push_back(t);
    fb.slot_mapping.push_back(table[t / kBs] * kBs + t % kBs);
  }
  fb.slot_mapping[5] = -1;  // padding: not written
  DeviceBatch batch(kT, 1, kT / kBs);
  batch.upload(fb);
  const Tensor kd = device_from(k, DType::kBF16, {kT, kKv, kHd}),
               vd = device_from(v, DType::kBF16, {kT, kKv, kHd});
  for (const KvScales scales : {KvScales{1.0f, 1.0f}, KvScales{0.37f, 3.1f}}) {
    SCOPED_TRACE(std::to_string(scales.k) + ", " + std::to_string(scales.v));
    Tensor kp = cuda::empty(DType::kF8E4M3, {kBlocks, kBs, kKv, kHd});
    Tensor vp = cuda::empty(DType::kF8E4M3, {kBlocks, kBs, kKv, kHd});
    cuda::fill_bytes(kp, 0xa5);
    cuda::fill_bytes(vp, 0xa5);
    paged_kv_write_cuda(kd, vd, batch, kp, vp, nullptr, scales);
    cuda::synchronize();
    const std::vector<uint8_t> kh = download8(kp), vh = download8(vp);
    std::vector<bool> written(kBlocks * kBs, false);
    const int row = kKv * kHd;
    for (int t = 0; t < kT; ++t) {
      const int slot = fb.slot_mapping[t];
      if (slot < 0) continue;
      written[slot] = true;
      for (int e = 0; e < row; ++e) {
        const size_t i = static_cast<size_t>(t) * row + e;
        ASSERT_EQ(kh[slot * row + e], kv_f8_quantize(bf16_to_f32(k[i]), scales.k))
            << "K bf16 0x" << std::hex << k[i];
        ASSERT_EQ(vh[slot * row + e], kv_f8_quantize(bf16_to_f32(v[i]), scales.v))
            << "V bf16 0x" << std::hex << v[i];
      }
    }
    for (int s = 0; s < kBlocks * kBs; ++s) {
      if (written[s]) continue;
      for (int e = 0; e < row; ++e) ASSERT_EQ(kh[s * row + e], 0xa5) << "slot " << s << " written";
    }
  }
}

// The fused RoPE + KV write into fp8 pools stores the bf16 rows it stores into
// bf16 pools, quantized: the same kernel's two outputs, byte for byte.
TEST(PagedAttentionFp8Cuda, RopeKvWriteIntoFp8PoolsQuantizesTheBf16Rows) {
  NS_SKIP_WITHOUT_GPU();
  constexpr int kT = 37, kHeads = 9, kKv = 3, kHd = 64, kBs = 16, kBlocks = 4;
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.0f, 40.0f);  // some past 448 x scale
  std::vector<uint16_t> qkv(static_cast<size_t>(kT) * (kHeads + 2 * kKv) * kHd);
  for (uint16_t& x : qkv) x = f32_to_bf16(n(rng));
  std::vector<int32_t> pos(kT), slots(kT);
  for (int t = 0; t < kT; ++t) pos[t] = 100 + t, slots[t] = (t * 7) % (kBlocks * kBs);  // distinct slots
  slots[4] = -1;
  std::vector<float> inv_freq(kHd / 2);
  for (int i = 0; i < kHd / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / kHd);
  const Tensor qkv_d = device_from(qkv, DType::kBF16, {kT, (kHeads + 2 * kKv) * kHd});
  const Tensor pos_d = cuda::to_device(Tensor::view(pos.data(), DType::kI32, {kT}, nullptr));
  const Tensor slots_d = cuda::to_device(Tensor::view(slots.data(), DType::kI32, {kT}, nullptr));
  const Tensor freq_d = cuda::to_device(Tensor::view(inv_freq.data(), DType::kF32, {kHd / 2}, nullptr));
  const KvScales scales{0.21f, 0.083f};
  Tensor q16 = cuda::empty(DType::kBF16, {kT, kHeads, kHd}),
         q8 = cuda::empty(DType::kBF16, {kT, kHeads, kHd});
  Tensor k16 = cuda::empty(DType::kBF16, {kBlocks, kBs, kKv, kHd}),
         v16 = cuda::empty(DType::kBF16, k16.shape());
  Tensor k8 = cuda::empty(DType::kF8E4M3, k16.shape()), v8 = cuda::empty(DType::kF8E4M3, k16.shape());
  for (const Tensor* t : {&k16, &v16}) cuda::fill_bytes(*t, 0);
  for (const Tensor* t : {&k8, &v8}) cuda::fill_bytes(*t, 0);
  rope_kv_write_cuda(qkv_d, pos_d.data_as<const int32_t>(), slots_d.data_as<const int32_t>(),
                     freq_d.data_as<const float>(), kHd, kHeads, kKv, q16, k16, v16, nullptr);
  rope_kv_write_cuda(qkv_d, pos_d.data_as<const int32_t>(), slots_d.data_as<const int32_t>(),
                     freq_d.data_as<const float>(), kHd, kHeads, kKv, q8, k8, v8, nullptr, {}, scales);
  cuda::synchronize();
  EXPECT_TRUE(download16(q8) == download16(q16)) << "q differs with fp8 pools";
  std::vector<uint8_t> want_k = quantize(download16(k16), scales.k),
                       want_v = quantize(download16(v16), scales.v);
  // Unwritten slots: zero in both (a zero bf16 quantizes to a zero byte).
  EXPECT_TRUE(download8(k8) == want_k) << "K pool";
  EXPECT_TRUE(download8(v8) == want_v) << "V pool";
}

// A problem's pools in fp8 (this step's slots NaN until the write) and the
// same pools dequantized to bf16 (with this step's rows).
struct Fp8Problem {
  Problem p;  // bf16 values; p.k_pool / v_pool become the dequantized f32 truth
  KvScales scales;
  std::vector<uint8_t> k8, v8, k8_full, v8_full;  // pools before and after the write
  std::vector<uint16_t> k_deq16, v_deq16;         // the full pools, dequantized, in bf16
};

Fp8Problem make_fp8_problem(uint64_t seed, const Shape& s, const std::vector<std::pair<int, int>>& seqs,
                            KvScales scales) {
  Fp8Problem f{make_problem(seed, s, seqs), scales, {}, {}, {}, {}, {}, {}};
  f.k8_full = quantize(f.p.k_pool16_full, scales.k);
  f.v8_full = quantize(f.p.v_pool16_full, scales.v);
  f.k8 = quantize(f.p.k_pool16, scales.k);  // NaN (0x7f) in this step's slots
  f.v8 = quantize(f.p.v_pool16, scales.v);
  f.k_deq16.resize(f.k8_full.size());
  f.v_deq16.resize(f.v8_full.size());
  for (size_t i = 0; i < f.k8_full.size(); ++i) {
    const float kx = kv_f8_dequantize(f.k8_full[i], scales.k), vx = kv_f8_dequantize(f.v8_full[i], scales.v);
    f.k_deq16[i] = f32_to_bf16(kx);
    f.v_deq16[i] = f32_to_bf16(vx);
    f.p.k_pool[i] = bf16_to_f32(f.k_deq16[i]);
    f.p.v_pool[i] = bf16_to_f32(f.v_deq16[i]);
  }
  return f;
}

// fp8 pools (written through paged_kv_write_cuda), one tuning: the pools'
// bytes after the write; for the split kernel the outputs bit for bit
// against the bf16 kernel over pools of the dequantized values; the
// reference. Returns the output.
std::vector<uint16_t> check_fp8(const Shape& s, const std::vector<std::pair<int, int>>& seqs, KvScales scales,
                                const PagedAttentionTuning& opt = {}, std::vector<int> check = {},
                                uint64_t seed = 0) {
  if (seed == 0) seed = fresh_seed();
  SCOPED_TRACE(describe(s) + ", scales " + std::to_string(scales.k) + " / " + std::to_string(scales.v) +
               ", seed " + std::to_string(seed));
  const Fp8Problem f = make_fp8_problem(seed, s, seqs, scales);
  const Problem& p = f.p;
  const int64_t hd = s.head_dim;
  const std::vector<int64_t> pool_shape = {p.num_blocks, s.block_size, s.n_kv, hd};
  Tensor k8 = device_bytes(f.k8, pool_shape), v8 = device_bytes(f.v8, pool_shape);
  const Tensor kd = device_from(f.k_deq16, DType::kBF16, pool_shape),
               vd = device_from(f.v_deq16, DType::kBF16, pool_shape);
  const Tensor q = device_from(p.q16, DType::kBF16, {p.num_tokens, p.n_heads, hd});
  const Tensor k_new = device_from(p.k_new16, DType::kBF16, {p.num_tokens, s.n_kv, hd});
  const Tensor v_new = device_from(p.v_new16, DType::kBF16, {p.num_tokens, s.n_kv, hd});
  Tensor out8 = cuda::empty(DType::kBF16, {p.num_tokens, p.n_heads, hd});
  Tensor out16 = cuda::empty(DType::kBF16, {p.num_tokens, p.n_heads, hd});
  cuda::fill_bytes(out8, 0xFF);
  cuda::fill_bytes(out16, 0xFF);
  DeviceBatch batch(p.num_tokens, static_cast<int32_t>(p.batch.seq_ids.size()), p.max_blocks);
  batch.upload(p.batch);
  PagedAttentionWorkspaceCuda ws(p.num_tokens, p.n_heads, s.head_dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  Tensor sinks_d;
  if (!p.sinks.empty()) {
    sinks_d = cuda::to_device(Tensor::view(const_cast<float*>(p.sinks.data()), DType::kF32,
                                           {static_cast<int64_t>(p.sinks.size())}, nullptr));
  }
  const float* sinks = sinks_d.defined() ? sinks_d.data_as<const float>() : nullptr;
  paged_kv_write_cuda(k_new, v_new, batch, k8, v8, nullptr, scales);
  paged_attention_cuda(q, k8, v8, batch, s.n_rep, scale, ws, out8, nullptr, opt, s.window, s.softcap, sinks,
                       scales);
  cuda::synchronize();
  EXPECT_TRUE(download8(k8) == f.k8_full) << "K pool after the write";
  EXPECT_TRUE(download8(v8) == f.v8_full) << "V pool after the write";
  const std::vector<uint16_t> got = download16(out8);
  if (!opt.tiles) {
    paged_attention_cuda(q, kd, vd, batch, s.n_rep, scale, ws, out16, nullptr, opt, s.window, s.softcap,
                         sinks);
    cuda::synchronize();
    const std::vector<uint16_t> want = download16(out16);
    size_t diff = 0;
    for (size_t i = 0; i < got.size(); ++i) diff += got[i] != want[i];
    EXPECT_EQ(diff, 0u) << "of " << got.size()
                        << " outputs differ from the bf16 kernel over the dequantized pools";
  }
  if (check.empty()) {
    for (size_t b = 0; b < seqs.size(); ++b) check.push_back(static_cast<int>(b));
  }
  expect_matches_reference(p, got, check);
  return got;
}

// The tile arithmetic over fp8 pools holding every row of p's step already
// (as earlier chunks' steps would have left them; the write puts the same
// bytes in again): the output of p's rows as batched in `p`.
std::vector<uint16_t> run_tiles_fp8(const Problem& p, const Fp8Problem& f, PagedAttentionTuning opt,
                                    int max_rows = 0) {
  opt.tiles = true;
  const Shape& s = p.shape;
  const int64_t hd = s.head_dim;
  const std::vector<int64_t> pool_shape = {p.num_blocks, s.block_size, s.n_kv, hd};
  Tensor k8 = device_bytes(f.k8_full, pool_shape), v8 = device_bytes(f.v8_full, pool_shape);
  const Tensor q = device_from(p.q16, DType::kBF16, {p.num_tokens, p.n_heads, hd});
  const Tensor k_new = device_from(p.k_new16, DType::kBF16, {p.num_tokens, s.n_kv, hd});
  const Tensor v_new = device_from(p.v_new16, DType::kBF16, {p.num_tokens, s.n_kv, hd});
  Tensor out = cuda::empty(DType::kBF16, {p.num_tokens, p.n_heads, hd});
  cuda::fill_bytes(out, 0xFF);
  DeviceBatch batch(p.num_tokens, static_cast<int32_t>(p.batch.seq_ids.size()), p.max_blocks);
  batch.upload(p.batch);
  PagedAttentionWorkspaceCuda ws(max_rows > 0 ? max_rows : p.num_tokens, p.n_heads, s.head_dim);
  paged_kv_write_cuda(k_new, v_new, batch, k8, v8, nullptr, f.scales);
  paged_attention_cuda(q, k8, v8, batch, s.n_rep, 1.0f / std::sqrt(static_cast<float>(hd)), ws, out, nullptr,
                       opt, s.window, s.softcap, nullptr, f.scales);
  cuda::synchronize();
  return download16(out);
}

// The tile arithmetic over fp8 pools against the reference, then every row
// bitwise the same as a decode row (as_chunks: chunks of 1, 5 and 64 rows),
// the decode rows also in launches of 3 rows, with their copies after the
// dependency wait, at 2 and 3 stages with 1, 2 and 4 splits a block, and each
// sequence alone.
void expect_fp8_tiles_consistent(const Shape& s, const std::vector<std::pair<int, int>>& seqs,
                                 KvScales scales) {
  const uint64_t seed = fresh_seed();
  PagedAttentionTuning t;
  t.tiles = true;
  const std::vector<uint16_t> base = check_fp8(s, seqs, scales, t, {}, seed);
  SCOPED_TRACE(describe(s) + ", scales " + std::to_string(scales.k) + " / " + std::to_string(scales.v) +
               ", seed " + std::to_string(seed));
  const Fp8Problem f = make_fp8_problem(seed, s, seqs, scales);
  for (int chunk : {1, 5, 64}) {
    EXPECT_TRUE(run_tiles_fp8(as_chunks(f.p, chunk), f, t) == base)
        << "rows in chunks of " << chunk << " differ from the whole step's";
  }
  const Problem decodes = as_chunks(f.p, 1);
  EXPECT_TRUE(run_tiles_fp8(decodes, f, t, 3) == base) << "decode launches of 3 rows";
  PagedAttentionTuning late = t;
  late.early_kv = false;
  EXPECT_TRUE(run_tiles_fp8(decodes, f, late) == base) << "decode copies after the wait";
  for (int stages : {2, 3}) {
    for (int group : {1, 2, 4}) {
      PagedAttentionTuning deeper = t;
      deeper.stages = stages;
      deeper.split_group = group;
      EXPECT_TRUE(run_tiles_fp8(decodes, f, deeper) == base)
          << "decode, " << stages << " stages, " << group << " splits a block";
    }
  }
  const int64_t row_elems = int64_t{s.n_kv} * s.n_rep * s.head_dim;
  for (size_t b = 0; b < seqs.size(); ++b) {
    const std::vector<uint16_t> out = run_tiles_fp8(sequence_alone(f.p, b), f, t);
    EXPECT_TRUE(std::equal(out.begin(), out.end(), base.begin() + f.p.batch.seq_starts[b] * row_elems))
        << "sequence " << b << " alone";
  }
}

std::vector<PagedAttentionTuning> tunings() {
  std::vector<PagedAttentionTuning> v(6);
  v[1].hold_first_tile = false;
  v[2].pair_rows = false;
  v[3].stages = 4;
  v[4].early_kv = false;
  v[5].hold_before_wait = false;
  return v;
}

const KvScales kScales{0.05f, 0.011f};  // |x| < 1 to codes up to 20 and 91

TEST(PagedAttentionFp8Cuda, DecodeEqualsBf16OverDequantizedPools) {
  NS_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<int, int>> seqs{{1, 1}, {17, 1}, {97, 1}, {2048, 1}, {16384, 1}};
  for (int hd : {64, 128}) {
    for (int n_rep : {1, 3, 4, 8}) check_fp8({DType::kBF16, hd, 16, 2, n_rep}, seqs, kScales);
  }
  check_fp8({DType::kBF16, 64, 8, 3, 3}, {{1, 1}, {97, 1}, {2049, 1}}, kScales);
  check_fp8({DType::kBF16, 128, 32, 8, 4}, {{255, 1}, {256, 1}, {3000, 1}}, kScales);
  // Scale 1 (small values fall to subnormal codes) and a scale that saturates most of K.
  check_fp8({DType::kBF16, 128, 16, 2, 4}, seqs, {1.0f, 1.0f});
  check_fp8({DType::kBF16, 128, 16, 2, 4}, seqs, {1.0f / 1024, 0.3f});
}

TEST(PagedAttentionFp8Cuda, EveryTuningEqualsBf16OverDequantizedPools) {
  NS_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<int, int>> decode{{1, 1}, {300, 1}, {2048, 1}, {9000, 1}};
  const std::vector<std::pair<int, int>> extend{{1, 1}, {37, 37}, {120, 20}, {1000, 300}, {2048, 1}, {5, 2}};
  for (const PagedAttentionTuning& t : tunings()) {
    SCOPED_TRACE(::testing::Message()
                 << "hold " << t.hold_first_tile << " pair " << t.pair_rows << " stages " << t.stages
                 << " early " << t.early_kv << " before_wait " << t.hold_before_wait);
    check_fp8({DType::kBF16, 128, 16, 8, 4}, decode, kScales, t);
    check_fp8({DType::kBF16, 64, 16, 2, 8}, extend, kScales, t);
    check_fp8({DType::kBF16, 128, 16, 2, 2}, extend, kScales, t);
  }
}

TEST(PagedAttentionFp8Cuda, BigBatchesAndWindowsEqualBf16OverDequantizedPools) {
  NS_SKIP_WITHOUT_GPU();
  std::mt19937 rng(static_cast<uint32_t>(fresh_seed()));
  std::uniform_int_distribution<int> len(1, 2500);
  std::vector<std::pair<int, int>> seqs;
  for (int b = 0; b < 64; ++b) seqs.push_back({len(rng), 1});
  check_fp8({DType::kBF16, 128, 16, 8, 4}, seqs, kScales, {}, {0, 1, 2, 31, 63});
  Shape windowed{DType::kBF16, 128, 16, 2, 4};
  windowed.window = 100;
  check_fp8(windowed, {{1, 1}, {97, 1}, {2048, 1}, {600, 64}}, kScales);
}

// The tile arithmetic (both kernels) over fp8 pools: decode rows of 1 to
// 36 splits, prompts, chunks over a history, head groups of 1 to 16, both
// head dims, scale 1 (small values fall to subnormal codes) and scales
// that saturate most of K.
TEST(PagedAttentionFp8Cuda, TilesMatchReferenceAndEqualAcrossChunksAndKernels) {
  NS_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<int, int>> decode{{1, 1}, {17, 1}, {300, 1}, {2048, 1}, {9000, 1}};
  const std::vector<std::pair<int, int>> mixed{{1, 1},    {37, 37}, {120, 20}, {1000, 300},
                                               {2048, 1}, {5, 2},   {130, 65}};
  expect_fp8_tiles_consistent({DType::kBF16, 128, 16, 8, 4}, decode, kScales);
  expect_fp8_tiles_consistent({DType::kBF16, 128, 16, 2, 4}, mixed, kScales);
  for (int n_rep : {1, 3, 8, 16})
    expect_fp8_tiles_consistent({DType::kBF16, 64, 32, 2, n_rep}, mixed, kScales);
  expect_fp8_tiles_consistent({DType::kBF16, 128, 8, 1, 16}, {{500, 499}, {17, 1}, {4096, 1}}, kScales);
  expect_fp8_tiles_consistent({DType::kBF16, 128, 16, 2, 4}, decode, {1.0f, 1.0f});
  expect_fp8_tiles_consistent({DType::kBF16, 128, 16, 2, 4}, mixed, {1.0f / 1024, 0.3f});
}

// Small steps of both tile kernels over fp8 pools, for compute-sanitizer
// (scripts/gpu-check): a row of several splits, rows cut by a tile's end.
TEST(PagedAttentionFp8Cuda, TilesSmallStepsMatchReference) {
  NS_SKIP_WITHOUT_GPU();
  const Shape s{DType::kBF16, 64, 16, 1, 3};
  const std::vector<std::pair<int, int>> seqs{{1, 1}, {37, 37}, {120, 20}, {300, 1}, {5, 2}};
  const uint64_t seed = fresh_seed();
  PagedAttentionTuning t;
  t.tiles = true;
  const std::vector<uint16_t> base = check_fp8(s, seqs, kScales, t, {}, seed);
  const Fp8Problem f = make_fp8_problem(seed, s, seqs, kScales);
  EXPECT_TRUE(run_tiles_fp8(as_chunks(f.p, 1), f, t) == base) << "seed " << seed << ": decode rows differ";
}

// The families' extras over fp8 pools: head_dim 256 (the plain kernel, a
// 16 KB stage dequantized in place), soft-capping and sinks (which act on the
// scores and sums after the dequantized tile), each with decode rows of one
// split and of several, and extend rows.
TEST(PagedAttentionFp8Cuda, FamilyExtrasEqualBf16OverDequantizedPools) {
  NS_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<int, int>> seqs{{1, 1}, {17, 1}, {97, 1}, {2048, 1}, {600, 64}, {37, 37}};
  for (int n_rep : {1, 2, 8}) check_fp8({DType::kBF16, 256, 16, 2, n_rep}, seqs, kScales);
  Shape gemma{DType::kBF16, 256, 16, 4, 2};
  gemma.softcap = 50.0f;
  check_fp8(gemma, seqs, kScales);
  gemma.window = 100;  // a local layer
  check_fp8(gemma, seqs, kScales);
  Shape oss{DType::kBF16, 64, 16, 2, 8};  // gpt-oss: head_dim 64, 8 query heads a kv head, sinks
  oss.sinks = true;
  check_fp8(oss, seqs, kScales);
  oss.window = 128;
  check_fp8(oss, seqs, kScales);
  Shape sinks256{DType::kBF16, 256, 16, 2, 4};
  sinks256.sinks = true;
  sinks256.softcap = 30.0f;
  for (const PagedAttentionTuning& t : tunings()) {
    if (t.stages > 3) continue;  // head_dim 256 takes at most 3 stages
    check_fp8(sinks256, seqs, kScales, t);
  }
}

}  // namespace
}  // namespace nanoserve

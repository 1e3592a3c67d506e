// rope_kv_write_cuda against rope_ref (adjacent pairs, f64 rotation of the f32
// angle) on fresh random qkv rows, with positions up to 100000 under Llama-3
// scaled frequencies and plain ones: T = 1, 3, 17, 97, 300; SmolLM2's heads
// (9 q, 3 kv, head_dim 64), Llama-3-8B's (32, 8, 128), partial rotation
// (rope_dim < head_dim), head_dim 10 (not a multiple of 8: one pair a thread)
// and a misaligned q_out (the pair path at head_dim 128). q is held to the
// bf16 tolerance (cuda_op_check.h); the pools are NaN-filled first, and after
// the call exactly the slots of the step's tokens hold k (bf16 tolerance) and
// v (bitwise), while every other slot, those of tokens with slot -1 or a slot
// past the pool included, is still NaN, byte for byte. With the families'
// extras (RopeKvExtras): a qkv bias (qwen2) and the per-head q/k RMSNorm
// (qwen3), against the bias added in f32 and rmsnorm_ref over each head; v then
// is bf16(v + bias). With gpt-oss's YaRN attention factor (rotated_scale) at
// gpt-oss-20b's heads: the reference's rotated q and k times it, v untouched.

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "core/half.h"
#include "model/config.h"
#include "ops/cuda_op_check.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rope/rope.h"
#include "ops/rope/rope_cuda.cuh"
#include "ops/rope/rope_freqs.h"

namespace nanoserve {
namespace {

using namespace nanoserve::testing;

struct RopeShape {
  int32_t n_heads, n_kv, head_dim, rope_dim;
  bool llama3;
};

std::vector<float> inv_freqs(const RopeShape& s) {
  RopeScaling sc;
  if (s.llama3) {
    sc.type = RopeScaling::Type::kLlama3;
    sc.factor = 8;
    sc.low_freq_factor = 1;
    sc.high_freq_factor = 4;
    sc.original_context_length = 8192;
  }
  return rope_inv_freqs(s.rope_dim, s.llama3 ? 500000.0f : 10000.0f, sc);
}

void check_rope(const RopeShape& s, int32_t T, bool misaligned_q, bool extras = false,
                float rotated_scale = 1.0f) {
  const uint64_t seed = fresh_seed();
  const std::string what = "heads " + std::to_string(s.n_heads) + "/" + std::to_string(s.n_kv) +
                           " head_dim " + std::to_string(s.head_dim) + " rope_dim " +
                           std::to_string(s.rope_dim) + (s.llama3 ? " llama3" : "") + " T " +
                           std::to_string(T) + (misaligned_q ? " (q_out misaligned)" : "") +
                           (extras ? " (bias, q/k norm)" : "") +
                           (rotated_scale != 1.0f ? " rotated x" + std::to_string(rotated_scale) : "") +
                           ", seed " + std::to_string(seed);
  SCOPED_TRACE(what);
  std::mt19937_64 rng(seed);
  const int64_t hd = s.head_dim, H = s.n_heads, KV = s.n_kv, width = (H + 2 * KV) * hd;
  const int64_t block_size = 16, num_blocks = (T + block_size - 1) / block_size + 3;
  const int64_t num_slots = num_blocks * block_size;

  const std::vector<uint16_t> qkv16 = to_bf16(uniform_floats(T * width, seed, 2.0f));
  std::vector<float> qkv = from_bf16(qkv16);
  constexpr float kEps = 1e-6f;
  const std::vector<float> bias = uniform_floats(width, seed + 1, 1.0f);
  std::vector<float> q_norm = uniform_floats(hd, seed + 2, 0.5f), k_norm = uniform_floats(hd, seed + 3, 0.5f);
  for (float& w : q_norm) w += 1.0f;
  for (float& w : k_norm) w += 1.0f;
  if (extras) {
    for (int64_t i = 0; i < T * width; ++i)
      qkv[static_cast<size_t>(i)] += bias[static_cast<size_t>(i % width)];
  }
  std::vector<int32_t> positions(static_cast<size_t>(T));
  std::uniform_int_distribution<int32_t> pos(0, 100000);
  for (int32_t& p : positions) p = pos(rng);
  const int32_t fixed[] = {0, 1, 100000, 65537};
  for (int i = 0; i < 4 && i < T; ++i) positions[static_cast<size_t>(T - 1 - i)] = fixed[i];
  // Distinct random slots; some tokens keep none (-1), one points past the pool.
  std::vector<int32_t> all_slots(static_cast<size_t>(num_slots));
  std::iota(all_slots.begin(), all_slots.end(), 0);
  std::shuffle(all_slots.begin(), all_slots.end(), rng);
  std::vector<int32_t> slots(all_slots.begin(), all_slots.begin() + T);
  if (T >= 3) slots[1] = -1;
  if (T >= 17) slots[5] = -7, slots[9] = static_cast<int32_t>(num_slots);  // past the pool: not written
  auto kept = [&](int32_t t) { return slots[t] >= 0 && slots[t] < num_slots; };

  // Reference: q and k heads through rope_ref.
  const std::vector<float> inv = inv_freqs(s);
  Tensor q_ref = Tensor::empty(DType::kF32, {T, H, hd});
  Tensor k_ref = Tensor::empty(DType::kF32, {T, KV, hd});
  for (int64_t t = 0; t < T; ++t) {
    std::copy_n(qkv.begin() + t * width, H * hd, q_ref.data_as<float>() + t * H * hd);
    std::copy_n(qkv.begin() + t * width + H * hd, KV * hd, k_ref.data_as<float>() + t * KV * hd);
  }
  if (extras) {
    Tensor q_heads = q_ref.reshape({T * H, hd}), k_heads = k_ref.reshape({T * KV, hd});
    Tensor qw = Tensor::empty(DType::kF32, {hd}), kw = Tensor::empty(DType::kF32, {hd});
    std::copy(q_norm.begin(), q_norm.end(), qw.data_as<float>());
    std::copy(k_norm.begin(), k_norm.end(), kw.data_as<float>());
    rmsnorm_ref(q_heads, qw, kEps, q_heads);
    rmsnorm_ref(k_heads, kw, kEps, k_heads);
  }
  rope_ref(q_ref, positions, inv);
  rope_ref(k_ref, positions, inv);
  for (Tensor* r : {&q_ref, &k_ref}) {  // as the CPU forward: the rotated heads times the factor
    for (int64_t i = 0; i < r->numel(); ++i) r->data_as<float>()[i] *= rotated_scale;
  }

  const Tensor qkv_d = upload(qkv16, DType::kBF16, {T, width});
  const Tensor pos_d = upload(positions, DType::kI32, {T});
  const Tensor slot_d = upload(slots, DType::kI32, {T});
  const Tensor inv_d = upload(inv, DType::kF32, {static_cast<int64_t>(inv.size())});
  const Tensor q_buf = poisoned(DType::kBF16, {T * H * hd + 2});
  const Tensor q_out = Tensor::view(q_buf.data_as<uint16_t>() + (misaligned_q ? 2 : 0), DType::kBF16,
                                    {T, H, hd}, q_buf.owner(), Device::kCUDA);
  const std::vector<int64_t> pool_shape = {num_blocks, block_size, KV, hd};
  const Tensor bias_d = upload(bias, DType::kF32, {width});
  const Tensor q_norm_d = upload(q_norm, DType::kF32, {hd}), k_norm_d = upload(k_norm, DType::kF32, {hd});
  RopeKvExtras ex;
  if (extras) {
    ex.qkv_bias = bias_d.data_as<const float>();
    ex.q_norm = q_norm_d.data_as<const float>();
    ex.k_norm = k_norm_d.data_as<const float>();
    ex.norm_eps = kEps;
  }
  ex.rotated_scale = rotated_scale;
  const Tensor k_pool = poisoned(DType::kBF16, pool_shape);
  const Tensor v_pool = poisoned(DType::kBF16, pool_shape);
  rope_kv_write_cuda(qkv_d, pos_d.data_as<const int32_t>(), slot_d.data_as<const int32_t>(),
                     inv_d.data_as<const float>(), s.rope_dim, s.n_heads, s.n_kv, q_out, k_pool, v_pool,
                     nullptr, ex);
  cuda::synchronize();

  const std::vector<float> q_ref_v(q_ref.data_as<float>(), q_ref.data_as<float>() + T * H * hd);
  expect_close_bf16(download_f32(q_out), q_ref_v, 1e-5 * rms(q_ref_v), what + ": q");

  const std::vector<uint16_t> kp = download<uint16_t>(k_pool), vp = download<uint16_t>(v_pool);
  // Element e of kv head kh's row of `slot` in a pool.
  auto at = [&](int64_t slot, int64_t kh, int64_t e) { return (slot * KV + kh) * hd + e; };
  std::vector<float> k_got, k_want;
  std::vector<bool> slot_written(static_cast<size_t>(num_slots), false);
  for (int32_t t = 0; t < T; ++t) {
    if (!kept(t)) continue;
    const int64_t slot = slots[t];
    slot_written[slot] = true;
    for (int64_t kh = 0; kh < KV; ++kh) {
      for (int64_t e = 0; e < hd; ++e) {
        k_got.push_back(bf16_to_f32(kp[at(slot, kh, e)]));
        k_want.push_back(k_ref.data_as<float>()[(t * KV + kh) * hd + e]);
        const int64_t vi = t * width + (H + KV + kh) * hd + e;
        ASSERT_EQ(vp[at(slot, kh, e)], extras ? f32_to_bf16(qkv[static_cast<size_t>(vi)]) : qkv16[vi])
            << "v of token " << t << " in slot " << slot << ", kv head " << kh << ", element " << e;
      }
    }
  }
  if (!k_want.empty()) expect_close_bf16(k_got, k_want, 1e-5 * rms(k_want), what + ": k in the pool");
  for (int64_t slot = 0; slot < num_slots; ++slot) {
    if (slot_written[slot]) continue;
    for (int64_t kh = 0; kh < KV; ++kh) {
      for (int64_t e = 0; e < hd; ++e) {
        ASSERT_EQ(kp[at(slot, kh, e)], 0xFFFF) << "k_pool slot " << slot << " was written (no token has it)";
        ASSERT_EQ(vp[at(slot, kh, e)], 0xFFFF) << "v_pool slot " << slot << " was written (no token has it)";
      }
    }
  }
}

const RopeShape kShapes[] = {
    {9, 3, 64, 64, false},    // SmolLM2-135M
    {32, 8, 128, 128, true},  // Llama-3-8B, Llama-3 scaled frequencies
    {8, 2, 128, 64, true},    // partial rotation: dims 64..127 untouched
    {3, 1, 10, 6, false},     // head_dim not a multiple of 8; partial
};

TEST(RopeKvWriteCuda, MatchesReference) {
  NS_SKIP_WITHOUT_GPU();
  for (const RopeShape& s : kShapes) {
    for (int32_t T : {1, 3, 17, 97, 300}) check_rope(s, T, false);
  }
}

TEST(RopeKvWriteCuda, BiasAndHeadNormMatchReference) {
  NS_SKIP_WITHOUT_GPU();
  // The norm's shapes: head_dim 64 and 128 (8 and 16 lanes a head), partial rotation.
  for (const RopeShape& s : {kShapes[0], kShapes[1], kShapes[2]}) {
    for (int32_t T : {1, 17, 300}) check_rope(s, T, false, true);
  }
}

TEST(RopeKvWriteCuda, YarnAttentionFactorScalesRotatedHeads) {
  NS_SKIP_WITHOUT_GPU();
  RopeScaling yarn;
  yarn.type = RopeScaling::Type::kYarn;
  yarn.factor = 32.0f;
  const float factor = rope_attention_factor(yarn);  // 1 + 0.1 ln 32 = 1.347
  ASSERT_GT(factor, 1.3f);
  const RopeShape oss{64, 8, 64, 64, false};  // gpt-oss-20b: 64 heads of 64 over 8 kv heads
  for (int32_t T : {1, 17, 97}) check_rope(oss, T, false, false, factor);
  for (int32_t T : {1, 17}) check_rope(kShapes[0], T, false, true, factor);  // with the bias and the norms
}

TEST(RopeKvWriteCuda, MisalignedQueryOutputMatchesReference) {
  NS_SKIP_WITHOUT_GPU();
  for (int32_t T : {1, 17, 300}) check_rope(kShapes[1], T, true);
}

}  // namespace
}  // namespace nanoserve

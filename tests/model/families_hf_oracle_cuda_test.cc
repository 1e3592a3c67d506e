// The CUDA forward end to end against HF transformers, one family at a time:
// scripts/hf_oracle.py (run by scripts/gpu-check on the GPU machine, where
// torch and transformers are) saves a small random model of each family
// (llama, mistral, qwen2, qwen3, phi3, mistral with a sliding window, gemma2
// and gemma3) as an HF folder, with its logits at
// every position of four prompts, its greedy continuations, and the logits of
// the same model with the family's planted error. This test loads each folder
// through the engine's own loader, runs it on the GPU and compares: near the
// right logits, far from the planted ones. NS_HF_ORACLE_DIR names the parent
// folder; without it, or without a GPU, the test reports SKIPPED with the
// reason.
//
// GGUF: the CPU families fixtures (tests/fixtures/families, too small a
// head_dim for the CUDA attention) hold each family as a GGUF converted by
// llama.cpp and as an HF folder; uploaded to the device, both must give the
// same bf16 weights, bit for bit, so the GGUF path is the HF path that
// transformers checks.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/cuda/device_memory.cuh"
#include "core/thread_pool.h"
#include "model/kv_cpu.h"
#include "model/model_cpu.h"
#include "model/model_cuda.h"
#include "model/model_fixture.h"
#include "model/model_source.h"

namespace nanoserve {
namespace {

using testing::argmax;
using testing::nmse;

using nlohmann::json;

std::vector<float> read_floats(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  std::vector<float> v(static_cast<size_t>(f.tellg()) / 4);
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return v;
}

constexpr int32_t kBlockSize = 16, kBlocksPerSeq = 32;

ForwardBatch one_sequence(const std::vector<int32_t>& tokens, int32_t start, bool all_rows) {
  ForwardBatch b;
  b.tokens = tokens;
  for (size_t i = 0; i < tokens.size(); ++i) b.positions.push_back(start + static_cast<int32_t>(i));
  b.seq_starts = {0, static_cast<int32_t>(tokens.size())};
  b.seq_ids = {0};
  b.context_lens = {start + static_cast<int32_t>(tokens.size())};
  b.max_blocks_per_seq = kBlocksPerSeq;
  for (int32_t j = 0; j < kBlocksPerSeq; ++j) b.block_tables.push_back(j);
  for (int32_t p : b.positions) b.slot_mapping.push_back(p);
  if (all_rows) {
    for (size_t i = 0; i < tokens.size(); ++i) b.logits_rows.push_back(static_cast<int32_t>(i));
  } else {
    b.logits_rows = {static_cast<int32_t>(tokens.size()) - 1};
  }
  return b;
}

// Gemma's logits against f32 math, bf16 on the GPU (below).
constexpr double kGemmaBf16Bound = 4e-3;

void check_family(const std::string& family, const std::string& dir) {
  SCOPED_TRACE(family);
  std::ifstream jf(dir + "/oracle.json");
  ASSERT_TRUE(jf.good()) << dir << "/oracle.json";
  const json oracle = json::parse(jf);
  auto logits = [&](const char* key) { return read_floats(dir + "/" + oracle[key].get<std::string>()); };
  const std::vector<float> bf16_ref = logits("logits_file"), bf16_planted = logits("planted_logits_file");
  const std::vector<float> fp8_ref = logits("fp8_logits_file"),
                           fp8_planted = logits("fp8_planted_logits_file");

  ModelSpec spec;
  spec.path = dir;
  auto source = open_model_source(spec);
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  ThreadPool pool(1);
  auto host = CpuModel::load(source->config, source->tensors, pool);
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  const int64_t V = source->config.vocab_size;
  ASSERT_EQ(V, oracle["vocab_size"].get<int64_t>());
  // The rotary frequencies, scaling applied, against transformers' own.
  const auto hf_freq = oracle["inv_freq"].get<std::vector<float>>();
  const std::vector<float>& ours = (*host)->inv_freq();
  ASSERT_EQ(hf_freq.size(), ours.size());
  double worst_freq = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    worst_freq = std::max(worst_freq, std::fabs(double(ours[i]) - hf_freq[i]) / hf_freq[i]);
  }
  std::printf(
      "%s: rotary frequencies: worst relative difference from transformers' %.2e (attention scaling %.3f)\n",
      family.c_str(), worst_freq, oracle["attention_scaling"].get<double>());
  EXPECT_LT(worst_freq, 1e-6);
  EXPECT_EQ(oracle["attention_scaling"].get<double>(), 1.0);

  // Three times: the invariant default; --cublas-prefill (cuBLASLt in the
  // prompts' steps of more than 64 tokens); and
  // FP8 weights (quantize_fp8), against transformers over the same FP8
  // weights (its greedy tokens and the CPU forward are bf16's: not compared).
  enum class Mode { kDefault, kCublasPrefill, kFp8 };
  for (const Mode mode : {Mode::kDefault, Mode::kCublasPrefill, Mode::kFp8}) {
    const bool cublas_prefill = mode == Mode::kCublasPrefill, fp8 = mode == Mode::kFp8;
    const char* mode_name = cublas_prefill ? "--cublas-prefill " : fp8 ? "--quantization fp8 " : "";
    SCOPED_TRACE(mode_name);
    const std::vector<float>& ref = fp8 ? fp8_ref : bf16_ref;
    const std::vector<float>& planted = fp8 ? fp8_planted : bf16_planted;
    const std::string plant_name = fp8 ? "FP8 row scales x / 1.10" : oracle["planted"].get<std::string>();
    auto gpu = CudaModel::upload((*host)->config(), (*host)->weights(), (*host)->inv_freq());
    ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
    if (fp8) {
      ASSERT_TRUE((*gpu)->quantize_fp8().ok());
    }
    CudaLimits limits{512, 1, 512, kBlocksPerSeq};
    limits.cublas_prefill = cublas_prefill;
    ASSERT_TRUE((*gpu)->allocate(limits, kBlocksPerSeq, kBlockSize).ok());
    size_t offset = 0;
    double worst = 0, planted_best = 1e30;  // planted_best: the smallest ratio planted / ours
    int greedy_checked = 0, greedy_total = 0;
    for (size_t p = 0; p < oracle["prompts"].size(); ++p) {
      const auto prompt = oracle["prompts"][p].get<std::vector<int32_t>>();
      const int64_t n = static_cast<int64_t>(prompt.size());
      ASSERT_LE(offset + n * V, ref.size());
      auto got = (*gpu)->forward(one_sequence(prompt, 0, true));
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      // The CPU forward over the same loaded weights, as a second witness.
      CpuKV cache = CpuKV::per_sequence(source->config, 1, 512, pool);
      Workspace ws = (*host)->make_workspace(512, 512);
      auto cpu = (*host)->forward(one_sequence(prompt, 0, true), cache, ws);
      ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
      double w = 0, pl = 0, wc = 0, last_err_rms = 0;
      int argmax_same = 0;
      for (int64_t t = 0; t < n; ++t) {
        const float* g = got->data_as<const float>() + t * V;
        w = std::max(w, nmse(g, ref.data() + offset + t * V, V));
        wc = std::max(wc, nmse(cpu->data_as<const float>() + t * V, ref.data() + offset + t * V, V));
        pl += nmse(g, planted.data() + offset + t * V, V) / static_cast<double>(n);
        argmax_same += argmax(g, V) == argmax(ref.data() + offset + t * V, V);
        if (t == n - 1) {
          double e = 0;
          for (int64_t j = 0; j < V; ++j)
            e += (double(g[j]) - ref[offset + t * V + j]) * (double(g[j]) - ref[offset + t * V + j]);
          last_err_rms = std::sqrt(e / static_cast<double>(V));
        }
      }
      std::printf(
          "%s %sprompt %zu (%lld positions): worst NMSE vs transformers %.2e (CPU forward %.2e), mean NMSE "
          "vs the planted bug (%s) %.2e, argmax equal at %d/%lld\n",
          family.c_str(), mode_name, p, static_cast<long long>(n), w, wc, plant_name.c_str(), pl, argmax_same,
          static_cast<long long>(n));
      worst = std::max(worst, w);
      // One position attends only to itself: an attention-scale error cannot show there.
      if (n > 1) planted_best = std::min(planted_best, pl / w);
      offset += static_cast<size_t>(n * V);
      if (fp8) continue;

      // Greedy continuation, one decode step at a time, while transformers'
      // choice is clear: its top-2 margin above 8 times the RMS error of our
      // logits at the prompt's last position (bf16's error, measured above;
      // a difference of two logits errs by about 1.4 times that).
      const auto& hf = oracle["greedy"][p];
      const auto hf_tokens = hf["tokens"].get<std::vector<int32_t>>();
      const auto margins = hf["margins"].get<std::vector<float>>();
      int32_t pos = static_cast<int32_t>(n);
      int checked = 0;
      for (size_t i = 0; i < hf_tokens.size(); ++i) {
        const int32_t ours = (*gpu)->argmax()[static_cast<size_t>(i == 0 ? n - 1 : 0)];
        if (margins[i] < 8.0 * last_err_rms) break;
        EXPECT_EQ(ours, hf_tokens[i]) << "prompt " << p << ", generated token " << i << " (margin "
                                      << margins[i] << ", logits RMS error " << last_err_rms << ")";
        if (ours != hf_tokens[i]) break;
        ++checked;
        auto step = (*gpu)->forward(one_sequence({hf_tokens[i]}, pos++, false));
        ASSERT_TRUE(step.ok()) << step.status().to_string();
      }
      std::printf(
          "%s prompt %zu: %d/%zu greedy tokens equal to transformers' before the first unclear step\n",
          family.c_str(), p, checked, hf_tokens.size());
      greedy_checked += checked;
      greedy_total += static_cast<int>(hf_tokens.size());
    }
    if (mode == Mode::kDefault) {
      // One line a family for scripts/gpu-check's table.
      std::printf(
          "family %s: worst NMSE vs transformers %.2e, planted error (%s) %.1fx farther, greedy %d/%d\n",
          family.c_str(), worst, plant_name.c_str(), planted_best, greedy_checked, greedy_total);
    } else if (fp8) {
      std::printf("family %s fp8: worst NMSE vs transformers %.2e, planted error (%s) %.1fx farther\n",
                  family.c_str(), worst, plant_name.c_str(), planted_best);
    }
    // bf16 activations, K/V and attention weights against f32 math on the same
    // (bf16-exact) weights. Measured on the H200 (2026-12-04), worst over the
    // prompts: llama 9.8e-4, mistral 1.2e-3, qwen2 6.0e-4, qwen3 4.5e-4; the
    // CPU forward over the same weights matches transformers to 1e-11. The
    // bound is the llama test's since it was written, 1.5e-3. The planted
    // error must sit clearly outside it: on every prompt of more than one
    // position (one position attends only to itself, where an attention scale
    // or a rope theta cannot show) 2.5 times ours or more.
    // FP8 (W8A8): E4M3 weights times E4M3 tokens, against transformers in f32
    // over the same dequantized weights with its linears' inputs quantized a
    // token by the same rule (scripts/hf_oracle.py). A token's code is a step
    // function of x, so the bf16-level differences between our x and
    // transformers' f32 x move some codes a whole E4M3 step (2^-3), and these
    // random 4-layer models amplify that ~20x, as they do bf16's rounding:
    // 4.7e-2 to 9.9e-2, gemma3 1.6e-1, on the H100 (2026-12-07; the
    // weight-only FP8 of 2026-12-05: 1.0e-3 to 4.8e-3); bound 0.2. What
    // keeps it a check is the plant, 2.9x (gemma3) to 8.6x ours. The plant
    // is the odd rows' scales x 1.1 and the even rows' / 1.1:
    // a uniform scale error is undone by the norms after the linears (qwen3's
    // q/k norms; Gemma's q/k and sandwich norms: every scale x 1.1 landed
    // 0.3x away on gemma3, on the H100, 2026-12-05), a per-row one is not.
    // Gemma's bf16 error is larger, 1.6e-3 (gemma2) and 2.6e-3 (gemma3) on
    // the H100 (2026-12-05), its plants 240x and 320x away: bound 4e-3.
    const double bf16_bound = family.rfind("gemma", 0) == 0 ? kGemmaBf16Bound : 1.5e-3;
    EXPECT_LE(worst, fp8 ? 0.2 : bf16_bound);
    EXPECT_GT(planted_best, 2.5) << "the tolerance would not see the planted error (" << plant_name << ")";
  }
}

TEST(CudaHfOracle, EveryFamilyMatchesTransformers) {
  std::string why;
  if (cuda::device_count(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
  const char* dir = std::getenv("NS_HF_ORACLE_DIR");
  if (dir == nullptr)
    GTEST_SKIP() << "NS_HF_ORACLE_DIR is not set (scripts/gpu-check makes it with scripts/hf_oracle.py)";
  int found = 0;
  for (const char* family : {"llama", "mistral", "qwen2", "qwen3", "phi3", "mistral_window"}) {
    const std::string sub = std::string(dir) + "/" + family;
    if (!std::ifstream(sub + "/oracle.json").good()) {
      ADD_FAILURE() << sub << "/oracle.json is missing (scripts/hf_oracle.py make " << dir << ")";
      continue;
    }
    ++found;
    check_family(family, sub);
  }
  EXPECT_EQ(found, 6);
}

// Gemma 2 and Gemma 3 (text) at head_dim 256: gemma2 with its soft-caps
// (attention 5, final 10: small enough to bite) and alternating windows of 4,
// planted error the attention soft-cap dropped; gemma3 with q/k norms, three
// local layers (window 4, their own rope theta) and a global one (linear
// scaling), planted error a window of 5. The FP8 bound is the other families';
// bf16's is Gemma's own (check_family).
TEST(CudaHfOracle, GemmaFamiliesMatchTransformers) {
  std::string why;
  if (cuda::device_count(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
  const char* dir = std::getenv("NS_HF_ORACLE_DIR");
  if (dir == nullptr)
    GTEST_SKIP() << "NS_HF_ORACLE_DIR is not set (scripts/gpu-check makes it with scripts/hf_oracle.py)";
  for (const char* family : {"gemma2", "gemma3"}) {
    const std::string sub = std::string(dir) + "/" + family;
    if (!std::ifstream(sub + "/oracle.json").good()) {
      ADD_FAILURE() << sub << "/oracle.json is missing (scripts/hf_oracle.py make " << dir << ")";
      continue;
    }
    check_family(family, sub);
  }
}

// Every device tensor of a GGUF family fixture's upload equals its HF
// folder's, bit for bit.
TEST(CudaHfOracle, GgufAndHfFoldersUploadTheSameWeights) {
  std::string why;
  if (cuda::device_count(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
  ThreadPool pool(1);
  auto bytes = [](const Tensor& t) {
    if (!t.defined()) return std::vector<uint8_t>();
    const Tensor host = cuda::to_host(t);
    const auto* p = static_cast<const uint8_t*>(host.data());
    return std::vector<uint8_t>(p, p + host.nbytes());
  };
  for (const char* family : {"llama3", "mistral", "qwen2", "qwen3", "phi3"}) {
    SCOPED_TRACE(family);
    const std::string base = std::string(NS_SOURCE_DIR) + "/tests/fixtures/families/" + family;
    std::unique_ptr<CudaModel> up[2];
    for (int i = 0; i < 2; ++i) {
      ModelSpec spec;
      spec.path = i == 0 ? base + "/model.gguf" : base + "/hf";
      auto source = open_model_source(spec);
      ASSERT_TRUE(source.ok()) << source.status().to_string();
      auto host = CpuModel::load(source->config, source->tensors, pool);
      ASSERT_TRUE(host.ok()) << host.status().to_string();
      auto gpu = CudaModel::upload((*host)->config(), (*host)->weights(), (*host)->inv_freq());
      ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
      up[i] = std::move(*gpu);
    }
    const CudaWeights &g = up[0]->weights(), &h = up[1]->weights();
    EXPECT_EQ(bytes(g.tok_embd), bytes(h.tok_embd));
    EXPECT_EQ(bytes(g.lm_head), bytes(h.lm_head));
    EXPECT_EQ(bytes(g.output_norm), bytes(h.output_norm));
    ASSERT_EQ(g.layers.size(), h.layers.size());
    for (size_t l = 0; l < g.layers.size(); ++l) {
      SCOPED_TRACE("layer " + std::to_string(l));
      const CudaLayer &a = g.layers[l], &b = h.layers[l];
      EXPECT_EQ(bytes(a.attn_norm), bytes(b.attn_norm));
      EXPECT_EQ(bytes(a.wqkv.w), bytes(b.wqkv.w));
      EXPECT_EQ(bytes(a.qkv_bias), bytes(b.qkv_bias));
      EXPECT_EQ(bytes(a.q_norm), bytes(b.q_norm));
      EXPECT_EQ(bytes(a.k_norm), bytes(b.k_norm));
      EXPECT_EQ(bytes(a.wo.w), bytes(b.wo.w));
      EXPECT_EQ(bytes(a.ffn_norm), bytes(b.ffn_norm));
      EXPECT_EQ(bytes(a.w_gate_up.w), bytes(b.w_gate_up.w));
      EXPECT_EQ(bytes(a.w_down.w), bytes(b.w_down.w));
    }
    std::printf("%s: GGUF and HF folder upload the same device weights\n", family);
  }
}

}  // namespace
}  // namespace nanoserve

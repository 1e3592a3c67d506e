// Gemma 2 and Gemma 3 (text) on the GPU against the CPU forward of the same
// weights: the oracle folders of scripts/hf_oracle.py (gemma2: head_dim 256,
// local and global layers, window 4, attention soft-cap 5, final soft-cap
// 10; gemma3: head_dim 256, q/k norms, three local layers with their own rope
// theta and a global one with linear scaling), which gpu-check makes in
// NS_HF_ORACLE_DIR; the same folders' transformers logits are
// families_hf_oracle_cuda_test.cc's. Here:
//  - the logits at every position of the oracle's prompts near the CPU
//    forward's, and the GPU with a planted error (no attention soft-cap, no
//    final soft-cap, the window one wider or narrower) far from them;
//  - a sequence's logits bitwise the same alone, beside others, prefilled in
//    chunks, and over decode steps replayed from CUDA graphs (whose key holds
//    the local and the global layers' attention launches) or launched eagerly.
// Without NS_HF_ORACLE_DIR or a GPU the tests report SKIPPED with the reason.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/cuda/device_memory.cuh"
#include "core/thread_pool.h"
#include "model/cuda_invariance.h"
#include "model/kv_cpu.h"
#include "model/model_cpu.h"
#include "model/model_cuda.h"
#include "model/model_fixture.h"
#include "model/model_source.h"

namespace nanoserve {
namespace {

using testing::nmse;

constexpr int32_t kBlockSize = 16, kBlocksPerSeq = 32, kMaxSeqs = 8;

// Sequence slot s owns blocks [s * kBlocksPerSeq, (s + 1) * kBlocksPerSeq), in order.
void add_tables(ForwardBatch& b) {
  testing::add_slot_tables(b, kBlocksPerSeq, kBlockSize);
}

ForwardBatch every_row(const std::vector<int32_t>& prompt) {
  ForwardBatch b = testing::make_batch({prompt}, {0}, {0});
  b.logits_rows.clear();
  for (int32_t i = 0; i < static_cast<int32_t>(prompt.size()); ++i) b.logits_rows.push_back(i);
  add_tables(b);
  return b;
}

// An oracle folder's model: its config, host weights and prompts.
struct Oracle {
  ModelSource source;
  std::unique_ptr<CpuModel> host;
  std::vector<std::vector<int32_t>> prompts;
};

// PRECOND: NS_HF_ORACLE_DIR is set (NS_SKIP_WITHOUT_ORACLE). False, with a
// failure, when the folder does not load.
bool open_oracle(const std::string& family, ThreadPool& pool, Oracle& o) {
  const std::string dir = std::string(std::getenv("NS_HF_ORACLE_DIR")) + "/" + family;
  std::ifstream jf(dir + "/oracle.json");
  EXPECT_TRUE(jf.good()) << dir << "/oracle.json is missing (scripts/hf_oracle.py make)";
  if (!jf.good()) return false;
  // The parsed document held by name: a range-for over a member of the
  // temporary would read it after it is destroyed (C++20 extends only the
  // outermost temporary's life).
  const nlohmann::json oracle = nlohmann::json::parse(jf);
  for (const auto& p : oracle.at("prompts")) o.prompts.push_back(p.get<std::vector<int32_t>>());
  EXPECT_FALSE(o.prompts.empty()) << dir << "/oracle.json: no prompts";
  if (o.prompts.empty()) return false;
  ModelSpec spec;
  spec.path = dir;
  auto source = open_model_source(spec);
  EXPECT_TRUE(source.ok()) << source.status().to_string();
  if (!source.ok()) return false;
  o.source = std::move(*source);
  auto host = CpuModel::load(o.source.config, o.source.tensors, pool);
  EXPECT_TRUE(host.ok()) << host.status().to_string();
  if (!host.ok()) return false;
  o.host = std::move(*host);
  return true;
}

#define NS_SKIP_WITHOUT_ORACLE()                                                                    \
  do {                                                                                              \
    std::string why_;                                                                               \
    if (cuda::device_count(&why_) == 0) GTEST_SKIP() << "no CUDA device: " << why_;                 \
    if (std::getenv("NS_HF_ORACLE_DIR") == nullptr)                                                 \
      GTEST_SKIP() << "NS_HF_ORACLE_DIR is not set (scripts/gpu-check makes it with hf_oracle.py)"; \
  } while (0)

// The host weights on the device under `config` (the right one, or one with a planted error).
std::unique_ptr<CudaModel> upload(const Oracle& o, const ModelConfig& config, bool cuda_graphs = true) {
  auto gpu = CudaModel::upload(config, o.host->weights(), o.host->inv_freq());
  EXPECT_TRUE(gpu.ok()) << gpu.status().to_string();
  if (!gpu.ok()) return nullptr;
  CudaLimits lim{512, kMaxSeqs, 512, kBlocksPerSeq};
  lim.cuda_graphs = cuda_graphs;
  const Status s = (*gpu)->allocate(lim, kMaxSeqs * kBlocksPerSeq, kBlockSize);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return s.ok() ? std::move(*gpu) : nullptr;
}

// Worst NMSE over a prompt's positions of the GPU's logits against the CPU's.
double worst_nmse(CudaModel& gpu, const CpuModel& cpu, const std::vector<int32_t>& prompt, ThreadPool& pool) {
  const int64_t V = cpu.config().vocab_size, n = static_cast<int64_t>(prompt.size());
  auto got = gpu.forward(every_row(prompt));
  EXPECT_TRUE(got.ok()) << got.status().to_string();
  if (!got.ok()) return 1e30;
  const std::vector<float> g(got->data_as<const float>(), got->data_as<const float>() + n * V);
  CpuKV cache = CpuKV::per_sequence(cpu.config(), 1, 512, pool);
  Workspace ws = cpu.make_workspace(512, 512);
  auto want = cpu.forward(every_row(prompt), cache, ws);
  EXPECT_TRUE(want.ok()) << want.status().to_string();
  if (!want.ok()) return 1e30;
  double worst = 0;
  for (int64_t t = 0; t < n; ++t)
    worst = std::max(worst, nmse(g.data() + t * V, want->data_as<const float>() + t * V, V));
  return worst;
}

struct Plant {
  const char* what;
  std::function<void(ModelConfig&)> change;
};

// bf16 activations and K/V against the CPU's f32 over the same bf16-exact
// weights: Gemma's transformers bound (4e-3, families_hf_oracle_cuda_test.cc), and each
// planted error on the GPU at least 2.5 times farther on every prompt of more
// than one position (where a window or a cap of the scores can show).
void check_against_cpu(const std::string& family, const std::vector<Plant>& plants) {
  SCOPED_TRACE(family);
  ThreadPool pool(2);
  Oracle o;
  ASSERT_TRUE(open_oracle(family, pool, o));
  auto gpu = upload(o, o.host->config());
  ASSERT_NE(gpu, nullptr);
  std::vector<double> ours;
  for (const auto& p : o.prompts) ours.push_back(worst_nmse(*gpu, *o.host, p, pool));
  double worst = *std::max_element(ours.begin(), ours.end());
  std::printf("%s on the GPU vs the CPU forward: worst NMSE %.2e over %zu prompts\n", family.c_str(), worst,
              o.prompts.size());
  EXPECT_LE(worst, 4e-3);
  for (const Plant& plant : plants) {
    ModelConfig c = o.host->config();
    plant.change(c);
    auto bad = upload(o, c);
    ASSERT_NE(bad, nullptr);
    double closest = 1e30;
    for (size_t i = 0; i < o.prompts.size(); ++i) {
      if (o.prompts[i].size() < 2) continue;
      closest = std::min(closest, worst_nmse(*bad, *o.host, o.prompts[i], pool) / std::max(ours[i], 1e-12));
    }
    std::printf("family %s gpu: planted error (%s) %.1fx farther from the CPU forward\n", family.c_str(),
                plant.what, closest);
    EXPECT_GT(closest, 2.5) << plant.what << " would pass";
  }
}

TEST(GemmaCuda, Gemma2MatchesCpuAndPlantedErrorsFail) {
  NS_SKIP_WITHOUT_ORACLE();
  check_against_cpu("gemma2", {{"no attention soft-cap", [](ModelConfig& c) { c.attn_softcap = 0; }},
                               {"no final soft-cap", [](ModelConfig& c) { c.final_softcap = 0; }},
                               {"window one wider", [](ModelConfig& c) { ++c.sliding_window; }},
                               {"window one narrower", [](ModelConfig& c) { --c.sliding_window; }}});
}

TEST(GemmaCuda, Gemma3MatchesCpuAndPlantedErrorsFail) {
  NS_SKIP_WITHOUT_ORACLE();
  check_against_cpu(
      "gemma3", {{"window one wider", [](ModelConfig& c) { ++c.sliding_window; }},
                 {"window one narrower", [](ModelConfig& c) { --c.sliding_window; }},
                 {"local layers on the global rope", [](ModelConfig& c) { c.rope_local_theta = 0; }},
                 {"attention scale of head_dim 128", [](ModelConfig& c) { c.query_pre_attn_scalar = 128; }}});
}

// A sequence's logits, bitwise: alone, beside the others (prompts of uneven
// length, then decodes together), prefilled in chunks of 7, and with the
// decode steps replayed from graphs or launched eagerly.
TEST(GemmaCuda, BatchedChunkedAndGraphedEqualAlone) {
  NS_SKIP_WITHOUT_ORACLE();
  ThreadPool pool(1);
  for (const char* family : {"gemma2", "gemma3"}) {
    SCOPED_TRACE(family);
    Oracle o;
    ASSERT_TRUE(open_oracle(family, pool, o));
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& p : o.prompts)
      prompts.push_back(std::vector<int32_t>(p.begin(), p.begin() + std::min<size_t>(p.size(), 150)));
    constexpr int kDecodes = 40;  // past the window and a tile of 64 positions
    testing::expect_alone_batched_chunked_eager_equal(
        [&](bool graphs) { return upload(o, o.host->config(), graphs); }, prompts, kDecodes,
        o.host->config().vocab_size, kBlocksPerSeq, kBlockSize);
    std::printf("%s: logits alone = batched = chunked = eager over %zu prompts and %d decode steps\n", family,
                prompts.size(), kDecodes);
  }
}

}  // namespace
}  // namespace nanoserve

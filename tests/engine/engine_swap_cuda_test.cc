// The engine on the GPU preempting by swap (the CUDA runner's pinned host
// area, copies on the step's stream): greedy and seeded tokens identical to a
// roomy engine's that never preempts, and nothing recomputed. Without a CUDA
// device every test reports SKIPPED.

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/skip_without_gpu.h"
#include "core/thread_pool.h"
#include "engine/generate.h"
#include "engine/load_engine.h"
#include "engine/rng.h"

namespace nanoserve {
namespace {

LoadedEngine load(ThreadPool& pool, int32_t num_blocks, PreemptionMode mode) {
  EngineConfig c;
  c.device = Device::kCUDA;
  c.max_num_seqs = 16;
  c.max_num_batched_tokens = 128;
  c.num_blocks = num_blocks;
  c.max_model_len = 256;
  c.preemption_mode = mode;
  c.swap_space_bytes = int64_t{64} << 20;
  ModelSpec spec;
  spec.format = LoadFormat::kDummy;
  spec.model_shape = "smollm2-135m";
  spec.seed = 7;
  spec.tokenizer_path = NS_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";  // the tokenizer only
  StatusOr<LoadedEngine> le = load_engine(spec, c, pool);
  NS_CHECK(le.ok()) << le.status().to_string();
  return std::move(le).value();
}

TEST(EngineSwapCuda, TokensIdenticalWithSwapRecomputeAndNeither) {
  NS_SKIP_WITHOUT_GPU();
  ThreadPool pool(0);
  Rng rng(41);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> per;
  for (int i = 0; i < 16; ++i) {
    std::vector<int32_t> p(20 + rng.next_u64() % 40);
    for (int32_t& t : p) t = static_cast<int32_t>(rng.next_u64() % 49152);
    prompts.push_back(p);
    SamplingParams sp;
    sp.max_tokens = 48;
    sp.ignore_eos = true;
    if (i % 2 == 1) {
      sp.temperature = 0.8f;
      sp.seed = 500 + static_cast<uint64_t>(i);
    } else {
      sp.temperature = 0.0f;
    }
    per.push_back(sp);
  }
  auto tokens = [&](Engine& e) {
    StatusOr<std::vector<Completion>> r = generate(e, prompts, per);
    NS_CHECK(r.ok()) << r.status().to_string();
    std::vector<std::vector<int32_t>> out;
    for (const Completion& c : *r) out.push_back(c.tokens);
    return out;
  };
  LoadedEngine roomy = load(pool, 1024, PreemptionMode::kAuto);
  const auto want = tokens(*roomy.engine);
  ASSERT_EQ(roomy.engine->stats().num_preemptions, 0);
  // 24 blocks of 16 = 384 tokens for 16 requests of up to 107: preemption all along.
  LoadedEngine swap = load(pool, 24, PreemptionMode::kSwap);
  EXPECT_EQ(tokens(*swap.engine), want);
  const EngineStats st = swap.engine->stats();
  EXPECT_GT(st.num_swap_preemptions, 0);
  EXPECT_EQ(st.recomputed_tokens, 0);
  EXPECT_EQ(st.swapped_in_blocks, st.swapped_out_blocks);
  LoadedEngine recompute = load(pool, 24, PreemptionMode::kRecompute);
  EXPECT_EQ(tokens(*recompute.engine), want);
  EXPECT_GT(recompute.engine->stats().recomputed_tokens, 0);
}

}  // namespace
}  // namespace nanoserve

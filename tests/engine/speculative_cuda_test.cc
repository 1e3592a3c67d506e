// Speculative decoding on the GPU with the real default model (SmolLM2-135M
// Q4_1, uploaded as bf16): the token ids are identical with and without
// proposals, alone and in a batch, for n-gram proposals at several k, for a
// draft that is the target itself on the same device (every proposal kept),
// and for a small random draft (most rejected); sampled requests, drawn on
// the device, give the tokens they give without proposals from the same
// seed. Without a CUDA device every test reports SKIPPED.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/cuda/device_memory.cuh"
#include "core/skip_without_gpu.h"
#include "engine/draft_proposer.h"
#include "engine/generate.h"
#include "engine/load_engine.h"
#include "engine/repeating_prompts.h"
#include "model/model_cuda.h"
#include "model/runner_cuda.h"
#include "ops/rope/rope_freqs.h"

namespace nanoserve {
namespace {

const char* kModelPath = NS_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr int32_t kNew = 24;

class SpeculativeCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    NS_SKIP_WITHOUT_GPU();
    pool_ = std::make_unique<ThreadPool>(0);
    prompts_ = testing::repeating_prompts(12, 77);
  }

  static EngineConfig config() {
    EngineConfig c;
    c.device = Device::kCUDA;
    c.max_num_seqs = 16;
    c.max_num_batched_tokens = 256;
    c.num_blocks = 128;
    c.block_size = 16;
    c.max_model_len = 256;
    return c;
  }

  // Greedy, or (sampled) seeded requests with a mix of filters.
  std::vector<SamplingParams> params(bool sampled) const {
    std::vector<SamplingParams> per;
    for (size_t i = 0; i < prompts_.size(); ++i) {
      SamplingParams p;
      p.temperature = 0.0f;
      p.max_tokens = kNew;
      p.ignore_eos = true;
      if (sampled) {
        p.seed = 500 + i;
        p.temperature = 0.5f + 0.1f * static_cast<float>(i % 5);
        if (i % 3 == 1) p.top_k = 20;
        if (i % 3 == 2) p.top_p = 0.9f;
      }
      per.push_back(p);
    }
    return per;
  }

  std::vector<std::vector<int32_t>> run(Engine& e, size_t first, size_t count, bool sampled) {
    std::vector<SamplingParams> per = params(sampled);
    StatusOr<std::vector<Completion>> r =
        generate(e, std::span<const std::vector<int32_t>>(prompts_.data() + first, count),
                 std::span<const SamplingParams>(per.data() + first, count));
    NS_CHECK(r.ok()) << r.status().to_string();
    std::vector<std::vector<int32_t>> out;
    for (const Completion& c : *r) out.push_back(c.tokens);
    return out;
  }

  // Each prompt alone without proposals (computed once per test).
  const std::vector<std::vector<int32_t>>& reference(bool sampled) {
    std::vector<std::vector<int32_t>>& ref = sampled ? ref_sampled_ : ref_greedy_;
    if (ref.empty()) {
      StatusOr<LoadedEngine> le = load_engine(kModelPath, config(), *pool_);
      NS_CHECK(le.ok()) << le.status().to_string();
      NS_CHECK(le->device == Device::kCUDA);
      for (size_t i = 0; i < prompts_.size(); ++i) ref.push_back(run(*le->engine, i, 1, sampled)[0]);
    }
    return ref;
  }

  void expect_identical(Engine& e, const std::string& what, bool sampled = false) {
    for (size_t i = 0; i < 3; ++i)
      EXPECT_EQ(run(e, i, 1, sampled)[0], reference(sampled)[i]) << what << ": prompt " << i << " alone";
    EXPECT_EQ(run(e, 0, prompts_.size(), sampled), reference(sampled)) << what << ": batched";
    EXPECT_TRUE(e.check_invariants().ok()) << what;
  }

  std::unique_ptr<ThreadPool> pool_;
  std::vector<std::vector<int32_t>> prompts_, ref_greedy_, ref_sampled_;
};

TEST_F(SpeculativeCuda, NgramIdenticalAtEveryK) {
  for (int32_t k : {1, 4, 7}) {
    EngineConfig c = config();
    c.speculative.method = SpecMethod::kNgram;
    c.speculative.num_speculative_tokens = k;
    c.speculative.prompt_lookup_max = 4;
    c.speculative.prompt_lookup_min = 1;
    StatusOr<LoadedEngine> le = load_engine(kModelPath, c, *pool_);
    ASSERT_TRUE(le.ok()) << le.status().to_string();
    ASSERT_EQ(le->device, Device::kCUDA);
    const std::string what = "n-gram k " + std::to_string(k);
    expect_identical(*le->engine, what);
    expect_identical(*le->engine, what + " sampled", true);
    const EngineStats st = le->engine->stats();
    EXPECT_GT(st.spec_num_draft_tokens, 0) << what;
    EXPECT_GT(st.spec_num_accepted_tokens, 0) << what;
    std::printf("speculative cuda %s: %lld of %lld proposals kept\n", what.c_str(),
                static_cast<long long>(st.spec_num_accepted_tokens),
                static_cast<long long>(st.spec_num_draft_tokens));
  }
}

TEST_F(SpeculativeCuda, DraftThatIsTheTargetHasEveryProposalKept) {
  EngineConfig c = config();
  c.speculative.method = SpecMethod::kDraftModel;
  c.speculative.model = kModelPath;
  c.speculative.num_speculative_tokens = 3;
  c.speculative.adaptive = false;
  c.num_blocks = 0;  // sized from the budget, shared by the two pools
  c.gpu_memory_utilization = 0.5;
  StatusOr<LoadedEngine> le = load_engine(kModelPath, c, *pool_);
  ASSERT_TRUE(le.ok()) << le.status().to_string();
  ASSERT_EQ(le->device, Device::kCUDA);
  expect_identical(*le->engine, "draft = target");
  expect_identical(*le->engine, "draft = target, sampled", true);
  const EngineStats st = le->engine->stats();
  EXPECT_GT(st.spec_num_draft_tokens, 0);
  // Greedy proposals of the same model are the target's greedy tokens: a
  // sampled row keeps one only where its draw lands on it, so count greedy.
  const std::vector<std::vector<int32_t>> again = run(*le->engine, 0, prompts_.size(), false);
  const EngineStats st2 = le->engine->stats();
  EXPECT_EQ(st2.spec_num_accepted_tokens - st.spec_num_accepted_tokens,
            st2.spec_num_draft_tokens - st.spec_num_draft_tokens);
}

TEST_F(SpeculativeCuda, SmallRandomDraftHasMostRejected) {
  ModelSpec spec;
  spec.path = kModelPath;
  StatusOr<ModelSource> src = open_model_source(spec);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  // Two layers of random weights over the target's vocabulary, on the device.
  ModelConfig tiny = src->config;
  tiny.n_layers = 2;
  tiny.dim = 128;
  tiny.n_heads = 2;
  tiny.n_kv_heads = 1;
  tiny.head_dim = 64;
  tiny.rope_dim = 64;
  tiny.ffn_dim = 256;
  tiny.tied_embeddings = true;
  const auto inv_freq = rope_inv_freqs(tiny.rope_dim, tiny.rope_theta, tiny.rope_scaling);
  StatusOr<std::unique_ptr<CudaModel>> draft_model = CudaModel::dummy(tiny, inv_freq, 5);
  ASSERT_TRUE(draft_model.ok()) << draft_model.status().to_string();
  EngineConfig c = config();
  CudaLimits lim;
  lim.max_tokens = c.max_num_batched_tokens;
  lim.max_seqs = c.max_num_seqs;
  lim.max_logits_rows = c.max_num_seqs;
  lim.max_context = c.max_model_len;
  lim.max_blocks_per_seq = static_cast<int32_t>((c.max_model_len + c.block_size - 1) / c.block_size);
  StatusOr<std::unique_ptr<DraftProposer>> draft = DraftProposer::create(
      std::make_unique<CudaRunner>(std::move(*draft_model), lim, 0), src->config.vocab_size, c.num_blocks,
      c.block_size, c.max_num_seqs, c.max_model_len);
  ASSERT_TRUE(draft.ok()) << draft.status().to_string();

  c.speculative.method = SpecMethod::kDraftModel;
  c.speculative.model = "small-random";
  c.speculative.num_speculative_tokens = 4;
  c.speculative.adaptive = false;
  CudaRunnerOptions o;
  o.max_tokens = c.max_num_batched_tokens;
  o.max_seqs = c.max_num_seqs;
  o.max_logits_rows = c.max_num_seqs * (1 + 4);
  o.max_context = c.max_model_len;
  o.block_size = c.block_size;
  o.kv_sized_elsewhere = true;
  StatusOr<std::unique_ptr<CudaRunner>> target = make_cuda_runner(*src, o, *pool_);
  ASSERT_TRUE(target.ok()) << target.status().to_string();
  StatusOr<std::unique_ptr<Engine>> e = Engine::create(c, std::move(*target), nullptr, std::move(*draft));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  expect_identical(**e, "small random draft");
  const EngineStats st = (*e)->stats();
  EXPECT_GT(st.spec_num_draft_tokens, 0);
  EXPECT_LT(st.spec_num_accepted_tokens * 4, st.spec_num_draft_tokens) << "most should be rejected";
}

}  // namespace
}  // namespace nanoserve

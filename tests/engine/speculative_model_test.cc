// Speculative decoding with the real default model (SmolLM2-135M Q4_1):
// greedy token ids are identical with and without proposals, alone and in a
// batch, for n-gram proposals at several k, for a draft that is the target
// itself (every proposal kept) and for a tiny random draft with the same
// vocabulary (most rejected). Sizes are small so the suite stays fast on CI.

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/draft_proposer.h"
#include "engine/generate.h"
#include "engine/load_engine.h"
#include "engine/repeating_prompts.h"
#include "model/dummy_weights.h"
#include "model/runner_cpu.h"

namespace nanoserve {
namespace {

const char* kModelPath = NS_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr int32_t kNew = 12;

class SpeculativeModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pool_ = new ThreadPool(0);
    prompts_ = new std::vector<std::vector<int32_t>>();
    *prompts_ = testing::repeating_prompts(6, 77);
  }
  static void TearDownTestSuite() {
    delete prompts_;
    delete pool_;
  }

  static EngineConfig config(int32_t max_num_seqs) {
    EngineConfig c;
    c.max_num_seqs = max_num_seqs;
    c.max_num_batched_tokens = 128;
    c.num_blocks = 64;
    c.block_size = 16;
    c.max_model_len = 256;
    return c;
  }

  static std::vector<std::vector<int32_t>> run(Engine& e, size_t first, size_t count) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = kNew;
    p.ignore_eos = true;
    std::vector<SamplingParams> per(1, p);
    StatusOr<std::vector<Completion>> r =
        generate(e, std::span<const std::vector<int32_t>>(prompts_->data() + first, count), per);
    NS_CHECK(r.ok()) << r.status().to_string();
    std::vector<std::vector<int32_t>> out;
    for (const Completion& c : *r) out.push_back(c.tokens);
    return out;
  }

  // Each prompt alone without proposals, once per suite.
  static const std::vector<std::vector<int32_t>>& reference() {
    static std::vector<std::vector<int32_t>> ref = [] {
      StatusOr<LoadedEngine> le = load_engine(kModelPath, config(1), *pool_);
      NS_CHECK(le.ok()) << le.status().to_string();
      std::vector<std::vector<int32_t>> r;
      for (size_t i = 0; i < prompts_->size(); ++i) r.push_back(run(*le->engine, i, 1)[0]);
      return r;
    }();
    return ref;
  }

  static void expect_identical(Engine& e, const char* what) {
    for (size_t i = 0; i < 2; ++i)
      EXPECT_EQ(run(e, i, 1)[0], reference()[i]) << what << ": prompt " << i << " alone";
    EXPECT_EQ(run(e, 0, prompts_->size()), reference()) << what << ": batched";
  }

  static ThreadPool* pool_;
  static std::vector<std::vector<int32_t>>* prompts_;
};

ThreadPool* SpeculativeModel::pool_ = nullptr;
std::vector<std::vector<int32_t>>* SpeculativeModel::prompts_ = nullptr;

TEST_F(SpeculativeModel, NgramGreedyIdenticalAtEveryK) {
  for (int32_t k : {1, 4, 7}) {
    EngineConfig c = config(8);
    c.speculative.method = SpecMethod::kNgram;
    c.speculative.num_speculative_tokens = k;
    c.speculative.prompt_lookup_max = 4;
    c.speculative.prompt_lookup_min = 1;
    c.speculative.adaptive = k != 4;
    c.speculative.step_overhead_tokens = 64.0;  // sized as on a GPU, so the sized runs propose too
    StatusOr<LoadedEngine> le = load_engine(kModelPath, c, *pool_);
    ASSERT_TRUE(le.ok()) << le.status().to_string();
    expect_identical(*le->engine, k == 1 ? "k 1" : k == 4 ? "k 4" : "k 7");
    const EngineStats st = le->engine->stats();
    EXPECT_GT(st.spec_num_draft_tokens, 0) << "k " << k;
    ASSERT_TRUE(le->engine->check_invariants().ok());
  }
}

TEST_F(SpeculativeModel, DraftThatIsTheTargetHasEveryProposalKept) {
  EngineConfig c = config(8);
  c.speculative.method = SpecMethod::kDraftModel;
  c.speculative.model = kModelPath;
  c.speculative.num_speculative_tokens = 3;
  c.speculative.adaptive = false;
  StatusOr<LoadedEngine> le = load_engine(kModelPath, c, *pool_);
  ASSERT_TRUE(le.ok()) << le.status().to_string();
  expect_identical(*le->engine, "draft = target");
  const EngineStats st = le->engine->stats();
  EXPECT_GT(st.spec_num_draft_tokens, 0);
  EXPECT_EQ(st.spec_num_accepted_tokens, st.spec_num_draft_tokens);
}

TEST_F(SpeculativeModel, TinyRandomDraftHasMostRejected) {
  // The target as load_engine builds it, with a draft made here: two layers
  // of random weights over the target's 49152-token vocabulary.
  ModelSpec spec;
  spec.path = kModelPath;
  StatusOr<ModelSource> src = open_model_source(spec);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  ModelConfig tiny = src->config;
  tiny.arch = "llama";
  tiny.family = nullptr;
  tiny.n_layers = 2;
  tiny.dim = 64;
  tiny.n_heads = 4;
  tiny.n_kv_heads = 2;
  tiny.head_dim = 16;
  tiny.rope_dim = 16;
  tiny.ffn_dim = 128;
  tiny.tied_embeddings = true;
  auto tensors = std::make_shared<DummyTensors>(tiny, "tiny-random", 5);
  StatusOr<std::unique_ptr<CpuModel>> draft_model = CpuModel::load(tiny, tensors, *pool_);
  ASSERT_TRUE(draft_model.ok()) << draft_model.status().to_string();
  EngineConfig c = config(8);
  CpuRunnerOptions ro;
  ro.max_tokens = c.max_num_batched_tokens;
  ro.max_num_seqs = c.max_num_seqs;
  ro.max_context = c.max_model_len;
  StatusOr<std::unique_ptr<DraftProposer>> draft = DraftProposer::create(
      std::make_unique<CpuRunner>(std::move(*draft_model), ro, *pool_), src->config.vocab_size, c.num_blocks,
      c.block_size, c.max_num_seqs, c.max_model_len);
  ASSERT_TRUE(draft.ok()) << draft.status().to_string();

  c.speculative.method = SpecMethod::kDraftModel;
  c.speculative.model = "tiny-random";
  c.speculative.num_speculative_tokens = 4;
  c.speculative.adaptive = false;
  StatusOr<std::unique_ptr<CpuModel>> target = CpuModel::load(src->config, src->tensors, *pool_);
  ASSERT_TRUE(target.ok());
  ro.max_logits_rows = c.max_num_seqs * (1 + 4);
  StatusOr<std::unique_ptr<Engine>> e = Engine::create(
      c, std::make_unique<CpuRunner>(std::move(*target), ro, *pool_), nullptr, std::move(*draft));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  expect_identical(**e, "tiny random draft");
  const EngineStats st = (*e)->stats();
  EXPECT_GT(st.spec_num_draft_tokens, 0);
  EXPECT_LT(st.spec_num_accepted_tokens * 4, st.spec_num_draft_tokens) << "most should be rejected";
}

}  // namespace
}  // namespace nanoserve

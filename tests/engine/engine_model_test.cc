// The engine end to end with the real default model (SmolLM2-135M Q4_1):
// greedy output of every request is identical alone, in batches of 2, 8 and
// 32 with requests of other lengths, with chunked prefill at several chunk
// sizes, and after preemption + recompute; seeded sampling likewise.
// Sizes are small (a few output tokens) so the suite stays fast on CI.

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <vector>

#include "engine/generate.h"
#include "engine/load_engine.h"

namespace nanoserve {
namespace {

const char* kModelPath = NS_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

struct ModelSetup {
  int32_t max_num_seqs = 32;
  int32_t max_num_batched_tokens = 256;
  int32_t block_size = 16;
  int32_t num_blocks = 96;
  bool prefix_caching = true;
  PreemptionMode preemption_mode = PreemptionMode::kAuto;
  int64_t swap_space_bytes = 0;
  bool async_scheduling = false;
};

class EngineModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pool_ = new ThreadPool(0);
    Rng rng(2024);
    prompts_ = new std::vector<std::vector<int32_t>>();
    for (int i = 0; i < 32; ++i) {
      std::vector<int32_t> p(1 + rng.next_u64() % 24);
      for (int32_t& t : p) t = static_cast<int32_t>(rng.next_u64() % 49152);
      prompts_->push_back(p);
    }
  }
  static void TearDownTestSuite() {
    delete prompts_;
    delete pool_;
  }

  static LoadedEngine load(const ModelSetup& s) {
    EngineConfig c;
    c.max_num_seqs = s.max_num_seqs;
    c.max_num_batched_tokens = s.max_num_batched_tokens;
    c.block_size = s.block_size;
    c.num_blocks = s.num_blocks;
    c.enable_prefix_caching = s.prefix_caching;
    c.preemption_mode = s.preemption_mode;
    c.swap_space_bytes = s.swap_space_bytes;
    c.async_scheduling = s.async_scheduling;
    c.max_model_len = 512;
    StatusOr<LoadedEngine> le = load_engine(kModelPath, c, *pool_);
    NS_CHECK(le.ok()) << le.status().to_string();
    return std::move(le).value();
  }

  static SamplingParams greedy(int32_t n) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = n;
    p.ignore_eos = true;
    return p;
  }

  static std::vector<std::vector<int32_t>> run(Engine& e, size_t first, size_t count, const SamplingParams& p,
                                               std::vector<SamplingParams> per = {}) {
    std::span<const std::vector<int32_t>> prompts(prompts_->data() + first, count);
    if (per.empty()) per.assign(1, p);
    StatusOr<std::vector<Completion>> r = generate(e, prompts, per);
    NS_CHECK(r.ok()) << r.status().to_string();
    std::vector<std::vector<int32_t>> out;
    for (const Completion& c : *r) out.push_back(c.tokens);
    return out;
  }

  // Each prompt alone, once per suite.
  static const std::vector<std::vector<int32_t>>& solo() {
    static std::vector<std::vector<int32_t>> ref = [] {
      LoadedEngine le = load({});
      std::vector<std::vector<int32_t>> r;
      for (size_t i = 0; i < prompts_->size(); ++i) r.push_back(run(*le.engine, i, 1, greedy(kNew))[0]);
      return r;
    }();
    return ref;
  }

  static constexpr int32_t kNew = 3;
  static ThreadPool* pool_;
  static std::vector<std::vector<int32_t>>* prompts_;
};

ThreadPool* EngineModel::pool_ = nullptr;
std::vector<std::vector<int32_t>>* EngineModel::prompts_ = nullptr;

std::vector<std::vector<int32_t>> slice(const std::vector<std::vector<int32_t>>& v, size_t first, size_t n) {
  return {v.begin() + first, v.begin() + first + n};
}

TEST_F(EngineModel, GreedyIdenticalAloneAndInBatchesOf2_8_32) {
  LoadedEngine le = load({});
  EXPECT_EQ(run(*le.engine, 0, 2, greedy(kNew)), slice(solo(), 0, 2));
  EXPECT_EQ(run(*le.engine, 2, 8, greedy(kNew)), slice(solo(), 2, 8));
  EXPECT_EQ(run(*le.engine, 0, 32, greedy(kNew)), solo());
}

TEST_F(EngineModel, GreedyIdenticalWithChunkedPrefillAtAnyChunkSize) {
  for (int32_t budget : {3, 8, 17}) {
    ModelSetup s;
    s.max_num_seqs = 3;
    s.max_num_batched_tokens = budget;
    LoadedEngine le = load(s);
    EXPECT_EQ(run(*le.engine, 8, 8, greedy(kNew)), slice(solo(), 8, 8)) << "chunk budget " << budget;
  }
}

// Prompts that share a 40-token prefix: with the prefix cache the later ones
// start from cached blocks (read through the fused paged read), and every
// greedy output equals the one an engine without the cache gives.
TEST_F(EngineModel, GreedyIdenticalWithPrefixCacheHits) {
  std::vector<int32_t> prefix((*prompts_)[0]);
  while (prefix.size() < 40)
    prefix.insert(prefix.end(), (*prompts_)[prefix.size() % 7 + 1].begin(),
                  (*prompts_)[prefix.size() % 7 + 1].end());
  prefix.resize(40);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(prefix);
    prompts.back().insert(prompts.back().end(), (*prompts_)[10 + i].begin(), (*prompts_)[10 + i].end());
  }
  prompts.push_back(prefix);  // the prefix alone: a full hit but for its last block
  const std::vector<SamplingParams> p = {greedy(8)};
  ModelSetup off;
  off.prefix_caching = false;
  LoadedEngine ref_engine = load(off);
  std::vector<std::vector<int32_t>> want;
  for (const auto& pr : prompts) {
    auto r = generate(*ref_engine.engine, std::span<const std::vector<int32_t>>(&pr, 1), p);
    ASSERT_TRUE(r.ok());
    want.push_back((*r)[0].tokens);
  }
  LoadedEngine le = load({});
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto r = generate(*le.engine, std::span<const std::vector<int32_t>>(&prompts[i], 1), p);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ((*r)[0].tokens, want[i]) << "prompt " << i;
  }
  const EngineStats st = le.engine->stats();
  EXPECT_EQ(st.prefix_cache_hits, 4 * 32) << "each later prompt hits the prefix's 2 full blocks of 16";
  EXPECT_EQ(ref_engine.engine->stats().prefix_cache_hits, 0);
}

TEST_F(EngineModel, GreedyIdenticalAfterPreemptionAndRecompute) {
  ModelSetup s;
  s.block_size = 4;
  s.num_blocks = 16;  // 64 tokens for 16 requests of up to 27
  s.max_num_seqs = 16;
  s.max_num_batched_tokens = 64;
  LoadedEngine le = load(s);
  EXPECT_EQ(run(*le.engine, 16, 16, greedy(kNew)), slice(solo(), 16, 16));
  EXPECT_GT(le.engine->stats().num_preemptions, 0) << "the pool was sized to force preemption";
}

// The same pool preempting by swap (the CPU runner's host swap area): greedy
// tokens equal each prompt's alone, seeded samples equal a roomy engine's,
// and nothing is recomputed.
TEST_F(EngineModel, GreedyAndSeededIdenticalAfterPreemptionBySwap) {
  ModelSetup s;
  s.block_size = 4;
  s.num_blocks = 16;
  s.max_num_seqs = 16;
  s.max_num_batched_tokens = 64;
  s.preemption_mode = PreemptionMode::kSwap;
  s.swap_space_bytes = 8 << 20;  // 45 blocks of the f32 cache's 184,320 bytes
  LoadedEngine le = load(s);
  EXPECT_EQ(run(*le.engine, 16, 16, greedy(kNew)), slice(solo(), 16, 16));
  EngineStats st = le.engine->stats();
  EXPECT_GT(st.num_swap_preemptions, 0) << "the pool was sized to force preemption";
  EXPECT_EQ(st.recomputed_tokens, 0);
  EXPECT_EQ(st.swapped_in_blocks, st.swapped_out_blocks);

  std::vector<SamplingParams> per(8);
  for (int i = 0; i < 8; ++i) {
    per[i].temperature = 0.9f;
    per[i].top_p = 0.95f;
    per[i].max_tokens = kNew + 2;
    per[i].seed = 9000 + i;
    per[i].ignore_eos = true;
  }
  LoadedEngine roomy = load({});
  const auto want = run(*roomy.engine, 0, 8, per[0], per);
  EXPECT_EQ(roomy.engine->stats().num_preemptions, 0);
  const int64_t swaps_before = st.num_swap_preemptions;
  EXPECT_EQ(run(*le.engine, 0, 8, per[0], per), want);
  st = le.engine->stats();
  EXPECT_GT(st.num_swap_preemptions, swaps_before);
  EXPECT_EQ(st.recomputed_tokens, 0);
  EXPECT_TRUE(le.engine->check_invariants().ok());
}

// Prompt logprobs (every prompt row's logits) are the same floats whatever the
// chunking (budgets 5 and 256, with max_num_seqs 2: two logits rows a step),
// the batch around the prompt, or a warm prefix cache (skipped for scoring).
TEST_F(EngineModel, PromptLogprobsIdenticalAcrossChunkingBatchAndCache) {
  auto score = [](Engine& e, std::vector<std::vector<int32_t>> prompts) {
    std::vector<RequestId> ids;
    for (auto& p : prompts) {
      SamplingParams sp = greedy(1);
      sp.prompt_logprobs = 3;
      ids.push_back(*e.add_request(p, sp));
    }
    std::map<RequestId, std::vector<float>> lp;
    std::map<RequestId, std::vector<int32_t>> top;
    std::vector<RequestOutput> outs;
    while (e.has_unfinished()) {
      NS_CHECK(e.step(outs).ok());
      for (const RequestOutput& o : outs) {
        lp[o.id].insert(lp[o.id].end(), o.prompt_logprobs.begin(), o.prompt_logprobs.end());
        for (const auto& t : o.prompt_top_logprobs)
          for (const TokenLogprob& x : t) top[o.id].push_back(x.token);
      }
    }
    std::vector<std::pair<std::vector<float>, std::vector<int32_t>>> out;
    for (RequestId id : ids) out.emplace_back(lp[id], top[id]);
    return out;
  };
  const std::vector<int32_t>& a = (*prompts_)[3];
  std::vector<int32_t> longer = a;
  for (int i = 0; i < 3; ++i) {
    const std::vector<int32_t>& more = (*prompts_)[10 + i];
    longer.insert(longer.end(), more.begin(), more.end());
  }
  ModelSetup wide;
  LoadedEngine ref_engine = load(wide);
  const auto ref = score(*ref_engine.engine, {longer})[0];
  ASSERT_EQ(ref.first.size(), longer.size() - 1);
  for (float x : ref.first) EXPECT_TRUE(x <= 0.0f && x > -60.0f);
  ModelSetup narrow;
  narrow.max_num_seqs = 2;
  narrow.max_num_batched_tokens = 5;
  LoadedEngine chunked = load(narrow);
  EXPECT_EQ(score(*chunked.engine, {longer})[0], ref) << "chunks of 5, 2 logits rows a step";
  const auto batched = score(*ref_engine.engine, {(*prompts_)[20], longer, a});
  EXPECT_EQ(batched[1], ref) << "in a batch, after the same prompt warmed the prefix cache";
}

TEST_F(EngineModel, SeededSamplingIdenticalAloneAndBatched) {
  std::vector<SamplingParams> per(8);
  for (int i = 0; i < 8; ++i) {
    per[i].temperature = 0.9f;
    per[i].top_p = 0.95f;
    per[i].top_k = 50;
    per[i].max_tokens = kNew;
    per[i].seed = 7000 + i;
    per[i].ignore_eos = true;
  }
  LoadedEngine le = load({});
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < 8; ++i) alone.push_back(run(*le.engine, i, 1, per[i])[0]);
  EXPECT_EQ(run(*le.engine, 0, 8, per[0], per), alone);
}

// logit_bias and min_tokens send greedy rows through the host sampler, beside rows that take the
// runner's argmax: each output is the same alone and in a batch of both kinds.
TEST_F(EngineModel, GreedyWithBiasAndMinTokensIdenticalAloneAndBatched) {
  LoadedEngine le = load({});
  const std::vector<int32_t> plain = solo()[0];
  std::vector<SamplingParams> per(8, greedy(kNew));
  for (int i = 0; i < 8; i += 2) {
    per[i].logit_bias = {{plain[0], -100.0f}, {static_cast<int32_t>(1000 + i), 5.0f}};
    per[i + 1].min_tokens = kNew;
    per[i + 1].ignore_eos = false;
  }
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < 8; ++i) alone.push_back(run(*le.engine, i, 1, per[i])[0]);
  EXPECT_EQ(run(*le.engine, 0, 8, per[0], per), alone);
  EXPECT_NE(alone[0][0], plain[0]) << "a -100 bias moves the argmax off the token";
  for (int i = 1; i < 8; i += 2) EXPECT_EQ(alone[i].size(), static_cast<size_t>(kNew)) << "min_tokens";
}

TEST_F(EngineModel, ChatPromptProducesTextAndStopsOnImEnd) {
  LoadedEngine le = load({});
  const std::vector<int32_t> prompt = le.tokenizer->encode(
      "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n", false, true);
  SamplingParams p = greedy(64);
  p.ignore_eos = false;
  StatusOr<std::vector<Completion>> r = generate(*le.engine, std::span(&prompt, 1), std::span(&p, 1));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Completion& c = (*r)[0];
  EXPECT_EQ(c.finish_reason, FinishReason::kStop) << c.text;
  EXPECT_NE(c.text.find("Paris"), std::string::npos) << c.text;
  EXPECT_EQ(c.text.find("<|im_end|>"), std::string::npos) << "the end token is not text";
}

// Asynchronous scheduling gives what one step at a time gives: the tokens, the text and the
// finish of greedy and seeded requests, with stop strings (cut from each request's own run, so
// they end it mid-run, found after it went into the next step) and the model's end token.
TEST_F(EngineModel, AsyncSchedulingGivesTheSameTokensTextAndFinishes) {
  ModelSetup sync_setup;
  sync_setup.max_num_seqs = 8;
  sync_setup.max_num_batched_tokens = 64;
  ModelSetup async_setup = sync_setup;
  async_setup.async_scheduling = true;
  LoadedEngine one = load(sync_setup), overlapped = load(async_setup);
  ASSERT_FALSE(one.engine->async_scheduling());
  ASSERT_TRUE(overlapped.engine->async_scheduling());
  const size_t n = 16;
  std::vector<SamplingParams> per(n);
  for (size_t i = 0; i < n; ++i) {
    per[i] = greedy(12);
    per[i].ignore_eos = false;
    if (i % 2 == 1) {
      per[i].temperature = 0.9f;
      per[i].seed = 7 + i;
    }
  }
  std::span<const std::vector<int32_t>> prompts(prompts_->data(), n);
  StatusOr<std::vector<Completion>> free_run = generate(*one.engine, prompts, per);
  ASSERT_TRUE(free_run.ok()) << free_run.status().to_string();
  int stops = 0;
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = (*free_run)[i].text;
    if (i % 4 != 3 && t.size() > 6) {
      per[i].stop = {t.substr(t.size() / 2, 2)};
      ++stops;
    }
  }
  ASSERT_GT(stops, 4);
  StatusOr<std::vector<Completion>> want = generate(*one.engine, prompts, per);
  StatusOr<std::vector<Completion>> got = generate(*overlapped.engine, prompts, per);
  ASSERT_TRUE(want.ok() && got.ok());
  int cut = 0;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ((*got)[i].tokens, (*want)[i].tokens) << "request " << i;
    EXPECT_EQ((*got)[i].text, (*want)[i].text) << "request " << i;
    EXPECT_EQ((*got)[i].finish_reason, (*want)[i].finish_reason) << "request " << i;
    cut += (*want)[i].tokens.size() < (*free_run)[i].tokens.size() ? 1 : 0;
  }
  EXPECT_GT(cut, 3) << "the stop strings were meant to end requests early";
  EXPECT_TRUE(overlapped.engine->check_invariants().ok());
  EXPECT_EQ(overlapped.engine->block_manager().num_in_use_blocks(), 0);
}

}  // namespace
}  // namespace nanoserve

// Releasing blocks behind the window changes no token on real models: the
// default model (SmolLM2) with a small artificial window, and the windowed
// Mistral fixture (tests/fixtures/families/mistral_window, a window of 5),
// greedy, with chunked prefill and several requests at once, give the same
// output with release on and off, while the released run holds only the
// window's blocks. Short runs, so the suite stays a few seconds.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/draft_proposer.h"
#include "engine/engine.h"
#include "engine/rng.h"
#include "model/model_source.h"
#include "model/runner_cpu.h"

namespace nanoserve {
namespace {

const std::string kDefaultModel = NS_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kMistralWindow = NS_SOURCE_DIR "/tests/fixtures/families/mistral_window/model.gguf";

struct RunResult {
  std::map<int, std::vector<int32_t>> tokens;  // by prompt index
  int32_t most_in_use = 0;
  int64_t releases = 0;
  int32_t draft_most_in_use = 0;  // the draft model's cache (speculative decoding)
  int64_t draft_releases = 0;
};

struct RunSetup {
  int64_t window = -1;  // -1: the model's own; else replaces ModelConfig::sliding_window
  bool release = true;
  bool fused_read = true;
  int32_t block_size = 4;
  int32_t max_num_batched_tokens = 16;
  int32_t max_tokens = 12;
  int32_t num_blocks = 128;
  // >= 0: proposals (k = 3) from a draft model that is the same model with
  // this window (0: none), in its own cache.
  int64_t draft_window = -1;
};

// Runs every prompt to the end, greedy, all admitted together.
RunResult run(const std::string& path, const std::vector<std::vector<int32_t>>& prompts, const RunSetup& s,
              ThreadPool& pool) {
  ModelSpec spec;
  spec.path = path;
  StatusOr<ModelSource> src = open_model_source(spec);
  NS_CHECK(src.ok()) << src.status().to_string();
  ModelConfig mc = src->config;
  if (s.window >= 0) mc.sliding_window = s.window;
  StatusOr<std::unique_ptr<CpuModel>> model = CpuModel::load(mc, src->tensors, pool);
  NS_CHECK(model.ok()) << model.status().to_string();
  EngineConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = s.max_num_batched_tokens;
  c.block_size = s.block_size;
  c.num_blocks = s.num_blocks;
  c.max_model_len = 256;
  c.release_window_blocks = s.release;
  CpuRunnerOptions ro;
  ro.max_tokens = c.max_num_batched_tokens;
  ro.max_num_seqs = c.max_num_seqs;
  ro.max_context = c.max_model_len;
  ro.fused_read = s.fused_read;
  DraftProposer* draft = nullptr;
  std::unique_ptr<DraftProposer> owned_draft;
  if (s.draft_window >= 0) {
    ModelConfig dc = src->config;
    dc.sliding_window = s.draft_window;
    StatusOr<std::unique_ptr<CpuModel>> dm = CpuModel::load(dc, src->tensors, pool);
    NS_CHECK(dm.ok()) << dm.status().to_string();
    StatusOr<std::unique_ptr<DraftProposer>> d =
        DraftProposer::create(std::make_unique<CpuRunner>(std::move(dm).value(), ro, pool), mc.vocab_size,
                              c.num_blocks, c.block_size, c.max_num_seqs, c.max_model_len, {}, s.release);
    NS_CHECK(d.ok()) << d.status().to_string();
    owned_draft = std::move(d).value();
    draft = owned_draft.get();
    c.speculative.method = SpecMethod::kDraftModel;
    c.speculative.model = "the same model, another window";
    c.speculative.num_speculative_tokens = 3;
    c.speculative.adaptive = false;
    ro.max_logits_rows = c.max_num_seqs * (1 + 3);
  }
  auto runner = std::make_unique<CpuRunner>(std::move(model).value(), ro, pool);
  StatusOr<std::unique_ptr<Engine>> e = Engine::create(c, std::move(runner), nullptr, std::move(owned_draft));
  NS_CHECK(e.ok()) << e.status().to_string();
  Engine& engine = **e;
  std::map<RequestId, int> index;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = s.max_tokens;
    p.ignore_eos = true;
    index[engine.add_request(prompts[i], p).value()] = static_cast<int>(i);
  }
  RunResult r;
  std::vector<RequestOutput> outs;
  while (engine.has_unfinished()) {
    const Status st = engine.step(outs);
    NS_CHECK(st.ok()) << st.to_string();
    const Status inv = engine.check_invariants();
    EXPECT_TRUE(inv.ok()) << inv.to_string();
    r.most_in_use = std::max(r.most_in_use, engine.block_manager().num_in_use_blocks());
    if (draft != nullptr)
      r.draft_most_in_use = std::max(r.draft_most_in_use, draft->block_manager().num_in_use_blocks());
    for (const RequestOutput& o : outs) {
      std::vector<int32_t>& t = r.tokens[index.at(o.id)];
      t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
    }
  }
  r.releases = engine.block_manager().num_window_releases();
  if (draft != nullptr) r.draft_releases = draft->block_manager().num_window_releases();
  return r;
}

std::vector<std::vector<int32_t>> prompts_of(uint64_t seed, int32_t vocab, std::vector<int32_t> lens) {
  Rng rng(seed);
  std::vector<std::vector<int32_t>> out;
  for (int32_t n : lens) {
    std::vector<int32_t>& p = out.emplace_back(n);
    for (int32_t& t : p) t = 1 + static_cast<int32_t>(rng.next_u64() % (vocab - 1));
  }
  return out;
}

TEST(WindowReleaseModel, DefaultModelWithASmallWindowGivesTheSameTokens) {
  ThreadPool pool(0);
  // Two prompts share their first 24 tokens: the second hits the first's cached (and released) blocks.
  std::vector<std::vector<int32_t>> prompts = prompts_of(3, 49152, {40, 9, 33});
  prompts.push_back(prompts[0]);
  prompts.back().resize(24);
  prompts.back().insert(prompts.back().end(), {17, 18, 19, 20, 21});
  for (const bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused read" : "gather");
    RunSetup s;
    s.window = 8;
    s.fused_read = fused;
    const RunResult on = run(kDefaultModel, prompts, s, pool);
    s.release = false;
    const RunResult off = run(kDefaultModel, prompts, s, pool);
    EXPECT_EQ(on.tokens, off.tokens);
    EXPECT_GT(on.releases, 0);
    EXPECT_EQ(off.releases, 0);
    EXPECT_LT(on.most_in_use, off.most_in_use);
    if (fused) {
      s.window = 0;  // the window does change the tokens, so the runs above exercised it
      EXPECT_NE(run(kDefaultModel, prompts, s, pool).tokens, on.tokens);
    }
  }
}

// The tiny fixture runs long: 120 tokens through a window of 5 in blocks of 2.
TEST(WindowReleaseModel, MistralWindowFixtureGivesTheSameTokensHoldingItsWindow) {
  ThreadPool pool(0);
  const std::vector<std::vector<int32_t>> prompts = prompts_of(5, 384, {20, 3, 45});
  RunSetup s;
  s.block_size = 2;
  s.max_num_batched_tokens = 8;
  s.max_tokens = 100;
  s.num_blocks = 256;  // no preemption even without release
  const RunResult on = run(kMistralWindow, prompts, s, pool);
  s.release = false;
  const RunResult off = run(kMistralWindow, prompts, s, pool);
  EXPECT_EQ(on.tokens, off.tokens);
  // Without release: 3 sequences of up to 144 tokens, in blocks of 2. With:
  // each reads its last 5 positions, at most 4 blocks, plus an 8-token chunk.
  EXPECT_GE(off.most_in_use, 100);
  EXPECT_LE(on.most_in_use, 3 * 4 + 4);
}

// A draft model with a window releases behind it too (DraftProposer), and
// its rollbacks across a released block start the request afresh: the
// fixture as the target, and as its own draft with a window of 3 (most
// proposals rejected, so rollbacks) or of 5 (every one kept).
TEST(WindowReleaseModel, WindowedDraftHoldsOnlyItsWindowAndChangesNoToken) {
  ThreadPool pool(0);
  const std::vector<std::vector<int32_t>> prompts = prompts_of(7, 384, {20, 3, 45});
  RunSetup s;
  s.block_size = 2;
  s.max_num_batched_tokens = 16;
  s.max_tokens = 80;
  s.num_blocks = 256;
  const RunResult plain = run(kMistralWindow, prompts, s, pool);
  for (const int64_t w : {3, 5}) {
    SCOPED_TRACE("draft window " + std::to_string(w));
    s.draft_window = w;
    const RunResult on = run(kMistralWindow, prompts, s, pool);
    EXPECT_EQ(on.tokens, plain.tokens);
    EXPECT_GT(on.draft_releases, 0);
    // Each of 3 sequences reads its last w + 3 positions (k - 1 proposals
    // fed, and a chunk of at most 16): at most 12 blocks of 2 held.
    EXPECT_LE(on.draft_most_in_use, 3 * 12);
    s.release = false;
    const RunResult off = run(kMistralWindow, prompts, s, pool);
    s.release = true;
    EXPECT_EQ(off.tokens, plain.tokens);
    EXPECT_EQ(off.draft_releases, 0);
    EXPECT_GE(off.draft_most_in_use, 100);  // 3 sequences of up to 125 tokens
  }
}

}  // namespace
}  // namespace nanoserve

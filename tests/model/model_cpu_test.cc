#include "model/model_cpu.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "model/kv_cpu.h"
#include "model/model_fixture.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve {
namespace {

using testing::default_model;
using testing::greedy;
using testing::make_batch;

class Llama : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(default_model().model, nullptr)
        << "default model missing or unloadable: " << testing::kDefaultModel << " (run scripts/fetch-model)";
    model_ = default_model().model.get();
    vocab_ = model_->config().vocab_size;
  }
  std::vector<int32_t> encode(const std::string& text) {
    auto tok = Tokenizer::from_gguf(*default_model().file);
    EXPECT_TRUE(tok.ok());
    return (*tok)->encode(text, true, true);
  }
  // The first row's logits of one forward step, copied out (empty if the step failed).
  std::vector<float> first_logits(const ForwardBatch& batch, CpuKV& cache, Workspace& ws) {
    auto out = model_->forward(batch, cache, ws);
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    if (!out.ok()) return {};
    const float* l = out->data_as<const float>();
    return std::vector<float>(l, l + vocab_);
  }
  // Bitwise equal (memcmp: -0 differs from +0, a NaN equals itself).
  static bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  }
  const CpuModel* model_ = nullptr;
  int64_t vocab_ = 0;
};

TEST_F(Llama, GreedyCapitalOfFranceMentionsParis) {
  auto tok = Tokenizer::from_gguf(*default_model().file);
  ASSERT_TRUE(tok.ok());
  CpuKV cache = CpuKV::per_sequence(model_->config(), 1, 64, model_->pool());
  Workspace ws = model_->make_workspace(64, 1);
  const auto prompt = (*tok)->encode("The capital of France is", true, true);
  const auto out = greedy(*model_, cache, ws, 0, prompt, 12);
  const std::string text = (*tok)->decode(out);
  EXPECT_NE(text.find("Paris"), std::string::npos) << "continuation: '" << text << "'";
}

// A sequence's logits are bitwise the same alone or batched with another
// sequence of a different length (batch invariance, docs/architecture.md).
TEST_F(Llama, BatchedPrefillAndDecodeEqualAlone) {
  const std::vector<int32_t> a = encode("The quick brown fox"),
                             b = encode("Once upon a time, in a land far away");
  Workspace ws = model_->make_workspace(64, 2);
  std::vector<float> alone_a, alone_b, alone_a2;
  {
    CpuKV cache = CpuKV::per_sequence(model_->config(), 2, 64, model_->pool());
    auto la = model_->forward(make_batch({a}, {0}, {0}), cache, ws);
    ASSERT_TRUE(la.ok());
    alone_a.assign(la->data_as<const float>(), la->data_as<const float>() + vocab_);
    auto la2 = model_->forward(make_batch({{42}}, {static_cast<int32_t>(a.size())}, {0}), cache, ws);
    ASSERT_TRUE(la2.ok());
    alone_a2.assign(la2->data_as<const float>(), la2->data_as<const float>() + vocab_);
    auto lb = model_->forward(make_batch({b}, {0}, {1}), cache, ws);
    ASSERT_TRUE(lb.ok());
    alone_b.assign(lb->data_as<const float>(), lb->data_as<const float>() + vocab_);
  }
  CpuKV cache = CpuKV::per_sequence(model_->config(), 2, 64, model_->pool());
  auto both = model_->forward(make_batch({a, b}, {0, 0}, {0, 1}), cache, ws);
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(std::memcmp(both->data_as<const float>(), alone_a.data(), vocab_ * 4), 0)
      << "a in a batch of two";
  EXPECT_EQ(std::memcmp(both->data_as<const float>() + vocab_, alone_b.data(), vocab_ * 4), 0)
      << "b in a batch of two";
  // Decode a together with a prefill chunk of nothing else: a's step alone vs. with b's next token.
  auto step = model_->forward(
      make_batch({{42}, {7}}, {static_cast<int32_t>(a.size()), static_cast<int32_t>(b.size())}, {0, 1}),
      cache, ws);
  ASSERT_TRUE(step.ok());
  EXPECT_EQ(std::memcmp(step->data_as<const float>(), alone_a2.data(), vocab_ * 4), 0)
      << "decode of a in a batch";
}

// Prefill in two chunks equals prefill in one.
TEST_F(Llama, ChunkedPrefillEqualsWhole) {
  const std::vector<int32_t> p = encode("In 1492, Columbus sailed across the Atlantic Ocean");
  Workspace ws = model_->make_workspace(64, 1);
  CpuKV c1 = CpuKV::per_sequence(model_->config(), 1, 64, model_->pool());
  CpuKV c2 = CpuKV::per_sequence(model_->config(), 1, 64, model_->pool());
  const std::vector<float> whole = first_logits(make_batch({p}, {0}, {0}), c1, ws);
  ASSERT_EQ(static_cast<int64_t>(whole.size()), vocab_);
  const size_t cut = p.size() / 2;
  const std::vector<int32_t> first(p.begin(), p.begin() + cut), second(p.begin() + cut, p.end());
  ASSERT_TRUE(model_->forward(make_batch({first}, {0}, {0}), c2, ws).ok());
  EXPECT_TRUE(same_bits(first_logits(make_batch({second}, {static_cast<int32_t>(cut)}, {0}), c2, ws), whole));
}

// Workspace::profile only observes: the same logits, and every phase that
// ran got time (the decode step's 4 matmul families, attention, lm_head).
TEST_F(Llama, ProfiledForwardTimesPhasesAndKeepsLogits) {
  const std::vector<int32_t> p = encode("The quick brown fox");
  Workspace ws = model_->make_workspace(64, 1);
  CpuKV c1 = CpuKV::per_sequence(model_->config(), 1, 64, model_->pool());
  CpuKV c2 = CpuKV::per_sequence(model_->config(), 1, 64, model_->pool());
  const std::vector<float> plain = first_logits(make_batch({p}, {0}, {0}), c1, ws);
  ASSERT_EQ(static_cast<int64_t>(plain.size()), vocab_);
  ForwardProfile prof;
  ws.profile = &prof;
  EXPECT_TRUE(same_bits(first_logits(make_batch({p}, {0}, {0}), c2, ws), plain));
  EXPECT_EQ(prof.calls, 1);
  for (ForwardPhase ph : {ForwardPhase::kQkv, ForwardPhase::kAttention, ForwardPhase::kOProj,
                          ForwardPhase::kGateUp, ForwardPhase::kDown, ForwardPhase::kLmHead}) {
    EXPECT_GT(prof.ns[static_cast<int>(ph)], 0) << forward_phase_name(ph);
  }
}

// The same steps through the naive cache, the paged cache's gather read and
// its fused read give bitwise-identical logits.
TEST_F(Llama, NaiveAndPagedCachesAgreeBitwise) {
  const std::vector<int32_t> p =
      encode("<|im_start|>user\nName three colors.<|im_end|>\n<|im_start|>assistant\n");
  Workspace ws = model_->make_workspace(64, 1);
  CpuKV naive = CpuKV::per_sequence(model_->config(), 1, 80, model_->pool());
  const auto ref = greedy(*model_, naive, ws, 0, p, 8);
  for (bool fused : {false, true}) {
    auto paged = testing::make_paged_cache(model_->config(), 16, 8, 2, 80, fused, model_->pool());
    ASSERT_NE(paged, nullptr);
    const int32_t seq = paged->add_sequence();
    // Compare logits at every step, not only tokens.
    CpuKV n2 = CpuKV::per_sequence(model_->config(), 1, 80, model_->pool());
    ForwardBatch bn = make_batch({p}, {0}, {0}), bp = make_batch({p}, {0}, {seq});
    int32_t pos = static_cast<int32_t>(p.size());
    for (int i = 0; i < 8; ++i) {
      auto ln = model_->forward(bn, n2, ws);
      ASSERT_TRUE(ln.ok());
      std::vector<float> lnv(ln->data_as<const float>(), ln->data_as<const float>() + vocab_);
      auto lp = testing::forward_paged(*model_, *paged, bp, ws);
      ASSERT_TRUE(lp.ok()) << lp.status().to_string();
      ASSERT_EQ(std::memcmp(lp->data_as<const float>(), lnv.data(), vocab_ * 4), 0)
          << (fused ? "fused" : "gather") << " read, step " << i;
      bn = make_batch({{ref[i]}}, {pos}, {0});
      bp = make_batch({{ref[i]}}, {pos}, {seq});
      ++pos;
    }
  }
}

// The forward checks nothing itself: the step's one check is
// ForwardBatch::validate against the runner's limits (tests/step), which a
// paged cache's prepare() runs. A bad batch never reaches the pools.
TEST_F(Llama, BadBatchesStopAtValidation) {
  Workspace ws = model_->make_workspace(8, 1);
  auto paged = testing::make_paged_cache(model_->config(), 16, 4, 1, 64, true, model_->pool(), DType::kF32, 8);
  ASSERT_NE(paged, nullptr);
  const int32_t seq = paged->add_sequence();
  auto bad_token = testing::forward_paged(*model_, *paged, make_batch({{1, static_cast<int32_t>(vocab_)}}, {0}, {seq}), ws);
  EXPECT_EQ(bad_token.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_token.status().message().find("outside the vocabulary"), std::string::npos);
  auto too_long = testing::forward_paged(*model_, *paged, make_batch({std::vector<int32_t>(9, 1)}, {0}, {seq}), ws);
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(testing::forward_paged(*model_, *paged, make_batch({{1, 2}}, {0}, {seq}), ws).ok());
}

}  // namespace
}  // namespace nanoserve

// The engine's TokenConstraint hook over the fake model: every token the
// engine emits is one the constraint allowed in that state, greedy and
// sampled; the constraint hears of each token; a constrained greedy request
// gives the same tokens alone and in a batch.

#include "engine/token_constraint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine/fake_model.h"

namespace nanoserve {
namespace {

using testing::FakeModel;

constexpr int32_t kVocab = 64;

// Step k allows the tokens t with t % 4 == k % 4 (t >= 1), and records what it accepted.
class ModFour final : public TokenConstraint {
 public:
  // apply_mask false: apply() leaves the row alone, so only the engine's check of allows() keeps the
  // rule; allows_all true: allows() says yes to anything, so only the mask keeps it.
  ModFour(std::vector<int32_t>* accepted, bool apply_mask, bool allows_all)
      : accepted_(accepted), apply_mask_(apply_mask), allows_all_(allows_all) {}
  static bool rule(int32_t step, int32_t t) { return t >= 1 && t % 4 == step % 4; }
  void apply(std::span<float> logits) override {
    if (!apply_mask_) return;
    for (int32_t t = 0; t < static_cast<int32_t>(logits.size()); ++t)
      if (!rule(step_, t)) logits[t] = -INFINITY;
  }
  bool allows(int32_t token) const override { return allows_all_ || rule(step_, token); }
  void accept(int32_t token) override {
    accepted_->push_back(token);
    ++step_;
  }

 private:
  std::vector<int32_t>* accepted_;
  bool apply_mask_, allows_all_;
  int32_t step_ = 0;
};

class ModFourFactory final : public TokenConstraintFactory {
 public:
  explicit ModFourFactory(bool apply_mask = true, bool allows_all = false)
      : apply_mask_(apply_mask), allows_all_(allows_all) {}
  std::unique_ptr<TokenConstraint> start() const override {
    accepted_.emplace_back();
    return std::make_unique<ModFour>(&accepted_.back(), apply_mask_, allows_all_);
  }
  bool apply_mask_, allows_all_;
  mutable std::deque<std::vector<int32_t>>
      accepted_;  // per started request, in start order (stable addresses)
};

std::unique_ptr<Engine> make_engine() {
  EngineConfig c;
  c.num_blocks = 256;
  c.block_size = 4;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 32;
  auto model = std::make_unique<FakeModel>(kVocab, c.max_num_batched_tokens, c.max_num_seqs);
  StatusOr<std::unique_ptr<Engine>> e = Engine::create(c, std::move(model), nullptr);
  NS_CHECK(e.ok()) << e.status().to_string();
  return std::move(e).value();
}

std::map<RequestId, std::vector<int32_t>> run(Engine& e) {
  std::map<RequestId, std::vector<int32_t>> got;
  std::vector<RequestOutput> outs;
  while (e.has_unfinished()) {
    NS_CHECK(e.step(outs).ok());
    for (const RequestOutput& o : outs)
      got[o.id].insert(got[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
  }
  return got;
}

SamplingParams params(float temperature, std::shared_ptr<const TokenConstraintFactory> c, uint64_t seed = 1) {
  SamplingParams p;
  p.temperature = temperature;
  p.max_tokens = 24;
  p.seed = seed;
  p.constraint = std::move(c);
  return p;
}

TEST(TokenConstraintHook, EveryTokenIsAllowedAndAccepted) {
  // The mask alone, then the check alone (the engine's guard against a masked draw), each keep the rule.
  for (auto [mask, allows_all] : {std::pair{true, true}, std::pair{false, false}})
    for (float temperature : {0.0f, 1.0f}) {
      auto f = std::make_shared<ModFourFactory>(mask, allows_all);
      auto e = make_engine();
      std::vector<RequestId> ids;
      for (uint64_t seed = 1; seed <= 3; ++seed)
        ids.push_back(*e->add_request({5, 9, 13, 2}, params(temperature, f, seed)));
      auto got = run(*e);
      for (size_t i = 0; i < ids.size(); ++i) {
        const std::vector<int32_t>& out = got[ids[i]];
        ASSERT_EQ(out.size(), 24u);
        for (size_t k = 0; k < out.size(); ++k)
          EXPECT_TRUE(ModFour::rule(static_cast<int32_t>(k), out[k])) << k;
        EXPECT_EQ(f->accepted_[i], out);
      }
      if (temperature > 0 && mask) {
        EXPECT_FALSE(got[ids[0]] == got[ids[1]] && got[ids[1]] == got[ids[2]]);  // seeds still matter
      }
    }
}

TEST(TokenConstraintHook, ConstrainedGreedyIsNotPlainGreedy) {
  SamplingParams p = params(0.0f, nullptr);
  EXPECT_TRUE(p.plain_greedy());
  p.constraint = std::make_shared<ModFourFactory>();
  EXPECT_FALSE(p.plain_greedy());
}

TEST(TokenConstraintHook, GreedyAloneEqualsGreedyInABatch) {
  auto f = std::make_shared<ModFourFactory>();
  const std::vector<int32_t> prompt = {7, 3, 11, 30, 1};
  auto alone = make_engine();
  const RequestId a = *alone->add_request(prompt, params(0.0f, f));
  const std::vector<int32_t> want = run(*alone)[a];
  auto batch = make_engine();
  std::vector<RequestId> ids;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> other = {static_cast<int32_t>(1 + i), 40, static_cast<int32_t>(20 + i)};
    ids.push_back(
        *batch->add_request(i % 2 ? prompt : other, params(i < 3 ? 0.0f : 1.0f, i % 3 ? f : nullptr, i)));
  }
  auto got = run(*batch);
  EXPECT_EQ(got[ids[1]], want);  // the constrained greedy copy of the prompt, among others
  EXPECT_NE(got[ids[0]], want);
}

}  // namespace
}  // namespace nanoserve

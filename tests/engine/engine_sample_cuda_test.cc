// The engine on the GPU with sampling on the device (ops/sample), end to end
// with the default model's shape in dummy weights (the default model's file
// gives only the tokenizer; random weights give flat rows, so large nuclei that are handed back to the host
// get exercised too). The oracle is the engine's own host path: a
// logit_bias of 0 changes no logit but keeps a request off the device sampler
// (SamplingParams::device_sampleable), so its step copies the logits back and
// the CPU Sampler draws, from the same seed. A seeded request must give the
// same tokens on both paths, alone and in batches of 8 and 24 next to other
// sampled requests, next to a request that forces the host path, and with
// logprobs. Without a CUDA device every test reports SKIPPED.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/cuda/device_memory.cuh"
#include "core/skip_without_gpu.h"
#include "engine/generate.h"
#include "engine/load_engine.h"

namespace nanoserve {
namespace {

class EngineSampleCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    NS_SKIP_WITHOUT_GPU();
    pool_ = std::make_unique<ThreadPool>(0);
    EngineConfig c;
    c.device = Device::kCUDA;
    c.max_num_seqs = 32;
    c.max_num_batched_tokens = 256;
    c.num_blocks = 256;
    c.max_model_len = 512;
    ModelSpec spec;
    spec.format = LoadFormat::kDummy;
    spec.model_shape = "smollm2-135m";
    spec.seed = 7;
    spec.tokenizer_path = NS_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";  // the tokenizer only
    StatusOr<LoadedEngine> le = load_engine(spec, c, *pool_);
    ASSERT_TRUE(le.ok()) << le.status().to_string();
    le_ = std::make_unique<LoadedEngine>(std::move(le).value());
    ASSERT_EQ(le_->device, Device::kCUDA);
    Rng rng(31);
    for (int i = 0; i < 24; ++i) {
      std::vector<int32_t> p(3 + rng.next_u64() % 20);
      for (int32_t& t : p) t = static_cast<int32_t>(rng.next_u64() % 49152);
      prompts_.push_back(p);
    }
  }

  // The i-th request's params: sampled, seeded, a filter mix by index.
  static SamplingParams sampled(int i, bool host) {
    SamplingParams p;
    p.max_tokens = 24;
    p.ignore_eos = true;
    p.seed = 1000 + static_cast<uint64_t>(i);
    p.temperature = 0.6f + 0.1f * static_cast<float>(i % 7);
    if (i % 4 == 1) p.top_k = 40;
    if (i % 4 == 2) p.top_p = 0.9f;
    if (i % 4 == 3) p.min_p = 0.05f;
    if (i % 5 == 4) p.temperature = 0.0f;  // a greedy row among them
    if (host) p.logit_bias = {{0, 0.0f}};
    return p;
  }

  std::vector<Completion> run(const std::vector<int>& which, const std::vector<SamplingParams>& params) {
    std::vector<std::vector<int32_t>> prompts;
    for (int i : which) prompts.push_back(prompts_[static_cast<size_t>(i)]);
    StatusOr<std::vector<Completion>> r = generate(*le_->engine, prompts, params);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(r).value() : std::vector<Completion>{};
  }

  static std::string first_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    if (i == a.size() && i == b.size()) return "equal";
    return "first difference at token " + std::to_string(i) + ": " +
           (i < a.size() ? std::to_string(a[i]) : "end") + " vs " +
           (i < b.size() ? std::to_string(b[i]) : "end");
  }

  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<LoadedEngine> le_;
  std::vector<std::vector<int32_t>> prompts_;
};

TEST_F(EngineSampleCuda, DeviceDrawEqualsHostDrawAlone) {
  for (int i = 0; i < 8; ++i) {
    const std::vector<Completion> dev = run({i}, {sampled(i, false)});
    const std::vector<Completion> host = run({i}, {sampled(i, true)});
    ASSERT_EQ(dev.size(), 1u);
    ASSERT_EQ(host.size(), 1u);
    EXPECT_EQ(dev[0].tokens, host[0].tokens)
        << "request " << i << ": " << first_difference(dev[0].tokens, host[0].tokens);
  }
}

TEST_F(EngineSampleCuda, SeededRequestSameAloneAndInBatches) {
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < 24; ++i) alone.push_back(run({i}, {sampled(i, false)})[0].tokens);
  for (int n : {8, 24}) {
    std::vector<int> which;
    std::vector<SamplingParams> params;
    for (int i = 0; i < n; ++i) {
      which.push_back(i);
      params.push_back(sampled(i, false));
    }
    const std::vector<Completion> batch = run(which, params);
    ASSERT_EQ(batch.size(), static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(batch[i].tokens, alone[i])
          << "request " << i << " in a batch of " << n << ": " << first_difference(batch[i].tokens, alone[i]);
    }
  }
}

// One host-path request in the batch sends every step back to the host
// sampler: the device-sampleable requests still draw the same tokens.
TEST_F(EngineSampleCuda, HostRowInTheBatchChangesNothing) {
  std::vector<int> which;
  std::vector<SamplingParams> params;
  for (int i = 0; i < 8; ++i) {
    which.push_back(i);
    params.push_back(sampled(i, i == 3));
  }
  const std::vector<Completion> mixed = run(which, params);
  ASSERT_EQ(mixed.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    const std::vector<Completion> alone = run({i}, {sampled(i, false)});
    EXPECT_EQ(mixed[i].tokens, alone[0].tokens)
        << "request " << i << ": " << first_difference(mixed[i].tokens, alone[0].tokens);
  }
}

// Logprobs drawn on the device against the host path's Sampler::logprobs.
TEST_F(EngineSampleCuda, LogprobsEqualHostPath) {
  for (int i = 0; i < 4; ++i) {
    auto with_lp = [&](bool host) {
      SamplingParams p = sampled(i, host);
      p.logprobs = true;
      p.top_logprobs = i == 0 ? 0 : 5 * i;
      p.max_tokens = 8;
      const RequestId id = *le_->engine->add_request(prompts_[static_cast<size_t>(i)], p);
      std::vector<RequestOutput> all, step;
      while (le_->engine->has_unfinished()) {
        const Status st = le_->engine->step(step);
        EXPECT_TRUE(st.ok()) << st.to_string();
        for (RequestOutput& o : step) {
          if (o.id == id) all.push_back(o);
        }
      }
      return all;
    };
    const std::vector<RequestOutput> dev = with_lp(false), host = with_lp(true);
    ASSERT_EQ(dev.size(), host.size());
    for (size_t s = 0; s < dev.size(); ++s) {
      ASSERT_EQ(dev[s].new_tokens, host[s].new_tokens) << "request " << i << " step " << s;
      ASSERT_EQ(dev[s].logprobs.size(), host[s].logprobs.size());
      for (size_t t = 0; t < dev[s].logprobs.size(); ++t) {
        EXPECT_NEAR(dev[s].logprobs[t], host[s].logprobs[t], 1e-5) << "request " << i << " step " << s;
        ASSERT_EQ(dev[s].top_logprobs[t].size(), host[s].top_logprobs[t].size());
        for (size_t j = 0; j < dev[s].top_logprobs[t].size(); ++j) {
          EXPECT_EQ(dev[s].top_logprobs[t][j].token, host[s].top_logprobs[t][j].token)
              << "request " << i << " step " << s << " rank " << j;
          EXPECT_NEAR(dev[s].top_logprobs[t][j].logprob, host[s].top_logprobs[t][j].logprob, 1e-5);
        }
      }
    }
  }
}

}  // namespace
}  // namespace nanoserve

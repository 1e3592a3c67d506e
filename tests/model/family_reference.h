#pragma once
// The transformers references of the family fixtures (tests/fixtures/families/
// <family>/reference.json and reference.safetensors, made by the scripts
// beside them): each prompt's text, token ids and f32 logits at every
// position. Failures are reported to gtest; the result is then short.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "io/safetensors.h"
#include "model/kv_cpu.h"
#include "model/model_cpu.h"
#include "model/model_source.h"

namespace nanoserve::testing {

inline const std::string kFamiliesDir = NS_SOURCE_DIR "/tests/fixtures/families/";

struct FamilyPrompt {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<float> logits;  // [len, vocab]
};

inline std::vector<FamilyPrompt> load_family_prompts(const std::string& family) {
  std::vector<FamilyPrompt> out;
  std::ifstream in(kFamiliesDir + family + "/reference.json");
  EXPECT_TRUE(in.good()) << family;
  if (!in.good()) return out;
  const nlohmann::json j = nlohmann::json::parse(in);
  auto logits = SafetensorsFile::open(kFamiliesDir + family + "/reference.safetensors");
  EXPECT_TRUE(logits.ok()) << logits.status().to_string();
  if (!logits.ok()) return out;
  for (size_t i = 0; i < j["prompts"].size(); ++i) {
    FamilyPrompt p;
    p.text = j["prompts"][i]["text"].get<std::string>();
    p.ids = j["prompts"][i]["ids"].get<std::vector<int32_t>>();
    auto t = (*logits)->tensor("logits." + std::to_string(i));
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    if (t.ok()) p.logits.assign(t->data_as<const float>(), t->data_as<const float>() + t->numel());
    out.push_back(std::move(p));
  }
  return out;
}

// The model source at a path (a GGUF file or an HF folder); empty on failure.
inline ModelSource open_family_source(const std::string& path) {
  ModelSpec spec;
  spec.path = path;
  auto src = open_model_source(spec);
  EXPECT_TRUE(src.ok()) << path << ": " << src.status().to_string();
  return src.ok() ? std::move(src).value() : ModelSource{};
}

// Logits of tokens [begin, end) of one sequence, the cache holding [0, begin).
inline std::vector<float> step(const CpuModel& m, CpuKV& cache, Workspace& ws,
                               const std::vector<int32_t>& ids, int32_t begin, int32_t end) {
  ForwardBatch b;
  for (int32_t t = begin; t < end; ++t) {
    b.tokens.push_back(ids[t]);
    b.positions.push_back(t);
    b.logits_rows.push_back(t - begin);
  }
  b.seq_starts = {0, end - begin};
  b.seq_ids = {0};
  b.context_lens = {end};
  auto out = m.forward(b, cache, ws);
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  if (!out.ok()) return {};
  return std::vector<float>(out->data_as<const float>(), out->data_as<const float>() + out->numel());
}

// The worst |ours - transformers| over every position of every prompt, run
// as whole prefills and as half prefill + decode steps; infinite when a
// prompt's logits do not come out whole.
inline float worst_logit_error(const CpuModel& m, const std::vector<FamilyPrompt>& prompts) {
  float worst = 0;
  for (const FamilyPrompt& p : prompts) {
    const auto T = static_cast<int32_t>(p.ids.size());
    if (static_cast<int64_t>(p.logits.size()) != T * m.config().vocab_size) return INFINITY;
    for (const bool decode : {false, true}) {
      CpuKV cache = CpuKV::per_sequence(m.config(), 1, T, m.pool());
      Workspace ws = m.make_workspace(T, T);
      const int32_t first = decode ? T / 2 : T;
      std::vector<float> ours = step(m, cache, ws, p.ids, 0, first);
      for (int32_t t = first; t < T; ++t) {
        const std::vector<float> one = step(m, cache, ws, p.ids, t, t + 1);
        ours.insert(ours.end(), one.begin(), one.end());
      }
      if (ours.size() != p.logits.size()) return INFINITY;
      for (size_t i = 0; i < ours.size(); ++i) worst = std::max(worst, std::fabs(ours[i] - p.logits[i]));
    }
  }
  return worst;
}

}  // namespace nanoserve::testing

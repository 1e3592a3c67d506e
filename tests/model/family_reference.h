#pragma once
// The transformers references of the family fixtures (tests/fixtures/families/
// <family>/reference.json and reference.safetensors, made by the scripts
// beside them): each prompt's text, token ids and f32 logits at every
// position. Failures are reported to gtest; the result is then short.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "io/safetensors.h"
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

}  // namespace nanoserve::testing

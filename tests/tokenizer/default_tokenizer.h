#pragma once
// The default model's tokenizer, loaded once per test binary, and the
// tokenizer fixtures' location.

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve::testing {

inline const char* kDefaultModelPath = NS_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
inline const char* kTokenizerFixtureDir = NS_SOURCE_DIR "/tests/fixtures/tokenizer/";

// Aborts the test (fatal failure) when the model cannot be loaded.
inline const Tokenizer& default_tokenizer() {
  static std::unique_ptr<Tokenizer> tok = [] {
    auto gguf = GgufFile::open(kDefaultModelPath);
    if (!gguf.ok()) {
      ADD_FAILURE() << "cannot open the default model (run scripts/fetch-model): "
                    << gguf.status().to_string();
      return std::unique_ptr<Tokenizer>();
    }
    auto t = Tokenizer::from_gguf(**gguf);
    if (!t.ok()) {
      ADD_FAILURE() << t.status().to_string();
      return std::unique_ptr<Tokenizer>();
    }
    return std::move(t).value();
  }();
  if (!tok) std::abort();
  return *tok;
}

inline std::string read_fixture(const std::string& name) {
  std::ifstream f(std::string(kTokenizerFixtureDir) + name, std::ios::binary);
  EXPECT_TRUE(f.good()) << "missing fixture " << name;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

}  // namespace nanoserve::testing

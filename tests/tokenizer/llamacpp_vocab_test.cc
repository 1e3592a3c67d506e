// Real families' vocabularies, from the PyPI sdist of llama-cpp-python, which
// ships llama.cpp's models/ggml-vocab-NAME.gguf with NAME.gguf.inp (inputs)
// and NAME.gguf.out (the ids Hugging Face gives them, written by llama.cpp's
// convert_hf_to_gguf_update.py). Not committed here; the test runs when
// NANOSERVE_VOCAB_DIR names that models/ folder and skips otherwise:
//   pip download llama-cpp-python==0.3.36 --no-deps --no-binary :all: -d /tmp/x
//   tar xzf /tmp/x/llama_cpp_python-0.3.36.tar.gz --wildcards '*/models/ggml-vocab-*'
//   NANOSERVE_VOCAB_DIR=$PWD/llama_cpp_python-0.3.36/vendor/llama.cpp/models build/nanoserve_tests ...

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> split_inputs(const std::string& s) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    size_t at = s.find(sep, pos);
    if (at == std::string::npos) break;
    out.push_back(s.substr(pos, at - pos));
    pos = at + sep.size();
  }
  return out;
}

std::vector<std::vector<int32_t>> read_ids(const std::string& s) {
  std::vector<std::vector<int32_t>> out;
  std::istringstream lines(s);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream ids(line);
    std::vector<int32_t> v;
    for (int32_t id; ids >> id;) v.push_back(id);
    out.push_back(std::move(v));
  }
  return out;
}

TEST(LlamaCppVocabs, EncodeLikeHuggingFace) {
  const char* dir = std::getenv("NANOSERVE_VOCAB_DIR");
  if (dir == nullptr || !std::filesystem::is_directory(dir)) {
    GTEST_SKIP() << "NANOSERVE_VOCAB_DIR is not set to llama.cpp's models/ folder";
  }
  // The families this engine targets: SentencePiece (llama-spm: Llama-2, Mistral and TinyLlama share its
  // layout; phi-3) and byte-level (llama-bpe: Llama-3; qwen2; gpt-2).
  for (const char* name : {"llama-spm", "phi-3", "llama-bpe", "qwen2", "gpt-2"}) {
    const std::string base = std::string(dir) + "/ggml-vocab-" + name + ".gguf";
    auto g = GgufFile::open(base);
    ASSERT_TRUE(g.ok()) << base << ": " << g.status().to_string();
    auto tok = Tokenizer::from_gguf(**g);
    ASSERT_TRUE(tok.ok()) << name << ": " << tok.status().to_string();
    const auto inputs = split_inputs(slurp(base + ".inp"));
    const auto want = read_ids(slurp(base + ".out"));
    ASSERT_EQ(inputs.size(), want.size()) << name;
    ASSERT_GE(inputs.size(), 20u) << name;
    size_t same = 0, round_trip = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      auto ids = (*tok)->encode(inputs[i], /*add_special=*/false, /*parse_special=*/false);
      EXPECT_EQ(ids, want[i]) << name << " case " << i;
      same += ids == want[i];
      const std::string back = (*tok)->decode(ids);
      EXPECT_EQ(back, inputs[i]) << name << " decode, case " << i;
      round_trip += back == inputs[i];
    }
    std::printf("[ vocab    ] %-10s %zu/%zu equal to Hugging Face, %zu/%zu decode back\n", name, same,
                inputs.size(), round_trip, inputs.size());
  }
}

}  // namespace
}  // namespace nanoserve

// Parity with the reference libraries on tokenizers trained for the test
// (tests/fixtures/tokenizer/trained/, made by make_trained_tokenizers.py):
// sentencepiece BPE as a llama GGUF (oracle: sentencepiece), HF tokenizer.json
// in the Llama-2 legacy and Metaspace layouts, an HF-trained byte-fallback
// BPE, and byte-level BPE with the Llama-3 and Qwen2 regexes (oracle: HF
// tokenizers). Every case's ids and decoded text must equal the library's.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>

#include "io/gguf.h"
#include "tokenizer/default_tokenizer.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace nanoserve {
namespace {

using nlohmann::json;

const json& expected() {
  static const json j = json::parse(testing::read_fixture("trained/expected.json"));
  return j;
}

std::vector<std::string> case_texts() {
  std::vector<std::string> out;
  for (const json& c : expected()["cases"]) {
    out.push_back(c.contains("hex") ? testing::from_hex(c["hex"].get<std::string>())
                                    : c["text"].get<std::string>());
  }
  return out;
}

std::unique_ptr<Tokenizer> load(const std::string& file) {
  const std::string path = std::string(testing::kTokenizerFixtureDir) + "trained/" + file;
  StatusOr<VocabData> v = data_loss("unread");
  if (file.ends_with(".gguf")) {
    auto g = GgufFile::open(path);
    EXPECT_TRUE(g.ok()) << g.status().to_string();
    if (!g.ok()) return nullptr;
    auto t = Tokenizer::from_gguf(**g);
    EXPECT_TRUE(t.ok()) << file << ": " << t.status().to_string();
    return t.ok() ? std::move(t).value() : nullptr;
  }
  v = vocab_from_hf_json(json::parse(testing::read_fixture("trained/" + file)), nullptr, file);
  EXPECT_TRUE(v.ok()) << v.status().to_string();
  if (!v.ok()) return nullptr;
  auto t = Tokenizer::from_vocab(std::move(v).value());
  EXPECT_TRUE(t.ok()) << file << ": " << t.status().to_string();
  return t.ok() ? std::move(t).value() : nullptr;
}

std::string show(const std::string& s) {
  return json(utf8::sanitize(s)).dump();
}

// Counts of equal results per check, printed and required to be complete.
struct Tally {
  size_t same = 0, total = 0;
  void add(bool eq) {
    same += eq;
    ++total;
  }
};

class TrainedParity : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainedParity, EncodeAndDecodeMatchTheReferenceLibrary) {
  const std::string name = GetParam();
  const json& e = expected()["tokenizers"][name];
  auto tok = load(e["file"].get<std::string>());
  ASSERT_TRUE(tok);
  const auto texts = case_texts();
  ASSERT_GE(texts.size(), 400u);
  const bool spm_oracle = !e.contains("ids");  // sentencepiece parses no special-token text
  Tally enc, enc_plain, dec, dec_skip, bos;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string& text = texts[i];
    auto plain_want = e["ids_plain"][i].get<std::vector<int32_t>>();
    auto plain = tok->encode(text, /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(plain, plain_want) << name << " plain " << show(text);
    enc_plain.add(plain == plain_want);
    std::vector<int32_t> ids = plain_want;
    if (!spm_oracle) {
      ids = e["ids"][i].get<std::vector<int32_t>>();
      auto got = tok->encode(text, false, /*parse_special=*/true);
      EXPECT_EQ(got, ids) << name << " " << show(text);
      enc.add(got == ids);
      const std::string d = tok->decode(plain_want);
      EXPECT_EQ(d, e["decoded"][i].get<std::string>()) << name << " decode " << show(text);
      dec.add(d == e["decoded"][i].get<std::string>());
    }
    const std::string ds = tok->decode(ids, /*skip_special=*/true);
    EXPECT_EQ(ds, e["decoded_skip"][i].get<std::string>()) << name << " decode (skip special) " << show(text);
    dec_skip.add(ds == e["decoded_skip"][i].get<std::string>());
    if (i < e["with_bos"].size()) {
      auto want = e["with_bos"][i].get<std::vector<int32_t>>();
      auto got = tok->encode(text, /*add_special=*/true, /*parse_special=*/!spm_oracle);
      EXPECT_EQ(got, want) << name << " with BOS " << show(text);
      bos.add(got == want);
    }
  }
  std::printf(
      "[ parity   ] %-20s encode %zu/%zu, plain %zu/%zu, decode %zu/%zu, decode skip %zu/%zu, bos %zu/%zu\n",
      name.c_str(), enc.same, enc.total, enc_plain.same, enc_plain.total, dec.same, dec.total, dec_skip.same,
      dec_skip.total, bos.same, bos.total);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, TrainedParity,
                         ::testing::Values("spm_bpe", "spm_bpe_noprefix", "hf_llama_legacy",
                                           "hf_llama_metaspace", "hf_bpe_fallback", "hf_bytelevel_llama3",
                                           "hf_bytelevel_qwen2"));

}  // namespace
}  // namespace nanoserve

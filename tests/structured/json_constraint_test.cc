// Token masks: the trie walk against the brute-force oracle (every token's
// bytes fed on their own), on a small hand-made vocabulary and on the default
// model's 49,152 tokens; and the constraint's contract (end tokens, specials).

#include "structured/json_constraint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "structured/schema_compiler.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve::structured {
namespace {

using nlohmann::json;

const char* kModelPath = NS_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

// Every byte, some multi-byte pieces, a special token and an end token.
std::shared_ptr<const TokenVocab> small_vocab() {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  for (const char* p : {"{\"",      "\":",    "\",",  "\"}", "true",    "false",        "null", "12",    "0.",
                        " \"",      "\n  ",   "name", "na",  "age\":",  "},{",          "[]",   "\\u00", "é",
                        "\xE2\x82", "\xAC\"", "1e",   "-1",  "<|end|>", "<|im_start|>", "\"\n}"})
    pieces.push_back(p);
  std::vector<bool> special(pieces.size(), false);
  special[pieces.size() - 2] = true;  // <|im_start|>
  const int32_t eos = static_cast<int32_t>(pieces.size()) - 3;
  return std::make_shared<TokenVocab>(pieces, special, std::vector<int32_t>{eos});
}

Grammar schema(const char* text) {
  StatusOr<Grammar> g = compile_schema(json::parse(text));
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return g.ok() ? std::move(*g) : json_object_grammar();
}

// The trie mask equals the oracle in the state after every prefix of `doc`.
void expect_masks_match(const TokenVocab& vocab, const Grammar& g, const std::string& doc, size_t stride) {
  JsonState s(&g);
  std::vector<JsonState> scratch;
  TokenMask fast, brute;
  for (size_t i = 0; i <= doc.size(); i += stride) {
    JsonState at(&g);
    ASSERT_TRUE(at.feed(std::string_view(doc).substr(0, i))) << doc.substr(0, i);
    compute_mask(vocab, at, scratch, fast);
    compute_mask_brute(vocab, at, brute);
    ASSERT_EQ(fast, brute) << "after " << doc.substr(0, i);
    int64_t allowed = 0;
    for (uint64_t w : fast) allowed += __builtin_popcountll(w);
    EXPECT_GT(allowed, 0) << "no token allowed after " << doc.substr(0, i);
  }
}

const char* kPersonSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":8},"age":{"type":"integer","minimum":0,"maximum":150},
  "tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":3},"ok":{"type":"boolean"}},
  "required":["age","name"],"additionalProperties":false})";

TEST(TokenMask, TrieMatchesBruteForceForASmallVocabulary) {
  const auto vocab = small_vocab();
  const Grammar g = schema(kPersonSchema);
  expect_masks_match(*vocab, g, R"({"age": 41, "name":"na\u00e9", "ok": true, "tags":["a","b"]})", 1);
  const Grammar any = json_object_grammar();
  expect_masks_match(*vocab, any, "{\"x\": [1e5, -0.5, \"\xE2\x82\xAC\", {}], \"y\": null}", 1);
}

TEST(TokenMask, EndTokensOnlyWhenComplete) {
  const auto vocab = small_vocab();
  const Grammar g = schema(R"({"type":"integer","maximum":50})");
  const int32_t eos = vocab->eos_ids()[0];
  std::vector<JsonState> scratch;
  TokenMask m;
  JsonState s(&g);
  compute_mask(*vocab, s, scratch, m);
  EXPECT_FALSE(mask_has(m, eos));
  ASSERT_TRUE(s.feed("4"));
  compute_mask(*vocab, s, scratch, m);
  EXPECT_TRUE(mask_has(m, eos));
  EXPECT_TRUE(mask_has(m, '9'));  // 49 is still in range
  EXPECT_FALSE(mask_has(m, '-'));
  ASSERT_TRUE(s.feed("9"));
  compute_mask(*vocab, s, scratch, m);
  int64_t allowed = 0;
  for (uint64_t w : m) allowed += __builtin_popcountll(w);
  EXPECT_EQ(allowed, 1);  // 49 is complete and cannot grow: only the end
  EXPECT_TRUE(mask_has(m, eos));
  EXPECT_FALSE(mask_has(m, vocab->size() - 2));  // the special token, never
}

TEST(TokenMask, ConstraintMasksLogitsAndFollowsTokens) {
  const auto vocab = small_vocab();
  auto f = std::make_shared<JsonConstraintFactory>(schema(R"({"enum":["name"]})"), vocab);
  std::unique_ptr<TokenConstraint> c = f->start();
  std::vector<float> logits(vocab->size(), 1.0f);
  c->apply(logits);
  EXPECT_TRUE(std::isinf(logits['{']));
  EXPECT_EQ(logits['"'], 1.0f);
  EXPECT_TRUE(c->allows('"'));
  EXPECT_FALSE(c->allows('n'));
  c->accept('"');
  std::fill(logits.begin(), logits.end(), 1.0f);
  c->apply(logits);
  EXPECT_EQ(logits['n'], 1.0f);
  EXPECT_TRUE(c->allows(vocab->size() - 13));  // "na"
  EXPECT_EQ(f->mask_misses(), 2);
  // A second request in the same states hits the cache.
  std::unique_ptr<TokenConstraint> c2 = f->start();
  c2->apply(logits);
  c2->accept('"');
  c2->apply(logits);
  EXPECT_EQ(f->mask_hits(), 2);
}

class ModelVocab : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kModelPath)) return;
    auto file = GgufFile::open(kModelPath);
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    auto tok = Tokenizer::from_gguf(**file);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    std::vector<std::string> pieces;
    std::vector<bool> special;
    for (int32_t id = 0; id < (*tok)->n_vocab(); ++id) {
      pieces.push_back((*tok)->token_to_piece(id));
      special.push_back((*tok)->is_special(id));
    }
    vocab_ = new std::shared_ptr<const TokenVocab>(
        std::make_shared<TokenVocab>(std::move(pieces), special, (*tok)->eos_ids()));
  }
  static void TearDownTestSuite() {
    delete vocab_;
    vocab_ = nullptr;
  }
  void SetUp() override {
    if (vocab_ == nullptr) GTEST_SKIP() << "no model at " << kModelPath << " (scripts/fetch-model)";
  }
  static std::shared_ptr<const TokenVocab>* vocab_;
};
std::shared_ptr<const TokenVocab>* ModelVocab::vocab_ = nullptr;

TEST_F(ModelVocab, TrieMatchesBruteForce) {
  const TokenVocab& v = **vocab_;
  EXPECT_EQ(v.size(), 49152);
  expect_masks_match(v, schema(kPersonSchema), R"({"age": 41, "name": "Zoé", "tags": ["a"]})", 4);
  expect_masks_match(v, json_object_grammar(), "{\"k\": [1.5, true], \"s\": \"x\\ny\"}", 5);
}

}  // namespace
}  // namespace nanoserve::structured

#include "tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>

#include "tokenizer/default_tokenizer.h"

namespace nanoserve {
namespace {

std::vector<std::string> split(const PreTokenizer& p, std::string_view text) {
  std::vector<std::string_view> views;
  p.split(text, views);
  return {views.begin(), views.end()};
}

PreTokenizer make(std::string_view name) {
  auto p = PreTokenizer::create(name);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return std::move(p).value();
}

// Pieces from Hugging Face's pre-tokenizers (fixture made by make_parity_fixture.py).
TEST(PreTokenizer, MatchesHuggingFacePiecesForEveryName) {
  auto j = nlohmann::json::parse(testing::read_fixture("pre_tokenizer.json"));
  auto texts = j["texts"].get<std::vector<std::string>>();
  ASSERT_GE(texts.size(), 300u);
  for (const char* name : {"gpt2", "smollm", "llama-bpe", "qwen2"}) {
    PreTokenizer p = make(name);
    auto expected = j[name].get<std::vector<std::vector<std::string>>>();
    ASSERT_EQ(expected.size(), texts.size());
    size_t same = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      auto got = split(p, texts[i]);
      EXPECT_EQ(got, expected[i]) << name << " on " << nlohmann::json(texts[i]).dump();
      same += got == expected[i];
    }
    EXPECT_EQ(same, texts.size()) << name;
  }
}

// The fused one-regex smollm equals the two stages it replaces.
TEST(PreTokenizer, FusedSmollmEqualsTwoStageReference) {
  PreTokenizer fused = make("smollm");
  auto ref = PreTokenizer::create("smollm", /*reference=*/true);
  ASSERT_TRUE(ref.ok());
  const std::vector<std::string> pool = {"a",
                                         "Zz",
                                         "1",
                                         "23",
                                         " ",
                                         "  ",
                                         "\t",
                                         "\n",
                                         "\r\n",
                                         "\xC2\xA0",
                                         "'s",
                                         "'T",
                                         "!",
                                         "..",
                                         "\xC2\xB2",
                                         "\xE2\x85\xA0",
                                         "\xE4\xBD\xA0",
                                         "\xF0\x9F\x98\x80",
                                         "\xE3\x80\x80",
                                         "'",
                                         "-",
                                         "_x"};
  std::mt19937 rng(5);
  for (int iter = 0; iter < 5000; ++iter) {
    std::string text;
    int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) text += pool[rng() % pool.size()];
    ASSERT_EQ(split(fused, text), split(*ref, text)) << nlohmann::json(text).dump();
  }
  auto j = nlohmann::json::parse(testing::read_fixture("pre_tokenizer.json"));
  for (const auto& t : j["texts"]) {
    std::string text = t.get<std::string>();
    EXPECT_EQ(split(fused, text), split(*ref, text)) << nlohmann::json(text).dump();
  }
}

TEST(PreTokenizer, SmollmSplitsEveryDigit) {
  PreTokenizer p = make("smollm");
  EXPECT_EQ(split(p, "ab 123"), (std::vector<std::string>{"ab", " ", "1", "2", "3"}));
  EXPECT_EQ(split(p, "a  1"), (std::vector<std::string>{"a", "  ", "1"}));
  PreTokenizer g = make("gpt2");
  EXPECT_EQ(split(g, "a  1"), (std::vector<std::string>{"a", " ", " 1"}));
}

TEST(PreTokenizer, Llama3GroupsDigitsByThreeAndFoldsContractionCase) {
  PreTokenizer p = make("llama-bpe");
  EXPECT_TRUE(p.ignore_merges());
  EXPECT_EQ(split(p, "1234567"), (std::vector<std::string>{"123", "456", "7"}));
  EXPECT_EQ(split(p, "IT'S"), (std::vector<std::string>{"IT", "'S"}));
  PreTokenizer q = make("qwen2");
  EXPECT_EQ(split(q, "123"), (std::vector<std::string>{"1", "2", "3"}));
}

TEST(PreTokenizer, PiecesConcatenateBackToTheText) {
  PreTokenizer p = make("smollm");
  std::string text = "  Mixed\t\ttext, 12 numbers\n\n and \xE4\xBD\xA0\xE5\xA5\xBD  ";
  std::string joined;
  for (const auto& s : split(p, text)) joined += s;
  EXPECT_EQ(joined, text);
  EXPECT_TRUE(split(p, "").empty());
}

TEST(PreTokenizer, LongRunsDoNotBreakTheMatcher) {
  // Long runs stress the JIT stack; the result must still be exact.
  for (const char* name : {"gpt2", "smollm", "llama-bpe", "qwen2"}) {
    PreTokenizer p = make(name);
    std::string spaces(200000, ' ');
    std::string letters(200000, 'a');
    std::string text = letters + spaces + "b" + spaces;
    auto pieces = split(p, text);
    std::string joined;
    for (const auto& s : pieces) joined += s;
    EXPECT_EQ(joined, text) << name;
    ASSERT_FALSE(pieces.empty());
    EXPECT_EQ(pieces[0], letters) << name;
  }
}

TEST(PreTokenizer, UnknownNameIsUnimplemented) {
  auto p = PreTokenizer::create("no-such-pre");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(p.status().message().find("no-such-pre"), std::string::npos);
}

}  // namespace
}  // namespace nanoserve

// Token-for-token parity with Hugging Face on the committed corpus
// (tests/fixtures/tokenizer/parity.json, made by make_parity_fixture.py).

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>

#include "tokenizer/default_tokenizer.h"
#include "tokenizer/utf8.h"

namespace nanoserve {
namespace {

using testing::default_tokenizer;

struct Case {
  std::string text;  // raw bytes (may be invalid UTF-8)
  bool from_hex = false;
  std::vector<int32_t> ids, ids_plain;
};

std::vector<Case> load_cases() {
  auto j = nlohmann::json::parse(testing::read_fixture("parity.json"));
  std::vector<Case> cases;
  for (const auto& e : j) {
    Case c;
    if (e.contains("hex")) {
      c.text = testing::from_hex(e["hex"].get<std::string>());
      c.from_hex = true;
    } else {
      c.text = e["text"].get<std::string>();
    }
    c.ids = e["ids"].get<std::vector<int32_t>>();
    c.ids_plain = e["ids_plain"].get<std::vector<int32_t>>();
    cases.push_back(std::move(c));
  }
  return cases;
}

std::string show(const std::string& s) {
  nlohmann::json j = utf8::sanitize(s);
  return j.dump();
}

TEST(TokenizerParity, MatchesHuggingFaceForCorpus) {
  const Tokenizer& tok = default_tokenizer();
  auto cases = load_cases();
  ASSERT_GE(cases.size(), 300u);
  size_t same = 0, same_plain = 0;
  for (const Case& c : cases) {
    auto ids = tok.encode(c.text, /*add_special=*/false, /*parse_special=*/true);
    auto plain = tok.encode(c.text, /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(ids, c.ids) << "text " << show(c.text);
    EXPECT_EQ(plain, c.ids_plain) << "text (specials as plain text) " << show(c.text);
    same += ids == c.ids;
    same_plain += plain == c.ids_plain;
  }
  std::printf("[ parity   ] %zu/%zu identical with special parsing, %zu/%zu without\n", same, cases.size(),
              same_plain, cases.size());
  EXPECT_EQ(same, cases.size());
  EXPECT_EQ(same_plain, cases.size());
}

TEST(TokenizerParity, AddSpecialFollowsGgufFlags) {
  // The default model has add_bos_token = false and no add_eos_token.
  const Tokenizer& tok = default_tokenizer();
  EXPECT_FALSE(tok.add_bos());
  for (const Case& c : load_cases()) {
    EXPECT_EQ(tok.encode(c.text, /*add_special=*/true, /*parse_special=*/true), c.ids) << show(c.text);
  }
}

TEST(TokenizerParity, DecodeRoundTripsValidUtf8) {
  // Bytes the vocab has no token for encode to the unknown token and cannot
  // come back; those strings are left out (and counted).
  const Tokenizer& tok = default_tokenizer();
  size_t n = 0, with_unknown = 0;
  for (const Case& c : load_cases()) {
    if (c.from_hex) continue;
    ASSERT_TRUE(utf8::is_valid(c.text));
    if (std::count(c.ids.begin(), c.ids.end(), tok.unk_id()) > 0) {
      ++with_unknown;
      continue;
    }
    EXPECT_EQ(tok.decode(tok.encode(c.text, false, true)), c.text) << show(c.text);
    EXPECT_EQ(tok.decode(tok.encode(c.text, false, false)), c.text) << show(c.text);
    ++n;
  }
  std::printf("[ roundtrip] %zu strings round-trip, %zu hold bytes without a token\n", n, with_unknown);
  EXPECT_GE(n, 300u);
  EXPECT_LE(with_unknown, 10u);
}

TEST(TokenizerParity, InvalidUtf8IsReplacedLikePython) {
  // Each maximal ill-formed subpart becomes one U+FFFD, so decoding gives the
  // replaced text (what Python's decode("utf-8", "replace") gives).
  const Tokenizer& tok = default_tokenizer();
  for (const Case& c : load_cases()) {
    if (!c.from_hex) continue;
    auto ids = tok.encode(c.text, false, true);
    EXPECT_EQ(tok.decode(ids), utf8::sanitize(c.text));
    EXPECT_TRUE(utf8::is_valid(tok.decode(ids)));
  }
}

}  // namespace
}  // namespace nanoserve

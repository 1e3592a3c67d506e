#include "tokenizer/bpe.h"

#include <gtest/gtest.h>

#include <random>

#include "tokenizer/default_tokenizer.h"
#include "tokenizer/tiny_vocab.h"

namespace nanoserve {
namespace {

using testing::alpha;
using testing::tiny_vocab;

BpeModel make_bpe(const VocabData& v) {
  std::unordered_map<std::string, int32_t> ids;
  for (size_t i = 0; i < v.tokens.size(); ++i) ids.try_emplace(v.tokens[i], static_cast<int32_t>(i));
  auto m = BpeModel::create(v.tokens, ids, v.merges, v.unk_id);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return std::move(m).value();
}

std::vector<int32_t> run(const BpeModel& m, std::string_view w, bool reference = false) {
  std::vector<int32_t> out;
  if (reference) {
    m.encode_word_reference(w, out);
  } else {
    m.encode_word(w, out);
  }
  return out;
}

TEST(Bpe, LowestRankFirstLeftmostOnTies) {
  // ranks: (a,a)=0 -> 256; (aa,a)=1 -> 257
  BpeModel m = make_bpe(tiny_vocab({{"a", "a"}, {"aa", "a"}}));
  EXPECT_EQ(run(m, "a"), (std::vector<int32_t>{'a'}));
  EXPECT_EQ(run(m, "aa"), (std::vector<int32_t>{256}));
  // "aaa": leftmost (a,a) first -> [aa, a] -> (aa,a) -> aaa
  EXPECT_EQ(run(m, "aaa"), (std::vector<int32_t>{257}));
  // "aaaa": [aa, aa]: no (aa,aa) merge
  EXPECT_EQ(run(m, "aaaa"), (std::vector<int32_t>{256, 256}));
  // "aaaaa": rank 0 twice -> [aa, aa, a], then (aa, a) -> [aa, aaa]
  EXPECT_EQ(run(m, "aaaaa"), (std::vector<int32_t>{256, 257}));
  EXPECT_EQ(run(m, "aaaaa", /*reference=*/true), (std::vector<int32_t>{256, 257}));
}

TEST(Bpe, RankDecidesOverPosition) {
  // (b,c) has a lower rank than (a,b): "abc" -> a + bc, not ab + c.
  BpeModel m = make_bpe(tiny_vocab({{"b", "c"}, {"a", "b"}}));
  EXPECT_EQ(run(m, "abc"), (std::vector<int32_t>{'a', 256}));
  EXPECT_EQ(run(m, "abab"), (std::vector<int32_t>{257, 257}));
}

TEST(Bpe, FastEqualsReferenceForTheRealVocab) {
  const Tokenizer& tok = testing::default_tokenizer();
  // Rebuild the model from the vocab to reach both implementations.
  const VocabData& v = tok.vocab();
  BpeModel m = make_bpe(v);
  std::mt19937 rng(7);
  const std::vector<std::string> seeds = {
      "the", "ing", " world", "tion", "    ", "\n\n", "ab", "\xE4\xBD\xA0", "\xF0\x9F\x98\x80",
      "1",   "'s",  "_",      "==",   "ér"};
  for (int iter = 0; iter < 3000; ++iter) {
    std::string w;
    int parts = 1 + static_cast<int>(rng() % 8);
    for (int p = 0; p < parts; ++p) {
      if (rng() % 4 == 0) {
        w.push_back(static_cast<char>(rng() % 256));
      } else {
        w += seeds[rng() % seeds.size()];
      }
    }
    EXPECT_EQ(run(m, w), run(m, w, /*reference=*/true)) << "word of " << w.size() << " bytes";
  }
  // A long word: thousands of symbols.
  std::string long_word;
  for (int i = 0; i < 2000; ++i) long_word += seeds[i % seeds.size()];
  EXPECT_EQ(run(m, long_word), run(m, long_word, true));
}

TEST(Bpe, MissingByteTokenNeedsAnUnknownToken) {
  VocabData v = tiny_vocab({});
  v.tokens[static_cast<uint8_t>('q')] = "not-q";  // byte 'q' has no token now
  std::unordered_map<std::string, int32_t> ids;
  for (size_t i = 0; i < v.tokens.size(); ++i) ids.try_emplace(v.tokens[i], static_cast<int32_t>(i));
  auto m = BpeModel::create(v.tokens, ids, v.merges, /*unk_id=*/-1);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
  auto with_unk = BpeModel::create(v.tokens, ids, v.merges, /*unk_id=*/0);
  ASSERT_TRUE(with_unk.ok());
  EXPECT_EQ(run(*with_unk, "q"), (std::vector<int32_t>{0}));
  // A run of missing bytes is one unknown token (fuse_unk); both implementations agree.
  EXPECT_EQ(run(*with_unk, "aqqqb"), (std::vector<int32_t>{'a', 0, 'b'}));
  EXPECT_EQ(run(*with_unk, "aqqqb", true), (std::vector<int32_t>{'a', 0, 'b'}));
  EXPECT_EQ(run(*with_unk, "qaq"), (std::vector<int32_t>{0, 'a', 0}));
}

}  // namespace
}  // namespace nanoserve

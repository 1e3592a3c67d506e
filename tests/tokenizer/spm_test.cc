// SentencePiece-style tokenizers: score order, UNUSED re-splitting, byte
// fallback, the space prefix around special tokens, decoding, the fast merge
// against the reference, and refusals by name (GGUF and tokenizer.json).

#include "tokenizer/spm.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "io/gguf.h"
#include "tokenizer/default_tokenizer.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve {
namespace {

using nlohmann::json;

const std::string kSp = "\xE2\x96\x81";  // ▁

// <unk> <s> </s>, the 256 byte tokens, then `pieces` (text, score, type).
VocabData spm_vocab(const std::vector<std::tuple<std::string, float, TokenType>>& pieces) {
  VocabData v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.scores = {0, 0, 0};
  v.token_types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    v.tokens.push_back(name);
    v.scores.push_back(0);
    v.token_types.push_back(TokenType::kByte);
  }
  for (const auto& [text, score, type] : pieces) {
    v.tokens.push_back(text);
    v.scores.push_back(score);
    v.token_types.push_back(type);
  }
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_bos = true;
  return v;
}

constexpr int32_t kFirst = 259;  // id of the first piece after the byte tokens
constexpr TokenType kN = TokenType::kNormal;

std::unique_ptr<Tokenizer> build(VocabData v) {
  auto t = Tokenizer::from_vocab(std::move(v));
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(t).value() : nullptr;
}

std::unique_ptr<Tokenizer> abc(float ab, float bc) {
  return build(spm_vocab(
      {{"a", -10, kN}, {"b", -10, kN}, {"c", -10, kN}, {kSp, -10, kN}, {"ab", ab, kN}, {"bc", bc, kN}}));
}

TEST(Spm, HighestScoreMergesFirst) {
  const int32_t a = kFirst, c = kFirst + 2, sp = kFirst + 3, ab = kFirst + 4, bc = kFirst + 5;
  EXPECT_EQ(abc(-2, -1)->encode("abc", false, false), (std::vector<int32_t>{sp, a, bc}));
  EXPECT_EQ(abc(-1, -2)->encode("abc", false, false), (std::vector<int32_t>{sp, ab, c}));
  // Equal scores: the leftmost pair.
  EXPECT_EQ(abc(-1, -1)->encode("abc", false, false), (std::vector<int32_t>{sp, ab, c}));
}

TEST(Spm, UnusedPiecesAreSplitBackAndControlPiecesNeverMerge) {
  auto t = build(spm_vocab({{"a", -10, kN},
                            {"b", -10, kN},
                            {"ab", -1, TokenType::kUnused},
                            {"abab", -0.5f, kN},
                            {"ba", -3, kN},
                            {kSp, -10, kN}}));
  const int32_t a = kFirst, b = kFirst + 1, abab = kFirst + 3, sp = kFirst + 5;
  EXPECT_EQ(t->encode("ab", false, false), (std::vector<int32_t>{sp, a, b}));    // "ab" is UNUSED: split back
  EXPECT_EQ(t->encode("abab", false, false), (std::vector<int32_t>{sp, abab}));  // but merges on through it
  // A CONTROL token's text is no mergeable piece: "<s>" stays three characters.
  auto u = build(spm_vocab({{"<", -1, kN}, {"s", -1, kN}, {">", -1, kN}, {"<s", -1, kN}}));
  auto ids = u->encode("<s>", false, false);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 0);
}

TEST(Spm, CharactersWithoutAPieceFallBackToBytes) {
  auto t = abc(-1, -1);
  // "é" is C3 A9; byte token of b is id 3 + b.
  EXPECT_EQ(t->encode("\xC3\xA9", false, false), (std::vector<int32_t>{kFirst + 3, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t->decode(t->encode("a\xC3\xA9 \n", false, false)), "a\xC3\xA9 \n");
  // Without byte tokens the character becomes <unk>, and a run of them one <unk>.
  VocabData v = spm_vocab({{"a", -1, kN}, {kSp, -1, kN}});
  for (size_t i = 3; i < 259; ++i) v.token_types[i] = TokenType::kNormal;  // no longer bytes
  auto u = build(v);
  EXPECT_EQ(u->encode("\xC3\xA9\xC3\xA9"
                      "a",
                      false, false),
            (std::vector<int32_t>{kFirst + 1, 0, kFirst}));
}

TEST(Spm, SpacePrefixBeforeEveryRunAfterASpecialToken) {
  auto t = abc(-1, -1);
  const int32_t a = kFirst, sp = kFirst + 3;
  // As llama.cpp: "▁" at the start and after each special token; BOS from add_bos.
  EXPECT_EQ(t->encode("a</s>a", true, true), (std::vector<int32_t>{1, sp, a, 2, sp, a}));
  EXPECT_EQ(t->encode("</s>", false, true), (std::vector<int32_t>{2}));
  // Without parse_special the text is characters: ▁, a, then bytes for "<", "/", "s", ">".
  EXPECT_EQ(t->encode("a</s>", false, false),
            (std::vector<int32_t>{sp, a, 3 + '<', 3 + '/', 3 + 's', 3 + '>'}));
  EXPECT_EQ(t->encode("", true, true), (std::vector<int32_t>{1}));
  VocabData v = spm_vocab({{"a", -1, kN}, {kSp, -1, kN}});
  v.space_prefix = SpacePrefix::kNone;
  EXPECT_EQ(build(v)->encode("a a", false, false), (std::vector<int32_t>{kFirst, kFirst + 1, kFirst}));
  v.space_prefix = SpacePrefix::kMetaspaceFirst;
  auto m = build(v);
  EXPECT_EQ(m->encode("a</s>a", false, true), (std::vector<int32_t>{kFirst + 1, kFirst, 2, kFirst}));
  EXPECT_EQ(m->encode(" a", false, true), (std::vector<int32_t>{kFirst + 1, kFirst}));  // already ▁
}

TEST(Spm, DecodeJoinsBytesAndDropsTheDummyPrefix) {
  auto t = abc(-1, -1);
  const int32_t a = kFirst, sp = kFirst + 3, ab = kFirst + 4;
  EXPECT_EQ(t->decode(std::vector<int32_t>{sp, ab, sp, a}), "ab a");
  EXPECT_EQ(t->decode(std::vector<int32_t>{1, sp, ab}), "<s> ab");
  EXPECT_EQ(t->decode(std::vector<int32_t>{1, sp, ab}, /*skip_special=*/true), "ab");
  EXPECT_EQ(t->decode(std::vector<int32_t>{sp, sp, a}), " a");  // only one space goes
  EXPECT_EQ(t->decode(std::vector<int32_t>{3 + 0xF0, 3 + 0x9F, 3 + 0x99, 3 + 0x82}), "\xF0\x9F\x99\x82");
  EXPECT_EQ(t->decode(std::vector<int32_t>{3 + 0xF0, a}),
            "\xEF\xBF\xBD"
            "a");                         // cut short: U+FFFD
  EXPECT_EQ(t->token_to_piece(sp), " ");  // pieces keep their space; the stream continues a prompt
  EXPECT_EQ(t->token_to_piece(3 + '\n'), "\n");
}

TEST(Spm, FastMergeEqualsReferenceForTheTrainedVocab) {
  auto g = GgufFile::open(std::string(testing::kTokenizerFixtureDir) + "trained/spm_bpe.gguf");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto v = vocab_from_gguf(**g);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  auto model = SpmModel::create(*v);
  ASSERT_TRUE(model.ok());
  const std::vector<std::string> alphabet = {
      kSp,   "a",   "e",    "t",       "h", "o", "n", "s", "r", "1", "\n", "\xE4\xB8\xAD", "\xF0\x9F\x99\x82",
      "the", "ing", "tion", "\xC3\xA9"};
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int k = 0; k < n; ++k) text += alphabet[rng() % alphabet.size()];
    std::vector<int32_t> fast, ref;
    model->encode(text, fast);
    model->encode_reference(text, ref);
    ASSERT_EQ(fast, ref) << text;
  }
}

TEST(Spm, GgufRefusalsNameTheField) {
  VocabData v = spm_vocab({{"a", -1, kN}});
  v.scores.pop_back();
  auto st = validate_vocab(v);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("scores"), std::string::npos) << st.message();
  v = spm_vocab({{"a", -1, kN}});
  v.scores.clear();
  EXPECT_NE(validate_vocab(v).message().find("scores"), std::string::npos);
  v = spm_vocab({{"a", -1, TokenType::kByte}});
  auto t = Tokenizer::from_vocab(v);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("type BYTE"), std::string::npos) << t.status().message();
  v = spm_vocab({{"a", std::nanf(""), kN}});
  EXPECT_NE(validate_vocab(v).message().find("scores[259] is NaN"), std::string::npos);
}

json spm_json() {
  return json::parse(testing::read_fixture("trained/hf_llama_legacy.json"));
}

TEST(Spm, TokenizerJsonRefusalsNameTheComponent) {
  struct Case {
    std::function<void(json&)> edit;
    StatusCode code;
    const char* needle;
  };
  const StatusCode kUn = StatusCode::kUnimplemented, kDL = StatusCode::kDataLoss;
  const Case cases[] = {
      {[](json& j) {
         j["normalizer"]["normalizers"][0] = {{"type", "Precompiled"}};
       },
       kUn, "'normalizer.normalizers[0]': 'Precompiled'"},
      {[](json& j) {
         j["decoder"]["decoders"][1] = {{"type", "BPEDecoder"}};
       },
       kUn, "'decoder.decoders[1]': 'BPEDecoder'"},
      {[](json& j) { j["decoder"]["decoders"][3]["content"] = "ab"; }, kDL,
       "'decoder.decoders[3].content': not one character"},
      {[](json& j) {
         j["normalizer"] = nullptr;
         j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kSp}, {"prepend_scheme", "sometimes"}};
       },
       kDL, "'pre_tokenizer.prepend_scheme': 'sometimes'"},
      {[](json& j) { j["model"]["type"] = "Unigram"; }, kUn, "'model': 'Unigram'"},
  };
  for (const Case& c : cases) {
    json j = spm_json();
    c.edit(j);
    auto v = vocab_from_hf_json(j, nullptr, "t.json");
    ASSERT_FALSE(v.ok()) << c.needle;
    EXPECT_EQ(v.status().code(), c.code) << v.status().to_string();
    EXPECT_NE(v.status().message().find(c.needle), std::string::npos) << v.status().message();
  }
}

// Variations of the SentencePiece-style pipeline that the fast path does not take load through the
// components, and the Replace/ByteFallback/Fuse decoders give back the text.
TEST(Spm, TokenizerJsonVariationsLoadThroughTheComponents) {
  const std::function<void(json&)> edits[] = {
      [](json& j) {
        j["normalizer"]["normalizers"][0] = {{"type", "Lowercase"}};
      },
      [](json& j) {
        j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFKC"}}, j["normalizer"]}}};
      },
      [](json& j) { j["decoder"]["decoders"].erase(2); },
      [](json& j) { j["decoder"]["decoders"][3]["start"] = 2; },
      [](json& j) {
        j["normalizer"] = nullptr;
        j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "first"}};
        j["decoder"] = {{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "first"}};
      },
  };
  for (size_t i = 0; i < std::size(edits); ++i) {
    json j = spm_json();
    edits[i](j);
    auto v = vocab_from_hf_json(j, nullptr, "t.json");
    ASSERT_TRUE(v.ok()) << i << ": " << v.status().to_string();
    EXPECT_NE(v->hf_pipeline, nullptr) << i;
    auto t = Tokenizer::from_vocab(std::move(v).value());
    ASSERT_TRUE(t.ok()) << i << ": " << t.status().to_string();
    if (i == 3) {  // Strip(" ", 2, 0) after Fuse: the prefix's one space goes, as with Strip(" ", 1, 0)
      EXPECT_EQ((*t)->decode((*t)->encode("a day in May", false, false)), "a day in May");
    }
  }
}

TEST(Spm, TokenizerJsonLayoutsMapOntoTheVocab) {
  auto v = vocab_from_hf_json(spm_json(), nullptr);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->model, "llama");
  EXPECT_EQ(v->space_prefix, SpacePrefix::kAlways);
  EXPECT_TRUE(v->byte_fallback);
  EXPECT_TRUE(v->decode_strip_space);
  const size_t newline = std::find(v->tokens.begin(), v->tokens.end(), "<0x0A>") - v->tokens.begin();
  ASSERT_LT(newline, v->tokens.size());
  EXPECT_EQ(v->token_types[newline], TokenType::kByte);
  EXPECT_EQ(v->token_types[3], TokenType::kControl);  // [INST]
  EXPECT_TRUE(v->add_bos);
  json j = spm_json();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kSp}, {"add_prefix_space", true}};
  v = vocab_from_hf_json(j, nullptr);  // the older form: always, split
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->space_prefix, SpacePrefix::kMetaspaceAlways);
  EXPECT_TRUE(v->split_on_space);
}

}  // namespace
}  // namespace nanoserve

#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include "tokenizer/default_tokenizer.h"
#include "tokenizer/tiny_vocab.h"
#include "tokenizer/utf8.h"

namespace nanoserve {
namespace {

using testing::default_tokenizer;
using testing::tiny_vocab;

std::unique_ptr<Tokenizer> tiny_tokenizer() {
  // 256..: merges; then <|ctl|> (CONTROL), <user> (USER_DEFINED), <|ctl|>x (CONTROL, longer)
  VocabData v = tiny_vocab({{"a", "b"}}, {{"<|ctl|>", TokenType::kControl},
                                          {"<user>", TokenType::kUserDefined},
                                          {"<|ctl|>x", TokenType::kControl},
                                          {"<|end|>", TokenType::kControl}});
  v.eos_id = 257;
  v.chat_template =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>' + "
      "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  auto t = Tokenizer::from_vocab(v);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return std::move(t).value();
}

TEST(Tokenizer, ControlTokensNeedParseSpecialUserDefinedDoNot) {
  auto tok = tiny_tokenizer();
  const int32_t ctl = 257, user = 258, ctlx = 259;
  EXPECT_EQ(tok->encode("ab<|ctl|>ab", false, true), (std::vector<int32_t>{256, ctl, 256}));
  // Leftmost-longest: "<|ctl|>x" wins over "<|ctl|>".
  EXPECT_EQ(tok->encode("<|ctl|>xy", false, true), (std::vector<int32_t>{ctlx, 'y'}));
  EXPECT_EQ(tok->encode("a<user>b", false, true), (std::vector<int32_t>{'a', user, 'b'}));
  EXPECT_EQ(tok->encode("a<user>b", false, false), (std::vector<int32_t>{'a', user, 'b'}));
  auto plain = tok->encode("<|ctl|>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), ctl), 0);
  EXPECT_EQ(tok->decode(plain), "<|ctl|>");
}

// encode(pieces): CONTROL text only in pieces with parse_special, never a match
// across a boundary, USER_DEFINED everywhere, and the plain text between
// special tokens encoded as one run (the "a" + "b" across pieces merges to ab).
TEST(Tokenizer, PiecesParseSpecialOnlyWhereAllowed) {
  auto tok = tiny_tokenizer();
  const int32_t ab = 256, ctl = 257, user = 258;
  const std::vector<TextPiece> p = {{"<|ctl|>a", true}, {"b<|ctl|><user>", false}, {"<|ctl|>", true}};
  EXPECT_EQ(tok->encode(p, false),
            (std::vector<int32_t>{ctl, ab, '<', '|', 'c', 't', 'l', '|', '>', user, ctl}));
  // "<|ct" + "l|>" spells the token only across the boundary: text.
  const std::vector<TextPiece> split = {{"<|ct", true}, {"l|>", true}};
  EXPECT_EQ(tok->encode(split, false), tok->encode("<|ctl|>", false, false));
  // One piece is the string encode.
  for (bool parse : {false, true}) {
    const std::vector<TextPiece> one = {{"ab<|ctl|>x<user>", parse}};
    EXPECT_EQ(tok->encode(one, false), tok->encode("ab<|ctl|>x<user>", false, parse));
  }
  EXPECT_TRUE(tok->encode(std::vector<TextPiece>{}, false).empty());
  // Invalid UTF-8 in a piece is replaced as the string encode replaces it.
  const std::vector<TextPiece> bad = {{"a\xff", false}, {"b", true}};
  EXPECT_EQ(tok->encode(bad, false), tok->encode(std::string("a\xff") + "b", false, false));
}

TEST(Tokenizer, DecodeRendersOrSkipsSpecialTokens) {
  auto tok = tiny_tokenizer();
  std::vector<int32_t> ids = {256, 257, ' ', 258};
  EXPECT_EQ(tok->decode(ids), "ab<|ctl|> <user>");
  EXPECT_EQ(tok->decode(ids, /*skip_special=*/true), "ab ");
  EXPECT_EQ(tok->token_to_piece(' '), " ");
  EXPECT_EQ(tok->token_text(' '), "\xC4\xA0");  // 'Ġ'
  EXPECT_EQ(tok->token_to_piece(-1), "");
  EXPECT_EQ(tok->token_to_piece(100000), "");
  // Out-of-range ids decode to nothing rather than crash.
  std::vector<int32_t> bad = {-5, 'a', 1 << 30};
  EXPECT_EQ(tok->decode(bad), "a");
}

TEST(Tokenizer, EosIdsIncludeTheChatMlEndOfTurn) {
  const Tokenizer& tok = default_tokenizer();
  auto im_end = tok.token_id("<|im_end|>");
  ASSERT_TRUE(im_end.has_value());
  EXPECT_TRUE(tok.is_eos(*im_end));
  EXPECT_TRUE(tok.is_eos(tok.eos_id()));
  EXPECT_FALSE(tok.is_eos(*tok.token_id("<|im_start|>")));
  // A vocab whose eos is not <|im_end|> still stops on it when the template is ChatML.
  VocabData v = tiny_vocab({}, {{"<|endoftext|>", TokenType::kControl}, {"<|im_end|>", TokenType::kControl}});
  v.eos_id = 256;
  v.chat_template = default_tokenizer().chat_template();
  auto t = Tokenizer::from_vocab(v);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->eos_ids(), (std::vector<int32_t>{256, 257}));
  v.chat_template = "{{ messages }}";
  t = Tokenizer::from_vocab(v);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->eos_ids(), (std::vector<int32_t>{256}));
}

TEST(Tokenizer, DefaultModelSpecialTokens) {
  const Tokenizer& tok = default_tokenizer();
  EXPECT_EQ(tok.n_vocab(), 49152);
  EXPECT_EQ(tok.vocab().pre, "smollm");
  EXPECT_EQ(tok.encode("<|im_start|>user\n", false, true), (std::vector<int32_t>{1, 4093, 198}));
  EXPECT_TRUE(tok.is_special(0));
  EXPECT_FALSE(tok.is_special(4093));
}

TEST(Tokenizer, RandomBytesNeverCrashAndDecodeToTheirReplacement) {
  const Tokenizer& tok = default_tokenizer();
  std::mt19937 rng(11);
  for (int iter = 0; iter < 500; ++iter) {
    std::string s(rng() % 64, '\0');
    for (auto& c : s) c = static_cast<char>(rng() % 256);
    auto ids = tok.encode(s, true, rng() % 2);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.n_vocab());
    // Bytes without a token come back as the unknown token's text.
    if (std::count(ids.begin(), ids.end(), tok.unk_id()) == 0) {
      EXPECT_EQ(tok.decode(ids), utf8::sanitize(s));
    } else {
      EXPECT_TRUE(utf8::is_valid(tok.decode(ids)));
    }
  }
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  const Tokenizer& tok = default_tokenizer();
  // Vary the texts so the shared bounded cache also takes new words while others read it.
  std::vector<std::string> texts;
  for (int i = 0; i < 800; ++i) {
    texts.push_back("The cache is shared: quick brown fox " + std::to_string(i * 7919) + " <|im_end|> word" +
                    std::to_string(i) + " tail" + std::string(i % 5, ' '));
  }
  std::vector<std::vector<int32_t>> expected;
  for (const auto& s : texts) expected.push_back(tok.encode(s, false, true));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < texts.size() * 2; i += 3) {
        size_t k = i % texts.size();
        if (tok.encode(texts[k], false, true) != expected[k]) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace nanoserve

namespace nanoserve {
namespace {

// llama-bpe (Llama-3) uses ignore_merges: a pre-token that is itself a vocab
// token is emitted whole even when no merge path reaches it.
TEST(Tokenizer, IgnoreMergesEmitsWholeVocabWords) {
  VocabData v = testing::tiny_vocab({{"a", "b"}}, {{"xyz", TokenType::kNormal}});
  v.pre = "gpt2";
  auto gpt2 = Tokenizer::from_vocab(v);
  ASSERT_TRUE(gpt2.ok());
  EXPECT_EQ((*gpt2)->encode("xyz ab", false, true), (std::vector<int32_t>{'x', 'y', 'z', ' ', 256}));
  v.pre = "llama-bpe";
  auto llama = Tokenizer::from_vocab(v);
  ASSERT_TRUE(llama.ok());
  EXPECT_EQ((*llama)->encode("xyz ab", false, true), (std::vector<int32_t>{257, ' ', 256}));
}

}  // namespace
}  // namespace nanoserve

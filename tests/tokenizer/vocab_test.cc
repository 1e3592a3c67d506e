#include "tokenizer/vocab.h"

#include <gtest/gtest.h>

#include <memory>

#include "io/gguf.h"
#include "io/gguf_builder.h"
#include "tokenizer/tiny_vocab.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve {
namespace {

using testing::GgufBuilder;
using testing::tiny_vocab;

void expect_data_loss(const VocabData& v, const std::string& needle) {
  Status s = validate_vocab(v);
  ASSERT_FALSE(s.ok()) << "expected an error mentioning " << needle;
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(Vocab, TinyVocabIsValid) {
  EXPECT_TRUE(validate_vocab(tiny_vocab({{"a", "b"}})).ok());
}

TEST(Vocab, RejectsBadVocabs) {
  VocabData empty;
  expect_data_loss(empty, "empty token list");

  VocabData v = tiny_vocab({{"a", "b"}});
  v.merges.push_back("ab");
  expect_data_loss(v, "not two tokens");

  v = tiny_vocab({{"a", "b"}});
  v.merges.push_back("a  b");
  expect_data_loss(v, "not two tokens");

  v = tiny_vocab({{"a", "b"}});
  v.merges.push_back("a zzz");
  expect_data_loss(v, "not in the vocab");

  v = tiny_vocab({{"a", "b"}});
  v.merges.push_back("b c");  // "bc" is not a token
  expect_data_loss(v, "which is not in the vocab");

  v = tiny_vocab({});
  v.eos_id = 256;
  expect_data_loss(v, "eos_token_id 256 out of range");

  v = tiny_vocab({});
  v.token_types.pop_back();
  expect_data_loss(v, "token_type has 255 entries");

  v = tiny_vocab({});
  v.token_types[3] = static_cast<TokenType>(42);
  expect_data_loss(v, "token_type[3]");

  v = tiny_vocab({});
  v.tokens[5].clear();
  expect_data_loss(v, "token 5 is empty");

  v = tiny_vocab({});
  v.tokens[5] = std::string(kMaxTokenBytes + 1, 'x');
  expect_data_loss(v, "over the limit");
}

TEST(Vocab, TokenizerRefusesOtherModelsAndPres) {
  VocabData v = tiny_vocab({});
  v.model = "t5";
  auto t = Tokenizer::from_vocab(v);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(t.status().message().find("'t5'"), std::string::npos) << t.status().message();

  v = tiny_vocab({});
  v.pre = "deepseek-coder";
  t = Tokenizer::from_vocab(v);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
}

// A GGUF image with the tokenizer keys of `v`, optionally changed by `edit`.
StatusOr<std::shared_ptr<const GgufFile>> gguf_of(const VocabData& v,
                                                  const std::function<void(GgufBuilder&)>& edit = {}) {
  GgufBuilder b;
  b.kv_string("tokenizer.ggml.model", v.model);
  b.kv_string("tokenizer.ggml.pre", v.pre);
  b.kv_string_array("tokenizer.ggml.tokens", v.tokens);
  std::vector<int32_t> types;
  for (TokenType t : v.token_types) types.push_back(static_cast<int32_t>(t));
  b.kv_i32_array("tokenizer.ggml.token_type", types);
  b.kv_string_array("tokenizer.ggml.merges", v.merges);
  b.kv_u32("tokenizer.ggml.eos_token_id", 257);
  b.kv_bool("tokenizer.ggml.add_bos_token", true);
  b.kv_u32("tokenizer.ggml.bos_token_id", 256);
  if (edit) edit(b);
  auto bytes = std::make_shared<std::vector<uint8_t>>(b.build());
  return GgufFile::parse(bytes->data(), bytes->size(), bytes);
}

TEST(Vocab, ReadsGgufMetadata) {
  VocabData v = tiny_vocab({}, {{"<s>", TokenType::kControl}, {"</s>", TokenType::kControl}});
  auto f = gguf_of(v);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto got = vocab_from_gguf(**f);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->tokens, v.tokens);
  EXPECT_EQ(got->token_types, v.token_types);
  EXPECT_EQ(got->bos_id, 256);
  EXPECT_EQ(got->eos_id, 257);
  EXPECT_EQ(got->unk_id, -1);
  EXPECT_TRUE(got->add_bos);
  EXPECT_FALSE(got->add_eos);

  auto tok = Tokenizer::from_gguf(**f);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->encode("hi", /*add_special=*/true, true), (std::vector<int32_t>{256, 'h', 'i'}));
  EXPECT_EQ((*tok)->encode("hi", /*add_special=*/false, true), (std::vector<int32_t>{'h', 'i'}));
}

TEST(Vocab, GgufErrorsNameTheKey) {
  VocabData v = tiny_vocab({}, {{"<s>", TokenType::kControl}, {"</s>", TokenType::kControl}});
  {
    auto f = gguf_of(v);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(Tokenizer::from_gguf(**f).ok());  // the unedited image is fine
  }
  auto expect_error = [&](const std::function<void(GgufBuilder&)>& edit, StatusCode code,
                          const std::string& needle) {
    VocabData w = v;
    auto f = gguf_of(w, edit);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    auto got = Tokenizer::from_gguf(**f);
    ASSERT_FALSE(got.ok()) << needle;
    EXPECT_EQ(got.status().code(), code) << got.status().to_string();
    EXPECT_NE(got.status().message().find(needle), std::string::npos) << got.status().message();
  };
  VocabData bad_model = v;  // model is written first, so build a whole image for it
  bad_model.model = "t5";
  {
    auto f = gguf_of(bad_model);
    ASSERT_TRUE(f.ok());
    auto got = vocab_from_gguf(**f);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(got.status().message().find("'t5' (SentencePiece unigram)"), std::string::npos)
        << got.status().message();
  }
  expect_error([](GgufBuilder& b) { b.kv_u32("tokenizer.ggml.unknown_token_id", 100000); },
               StatusCode::kDataLoss, "unknown_token_id");
  expect_error([](GgufBuilder& b) { b.kv_string("tokenizer.ggml.padding_token_id", "x"); },
               StatusCode::kDataLoss, "padding_token_id");
  expect_error([](GgufBuilder& b) { b.kv_string("tokenizer.ggml.add_eos_token", "yes"); },
               StatusCode::kDataLoss, "add_eos_token");
}

TEST(Vocab, MissingTokensKeyIsAnError) {
  GgufBuilder b;
  b.kv_string("tokenizer.ggml.model", "gpt2");
  auto bytes = std::make_shared<std::vector<uint8_t>>(b.build());
  auto f = GgufFile::parse(bytes->data(), bytes->size(), bytes);
  ASSERT_TRUE(f.ok());
  auto got = vocab_from_gguf(**f);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("tokenizer.ggml.tokens"), std::string::npos);
}

}  // namespace
}  // namespace nanoserve

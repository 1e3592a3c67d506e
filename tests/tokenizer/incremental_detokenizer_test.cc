#include "tokenizer/incremental_detokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "tokenizer/default_tokenizer.h"
#include "tokenizer/tiny_vocab.h"
#include "tokenizer/utf8.h"

namespace nanoserve {
namespace {

using testing::default_tokenizer;

const std::string kFffd = "\xEF\xBF\xBD";

std::unique_ptr<Tokenizer> bytes_only() {
  auto t = Tokenizer::from_vocab(testing::tiny_vocab({}, {{"<|ctl|>", TokenType::kControl}}));
  EXPECT_TRUE(t.ok());
  return std::move(t).value();
}

TEST(IncrementalDetokenizer, HoldsBackAPartialCharacterUntilComplete) {
  auto tok = bytes_only();  // ids 0..255 are single bytes
  IncrementalDetokenizer d(*tok);
  EXPECT_EQ(d.push('a'), "a");
  EXPECT_EQ(d.push(0xF0), "");
  EXPECT_EQ(d.push(0x9F), "");
  EXPECT_EQ(d.push(0x98), "");
  EXPECT_EQ(d.pending_bytes(), 3u);
  EXPECT_EQ(d.push(0x80), "\xF0\x9F\x98\x80");
  EXPECT_EQ(d.pending_bytes(), 0u);
  EXPECT_EQ(d.flush(), "");
}

TEST(IncrementalDetokenizer, FlushReplacesAnIncompleteTail) {
  auto tok = bytes_only();
  IncrementalDetokenizer d(*tok);
  EXPECT_EQ(d.push(0xE4), "");
  EXPECT_EQ(d.push(0xBD), "");
  EXPECT_EQ(d.flush(), kFffd);
  EXPECT_EQ(d.flush(), "");
}

TEST(IncrementalDetokenizer, BytesThatCanNeverCompleteAreReplacedAtOnce) {
  auto tok = bytes_only();
  IncrementalDetokenizer d(*tok);
  EXPECT_EQ(d.push(0xFF), kFffd);
  EXPECT_EQ(d.push(0xE4), "");
  EXPECT_EQ(d.push('x'), kFffd + "x");  // the lead byte is cut off by 'x'
  EXPECT_EQ(d.push(0x80), kFffd);       // a stray continuation byte
}

TEST(IncrementalDetokenizer, SpecialTokensRenderOrSkip) {
  auto tok = bytes_only();
  IncrementalDetokenizer keep(*tok), skip(*tok, /*skip_special=*/true);
  EXPECT_EQ(keep.push(256), "<|ctl|>");
  EXPECT_EQ(skip.push(256), "");
}

// Streaming gives exactly decode() of the whole sequence, in valid UTF-8 chunks.
TEST(IncrementalDetokenizer, ChunksConcatenateToDecodeOnRandomIds) {
  const Tokenizer& tok = default_tokenizer();
  std::mt19937 rng(3);
  for (int iter = 0; iter < 300; ++iter) {
    std::vector<int32_t> ids(1 + rng() % 40);
    for (auto& id : ids) {
      // Bias towards byte tokens (ids of single bytes of multi-byte characters) to split characters.
      id = rng() % 3 == 0 ? static_cast<int32_t>(rng() % tok.n_vocab()) : static_cast<int32_t>(rng() % 300);
    }
    IncrementalDetokenizer d(tok);
    std::string streamed;
    for (int32_t id : ids) {
      std::string chunk = d.push(id);
      ASSERT_TRUE(utf8::is_valid(chunk));
      streamed += chunk;
    }
    std::string tail = d.flush();
    ASSERT_TRUE(utf8::is_valid(tail));
    streamed += tail;
    EXPECT_EQ(streamed, tok.decode(ids));
  }
}

TEST(IncrementalDetokenizer, EmojiSplitAcrossByteTokensStreamsWhole) {
  const Tokenizer& tok = default_tokenizer();
  const std::string text = "ok \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 \xE4\xBD\xA0\xE5\xA5\xBD!";
  auto ids = tok.encode(text, false, false);
  IncrementalDetokenizer d(tok);
  std::string streamed;
  for (int32_t id : ids) {
    std::string chunk = d.push(id);
    EXPECT_TRUE(utf8::is_valid(chunk));
    streamed += chunk;
  }
  streamed += d.flush();
  EXPECT_EQ(streamed, text);
}

}  // namespace
}  // namespace nanoserve

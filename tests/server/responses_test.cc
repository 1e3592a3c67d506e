#include "server/responses.h"

#include <gtest/gtest.h>

namespace nanoserve::server {
namespace {

using nlohmann::json;

std::string text_of(int32_t id) {
  return id == 1 ? "é" : std::string(1, static_cast<char>('a' + id));
}

TEST(Responses, ChatResponseShape) {
  ResponseMeta meta{Endpoint::kChat, "chatcmpl-1", 1700000000, "m"};
  ChoiceResult c;
  c.text = "hello";
  c.finish = FinishReason::kLength;
  json j = response_json(meta, {c}, Usage{5, 3}, text_of);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"], "chatcmpl-1");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "hello");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["usage"], (json{{"prompt_tokens", 5}, {"completion_tokens", 3}, {"total_tokens", 8}}));
}

TEST(Responses, ChatLogprobs) {
  LogprobItem item{1, -0.5f, {{2, -1.0f}, {3, -2.0f}}};
  json j = chat_logprobs_json({item}, text_of);
  const json& e = j["content"][0];
  EXPECT_EQ(e["token"], "é");
  EXPECT_FLOAT_EQ(e["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(e["bytes"], (json{0xc3, 0xa9}));
  ASSERT_EQ(e["top_logprobs"].size(), 2u);
  EXPECT_EQ(e["top_logprobs"][1]["token"], "d");
  EXPECT_FLOAT_EQ(e["top_logprobs"][1]["logprob"].get<float>(), -2.0f);
}

TEST(Responses, CompletionLogprobs) {
  LogprobItem a{0, -0.1f, {{2, -3.0f}}};
  LogprobItem b{1, -0.2f, {}};
  json j = completion_logprobs_json({a, b}, text_of, 10);
  EXPECT_EQ(j["tokens"], (json{"a", "é"}));
  EXPECT_EQ(j["text_offset"], (json{10, 11}));
  EXPECT_EQ(j["token_logprobs"].size(), 2u);
  EXPECT_TRUE(j["top_logprobs"][0].contains("c"));
  EXPECT_TRUE(j["top_logprobs"][0].contains("a"));  // the sampled token is listed too
}

TEST(Responses, ChunksAndSse) {
  ResponseMeta meta{Endpoint::kChat, "chatcmpl-1", 1, "m"};
  ChunkPart first;
  first.first = true;
  json j = chunk_json(meta, first, /*include_usage=*/true, text_of);
  EXPECT_EQ(j["object"], "chat.completion.chunk");
  EXPECT_EQ(j["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["delta"]["content"], "");
  EXPECT_TRUE(j["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(j.contains("usage") && j["usage"].is_null());
  ChunkPart last;
  last.index = 1;
  last.finish = FinishReason::kStop;
  json k = chunk_json(meta, last, /*include_usage=*/false, text_of);
  EXPECT_EQ(k["choices"][0]["index"], 1);
  EXPECT_EQ(k["choices"][0]["delta"], json::object());
  EXPECT_EQ(k["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(k.contains("usage"));
  json u = usage_chunk_json(meta, Usage{2, 4});
  EXPECT_EQ(u["choices"], json::array());
  EXPECT_EQ(u["usage"]["total_tokens"], 6);
  std::string ev = sse_event(json{{"a", 1}});
  EXPECT_EQ(ev, "data: {\"a\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(Responses, CompletionChunk) {
  ResponseMeta meta{Endpoint::kCompletion, "cmpl-1", 1, "m"};
  ChunkPart p;
  p.text = "xy";
  json j = chunk_json(meta, p, false, text_of);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "xy");
}

TEST(Responses, InvalidUtf8IsReplacedNotThrown) {
  ResponseMeta meta{Endpoint::kCompletion, "cmpl-1", 1, "m"};
  ChunkPart p;
  p.text = std::string("a\xff", 2);
  std::string ev = sse_event(chunk_json(meta, p, false, text_of));
  EXPECT_NE(ev.find("a\xEF\xBF\xBD"), std::string::npos);
}

}  // namespace
}  // namespace nanoserve::server

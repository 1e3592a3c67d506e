#include "server/protocol.h"

#include <gtest/gtest.h>

#include <string>

// GCC 12 reports a false -Wrestrict inside std::string operator+ (GCC bug 105329).
#pragma GCC diagnostic ignored "-Wrestrict"

namespace nanoserve::server {
namespace {

ProtocolLimits limits() {
  ProtocolLimits l;
  l.served_model_name = "m";
  l.max_model_len = 128;
  l.max_num_seqs = 8;
  l.vocab_size = 1000;
  return l;
}

const std::string kMsgs = R"("messages": [{"role": "user", "content": "hi"}])";

ApiError chat_error(const std::string& body) {
  auto r = parse_chat_request(body, limits());
  EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

ApiError completion_error(const std::string& body) {
  auto r = parse_completion_request(body, limits());
  EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

GenerateRequest chat_ok(const std::string& body) {
  auto r = parse_chat_request(body, limits());
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << body << " -> " << e->message;
  return std::holds_alternative<GenerateRequest>(r) ? std::get<GenerateRequest>(r) : GenerateRequest{};
}

GenerateRequest completion_ok(const std::string& body) {
  auto r = parse_completion_request(body, limits());
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << body << " -> " << e->message;
  return std::holds_alternative<GenerateRequest>(r) ? std::get<GenerateRequest>(r) : GenerateRequest{};
}

TEST(Protocol, ChatParsesEveryField) {
  GenerateRequest r = chat_ok(R"({"model": "m", )" + kMsgs + R"(, "max_tokens": 7, "temperature": 0.5,
      "top_p": 0.9, "top_k": 40, "min_p": 0.05, "n": 2, "stop": ["x", "yz"], "seed": 42,
      "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "logprobs": true,
      "top_logprobs": 3, "stream": true, "stream_options": {"include_usage": true}, "ignore_eos": true})");
  EXPECT_EQ(r.endpoint, Endpoint::kChat);
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "hi");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.9f);
  EXPECT_EQ(r.params.top_k, 40);
  EXPECT_FLOAT_EQ(r.params.min_p, 0.05f);
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_EQ(r.params.seed, 42u);
  EXPECT_FLOAT_EQ(r.params.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.params.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.params.repetition_penalty, 1.1f);
  EXPECT_EQ(r.params.top_logprobs, 3);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.params.ignore_eos);
}

TEST(Protocol, ChatDefaults) {
  GenerateRequest r = chat_ok("{" + kMsgs + "}");
  EXPECT_EQ(r.model, "m");  // absent model means the served one
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.params.logprobs);
  EXPECT_FALSE(r.stream);
  EXPECT_FLOAT_EQ(r.params.temperature, 1.0f);
}

TEST(Protocol, MaxCompletionTokensOverridesMaxTokens) {
  EXPECT_EQ(chat_ok("{" + kMsgs + R"(, "max_tokens": 5, "max_completion_tokens": 9})").max_tokens, 9);
}

TEST(Protocol, ContentPartsAreJoined) {
  GenerateRequest r = chat_ok(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
      {"type": "text", "text": "b"}]}]})");
  EXPECT_EQ(r.messages[0].content, "a\nb");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})").http_status,
            400);
}

TEST(Protocol, InvalidJsonAndWrongTypesAre400) {
  EXPECT_EQ(chat_error("{not json").http_status, 400);
  EXPECT_EQ(chat_error("[1, 2]").http_status, 400);
  EXPECT_EQ(chat_error("").http_status, 400);
  ApiError e = chat_error("{" + kMsgs + R"(, "max_tokens": "7"})");
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_EQ(chat_error("{" + kMsgs + R"(, "max_tokens": 7.5})").param, "max_tokens");
  EXPECT_EQ(chat_error("{" + kMsgs + R"(, "temperature": "hot"})").param, "temperature");
  EXPECT_EQ(chat_error("{" + kMsgs + R"(, "stream": 1})").param, "stream");
  EXPECT_EQ(chat_error(R"({"messages": "hi"})").param, "messages");
  EXPECT_EQ(chat_error(R"({"messages": [{"content": "hi"}]})").param, "messages[0].role");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "wizard", "content": "hi"}]})").param, "messages[0].role");
}

TEST(Protocol, EveryMessageNeedsContentAndAKnownRole) {
  // Issue 17 item 5: these were answered 200.
  const std::pair<const char*, const char*> cases[] = {
      {R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": null}]})",
       "messages[1].content"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant"}]})", "messages[1].content"},
      {R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c"}]}]})",
       "messages[0].tool_calls[0]"},
      {R"({"messages": [{"role": "user", "content": "x", "function_call": {"name": "f"}}]})",
       "messages[0].function_call"},
      {R"({"messages": [{"role": "user", "content": "x", "tool_call_id": "c"}]})",
       "messages[0].tool_call_id"},
      {R"({"messages": [{"role": "function", "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": 7, "content": "x"}]})", "messages[0].role"},
  };
  for (const auto& [body, param] : cases) {
    ApiError e = chat_error(body);
    EXPECT_EQ(e.http_status, 400) << body;
    EXPECT_EQ(e.param, param) << body;
    EXPECT_NE(e.message.find(param), std::string::npos) << e.message;
  }
  // Empty content is content; so is an assistant turn that has it.
  EXPECT_EQ(chat_ok(R"({"messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": "b"},
      {"role": "user", "content": "c"}]})")
                .messages.size(),
            3u);
  auto t = parse_tokenize_request(R"({"messages": [{"role": "user"}]})", limits());
  ASSERT_TRUE(std::holds_alternative<ApiError>(t)) << "/tokenize reads messages the same way";
  EXPECT_EQ(std::get<ApiError>(t).param, "messages[0].content");
}

TEST(Protocol, InvalidJsonSaysWhereAndWhy) {
  ApiError e = chat_error(R"({"messages": [})");
  EXPECT_NE(e.message.find("not valid JSON (at byte 15)"), std::string::npos) << e.message;
  // Valid JSON grammar, but beyond double: say so rather than "not JSON", and quote nothing.
  const std::string digits(100000, '9');
  e = chat_error("{" + kMsgs + R"(, "max_tokens": )" + digits + "}");
  EXPECT_NE(e.message.find("a number beyond the range of a double"), std::string::npos) << e.message;
  EXPECT_LT(e.message.size(), 200u);
  EXPECT_NE(chat_error("{" + kMsgs + R"(, "temperature": 1e999})").message.find("beyond the range"),
            std::string::npos);
}

TEST(Protocol, DeepNestingIsRefused) {
  std::string deep = "{" + kMsgs + R"(, "x": )" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_EQ(chat_error(deep).http_status, 400);
}

TEST(Protocol, UnknownModelIs404) {
  ApiError e = chat_error(R"({"model": "gpt-4", )" + kMsgs + "}");
  EXPECT_EQ(e.http_status, 404);
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_NE(e.message.find("gpt-4"), std::string::npos);
  // A malformed field still wins over the model: 400 first.
  EXPECT_EQ(chat_error(R"({"model": "gpt-4", "messages": []})").http_status, 400);
}

TEST(Protocol, ErrorsQuoteAtMostAnExcerptOfTheInput) {
  // A name as long as the body limit allows must not come back whole in the error.
  const std::string long_name(100000, 'a');
  ApiError e = chat_error(R"({"model": ")" + long_name + "\", " + kMsgs + "}");
  EXPECT_EQ(e.http_status, 404);
  EXPECT_LT(e.message.size(), 2 * kMaxQuotedBytes);
  EXPECT_NE(e.message.find("'" + std::string(kMaxQuotedBytes, 'a') + "...'"), std::string::npos) << e.message;
  e = chat_error(R"({"messages": [{"role": ")" + long_name + R"("}]})");
  EXPECT_EQ(e.param, "messages[0].role");
  EXPECT_LT(e.message.size(), 2 * kMaxQuotedBytes + 100);
  // The cut never splits a character: 63 ASCII bytes, then 2-byte characters.
  std::string text = std::string(kMaxQuotedBytes - 1, 'a') + "\u00e9\u00e9";
  e = chat_error(R"({"model": ")" + text + "\", " + kMsgs + "}");
  EXPECT_NE(e.message.find("'" + std::string(kMaxQuotedBytes - 1, 'a') + "...'"), std::string::npos)
      << e.message;
  EXPECT_EQ(quote_excerpt("short"), "short");
}

TEST(Protocol, EmptyPromptOrMessagesAre400) {
  EXPECT_EQ(chat_error(R"({"messages": []})").http_status, 400);
  EXPECT_EQ(chat_error(R"({"model": "m"})").http_status, 400);
  EXPECT_EQ(completion_error(R"({"prompt": ""})").http_status, 400);
  EXPECT_EQ(completion_error(R"({"prompt": []})").http_status, 400);
  EXPECT_EQ(completion_error(R"({"prompt": ["a", ""]})").http_status, 400);
  EXPECT_EQ(completion_error(R"({"prompt": [[1, 2], []]})").http_status, 400);
  EXPECT_EQ(completion_error(R"({"model": "m"})").http_status, 400);
}

TEST(Protocol, PromptShapes) {
  auto text = completion_ok(R"({"prompt": "abc"})");
  ASSERT_EQ(text.prompts.size(), 1u);
  EXPECT_EQ(std::get<std::string>(text.prompts[0]), "abc");
  auto texts = completion_ok(R"({"prompt": ["a", "b"]})");
  EXPECT_EQ(texts.prompts.size(), 2u);
  auto ids = completion_ok(R"({"prompt": [1, 2, 3]})");
  ASSERT_EQ(ids.prompts.size(), 1u);
  EXPECT_EQ(std::get<std::vector<int32_t>>(ids.prompts[0]), (std::vector<int32_t>{1, 2, 3}));
  auto lists = completion_ok(R"({"prompt": [[1], [2, 3]]})");
  ASSERT_EQ(lists.prompts.size(), 2u);
  EXPECT_EQ(std::get<std::vector<int32_t>>(lists.prompts[1]), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(completion_error(R"({"prompt": ["a", [1]]})").http_status, 400);
  EXPECT_EQ(completion_error(R"({"prompt": [1, "a"]})").http_status, 400);
  EXPECT_EQ(completion_error(R"({"prompt": [1000]})").param, "prompt");  // outside the vocabulary
  EXPECT_EQ(completion_error(R"({"prompt": [-1]})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt": 5})").param, "prompt");
}

TEST(Protocol, RangeChecks) {
  auto field_error = [&](const std::string& field) { return chat_error("{" + kMsgs + ", " + field + "}"); };
  EXPECT_EQ(field_error(R"("max_tokens": 0)").param, "max_tokens");
  EXPECT_EQ(field_error(R"("max_tokens": -3)").param, "max_tokens");
  EXPECT_EQ(field_error(R"("max_completion_tokens": 0)").param, "max_completion_tokens");
  EXPECT_EQ(field_error(R"("n": 0)").param, "n");
  EXPECT_EQ(field_error(R"("n": 9)").param, "n");  // > max_num_seqs
  EXPECT_EQ(field_error(R"("temperature": -0.1)").param, "temperature");
  EXPECT_EQ(field_error(R"("top_p": 0)").param, "top_p");
  EXPECT_EQ(field_error(R"("top_p": 1.01)").param, "top_p");
  EXPECT_EQ(field_error(R"("top_k": -2)").param, "top_k");
  EXPECT_EQ(field_error(R"("min_p": 1.5)").param, "min_p");
  EXPECT_EQ(field_error(R"("presence_penalty": 3)").param, "presence_penalty");
  EXPECT_EQ(field_error(R"("frequency_penalty": -3)").param, "frequency_penalty");
  EXPECT_EQ(field_error(R"("repetition_penalty": 0)").param, "repetition_penalty");
  EXPECT_EQ(field_error(R"("top_logprobs": 2)").param, "top_logprobs");  // needs logprobs
  EXPECT_EQ(field_error(R"("logprobs": true, "top_logprobs": 21)").param, "top_logprobs");
  EXPECT_EQ(field_error(R"("stream_options": {"include_usage": true})").param, "stream_options");
  EXPECT_EQ(completion_error(R"({"prompt": "a", "logprobs": 21})").param, "logprobs");
  EXPECT_EQ(completion_error(R"({"prompt": "a", "logprobs": true})").param, "logprobs");
  // Boundaries that are allowed.
  chat_ok("{" + kMsgs + R"(, "temperature": 0, "top_p": 1, "top_k": -1, "n": 8, "max_tokens": 1})");
}

TEST(Protocol, NonFiniteNumbersAre400) {
  // JSON has no NaN literal: Python's json.dumps(float('nan')) writes NaN, which is not JSON.
  EXPECT_EQ(chat_error("{" + kMsgs + R"(, "temperature": NaN})").http_status, 400);
  EXPECT_EQ(chat_error("{" + kMsgs + R"(, "temperature": Infinity})").http_status, 400);
  // Literals beyond double are refused by the parser; beyond float, by the field check.
  EXPECT_EQ(chat_error("{" + kMsgs + R"(, "temperature": 1e999})").http_status, 400);
  EXPECT_EQ(chat_error("{" + kMsgs + R"(, "top_p": -1e999})").http_status, 400);
  EXPECT_EQ(chat_error("{" + kMsgs + R"(, "temperature": 1e39})").param, "temperature");
}

TEST(Protocol, RangesHoldForTheFloatTheEngineGets) {
  // 1e-50 lies in (0, 1] as a double but is 0 as the float the engine samples with:
  // top_p = 0 keeps no token, repetition_penalty = 0 divides by zero.
  ApiError e = chat_error("{" + kMsgs + R"(, "top_p": 1e-50})");
  EXPECT_EQ(e.param, "top_p");
  EXPECT_NE(e.message.find("top_p must be in (0, 1], got 0"), std::string::npos) << e.message;
  EXPECT_EQ(chat_error("{" + kMsgs + R"(, "repetition_penalty": 1e-50})").param, "repetition_penalty");
  EXPECT_EQ(completion_error(R"({"prompt": "a", "top_p": 4.9e-324})").param, "top_p");
  // Where 0 is allowed, a value that rounds to it is too.
  EXPECT_EQ(chat_ok("{" + kMsgs + R"(, "temperature": 1e-50})").params.temperature, 0.0f);
  EXPECT_EQ(chat_ok("{" + kMsgs + R"(, "min_p": 1e-50})").params.min_p, 0.0f);
  // Just above the bound as a double, on it as a float: accepted as the bound.
  EXPECT_EQ(chat_ok("{" + kMsgs + R"(, "top_p": 1.00000000001})").params.top_p, 1.0f);
}

TEST(Protocol, StopLimits) {
  EXPECT_EQ(chat_ok("{" + kMsgs + R"(, "stop": "end"})").params.stop, (std::vector<std::string>{"end"}));
  std::string many = "[";
  for (size_t i = 0; i <= kMaxStopStrings; ++i)
    many += std::string(i ? "," : "") + "\"s" + std::to_string(i) + "\"";
  many += "]";
  EXPECT_EQ(chat_error("{" + kMsgs + R"(, "stop": )" + many + "}").param, "stop");
  std::string long_stop(kMaxStopStringBytes + 1, 'a');
  EXPECT_EQ(chat_error("{" + kMsgs + R"(, "stop": ")" + long_stop + "\"}").param, "stop");
  EXPECT_EQ(chat_error("{" + kMsgs + R"(, "stop": [""]})").param, "stop");
  EXPECT_EQ(chat_error("{" + kMsgs + R"(, "stop": [1]})").param, "stop");
}

TEST(Protocol, ContextLength) {
  auto ok = check_context_length(100, 28, 128);
  ASSERT_TRUE(std::holds_alternative<int64_t>(ok));
  EXPECT_EQ(std::get<int64_t>(ok), 28);
  auto rest = check_context_length(100, std::nullopt, 128);
  EXPECT_EQ(std::get<int64_t>(rest), 28);  // default: the rest of the context
  auto over = check_context_length(100, 29, 128);
  ASSERT_TRUE(std::holds_alternative<ApiError>(over));
  EXPECT_EQ(std::get<ApiError>(over).http_status, 400);
  EXPECT_NE(std::get<ApiError>(over).message.find("This model's maximum context length is 128 tokens"),
            std::string::npos);
  EXPECT_TRUE(std::holds_alternative<ApiError>(check_context_length(128, std::nullopt, 128)));
  EXPECT_TRUE(std::holds_alternative<ApiError>(check_context_length(500, std::nullopt, 128)));
}

TEST(Protocol, TokenizeAndDetokenize) {
  auto t = parse_tokenize_request(R"({"prompt": "hello"})", limits());
  ASSERT_TRUE(std::holds_alternative<TokenizeRequest>(t));
  EXPECT_EQ(*std::get<TokenizeRequest>(t).prompt, "hello");
  EXPECT_TRUE(std::holds_alternative<ApiError>(parse_tokenize_request(R"({})", limits())));
  auto d = parse_detokenize_request(R"({"tokens": [1, 2]})", limits());
  ASSERT_TRUE(std::holds_alternative<DetokenizeRequest>(d));
  EXPECT_EQ(std::get<DetokenizeRequest>(d).tokens.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<ApiError>(parse_detokenize_request(R"({"tokens": [5000]})", limits())));
}

TEST(Protocol, ErrorShape) {
  nlohmann::json j = chat_error("{" + kMsgs + R"(, "top_k": -5})").to_json();
  ASSERT_TRUE(j.contains("error"));
  const nlohmann::json& e = j["error"];
  EXPECT_TRUE(e["message"].is_string());
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["param"], "top_k");
  EXPECT_TRUE(e.contains("code"));
}

}  // namespace
}  // namespace nanoserve::server

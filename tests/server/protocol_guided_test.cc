// The request fields of echo, prompt_logprobs, max_tokens 0 and the default
// max_tokens, and of vLLM's structured output (response_format.h), at the
// parser: what each becomes, and the 400 that names it.

#include <gtest/gtest.h>

#include <string>

#include "server/protocol.h"

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

Parsed<GenerateRequest> chat(const std::string& fields) {
  return parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}], )" + fields + "}", limits());
}
Parsed<GenerateRequest> completion(const std::string& fields) {
  return parse_completion_request(R"({"prompt": "hi", )" + fields + "}", limits());
}

GenerateRequest ok(const Parsed<GenerateRequest>& r) {
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << e->message;
  return std::holds_alternative<GenerateRequest>(r) ? std::get<GenerateRequest>(r) : GenerateRequest{};
}

std::string param_of(const Parsed<GenerateRequest>& r) {
  const auto* e = std::get_if<ApiError>(&r);
  EXPECT_NE(e, nullptr);
  return e != nullptr ? e->param : "";
}

TEST(ProtocolEcho, EchoWithLogprobsScoresThePrompt) {
  GenerateRequest r = ok(completion(R"("echo": true, "logprobs": 2, "max_tokens": 0)"));
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.params.prompt_logprobs, 2);
  EXPECT_FALSE(r.prompt_logprobs.has_value());  // not asked: no "prompt_logprobs" in the answer
  EXPECT_EQ(*r.max_tokens, 0);
  GenerateRequest both = ok(completion(R"("echo": true, "logprobs": 1, "prompt_logprobs": 4)"));
  EXPECT_EQ(both.params.prompt_logprobs, 4);
  EXPECT_EQ(*both.prompt_logprobs, 4);
  EXPECT_EQ(ok(completion(R"("echo": true)")).params.prompt_logprobs, -1);  // text only: no rows to score
  EXPECT_EQ(ok(chat(R"("prompt_logprobs": 0)")).params.prompt_logprobs, 0);
}

TEST(ProtocolEcho, MaxTokensZeroOnlyToScoreOrEcho) {
  EXPECT_EQ(param_of(completion(R"("max_tokens": 0)")), "max_tokens");
  EXPECT_EQ(param_of(chat(R"("max_tokens": 0, "prompt_logprobs": 1)")), "max_tokens");
  EXPECT_EQ(param_of(chat(R"("max_completion_tokens": 0)")), "max_completion_tokens");
  EXPECT_EQ(param_of(completion(R"("max_tokens": -4294967296, "echo": true)")), "max_tokens");
  ok(completion(R"("max_tokens": 0, "prompt_logprobs": 1)"));
  EXPECT_EQ(param_of(completion(R"("prompt_logprobs": 1, "stream": true)")), "prompt_logprobs");
  EXPECT_EQ(param_of(completion(R"("prompt_logprobs": 21)")), "prompt_logprobs");
  EXPECT_EQ(param_of(completion(R"("echo": 1)")), "echo");
}

TEST(ProtocolEcho, CompletionsDefaultTo16TokensChatToTheContext) {
  auto left = [](int64_t prompt, std::optional<int64_t> asked, Endpoint e) {
    auto r = check_context_length(prompt, asked, 128, e);
    return std::holds_alternative<int64_t>(r) ? std::get<int64_t>(r) : -1;
  };
  EXPECT_EQ(left(10, std::nullopt, Endpoint::kCompletion), 16);
  EXPECT_EQ(left(120, std::nullopt, Endpoint::kCompletion), 8);  // what the context leaves
  EXPECT_EQ(left(10, std::nullopt, Endpoint::kChat), 118);
  EXPECT_EQ(left(10, 40, Endpoint::kCompletion), 40);
  EXPECT_EQ(left(128, 0, Endpoint::kCompletion), 0);  // scoring a prompt that fills the context
  EXPECT_EQ(left(128, std::nullopt, Endpoint::kCompletion), -1);
}

TEST(ProtocolGuided, SchemasKeepTheirKeyOrder) {
  const std::string schema = R"({"type": "object", "properties": {"zeta": {}, "alpha": {}, "mid": {}}})";
  for (const std::string& fields :
       {R"("response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": )" + schema +
            "}}",
        R"("guided_json": )" + schema, R"("structured_outputs": {"json": )" + schema + "}",
        R"("guided_json": ")" +
            std::string(R"({\"properties\": {\"zeta\": {}, \"alpha\": {}, \"mid\": {}}})") + "\""}) {
    GenerateRequest r = ok(completion(fields));
    ASSERT_EQ(r.response_format.type, ResponseFormat::Type::kJsonSchema) << fields;
    std::vector<std::string> keys;
    for (const auto& [k, v] : r.response_format.schema["properties"].items()) keys.push_back(k);
    EXPECT_EQ(keys, (std::vector<std::string>{"zeta", "alpha", "mid"})) << fields;
  }
}

TEST(ProtocolGuided, EachFieldAsksForItsForm) {
  GenerateRequest re = ok(chat(R"("guided_regex": "a+b", "guided_decoding_backend": "auto")"));
  EXPECT_EQ(re.response_format.type, ResponseFormat::Type::kRegex);
  EXPECT_EQ(re.response_format.regex, "a+b");
  EXPECT_EQ(re.response_format.param, "guided_regex");
  GenerateRequest ch =
      ok(completion(R"("structured_outputs": {"choice": ["x", "y"], "disable_fallback": true})"));
  EXPECT_EQ(ch.response_format.type, ResponseFormat::Type::kChoice);
  EXPECT_EQ(ch.response_format.choices, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(ch.response_format.param, "structured_outputs.choice");
  EXPECT_EQ(ok(completion(R"("guided_json_object": true)")).response_format.type,
            ResponseFormat::Type::kJsonObject);
  EXPECT_TRUE(ok(completion(R"("guided_regex": "a")")).unknown_fields.empty());
}

TEST(ProtocolGuided, RefusalsNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("guided_grammar": "x")", "guided_grammar"},
      {R"("guided_whitespace_pattern": " ")", "guided_whitespace_pattern"},
      {R"("guided_decoding_backend": "outlines", "guided_regex": "a")", "guided_decoding_backend"},
      {R"("response_format": {"type": "json_object"}, "guided_regex": "a")", "guided_regex"},
      {R"("guided_choice": ["a"], "structured_outputs": {"regex": "a"})", "structured_outputs"},
      {R"("structured_outputs": {"grammar": "x"})", "structured_outputs.grammar"},
      {R"("structured_outputs": {"structural_tag": "x"})", "structured_outputs.structural_tag"},
      {R"("structured_outputs": {"json": {}, "regex": "a"})", "structured_outputs"},
      {R"("structured_outputs": {"disable_any_whitespace": true, "regex": "a"})",
       "structured_outputs.disable_any_whitespace"},
      {R"("structured_outputs": "json")", "structured_outputs"},
      {R"("guided_choice": "a")", "guided_choice"},
      {R"("guided_choice": ["a", ""])", "guided_choice"},
      {R"("guided_regex": "")", "guided_regex"},
      {R"("guided_json": "{not json")", "guided_json"},
      {R"("guided_json_object": "yes")", "guided_json_object"},
  };
  for (const auto& [fields, param] : cases) EXPECT_EQ(param_of(completion(fields)), param) << fields;
}

}  // namespace
}  // namespace nanoserve::server

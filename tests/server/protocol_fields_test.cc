#include "server/protocol_fields.h"

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

const std::string kChat = R"({"messages": [{"role": "user", "content": "hi"}])";
const std::string kCompletion = R"({"prompt": "hi")";

// The body `base` with `fields` added (a JSON fragment without braces).
Parsed<GenerateRequest> chat(const std::string& fields) {
  return parse_chat_request(kChat + (fields.empty() ? "" : ", " + fields) + "}", limits());
}
Parsed<GenerateRequest> completion(const std::string& fields) {
  return parse_completion_request(kCompletion + (fields.empty() ? "" : ", " + fields) + "}", limits());
}

GenerateRequest ok(const Parsed<GenerateRequest>& r) {
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << e->message;
  return std::holds_alternative<GenerateRequest>(r) ? std::get<GenerateRequest>(r) : GenerateRequest{};
}

ApiError error(const Parsed<GenerateRequest>& r) {
  EXPECT_TRUE(std::holds_alternative<ApiError>(r));
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

TEST(ProtocolFields, StopTokenIdsAreRead) {
  EXPECT_EQ(ok(chat(R"("stop_token_ids": [5, 999])")).params.stop_token_ids, (std::vector<int32_t>{5, 999}));
  EXPECT_TRUE(ok(completion(R"("stop_token_ids": [])")).params.stop_token_ids.empty());
  for (const char* bad :
       {R"("stop_token_ids": 5)", R"("stop_token_ids": [1000])", R"("stop_token_ids": [-1])",
        R"("stop_token_ids": ["5"])", R"("stop_token_ids": [1.5])",
        R"("stop_token_ids": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17])"}) {
    ApiError e = error(chat(bad));
    EXPECT_EQ(e.http_status, 400) << bad;
    EXPECT_EQ(e.param, "stop_token_ids") << bad;
  }
}

TEST(ProtocolFields, MinTokensIsReadAndBoundedByMaxTokens) {
  EXPECT_EQ(ok(chat(R"("min_tokens": 4, "max_tokens": 4)")).params.min_tokens, 4);
  EXPECT_EQ(ok(completion(R"("min_tokens": 9)")).params.min_tokens, 9) << "no max_tokens: checked later";
  for (const char* bad : {R"("min_tokens": 5, "max_tokens": 4)", R"("min_tokens": -1)",
                          R"("min_tokens": 2.5)", R"("min_tokens": "3")", R"("min_tokens": 4294967296)"}) {
    ApiError e = error(chat(bad));
    EXPECT_EQ(e.http_status, 400) << bad;
    EXPECT_EQ(e.param, "min_tokens") << bad;
  }
  EXPECT_NE(error(chat(R"("min_tokens": 5, "max_tokens": 4)")).message.find("min_tokens must be in [0, max_tokens (4)]"),
            std::string::npos);
}

TEST(ProtocolFields, LogitBiasIsReadCheckedAndClamped) {
  GenerateRequest r = ok(chat(R"("logit_bias": {"5": 2.5, "999": -1000, "7": 250})"));
  // nlohmann keeps object keys sorted: "5", "7", "999".
  ASSERT_EQ(r.params.logit_bias.size(), 3u);
  EXPECT_EQ(r.params.logit_bias[0], (std::pair<int32_t, float>{5, 2.5f}));
  EXPECT_EQ(r.params.logit_bias[1], (std::pair<int32_t, float>{7, 100.0f})) << "clamped to 100";
  EXPECT_EQ(r.params.logit_bias[2], (std::pair<int32_t, float>{999, -100.0f})) << "clamped to -100";
  EXPECT_TRUE(ok(chat(R"("logit_bias": {})")).params.logit_bias.empty());
  EXPECT_TRUE(ok(chat(R"("logit_bias": null)")).params.logit_bias.empty());
  std::string three_hundred, three_hundred_one;
  for (int i = 0; i < 301; ++i) {
    std::string entry = (i ? ", \"" : "\"") + std::to_string(i) + "\": 1";
    if (i < 300) three_hundred += entry;
    three_hundred_one += entry;
  }
  EXPECT_EQ(ok(completion(R"("logit_bias": {)" + three_hundred + "}")).params.logit_bias.size(), 300u);
  for (const std::string& bad : std::vector<std::string>{
           R"("logit_bias": [1])", R"("logit_bias": {"1000": 1})", R"("logit_bias": {"-1": 1})",
           R"("logit_bias": {"a": 1})", R"("logit_bias": {"": 1})", R"("logit_bias": {"1.0": 1})",
           R"("logit_bias": {"5": "1"})", R"("logit_bias": {"5": 1, "05": 2})",
           R"("logit_bias": {"99999999999": 1})", R"("logit_bias": {)" + three_hundred_one + "}"}) {
    ApiError e = error(chat(bad));
    EXPECT_EQ(e.http_status, 400) << bad;
    EXPECT_EQ(e.param, "logit_bias") << bad;
  }
}

TEST(ProtocolFields, BestOfIsAtLeastNWithinMaxNumSeqsAndNotStreamed) {
  GenerateRequest r = ok(completion(R"("best_of": 3, "n": 2)"));
  EXPECT_EQ(r.best_of, 3);
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(ok(chat("")).best_of, 0) << "not given";
  EXPECT_EQ(ok(chat(R"("best_of": 1, "stream": true)")).best_of, 1) << "best_of 1 streams: nothing to pick";
  for (const char* bad : {R"("best_of": 1, "n": 2)", R"("best_of": 0)", R"("best_of": 9)",
                          R"("best_of": "2")", R"("best_of": 2, "stream": true)"}) {
    ApiError e = error(completion(bad));
    EXPECT_EQ(e.http_status, 400) << bad;
    EXPECT_EQ(e.param, "best_of") << bad;
  }
  EXPECT_NE(error(completion(R"("best_of": 2, "stream": true)")).message.find("stream"), std::string::npos);
}

TEST(ProtocolFields, CompletionsRefuseToolFieldsByNameUnlessTheyAskForNothing) {
  const std::pair<const char*, const char*> refused[] = {
      {R"("tools": [{"type": "function", "function": {"name": "f"}}])", "tools"},
      {R"("tools": {})", "tools"},
      {R"("tool_choice": "auto")", "tool_choice"},
      {R"("tool_choice": {"type": "function", "function": {"name": "f"}})", "tool_choice"},
      {R"("functions": [{"name": "f"}])", "functions"},
      {R"("function_call": "auto")", "function_call"},
      {R"("parallel_tool_calls": true)", "parallel_tool_calls"},
  };
  for (const auto& [body, name] : refused) {
    ApiError e = error(completion(body));
    EXPECT_EQ(e.http_status, 400) << body;
    EXPECT_EQ(e.param, name) << body;
    EXPECT_NE(e.message.find("not supported"), std::string::npos) << e.message;
  }
  GenerateRequest r = ok(completion(R"("tools": [], "tool_choice": "none", "functions": [],
                                        "function_call": "none", "parallel_tool_calls": false)"));
  EXPECT_TRUE(r.unknown_fields.empty()) << "refused fields are known ones";
}

TEST(ProtocolFields, ChatReadsToolsAndRefusesBadShapesByName) {
  GenerateRequest r = ok(chat(R"("tools": [{"type": "function", "function": {"name": "f", "parameters":
      {"type": "object", "properties": {"z": {}, "a": {}}}}}], "tool_choice": "required", "parallel_tool_calls": false)"));
  ASSERT_EQ(r.tools.specs.size(), 1u);
  EXPECT_EQ(r.tools.choice, ToolRequest::Choice::kRequired);
  EXPECT_FALSE(r.tools.parallel);
  ASSERT_TRUE(r.chat_template.tools.has_value());
  // The template sees the tools in the order sent.
  EXPECT_EQ((*r.chat_template.tools)[0]["function"]["parameters"]["properties"].begin().key(), "z");
  GenerateRequest none =
      ok(chat(R"("tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none")"));
  EXPECT_FALSE(none.tools.calls());
  EXPECT_TRUE(none.chat_template.tools.has_value());  // the template still sees them
  GenerateRequest legacy = ok(chat(R"("functions": [{"name": "f"}], "function_call": {"name": "f"})"));
  EXPECT_EQ(legacy.tools.choice, ToolRequest::Choice::kNamed);
  EXPECT_TRUE(legacy.tools.legacy);
  EXPECT_EQ((*legacy.chat_template.tools)[0]["type"], "function");
  const std::pair<const char*, const char*> refused[] = {
      {R"("tools": {})", "tools"},
      {R"("tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}])",
       "tools"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "parameters": []}}])",
       "tools[0].function.parameters"},
      {R"("tool_choice": "auto")", "tool_choice"},
      {R"("tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function"})",
       "tool_choice"},
      {R"("functions": [{"name": "f"}], "function_call": "required")", "function_call"},
      {R"("tools": [], "functions": [])", "functions"},
  };
  for (const auto& [body, name] : refused) {
    ApiError e = error(chat(body));
    EXPECT_EQ(e.http_status, 400) << body;
    EXPECT_EQ(e.param, name) << body << ": " << e.message;
  }
}

TEST(ProtocolFields, UnknownTopLevelFieldsAreIgnoredAndNamed) {
  GenerateRequest r = ok(chat(R"("user": "u1", "zeta": 1, "alpha": {"x": [1]}, "store": true)"));
  EXPECT_EQ(r.unknown_fields, (std::vector<std::string>{"alpha", "store", "zeta"}));
  // Each endpoint's own fields are known to it only: echo belongs to completions.
  EXPECT_EQ(ok(chat(R"("echo": false)")).unknown_fields, (std::vector<std::string>{"echo"}));
  EXPECT_TRUE(ok(completion(R"("echo": false, "suffix": null, "best_of": 1)")).unknown_fields.empty());
  EXPECT_EQ(ok(completion(R"("top_logprobs": 2)")).unknown_fields,
            (std::vector<std::string>{"top_logprobs"}));
  // Fields read elsewhere are not counted as unknown.
  EXPECT_TRUE(ok(chat(R"("max_completion_tokens": 3, "stream_options": null, "min_p": 0.1, "seed": 1)"))
                  .unknown_fields.empty());
}

}  // namespace
}  // namespace nanoserve::server

#include "server/tool_parser.h"

#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/reasoning_parser.h"

namespace nanoserve::server {
namespace {

struct Result {
  std::string content;
  std::vector<ToolCall> calls;
  std::vector<std::string> streamed_args;  // per call index, the argument fragments joined
  std::vector<std::string> streamed_names;
};

// Feeds `text` in pieces of the given sizes (cycled); 0 sizes: all at once.
Result parse(ToolFormat f, const std::string& text, const std::vector<size_t>& sizes = {}) {
  int n = 0;
  ToolCallParser p(f, [&n] { return "id" + std::to_string(n++); });
  ParsedText out;
  if (sizes.empty()) {
    p.feed(text, &out);
  } else {
    size_t pos = 0, i = 0;
    while (pos < text.size()) {
      const size_t k = std::min(sizes[i++ % sizes.size()], text.size() - pos);
      p.feed(std::string_view(text).substr(pos, k), &out);
      pos += k;
    }
  }
  p.finish(&out);
  Result r{out.content, p.calls(), {}, {}};
  for (const ToolCallDelta& d : out.calls) {
    if (d.index >= static_cast<int>(r.streamed_args.size())) {
      r.streamed_args.resize(d.index + 1);
      r.streamed_names.resize(d.index + 1);
    }
    if (d.first) r.streamed_names[d.index] = d.name;
    r.streamed_args[d.index] += d.arguments;
  }
  return r;
}

// Every way of streaming gives what the whole text gives: one byte at a time, uneven pieces.
void expect_stream_invariant(ToolFormat f, const std::string& text) {
  const Result whole = parse(f, text);
  for (const auto& sizes : std::vector<std::vector<size_t>>{{1}, {2, 3}, {7, 1, 4}, {13}}) {
    const Result s = parse(f, text, sizes);
    EXPECT_EQ(s.content, whole.content) << text;
    ASSERT_EQ(s.calls.size(), whole.calls.size()) << text;
    ASSERT_EQ(s.streamed_args.size(), whole.calls.size()) << text;
    for (size_t i = 0; i < s.calls.size(); ++i) {
      EXPECT_EQ(s.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(s.calls[i].arguments, whole.calls[i].arguments);
      EXPECT_EQ(s.streamed_names[i], whole.calls[i].name);
      EXPECT_EQ(s.streamed_args[i], whole.calls[i].arguments) << "joined fragments differ from the call";
    }
  }
}

TEST(ToolParser, HermesCallsBetweenTextNoMarkupInContent) {
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
      "\"days\": 3}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": [1, {\"b\": "
      "\"}\"}]}}\n</tool_call>";
  const Result r = parse(ToolFormat::kHermes, text);
  EXPECT_EQ(r.content, "Let me check.\n");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(nlohmann::json::parse(r.calls[0].arguments), nlohmann::json({{"city", "Paris"}, {"days", 3}}));
  EXPECT_EQ(r.calls[1].name, "add");
  EXPECT_EQ(r.calls[1].arguments, "{\"a\": [1, {\"b\": \"}\"}]}");
  expect_stream_invariant(ToolFormat::kHermes, text);
}

TEST(ToolParser, HermesTextThatOnlyLooksLikeAMarkerIsContent) {
  for (const std::string text :
       {"a < b and <tool> x", "ends with <tool_ca", "<tool_call>not json</tool_call> ok"}) {
    const Result r = parse(ToolFormat::kHermes, text);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text);
    expect_stream_invariant(ToolFormat::kHermes, text);
  }
}

TEST(ToolParser, HermesArgumentsGivenAsAStringAreDecoded) {
  const std::string text = "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>";
  const Result r = parse(ToolFormat::kHermes, text);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{\"x\": 1}");
  EXPECT_EQ(r.content, "");
  expect_stream_invariant(ToolFormat::kHermes, text);
}

TEST(ToolParser, HermesCallCutByMaxTokensKeepsWhatWasStreamed) {
  const Result r = parse(ToolFormat::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1");
  EXPECT_TRUE(r.calls.empty());  // not complete: not a call in the final message
  ASSERT_EQ(r.streamed_names.size(), 1u);
  EXPECT_EQ(r.streamed_args[0], "{\"a\": 1");
  EXPECT_EQ(r.content, "");
}

TEST(ToolParser, Llama3JsonWithAndWithoutPythonTag) {
  for (const std::string text :
       {"{\"name\": \"f\", \"parameters\": {\"q\": \"x y\"}}",
        "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"q\": \"x y\"}}",
        "  {\"name\": \"f\", \"parameters\": {\"q\": \"x y\"}}; {\"name\": \"g\", \"parameters\": {}}"}) {
    const Result r = parse(ToolFormat::kLlama3Json, text);
    ASSERT_GE(r.calls.size(), 1u) << text;
    EXPECT_EQ(r.calls[0].name, "f");
    EXPECT_EQ(r.calls[0].arguments, "{\"q\": \"x y\"}");
    EXPECT_EQ(r.content, "");
    expect_stream_invariant(ToolFormat::kLlama3Json, text);
  }
  const Result two =
      parse(ToolFormat::kLlama3Json,
            "{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"parameters\": {\"a\": 1}}");
  ASSERT_EQ(two.calls.size(), 2u);
  EXPECT_EQ(two.calls[1].name, "g");
}

TEST(ToolParser, Llama3JsonPlainTextAndObjectsWithoutNameAreContent) {
  for (const std::string text : {"Hello {\"name\": \"f\"}", "{\"answer\": 42}", "  \n"}) {
    const Result r = parse(ToolFormat::kLlama3Json, text);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text);
    expect_stream_invariant(ToolFormat::kLlama3Json, text);
  }
}

TEST(ToolParser, MistralList) {
  const std::string text =
      "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": \"[x]\"}}, {\"name\": \"g\", \"arguments\": "
      "{}}]";
  const Result r = parse(ToolFormat::kMistral, text);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].arguments, "{\"a\": \"[x]\"}");
  EXPECT_EQ(r.calls[1].name, "g");
  EXPECT_EQ(r.content, "");
  expect_stream_invariant(ToolFormat::kMistral, text);
  const Result plain = parse(ToolFormat::kMistral, "no calls [TOOL");
  EXPECT_EQ(plain.content, "no calls [TOOL");
}

TEST(ToolParser, FormatFromTemplateAndName) {
  EXPECT_EQ(tool_format_of_template("{{- '<tool_call>\\n' }}"), ToolFormat::kHermes);
  EXPECT_EQ(tool_format_of_template("{{- '<|python_tag|>' }}"), ToolFormat::kLlama3Json);
  EXPECT_EQ(tool_format_of_template("{{- '[TOOL_CALLS] ' }}"), ToolFormat::kMistral);
  EXPECT_EQ(tool_format_of_template("{{ messages }}"), ToolFormat::kNone);
  EXPECT_EQ(tool_format_named("qwen"), ToolFormat::kHermes);
  EXPECT_FALSE(tool_format_named("nope").has_value());
}

void split_reasoning(std::string_view tail, const std::string& text, size_t piece, std::string* r,
                     std::string* c) {
  ReasoningParser p(tail);
  for (size_t i = 0; i < text.size(); i += piece) p.feed(std::string_view(text).substr(i, piece), r, c);
  p.finish(r, c);
}

TEST(ReasoningParser, ThinkTagsSplitAlikeStreamedOrNot) {
  struct Case {
    std::string tail, text, reasoning, content;
  };
  const std::vector<Case> cases = {
      {"<|im_start|>assistant\n", "<think>\nstep 1</think>\n\nThe answer.", "\nstep 1", "The answer."},
      {"<|im_start|>assistant\n<think>\n", "step 1\n</think>\n\nAnswer", "step 1\n", "Answer"},
      {"<|im_start|>assistant\n", "No thinking here <think>", "", "No thinking here <think>"},
      {"assistant\n<think>\n", "cut off in the middle of a thou", "cut off in the middle of a thou", ""},
      {"assistant\n", "<think>a</thi", "a</thi", ""},
  };
  for (const Case& k : cases) {
    for (size_t piece : {size_t{1}, size_t{3}, size_t{1000}}) {
      std::string r, c;
      split_reasoning(k.tail, k.text, piece, &r, &c);
      EXPECT_EQ(r, k.reasoning) << k.text << " piece " << piece;
      EXPECT_EQ(c, k.content) << k.text << " piece " << piece;
    }
  }
}

}  // namespace
}  // namespace nanoserve::server

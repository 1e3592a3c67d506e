// The per-request cost of tool calling on the host, apart from the forward:
// parsing a chat body with 4 tools, rendering Qwen2.5's tool template with
// them, compiling the tools' call grammar (once per tool set: then cached),
// and parsing a generated call out of the text, streamed in 4-byte pieces.
//
// Usage: build/tool_calls_bench [--benchmark_filter=...]

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "server/protocol.h"
#include "server/tool_parser.h"
#include "structured/tool_grammar.h"
#include "template/chat_template.h"

#ifndef NS_SOURCE_DIR
#define NS_SOURCE_DIR "."
#endif

namespace nanoserve {
namespace {

const char* kTools = R"([
 {"type": "function", "function": {"name": "get_weather", "description": "The weather of a city", "parameters":
  {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}, "days": {"type": "integer",
   "minimum": 1, "maximum": 7}, "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "days"]}}},
 {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties":
  {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}}},
 {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties":
  {"query": {"type": "string"}, "filters": {"type": "array", "items": {"type": "object", "properties":
  {"field": {"enum": ["title", "body"]}, "value": {"type": "string"}}, "required": ["field", "value"]}}},
  "required": ["query"]}}},
 {"type": "function", "function": {"name": "save_note", "parameters": {"type": "object", "properties":
  {"title": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["title"]}}}
])";

std::string body() {
  return std::string(R"({"model": "m", "messages": [{"role": "system", "content": "Use tools."},
    {"role": "user", "content": "What is the weather in Paris for 3 days?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 3}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}], "tool_choice": "required", "tools": )") +
         kTools + "}";
}

void BM_ParseChatRequestWithTools(benchmark::State& state) {
  const std::string b = body();
  server::ProtocolLimits limits;
  limits.served_model_name = "m";
  for (auto _ : state) benchmark::DoNotOptimize(server::parse_chat_request(b, limits));
}
BENCHMARK(BM_ParseChatRequestWithTools)->Unit(benchmark::kMicrosecond);

void BM_RenderQwen25ToolTemplate(benchmark::State& state) {
  std::ifstream f(std::string(NS_SOURCE_DIR) + "/tests/fixtures/chat_templates/qwen25_tools.jinja");
  std::stringstream ss;
  ss << f.rdbuf();
  auto t = ChatTemplate::parse(ss.str());
  if (!t.ok()) return state.SkipWithError(t.status().message().c_str());
  server::ProtocolLimits limits;
  limits.served_model_name = "m";
  auto parsed = server::parse_chat_request(body(), limits);
  const auto& r = std::get<server::GenerateRequest>(parsed);
  ChatTemplateInputs in;
  in.tools = &*r.chat_template.tools;
  for (auto _ : state) benchmark::DoNotOptimize(t->render_pieces(*r.chat_template.messages, in));
}
BENCHMARK(BM_RenderQwen25ToolTemplate)->Unit(benchmark::kMicrosecond);

void BM_CompileToolCallGrammar(benchmark::State& state) {
  std::vector<structured::ToolSchema> schemas;
  for (const auto& t : nlohmann::json::parse(kTools))
    schemas.push_back({t["function"]["name"], t["function"]["parameters"]});
  for (auto _ : state)
    benchmark::DoNotOptimize(structured::tool_call_grammar(schemas, "arguments", false, true));
}
BENCHMARK(BM_CompileToolCallGrammar)->Unit(benchmark::kMicrosecond);

void BM_ParseStreamedHermesCall(benchmark::State& state) {
  const std::string text =
      "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"weather in Paris next week\", "
      "\"filters\": [{\"field\": \"title\", \"value\": \"forecast\"}]}}\n</tool_call>";
  for (auto _ : state) {
    server::ToolCallParser p(server::ToolFormat::kHermes, [] { return std::string("call_x"); });
    server::ParsedText out;
    for (size_t i = 0; i < text.size(); i += 4) p.feed(std::string_view(text).substr(i, 4), &out);
    p.finish(&out);
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK(BM_ParseStreamedHermesCall)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace nanoserve

BENCHMARK_MAIN();

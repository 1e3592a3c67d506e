#pragma once
// The tool-calling fields of a chat request (OpenAI): tools / functions,
// tool_choice / function_call, parallel_tool_calls, and the tool parts of
// messages (an assistant's tool_calls, a tool message's tool_call_id). They
// are checked here and handed to the chat template as transformers passes
// them; docs/server.md lists what each accepts.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace nanoserve::server {

inline constexpr size_t kMaxTools = 128;

struct ToolSpec {
  std::string name;
  nlohmann::json parameters;  // the JSON schema of the arguments ({} when not given: any object)
};

struct ToolRequest {
  enum class Choice { kNone, kAuto, kRequired, kNamed };
  std::optional<nlohmann::ordered_json> tools;  // for the template: [{"type": "function", "function": {...}}]
  std::vector<ToolSpec> specs;
  Choice choice = Choice::kNone;
  std::string named;     // kNamed
  bool parallel = true;  // parallel_tool_calls
  bool legacy = false;   // sent as functions / function_call
  bool calls() const { return choice != Choice::kNone && !specs.empty(); }
  // The tools a call may name: all of them, or the named one.
  std::vector<ToolSpec> callable() const;
};

// Reads tools, functions, tool_choice, function_call and parallel_tool_calls from `body`
// (`ordered_body`: the same body with its key order, for what the template sees).
std::optional<ApiError> read_tools(const nlohmann::json& body, const nlohmann::ordered_json& ordered_body,
                                   ToolRequest* out);

// One message's tool parts, checked and converted for the template: an assistant's tool_calls
// (arguments given as a JSON string become the object, as templates expect), a tool message's
// tool_call_id and name. `param` is "messages[i]".
std::optional<ApiError> read_message_tool_parts(const nlohmann::json& message, const std::string& param,
                                                nlohmann::ordered_json* out);

}  // namespace nanoserve::server

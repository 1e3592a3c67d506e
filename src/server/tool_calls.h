#pragma once
// From a chat request's tools to what the engine and the response need: the
// family format the calls are parsed in, and the token constraint that keeps
// every call valid against its tool's schema (docs/server.md, "Tool calls").
//
//   tool_choice required / named   the output is calls only, forced from the first token
//   tool_choice auto               free text; once the model opens a call, the rest of it is
//                                  constrained (needs --enable-auto-tool-choice, as in vLLM)
//   tool_choice none               the tools reach the template; the output is text

#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "engine/token_constraint.h"
#include "server/api_error.h"
#include "server/model_codec.h"
#include "server/tool_parser.h"
#include "server/tool_protocol.h"
#include "structured/constraint_cache.h"

namespace nanoserve::server {

struct ToolOptions {
  std::optional<ToolFormat> parser;  // --tool-call-parser; unset: from the chat template
  bool enable_auto_tool_choice = false;
};

struct ToolSetup {
  ToolFormat format = ToolFormat::kNone;  // kNone: no calls are parsed
  std::shared_ptr<const TokenConstraintFactory> constraint;
  bool keep_special_text = false;  // the format's marker is a special token: keep its text
};

// `template_source`: the template the request renders with (its own, or the model's).
std::variant<ToolSetup, ApiError> setup_tools(const ToolRequest& tools, const ToolOptions& options,
                                              const std::string& template_source, const ModelCodec& codec,
                                              structured::ConstraintCache& cache);

}  // namespace nanoserve::server

#pragma once
// The grammar of a tool call: {"name": <a tool's name>, "<args key>": <that tool's parameters>},
// name first, one alternative per tool (an anyOf decided by the name's bytes), or a list of such
// calls. Each tool's parameters schema is compiled on its own (its $refs resolve within it) and
// the graphs are joined over the shared fixed nodes.

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "structured/grammar.h"

namespace nanoserve::structured {

struct ToolSchema {
  std::string name;
  nlohmann::json parameters;  // a JSON schema; one without "type" is taken as an object
};

// At most this many tools in one constrained call: the automaton follows at most 16 alternatives.
inline constexpr size_t kMaxConstrainedTools = 16;

// `array`: a JSON list of calls, at least one, at most one unless `parallel`.
// The error names the tool (and the schema keyword, as compile_schema does).
StatusOr<Grammar> tool_call_grammar(const std::vector<ToolSchema>& tools, std::string_view args_key,
                                    bool array, bool parallel);

}  // namespace nanoserve::structured

#include "server/tool_calls.h"

#include <utility>
#include <vector>

#include "structured/tool_call_constraint.h"
#include "structured/tool_grammar.h"

namespace nanoserve::server {

namespace {

std::vector<int32_t> tokens_of(const ModelCodec& codec, const std::string& text) {
  if (text.empty()) return {};
  auto ids = codec.encode(text, /*add_special_tokens=*/false);
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

}  // namespace

std::variant<ToolSetup, ApiError> setup_tools(const ToolRequest& t, const ToolOptions& options,
                                              const std::string& template_source, const ModelCodec& codec,
                                              structured::ConstraintCache& cache) {
  ToolSetup out;
  if (!t.calls()) return out;
  const bool automatic = t.choice == ToolRequest::Choice::kAuto;
  const std::string choice_param = t.legacy ? "function_call" : "tool_choice";
  if (automatic && !options.enable_auto_tool_choice) {
    return bad_request(
        "\"auto\" tool choice needs the server started with --enable-auto-tool-choice; give "
        "'" +
            choice_param + "': \"required\", a named function, or \"none\".",
        choice_param);
  }
  // The template's own format, else the one named at start-up, else Hermes (the most common).
  ToolFormat f = options.parser.value_or(tool_format_of_template(template_source));
  if (f == ToolFormat::kNone) f = ToolFormat::kHermes;
  out.format = f;

  std::vector<structured::ToolSchema> schemas;
  for (const ToolSpec& s : t.callable()) schemas.push_back({s.name, s.parameters});
  const std::string args_key = f == ToolFormat::kLlama3Json ? "parameters" : "arguments";
  const bool array = f == ToolFormat::kMistral;
  std::string key = "tools\n" + std::string(tool_format_name(f)) + (t.parallel ? "\nparallel" : "\nsingle");
  for (const auto& s : schemas) key += "\n" + s.name + "\n" + s.parameters.dump();
  auto json =
      cache.get(key, [&] { return structured::tool_call_grammar(schemas, args_key, array, t.parallel); });
  if (!json.ok()) {
    const std::string list = t.legacy ? "functions" : "tools";
    return bad_request("'" + list + "': " + json.status().message() + ".", list);
  }

  structured::CallFraming fr;
  fr.automatic = automatic;
  switch (f) {
    case ToolFormat::kHermes:
      fr.open = tokens_of(codec, "<tool_call>\n");
      fr.close = tokens_of(codec, "\n</tool_call>");
      fr.next = tokens_of(codec, "\n<tool_call>\n");
      fr.repeat = t.parallel;
      fr.trigger = "<tool_call>";
      break;
    case ToolFormat::kLlama3Json:
      fr.next = tokens_of(codec, "; ");
      fr.repeat = t.parallel;
      fr.trigger = "<|python_tag|>";
      fr.brace_opens = true;
      out.keep_special_text = true;
      break;
    case ToolFormat::kMistral:
      fr.open = tokens_of(codec, "[TOOL_CALLS]");
      fr.repeat = false;  // the list holds every call
      fr.trigger = "[TOOL_CALLS]";
      out.keep_special_text = true;
      break;
    case ToolFormat::kNone: break;
  }
  out.constraint = std::make_shared<structured::ToolCallConstraintFactory>(*json, std::move(fr));
  return out;
}

}  // namespace nanoserve::server

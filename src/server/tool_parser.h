#pragma once
// Tool calls out of generated text, per model family format, incrementally:
// the same code serves streaming (deltas as the text grows) and non-streaming
// (one feed, then finish), so both give the same calls, byte for byte.
//
//   kHermes      Hermes / Qwen2.5 / Qwen3:  <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
//   kLlama3Json  Llama-3.1 / 3.2:           [<|python_tag|>]{"name": ..., "parameters": {...}}[; {...}]
//                                           at the start of the output
//   kMistral     Mistral:                   [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
//
// The markup never reaches content: text that may still become a marker is
// held back until it cannot. A call's arguments are streamed as the raw JSON
// text the model generated (a string-valued "arguments" is decoded first), so
// the fragments joined are exactly the final arguments.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nanoserve::server {

enum class ToolFormat { kNone, kHermes, kLlama3Json, kMistral };

// "hermes" | "llama3_json" | "mistral" (vLLM's names; "qwen" is hermes, "llama3" llama3_json).
std::optional<ToolFormat> tool_format_named(std::string_view name);
const char* tool_format_name(ToolFormat f);
// The format a chat template's source speaks, kNone when it shows none.
ToolFormat tool_format_of_template(std::string_view template_source);

// The text that opens a call in `format` ("<tool_call>", "<|python_tag|>", "[TOOL_CALLS]").
std::string_view tool_call_marker(ToolFormat format);

struct ToolCallDelta {
  int index = 0;
  std::string id;    // first delta of a call only
  std::string name;  // first delta of a call only
  std::string arguments;
  bool first = false;
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
};

struct ParsedText {
  std::string content;
  std::vector<ToolCallDelta> calls;
};

class ToolCallParser {
 public:
  using IdFn = std::function<std::string()>;
  ToolCallParser(ToolFormat format, IdFn new_id) : format_(format), new_id_(std::move(new_id)) {}

  // `text` is what the output grew by. Appends what can be told now.
  void feed(std::string_view text, ParsedText* out);
  // End of the output: what was held back goes out (an unfinished marker as content).
  void finish(ParsedText* out);

  // The calls whose JSON completed, in order.
  const std::vector<ToolCall>& calls() const { return done_; }

 private:
  enum class Mode { kStart, kText, kCall, kAfterCall, kAfterClose, kPlain };
  struct Open {
    std::string text;  // the call's JSON text so far
    std::string id;
    bool name_sent = false;
    size_t args_sent = 0;
    std::string content_if_invalid;  // what to give back as content if this was not a call
  };

  void run(ParsedText* out, bool final);
  bool step_call(ParsedText* out, bool final);  // false: needs more text
  void emit_content(std::string_view s, ParsedText* out) { out->content.append(s); }

  ToolFormat format_;
  IdFn new_id_;
  Mode mode_ = Mode::kStart;
  std::string buf_;  // text not yet decided
  std::optional<Open> open_;
  std::vector<ToolCall> done_;
  bool in_array_ = false;  // mistral: inside [ ... ]
};

// Where a JSON value starting at s[pos] (whitespace skipped) ends: one past its last byte.
// npos: incomplete; kInvalidJson: it cannot be JSON.
inline constexpr size_t kInvalidJson = static_cast<size_t>(-2);
size_t scan_json_value(std::string_view s, size_t pos);

}  // namespace nanoserve::server

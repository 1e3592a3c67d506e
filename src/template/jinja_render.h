#pragma once
// A compiled Jinja template and its renderer: the subset chat templates use,
// rendering as jinja2 does under transformers' settings (docs/chat_template.md).

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "template/jinja_ast.h"
#include "template/jinja_lexer.h"
#include "template/jinja_value.h"

namespace nanoserve::jinja {

// Templates longer than this are refused before lexing.
inline constexpr size_t kMaxTemplateBytes = size_t{1} << 20;

// What one render may use; exceeding any is an error that names the limit.
struct RenderLimits {
  size_t max_output_bytes = size_t{8} << 20;  // the rendered text, and any string built on the way
  uint64_t max_steps = 5'000'000;             // expressions evaluated plus statements run
  double max_seconds = 2.0;                   // wall clock, checked every 4096 steps
  int max_call_depth = 32;                    // macro calls inside macro calls
  int max_nesting = 1000;                     // statements and expressions being evaluated at once
};

using Variables = std::vector<std::pair<std::string, Value>>;

class Template {
 public:
  static StatusOr<Template> compile(std::string_view source);

  // The text, with the byte ranges that came from caller strings. Errors name the line and
  // column in the template. `now`, when given, is the time strftime_now formats, in UTC (the
  // conformance suite fixes it); otherwise strftime_now reads the clock, in local time.
  StatusOr<Str> render(const Variables& vars, const RenderLimits& limits = {},
                       std::optional<std::time_t> now = std::nullopt) const;
  // Every name the template reads as a variable (sorted, no duplicates).
  std::vector<std::string> names() const;

 private:
  std::shared_ptr<const Lexed> lexed_;  // the normalised source, for error positions
  std::shared_ptr<const Body> body_;
};

}  // namespace nanoserve::jinja

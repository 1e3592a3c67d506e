#include "template/chat_template.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/check.h"

namespace nanoserve {

namespace {

// Variables the caller's chat_template_kwargs cannot set.
constexpr std::string_view kReserved[] = {"messages",
                                          "tools",
                                          "documents",
                                          "add_generation_prompt",
                                          "bos_token",
                                          "eos_token",
                                          "raise_exception",
                                          "strftime_now",
                                          "range",
                                          "namespace",
                                          "dict",
                                          "loop"};

// End-of-turn tokens in the families we serve, in the order they are looked for.

std::vector<PromptPiece> to_pieces(const jinja::Str& s) {
  std::vector<PromptPiece> out;
  auto add = [&](PromptPiece::Source source, size_t b, size_t e) {
    if (e <= b) return;
    if (!out.empty() && out.back().source == source) {
      out.back().text.append(s.text, b, e - b);
    } else {
      out.push_back({source, s.text.substr(b, e - b)});
    }
  };
  size_t at = 0;
  for (auto [b, e] : s.caller) {
    add(PromptPiece::Source::kTemplate, at, b);
    add(PromptPiece::Source::kCaller, b, e);
    at = e;
  }
  add(PromptPiece::Source::kTemplate, at, s.text.size());
  return out;
}

// Inline template text as vLLM takes it: \n, \t, \r, \\ and quotes written as escapes are decoded.
std::string decode_escapes(std::string_view s) {
  std::string out;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '\\' && k + 1 < s.size()) {
      char e = s[k + 1];
      const char* rep = e == 'n'    ? "\n"
                        : e == 't'  ? "\t"
                        : e == 'r'  ? "\r"
                        : e == '\\' ? "\\"
                        : e == '\'' ? "'"
                        : e == '"'  ? "\""
                                    : nullptr;
      if (rep != nullptr) {
        out += rep;
        ++k;
        continue;
      }
    }
    out += s[k];
  }
  return out;
}

}  // namespace

ChatSpecialTokens ChatSpecialTokens::of(const Tokenizer& tokenizer) {
  ChatSpecialTokens t;
  if (tokenizer.bos_id() >= 0) t.bos_token = tokenizer.token_to_piece(tokenizer.bos_id());
  if (tokenizer.eos_id() >= 0) t.eos_token = tokenizer.token_to_piece(tokenizer.eos_id());
  return t;
}

StatusOr<ChatTemplate> ChatTemplate::parse(std::string_view src, ChatSpecialTokens specials) {
  auto compiled = jinja::Template::compile(src);
  if (!compiled.ok()) return compiled.status();
  ChatTemplate t;
  t.compiled_ = std::move(*compiled);
  t.source_ = std::string(src);
  t.specials_ = std::move(specials);
  t.names_ = t.compiled_.names();
  t.end_of_turn_ = std::string(chat_end_of_turn(src));
  return t;
}

ChatTemplate ChatTemplate::chatml() {
  auto t = parse(
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% "
      "endif %}");
  NS_CHECK(t.ok()) << t.status().to_string();
  return std::move(*t);
}

StatusOr<ChatTemplate> ChatTemplate::of_model(const Tokenizer& tokenizer) {
  if (tokenizer.chat_template().empty()) {
    return failed_precondition(
        "the model has no chat template (tokenizer.chat_template); give one with --chat-template FILE or in "
        "the request's 'chat_template' field");
  }
  return parse(tokenizer.chat_template(), ChatSpecialTokens::of(tokenizer));
}

StatusOr<ChatTemplate> ChatTemplate::of_model_or_override(const Tokenizer& tokenizer,
                                                          const std::string& override) {
  if (override.empty()) return of_model(tokenizer);
  std::ifstream f(override, std::ios::binary);
  std::string text;
  if (f) {
    std::ostringstream ss;
    ss << f.rdbuf();
    text = ss.str();
  } else if (override.find_first_of("{}\n") == std::string::npos) {
    return not_found("--chat-template: '" + override + "' looks like a file path, but it cannot be opened");
  } else {
    text = decode_escapes(override);
  }
  auto t = parse(text, ChatSpecialTokens::of(tokenizer));
  if (!t.ok()) return Status(t.status().code(), "--chat-template: " + t.status().message());
  return t;
}

nlohmann::ordered_json ChatTemplate::messages_json(std::span<const ChatMessage> messages) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) out.push_back({{"role", m.role}, {"content", m.content}});
  return out;
}

StatusOr<std::vector<PromptPiece>> ChatTemplate::render_pieces(const nlohmann::ordered_json& messages,
                                                               const ChatTemplateInputs& in) const {
  jinja::Variables vars;
  jinja::Value v;
  if (!jinja::from_json(messages, /*caller=*/true, v)) return invalid_argument("messages: nested too deeply");
  vars.emplace_back("messages", std::move(v));
  if (in.tools != nullptr && !in.tools->is_null()) {
    if (!jinja::from_json(*in.tools, /*caller=*/true, v)) return invalid_argument("tools: nested too deeply");
    vars.emplace_back("tools", std::move(v));
  } else {
    vars.emplace_back("tools", jinja::Value::none());
  }
  vars.emplace_back("documents", jinja::Value::none());
  vars.emplace_back("add_generation_prompt", jinja::Value::boolean(in.add_generation_prompt));
  if (!specials_.bos_token.empty())
    vars.emplace_back("bos_token", jinja::Value::template_string(specials_.bos_token));
  if (!specials_.eos_token.empty())
    vars.emplace_back("eos_token", jinja::Value::template_string(specials_.eos_token));
  if (in.kwargs != nullptr && in.kwargs->is_object()) {
    for (const auto& [k, x] : in.kwargs->items()) {
      if (std::find(std::begin(kReserved), std::end(kReserved), k) != std::end(kReserved)) continue;
      if (!std::binary_search(names_.begin(), names_.end(), k)) continue;  // not a variable of this template
      if (!jinja::from_json(x, /*caller=*/true, v))
        return invalid_argument("chat_template_kwargs." + k + ": nested too deeply");
      vars.emplace_back(k, std::move(v));
    }
  }
  auto out = compiled_.render(vars);
  if (!out.ok()) return out.status();
  return to_pieces(*out);
}

StatusOr<std::vector<PromptPiece>> ChatTemplate::render_pieces(std::span<const ChatMessage> messages,
                                                               bool add_generation_prompt) const {
  ChatTemplateInputs in;
  in.add_generation_prompt = add_generation_prompt;
  return render_pieces(messages_json(messages), in);
}

StatusOr<std::string> ChatTemplate::render(std::span<const ChatMessage> messages,
                                           bool add_generation_prompt) const {
  auto pieces = render_pieces(messages, add_generation_prompt);
  if (!pieces.ok()) return pieces.status();
  std::string out;
  for (const PromptPiece& p : *pieces) out += p.text;
  return out;
}

std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, std::span<const PromptPiece> pieces,
                                   bool add_special) {
  std::vector<TextPiece> text;
  text.reserve(pieces.size());
  for (const PromptPiece& p : pieces) text.push_back({p.text, p.source == PromptPiece::Source::kTemplate});
  return tokenizer.encode(text, add_special);
}

}  // namespace nanoserve

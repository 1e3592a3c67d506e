#include "tokenizer/chat_template.h"

#include <cctype>
#include <vector>

namespace nanoserve {

namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";

// One {% ... %} or {{ ... }} tag with its expression normalised to a token
// string: string literals as "..." with their escapes resolved (and adjacent
// literals joined by + folded), `a.b` as a['b'], single spaces between tokens.
struct Tag {
  bool block = false;       // {% %} vs {{ }}
  bool trim_left = false;   // {%- / {{-
  bool trim_right = false;  // -%} / -}}
  std::string norm;
};

bool is_ident_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool is_ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

struct ExprToken {
  enum Kind { kLit, kWord, kPunct } kind;
  std::string text;  // literal content (unescaped) or the token text
};

bool lex_expression(std::string_view s, std::vector<ExprToken>& out) {
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (c == '\'' || c == '"') {
      std::string lit;
      ++i;
      bool closed = false;
      while (i < s.size()) {
        char d = s[i++];
        if (d == c) {
          closed = true;
          break;
        }
        if (d == '\\') {
          if (i >= s.size()) return false;
          char e = s[i++];
          switch (e) {
            case 'n': lit += '\n'; break;
            case 't': lit += '\t'; break;
            case 'r': lit += '\r'; break;
            case '\\':
            case '\'':
            case '"': lit += e; break;
            default: return false;  // escapes we do not model
          }
        } else {
          lit += d;
        }
      }
      if (!closed) return false;
      out.push_back({ExprToken::kLit, std::move(lit)});
    } else if (is_ident_start(c) || std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && is_ident_char(s[j])) ++j;
      out.push_back({ExprToken::kWord, std::string(s.substr(i, j - i))});
      i = j;
    } else if ((c == '!' || c == '=') && i + 1 < s.size() && s[i + 1] == '=') {
      out.push_back({ExprToken::kPunct, std::string(s.substr(i, 2))});
      i += 2;
    } else if (c == '[' || c == ']' || c == '+' || c == '.' || c == '(' || c == ')') {
      out.push_back({ExprToken::kPunct, std::string(1, c)});
      ++i;
    } else {
      return false;
    }
  }
  // a.b -> a['b']
  std::vector<ExprToken> t;
  for (size_t k = 0; k < out.size(); ++k) {
    if (out[k].kind == ExprToken::kPunct && out[k].text == "." && k + 1 < out.size() &&
        out[k + 1].kind == ExprToken::kWord && !t.empty()) {
      t.push_back({ExprToken::kPunct, "["});
      t.push_back({ExprToken::kLit, out[k + 1].text});
      t.push_back({ExprToken::kPunct, "]"});
      ++k;
    } else {
      t.push_back(std::move(out[k]));
    }
  }
  // 'a' + 'b' -> 'ab'
  out.clear();
  for (auto& tok : t) {
    size_t n = out.size();
    if (tok.kind == ExprToken::kLit && n >= 2 && out[n - 1].kind == ExprToken::kPunct &&
        out[n - 1].text == "+" && out[n - 2].kind == ExprToken::kLit) {
      out.pop_back();
      out.back().text += tok.text;
    } else {
      out.push_back(std::move(tok));
    }
  }
  return true;
}

std::string literal(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string join(const std::vector<ExprToken>& toks) {
  std::string out;
  for (const auto& t : toks) {
    if (!out.empty()) out += ' ';
    out += t.kind == ExprToken::kLit ? literal(t.text) : t.text;
  }
  return out;
}

bool only_blank(std::string_view s) {
  for (char c : s) {
    if (c != ' ' && c != '\t') return false;
  }
  return true;
}

// Splits the source into tags. Text between tags must render as nothing under
// jinja2 with trim_blocks and lstrip_blocks (or the -%} / {%- modifiers).
bool lex_template(std::string_view src, std::vector<Tag>& tags) {
  size_t i = 0;
  std::string_view pending_text;  // text before the next tag
  size_t text_start = 0;
  while (true) {
    size_t open = src.find('{', i);
    while (open != std::string_view::npos && open + 1 < src.size() && src[open + 1] != '%' &&
           src[open + 1] != '{') {
      open = src.find('{', open + 1);
    }
    if (open == std::string_view::npos || open + 1 >= src.size()) {
      pending_text = src.substr(text_start);
    } else {
      pending_text = src.substr(text_start, open - text_start);
    }
    // Decide whether the text between the previous tag and this one vanishes.
    if (!pending_text.empty()) {
      std::string_view t = pending_text;
      const Tag* prev = tags.empty() ? nullptr : &tags.back();
      bool next_is_block = open != std::string_view::npos && open + 1 < src.size() && src[open + 1] == '%';
      bool next_trims = open != std::string_view::npos && open + 2 < src.size() && src[open + 2] == '-';
      bool prev_trims = prev && prev->trim_right;
      bool ok = false;
      if (prev_trims || next_trims) {
        size_t k = 0;
        while (k < t.size() && std::isspace(static_cast<unsigned char>(t[k]))) ++k;
        ok = k == t.size();  // all whitespace, stripped by the modifier
      }
      if (!ok) {
        // trim_blocks: one newline right after a block tag; lstrip_blocks: blanks from the start
        // of a line up to a block tag.
        bool line_start = prev == nullptr;
        if (prev && prev->block && !t.empty() && t[0] == '\n') {
          t.remove_prefix(1);
          line_start = true;
        }
        if (next_is_block && line_start && only_blank(t)) t = {};
        ok = t.empty();
      }
      if (!ok) return false;
    }
    if (open == std::string_view::npos || open + 1 >= src.size()) break;
    bool block = src[open + 1] == '%';
    std::string_view close_mark = block ? "%}" : "}}";
    size_t close = src.find(close_mark, open + 2);
    if (close == std::string_view::npos) return false;
    std::string_view inner = src.substr(open + 2, close - open - 2);
    Tag tag;
    tag.block = block;
    if (!inner.empty() && inner.front() == '-') {
      tag.trim_left = true;
      inner.remove_prefix(1);
    }
    if (!inner.empty() && inner.back() == '-') {
      tag.trim_right = true;
      inner.remove_suffix(1);
    }
    std::vector<ExprToken> toks;
    if (!lex_expression(inner, toks)) return false;
    tag.norm = (block ? "% " : "= ") + join(toks);
    tags.push_back(std::move(tag));
    i = text_start = close + 2;
  }
  return true;
}

}  // namespace

ChatTemplate ChatTemplate::chatml() {
  return ChatTemplate();
}

StatusOr<ChatTemplate> ChatTemplate::parse(std::string_view src) {
  auto refuse = [&](std::string why) {
    return unimplemented("chat template: only ChatML templates are supported (" + why + ")");
  };
  std::vector<Tag> tags;
  if (!lex_template(src, tags)) return refuse("uses Jinja syntax outside the ChatML shape");
  const std::string role_line = "= " + literal(kImStart) + " + message [ \"role\" ] + " + literal("\n") +
                                " + message [ \"content\" ] + " + literal(std::string(kImEnd) + "\n");
  const std::string sys_if = "% if loop [ \"first\" ] and messages [ 0 ] [ \"role\" ] != \"system\"";
  ChatTemplate t;
  size_t k = 0;
  auto next_is = [&](const std::string& norm) {
    if (k < tags.size() && tags[k].norm == norm) {
      ++k;
      return true;
    }
    return false;
  };
  if (!next_is("% for message in messages")) return refuse("no '{% for message in messages %}'");
  if (next_is(sys_if)) {
    const std::string head = std::string(kImStart) + "system\n";
    const std::string tail = std::string(kImEnd) + "\n";
    std::string prefix = "= " + literal("");
    prefix.pop_back();  // '= "' : the start of a literal
    if (k >= tags.size() || tags[k].norm.rfind(prefix, 0) != 0)
      return refuse("unexpected default system block");
    // Re-lex the literal to get its text back exactly.
    std::string_view norm = tags[k].norm;
    std::vector<ExprToken> toks;
    if (!lex_expression(norm.substr(2), toks) || toks.size() != 1 || toks[0].kind != ExprToken::kLit) {
      return refuse("unexpected default system block");
    }
    const std::string& lit = toks[0].text;
    if (lit.size() < head.size() + tail.size() || lit.compare(0, head.size(), head) != 0 ||
        lit.compare(lit.size() - tail.size(), tail.size(), tail) != 0) {
      return refuse("unexpected default system block");
    }
    t.default_system_ = lit.substr(head.size(), lit.size() - head.size() - tail.size());
    ++k;
    if (!next_is("% endif")) return refuse("default system block not closed");
  }
  if (!next_is(role_line)) return refuse("no ChatML message line");
  if (!next_is("% endfor")) return refuse("no '{% endfor %}'");
  if (!next_is("% if add_generation_prompt")) return refuse("no generation prompt block");
  if (!next_is("= " + literal(std::string(kImStart) + "assistant\n")))
    return refuse("unexpected generation prompt");
  if (!next_is("% endif")) return refuse("generation prompt block not closed");
  if (k != tags.size()) return refuse("trailing tags");
  return t;
}

namespace {

// Appends to a piece list, merging runs of one source and dropping empty text.
class PieceWriter {
 public:
  PieceWriter& add(PromptPiece::Source source, std::string_view text) {
    if (text.empty()) return *this;
    if (pieces_.empty() || pieces_.back().source != source) pieces_.push_back({source, std::string()});
    pieces_.back().text.append(text);
    return *this;
  }
  PieceWriter& tmpl(std::string_view text) { return add(PromptPiece::Source::kTemplate, text); }
  PieceWriter& caller(std::string_view text) { return add(PromptPiece::Source::kCaller, text); }
  std::vector<PromptPiece> take() { return std::move(pieces_); }

 private:
  std::vector<PromptPiece> pieces_;
};

}  // namespace

std::vector<PromptPiece> ChatTemplate::render_pieces(std::span<const ChatMessage> messages,
                                                     bool add_generation_prompt) const {
  PieceWriter w;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0 && default_system_ && messages[0].role != "system") {
      w.tmpl(kImStart).tmpl("system\n").tmpl(*default_system_).tmpl(kImEnd).tmpl("\n");
    }
    w.tmpl(kImStart).caller(messages[i].role).tmpl("\n").caller(messages[i].content).tmpl(kImEnd).tmpl("\n");
  }
  if (add_generation_prompt) w.tmpl(kImStart).tmpl("assistant\n");
  return w.take();
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::string out;
  for (const PromptPiece& p : render_pieces(messages, add_generation_prompt)) out += p.text;
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

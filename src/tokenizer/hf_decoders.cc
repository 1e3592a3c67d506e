// tokenizer.json decoders: each rewrites the list of token strings, as
// Hugging Face's decode_chain does; the tokenizer joins what is left.

#include <cstdio>

#include "tokenizer/byte_level.h"
#include "tokenizer/hf_components.h"
#include "tokenizer/hf_regex.h"

namespace nanoserve::hf {

namespace {

using nlohmann::json;

class SequenceDecoder final : public DecoderStep {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<DecoderStep>> steps) : steps_(std::move(steps)) {}
  void decode(std::vector<std::string>& tokens, bool stream) const override {
    for (const auto& s : steps_) s->decode(tokens, stream);
  }

 private:
  std::vector<std::unique_ptr<DecoderStep>> steps_;
};

// All tokens into one string of bytes: a token whose characters are all in the byte alphabet gives
// those bytes, any other its own text; then invalid UTF-8 becomes U+FFFD (Rust's from_utf8_lossy).
class ByteLevelDecoder final : public DecoderStep {
 public:
  void decode(std::vector<std::string>& tokens, bool stream) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      const size_t mark = bytes.size();
      if (!byte_level::decode(t, bytes)) {
        bytes.resize(mark);
        bytes.append(t);
      }
    }
    tokens.assign(1, stream || utf8::is_valid(bytes) ? std::move(bytes) : utf8::sanitize(bytes));
  }
};

// Runs of <0xXX> tokens become their bytes; a run that is not valid UTF-8 becomes one U+FFFD per byte.
class ByteFallbackDecoder final : public DecoderStep {
 public:
  static int byte_of(const std::string& t) {
    // Rust's u8::from_str_radix on the two characters after "<0x": hex digits, or '+' and one digit.
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    auto hex = [](char c) {
      return c >= '0' && c <= '9'   ? c - '0'
             : c >= 'a' && c <= 'f' ? c - 'a' + 10
             : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                    : -1;
    };
    if (t[3] == '+') return hex(t[4]);
    const int hi = hex(t[3]), lo = hex(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }
  void decode(std::vector<std::string>& tokens, bool stream) const override {
    std::vector<std::string> out;
    std::string run;
    size_t run_len = 0;
    auto flush = [&] {
      if (run_len == 0) return;
      if (stream || utf8::is_valid(run)) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run_len; ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      run.clear();
      run_len = 0;
    };
    for (std::string& t : tokens) {
      const int b = byte_of(t);
      if (b >= 0) {
        run.push_back(static_cast<char>(b));
        ++run_len;
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder final : public DecoderStep {
 public:
  void decode(std::vector<std::string>& tokens, bool) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Up to `start` leading and `stop` trailing copies of one character, off every token.
class StripDecoder final : public DecoderStep {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode(std::vector<std::string>& tokens, bool stream) const override {
    if (stream) return;
    for (std::string& t : tokens) {
      size_t b = 0, e = t.size();
      for (size_t i = 0; i < start_ && t.compare(b, content_.size(), content_) == 0 && b < e; ++i) {
        b += content_.size();
      }
      for (size_t i = 0; i < stop_ && e >= b + content_.size() &&
                         t.compare(e - content_.size(), content_.size(), content_) == 0;
           ++i) {
        e -= content_.size();
      }
      t = t.substr(b, e - b);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class ReplaceDecoder final : public DecoderStep {
 public:
  ReplaceDecoder(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode(std::vector<std::string>& tokens, bool) const override {
    std::vector<std::pair<size_t, size_t>> m;
    for (std::string& t : tokens) {
      if (!utf8::is_valid(t)) continue;  // raw bytes of a streamed piece: nothing to match in them
      m.clear();
      pattern_.find_all(t, m);
      if (m.empty()) continue;
      std::string out;
      size_t done = 0;
      for (auto [b, e] : m) {
        out.append(t, done, b - done).append(content_);
        done = e;
      }
      out.append(t, done, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  Regex pattern_;
  std::string content_;
};

// The replacement character back to ' '; in the first token, unless prepend_scheme is "never",
// it is dropped instead (all of them, as HF's does).
class MetaspaceDecoder final : public DecoderStep {
 public:
  MetaspaceDecoder(std::string replacement, bool drop_first)
      : replacement_(std::move(replacement)), drop_first_(drop_first) {}
  void decode(std::vector<std::string>& tokens, bool stream) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const bool drop = drop_first_ && i == 0 && !stream;
      std::string& t = tokens[i];
      std::string out;
      for (size_t pos = 0; pos < t.size();) {
        if (t.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!drop) out.push_back(' ');
          pos += replacement_.size();
        } else {
          out.push_back(t[pos++]);
        }
      }
      t = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool drop_first_;
};

StatusOr<size_t> count_field(const json& j, const char* key, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > (1 << 20)) {
    return bad(path + "." + key, "missing or not a count");
  }
  return static_cast<size_t>(it->get<int64_t>());
}

StatusOr<std::unique_ptr<DecoderStep>> parse_one(const json& j, const std::string& path) {
  if (!j.is_object()) return bad(path, "not an object");
  const std::string type = type_of(j);
  if (type == "Sequence") {
    auto list = j.find("decoders");
    if (list == j.end() || !list->is_array()) return bad(path + ".decoders", "not a list");
    std::vector<std::unique_ptr<DecoderStep>> steps;
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string p = path + ".decoders[" + std::to_string(i) + "]";
      if ((*list)[i].is_null()) return bad(p, "null");
      NS_ASSIGN_OR_RETURN(auto s, parse_decoder((*list)[i], p));
      steps.push_back(std::move(s));
    }
    return std::unique_ptr<DecoderStep>(new SequenceDecoder(std::move(steps)));
  }
  if (type == "ByteLevel") return std::unique_ptr<DecoderStep>(new ByteLevelDecoder());
  if (type == "ByteFallback") return std::unique_ptr<DecoderStep>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<DecoderStep>(new FuseDecoder());
  if (type == "Strip") {
    NS_ASSIGN_OR_RETURN(std::string content, string_field(j, "content", path));
    if (content.empty() || utf8::sequence_length(content, 0) != content.size()) {
      return bad(path + ".content", "not one character");
    }
    NS_ASSIGN_OR_RETURN(size_t start, count_field(j, "start", path));
    NS_ASSIGN_OR_RETURN(size_t stop, count_field(j, "stop", path));
    return std::unique_ptr<DecoderStep>(new StripDecoder(std::move(content), start, stop));
  }
  if (type == "Replace") {
    NS_ASSIGN_OR_RETURN(PatternSpec p, pattern_field(j, "pattern", path));
    NS_ASSIGN_OR_RETURN(std::string content, string_field(j, "content", path));
    auto re = p.regex ? Regex::from_onig(p.text) : Regex::literal(p.text);
    if (!re.ok()) return unsupported(path + ".pattern", re.status().message());
    return std::unique_ptr<DecoderStep>(new ReplaceDecoder(std::move(re).value(), std::move(content)));
  }
  if (type == "Metaspace") {
    NS_ASSIGN_OR_RETURN(std::string rep, string_field(j, "replacement", path));
    if (rep.empty() || utf8::sequence_length(rep, 0) != rep.size()) {
      return bad(path + ".replacement", "not one character");
    }
    NS_ASSIGN_OR_RETURN(bool legacy_prefix, bool_field(j, "add_prefix_space", true, path));
    bool drop_first = legacy_prefix;
    if (auto ps = j.find("prepend_scheme"); ps != j.end() && !ps->is_null()) {
      const std::string s = ps->is_string() ? ps->get<std::string>() : std::string("?");
      if (s != "always" && s != "first" && s != "never") {
        return bad(path + ".prepend_scheme", quote_name(s) + " is not one of always, first, never");
      }
      drop_first = s != "never";
    }
    return std::unique_ptr<DecoderStep>(new MetaspaceDecoder(std::move(rep), drop_first));
  }
  return unsupported_type(path, type, kDecoderTypes);
}

}  // namespace

StatusOr<std::unique_ptr<DecoderStep>> parse_decoder(const json& j, const std::string& path) {
  if (j.is_null()) return std::unique_ptr<DecoderStep>();
  return parse_one(j, path);
}

}  // namespace nanoserve::hf

// tokenizer.json normalizers. Each works on the text between added tokens,
// as Hugging Face's do, and keeps `zero` (hf_components.h) up to date.

#include <optional>

#include "tokenizer/hf_components.h"
#include "tokenizer/hf_regex.h"
#include "tokenizer/normalizer.h"

namespace nanoserve::hf {

namespace {

using nlohmann::json;

class SequenceNormalizer final : public NormalizerStep {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<NormalizerStep>> steps)
      : steps_(std::move(steps)) {}
  void normalize(std::string& text, size_t& zero) const override {
    for (const auto& s : steps_) s->normalize(text, zero);
  }

 private:
  std::vector<std::unique_ptr<NormalizerStep>> steps_;
};

class UnicodeNormalizer final : public NormalizerStep {
 public:
  explicit UnicodeNormalizer(normalizer::Form form) : form_(form) {}
  void normalize(std::string& text, size_t& zero) const override {
    if (form_ == normalizer::Form::kNfc && normalizer::trivially_nfc(text)) return;
    // The first character's share: what its leading bytes become alone (a composition that takes
    // in the next characters ends inside the same output character, which is all that matters).
    if (zero > 0) zero = normalizer::normalize(std::string_view(text).substr(0, zero), form_).size();
    text = normalizer::normalize(text, form_);
    if (zero > text.size()) zero = text.size();
  }

 private:
  normalizer::Form form_;
};

class LowercaseNormalizer final : public NormalizerStep {
 public:
  void normalize(std::string& text, size_t& zero) const override {
    map_chars(text, zero,
              [](char32_t c, std::string_view, std::string& out) { normalizer::append_lowercase(c, out); });
  }
};

class StripNormalizer final : public NormalizerStep {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text, size_t& zero) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        const size_t n = utf8::sequence_length(text, begin);
        if (n == 0 || !is_white_space(utf8::decode_at(text, begin, n))) break;
        begin += n;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
        if (!is_white_space(utf8::decode_at(text, start, end - start))) break;
        end = start;
      }
    }
    zero = zero > begin ? std::min(zero, end) - begin : 0;
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class PrependNormalizer final : public NormalizerStep {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text, size_t& zero) const override {
    if (text.empty()) return;
    text.insert(0, prefix_);  // aligned to the first character, as HF's prepend
    if (zero > 0) zero += prefix_.size();
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public NormalizerStep {
 public:
  ReplaceNormalizer(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text, size_t& zero) const override {
    std::vector<std::pair<size_t, size_t>> m;
    pattern_.find_all(text, m);
    if (m.empty()) return;
    std::string out;
    out.reserve(text.size());
    size_t new_zero = 0, done = 0;
    auto keep = [&](size_t end) {  // the unmatched text [done, end), unchanged
      if (done < zero) new_zero = out.size() + (std::min(zero, end) - done);
      out.append(text, done, end - done);
    };
    for (auto [b, e] : m) {
      keep(b);
      out.append(content_);
      // HF aligns the replacement with the match's last character.
      size_t last = e - 1;
      while (last > b && (static_cast<uint8_t>(text[last]) & 0xC0) == 0x80) --last;
      if (last < zero) new_zero = out.size();
      done = e;
    }
    keep(text.size());
    text = std::move(out);
    zero = new_zero;
  }

 private:
  Regex pattern_;
  std::string content_;
};

// BERT's normalizer: control characters out and whitespace to ' ', spaces around CJK ideographs,
// accents stripped (NFD, then nonspacing marks out), lowercase; in that order.
class BertNormalizer final : public NormalizerStep {
 public:
  BertNormalizer(bool clean_text, bool chinese, bool strip_accents, bool lowercase, Regex control, Regex mark)
      : clean_text_(clean_text),
        chinese_(chinese),
        strip_accents_(strip_accents),
        lowercase_(lowercase),
        control_(std::move(control)),
        mark_(std::move(mark)) {}
  void normalize(std::string& text, size_t& zero) const override {
    if (clean_text_) {
      map_chars(text, zero, [&](char32_t c, std::string_view raw, std::string& out) {
        if (c == 0 || c == 0xFFFD) return;
        // Control characters go first, the whitespace ones among them (\v, \f, U+0085) too.
        const bool tnr = c == '\t' || c == '\n' || c == '\r';
        if (!tnr && (c < 0x80 ? c < 0x20 || c == 0x7F : control_.matches_whole(raw))) return;
        if (tnr || is_white_space(c)) {
          out.push_back(' ');
        } else {
          out.append(raw);
        }
      });
    }
    if (chinese_) {
      map_chars(text, zero, [](char32_t c, std::string_view raw, std::string& out) {
        const bool cjk = (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
                         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
                         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
                         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
        if (cjk) out.push_back(' ');
        out.append(raw);
        if (cjk) out.push_back(' ');
      });
    }
    if (strip_accents_) {
      UnicodeNormalizer(normalizer::Form::kNfd).normalize(text, zero);
      map_chars(text, zero, [&](char32_t c, std::string_view raw, std::string& out) {
        if (c < 0x300 || !mark_.matches_whole(raw)) out.append(raw);
      });
    }
    if (lowercase_) LowercaseNormalizer().normalize(text, zero);
  }

 private:
  bool clean_text_, chinese_, strip_accents_, lowercase_;
  Regex control_, mark_;
};

StatusOr<std::unique_ptr<NormalizerStep>> parse_one(const json& j, const std::string& path) {
  if (!j.is_object()) return bad(path, "not an object");
  const std::string type = type_of(j);
  auto need_icu = [&]() -> Status {
    if (normalizer::nfc_available()) return Status::ok_status();
    return unsupported(path, quote_name(type) + " needs a build with ICU (libicu-dev)");
  };
  if (type == "Sequence") {
    auto list = j.find("normalizers");
    if (list == j.end() || !list->is_array()) return bad(path + ".normalizers", "not a list");
    std::vector<std::unique_ptr<NormalizerStep>> steps;
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string p = path + ".normalizers[" + std::to_string(i) + "]";
      if ((*list)[i].is_null()) return bad(p, "null");
      NS_ASSIGN_OR_RETURN(auto s, parse_normalizer((*list)[i], p));
      steps.push_back(std::move(s));
    }
    return std::unique_ptr<NormalizerStep>(new SequenceNormalizer(std::move(steps)));
  }
  std::optional<normalizer::Form> form;
  if (type == "NFC") form = normalizer::Form::kNfc;
  if (type == "NFD") form = normalizer::Form::kNfd;
  if (type == "NFKC") form = normalizer::Form::kNfkc;
  if (type == "NFKD") form = normalizer::Form::kNfkd;
  if (form) {
    NS_RETURN_IF_ERROR(need_icu());
    return std::unique_ptr<NormalizerStep>(new UnicodeNormalizer(*form));
  }
  if (type == "Lowercase") {
    NS_RETURN_IF_ERROR(need_icu());
    return std::unique_ptr<NormalizerStep>(new LowercaseNormalizer());
  }
  if (type == "Strip") {
    NS_ASSIGN_OR_RETURN(bool left, bool_field(j, "strip_left", false, path));
    NS_ASSIGN_OR_RETURN(bool right, bool_field(j, "strip_right", false, path));
    return std::unique_ptr<NormalizerStep>(new StripNormalizer(left, right));
  }
  if (type == "Prepend") {
    NS_ASSIGN_OR_RETURN(std::string prefix, string_field(j, "prepend", path));
    return std::unique_ptr<NormalizerStep>(new PrependNormalizer(std::move(prefix)));
  }
  if (type == "Replace") {
    NS_ASSIGN_OR_RETURN(PatternSpec p, pattern_field(j, "pattern", path));
    NS_ASSIGN_OR_RETURN(std::string content, string_field(j, "content", path));
    auto re = p.regex ? Regex::from_onig(p.text) : Regex::literal(p.text);
    if (!re.ok()) return unsupported(path + ".pattern", re.status().message());
    return std::unique_ptr<NormalizerStep>(new ReplaceNormalizer(std::move(re).value(), std::move(content)));
  }
  if (type == "BertNormalizer") {
    NS_ASSIGN_OR_RETURN(bool clean, bool_field(j, "clean_text", true, path));
    NS_ASSIGN_OR_RETURN(bool chinese, bool_field(j, "handle_chinese_chars", true, path));
    NS_ASSIGN_OR_RETURN(bool lower, bool_field(j, "lowercase", true, path));
    NS_ASSIGN_OR_RETURN(bool strip, bool_field(j, "strip_accents", lower, path));
    if (strip || lower) NS_RETURN_IF_ERROR(need_icu());
    // Rust's is_other as HF's BERT uses it: Cc, Cf, Co, Cs (not unassigned code points).
    NS_ASSIGN_OR_RETURN(Regex control, Regex::from_pcre2("[\\p{Cc}\\p{Cf}\\p{Co}\\p{Cs}]"));
    NS_ASSIGN_OR_RETURN(Regex mark, Regex::from_pcre2("\\p{Mn}"));
    return std::unique_ptr<NormalizerStep>(
        new BertNormalizer(clean, chinese, strip, lower, std::move(control), std::move(mark)));
  }
  return unsupported_type(path, type, kNormalizerTypes);
}

}  // namespace

StatusOr<std::unique_ptr<NormalizerStep>> parse_normalizer(const json& j, const std::string& path) {
  if (j.is_null()) return std::unique_ptr<NormalizerStep>();
  return parse_one(j, path);
}

}  // namespace nanoserve::hf

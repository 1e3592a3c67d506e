// tokenizer.json pre-tokenizers. Every split is one rule: a pattern, what
// becomes of its matches (HF's SplitDelimiterBehavior) and whether the
// pattern is inverted; Digits, Punctuation, Whitespace and the rest are that
// rule with a pattern of their own.

#include <algorithm>
#include <optional>

#include "tokenizer/byte_level.h"
#include "tokenizer/hf_components.h"
#include "tokenizer/hf_regex.h"

namespace nanoserve::hf {

namespace {

using nlohmann::json;

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Span {
  size_t begin, end;
  bool match;
};

// HF's SplitDelimiterBehavior over the spans of one piece (matches and the gaps between them).
std::vector<Span> apply_behavior(const std::vector<Span>& spans, Behavior behavior) {
  std::vector<Span> out;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.match) out.push_back(s);
      }
      return out;
    case Behavior::kIsolated: return spans;
    case Behavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.match && !previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_match = s.match;
      }
      return out;
    case Behavior::kMergedWithNext:
      for (size_t i = spans.size(); i-- > 0;) {
        const Span& s = spans[i];
        if (s.match && !previous_match && !out.empty()) {
          out.back().begin = s.begin;
        } else {
          out.push_back(s);
        }
        previous_match = s.match;
      }
      std::reverse(out.begin(), out.end());
      return out;
    case Behavior::kContiguous:
      for (const Span& s : spans) {
        if (s.match == previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_match = s.match;
      }
      return out;
  }
  return out;
}

void split_pieces(std::vector<Piece>& pieces, const Regex& re, Behavior behavior, bool invert) {
  std::vector<Piece> next;
  std::vector<std::pair<size_t, size_t>> m;
  std::vector<Span> spans;
  for (Piece& p : pieces) {
    m.clear();
    spans.clear();
    re.find_all(p.text, m);
    size_t done = 0;
    for (auto [b, e] : m) {
      if (b > done) spans.push_back({done, b, invert});
      spans.push_back({b, e, !invert});
      done = e;
    }
    if (done < p.text.size()) spans.push_back({done, p.text.size(), invert});
    for (const Span& s : apply_behavior(spans, behavior)) {
      if (s.end <= s.begin) continue;
      const size_t zero = s.begin < p.zero ? std::min(p.zero, s.end) - s.begin : 0;
      next.push_back({p.text.substr(s.begin, s.end - s.begin), zero});
    }
  }
  pieces = std::move(next);
}

class SequencePre final : public PreTokenizerStep {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizerStep>> steps) : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& s : steps_) s->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizerStep>> steps_;
};

// Split, Digits, Punctuation, Whitespace, WhitespaceSplit, CharDelimiterSplit, BertPreTokenizer:
// one or more split rules in order.
class SplitPre final : public PreTokenizerStep {
 public:
  struct Rule {
    Regex re;
    Behavior behavior;
    bool invert;
  };
  explicit SplitPre(std::vector<Rule> rules) : rules_(std::move(rules)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const Rule& r : rules_) split_pieces(pieces, r.re, r.behavior, r.invert);
  }

 private:
  std::vector<Rule> rules_;
};

class ByteLevelPre final : public PreTokenizerStep {
 public:
  ByteLevelPre(bool add_prefix_space, std::optional<Regex> re)
      : add_prefix_space_(add_prefix_space), re_(std::move(re)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_) {
      for (Piece& p : pieces) {
        if (p.text.empty() || p.text[0] == ' ') continue;
        p.text.insert(0, 1, ' ');
        if (p.zero > 0) ++p.zero;
      }
    }
    if (re_) split_pieces(pieces, *re_, Behavior::kIsolated, false);
    for (Piece& p : pieces) {
      map_chars(p.text, p.zero,
                [](char32_t, std::string_view raw, std::string& out) { byte_level::encode(raw, out); });
    }
  }

 private:
  bool add_prefix_space_;
  std::optional<Regex> re_;
};

class MetaspacePre final : public PreTokenizerStep {
 public:
  enum class Scheme { kAlways, kFirst, kNever };
  MetaspacePre(std::string replacement, Scheme scheme, std::optional<Regex> split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(std::move(split)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (Piece& p : pieces) {
      map_chars(p.text, p.zero, [&](char32_t c, std::string_view raw, std::string& out) {
        if (c == ' ') {
          out.append(replacement_);
        } else {
          out.append(raw);
        }
      });
      if (p.text.starts_with(replacement_)) continue;
      // "first": only a piece whose first character is the input's first (HF's offsets_original().0 == 0).
      if (scheme_ == Scheme::kAlways || (scheme_ == Scheme::kFirst && p.zero > 0)) {
        p.text.insert(0, replacement_);
        if (p.zero > 0) p.zero += replacement_.size();
      }
    }
    if (split_) split_pieces(pieces, *split_, Behavior::kMergedWithNext, false);
  }

 private:
  std::string replacement_;
  Scheme scheme_;
  std::optional<Regex> split_;
};

StatusOr<Behavior> behavior_field(const json& j, const std::string& path, Behavior dflt) {
  auto it = j.find("behavior");
  if (it == j.end() || it->is_null()) return dflt;
  const std::string b = it->is_string() ? it->get<std::string>() : std::string("?");
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  return bad(path + ".behavior", quote_name(b) +
                                     " is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, "
                                     "Contiguous");
}

StatusOr<Regex> own(std::string_view pcre2) {
  auto r = Regex::from_pcre2(pcre2);
  if (!r.ok())
    return internal_error("tokenizer: a built-in pattern does not compile: " + r.status().message());
  return r;
}

std::string ws_class() {
  return std::string("[") + kWhiteSpaceClass + "]";
}
// ASCII punctuation (Rust's is_ascii_punctuation) or Unicode punctuation (P*).
constexpr const char* kPunctuation = "[\\p{P}!-/:-@\\[-`{-~]";
constexpr const char* kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

StatusOr<std::unique_ptr<PreTokenizerStep>> one_rule(std::string_view pcre2, Behavior b, bool invert) {
  NS_ASSIGN_OR_RETURN(Regex re, own(pcre2));
  std::vector<SplitPre::Rule> rules;
  rules.push_back({std::move(re), b, invert});
  return std::unique_ptr<PreTokenizerStep>(new SplitPre(std::move(rules)));
}

StatusOr<std::unique_ptr<PreTokenizerStep>> parse_one(const json& j, const std::string& path) {
  if (!j.is_object()) return bad(path, "not an object");
  const std::string type = type_of(j);
  if (type == "Sequence") {
    auto list = j.find("pretokenizers");
    if (list == j.end() || !list->is_array()) return bad(path + ".pretokenizers", "not a list");
    std::vector<std::unique_ptr<PreTokenizerStep>> steps;
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string p = path + ".pretokenizers[" + std::to_string(i) + "]";
      if ((*list)[i].is_null()) return bad(p, "null");
      NS_ASSIGN_OR_RETURN(auto s, parse_pre_tokenizer((*list)[i], p));
      steps.push_back(std::move(s));
    }
    return std::unique_ptr<PreTokenizerStep>(new SequencePre(std::move(steps)));
  }
  if (type == "Split") {
    NS_ASSIGN_OR_RETURN(PatternSpec p, pattern_field(j, "pattern", path));
    NS_ASSIGN_OR_RETURN(Behavior b, behavior_field(j, path, Behavior::kIsolated));
    auto bit = j.find("behavior");
    if (bit == j.end() || bit->is_null()) return bad(path + ".behavior", "missing");
    NS_ASSIGN_OR_RETURN(bool invert, bool_field(j, "invert", false, path));
    auto re = p.regex ? Regex::from_onig(p.text) : Regex::literal(p.text);
    if (!re.ok()) return unsupported(path + ".pattern", re.status().message());
    std::vector<SplitPre::Rule> rules;
    rules.push_back({std::move(re).value(), b, invert});
    return std::unique_ptr<PreTokenizerStep>(new SplitPre(std::move(rules)));
  }
  if (type == "Digits") {
    NS_ASSIGN_OR_RETURN(bool individual, bool_field(j, "individual_digits", false, path));
    // Rust's char::is_numeric: Nd, Nl, No.
    return one_rule("\\p{N}", individual ? Behavior::kIsolated : Behavior::kContiguous, false);
  }
  if (type == "Punctuation") {
    NS_ASSIGN_OR_RETURN(Behavior b, behavior_field(j, path, Behavior::kIsolated));
    return one_rule(kPunctuation, b, false);
  }
  if (type == "Whitespace") {
    // HF: the matches of \w+|[^\w\s]+ (Rust's regex crate, not Oniguruma) are the pieces; what lies
    // between them goes.
    const std::string w =
        std::string("[") + kRustWordClass + "]+|[^" + kRustWordClass + kWhiteSpaceClass + "]+";
    return one_rule(w, Behavior::kRemoved, true);
  }
  if (type == "WhitespaceSplit") return one_rule(ws_class(), Behavior::kRemoved, false);
  if (type == "BertPreTokenizer") {
    NS_ASSIGN_OR_RETURN(Regex ws, own(ws_class()));
    NS_ASSIGN_OR_RETURN(Regex punct, own(kPunctuation));
    std::vector<SplitPre::Rule> rules;
    rules.push_back({std::move(ws), Behavior::kRemoved, false});
    rules.push_back({std::move(punct), Behavior::kIsolated, false});
    return std::unique_ptr<PreTokenizerStep>(new SplitPre(std::move(rules)));
  }
  if (type == "CharDelimiterSplit") {
    NS_ASSIGN_OR_RETURN(std::string d, string_field(j, "delimiter", path));
    if (d.empty() || utf8::sequence_length(d, 0) != d.size())
      return bad(path + ".delimiter", "not one character");
    NS_ASSIGN_OR_RETURN(Regex re, Regex::literal(d));
    std::vector<SplitPre::Rule> rules;
    rules.push_back({std::move(re), Behavior::kRemoved, false});
    return std::unique_ptr<PreTokenizerStep>(new SplitPre(std::move(rules)));
  }
  if (type == "ByteLevel") {
    NS_ASSIGN_OR_RETURN(bool prefix, bool_field(j, "add_prefix_space", true, path));
    NS_ASSIGN_OR_RETURN(bool use_regex, bool_field(j, "use_regex", true, path));
    std::optional<Regex> re;
    if (use_regex) {
      auto r = Regex::from_onig(kGpt2Regex);
      if (!r.ok()) return internal_error("tokenizer: the ByteLevel pattern: " + r.status().message());
      re = std::move(r).value();
    }
    return std::unique_ptr<PreTokenizerStep>(new ByteLevelPre(prefix, std::move(re)));
  }
  if (type == "Metaspace") {
    NS_ASSIGN_OR_RETURN(std::string rep, string_field(j, "replacement", path));
    if (rep.empty() || utf8::sequence_length(rep, 0) != rep.size()) {
      return bad(path + ".replacement", "not one character");
    }
    NS_ASSIGN_OR_RETURN(bool legacy_prefix, bool_field(j, "add_prefix_space", true, path));
    MetaspacePre::Scheme scheme =
        legacy_prefix ? MetaspacePre::Scheme::kAlways : MetaspacePre::Scheme::kNever;
    if (auto ps = j.find("prepend_scheme"); ps != j.end() && !ps->is_null()) {
      const std::string s = ps->is_string() ? ps->get<std::string>() : std::string("?");
      if (s == "always") {
        scheme = MetaspacePre::Scheme::kAlways;
      } else if (s == "first") {
        scheme = MetaspacePre::Scheme::kFirst;
      } else if (s == "never") {
        scheme = MetaspacePre::Scheme::kNever;
      } else {
        return bad(path + ".prepend_scheme", quote_name(s) + " is not one of always, first, never");
      }
    }
    NS_ASSIGN_OR_RETURN(bool split, bool_field(j, "split", true, path));
    std::optional<Regex> re;
    if (split) {
      NS_ASSIGN_OR_RETURN(Regex r, Regex::literal(rep));
      re = std::move(r);
    }
    return std::unique_ptr<PreTokenizerStep>(new MetaspacePre(rep, scheme, std::move(re)));
  }
  return unsupported_type(path, type, kPreTokenizerTypes);
}

}  // namespace

StatusOr<std::unique_ptr<PreTokenizerStep>> parse_pre_tokenizer(const json& j, const std::string& path) {
  if (j.is_null()) return std::unique_ptr<PreTokenizerStep>();
  return parse_one(j, path);
}

}  // namespace nanoserve::hf

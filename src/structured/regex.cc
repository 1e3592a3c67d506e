#include "structured/regex.h"

#include <algorithm>
#include <bitset>
#include <map>
#include <utility>

namespace nanoserve::structured {

namespace {

using ByteSet = std::bitset<256>;

constexpr int32_t kMaxNfaStates = 1 << 16;
constexpr int32_t kMaxRepeat = 256;  // the largest m or n of {m,n}

// The pattern as a tree; repeats are expanded when the NFA is built.
struct Re {
  enum Kind : uint8_t { kSet, kConcat, kAlt, kRepeat } kind = kConcat;
  ByteSet set;               // kSet: one byte of these
  std::vector<Re> kids;      // kConcat, kAlt; kRepeat: one
  int32_t min = 0, max = 0;  // kRepeat; max -1 = unbounded
};

ByteSet range(int lo, int hi) {
  ByteSet s;
  for (int c = lo; c <= hi; ++c) s.set(c);
  return s;
}
ByteSet printable() {
  return range(0x20, 0x7e);
}
ByteSet digits() {
  return range('0', '9');
}
ByteSet word() {
  return range('a', 'z') | range('A', 'Z') | digits() | range('_', '_');
}

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  StatusOr<Re> parse() {
    if (!p_.empty() && p_.front() == '^') p_.remove_prefix(1);
    if (!p_.empty() && p_.back() == '$' && !escaped_at(p_.size() - 1)) p_.remove_suffix(1);
    Re re = alt(0);
    if (!error_.empty()) return invalid_argument(error_);
    if (i_ < p_.size()) return invalid_argument("unbalanced ')' at offset " + std::to_string(i_));
    return re;
  }

 private:
  // True when the character at `pos` is preceded by an odd run of backslashes.
  bool escaped_at(size_t pos) const {
    size_t n = 0;
    while (pos > n && p_[pos - n - 1] == '\\') ++n;
    return n % 2 == 1;
  }
  bool more() const { return i_ < p_.size() && error_.empty(); }
  void fail(std::string message) {
    if (error_.empty()) error_ = std::move(message) + " (offset " + std::to_string(i_) + ")";
  }

  Re alt(int depth) {
    if (depth > 32) {
      fail("groups nested more than 32 deep");
      return {};
    }
    Re out;
    out.kind = Re::kAlt;
    out.kids.push_back(concat(depth));
    while (more() && p_[i_] == '|') {
      ++i_;
      out.kids.push_back(concat(depth));
    }
    return out.kids.size() == 1 ? std::move(out.kids[0]) : out;
  }

  Re concat(int depth) {
    Re out;
    out.kind = Re::kConcat;
    while (more() && p_[i_] != '|' && p_[i_] != ')') {
      Re a = atom(depth);
      if (!error_.empty()) return out;
      quantified(a);
      out.kids.push_back(std::move(a));
    }
    return out;
  }

  static Re of(ByteSet s) {
    Re r;
    r.kind = Re::kSet;
    r.set = s;
    return r;
  }

  Re atom(int depth) {
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (i_ < p_.size() && p_[i_] == '?') {
        if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
          i_ += 2;
        } else {
          fail("group syntax '(?" + std::string(i_ + 1 < p_.size() ? p_.substr(i_ + 1, 1) : "") +
               "' (lookaround, named groups, flags) is not supported");
          return {};
        }
      }
      Re inner = alt(depth + 1);
      if (i_ >= p_.size() || p_[i_] != ')') {
        fail("unbalanced '('");
        return {};
      }
      ++i_;
      return inner;
    }
    if (c == '[') return cls();
    if (c == '.') {
      ++i_;
      return of(printable());
    }
    if (c == '\\') return escape(/*in_class=*/false);
    if (c == '^' || c == '$') {
      fail(std::string("anchor '") + c + "' is supported only at the start ('^') or the end ('$')");
      return {};
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') {
      fail(std::string("quantifier '") + c + "' with nothing to repeat");
      return {};
    }
    // A literal character: its UTF-8 bytes, one after another.
    const auto lead = static_cast<unsigned char>(c);
    const size_t len = lead < 0x80 ? 1 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
    if (i_ + len > p_.size()) {
      fail("a truncated UTF-8 character");
      return {};
    }
    Re seq;
    seq.kind = Re::kConcat;
    for (size_t k = 0; k < len; ++k) {
      ByteSet s;
      s.set(static_cast<unsigned char>(p_[i_ + k]));
      seq.kids.push_back(of(s));
    }
    i_ += len;
    return len == 1 ? std::move(seq.kids[0]) : seq;
  }

  // After a backslash. In a class, \d \w \s stand for their sets too.
  Re escape(bool in_class) {
    ++i_;
    if (i_ >= p_.size()) {
      fail("a trailing backslash");
      return {};
    }
    const char c = p_[i_++];
    switch (c) {
      case 'd': return of(digits());
      case 'w': return of(word());
      case 's': return of(range(' ', ' '));
      case 'D': return of(printable() & ~digits());
      case 'W': return of(printable() & ~word());
      case 'S': return of(printable() & ~range(' ', ' '));
      case 'n': return of(range('\n', '\n'));
      case 't': return of(range('\t', '\t'));
      case 'r': return of(range('\r', '\r'));
      default: break;
    }
    if (std::string_view(".^$*+?()[]{}|\\/-&~#\"' !%,:;<=>@_`").find(c) != std::string_view::npos) {
      ByteSet s;
      s.set(static_cast<unsigned char>(c));
      return of(s);
    }
    fail(std::string("escape '\\") + c + "'" + (in_class ? " in a class" : "") + " is not supported");
    return {};
  }

  Re cls() {
    ++i_;  // '['
    bool negate = false;
    if (i_ < p_.size() && p_[i_] == '^') {
      negate = true;
      ++i_;
    }
    ByteSet s;
    bool first = true;
    while (error_.empty()) {
      if (i_ >= p_.size()) {
        fail("unbalanced '['");
        return {};
      }
      char c = p_[i_];
      if (c == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      if (c == '[' && i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
        fail("POSIX classes '[:...:]' are not supported");
        return {};
      }
      int lo;
      if (c == '\\') {
        Re e = escape(/*in_class=*/true);
        if (!error_.empty()) return {};
        if (e.set.count() != 1) {  // a set escape (\d, \w, ...): no range from it
          s |= e.set;
          continue;
        }
        lo = static_cast<int>(e.set._Find_first());
      } else {
        if (static_cast<unsigned char>(c) >= 0x80) {
          fail("a non-ASCII character in a class");
          return {};
        }
        lo = static_cast<unsigned char>(c);
        ++i_;
      }
      int hi = lo;
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        char h = p_[i_];
        if (h == '\\') {
          Re e = escape(/*in_class=*/true);
          if (!error_.empty()) return {};
          if (e.set.count() != 1) {
            fail("a class range that ends in a set escape");
            return {};
          }
          hi = static_cast<int>(e.set._Find_first());
        } else {
          if (static_cast<unsigned char>(h) >= 0x80) {
            fail("a non-ASCII character in a class");
            return {};
          }
          hi = static_cast<unsigned char>(h);
          ++i_;
        }
        if (hi < lo) {
          fail("a class range out of order");
          return {};
        }
      }
      s |= range(lo, hi);
    }
    // A negated class generates printable ASCII outside it.
    return of(negate ? printable() & ~s : s);
  }

  // An optional quantifier after `a`.
  void quantified(Re& a) {
    if (!more()) return;
    int32_t lo = 0, hi = 0;
    const char c = p_[i_];
    if (c == '?') {
      lo = 0, hi = 1;
    } else if (c == '*') {
      lo = 0, hi = -1;
    } else if (c == '+') {
      lo = 1, hi = -1;
    } else if (c == '{') {
      const size_t close = p_.find('}', i_);
      if (close == std::string_view::npos) {
        fail("unbalanced '{'");
        return;
      }
      const std::string_view body = p_.substr(i_ + 1, close - i_ - 1);
      const size_t comma = body.find(',');
      auto number = [&](std::string_view t, int32_t* out) {
        if (t.empty() || t.size() > 4) return false;
        int32_t v = 0;
        for (char d : t) {
          if (d < '0' || d > '9') return false;
          v = v * 10 + (d - '0');
        }
        *out = v;
        return true;
      };
      bool ok = comma == std::string_view::npos
                    ? number(body, &lo) && (hi = lo, true)
                    : number(body.substr(0, comma), &lo) &&
                          (comma + 1 == body.size() ? (hi = -1, true) : number(body.substr(comma + 1), &hi));
      if (!ok) {
        fail("quantifier '{" + std::string(body) + "}' must be {m}, {m,} or {m,n}");
        return;
      }
      if ((hi >= 0 && hi < lo) || lo > kMaxRepeat || hi > kMaxRepeat) {
        fail("quantifier '{" + std::string(body) + "}': m <= n <= " + std::to_string(kMaxRepeat) +
             " required");
        return;
      }
      i_ = close;
    } else {
      return;
    }
    ++i_;
    if (more() && p_[i_] == '?') ++i_;  // lazy: the same strings match
    if (more() && (p_[i_] == '+' || p_[i_] == '*' || p_[i_] == '?' || p_[i_] == '{')) {
      fail("a quantifier after a quantifier (possessive or nested) is not supported");
      return;
    }
    Re r;
    r.kind = Re::kRepeat;
    r.min = lo;
    r.max = hi;
    r.kids.push_back(std::move(a));
    a = std::move(r);
  }

  std::string_view p_;
  size_t i_ = 0;
  std::string error_;
};

// Thompson's construction: each state has epsilon edges and at most one byte-set edge.
struct Nfa {
  struct State {
    std::vector<int32_t> eps;
    ByteSet on;
    int32_t to = -1;
  };
  std::vector<State> states;
  bool overflow = false;

  int32_t add() {
    if (static_cast<int32_t>(states.size()) >= kMaxNfaStates) overflow = true;
    states.emplace_back();
    return static_cast<int32_t>(states.size()) - 1;
  }

  // A fragment from `s` to `e` for `re`.
  std::pair<int32_t, int32_t> build(const Re& re) {
    const int32_t s = add(), e = add();
    if (overflow) return {s, e};
    switch (re.kind) {
      case Re::kSet:
        states[s].on = re.set;
        states[s].to = e;
        break;
      case Re::kConcat: {
        int32_t cur = s;
        for (const Re& k : re.kids) {
          auto [ks, ke] = build(k);
          states[cur].eps.push_back(ks);
          cur = ke;
          if (overflow) break;
        }
        states[cur].eps.push_back(e);
        break;
      }
      case Re::kAlt:
        for (const Re& k : re.kids) {
          auto [ks, ke] = build(k);
          states[s].eps.push_back(ks);
          states[ke].eps.push_back(e);
          if (overflow) break;
        }
        break;
      case Re::kRepeat: {
        int32_t cur = s;
        for (int32_t i = 0; i < re.min && !overflow; ++i) {
          auto [ks, ke] = build(re.kids[0]);
          states[cur].eps.push_back(ks);
          cur = ke;
        }
        if (re.max < 0) {
          auto [ks, ke] = build(re.kids[0]);
          states[cur].eps.push_back(ks);
          states[cur].eps.push_back(e);
          states[ke].eps.push_back(ks);
          states[ke].eps.push_back(e);
        } else {
          for (int32_t i = re.min; i < re.max && !overflow; ++i) {
            auto [ks, ke] = build(re.kids[0]);
            states[cur].eps.push_back(ks);
            states[cur].eps.push_back(e);  // stop here
            cur = ke;
          }
          states[cur].eps.push_back(e);
        }
        break;
      }
    }
    return {s, e};
  }

  void closure(std::vector<int32_t>& set) const {
    std::vector<int32_t> stack = set;
    std::vector<bool> seen(states.size(), false);
    for (int32_t x : set) seen[x] = true;
    while (!stack.empty()) {
      const int32_t x = stack.back();
      stack.pop_back();
      for (int32_t y : states[x].eps) {
        if (!seen[y]) {
          seen[y] = true;
          set.push_back(y);
          stack.push_back(y);
        }
      }
    }
    std::sort(set.begin(), set.end());
  }
};

}  // namespace

bool ByteDfa::matches(std::string_view text) const {
  int32_t s = start();
  for (char c : text) {
    s = next(s, static_cast<uint8_t>(c));
    if (s == kDead) return false;
  }
  return accepting(s);
}

StatusOr<std::shared_ptr<const ByteDfa>> compile_regex(std::string_view pattern,
                                                       const RegexOptions& options) {
  if (pattern.size() > 4096) return invalid_argument("a pattern longer than 4096 bytes");
  NS_ASSIGN_OR_RETURN(Re re, Parser(pattern).parse());
  Nfa nfa;
  const auto [start, accept] = nfa.build(re);
  if (nfa.overflow) return invalid_argument("the pattern is too large (over 65536 automaton states)");

  ByteSet allowed;
  for (int b = 0; b < 256; ++b) {
    const bool control = b < 0x20 && b != '\n' && b != '\t' && b != '\r';
    allowed[b] = options.json_string ? (b >= 0x20 && b != '"' && b != '\\') : !control && b != 0;
  }

  // Subset construction over the bytes the decoder may produce.
  std::map<std::vector<int32_t>, int32_t> ids;
  std::vector<std::vector<int32_t>> sets;
  std::vector<int32_t> next;
  std::vector<int32_t> first{start};
  nfa.closure(first);
  ids.emplace(first, 0);
  sets.push_back(first);
  for (size_t d = 0; d < sets.size(); ++d) {
    next.resize((d + 1) * 256, ByteDfa::kDead);
    for (int b = 0; b < 256; ++b) {
      if (!allowed[b]) continue;
      std::vector<int32_t> to;
      for (int32_t x : sets[d]) {
        const Nfa::State& st = nfa.states[x];
        if (st.to >= 0 && st.on[b]) to.push_back(st.to);
      }
      if (to.empty()) continue;
      nfa.closure(to);
      auto [it, fresh] = ids.emplace(to, static_cast<int32_t>(sets.size()));
      if (fresh) {
        if (static_cast<int32_t>(sets.size()) >= ByteDfa::kMaxStates)
          return invalid_argument("the pattern is too complex (over " + std::to_string(ByteDfa::kMaxStates) +
                                  " DFA states)");
        sets.push_back(std::move(to));
      }
      next[d * 256 + b] = it->second;
    }
  }
  const auto n = static_cast<int32_t>(sets.size());
  auto dfa = std::make_shared<ByteDfa>();
  dfa->accepting_.assign(n, 0);
  for (int32_t d = 0; d < n; ++d)
    dfa->accepting_[d] = std::binary_search(sets[d].begin(), sets[d].end(), accept);

  // Keep only states that can still reach an accepting one: a walk never strands.
  std::vector<std::vector<int32_t>> into(n);
  for (int32_t d = 0; d < n; ++d)
    for (int b = 0; b < 256; ++b)
      if (const int32_t t = next[static_cast<size_t>(d) * 256 + b]; t >= 0) into[t].push_back(d);
  std::vector<uint8_t> live(n, 0);
  std::vector<int32_t> stack;
  for (int32_t d = 0; d < n; ++d)
    if (dfa->accepting_[d]) live[d] = 1, stack.push_back(d);
  while (!stack.empty()) {
    const int32_t t = stack.back();
    stack.pop_back();
    for (int32_t d : into[t])
      if (!live[d]) live[d] = 1, stack.push_back(d);
  }
  if (!live[0]) {
    return invalid_argument(options.json_string
                                ? "the pattern matches no string that can be written without escapes "
                                  "(a quote, backslash or control character is required)"
                                : "the pattern matches no string that can be generated");
  }
  dfa->continues_.assign(n, 0);
  for (size_t i = 0; i < next.size(); ++i) {
    if (next[i] >= 0 && !live[next[i]]) next[i] = ByteDfa::kDead;
    if (next[i] >= 0) dfa->continues_[i / 256] = 1;
  }
  dfa->next_ = std::move(next);
  return std::shared_ptr<const ByteDfa>(std::move(dfa));
}

std::string regex_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      if (std::string_view(".^$*+?()[]{}|\\/-").find(c) != std::string_view::npos) out += '\\';
      out += c;
    }
  }
  return out;
}

StatusOr<std::string> format_pattern(std::string_view format) {
  // Each stays inside what Python's checks accept: years from 1000, days up to 28 (valid in every
  // month), hours 00-23, no leading zero in an IPv4 octet, lowercase hex in a UUID.
  static const std::string kDate = "[1-9][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])";
  static const std::string kTime =
      "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
  static const std::string kOctet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  if (format == "date") return kDate;
  if (format == "time") return kTime;
  if (format == "date-time") return kDate + "T" + kTime;
  if (format == "email")
    return std::string(
        "[a-zA-Z0-9]([a-zA-Z0-9._+-]{0,30}[a-zA-Z0-9])?@[a-zA-Z0-9]([a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?"
        "(\\.[a-zA-Z]{2,10}){1,2}");
  if (format == "uuid") return std::string("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}");
  if (format == "ipv4") return kOctet + "(\\." + kOctet + "){3}";
  return not_found("unsupported format '" + std::string(format) +
                   "' (supported: date, date-time, time, email, uuid, ipv4)");
}

}  // namespace nanoserve::structured

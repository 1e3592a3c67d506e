#include "structured/json_automaton.h"

#include <cstring>
#include <utility>

#include "core/check.h"
#include "structured/json_number.h"

namespace nanoserve::structured {

namespace {

// kObject phases. count = index of the next declared property that may come;
// aux = the node of the value after the key just read.
enum : uint8_t { kObjOpen, kObjKeyNext, kObjColon, kObjAfterValue };
// kArray phases. count = elements so far (saturated at min when unbounded).
enum : uint8_t { kArrOpen, kArrNext, kArrAfterValue };
// kString / kKey utf8: low 2 bits = continuation bytes left; bits 2.. = range of the next one.
enum : uint8_t { kRangeFull, kRangeA0, kRange9F, kRange90, kRange8F };

bool is_ws(uint8_t b) {
  return b == ' ' || b == '\n' || b == '\t' || b == '\r';
}
bool is_digit(uint8_t b) {
  return b >= '0' && b <= '9';
}
bool is_hex(uint8_t b) {
  return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}

// The UTF-8 state after a lead byte, or 0xff when b cannot start a character.
// 0 for ASCII.
uint8_t utf8_lead(uint8_t b) {
  if (b < 0x80) return 0;
  if (b >= 0xC2 && b <= 0xDF) return 1;
  if (b == 0xE0) return 2 | (kRangeA0 << 2);
  if (b == 0xED) return 2 | (kRange9F << 2);
  if (b >= 0xE1 && b <= 0xEF) return 2;
  if (b == 0xF0) return 3 | (kRange90 << 2);
  if (b >= 0xF1 && b <= 0xF3) return 3;
  if (b == 0xF4) return 3 | (kRange8F << 2);
  return 0xff;
}

// The state after continuation byte b, or 0xff when b is not the one expected.
uint8_t utf8_next(uint8_t state, uint8_t b) {
  uint8_t lo = 0x80, hi = 0xBF;
  switch (state >> 2) {
    case kRangeA0: lo = 0xA0; break;
    case kRange9F: hi = 0x9F; break;
    case kRange90: lo = 0x90; break;
    case kRange8F: hi = 0x8F; break;
    default: break;
  }
  if (b < lo || b > hi) return 0xff;
  return static_cast<uint8_t>((state & 3) - 1);
}

bool literal_complete(const Grammar& g, const Frame& f) {
  const Node& n = g.nodes[f.node];
  for (size_t i = 0; i < n.literals.size(); ++i) {
    if ((f.bits >> i & 1) && n.literals[i].size() == static_cast<size_t>(f.count)) return true;
  }
  return false;
}

}  // namespace

// Steps one thread (a stack in a scratch buffer) over one byte; survivors are
// appended to the output state. Forks (anyOf) recurse on copies.
class ThreadStepper {
 public:
  ThreadStepper(const Grammar& g, JsonState& out) : g_(g), out_(out) {}

  void run(std::vector<Frame>& st, int32_t ws, uint8_t b) {
    while (true) {
      if (st.empty()) return;  // the value is complete: nothing may follow
      Frame& f = st.back();
      switch (f.kind) {
        case FrameKind::kValue: {
          if (is_ws(b)) return whitespace(st, ws);
          const Node& n = g_.nodes[f.node];
          if (n.kind == Kind::kAnyOf) {
            // anyOf nested in itself through $ref would fork forever, and nested
            // anyOfs multiply: both the depth and the count of forks per byte are bounded.
            if (forks_ >= kMaxForkDepth || ++fork_calls_ > kMaxForkCalls) return;
            const int32_t depth = containers(st);
            ++forks_;
            for (int32_t alt : n.alts) {
              if (!g_.fits(alt, depth)) continue;
              std::vector<Frame> copy = st;
              copy.back().node = alt;
              run(copy, ws, b);
            }
            --forks_;
            return;
          }
          const int32_t node = f.node;
          st.pop_back();
          if (!start_value(st, node, b)) return;
          if (st.back().kind == FrameKind::kNumber || st.back().kind == FrameKind::kLiteral) continue;
          return emit(st, 0);  // the opening byte was consumed
        }
        case FrameKind::kObject: return object(st, ws, b);
        case FrameKind::kArray: {
          if (is_ws(b)) return whitespace(st, ws);
          const Node& n = g_.nodes[f.node];
          const bool more = (n.max_len < 0 || f.count < n.max_len) && g_.fits(n.items, containers(st));
          if (f.phase == kArrAfterValue) {
            if (b == ',' && more) {
              f.phase = kArrNext;
              return emit(st, 0);
            }
            if (b == ']' && f.count >= n.min_len) {
              st.pop_back();
              return emit(st, 0);
            }
            return;
          }
          if (f.phase == kArrOpen && b == ']' && n.min_len == 0) {
            st.pop_back();
            return emit(st, 0);
          }
          if (!more) return;
          f.phase = kArrAfterValue;
          f.count = n.max_len < 0 ? std::min(f.count + 1, n.min_len) : f.count + 1;
          Frame v;
          v.kind = FrameKind::kValue;
          v.node = n.items;
          st.push_back(v);
          ws = 0;
          continue;  // the element's first byte
        }
        case FrameKind::kString: return string(st, b);
        case FrameKind::kKey: return key(st, b);
        case FrameKind::kLiteral: {
          const Node& n = g_.nodes[f.node];
          uint64_t live = 0;
          bool complete = false;
          for (size_t i = 0; i < n.literals.size(); ++i) {
            if (!(f.bits >> i & 1)) continue;
            const std::string& lit = n.literals[i];
            const size_t off = static_cast<size_t>(f.count);
            if (off < lit.size() && static_cast<uint8_t>(lit[off]) == b) live |= uint64_t{1} << i;
            if (off == lit.size()) complete = true;
          }
          if (live != 0) {
            f.bits = live;
            ++f.count;
            return emit(st, 0);
          }
          if (!complete) return;
          st.pop_back();
          continue;  // the literal ended before b: b belongs to the enclosing value
        }
        case FrameKind::kNumber: {
          if (number_step(g_, f, b)) return emit(st, 0);
          if (!number_complete(g_, f)) return;
          st.pop_back();
          continue;  // the number ended before b
        }
      }
    }
  }

 private:
  static int32_t containers(const std::vector<Frame>& st) {
    int32_t d = 0;
    for (const Frame& f : st) d += f.kind == FrameKind::kObject || f.kind == FrameKind::kArray;
    return d;
  }

  void emit(const std::vector<Frame>& st, int32_t ws) {
    JsonState& o = out_;
    const int32_t begin = o.ends_.empty() ? 0 : o.ends_.back();
    const int32_t size = static_cast<int32_t>(st.size());
    // Drop a thread identical to one already there (two anyOf branches that agree).
    for (size_t t = 0; t < o.ends_.size(); ++t) {
      const int32_t b = t == 0 ? 0 : o.ends_[t - 1];
      if (o.ends_[t] - b == size && o.ws_[t] == ws &&
          (size == 0 || std::memcmp(&o.frames_[b], st.data(), sizeof(Frame) * size) == 0))
        return;
    }
    if (static_cast<int32_t>(o.ws_.size()) >= JsonState::kMaxThreads) return;
    o.frames_.insert(o.frames_.end(), st.begin(), st.end());
    o.ends_.push_back(begin + size);
    o.ws_.push_back(ws);
  }

  void whitespace(const std::vector<Frame>& st, int32_t ws) {
    if (ws < kMaxWhitespace) emit(st, ws + 1);
  }

  // Pushes the frame that reads a value of `node` starting with b. For numbers
  // and literals b is not consumed yet (the caller feeds it); false: b cannot start one.
  bool start_value(std::vector<Frame>& st, int32_t node, uint8_t b) {
    const Node& n = g_.nodes[node];
    const int32_t depth = containers(st);
    Frame f;
    f.node = node;
    switch (n.kind) {
      case Kind::kAny:
        if (b == '{') return start_value(st, kAnyObjectNode, b);
        if (b == '[') return start_value(st, kAnyArrayNode, b);
        if (b == '"') return start_value(st, kAnyStringNode, b);
        if (b == '-' || is_digit(b)) return start_value(st, kAnyNumberNode, b);
        if (b == 't' || b == 'f') return start_value(st, kBoolNode, b);
        if (b == 'n') return start_value(st, kNullNode, b);
        return false;
      case Kind::kInteger:
      case Kind::kNumber:
        if (b != '-' && !is_digit(b)) return false;
        f.kind = FrameKind::kNumber;
        break;
      case Kind::kString:
        if (b != '"') return false;
        f.kind = FrameKind::kString;
        break;
      case Kind::kLiterals:
        f.kind = FrameKind::kLiteral;
        f.bits = n.literals.size() >= 64 ? ~uint64_t{0} : (uint64_t{1} << n.literals.size()) - 1;
        break;
      case Kind::kArray:
        if (b != '[' || !g_.fits(node, depth)) return false;
        f.kind = FrameKind::kArray;
        break;
      case Kind::kObject:
        if (b != '{' || !g_.fits(node, depth)) return false;
        f.kind = FrameKind::kObject;
        break;
      case Kind::kAnyOf: NS_CHECK(false) << "anyOf is expanded before its value starts";
    }
    st.push_back(f);
    return true;
  }

  // Declared properties a key may name now: from the next one up to and
  // including the first required one, those whose value fits.
  uint64_t key_window(const Frame& obj, int32_t depth) const {
    const Node& n = g_.nodes[obj.node];
    uint64_t w = 0;
    for (size_t i = static_cast<size_t>(obj.count); i < n.props.size(); ++i) {
      if (g_.fits(n.props[i].node, depth)) w |= uint64_t{1} << i;
      if (n.props[i].required) break;
    }
    return w;
  }

  bool required_left(const Frame& obj) const {
    const Node& n = g_.nodes[obj.node];
    for (size_t i = static_cast<size_t>(obj.count); i < n.props.size(); ++i)
      if (n.props[i].required) return true;
    return false;
  }

  bool other_keys(const Frame& obj, int32_t depth) const {
    const Node& n = g_.nodes[obj.node];
    return n.additional != kNoNode && g_.fits(n.additional, depth);
  }

  void object(std::vector<Frame>& st, int32_t ws, uint8_t b) {
    Frame& f = st.back();
    if (is_ws(b)) return whitespace(st, ws);
    const int32_t depth = containers(st);
    switch (f.phase) {
      case kObjOpen:
      case kObjKeyNext: {
        if (b == '}' && f.phase == kObjOpen && !required_left(f)) {
          st.pop_back();
          return emit(st, 0);
        }
        if (b != '"') return;
        Frame k;
        k.kind = FrameKind::kKey;
        k.node = f.node;
        k.count = 1;
        const size_t n_props = g_.nodes[f.node].props.size();
        k.bits = n_props >= 64 ? ~uint64_t{0} : (uint64_t{1} << n_props) - 1;
        k.bits2 = key_window(f, depth);
        k.esc = other_keys(f, depth);
        if (k.bits2 == 0 && !k.esc) return;
        st.push_back(k);
        return emit(st, 0);
      }
      case kObjColon: {
        if (b != ':') return;
        f.phase = kObjAfterValue;
        Frame v;
        v.kind = FrameKind::kValue;
        v.node = f.aux;
        st.push_back(v);
        return emit(st, 0);
      }
      case kObjAfterValue: {
        if (b == '}' && !required_left(f)) {
          st.pop_back();
          return emit(st, 0);
        }
        if (b == ',' && (key_window(f, depth) != 0 || other_keys(f, depth))) {
          f.phase = kObjKeyNext;
          return emit(st, 0);
        }
        return;
      }
      default: return;
    }
  }

  // Bytes of a string body, shared by values and other keys; false: refused.
  // len: code points so far, advanced when a character starts (and allowed by `room`).
  static bool string_byte(Frame& f, uint8_t b, bool room, bool escapes) {
    if ((f.utf8 & 3) != 0) {
      const uint8_t u = utf8_next(f.utf8, b);
      if (u == 0xff) return false;
      f.utf8 = u;
      return true;
    }
    if (f.esc != 0 && escapes) {
      switch (f.esc) {
        case 1:
          if (b == 'u') {
            f.esc = 2;
            return true;
          }
          if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' || b == 't') {
            f.esc = 0;
            return true;
          }
          return false;
        case 2:  // first hex digit: d/D would start a surrogate, which is refused
          if (!is_hex(b)) return false;
          f.esc = (b == 'd' || b == 'D') ? 6 : 3;
          return true;
        case 6:
          if (b < '0' || b > '7') return false;
          f.esc = 4;
          return true;
        case 3:
        case 4:
          if (!is_hex(b)) return false;
          ++f.esc;
          return true;
        case 5:
          if (!is_hex(b)) return false;
          f.esc = 0;
          return true;
        default: return false;
      }
    }
    if (b < 0x20 || b == '"') return false;
    if (b == '\\') {
      if (!escapes || !room) return false;
      f.esc = 1;
      return true;
    }
    const uint8_t u = utf8_lead(b);
    if (u == 0xff || !room) return false;
    f.utf8 = u;
    return true;
  }

  void string(std::vector<Frame>& st, uint8_t b) {
    Frame& f = st.back();
    const Node& n = g_.nodes[f.node];
    if (n.pattern != nullptr) {
      // count = the DFA's state; it only ever takes bytes that keep an accepting state in reach.
      if (b == '"') {
        if (!n.pattern->accepting(f.count)) return;
        st.pop_back();
        return emit(st, 0);
      }
      const int32_t next = n.pattern->next(f.count, b);
      if (next == ByteDfa::kDead) return;
      f.count = next;
      return emit(st, 0);
    }
    if (b == '"' && f.esc == 0 && (f.utf8 & 3) == 0) {
      if (f.count < n.min_len) return;
      st.pop_back();
      return emit(st, 0);
    }
    const bool starts_char = f.esc == 0 && (f.utf8 & 3) == 0;
    const bool room = n.max_len < 0 || f.count < n.max_len;
    if (!string_byte(f, b, room, /*escapes=*/true)) return;
    if (starts_char) f.count = n.max_len < 0 ? std::min(f.count + 1, n.min_len) : f.count + 1;
    emit(st, 0);
  }

  void key(std::vector<Frame>& st, uint8_t b) {
    Frame& f = st.back();
    const Node& obj = g_.nodes[f.node];
    const size_t off = static_cast<size_t>(f.count);
    if (b == '"' && (f.utf8 & 3) == 0) {
      // Any declared name that ends here is this key: its own property, or refused.
      for (size_t i = 0; i < obj.props.size(); ++i) {
        const std::string& k = obj.props[i].key;
        if (!(f.bits >> i & 1) || k.size() != off + 1 || k[off] != '"') continue;
        if (!(f.bits2 >> i & 1)) return;
        st.pop_back();
        Frame& parent = st.back();
        parent.aux = obj.props[i].node;
        parent.count = static_cast<int32_t>(i) + 1;
        parent.phase = kObjColon;
        return emit(st, 0);
      }
      if (!f.esc) return;
      st.pop_back();
      st.back().aux = obj.additional;
      st.back().phase = kObjColon;
      return emit(st, 0);
    }
    uint64_t live = 0;
    for (size_t i = 0; i < obj.props.size(); ++i) {
      const std::string& k = obj.props[i].key;
      if ((f.bits >> i & 1) && off < k.size() && static_cast<uint8_t>(k[off]) == b) live |= uint64_t{1} << i;
    }
    // Other keys carry no escapes, so a declared name is recognised by its bytes alone.
    bool other = f.esc && string_byte(f, b, /*room=*/true, /*escapes=*/false);
    if ((live & f.bits2) == 0 && !other) return;
    f.bits = live;
    f.esc = other;
    if (!other) f.utf8 = 0;
    // Once no declared name matches, the offset no longer matters: states recur.
    f.count = live != 0 ? f.count + 1 : 0;
    emit(st, 0);
  }

  static constexpr int kMaxForkDepth = 8;
  static constexpr int kMaxForkCalls = 256;

  const Grammar& g_;
  JsonState& out_;
  int forks_ = 0;
  int fork_calls_ = 0;
};

JsonState::JsonState(const Grammar* grammar) : g_(grammar) {
  NS_CHECK(g_ != nullptr && g_->root >= 0) << "a grammar without a root";
  Frame f;
  f.kind = FrameKind::kValue;
  f.node = g_->root;
  frames_.push_back(f);
  ends_.push_back(1);
  ws_.push_back(0);
}

bool JsonState::can_finish() const {
  for (size_t t = 0; t < ends_.size(); ++t) {
    const int32_t b = t == 0 ? 0 : ends_[t - 1];
    const int32_t size = ends_[t] - b;
    if (size == 0) return true;
    if (size != 1) continue;
    const Frame& f = frames_[b];
    if (f.kind == FrameKind::kNumber && number_complete(*g_, f)) return true;
    if (f.kind == FrameKind::kLiteral && literal_complete(*g_, f)) return true;
  }
  return false;
}

void JsonState::key(std::string& out) const {
  out.clear();
  const int32_t n = num_threads();
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out.append(reinterpret_cast<const char*>(ends_.data()), sizeof(int32_t) * ends_.size());
  out.append(reinterpret_cast<const char*>(ws_.data()), sizeof(int32_t) * ws_.size());
  out.append(reinterpret_cast<const char*>(frames_.data()), sizeof(Frame) * frames_.size());
}

bool JsonState::step(const JsonState& in, uint8_t byte, JsonState& out) {
  NS_CHECK(&in != &out) << "JsonState::step in place";
  out.g_ = in.g_;
  out.frames_.clear();
  out.ends_.clear();
  out.ws_.clear();
  ThreadStepper stepper(*in.g_, out);
  thread_local std::vector<Frame> work;
  for (size_t t = 0; t < in.ends_.size(); ++t) {
    const int32_t b = t == 0 ? 0 : in.ends_[t - 1];
    work.assign(in.frames_.begin() + b, in.frames_.begin() + in.ends_[t]);
    stepper.run(work, in.ws_[t], byte);
  }
  return !out.dead();
}

bool JsonState::feed(std::string_view bytes) {
  JsonState next(*this);
  for (char c : bytes) {
    if (!step(*this, static_cast<uint8_t>(c), next)) {
      frames_.clear();
      ends_.clear();
      ws_.clear();
      return false;
    }
    std::swap(frames_, next.frames_);
    std::swap(ends_, next.ends_);
    std::swap(ws_, next.ws_);
  }
  return true;
}

}  // namespace nanoserve::structured

#include "structured/json_number.h"

namespace nanoserve::structured {

namespace {

// kNumber phases. bits = magnitude of the integer part, esc = negative,
// count = integer digits, aux = fraction or exponent digits.
enum : uint8_t { kNumStart, kNumMinus, kNumZero, kNumInt, kNumDot, kNumFrac, kNumE, kNumESign, kNumExp };

bool is_digit(uint8_t b) {
  return b >= '0' && b <= '9';
}

int64_t pow10(int n) {
  int64_t p = 1;
  while (n-- > 0) p *= 10;
  return p;
}

bool int_in_range(const Node& n, const Frame& f) {
  const int64_t v = f.esc ? -static_cast<int64_t>(f.bits) : static_cast<int64_t>(f.bits);
  return v >= n.int_min && v <= n.int_max;
}

// Whether an integer part starting with magnitude m (digits so far) can still end in range.
bool int_viable(const Node& n, uint64_t m, int32_t digits, bool negative) {
  for (int j = 0; digits + j <= 15; ++j) {
    const int64_t p = pow10(j);
    const int64_t a = static_cast<int64_t>(m) * p, z = static_cast<int64_t>(m + 1) * p - 1;
    const int64_t lo = negative ? -z : a, hi = negative ? -a : z;
    if (hi >= n.int_min && lo <= n.int_max) return true;
    if (m == 0) break;  // a leading zero takes no more digits
  }
  return false;
}

bool fraction_allowed(const Node& n, const Frame& f) {
  if (n.kind != Kind::kNumber || !int_in_range(n, f)) return false;
  if (!n.bounded) return true;
  // Every value with this integer part must satisfy the bounds.
  const double m = static_cast<double>(f.bits);
  return f.esc ? -(m + 1) >= n.lo : m + 1 <= n.hi;
}

bool exponent_allowed(const Node& n, const Frame& f) {
  return n.kind == Kind::kNumber && !n.bounded && int_in_range(n, f);
}

}  // namespace

// Consumes b into the number when it continues it.
bool number_step(const Grammar& g, Frame& f, uint8_t b) {
  const Node& n = g.nodes[f.node];
  switch (f.phase) {
    case kNumStart:
      if (b == '-') {
        if (n.int_min > 0) return false;  // "-0" is still possible at 0
        f.esc = 1;
        f.phase = kNumMinus;
        return true;
      }
      [[fallthrough]];
    case kNumMinus: {
      if (!is_digit(b)) return false;
      if (b == '0') {  // "-0" is 0, as JSON parsers read it
        if (!(n.int_min <= 0 && 0 <= n.int_max)) return false;
        f.phase = kNumZero;
        f.count = 1;
        return true;
      }
      if (!int_viable(n, b - '0', 1, f.esc)) return false;
      f.bits = b - '0';
      f.count = 1;
      f.phase = kNumInt;
      return true;
    }
    case kNumZero:
    case kNumInt:
      if (is_digit(b) && f.phase == kNumInt) {
        const uint64_t m = f.bits * 10 + (b - '0');
        if (f.count >= 15 || !int_viable(n, m, f.count + 1, f.esc)) return false;
        f.bits = m;
        ++f.count;
        return true;
      }
      if (b == '.' && fraction_allowed(n, f)) {
        f.phase = kNumDot;
        return true;
      }
      if ((b == 'e' || b == 'E') && exponent_allowed(n, f)) {
        f.phase = kNumE;
        return true;
      }
      return false;
    case kNumDot:
      if (!is_digit(b)) return false;
      f.phase = kNumFrac;
      f.aux = 1;
      return true;
    case kNumFrac:
      if (is_digit(b)) {
        if (f.aux >= kMaxFracDigits) return false;
        ++f.aux;
        return true;
      }
      if ((b == 'e' || b == 'E') && exponent_allowed(n, f)) {
        f.phase = kNumE;
        f.aux = 0;
        return true;
      }
      return false;
    case kNumE:
      if (b == '+' || b == '-') {
        f.phase = kNumESign;
        return true;
      }
      [[fallthrough]];
    case kNumESign:
      if (!is_digit(b)) return false;
      f.phase = kNumExp;
      f.aux = 1;
      return true;
    case kNumExp:
      if (!is_digit(b) || f.aux >= kMaxExpDigits) return false;
      ++f.aux;
      return true;
    default: return false;
  }
}

bool number_complete(const Grammar& g, const Frame& f) {
  if (f.phase != kNumZero && f.phase != kNumInt && f.phase != kNumFrac && f.phase != kNumExp) return false;
  return int_in_range(g.nodes[f.node], f);
}

}  // namespace nanoserve::structured

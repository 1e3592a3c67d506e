#pragma once
// A JSON schema compiled into a graph of value nodes (docs/structured_output.md).
//
// Each node says what one JSON value may be. Containers refer to the nodes of
// their members by index, so $ref recursion is a cycle in the graph. The
// automaton (json_automaton.h) walks this graph byte by byte.
//
// Nodes 0..kNumFixedNodes-1 exist in every grammar: the generic value of
// json_object mode and of `{}`, and the pieces it is made of.

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "structured/regex.h"

namespace nanoserve::structured {

enum class Kind : uint8_t {
  kAny,       // any JSON value
  kInteger,   // digits in [int_min, int_max]
  kNumber,    // integer part in [int_min, int_max]; fraction / exponent as below
  kString,    // code points in [min_len, max_len], or the body `pattern` accepts
  kLiterals,  // one of `literals` (enum, const, true/false, null), byte for byte
  kArray,     // elements of `items`, count in [min_items, max_items]
  kObject,    // `props` in declared order, then keys of `additional` if any
  kAnyOf,     // one of `alts`
};

inline constexpr int32_t kAnyNode = 0;        // kAny
inline constexpr int32_t kBoolNode = 1;       // kLiterals true | false
inline constexpr int32_t kNullNode = 2;       // kLiterals null
inline constexpr int32_t kAnyStringNode = 3;  // kString, no bounds
inline constexpr int32_t kAnyNumberNode = 4;  // kNumber, no bounds
inline constexpr int32_t kAnyArrayNode = 5;   // kArray of kAny
inline constexpr int32_t kAnyObjectNode = 6;  // kObject, any keys, kAny values
inline constexpr int32_t kNumFixedNodes = 7;

inline constexpr int32_t kNoNode = -1;
inline constexpr int32_t kUnsatisfiable = std::numeric_limits<int32_t>::max();

// Limits that keep the automaton's state small and every number exact.
inline constexpr int32_t kMaxDepth = 16;                   // nested arrays / objects
inline constexpr int64_t kIntLimit = 999'999'999'999'999;  // 15 digits: exact in a double
inline constexpr int32_t kMaxFracDigits = 15;              // digits after the point
inline constexpr int32_t kMaxExpDigits = 2;                // exponent digits (unbounded numbers)
inline constexpr int32_t kMaxWhitespace = 16;              // whitespace run between tokens
inline constexpr size_t kMaxProperties = 64;               // per object (a 64-bit set)
inline constexpr size_t kMaxLiterals = 64;                 // per enum (a 64-bit set)
inline constexpr int32_t kMaxCount = 1 << 20;              // string length / item count bounds

struct Property {
  std::string key;  // the name as JSON text, quotes included: "\"name\""
  int32_t node = kNoNode;
  bool required = false;
};

struct Node {
  Kind kind = Kind::kAny;
  // kInteger, kNumber: the integer part's range. A fraction after integer
  // part p is allowed only when every p.xxx satisfies the bounds (bounded)
  // or always (unbounded, which also allows an exponent).
  int64_t int_min = -kIntLimit, int_max = kIntLimit;
  bool bounded = false;
  double lo = -std::numeric_limits<double>::infinity();  // kNumber: the schema's bounds,
  double hi = std::numeric_limits<double>::infinity();   // inclusive or exclusive alike
  // kString: code points; kArray: elements. max -1 = unbounded.
  int32_t min_len = 0, max_len = -1;
  // kString with `pattern` or `format`: the string's body (raw bytes, no escapes) walks this DFA.
  std::shared_ptr<const ByteDfa> pattern;
  std::vector<std::string> literals;  // kLiterals: canonical JSON texts
  int32_t items = kNoNode;            // kArray: element node
  std::vector<Property> props;        // kObject, in declared order
  int32_t additional = kNoNode;       // kObject: node of other keys' values, or kNoNode
  std::vector<int32_t> alts;          // kAnyOf
  // Nested containers needed to finish a value of this node (0 for scalars),
  // kUnsatisfiable when no value within kMaxDepth exists.
  int32_t min_depth = 0;
};

struct Grammar {
  std::vector<Node> nodes;  // nodes[0..kNumFixedNodes) as above
  int32_t root = kNoNode;

  // True when a value of `node` can start at container depth `depth` and finish.
  bool fits(int32_t node, int32_t depth) const {
    const int32_t d = nodes[node].min_depth;
    return d != kUnsatisfiable && depth + d <= kMaxDepth;
  }
};

// The grammar's fixed nodes, root unset.
Grammar base_grammar();
// Recomputes every node's min_depth (a fixpoint over the graph).
void compute_min_depth(Grammar& g);

}  // namespace nanoserve::structured

#pragma once
// The syntax tree of a parsed Jinja template (jinja_parser.cc builds it,
// jinja_render.cc walks it). Every node keeps the byte offset of its first
// token, for error positions.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/jinja_value.h"

namespace nanoserve::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,   // value
  kName,      // name
  kList,      // args
  kTuple,     // args
  kDict,      // args: key, value, key, value, ...
  kAttr,      // args[0].name
  kItem,      // args[0][args[1]]
  kSlice,     // args[0][args[1]:args[2]:args[3]] (null when omitted)
  kCall,      // args[0](args[1..], kwargs)
  kFilter,    // args[0] | name(args[1..], kwargs)
  kTest,      // args[0] is [not] name(args[1..]); negated
  kNot,       // not args[0]
  kNeg,       // -args[0]
  kPos,       // +args[0]
  kBinary,    // args[0] op args[1]: + - * / // % ** ~
  kAnd,       // args[0] and args[1]
  kOr,        // args[0] or args[1]
  kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...: == != < > <= >= in notin
  kCondition  // args[1] if args[0] else args[2] (args[2] null: undefined)
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  uint32_t pos = 0;
  Value value;
  std::string name;  // kName, kAttr, kFilter, kTest; kBinary: the operator
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  kText,         // text (the template's own)
  kPrint,        // {{ expr }}
  kIf,           // conds[k] guards bodies[k]; bodies.size() == conds.size() + 1 holds the else
  kFor,          // for targets in expr [if cond] : bodies[0], else bodies[1]
  kSet,          // targets (or target_ns.name) = expr
  kSetBlock,     // targets[0] = the rendered bodies[0]
  kMacro,        // macro name(params = defaults) : bodies[0]
  kFilterBlock,  // bodies[0] piped through filter (expr is a kFilter over a null argument)
  kBreak,
  kContinue,
  kBlock  // bodies[0] as is ({% generation %})
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  uint32_t pos = 0;
  std::string text;
  ExprPtr expr;                // kPrint, kFor (iterable), kSet (value), kFilterBlock
  ExprPtr cond;                // kFor: the loop filter
  std::vector<ExprPtr> conds;  // kIf
  std::vector<Body> bodies;
  std::vector<std::string> targets;  // kFor, kSet, kSetBlock; kMacro: parameter names
  std::string ns_attr;               // kSet: set targets[0].ns_attr = expr
  std::string name;                  // kMacro
  std::vector<ExprPtr> defaults;     // kMacro: one per parameter (null: required)
};

}  // namespace nanoserve::jinja

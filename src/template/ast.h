// Abstract syntax tree of a parsed template (parser.h builds it, interpreter.h runs it).
// One struct per layer (Expr, Stmt) with a kind tag; each node records its source position so
// runtime errors can name line:column. Trees are immutable after parsing and shared by renders.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace pagoda::tmpl {

enum class ExprKind {
  kConst,    // value
  kName,     // name
  kList,     // children = items
  kTuple,    // children = items
  kDict,     // children = key0, value0, key1, value1, ...
  kGetAttr,  // children[0] . name
  kGetItem,  // children[0] [ children[1] ]
  kSlice,    // children[0] [ children[1] : children[2] : children[3] ] (null = omitted)
  kCall,     // children[0] ( children[1..], kwargs )
  kFilter,   // children[0] | name ( children[1..], kwargs ); children[0] null in filter blocks
  kTest,     // children[0] is name ( children[1..], kwargs )
  kNeg,
  kPos,
  kNot,
  kAnd,
  kOr,
  kBinary,   // name = "+", "-", "*", "/", "//", "%", "**"
  kConcat,   // children joined with ~
  kCompare,  // children[0] ops[0] children[1] ops[1] children[2] ...
  kCond,     // children[1] if children[0] else children[2] (null: undefined)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kConst;
  SourcePos pos;
  Value value;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare: "==", "!=", "<", "<=", ">", ">=", "in", "notin"
};

enum class StmtKind {
  kOutput,       // text
  kPrint,        // expr
  kIf,           // conds[i] -> bodies[i], else_body
  kFor,          // targets in expr [if filter] body [else else_body]
  kSet,          // targets (or ns_name.ns_attr) = expr
  kSetBlock,     // targets = rendered body, piped through filter (a kFilter chain, may be null)
  kMacro,        // name(params = defaults) body
  kCallBlock,    // {% call(params) expr %} body: `caller` inside the called macro renders body
  kFilterBlock,  // {% filter f %} body: filter = kFilter chain with null innermost operand
  kBreak,
  kContinue,
  kWith,         // targets[i] = values[i] in a new scope around body
  kScope,        // body in place ({% generation %} from transformers)
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  StmtKind kind = StmtKind::kOutput;
  SourcePos pos;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  bool target_is_tuple = false;
  std::string ns_name, ns_attr;
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // aligned with params; null = no default
  std::vector<ExprPtr> values;
};

}  // namespace pagoda::tmpl

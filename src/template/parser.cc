#include "template/parser.h"

#include <fmt/format.h>

#include <initializer_list>

namespace pagoda::tmpl {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Body parse_root() {
    std::string end;
    Body body = parse_statements({}, &end);
    return body;
  }

 private:
  // --- token stream -------------------------------------------------------------------------
  const Token& cur() const { return toks_[i_]; }
  const Token& look(size_t k = 1) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
  void next() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool is_op(const char* op) const { return cur().type == TokenType::kOperator && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == TokenType::kName && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kName: return t.text;
      case TokenType::kOperator: return t.text;
      case TokenType::kString: return "string";
      case TokenType::kInteger: return "integer";
      case TokenType::kFloat: return "float";
      default: return token_type_name(t.type);
    }
  }

  [[noreturn]] void fail(const std::string& msg) const { throw_error_at(cur().pos, "syntax error: " + msg); }
  [[noreturn]] void fail_at(SourcePos pos, const std::string& msg) const { throw_error_at(pos, "syntax error: " + msg); }

  void expect_op(const char* op) {
    if (!skip_op(op)) fail(fmt::format("expected '{}', got '{}'", op, describe(cur())));
  }
  std::string expect_name() {
    if (cur().type != TokenType::kName) fail(fmt::format("expected a name, got '{}'", describe(cur())));
    std::string s = cur().text;
    next();
    return s;
  }
  void expect_block_end() {
    if (cur().type != TokenType::kBlockEnd)
      fail(fmt::format("expected end of statement block, got '{}'", describe(cur())));
    next();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p(p) {
      if (++p->depth_ > kMaxParseDepth)
        throw_error_at(p->cur().pos, fmt::format("template nesting deeper than {} levels", kMaxParseDepth),
                       StatusCode::kResourceExhausted);
    }
    ~DepthGuard() { --p->depth_; }
    Parser* p;
  };

  static ExprPtr make(ExprKind kind, SourcePos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // --- statements ---------------------------------------------------------------------------
  // Parses until one of `ends` opens a block tag (left current: the end name) or EOF.
  Body parse_statements(std::initializer_list<const char*> ends, std::string* found, SourcePos opened = {},
                        const char* opener = nullptr) {
    DepthGuard g(this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::kEof) {
        if (ends.size() == 0) return body;
        std::string names;
        for (const char* e : ends) names += (names.empty() ? "'" : " or '") + std::string(e) + "'";
        fail_at(t.pos, fmt::format("unexpected end of template; looking for {} to close '{}' opened at {}:{}", names,
                                   opener ? opener : "block", opened.line, opened.column));
      }
      if (t.type == TokenType::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->pos = t.pos;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
        continue;
      }
      if (t.type == TokenType::kVariableBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kPrint;
        s->pos = t.pos;
        s->expr = parse_tuple(true, {});
        if (cur().type != TokenType::kVariableEnd) fail(fmt::format("unexpected '{}'", describe(cur())));
        next();
        body.push_back(std::move(s));
        continue;
      }
      if (t.type != TokenType::kBlockBegin) fail(fmt::format("unexpected '{}'", describe(t)));
      SourcePos tag_pos = t.pos;
      next();
      if (cur().type != TokenType::kName) fail("tag name expected");
      for (const char* e : ends) {
        if (cur().text == e) {
          *found = e;
          next();
          return body;
        }
      }
      body.push_back(parse_statement(tag_pos));
    }
  }

  StmtPtr parse_statement(SourcePos pos) {
    std::string tag = cur().text;
    next();
    auto s = std::make_unique<Stmt>();
    s->pos = pos;
    std::string found;
    if (tag == "if") {
      s->kind = StmtKind::kIf;
      while (true) {
        s->conds.push_back(parse_tuple(false, {}));
        expect_block_end();
        s->bodies.push_back(parse_statements({"elif", "else", "endif"}, &found, pos, "if"));
        if (found == "elif") continue;
        if (found == "else") {
          expect_block_end();
          s->else_body = parse_statements({"endif"}, &found, pos, "if");
        }
        break;
      }
      expect_block_end();
    } else if (tag == "for") {
      s->kind = StmtKind::kFor;
      parse_targets(s.get(), /*for_loop=*/true);
      if (!skip_name("in")) fail(fmt::format("expected 'in', got '{}'", describe(cur())));
      s->expr = parse_tuple(false, {"recursive"});
      if (skip_name("if")) s->filter = parse_expression();
      if (is_name("recursive")) fail("recursive loops are not supported");
      expect_block_end();
      s->body = parse_statements({"endfor", "else"}, &found, pos, "for");
      if (found == "else") {
        expect_block_end();
        s->else_body = parse_statements({"endfor"}, &found, pos, "for");
      }
      expect_block_end();
    } else if (tag == "set") {
      if (cur().type == TokenType::kName && look().type == TokenType::kOperator && look().text == "." &&
          look(2).type == TokenType::kName) {
        s->ns_name = cur().text;
        next();
        next();
        s->ns_attr = cur().text;
        next();
      } else {
        parse_targets(s.get(), false);
      }
      if (skip_op("=")) {
        s->kind = StmtKind::kSet;
        s->expr = parse_tuple(true, {});
        expect_block_end();
      } else {
        if (!s->ns_name.empty() || s->target_is_tuple) fail("block set needs a single name target");
        s->kind = StmtKind::kSetBlock;
        if (is_op("|")) s->filter = parse_filter_chain(nullptr, false);
        expect_block_end();
        s->body = parse_statements({"endset"}, &found, pos, "set");
        expect_block_end();
      }
    } else if (tag == "macro") {
      s->kind = StmtKind::kMacro;
      s->name = expect_name();
      parse_signature(s.get());
      expect_block_end();
      s->body = parse_statements({"endmacro"}, &found, pos, "macro");
      expect_block_end();
    } else if (tag == "call") {
      s->kind = StmtKind::kCallBlock;
      if (is_op("(")) parse_signature(s.get());
      s->expr = parse_expression();
      if (s->expr->kind != ExprKind::kCall) fail_at(s->expr->pos, "expected call");
      expect_block_end();
      s->body = parse_statements({"endcall"}, &found, pos, "call");
      expect_block_end();
    } else if (tag == "filter") {
      s->kind = StmtKind::kFilterBlock;
      s->filter = parse_filter_chain(nullptr, true);
      expect_block_end();
      s->body = parse_statements({"endfilter"}, &found, pos, "filter");
      expect_block_end();
    } else if (tag == "break" || tag == "continue") {
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      expect_block_end();
    } else if (tag == "with") {
      s->kind = StmtKind::kWith;
      while (cur().type != TokenType::kBlockEnd) {
        if (!s->targets.empty()) expect_op(",");
        s->targets.push_back(expect_name());
        expect_op("=");
        s->values.push_back(parse_expression());
      }
      expect_block_end();
      s->body = parse_statements({"endwith"}, &found, pos, "with");
      expect_block_end();
    } else if (tag == "generation") {
      s->kind = StmtKind::kScope;
      expect_block_end();
      s->body = parse_statements({"endgeneration"}, &found, pos, "generation");
      expect_block_end();
    } else {
      fail_at(pos, fmt::format("encountered unknown tag '{}'", tag));
    }
    return s;
  }

  // Names (optionally a tuple, optionally parenthesised) for for/set targets.
  void parse_targets(Stmt* s, bool for_loop) {
    bool paren = skip_op("(");
    while (true) {
      s->targets.push_back(expect_name());
      if (!skip_op(",")) break;
      s->target_is_tuple = true;
      if (paren && is_op(")")) break;
      if (!paren && for_loop && is_name("in")) break;
      if (!paren && !for_loop && (is_op("=") || cur().type == TokenType::kBlockEnd)) break;
    }
    if (paren) {
      expect_op(")");
      if (s->targets.size() > 1) s->target_is_tuple = true;
    }
  }

  void parse_signature(Stmt* s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (is_op(")")) break;
      s->params.push_back(expect_name());
      if (skip_op("=")) {
        s->defaults.push_back(parse_expression());
      } else {
        bool any_default = false;
        for (const auto& d : s->defaults) any_default = any_default || d != nullptr;
        if (any_default) fail("non-default argument follows default argument");
        s->defaults.push_back(nullptr);
      }
    }
    expect_op(")");
  }

  // --- expressions --------------------------------------------------------------------------
  bool is_tuple_end(std::initializer_list<const char*> extra) const {
    const Token& t = cur();
    if (t.type == TokenType::kVariableEnd || t.type == TokenType::kBlockEnd || t.type == TokenType::kEof) return true;
    if (t.type == TokenType::kOperator && t.text == ")") return true;
    for (const char* e : extra)
      if (t.type == TokenType::kName && t.text == e) return true;
    return false;
  }

  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<const char*> extra_end,
                      bool explicit_parens = false) {
    SourcePos pos = cur().pos;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(with_condexpr ? parse_expression() : parse_or());
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail(fmt::format("expected an expression, got '{}'", describe(cur())));
    }
    auto e = make(ExprKind::kTuple, pos);
    e->children = std::move(items);
    return e;
  }

  ExprPtr parse_expression() { return parse_condexpr(); }

  ExprPtr parse_condexpr() {
    DepthGuard g(this);
    ExprPtr expr1 = parse_or();
    while (is_name("if")) {
      SourcePos pos = cur().pos;
      next();
      ExprPtr cond = parse_or();
      ExprPtr expr3;
      if (skip_name("else")) expr3 = parse_condexpr();
      auto e = make(ExprKind::kCond, pos);
      e->children.push_back(std::move(cond));
      e->children.push_back(std::move(expr1));
      e->children.push_back(std::move(expr3));
      expr1 = std::move(e);
    }
    return expr1;
  }

  ExprPtr binary(ExprKind kind, SourcePos pos, ExprPtr l, ExprPtr r, std::string op = {}) {
    auto e = make(kind, pos);
    e->name = std::move(op);
    e->children.push_back(std::move(l));
    e->children.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      SourcePos pos = cur().pos;
      next();
      left = binary(ExprKind::kOr, pos, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      SourcePos pos = cur().pos;
      next();
      left = binary(ExprKind::kAnd, pos, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard g(this);
      auto e = make(ExprKind::kNot, cur().pos);
      next();
      e->children.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    SourcePos pos = cur().pos;
    ExprPtr expr = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> operands;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::kOperator &&
          (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == "<=" || t.text == ">" || t.text == ">=")) {
        ops.push_back(t.text);
        next();
      } else if (is_name("in")) {
        ops.push_back("in");
        next();
      } else if (is_name("not") && look().type == TokenType::kName && look().text == "in") {
        ops.push_back("notin");
        next();
        next();
      } else {
        break;
      }
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return expr;
    auto e = make(ExprKind::kCompare, pos);
    e->children.push_back(std::move(expr));
    for (auto& o : operands) e->children.push_back(std::move(o));
    e->ops = std::move(ops);
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      SourcePos pos = cur().pos;
      next();
      left = binary(ExprKind::kBinary, pos, std::move(left), parse_concat(), op);
    }
    return left;
  }

  ExprPtr parse_concat() {
    SourcePos pos = cur().pos;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make(ExprKind::kConcat, pos);
    e->children.push_back(std::move(first));
    while (skip_op("~")) e->children.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      SourcePos pos = cur().pos;
      next();
      left = binary(ExprKind::kBinary, pos, std::move(left), parse_pow(), op);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      SourcePos pos = cur().pos;
      next();
      left = binary(ExprKind::kBinary, pos, std::move(left), parse_unary(true), "**");
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard g(this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      auto e = make(is_op("-") ? ExprKind::kNeg : ExprKind::kPos, cur().pos);
      next();
      e->children.push_back(parse_unary(false));
      node = std::move(e);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    SourcePos pos = t.pos;
    if (t.type == TokenType::kName) {
      auto e = make(ExprKind::kConst, pos);
      if (t.text == "true" || t.text == "True") {
        e->value = Value::boolean(true);
      } else if (t.text == "false" || t.text == "False") {
        e->value = Value::boolean(false);
      } else if (t.text == "none" || t.text == "None") {
        e->value = Value::none();
      } else {
        e->kind = ExprKind::kName;
        e->name = t.text;
      }
      next();
      return e;
    }
    if (t.type == TokenType::kString) {
      std::string s;
      while (cur().type == TokenType::kString) {
        s += cur().text;
        next();
      }
      auto e = make(ExprKind::kConst, pos);
      e->value = Value::string(std::move(s));
      return e;
    }
    if (t.type == TokenType::kInteger || t.type == TokenType::kFloat) {
      auto e = make(ExprKind::kConst, pos);
      e->value = t.type == TokenType::kInteger ? Value::integer(t.int_value) : Value::number(t.float_value);
      next();
      return e;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto e = make(ExprKind::kList, pos);
      while (!is_op("]")) {
        if (!e->children.empty()) expect_op(",");
        if (is_op("]")) break;
        e->children.push_back(parse_expression());
      }
      expect_op("]");
      return e;
    }
    if (is_op("{")) {
      next();
      auto e = make(ExprKind::kDict, pos);
      while (!is_op("}")) {
        if (!e->children.empty()) expect_op(",");
        if (is_op("}")) break;
        e->children.push_back(parse_expression());
        expect_op(":");
        e->children.push_back(parse_expression());
      }
      expect_op("}");
      return e;
    }
    fail(fmt::format("unexpected '{}'", describe(t)));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter_chain(std::move(node), false);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    SourcePos pos = cur().pos;
    if (skip_op(".")) {
      if (cur().type == TokenType::kName) {
        auto e = make(ExprKind::kGetAttr, pos);
        e->name = cur().text;
        next();
        e->children.push_back(std::move(node));
        return e;
      }
      if (cur().type != TokenType::kInteger) fail("expected name or number");
      auto e = make(ExprKind::kGetItem, pos);
      auto idx = make(ExprKind::kConst, cur().pos);
      idx->value = Value::integer(cur().int_value);
      next();
      e->children.push_back(std::move(node));
      e->children.push_back(std::move(idx));
      return e;
    }
    expect_op("[");
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    if (args.empty()) fail_at(pos, "expected subscript expression");
    if (args.size() == 1 && args[0]->kind == ExprKind::kSlice) {
      args[0]->children.insert(args[0]->children.begin(), std::move(node));
      args[0]->pos = pos;
      return std::move(args[0]);
    }
    auto e = make(ExprKind::kGetItem, pos);
    e->children.push_back(std::move(node));
    if (args.size() == 1) {
      e->children.push_back(std::move(args[0]));
    } else {
      auto t = make(ExprKind::kTuple, pos);
      for (auto& a : args) {
        if (a->kind == ExprKind::kSlice) fail_at(pos, "multi-dimensional slices are not supported");
        t->children.push_back(std::move(a));
      }
      e->children.push_back(std::move(t));
    }
    return e;
  }

  // An index expression or a slice (returned as kSlice with children start, stop, step).
  ExprPtr parse_subscribed() {
    SourcePos pos = cur().pos;
    std::vector<ExprPtr> parts;
    if (is_op(":")) {
      next();
      parts.push_back(nullptr);
    } else {
      ExprPtr node = parse_expression();
      if (!is_op(":")) return node;
      next();
      parts.push_back(std::move(node));
    }
    if (is_op(":")) {
      parts.push_back(nullptr);
    } else if (!is_op("]") && !is_op(",")) {
      parts.push_back(parse_expression());
    } else {
      parts.push_back(nullptr);
    }
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(","))
        parts.push_back(parse_expression());
      else
        parts.push_back(nullptr);
    } else {
      parts.push_back(nullptr);
    }
    auto e = make(ExprKind::kSlice, pos);
    e->children = std::move(parts);
    return e;
  }

  void parse_call_args(Expr* e) {
    SourcePos pos = cur().pos;
    expect_op("(");
    bool need_comma = false;
    while (!is_op(")")) {
      if (need_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      if (cur().type == TokenType::kName && look().type == TokenType::kOperator && look().text == "=") {
        std::string key = cur().text;
        next();
        next();
        e->kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!e->kwargs.empty()) fail_at(pos, "invalid syntax for function call expression");
        e->children.push_back(parse_expression());
      }
      need_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(ExprKind::kCall, callee->pos);  // errors point at what is called
    e->children.push_back(std::move(callee));
    parse_call_args(e.get());
    return e;
  }

  // `| name(args) | name2 ...`; with `inline_start` the first `|` is absent (filter blocks).
  ExprPtr parse_filter_chain(ExprPtr node, bool inline_start) {
    while (is_op("|") || inline_start) {
      if (!inline_start) next();
      inline_start = false;
      SourcePos pos = cur().pos;
      std::string name = expect_name();
      while (skip_op(".")) {
        name += '.';
        name += expect_name();
      }
      auto e = make(ExprKind::kFilter, pos);
      e->name = std::move(name);
      e->children.push_back(std::move(node));
      if (is_op("(")) parse_call_args(e.get());
      node = std::move(e);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    SourcePos pos = cur().pos;
    next();  // 'is'
    bool negated = skip_name("not");
    std::string name = expect_name();
    while (skip_op(".")) {
        name += '.';
        name += expect_name();
      }
    auto e = make(ExprKind::kTest, pos);
    e->name = std::move(name);
    e->children.push_back(std::move(node));
    const Token& t = cur();
    if (is_op("(")) {
      parse_call_args(e.get());
    } else if ((t.type == TokenType::kName || t.type == TokenType::kString || t.type == TokenType::kInteger ||
                t.type == TokenType::kFloat || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("you cannot chain multiple tests with is");
      e->children.push_back(parse_postfix(parse_primary()));
    }
    if (!negated) return e;
    auto n = make(ExprKind::kNot, pos);
    n->children.push_back(std::move(e));
    return n;
  }

  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse_template(std::string_view source, const LexerOptions& options) {
  if (source.size() > kMaxTemplateBytes)
    throw_error(fmt::format("the template is {} bytes; at most {} are accepted", source.size(), kMaxTemplateBytes),
                StatusCode::kInvalidArgument);
  return Parser(tokenize(source, options)).parse_root();
}

}  // namespace pagoda::tmpl

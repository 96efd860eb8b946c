#include "template/interpreter.h"

#include <fmt/format.h>

#include "template/builtins.h"
#include "template/unicode.h"

namespace pagoda::tmpl {

void check_namespace_attribute(const std::string& name);  // globals.cc

const Value* Scope::lookup(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

struct Interpreter::CallDepthGuard {
  explicit CallDepthGuard(Interpreter* in) : in(in) {
    if (++in->call_depth_ > in->limits_.max_call_depth)
      throw_error(fmt::format("macro calls nested deeper than {}", in->limits_.max_call_depth),
                  StatusCode::kResourceExhausted);
  }
  ~CallDepthGuard() { --in->call_depth_; }
  Interpreter* in;
};

namespace {

bool expr_references(const Expr* e, const std::string& name);

bool body_references(const Body& body, const std::string& name) {
  for (const auto& s : body) {
    if (expr_references(s->expr.get(), name) || expr_references(s->filter.get(), name)) return true;
    for (const auto& c : s->conds)
      if (expr_references(c.get(), name)) return true;
    for (const auto& c : s->values)
      if (expr_references(c.get(), name)) return true;
    for (const auto& c : s->defaults)
      if (expr_references(c.get(), name)) return true;
    for (const auto& b : s->bodies)
      if (body_references(b, name)) return true;
    if (body_references(s->body, name) || body_references(s->else_body, name)) return true;
  }
  return false;
}

bool expr_references(const Expr* e, const std::string& name) {
  if (!e) return false;
  if (e->kind == ExprKind::kName && e->name == name) return true;
  for (const auto& c : e->children)
    if (expr_references(c.get(), name)) return true;
  for (const auto& kv : e->kwargs)
    if (expr_references(kv.second.get(), name)) return true;
  return false;
}

}  // namespace

std::tm Interpreter::now() const {
  if (now_) return *now_;
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm;
}

void Interpreter::step(uint64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps)
    throw_error(fmt::format("template exceeded {} evaluation steps", limits_.max_steps), StatusCode::kResourceExhausted);
}

void Interpreter::check_string_size(size_t bytes) const {
  if (bytes > limits_.max_output_bytes)
    throw_error(fmt::format("string of {} bytes exceeds the limit of {} bytes", bytes, limits_.max_output_bytes),
                StatusCode::kResourceExhausted);
}

void Interpreter::check_items(size_t n) const {
  if (n > limits_.max_items)
    throw_error(fmt::format("list of {} items exceeds the limit of {} items", n, limits_.max_items),
                StatusCode::kResourceExhausted);
}

void Interpreter::append(std::string* out, const std::string& s) {
  check_string_size(out->size() + s.size());
  out->append(s);
}

std::string Interpreter::render(const Body& body, const ScopePtr& root) {
  std::string out;
  exec_body(body, root, &out);
  return out;
}

Interpreter::Flow Interpreter::exec_body(const Body& body, const ScopePtr& scope, std::string* out) {
  for (const auto& s : body) {
    Flow f = exec(*s, scope, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const ScopePtr& scope, std::string* out) {
  step();
  try {
    switch (s.kind) {
      case StmtKind::kOutput: append(out, s.text); break;
      case StmtKind::kPrint: append(out, to_str(eval(*s.expr, scope))); break;
      case StmtKind::kIf:
        for (size_t i = 0; i < s.conds.size(); ++i)
          if (truthy(eval(*s.conds[i], scope))) return exec_body(s.bodies[i], scope, out);
        return exec_body(s.else_body, scope, out);
      case StmtKind::kFor: exec_for(s, scope, out); break;
      case StmtKind::kSet: {
        Value v = eval(*s.expr, scope);
        if (!s.ns_name.empty()) {
          const Value* ns = scope->lookup(s.ns_name);
          if (!ns || ns->is_undefined()) throw_error(fmt::format("'{}' is undefined", s.ns_name));
          if (!ns->is_namespace()) throw_error("cannot assign attribute on non-namespace object");
          check_namespace_attribute(s.ns_attr);
          if (v.has_namespace()) throw_error("storing a namespace inside a namespace is not supported");
          ns->as_dict().set(Value::string(s.ns_attr), std::move(v));
        } else {
          assign_targets(s, v, scope.get());
        }
        break;
      }
      case StmtKind::kSetBlock: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        std::string buf;
        exec_body(s.body, inner, &buf);
        Value v = Value::string(std::move(buf));
        if (s.filter) v = eval_filter_chain(*s.filter, scope, &v);
        assign_targets(s, v, scope.get());
        break;
      }
      case StmtKind::kMacro: scope->vars[s.name] = make_macro(s, scope); break;
      case StmtKind::kCallBlock: {
        const Expr& call = *s.expr;
        Value fn = eval(*call.children[0], scope);
        CallArgs args;
        eval_args(call, 1, scope, &args);
        args.kwargs.emplace_back("caller", make_macro(s, scope, &s));
        append(out, to_str(this->call(fn, args, call.pos)));
        break;
      }
      case StmtKind::kFilterBlock: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        std::string buf;
        exec_body(s.body, inner, &buf);
        Value v = Value::string(std::move(buf));
        append(out, to_str(eval_filter_chain(*s.filter, scope, &v)));
        break;
      }
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
      case StmtKind::kWith: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        for (size_t i = 0; i < s.targets.size(); ++i) inner->vars[s.targets[i]] = eval(*s.values[i], scope);
        return exec_body(s.body, inner, out);
      }
      case StmtKind::kScope: return exec_body(s.body, scope, out);
    }
  } catch (TemplateException& e) {
    if (e.pos.line == 0) e.pos = s.pos;
    throw;
  }
  return Flow::kNormal;
}

void Interpreter::assign_targets(const Stmt& s, const Value& v, Scope* scope) {
  if (!s.target_is_tuple) {
    scope->vars[s.targets[0]] = v;
    return;
  }
  std::vector<Value> items = iterate(v);
  if (items.size() > s.targets.size())
    throw_error(fmt::format("too many values to unpack (expected {})", s.targets.size()));
  if (items.size() < s.targets.size())
    throw_error(fmt::format("not enough values to unpack (expected {}, got {})", s.targets.size(), items.size()));
  for (size_t i = 0; i < items.size(); ++i) scope->vars[s.targets[i]] = items[i];
}

void Interpreter::exec_for(const Stmt& s, const ScopePtr& scope, std::string* out) {
  Value seq = eval(*s.expr, scope);
  if (seq.is_none() || seq.is_number() || seq.is_function() || seq.is_namespace())
    throw_error(fmt::format("'{}' object is not iterable", type_name(seq)));
  std::vector<Value> items = iterate(seq);
  if (s.filter) {
    std::vector<Value> kept;
    for (auto& item : items) {
      step();
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      assign_targets(s, item, probe.get());
      if (truthy(eval(*s.filter, probe))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  if (n == 0) {
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    exec_body(s.else_body, inner, out);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    step();
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    assign_targets(s, items[i], inner.get());
    std::vector<std::pair<Value, Value>> loop = {
        {Value::string("index"), Value::integer(i + 1)},
        {Value::string("index0"), Value::integer(i)},
        {Value::string("revindex"), Value::integer(n - i)},
        {Value::string("revindex0"), Value::integer(n - i - 1)},
        {Value::string("first"), Value::boolean(i == 0)},
        {Value::string("last"), Value::boolean(i == n - 1)},
        {Value::string("length"), Value::integer(n)},
        {Value::string("depth"), Value::integer(1)},
        {Value::string("depth0"), Value::integer(0)},
    };
    if (i > 0) loop.emplace_back(Value::string("previtem"), items[i - 1]);
    if (i + 1 < n) loop.emplace_back(Value::string("nextitem"), items[i + 1]);
    loop.emplace_back(Value::string("cycle"), Value::function("cycle", [i](Interpreter&, CallArgs& a) -> Value {
                        if (a.args.empty()) throw_error("no items for cycling given");
                        return a.args[static_cast<size_t>(i) % a.args.size()];
                      }));
    inner->vars["loop"] = Value::dict(std::move(loop));
    Flow f = exec_body(s.body, inner, out);
    if (f == Flow::kBreak) break;
  }
}

Value Interpreter::make_macro(const Stmt& s, const ScopePtr& scope, const Stmt* caller_of) {
  const Stmt* def = &s;
  std::string name = caller_of ? "caller" : s.name;
  bool uses_varargs = body_references(s.body, "varargs");
  bool uses_kwargs = body_references(s.body, "kwargs");
  bool uses_caller = body_references(s.body, "caller");
  std::weak_ptr<Scope> weak = scope;
  return Value::function(name, [=](Interpreter& in, CallArgs& args) -> Value {
    CallDepthGuard guard(&in);
    ScopePtr parent = weak.lock();
    if (!parent) throw_error(fmt::format("macro '{}' was called after its defining scope ended", name));
    auto sc = std::make_shared<Scope>();
    sc->parent = parent;
    const size_t np = def->params.size();
    std::vector<bool> set(np, false);
    std::vector<Value> extra;
    for (size_t i = 0; i < args.args.size(); ++i) {
      if (i < np) {
        sc->vars[def->params[i]] = args.args[i];
        set[i] = true;
      } else {
        extra.push_back(args.args[i]);
      }
    }
    if (!extra.empty() && !uses_varargs)
      throw_error(fmt::format("macro '{}' takes not more than {} argument(s)", name, np));
    std::vector<std::pair<Value, Value>> kw;
    for (auto& [k, v] : args.kwargs) {
      size_t idx = np;
      for (size_t i = 0; i < np; ++i)
        if (def->params[i] == k) idx = i;
      if (idx < np) {
        if (set[idx]) throw_error(fmt::format("macro '{}' got multiple values for argument '{}'", name, k));
        sc->vars[k] = v;
        set[idx] = true;
      } else if (k == "caller" && (uses_caller || caller_of == nullptr)) {
        sc->vars["caller"] = v;
      } else if (uses_kwargs) {
        kw.emplace_back(Value::string(k), v);
      } else {
        throw_error(fmt::format("macro '{}' takes no keyword argument '{}'", name, k));
      }
    }
    for (size_t i = 0; i < np; ++i) {
      if (set[i]) continue;
      if (def->defaults[i])
        sc->vars[def->params[i]] = in.eval(*def->defaults[i], sc);
      else
        sc->vars[def->params[i]] = Value::undefined(fmt::format("'{}' is undefined", def->params[i]));
    }
    if (uses_varargs) sc->vars["varargs"] = Value::list(std::move(extra), true);
    if (uses_kwargs) sc->vars["kwargs"] = Value::dict(std::move(kw));
    std::string buf;
    in.exec_body(def->body, sc, &buf);
    return Value::string(std::move(buf));
  });
}

Value Interpreter::call(const Value& fn, CallArgs& args, SourcePos pos) {
  if (fn.is_undefined()) throw_error(fn.undefined_hint());
  if (!fn.is_function()) throw_error(fmt::format("'{}' object is not callable", type_name(fn)));
  args.pos = pos;
  return fn.as_function().fn(*this, args);
}

Value Interpreter::get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) throw_error(obj.undefined_hint());
  if (obj.is_namespace()) {
    const Value* v = obj.as_dict().find(name);
    if (v) return *v;
    return Value::undefined(fmt::format("'Namespace object' has no attribute '{}'", name));
  }
  if (auto m = find_method(obj, name)) return *m;
  if (obj.is_dict()) {
    const Value* v = obj.as_dict().find(name);
    if (v) return *v;
  }
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(obj), name));
}

Value Interpreter::get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) throw_error(obj.undefined_hint());
  auto missing = [&]() {
    if (key.is_string()) {
      if (auto m = find_method(obj, key.as_string())) return *m;
      return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(obj), key.as_string()));
    }
    return Value::undefined(fmt::format("{} has no element {}", object_type_repr(obj), repr(key)));
  };
  if (obj.is_dict()) {
    if (obj.is_namespace()) return key.is_string() ? get_attr(obj, key.as_string()) : missing();
    if (key.is_list() && !key.is_tuple()) return missing();
    if (key.is_dict() || key.is_function() || key.is_undefined()) return missing();
    const Value* v = obj.as_dict().find(key);
    return v ? *v : missing();
  }
  if ((obj.is_sequence() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.to_int();
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return missing();
      return obj.items()[static_cast<size_t>(i)];
    }
    const std::string& s = obj.as_string();
    if (is_ascii(s)) {
      int64_t n = static_cast<int64_t>(s.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return missing();
      return Value::string(std::string(1, s[static_cast<size_t>(i)]));
    }
    auto cps = utf8_decode(s);
    int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return missing();
    std::string out;
    utf8_append(&out, cps[static_cast<size_t>(i)]);
    return Value::string(std::move(out));
  }
  return missing();
}

namespace {

// Python slice indices for a sequence of length n (start/stop/step may be none).
std::vector<int64_t> slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step) {
  auto as_index = [](const Value& v, const char* what) -> int64_t {
    if (v.is_int() || v.is_bool()) return v.to_int();
    throw_error(fmt::format("slice {} must be an integer or None, not '{}'", what, type_name(v)));
  };
  int64_t st = step.is_none() ? 1 : as_index(step, "step");
  if (st == 0) throw_error("slice step cannot be zero");
  int64_t lo, hi;
  if (st > 0) {
    lo = start.is_none() ? 0 : as_index(start, "start");
    hi = stop.is_none() ? n : as_index(stop, "stop");
    if (lo < 0) lo = std::max<int64_t>(0, lo + n);
    if (hi < 0) hi = std::max<int64_t>(0, hi + n);
    lo = std::min(lo, n);
    hi = std::min(hi, n);
  } else {
    lo = start.is_none() ? n - 1 : as_index(start, "start");
    hi = stop.is_none() ? -1 : as_index(stop, "stop");
    if (!start.is_none()) {
      if (lo < 0) lo += n;
      if (lo < 0) lo = -1;
      if (lo >= n) lo = n - 1;
    }
    if (!stop.is_none()) {
      if (hi < 0) hi += n;
      if (hi < 0) hi = -1;
      if (hi >= n) hi = n - 1;
    }
  }
  std::vector<int64_t> out;
  if (st > 0) {
    for (int64_t i = lo; i < hi; i += st) out.push_back(i);
  } else {
    for (int64_t i = lo; i > hi; i += st) out.push_back(i);
  }
  return out;
}

}  // namespace

void Interpreter::eval_args(const Expr& e, size_t first, const ScopePtr& scope, CallArgs* args) {
  for (size_t i = first; i < e.children.size(); ++i) args->args.push_back(eval(*e.children[i], scope));
  for (const auto& [k, v] : e.kwargs) args->kwargs.emplace_back(k, eval(*v, scope));
  args->pos = e.pos;
}

Value Interpreter::eval_filter_chain(const Expr& e, const ScopePtr& scope, const Value* innermost) {
  // In filter blocks / block sets the innermost operand of the chain is the rendered body.
  Value input;
  if (!e.children[0]) {
    if (!innermost) throw_error("filter without an operand", StatusCode::kInternal);
    input = *innermost;
  } else if (innermost && e.children[0]->kind == ExprKind::kFilter) {
    input = eval_filter_chain(*e.children[0], scope, innermost);
  } else {
    input = eval(*e.children[0], scope);
  }
  CallArgs args;
  eval_args(e, 1, scope, &args);
  return apply_filter(e.name, input, args, e.pos);
}

Value Interpreter::apply_filter(const std::string& name, const Value& input, CallArgs& args, SourcePos pos) {
  FilterFn f = find_filter(name);
  if (!f) throw_error_at(pos, fmt::format("no filter named '{}'", name));
  args.pos = pos;
  CallDepthGuard guard(this);
  return f(*this, input, args);
}

bool Interpreter::apply_test(const std::string& name, const Value& input, CallArgs& args, SourcePos pos) {
  TestFn t = find_test(name);
  if (!t) throw_error_at(pos, fmt::format("no test named '{}'", name));
  args.pos = pos;
  CallDepthGuard guard(this);
  return t(*this, input, args);
}

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  step();
  try {
    return eval_inner(e, scope);
  } catch (TemplateException& ex) {
    if (ex.pos.line == 0) ex.pos = e.pos;
    throw;
  }
}

Value Interpreter::eval_inner(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case ExprKind::kConst: return e.value;
    case ExprKind::kName: {
      const Value* v = scope->lookup(e.name);
      if (v) return *v;
      return Value::undefined(fmt::format("'{}' is undefined", e.name));
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.children.size());
      for (const auto& c : e.children) items.push_back(eval(*c, scope));
      return Value::list(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      std::vector<std::pair<Value, Value>> items;
      for (size_t i = 0; i + 1 < e.children.size(); i += 2)
        items.emplace_back(eval(*e.children[i], scope), eval(*e.children[i + 1], scope));
      return Value::dict(std::move(items));
    }
    case ExprKind::kGetAttr: return get_attr(eval(*e.children[0], scope), e.name);
    case ExprKind::kGetItem: {
      Value obj = eval(*e.children[0], scope);
      return get_item(obj, eval(*e.children[1], scope));
    }
    case ExprKind::kSlice: {
      Value obj = eval(*e.children[0], scope);
      Value parts[3];
      for (int i = 0; i < 3; ++i) parts[i] = e.children[i + 1] ? eval(*e.children[i + 1], scope) : Value::none();
      if (obj.is_undefined()) throw_error(obj.undefined_hint());
      if (obj.is_sequence()) {
        auto idx = slice_indices(static_cast<int64_t>(obj.items().size()), parts[0], parts[1], parts[2]);
        std::vector<Value> out;
        out.reserve(idx.size());
        for (int64_t i : idx) out.push_back(obj.items()[static_cast<size_t>(i)]);
        return Value::list(std::move(out), obj.is_tuple());
      }
      if (obj.is_string()) {
        auto cps = utf8_decode(obj.as_string());
        auto idx = slice_indices(static_cast<int64_t>(cps.size()), parts[0], parts[1], parts[2]);
        std::string out;
        for (int64_t i : idx) utf8_append(&out, cps[static_cast<size_t>(i)]);
        return Value::string(std::move(out));
      }
      return Value::undefined(fmt::format("'{}' object is not subscriptable", type_name(obj)));
    }
    case ExprKind::kCall: {
      Value fn = eval(*e.children[0], scope);
      CallArgs args;
      eval_args(e, 1, scope, &args);
      return call(fn, args, e.pos);
    }
    case ExprKind::kFilter: return eval_filter_chain(e, scope, nullptr);
    case ExprKind::kTest: {
      Value input = eval(*e.children[0], scope);
      CallArgs args;
      eval_args(e, 1, scope, &args);
      return Value::boolean(apply_test(e.name, input, args, e.pos));
    }
    case ExprKind::kNeg: return unary_op("-", eval(*e.children[0], scope));
    case ExprKind::kPos: return unary_op("+", eval(*e.children[0], scope));
    case ExprKind::kNot: return Value::boolean(!truthy(eval(*e.children[0], scope)));
    case ExprKind::kAnd: {
      Value a = eval(*e.children[0], scope);
      if (!truthy(a)) return a;
      return eval(*e.children[1], scope);
    }
    case ExprKind::kOr: {
      Value a = eval(*e.children[0], scope);
      if (truthy(a)) return a;
      return eval(*e.children[1], scope);
    }
    case ExprKind::kBinary: {
      Value a = eval(*e.children[0], scope);
      Value b = eval(*e.children[1], scope);
      return binary_op(*this, e.name, a, b);
    }
    case ExprKind::kConcat: {
      std::string out;
      for (const auto& c : e.children) {
        out += to_str(eval(*c, scope));
        check_string_size(out.size());
      }
      return Value::string(std::move(out));
    }
    case ExprKind::kCompare: {
      Value left = eval(*e.children[0], scope);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.children[i + 1], scope);
        const std::string& op = e.ops[i];
        bool r;
        if (op == "==") {
          r = values_equal(left, right);
        } else if (op == "!=") {
          r = !values_equal(left, right);
        } else if (op == "in") {
          r = contains(right, left);
        } else if (op == "notin") {
          r = !contains(right, left);
        } else {
          int c = compare_values(left, right, op.c_str());
          r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
        }
        if (!r) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case ExprKind::kCond: {
      if (truthy(eval(*e.children[0], scope))) return eval(*e.children[1], scope);
      if (e.children[2]) return eval(*e.children[2], scope);
      return Value::undefined(fmt::format(
          "the inline if-expression on line {} evaluated to false and no else section was defined", e.pos.line));
    }
  }
  return Value::undefined();
}

}  // namespace pagoda::tmpl

// Interpreter: runs a parsed template (ast.h) against variables, with Jinja2 semantics as used by
// Hugging Face transformers (ImmutableSandboxedEnvironment, default Undefined, loopcontrols).
//
// Scoping follows Jinja: `for` bodies and macro calls get a fresh scope per iteration/call whose
// parent is the enclosing scope (so `set` inside a loop does not leak out; namespaces are the way
// out), `if` does not open a scope, macros resolve free names in their defining scope at call time.
//
// Limits: every statement, expression and loop iteration costs a step (RenderLimits::max_steps);
// output and string sizes, container sizes and macro call depth are bounded, so no template can
// run forever, exhaust memory or overflow the stack. Violations are kResourceExhausted errors.
// Errors are TemplateException (value.h) carrying the line:column of the node being evaluated.
// Not thread-safe; one Interpreter per render.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "template/ast.h"
#include "template/value.h"

namespace pagoda::tmpl {

struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;  // any one string or output buffer
  size_t max_items = size_t{1} << 20;          // elements of one list (range(), +, *)
  uint64_t max_steps = 20'000'000;
  int max_call_depth = 64;  // nested macro / filter callbacks
};

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;

  const Value* lookup(const std::string& name) const;
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
 public:
  Interpreter(RenderLimits limits, std::optional<std::tm> now) : limits_(limits), now_(now) {}

  // Renders `body` with `root` as the template-level scope (its parent holds the context and
  // globals). Throws TemplateException.
  std::string render(const Body& body, const ScopePtr& root);

  // --- services for builtins (filters, tests, methods, globals) ------------------------------
  Value call(const Value& fn, CallArgs& args, SourcePos pos);
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);
  Value apply_filter(const std::string& name, const Value& input, CallArgs& args, SourcePos pos);
  bool apply_test(const std::string& name, const Value& input, CallArgs& args, SourcePos pos);
  void step(uint64_t n = 1);
  void check_string_size(size_t bytes) const;
  void check_items(size_t n) const;
  const RenderLimits& limits() const { return limits_; }
  std::tm now() const;

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  struct CallDepthGuard;

  Flow exec_body(const Body& body, const ScopePtr& scope, std::string* out);
  Flow exec(const Stmt& s, const ScopePtr& scope, std::string* out);
  void exec_for(const Stmt& s, const ScopePtr& scope, std::string* out);
  void assign_targets(const Stmt& s, const Value& v, Scope* scope);
  Value make_macro(const Stmt& s, const ScopePtr& scope, const Stmt* caller_of = nullptr);
  Value eval(const Expr& e, const ScopePtr& scope);
  Value eval_inner(const Expr& e, const ScopePtr& scope);
  void eval_args(const Expr& e, size_t first, const ScopePtr& scope, CallArgs* args);
  Value eval_filter_chain(const Expr& e, const ScopePtr& scope, const Value* innermost);
  void append(std::string* out, const std::string& s);

  RenderLimits limits_;
  std::optional<std::tm> now_;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
};

}  // namespace pagoda::tmpl

// Built-in filters, tests, methods, operators and globals of the template language (the subset of
// Jinja2 + Python that chat templates use), with Python's semantics. Each lives in its own file:
// filters.cc, jinja_tests.cc, methods.cc, operators.cc, globals.cc, json_dump.cc.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "template/interpreter.h"
#include "template/value.h"

namespace pagoda::tmpl {

using FilterFn = Value (*)(Interpreter&, const Value& input, CallArgs& args);
using TestFn = bool (*)(Interpreter&, const Value& input, CallArgs& args);

FilterFn find_filter(const std::string& name);  // nullptr if unknown
TestFn find_test(const std::string& name);      // nullptr if unknown

// `obj.name` for methods of str / dict / list: a bound function value, or nullopt if `name` is not
// a method. Mutating methods (list.append, dict.update, ...) yield an undefined value whose use
// raises the sandbox's "unsafe" error, as transformers' ImmutableSandboxedEnvironment does.
std::optional<Value> find_method(const Value& obj, const std::string& name);

// Binary arithmetic: "+", "-", "*", "/", "//", "%", "**"; unary "-" / "+".
Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b);
Value unary_op(const std::string& op, const Value& a);
// `a in b`
bool contains(const Value& container, const Value& item);

// range, namespace, dict, raise_exception, strftime_now, cycler/joiner are not provided.
void install_globals(Scope* scope);

struct JsonDumpOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;  // used when has_indent
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
// Python's json.dumps(value, ...) (transformers' tojson filter).
std::string json_dumps(const Value& v, const JsonDumpOptions& options);

// Binds call arguments to parameter names like a Python signature (positional then keyword).
class ArgReader {
 public:
  ArgReader(const CallArgs& args, const char* function, std::initializer_list<const char*> names);
  // The argument for parameter i, or nullptr when not given.
  const Value* get(size_t i) const { return slots_[i]; }
  Value get_or(size_t i, Value fallback) const { return slots_[i] ? *slots_[i] : std::move(fallback); }
  // Extra positional arguments beyond the named ones (only if allow_extra).
  std::vector<Value> extra;

  static ArgReader with_varargs(const CallArgs& args, const char* function, std::initializer_list<const char*> names);

 private:
  ArgReader() = default;
  void bind(const CallArgs& args, const char* function, std::initializer_list<const char*> names, bool varargs);
  std::vector<const Value*> slots_;
};

// Helpers shared by builtins.
const std::string& expect_string(const Value& v, const char* what);
int64_t expect_int(const Value& v, const char* what);

}  // namespace pagoda::tmpl

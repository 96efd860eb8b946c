// Value: the dynamic value type of the chat-template interpreter (Jinja2 / Python semantics).
//
// Kinds: undefined, none, bool, int (int64), float (double), string (UTF-8), list (also tuples),
// dict (insertion-ordered, also Jinja namespaces) and function (natives, bound methods, macros).
// Lists and dicts are shared, immutable after construction (chat templates run in Jinja's
// ImmutableSandboxedEnvironment), except namespaces, whose attributes `{% set ns.x = ... %}`
// mutates in place. Copying a Value is cheap (shared_ptr for containers).
//
// Errors raised by operations on values are C++ exceptions of type TemplateException, internal to
// src/template/: the public entry points (chat_template.h) catch them and return Status.
// Container nesting is bounded (kMaxValueDepth) so that printing and destruction cannot overflow
// the stack.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.h"

namespace pagoda::tmpl {

constexpr int kMaxValueDepth = 128;

struct SourcePos {
  int line = 0;  // 1-based; 0 = unknown
  int column = 0;
};

// An error raised while parsing or rendering. `raised` marks raise_exception() from a template.
struct TemplateException {
  StatusCode code = StatusCode::kInvalidArgument;
  std::string message;
  SourcePos pos;
  bool raised = false;
};

[[noreturn]] void throw_error(std::string message, StatusCode code = StatusCode::kInvalidArgument);
[[noreturn]] void throw_error_at(SourcePos pos, std::string message, StatusCode code = StatusCode::kInvalidArgument);

class Value;
class Interpreter;

// What a list-like value is in Python. Jinja's map/select/... filters return generators, reverse
// returns an iterator and dict methods return views: iterable, but without len() (generators),
// indexing or JSON serialisation, and always truthy (generators).
enum class SeqKind : uint8_t { kList, kTuple, kGenerator, kReverseIterator, kDictItems, kDictKeys, kDictValues };

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
  SourcePos pos;
};
using NativeFn = std::function<Value(Interpreter&, CallArgs&)>;

struct ListObj;
struct DictObj;
struct FunctionObj;
using ListPtr = std::shared_ptr<const ListObj>;
using DictPtr = std::shared_ptr<DictObj>;
using FunctionPtr = std::shared_ptr<const FunctionObj>;

struct Undefined {
  std::string hint;  // what misusing it raises, e.g. "'x' is undefined"
};
struct NoneT {};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() : v_(Undefined{"undefined value"}) {}
  static Value undefined(std::string hint = "undefined value") { return Value(Undefined{std::move(hint)}); }
  static Value none() { return Value(NoneT{}); }
  static Value boolean(bool b) { return Value(b); }
  static Value integer(int64_t i) { return Value(i); }
  static Value number(double d) { return Value(d); }
  static Value string(std::string s) { return Value(std::move(s)); }
  // markupsafe.Markup (from |safe and |escape): concatenating a plain string to it with `+`
  // HTML-escapes the plain string, as Python does.
  static Value markup(std::string s) {
    Value v(std::move(s));
    v.markup_ = true;
    return v;
  }
  static Value list(std::vector<Value> items, bool tuple = false);
  static Value sequence(std::vector<Value> items, SeqKind kind);
  // Keys are deduplicated as Python dicts do (last value wins, first position kept).
  static Value dict(std::vector<std::pair<Value, Value>> items);
  static Value new_namespace();
  // `holds_namespace`: the function keeps a namespace alive (a bound method of a list holding
  // one), so storing it in a namespace could form a reference cycle.
  static Value function(std::string name, NativeFn fn, bool holds_namespace = false);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is an int
  bool is_string() const { return kind() == Kind::kString; }
  bool is_markup() const { return markup_ && is_string(); }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_function() const { return kind() == Kind::kFunction; }
  bool is_namespace() const;
  bool is_tuple() const;
  SeqKind seq_kind() const;
  // A real list or tuple (indexable, sized, JSON-serialisable), not a generator or view.
  bool is_sequence() const { return is_list() && (seq_kind() == SeqKind::kList || seq_kind() == SeqKind::kTuple); }
  bool is_lazy() const { return is_list() && (seq_kind() == SeqKind::kGenerator || seq_kind() == SeqKind::kReverseIterator); }

  const std::string& undefined_hint() const { return std::get<Undefined>(v_).hint; }
  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const ListObj& as_list() const { return *std::get<ListPtr>(v_); }
  const std::vector<Value>& items() const;  // list items
  DictObj& as_dict() const { return *std::get<DictPtr>(v_); }
  const DictPtr& dict_ptr() const { return std::get<DictPtr>(v_); }
  const FunctionObj& as_function() const { return *std::get<FunctionPtr>(v_); }
  // Numeric value of an int, bool or float.
  double to_double() const;
  // Integer value of an int or bool.
  int64_t to_int() const;
  // Nesting depth of containers (0 for scalars).
  int depth() const;
  // Whether this value is, or contains, a namespace.
  bool has_namespace() const;

 private:
  template <class T>
  explicit Value(T v) : v_(std::move(v)) {}
  std::variant<Undefined, NoneT, bool, int64_t, double, std::string, ListPtr, DictPtr, FunctionPtr> v_;
  bool markup_ = false;
};

struct ListObj {
  std::vector<Value> items;
  SeqKind kind = SeqKind::kList;
  int depth = 1;
  bool has_namespace = false;
};

struct DictObj {
  std::vector<std::pair<Value, Value>> items;
  bool is_namespace = false;
  int depth = 1;
  bool has_namespace = false;

  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  // Inserts or replaces; keys must be hashable (string, number, bool, none, tuple of those).
  void set(const Value& key, Value value);
  size_t size() const { return items.size(); }

 private:
  std::unordered_map<std::string, size_t> index_;
};

struct FunctionObj {
  std::string name;
  NativeFn fn;
  bool holds_namespace = false;
};

// Python semantics.
bool truthy(const Value& v);
std::string type_name(const Value& v);      // "str", "int", "NoneType", "dict", ...
std::string object_type_repr(const Value& v);  // "dict object", "None", ... (Jinja's messages)
std::string to_str(const Value& v);         // str(v); undefined -> ""
std::string repr(const Value& v);           // repr(v)
std::string py_float_repr(double d);        // repr(float): shortest round-trip digits
std::string py_string_repr(const std::string& s);
std::string html_escape(const std::string& s);  // markupsafe.escape: & < > " '
// Same string kind as `like` (a Markup stays a Markup through str methods and filters).
inline Value string_like(const Value& like, std::string s) {
  return like.is_markup() ? Value::markup(std::move(s)) : Value::string(std::move(s));
}
bool values_equal(const Value& a, const Value& b);
// <0, 0, >0; throws TypeError for unorderable types (Python's '<' rules).
int compare_values(const Value& a, const Value& b, const char* op = "<");
// Items of an iterable: list/tuple items, dict keys, string code points; undefined -> empty.
std::vector<Value> iterate(const Value& v);
// len(v); undefined -> 0.
int64_t length_of(const Value& v);
// Hash key for dict lookup, or throws TypeError (unhashable).
std::string hash_key(const Value& v);

Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);

}  // namespace pagoda::tmpl

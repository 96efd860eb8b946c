// Jinja2 tests (`x is defined`, `x is string`, `n is divisibleby 3`, ...), jinja2/tests.py.
#include <fmt/format.h>

#include <cmath>
#include <unordered_map>

#include "template/builtins.h"
#include "template/unicode.h"

namespace pagoda::tmpl {
namespace {

const Value& arg0(CallArgs& a, const char* name) {
  ArgReader r(a, name, {"other"});
  if (!r.get(0)) throw_error(fmt::format("test '{}' needs an argument", name));
  return *r.get(0);
}

bool t_defined(Interpreter&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(Interpreter&, const Value& v, CallArgs&) { return v.is_none(); }
bool t_boolean(Interpreter&, const Value& v, CallArgs&) { return v.is_bool(); }
bool t_false(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool t_true(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_integer(Interpreter&, const Value& v, CallArgs&) { return v.is_int(); }
bool t_float(Interpreter&, const Value& v, CallArgs&) { return v.is_float(); }
bool t_number(Interpreter&, const Value& v, CallArgs&) { return v.is_number(); }
bool t_string(Interpreter&, const Value& v, CallArgs&) { return v.is_string(); }
bool t_mapping(Interpreter&, const Value& v, CallArgs&) { return v.is_dict() && !v.is_namespace(); }
bool t_iterable(Interpreter&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace());
}
bool t_sequence(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string() || v.is_sequence() || (v.is_dict() && !v.is_namespace());
}
bool t_callable(Interpreter&, const Value& v, CallArgs&) { return v.is_function(); }
bool t_escaped(Interpreter&, const Value&, CallArgs&) { return false; }
bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  const Value& o = arg0(a, "sameas");
  if (v.kind() != o.kind()) return false;
  if (v.is_list()) return &v.as_list() == &o.as_list();
  if (v.is_dict()) return v.dict_ptr() == o.dict_ptr();
  return values_equal(v, o);
}
bool t_in(Interpreter&, const Value& v, CallArgs& a) { return contains(arg0(a, "in"), v); }
bool t_eq(Interpreter&, const Value& v, CallArgs& a) { return values_equal(v, arg0(a, "eq")); }
bool t_ne(Interpreter&, const Value& v, CallArgs& a) { return !values_equal(v, arg0(a, "ne")); }
bool t_lt(Interpreter&, const Value& v, CallArgs& a) { return compare_values(v, arg0(a, "lt"), "<") < 0; }
bool t_le(Interpreter&, const Value& v, CallArgs& a) { return compare_values(v, arg0(a, "le"), "<=") <= 0; }
bool t_gt(Interpreter&, const Value& v, CallArgs& a) { return compare_values(v, arg0(a, "gt"), ">") > 0; }
bool t_ge(Interpreter&, const Value& v, CallArgs& a) { return compare_values(v, arg0(a, "ge"), ">=") >= 0; }
bool t_odd(Interpreter& in, const Value& v, CallArgs&) {
  if (!v.is_number()) throw_error(fmt::format("test 'odd' needs a number, got '{}'", type_name(v)));
  return values_equal(binary_op(in, "%", v, Value::integer(2)), Value::integer(1));
}
bool t_even(Interpreter& in, const Value& v, CallArgs&) {
  if (!v.is_number()) throw_error(fmt::format("test 'even' needs a number, got '{}'", type_name(v)));
  return values_equal(binary_op(in, "%", v, Value::integer(2)), Value::integer(0));
}
bool t_divisibleby(Interpreter& in, const Value& v, CallArgs& a) {
  ArgReader r(a, "divisibleby", {"num"});
  if (!r.get(0)) throw_error("test 'divisibleby' needs an argument");
  return values_equal(binary_op(in, "%", v, *r.get(0)), Value::integer(0));
}
bool t_lower(Interpreter&, const Value& v, CallArgs&) {
  std::string s = to_str(v);
  return py_lower(s) == s && py_upper(s) != s;
}
bool t_upper(Interpreter&, const Value& v, CallArgs&) {
  std::string s = to_str(v);
  return py_upper(s) == s && py_lower(s) != s;
}
bool t_filter(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && find_filter(v.as_string()); }
bool t_test(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && find_test(v.as_string()); }

const std::unordered_map<std::string, TestFn>& test_table() {
  static const std::unordered_map<std::string, TestFn> t = {
      {"defined", t_defined},   {"undefined", t_undefined}, {"none", t_none},         {"boolean", t_boolean},
      {"false", t_false},       {"true", t_true},           {"integer", t_integer},   {"float", t_float},
      {"number", t_number},     {"string", t_string},       {"mapping", t_mapping},   {"iterable", t_iterable},
      {"sequence", t_sequence}, {"callable", t_callable},   {"escaped", t_escaped},   {"sameas", t_sameas},
      {"in", t_in},             {"eq", t_eq},               {"equalto", t_eq},        {"==", t_eq},
      {"ne", t_ne},             {"!=", t_ne},               {"lt", t_lt},             {"lessthan", t_lt},
      {"<", t_lt},              {"le", t_le},               {"<=", t_le},             {"gt", t_gt},
      {"greaterthan", t_gt},    {">", t_gt},                {"ge", t_ge},             {">=", t_ge},
      {"odd", t_odd},           {"even", t_even},           {"divisibleby", t_divisibleby},
      {"lower", t_lower},       {"upper", t_upper},         {"filter", t_filter},     {"test", t_test},
  };
  return t;
}

}  // namespace

TestFn find_test(const std::string& name) {
  const auto& t = test_table();
  auto it = t.find(name);
  return it == t.end() ? nullptr : it->second;
}

}  // namespace pagoda::tmpl

// Python arithmetic, concatenation and membership for template values (Jinja evaluates `+`, `*`,
// `in`, ... with Python's operators). Integers are 64-bit: overflow is an error where Python
// would switch to big integers.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "template/builtins.h"

namespace pagoda::tmpl {
namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  throw_error(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b)));
}

int64_t checked(bool overflow, int64_t v) {
  if (overflow) throw_error("integer overflow (only 64-bit integers are supported)");
  return v;
}

Value repeat(Interpreter& in, const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value::string("") : Value::list({}, seq.is_tuple());
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<uint64_t>(n) > in.limits().max_output_bytes / s.size())
      in.check_string_size(in.limits().max_output_bytes + 1);
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += s;
    return string_like(seq, std::move(out));
  }
  const auto& items = seq.items();
  if (!items.empty() && static_cast<uint64_t>(n) > in.limits().max_items / items.size())
    in.check_items(in.limits().max_items + 1);
  std::vector<Value> out;
  out.reserve(items.size() * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), seq.is_tuple());
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((b < 0) != (m < 0))) m += b;
  return m;
}

}  // namespace

std::string percent_format(Interpreter& in, const std::string& fmt, const Value& args);

Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) throw_error(a.undefined_hint());
  if (b.is_undefined()) throw_error(b.undefined_hint());
  const bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  const bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) {
      int64_t r;
      bool overflow = __builtin_add_overflow(a.to_int(), b.to_int(), &r);
      return Value::integer(checked(overflow, r));
    }
    if (nums) return Value::number(a.to_double() + b.to_double());
    if (a.is_string() && b.is_string()) {
      in.check_string_size(a.as_string().size() + b.as_string().size());
      if (a.is_markup() || b.is_markup()) {  // Markup.__add__ / __radd__ escape the plain side
        std::string l = a.is_markup() ? a.as_string() : html_escape(a.as_string());
        std::string r = b.is_markup() ? b.as_string() : html_escape(b.as_string());
        in.check_string_size(l.size() + r.size());
        return Value::markup(l + r);
      }
      return Value::string(a.as_string() + b.as_string());
    }
    if (a.is_sequence() && b.is_sequence() && a.is_tuple() == b.is_tuple()) {
      in.check_items(a.items().size() + b.items().size());
      std::vector<Value> out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(out), a.is_tuple());
    }
    if (a.is_string() || a.is_sequence())
      throw_error(fmt::format("can only concatenate {} (not \"{}\") to {}", type_name(a), type_name(b), type_name(a)));
    unsupported(op, a, b);
  }
  if (op == "-") {
    if (ints) {
      int64_t r;
      bool overflow = __builtin_sub_overflow(a.to_int(), b.to_int(), &r);
      return Value::integer(checked(overflow, r));
    }
    if (nums) return Value::number(a.to_double() - b.to_double());
    unsupported(op, a, b);
  }
  if (op == "*") {
    if (ints) {
      int64_t r;
      bool overflow = __builtin_mul_overflow(a.to_int(), b.to_int(), &r);
      return Value::integer(checked(overflow, r));
    }
    if (nums) return Value::number(a.to_double() * b.to_double());
    if ((a.is_string() || a.is_sequence()) && (b.is_int() || b.is_bool())) return repeat(in, a, b.to_int());
    if ((b.is_string() || b.is_sequence()) && (a.is_int() || a.is_bool())) return repeat(in, b, a.to_int());
    unsupported(op, a, b);
  }
  if (op == "/") {
    if (!nums) unsupported(op, a, b);
    if (b.to_double() == 0) throw_error("division by zero");
    return Value::number(a.to_double() / b.to_double());
  }
  if (op == "//") {
    if (!nums) unsupported(op, a, b);
    if (ints) {
      int64_t x = a.to_int(), y = b.to_int();
      if (y == 0) throw_error("integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) checked(true, 0);
      int64_t q = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
      return Value::integer(q);
    }
    double y = b.to_double();
    if (y == 0) throw_error("float floor division by zero");
    double x = a.to_double();
    // CPython's float_floor_div.
    double mod = std::fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0 && ((y < 0) != (mod < 0))) div -= 1.0;
    double fl;
    if (div != 0) {
      fl = std::floor(div);
      if (div - fl > 0.5) fl += 1.0;
    } else {
      fl = std::copysign(0.0, x / y);
    }
    return Value::number(fl);
  }
  if (op == "%") {
    if (a.is_string()) return Value::string(percent_format(in, a.as_string(), b));
    if (!nums) unsupported(op, a, b);
    if (ints) {
      int64_t x = a.to_int(), y = b.to_int();
      if (y == 0) throw_error("integer modulo by zero");
      if (y == -1) return Value::integer(0);
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::integer(m);
    }
    if (b.to_double() == 0) throw_error("float modulo");
    return Value::number(py_fmod(a.to_double(), b.to_double()));
  }
  if (op == "**") {
    if (!nums) unsupported(op, a, b);
    if (ints && b.to_int() >= 0) {
      int64_t base = a.to_int(), e = b.to_int(), r = 1;
      while (e > 0) {
        if ((e & 1) && __builtin_mul_overflow(r, base, &r)) checked(true, 0);
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) checked(true, 0);
      }
      return Value::integer(r);
    }
    double x = a.to_double(), y = b.to_double();
    if (x == 0 && y < 0) throw_error("0.0 cannot be raised to a negative power");
    return Value::number(std::pow(x, y));
  }
  throw_error(fmt::format("unknown operator '{}'", op));
}

Value unary_op(const std::string& op, const Value& a) {
  if (a.is_undefined()) throw_error(a.undefined_hint());
  if (!a.is_number()) throw_error(fmt::format("bad operand type for unary {}: '{}'", op, type_name(a)));
  if (op == "+") return a.is_bool() ? Value::integer(a.to_int()) : a;
  if (a.is_float()) return Value::number(-a.as_float());
  if (a.to_int() == std::numeric_limits<int64_t>::min()) checked(true, 0);
  return Value::integer(-a.to_int());
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!item.is_string())
        throw_error(fmt::format("'in <string>' requires string as left operand, not {}", type_name(item)));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const auto& x : container.items())
        if (values_equal(x, item)) return true;
      return false;
    case Value::Kind::kDict:
      if (container.is_namespace()) break;
      hash_key(item);  // raises for unhashable items
      return container.as_dict().find(item) != nullptr;
    default: break;
  }
  throw_error(fmt::format("argument of type '{}' is not iterable", type_name(container)));
}

}  // namespace pagoda::tmpl

// Python string formatting used by templates: `"%s" % x` / `|format` (printf-style) and
// `"{}".format(x)` (format specs: [[fill]align][sign][0][width][.precision][type]).
#include <fmt/format.h>

#include <cmath>
#include <cstdio>

#include "template/builtins.h"
#include "template/unicode.h"

namespace pagoda::tmpl {
namespace {

struct Spec {
  char fill = ' ';
  char align = 0;  // '<', '>', '^', '=' or 0 (default)
  char sign = '-';
  bool alt = false;
  bool zero = false;
  int width = -1;
  int precision = -1;
  char type = 0;
};

std::string pad(const std::string& s, const Spec& sp, bool numeric) {
  int64_t len = static_cast<int64_t>(utf8_length(s));
  if (sp.width <= len) return s;
  int64_t n = sp.width - len;
  char align = sp.align ? sp.align : (numeric ? '>' : '<');
  char fill = sp.fill;
  if (sp.zero && !sp.align) {
    fill = '0';
    align = '=';
  }
  if (align == '=' && numeric && !s.empty() && (s[0] == '-' || s[0] == '+' || s[0] == ' '))
    return s.substr(0, 1) + std::string(static_cast<size_t>(n), fill) + s.substr(1);
  if (align == '<') return s + std::string(static_cast<size_t>(n), fill);
  if (align == '^') return std::string(static_cast<size_t>(n / 2), fill) + s + std::string(static_cast<size_t>(n - n / 2), fill);
  return std::string(static_cast<size_t>(n), fill) + s;
}

std::string c_format_double(double d, int precision, char type, bool alt) {
  std::string f = "%";
  if (alt) f += '#';
  f += '.';
  f += std::to_string(precision < 0 ? 6 : precision);
  f += type;
  char buf[512];
  std::snprintf(buf, sizeof(buf), f.c_str(), d);
  return buf;
}

std::string format_number(const Value& v, const Spec& sp) {
  char t = sp.type;
  std::string body;
  bool neg = false;
  if (t == 'd' || t == 'x' || t == 'X' || t == 'o' || t == 'b' || t == 'c' || (t == 0 && !v.is_float())) {
    if (v.is_float()) throw_error(fmt::format("Unknown format code '{}' for object of type 'float'", t));
    int64_t i = v.to_int();
    neg = i < 0;
    uint64_t u = neg ? 0 - static_cast<uint64_t>(i) : static_cast<uint64_t>(i);
    switch (t) {
      case 'x': body = fmt::format("{}{:x}", sp.alt ? "0x" : "", u); break;
      case 'X': body = fmt::format("{}{:X}", sp.alt ? "0X" : "", u); break;
      case 'o': body = fmt::format("{}{:o}", sp.alt ? "0o" : "", u); break;
      case 'b': body = fmt::format("{}{:b}", sp.alt ? "0b" : "", u); break;
      case 'c': {
        std::string s;
        utf8_append(&s, static_cast<char32_t>(i));
        return pad(s, sp, false);
      }
      default: body = std::to_string(u);
    }
  } else {
    double d = v.to_double();
    neg = std::signbit(d) && !std::isnan(d);
    double a = std::fabs(d);
    if (t == 0) {
      body = sp.precision < 0 ? py_float_repr(a) : c_format_double(a, sp.precision, 'g', sp.alt);
    } else if (t == '%') {
      body = c_format_double(a * 100, sp.precision, 'f', sp.alt) + "%";
    } else if (t == 'f' || t == 'F' || t == 'e' || t == 'E' || t == 'g' || t == 'G') {
      body = c_format_double(a, sp.precision, t, sp.alt);
    } else {
      throw_error(fmt::format("Unknown format code '{}' for object of type 'float'", t));
    }
  }
  std::string sign = neg ? "-" : (sp.sign == '+' ? "+" : (sp.sign == ' ' ? " " : ""));
  return pad(sign + body, sp, true);
}

std::string format_value(const Value& v, const Spec& sp) {
  if (v.is_number() && !(v.is_bool() && sp.type == 0) && sp.type != 's') return format_number(v, sp);
  if (sp.type != 0 && sp.type != 's')
    throw_error(fmt::format("Unknown format code '{}' for object of type '{}'", sp.type, type_name(v)));
  std::string s = to_str(v);
  if (sp.precision >= 0) {
    auto cps = utf8_decode(s);
    if (cps.size() > static_cast<size_t>(sp.precision)) cps.resize(static_cast<size_t>(sp.precision));
    s = utf8_encode(cps);
  }
  return pad(s, sp, false);
}

Spec parse_format_spec(const std::string& s) {
  Spec sp;
  size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (s.size() >= 2 && is_align(s[1])) {
    sp.fill = s[0];
    sp.align = s[1];
    i = 2;
  } else if (!s.empty() && is_align(s[0])) {
    sp.align = s[0];
    i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) sp.sign = s[i++];
  if (i < s.size() && s[i] == '#') {
    sp.alt = true;
    ++i;
  }
  if (i < s.size() && s[i] == '0') {
    sp.zero = true;
    ++i;
  }
  int w = 0;
  bool has_w = false;
  while (i < s.size() && isdigit(static_cast<unsigned char>(s[i]))) {
    w = std::min(w * 10 + (s[i++] - '0'), 100000);
    has_w = true;
  }
  if (has_w) sp.width = w;
  if (i < s.size() && s[i] == '.') {
    ++i;
    int p = 0;
    while (i < s.size() && isdigit(static_cast<unsigned char>(s[i]))) p = std::min(p * 10 + (s[i++] - '0'), 1000);
    sp.precision = p;
  }
  if (i < s.size()) sp.type = s[i++];
  if (i != s.size()) throw_error(fmt::format("Invalid format specifier '{}'", s));
  return sp;
}

}  // namespace

std::string percent_format(Interpreter& in, const std::string& f, const Value& args) {
  std::vector<Value> pos = args.is_tuple() ? args.items() : std::vector<Value>{args};
  const bool mapping = args.is_dict() && !args.is_namespace();
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out += f[i];
      continue;
    }
    if (++i >= f.size()) throw_error("incomplete format");
    Value v;
    bool have = false;
    if (f[i] == '(') {
      size_t e = f.find(')', i);
      if (e == std::string::npos || !mapping) throw_error("format requires a mapping");
      const Value* found = args.as_dict().find(f.substr(i + 1, e - i - 1));
      if (!found) throw_error(fmt::format("KeyError: '{}'", f.substr(i + 1, e - i - 1)));
      v = *found;
      have = true;
      i = e + 1;
    }
    Spec sp;
    sp.align = '>';
    for (; i < f.size() && std::string_view("-+ #0").find(f[i]) != std::string_view::npos; ++i) {
      if (f[i] == '-') sp.align = '<';
      if (f[i] == '+' || f[i] == ' ') sp.sign = f[i];
      if (f[i] == '#') sp.alt = true;
      if (f[i] == '0') sp.zero = true;
    }
    if (sp.align == '<') sp.zero = false;
    int w = -1;
    while (i < f.size() && isdigit(static_cast<unsigned char>(f[i]))) w = std::min((w < 0 ? 0 : w) * 10 + (f[i++] - '0'), 100000);
    sp.width = w;
    if (i < f.size() && f[i] == '.') {
      int p = 0;
      ++i;
      while (i < f.size() && isdigit(static_cast<unsigned char>(f[i]))) p = std::min(p * 10 + (f[i++] - '0'), 1000);
      sp.precision = p;
    }
    if (i >= f.size()) throw_error("incomplete format");
    char t = f[i];
    if (t == '%') {
      out += '%';
      continue;
    }
    if (!have) {
      if (mapping) {
        v = args;
      } else {
        if (next >= pos.size()) throw_error("not enough arguments for format string");
        v = pos[next++];
      }
    }
    if (sp.zero) sp.align = 0;
    switch (t) {
      case 's': sp.type = 0; out += pad(to_str(v), sp, false); break;
      case 'r':
      case 'a': out += pad(repr(v), sp, false); break;
      case 'd':
      case 'i':
      case 'u':
        if (!v.is_number()) throw_error(fmt::format("%{} format: a real number is required, not {}", t, type_name(v)));
        sp.type = 'd';
        out += format_number(v.is_float() ? Value::integer(static_cast<int64_t>(v.as_float())) : v, sp);
        break;
      case 'x': case 'X': case 'o': case 'c':
        sp.type = t;
        out += format_number(v, sp);
        break;
      case 'f': case 'F': case 'e': case 'E': case 'g': case 'G':
        if (!v.is_number()) throw_error(fmt::format("must be real number, not {}", type_name(v)));
        sp.type = t;
        out += format_number(Value::number(v.to_double()), sp);
        break;
      default: throw_error(fmt::format("unsupported format character '{}'", t));
    }
    in.check_string_size(out.size());
  }
  if (!mapping && next < pos.size() && args.is_tuple()) throw_error("not all arguments converted during string formatting");
  return out;
}

std::string str_format(Interpreter& in, const std::string& f, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      throw_error("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t e = f.find('}', i);
    if (e == std::string::npos) throw_error("Single '{' encountered in format string");
    std::string field = f.substr(i + 1, e - i - 1);
    i = e;
    std::string spec, conv;
    size_t colon = field.find(':');
    if (colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    size_t bang = field.find('!');
    if (bang != std::string::npos) {
      conv = field.substr(bang + 1);
      field = field.substr(0, bang);
    }
    Value v;
    if (field.empty()) {
      if (auto_index >= args.args.size()) throw_error(fmt::format("Replacement index {} out of range", auto_index));
      v = args.args[auto_index++];
    } else if (std::all_of(field.begin(), field.end(), [](char ch) { return isdigit(static_cast<unsigned char>(ch)); })) {
      size_t k = std::stoul(field.substr(0, 6));
      if (k >= args.args.size()) throw_error(fmt::format("Replacement index {} out of range", k));
      v = args.args[k];
    } else {
      bool found = false;
      for (const auto& [name, val] : args.kwargs) {
        if (name == field) {
          v = val;
          found = true;
        }
      }
      if (!found) throw_error(fmt::format("KeyError: '{}'", field));
    }
    if (conv == "r" || conv == "a") {
      v = Value::string(repr(v));
    } else if (conv == "s") {
      v = Value::string(to_str(v));
    } else if (!conv.empty()) {
      throw_error(fmt::format("Unknown conversion specifier {}", conv));
    }
    out += format_value(v, parse_format_spec(spec));
    in.check_string_size(out.size());
  }
  return out;
}

}  // namespace pagoda::tmpl

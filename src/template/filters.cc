// Jinja2 filters (jinja2/filters.py) with their Python semantics, plus transformers' `tojson`
// (json.dumps with ensure_ascii=False by default). Filters that expect strings convert their
// input with str() first (undefined -> ""), as Jinja's soft_str does.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "template/builtins.h"
#include "template/unicode.h"

namespace pagoda::tmpl {

std::string percent_format(Interpreter& in, const std::string& fmt, const Value& args);

ArgReader::ArgReader(const CallArgs& args, const char* function, std::initializer_list<const char*> names) {
  bind(args, function, names, false);
}
ArgReader ArgReader::with_varargs(const CallArgs& args, const char* function, std::initializer_list<const char*> names) {
  ArgReader r;
  r.bind(args, function, names, true);
  return r;
}
void ArgReader::bind(const CallArgs& args, const char* function, std::initializer_list<const char*> names, bool varargs) {
  std::vector<const char*> n(names);
  slots_.assign(n.size(), nullptr);
  for (size_t i = 0; i < args.args.size(); ++i) {
    if (i < n.size()) {
      slots_[i] = &args.args[i];
    } else if (varargs) {
      extra.push_back(args.args[i]);
    } else {
      throw_error(fmt::format("{}() takes at most {} argument(s) ({} given)", function, n.size(), args.args.size()));
    }
  }
  for (const auto& [k, v] : args.kwargs) {
    size_t idx = n.size();
    for (size_t i = 0; i < n.size(); ++i)
      if (k == n[i]) idx = i;
    if (idx == n.size()) throw_error(fmt::format("{}() got an unexpected keyword argument '{}'", function, k));
    if (slots_[idx]) throw_error(fmt::format("{}() got multiple values for argument '{}'", function, k));
    slots_[idx] = &v;
  }
}

const std::string& expect_string(const Value& v, const char* what) {
  if (!v.is_string()) throw_error(fmt::format("{}: expected a string, got '{}'", what, type_name(v)));
  return v.as_string();
}
int64_t expect_int(const Value& v, const char* what) {
  if (!v.is_int() && !v.is_bool())
    throw_error(fmt::format("'{}' object cannot be interpreted as an integer ({})", type_name(v), what));
  return v.to_int();
}

namespace {

bool arg_true(const ArgReader& r, size_t i) { return r.get(i) && truthy(*r.get(i)); }

// Jinja's make_attrgetter: "a.b.0" looks up each part with getitem (then getattr).
Value get_path(Interpreter& in, const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return in.get_item(item, attribute);
  Value cur = item;
  size_t start = 0;
  const std::string& path = attribute.as_string();
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return isdigit(static_cast<unsigned char>(c)); });
    Value key = digits ? Value::integer(std::strtoll(part.c_str(), nullptr, 10)) : Value::string(part);
    cur = in.get_item(cur, key);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

// Sort/unique key: lower-cased strings unless case_sensitive.
Value fold_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(py_lower(v.as_string()));
  return v;
}

Value f_abs(Interpreter&, const Value& in, CallArgs& a) {
  ArgReader r(a, "abs", {});
  if (in.is_float()) return Value::number(std::fabs(in.as_float()));
  if (in.is_int() || in.is_bool()) return unary_op(in.to_int() < 0 ? "-" : "+", in);
  throw_error(fmt::format("bad operand type for abs(): '{}'", type_name(in)));
}
Value f_attr(Interpreter& in, const Value& v, CallArgs& a) {
  ArgReader r(a, "attr", {"name"});
  if (!r.get(0)) throw_error("attr() missing argument 'name'");
  return in.get_attr(v, expect_string(*r.get(0), "attr name"));
}
Value f_batch(Interpreter&, const Value& v, CallArgs& a) {
  ArgReader r(a, "batch", {"linecount", "fill_with"});
  if (!r.get(0)) throw_error("batch() missing argument 'linecount'");
  int64_t n = expect_int(*r.get(0), "linecount");
  if (n <= 0) throw_error("batch linecount must be positive");
  std::vector<Value> out, cur;
  for (auto& x : iterate(v)) {
    cur.push_back(x);
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::list(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (r.get(1) && !r.get(1)->is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*r.get(1));
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::sequence(std::move(out), SeqKind::kGenerator);
}
Value f_capitalize(Interpreter&, const Value& v, CallArgs& a) {
  ArgReader r(a, "capitalize", {});
  return string_like(v, py_capitalize(to_str(v)));
}
Value f_center(Interpreter& in, const Value& v, CallArgs& a) {
  ArgReader r(a, "center", {"width"});
  CallArgs b;
  b.args.push_back(r.get_or(0, Value::integer(80)));
  Value s = Value::string(to_str(v));
  auto m = find_method(s, "center");
  return in.call(*m, b, a.pos);
}
Value f_default(Interpreter&, const Value& v, CallArgs& a) {
  ArgReader r(a, "default", {"default_value", "boolean"});
  if (v.is_undefined() || (arg_true(r, 1) && !truthy(v))) return r.get_or(0, Value::string(""));
  return v;
}
Value f_dictsort(Interpreter&, const Value& v, CallArgs& a) {
  ArgReader r(a, "dictsort", {"case_sensitive", "by", "reverse"});
  if (!v.is_dict() || v.is_namespace()) throw_error("dictsort: value must be a dict");
  bool cs = arg_true(r, 0), rev = arg_true(r, 2);
  std::string by = r.get(1) ? expect_string(*r.get(1), "by") : "key";
  if (by != "key" && by != "value") throw_error("You can only sort by either \"key\" or \"value\"");
  size_t pos = by == "key" ? 0 : 1;
  std::vector<Value> items;
  for (const auto& [k, x] : v.as_dict().items) items.push_back(Value::list({k, x}, true));
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    int c = compare_values(fold_key(x.items()[pos], cs), fold_key(y.items()[pos], cs));
    return rev ? c > 0 : c < 0;
  });
  return Value::list(std::move(items));
}
Value f_escape(Interpreter&, const Value& v, CallArgs& a) {
  ArgReader r(a, "escape", {});
  if (v.is_markup()) return v;
  return Value::markup(html_escape(to_str(v)));
}
Value f_first(Interpreter&, const Value& v, CallArgs& a) {
  ArgReader r(a, "first", {});
  auto items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}
Value f_last(Interpreter&, const Value& v, CallArgs& a) {
  ArgReader r(a, "last", {});
  if (v.is_lazy()) throw_error(fmt::format("'{}' object is not reversible", type_name(v)));
  auto items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

// Python float(str): surrounding whitespace, underscores between digits, inf/nan.
bool parse_py_float(const std::string& s0, double* out) {
  std::string s = py_strip(s0, nullptr, true, true);
  std::string t;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 >= s.size() || !isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !isdigit(static_cast<unsigned char>(s[i + 1])))
        return false;
      continue;
    }
    t += s[i];
  }
  if (t.empty()) return false;
  std::string low = py_lower(t);
  std::string body = (low[0] == '+' || low[0] == '-') ? low.substr(1) : low;
  if (body == "inf" || body == "infinity" || body == "nan") {
    double d = body == "nan" ? NAN : INFINITY;
    *out = low[0] == '-' ? -d : d;
    return true;
  }
  for (char c : body)
    if (!(isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' || c == '-')) return false;
  char* end = nullptr;
  *out = std::strtod(t.c_str(), &end);
  return end && *end == '\0';
}

// Python int(str, base).
bool parse_py_int(const std::string& s0, int base, int64_t* out) {
  std::string s = py_strip(s0, nullptr, true, true);
  if (s.empty()) return false;
  bool neg = false;
  size_t i = 0;
  if (s[0] == '+' || s[0] == '-') {
    neg = s[0] == '-';
    i = 1;
  }
  if (base == 0 || base == 16 || base == 8 || base == 2) {
    if (i + 1 < s.size() && s[i] == '0') {
      char p = static_cast<char>(tolower(static_cast<unsigned char>(s[i + 1])));
      int pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
      if (pb && (base == 0 || base == pb)) {
        base = pb;
        i += 2;
        if (i < s.size() && s[i] == '_') ++i;
      }
    }
    if (base == 0) base = 10;
  }
  std::string digits;
  for (size_t k = i; k < s.size(); ++k) {
    if (s[k] == '_' && k > i && k + 1 < s.size() && s[k + 1] != '_') continue;
    digits += s[k];
  }
  if (digits.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(digits.c_str(), &end, base);
  if (!end || *end != '\0' || digits[0] == '-' || digits[0] == '+' || isspace(static_cast<unsigned char>(digits[0])))
    return false;
  if (errno == ERANGE) throw_error("integer too large (only 64-bit integers are supported)");
  *out = neg ? -v : v;
  return true;
}

Value float_to_int(double d) {
  if (std::isnan(d)) throw_error("cannot convert float NaN to integer");
  if (std::isinf(d)) throw_error("cannot convert float infinity to integer");
  if (std::fabs(d) >= 9.2e18) throw_error("integer too large (only 64-bit integers are supported)");
  return Value::integer(static_cast<int64_t>(d));
}

Value f_int(Interpreter&, const Value& v, CallArgs& a) {
  ArgReader r(a, "int", {"default", "base"});
  Value dflt = r.get_or(0, Value::integer(0));
  int base = r.get(1) ? static_cast<int>(expect_int(*r.get(1), "base")) : 10;
  if (v.is_int() || v.is_bool()) return Value::integer(v.to_int());
  if (v.is_float()) return float_to_int(v.as_float());
  if (v.is_string()) {
    int64_t i;
    if (parse_py_int(v.as_string(), base, &i)) return Value::integer(i);
    double d;
    if (parse_py_float(v.as_string(), &d)) return float_to_int(d);
  }
  return dflt;
}
Value f_float(Interpreter&, const Value& v, CallArgs& a) {
  ArgReader r(a, "float", {"default"});
  if (v.is_number()) return Value::number(v.to_double());
  double d;
  if (v.is_string() && parse_py_float(v.as_string(), &d)) return Value::number(d);
  return r.get_or(0, Value::number(0.0));
}
Value f_format(Interpreter& in, const Value& v, CallArgs& a) {
  if (!a.args.empty() && !a.kwargs.empty()) throw_error("can't handle positional and keyword arguments at the same time");
  Value args;
  if (!a.kwargs.empty()) {
    std::vector<std::pair<Value, Value>> kw;
    for (auto& [k, x] : a.kwargs) kw.emplace_back(Value::string(k), x);
    args = Value::dict(std::move(kw));
  } else {
    args = Value::list(a.args, true);
  }
  return Value::string(percent_format(in, to_str(v), args));
}
Value f_indent(Interpreter& in, const Value& v, CallArgs& a) {
  ArgReader r(a, "indent", {"width", "first", "blank"});
  std::string ind = "    ";
  if (r.get(0)) {
    if (r.get(0)->is_string()) {
      ind = r.get(0)->as_string();
    } else {
      int64_t w = expect_int(*r.get(0), "width");
      in.check_string_size(static_cast<size_t>(std::max<int64_t>(w, 0)));
      ind = std::string(static_cast<size_t>(std::max<int64_t>(w, 0)), ' ');
    }
  }
  std::string s = to_str(v) + "\n";
  auto lines = py_splitlines(s);
  std::string rv;
  if (arg_true(r, 2)) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else if (!lines.empty()) {
    rv = lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : ind) + lines[i];
  }
  if (arg_true(r, 1)) rv = ind + rv;
  in.check_string_size(rv.size());
  return Value::string(std::move(rv));
}
Value f_items(Interpreter&, const Value& v, CallArgs& a) {
  ArgReader r(a, "items", {});
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict() || v.is_namespace()) throw_error("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.as_dict().items) out.push_back(Value::list({k, x}, true));
  return Value::sequence(std::move(out), SeqKind::kGenerator);
}
Value f_join(Interpreter& in, const Value& v, CallArgs& a) {
  ArgReader r(a, "join", {"d", "attribute"});
  std::string sep = r.get(0) ? to_str(*r.get(0)) : "";
  std::string out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(r.get(1) && !r.get(1)->is_none() ? get_path(in, item, *r.get(1)) : item);
    in.check_string_size(out.size());
  }
  return Value::string(std::move(out));
}
Value f_length(Interpreter&, const Value& v, CallArgs& a) {
  ArgReader r(a, "length", {});
  return Value::integer(length_of(v));
}
Value f_list(Interpreter&, const Value& v, CallArgs& a) {
  ArgReader r(a, "list", {});
  if (v.is_none() || v.is_number() || v.is_function() || v.is_namespace())
    throw_error(fmt::format("'{}' object is not iterable", type_name(v)));
  return Value::list(iterate(v));
}
Value f_lower(Interpreter&, const Value& v, CallArgs& a) {
  ArgReader r(a, "lower", {});
  return string_like(v, py_lower(to_str(v)));
}
Value f_upper(Interpreter&, const Value& v, CallArgs& a) {
  ArgReader r(a, "upper", {});
  return string_like(v, py_upper(to_str(v)));
}
Value f_map(Interpreter& in, const Value& v, CallArgs& a) {
  std::vector<Value> out;
  if (!truthy(v)) return Value::sequence({}, SeqKind::kGenerator);  // Jinja: `if value:` first
  bool by_attr = false;
  Value attribute, dflt = Value::undefined();
  bool has_default = false;
  for (auto& [k, x] : a.kwargs) {
    if (k == "attribute") {
      by_attr = true;
      attribute = x;
    } else if (k == "default") {
      dflt = x;
      has_default = true;
    }
  }
  if (by_attr) {
    for (auto& [k, x] : a.kwargs)
      if (k != "attribute" && k != "default") throw_error(fmt::format("Unexpected keyword argument '{}'", k));
    for (const auto& item : iterate(v)) {
      Value got = get_path(in, item, attribute);
      out.push_back(got.is_undefined() && has_default ? dflt : got);
    }
    return Value::sequence(std::move(out), SeqKind::kGenerator);
  }
  if (a.args.empty()) throw_error("map requires a filter argument");
  const std::string& name = expect_string(a.args[0], "map filter name");
  for (const auto& item : iterate(v)) {
    CallArgs b;
    b.args.assign(a.args.begin() + 1, a.args.end());
    b.kwargs = a.kwargs;
    out.push_back(in.apply_filter(name, item, b, a.pos));
  }
  return Value::sequence(std::move(out), SeqKind::kGenerator);
}
Value min_max(Interpreter& in, const Value& v, CallArgs& a, bool want_max) {
  ArgReader r(a, want_max ? "max" : "min", {"case_sensitive", "attribute"});
  bool cs = arg_true(r, 0);
  auto items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& x) {
    return fold_key(r.get(1) && !r.get(1)->is_none() ? get_path(in, x, *r.get(1)) : x, cs);
  };
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    int c = compare_values(k, best_key, want_max ? ">" : "<");
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}
Value f_max(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, true); }
Value f_min(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, false); }

// select / reject / selectattr / rejectattr
Value select_impl(Interpreter& in, const Value& v, CallArgs& a, bool by_attr, bool keep) {
  if (!truthy(v)) return Value::sequence({}, SeqKind::kGenerator);  // Jinja: `if value:` first
  for (auto& [k, x] : a.kwargs) throw_error(fmt::format("unexpected keyword argument '{}'", k));
  size_t i = 0;
  Value attribute;
  if (by_attr) {
    if (a.args.empty()) throw_error("Missing parameter for attribute name");
    attribute = a.args[i++];
  }
  std::string test;
  if (i < a.args.size()) test = expect_string(a.args[i++], "test name");
  std::vector<Value> out;
  for (const auto& item : iterate(v)) {
    Value x = by_attr ? get_path(in, item, attribute) : item;
    bool ok;
    if (test.empty()) {
      ok = truthy(x);
    } else {
      CallArgs b;
      b.args.assign(a.args.begin() + static_cast<long>(i), a.args.end());
      ok = in.apply_test(test, x, b, a.pos);
    }
    if (ok == keep) out.push_back(item);
  }
  return Value::sequence(std::move(out), SeqKind::kGenerator);
}
Value f_select(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, false, true); }
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, true, false); }

Value f_replace(Interpreter& in, const Value& v, CallArgs& a) {
  ArgReader r(a, "replace", {"old", "new", "count"});
  if (!r.get(0) || !r.get(1)) throw_error("replace() missing arguments");
  int64_t count = r.get(2) && !r.get(2)->is_none() ? expect_int(*r.get(2), "count") : -1;
  std::string out = py_replace(to_str(v), to_str(*r.get(0)), to_str(*r.get(1)), count);
  in.check_string_size(out.size());
  return Value::string(std::move(out));
}
Value f_reverse(Interpreter&, const Value& v, CallArgs& a) {
  ArgReader r(a, "reverse", {});
  if (v.is_string()) {
    auto cps = utf8_decode(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value::string(utf8_encode(cps));
  }
  auto items = iterate(v);
  std::reverse(items.begin(), items.end());
  // reversed() of a list, tuple or dict is an iterator; other iterables become a list.
  bool reversible = v.is_sequence() || (v.is_dict() && !v.is_namespace()) || (v.is_list() && !v.is_lazy());
  return reversible ? Value::sequence(std::move(items), SeqKind::kReverseIterator) : Value::list(std::move(items));
}
Value f_round(Interpreter&, const Value& v, CallArgs& a) {
  ArgReader r(a, "round", {"precision", "method"});
  int64_t p = r.get(0) ? expect_int(*r.get(0), "precision") : 0;
  std::string method = r.get(1) ? expect_string(*r.get(1), "method") : "common";
  if (!v.is_number()) throw_error(fmt::format("type {} doesn't define __round__ method", type_name(v)));
  if (method != "common" && method != "ceil" && method != "floor")
    throw_error("method must be common, ceil or floor");
  if (method == "common") {
    if (!v.is_float()) return Value::integer(v.to_int());  // round(int, n) is an int
    double d = v.as_float();
    if (!std::isfinite(d) || p > 300) return Value::number(d);
    if (p < 0) {
      double m = std::pow(10.0, static_cast<double>(-p));
      return Value::number(std::nearbyint(d / m) * m);
    }
    // printf rounds the exact binary value half-to-even, as CPython's round() does.
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(p), d);
    return Value::number(std::strtod(buf, nullptr));
  }
  double m = std::pow(10.0, static_cast<double>(p));
  double x = v.to_double() * m;
  return Value::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / m);
}
Value f_safe(Interpreter&, const Value& v, CallArgs& a) {
  ArgReader r(a, "safe", {});
  return Value::markup(to_str(v));
}
Value f_sort(Interpreter& in, const Value& v, CallArgs& a) {
  ArgReader r(a, "sort", {"reverse", "case_sensitive", "attribute"});
  bool rev = arg_true(r, 0), cs = arg_true(r, 1);
  auto items = iterate(v);
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t i = 0; i < items.size(); ++i) {
    Value k = r.get(2) && !r.get(2)->is_none() ? get_path(in, items[i], *r.get(2)) : items[i];
    keyed.emplace_back(fold_key(k, cs), i);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    int c = compare_values(x.first, y.first);
    return rev ? c > 0 : c < 0;
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(items[kv.second]);
  return Value::list(std::move(out));
}
Value f_string(Interpreter&, const Value& v, CallArgs& a) {
  ArgReader r(a, "string", {});
  return string_like(v, to_str(v));
}
Value f_sum(Interpreter& in, const Value& v, CallArgs& a) {
  ArgReader r(a, "sum", {"attribute", "start"});
  Value total = r.get_or(1, Value::integer(0));
  for (const auto& item : iterate(v))
    total = binary_op(in, "+", total, r.get(0) && !r.get(0)->is_none() ? get_path(in, item, *r.get(0)) : item);
  return total;
}
Value f_title(Interpreter&, const Value& v, CallArgs& a) {
  ArgReader r(a, "title", {});
  return string_like(v, jinja_title(to_str(v)));
}
Value f_tojson(Interpreter& in, const Value& v, CallArgs& a) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  ArgReader r(a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions o;
  o.ensure_ascii = arg_true(r, 0);
  o.sort_keys = arg_true(r, 3);
  if (r.get(1) && !r.get(1)->is_none()) {
    o.has_indent = true;
    o.item_separator = ",";
    if (r.get(1)->is_string()) {
      o.indent = r.get(1)->as_string();
    } else {
      int64_t w = expect_int(*r.get(1), "indent");
      in.check_string_size(static_cast<size_t>(std::max<int64_t>(w, 0)));
      o.indent = std::string(static_cast<size_t>(std::max<int64_t>(w, 0)), ' ');
    }
  }
  if (r.get(2) && !r.get(2)->is_none()) {
    const auto& seps = r.get(2)->items();
    if (!r.get(2)->is_list() || seps.size() != 2) throw_error("separators must be a pair of strings");
    o.item_separator = expect_string(seps[0], "item separator");
    o.key_separator = expect_string(seps[1], "key separator");
  }
  std::string out = json_dumps(v, o);
  in.check_string_size(out.size());
  return Value::string(std::move(out));
}
Value f_trim(Interpreter&, const Value& v, CallArgs& a) {
  ArgReader r(a, "trim", {"chars"});
  const std::string* chars = r.get(0) && !r.get(0)->is_none() ? &expect_string(*r.get(0), "trim chars") : nullptr;
  return string_like(v, py_strip(to_str(v), chars, true, true));
}
Value f_unique(Interpreter& in, const Value& v, CallArgs& a) {
  ArgReader r(a, "unique", {"case_sensitive", "attribute"});
  bool cs = arg_true(r, 0);
  std::vector<Value> out, seen;
  for (const auto& item : iterate(v)) {
    Value k = fold_key(r.get(1) && !r.get(1)->is_none() ? get_path(in, item, *r.get(1)) : item, cs);
    hash_key(k);
    bool dup = false;
    for (const auto& s : seen) dup = dup || values_equal(s, k);
    if (dup) continue;
    seen.push_back(k);
    out.push_back(item);
  }
  return Value::sequence(std::move(out), SeqKind::kGenerator);
}
Value f_wordcount(Interpreter&, const Value& v, CallArgs& a) {
  ArgReader r(a, "wordcount", {});
  std::string s = to_str(v);
  int64_t n = 0;
  bool in_word = false;
  size_t i = 0;
  while (i < s.size()) {
    char32_t c = utf8_next(s, &i);
    bool w = c == '_' || (c < 0x80 ? isalnum(static_cast<int>(c)) != 0 : !py_isspace(c) && py_isprintable(c));
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

const std::unordered_map<std::string, FilterFn>& filter_table() {
  static const std::unordered_map<std::string, FilterFn> t = {
      {"abs", f_abs},         {"attr", f_attr},       {"batch", f_batch},     {"capitalize", f_capitalize},
      {"center", f_center},   {"count", f_length},    {"d", f_default},       {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape},      {"escape", f_escape},   {"first", f_first},
      {"float", f_float},     {"format", f_format},   {"indent", f_indent},   {"int", f_int},
      {"items", f_items},     {"join", f_join},       {"last", f_last},       {"length", f_length},
      {"list", f_list},       {"lower", f_lower},     {"map", f_map},         {"max", f_max},
      {"min", f_min},         {"reject", f_reject},   {"rejectattr", f_rejectattr}, {"replace", f_replace},
      {"reverse", f_reverse}, {"round", f_round},     {"safe", f_safe},       {"select", f_select},
      {"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string},   {"sum", f_sum},
      {"title", f_title},     {"tojson", f_tojson},   {"trim", f_trim},       {"unique", f_unique},
      {"upper", f_upper},     {"wordcount", f_wordcount},
  };
  return t;
}

}  // namespace

FilterFn find_filter(const std::string& name) {
  const auto& t = filter_table();
  auto it = t.find(name);
  return it == t.end() ? nullptr : it->second;
}

}  // namespace pagoda::tmpl

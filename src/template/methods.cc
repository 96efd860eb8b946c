// Python methods of str, dict and list reachable from templates (`s.strip()`, `d.items()`,
// `d.get(k, x)`, ...). Mutating methods are refused the way Jinja's ImmutableSandboxedEnvironment
// refuses them: the attribute is an undefined value whose use raises "... is unsafe".
#include <fmt/format.h>

#include <algorithm>

#include "template/builtins.h"
#include "template/unicode.h"

namespace pagoda::tmpl {

std::string str_format(Interpreter& in, const std::string& fmt_str, const CallArgs& args);

namespace {

using Method = Value (*)(Interpreter&, const Value& self, CallArgs& args);

const std::string* opt_string(const Value* v, const char* what) {
  if (!v || v->is_none()) return nullptr;
  return &expect_string(*v, what);
}

bool affix_match(const Value& self, CallArgs& args, bool prefix) {
  ArgReader r(args, prefix ? "startswith" : "endswith", {"prefix", "start", "end"});
  if (!r.get(0)) throw_error(fmt::format("{}() takes at least 1 argument (0 given)", prefix ? "startswith" : "endswith"));
  std::string s = self.as_string();
  if (r.get(1) || r.get(2)) {
    auto cps = utf8_decode(s);
    int64_t n = static_cast<int64_t>(cps.size());
    auto norm = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
    int64_t b = r.get(1) && !r.get(1)->is_none() ? norm(expect_int(*r.get(1), "start")) : 0;
    int64_t e = r.get(2) && !r.get(2)->is_none() ? norm(expect_int(*r.get(2), "end")) : n;
    if (b > e) return false;
    s = utf8_encode(std::vector<char32_t>(cps.begin() + b, cps.begin() + e));
  }
  std::vector<Value> cands = r.get(0)->is_tuple() ? r.get(0)->items() : std::vector<Value>{*r.get(0)};
  for (const auto& c : cands) {
    const std::string& a = expect_string(c, prefix ? "startswith first arg" : "endswith first arg");
    if (a.size() > s.size()) continue;
    if (prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0) return true;
  }
  return false;
}

Value m_strip(Interpreter&, const Value& self, CallArgs& a) {
  ArgReader r(a, "strip", {"chars"});
  return string_like(self, py_strip(self.as_string(), opt_string(r.get(0), "strip arg"), true, true));
}
Value m_lstrip(Interpreter&, const Value& self, CallArgs& a) {
  ArgReader r(a, "lstrip", {"chars"});
  return string_like(self, py_strip(self.as_string(), opt_string(r.get(0), "lstrip arg"), true, false));
}
Value m_rstrip(Interpreter&, const Value& self, CallArgs& a) {
  ArgReader r(a, "rstrip", {"chars"});
  return string_like(self, py_strip(self.as_string(), opt_string(r.get(0), "rstrip arg"), false, true));
}
Value split_impl(Interpreter& in, const Value& self, CallArgs& a, bool right) {
  ArgReader r(a, right ? "rsplit" : "split", {"sep", "maxsplit"});
  const std::string* sep = opt_string(r.get(0), "sep");
  if (sep && sep->empty()) throw_error("empty separator");
  int64_t maxsplit = r.get(1) ? expect_int(*r.get(1), "maxsplit") : -1;
  std::vector<Value> out;
  for (auto& p : py_split(self.as_string(), sep, maxsplit, right)) out.push_back(Value::string(std::move(p)));
  in.check_items(out.size());
  return Value::list(std::move(out));
}
Value m_split(Interpreter& in, const Value& self, CallArgs& a) { return split_impl(in, self, a, false); }
Value m_rsplit(Interpreter& in, const Value& self, CallArgs& a) { return split_impl(in, self, a, true); }
Value m_splitlines(Interpreter&, const Value& self, CallArgs& a) {
  ArgReader r(a, "splitlines", {"keepends"});
  std::vector<Value> out;
  for (auto& p : py_splitlines(self.as_string())) out.push_back(Value::string(std::move(p)));
  return Value::list(std::move(out));
}
Value m_startswith(Interpreter&, const Value& self, CallArgs& a) { return Value::boolean(affix_match(self, a, true)); }
Value m_endswith(Interpreter&, const Value& self, CallArgs& a) { return Value::boolean(affix_match(self, a, false)); }
Value m_upper(Interpreter&, const Value& self, CallArgs& a) {
  ArgReader r(a, "upper", {});
  return string_like(self, py_upper(self.as_string()));
}
Value m_lower(Interpreter&, const Value& self, CallArgs& a) {
  ArgReader r(a, "lower", {});
  return string_like(self, py_lower(self.as_string()));
}
Value m_title(Interpreter&, const Value& self, CallArgs& a) {
  ArgReader r(a, "title", {});
  return Value::string(py_title(self.as_string()));
}
Value m_capitalize(Interpreter&, const Value& self, CallArgs& a) {
  ArgReader r(a, "capitalize", {});
  return Value::string(py_capitalize(self.as_string()));
}
Value m_replace(Interpreter& in, const Value& self, CallArgs& a) {
  ArgReader r(a, "replace", {"old", "new", "count"});
  if (!r.get(0) || !r.get(1)) throw_error("replace() takes at least 2 arguments");
  int64_t count = r.get(2) ? expect_int(*r.get(2), "count") : -1;
  std::string out = py_replace(self.as_string(), expect_string(*r.get(0), "replace arg 1"),
                               expect_string(*r.get(1), "replace arg 2"), count);
  in.check_string_size(out.size());
  return Value::string(std::move(out));
}
Value find_impl(const Value& self, CallArgs& a, bool right, const char* name) {
  ArgReader r(a, name, {"sub"});
  if (!r.get(0)) throw_error(fmt::format("{}() takes at least 1 argument (0 given)", name));
  const std::string& s = self.as_string();
  const std::string& sub = expect_string(*r.get(0), "must be str");
  size_t f = right ? s.rfind(sub) : s.find(sub);
  if (f == std::string::npos) return Value::integer(-1);
  return Value::integer(static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, f))));
}
Value m_find(Interpreter&, const Value& self, CallArgs& a) { return find_impl(self, a, false, "find"); }
Value m_rfind(Interpreter&, const Value& self, CallArgs& a) { return find_impl(self, a, true, "rfind"); }
Value m_count(Interpreter&, const Value& self, CallArgs& a) {
  ArgReader r(a, "count", {"sub"});
  if (!r.get(0)) throw_error("count() takes at least 1 argument (0 given)");
  const std::string& s = self.as_string();
  const std::string& sub = expect_string(*r.get(0), "must be str");
  if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s)) + 1);
  int64_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return Value::integer(n);
}
Value m_join(Interpreter& in, const Value& self, CallArgs& a) {
  ArgReader r(a, "join", {"iterable"});
  if (!r.get(0)) throw_error("join() takes exactly one argument (0 given)");
  std::string out;
  bool first = true;
  for (const auto& item : iterate(*r.get(0))) {
    if (!item.is_string()) throw_error(fmt::format("sequence item: expected str instance, {} found", type_name(item)));
    if (!first) out += self.as_string();
    first = false;
    out += item.as_string();
    in.check_string_size(out.size());
  }
  return Value::string(std::move(out));
}
Value m_format(Interpreter& in, const Value& self, CallArgs& a) {
  return Value::string(str_format(in, self.as_string(), a));
}
template <bool (*Pred)(char32_t)>
Value char_class(Interpreter&, const Value& self, CallArgs& a) {
  ArgReader r(a, "is*", {});
  const std::string& s = self.as_string();
  if (s.empty()) return Value::boolean(false);
  size_t i = 0;
  while (i < s.size())
    if (!Pred(utf8_next(s, &i))) return Value::boolean(false);
  return Value::boolean(true);
}
bool cp_digit(char32_t c) { return c >= '0' && c <= '9'; }
bool cp_alpha(char32_t c) { return (c < 0x80) ? isalpha(static_cast<int>(c)) != 0 : (py_iscased_upper(c) || py_iscased_lower(c)); }
bool cp_alnum(char32_t c) { return cp_digit(c) || cp_alpha(c); }
Value m_isupper(Interpreter&, const Value& self, CallArgs&) {
  bool cased = false;
  const std::string& s = self.as_string();
  size_t i = 0;
  while (i < s.size()) {
    char32_t c = utf8_next(s, &i);
    if (py_iscased_lower(c)) return Value::boolean(false);
    cased = cased || py_iscased_upper(c);
  }
  return Value::boolean(cased);
}
Value m_islower(Interpreter&, const Value& self, CallArgs&) {
  bool cased = false;
  const std::string& s = self.as_string();
  size_t i = 0;
  while (i < s.size()) {
    char32_t c = utf8_next(s, &i);
    if (py_iscased_upper(c)) return Value::boolean(false);
    cased = cased || py_iscased_lower(c);
  }
  return Value::boolean(cased);
}
Value pad_impl(Interpreter& in, const Value& self, CallArgs& a, int mode, const char* name) {
  ArgReader r(a, name, {"width", "fillchar"});
  if (!r.get(0)) throw_error(fmt::format("{}() takes at least 1 argument (0 given)", name));
  int64_t width = expect_int(*r.get(0), "width");
  std::string fill = r.get(1) ? expect_string(*r.get(1), "fillchar") : " ";
  if (utf8_length(fill) != 1) throw_error("The fill character must be exactly one character long");
  const std::string& s = self.as_string();
  int64_t len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return self;
  in.check_string_size(static_cast<size_t>(width) * fill.size());
  int64_t pad = width - len, left = 0;
  if (mode == 0) left = pad / 2 + (pad & width & 1);  // CPython's centering
  if (mode == 2) left = pad;
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < pad - left; ++i) out += fill;
  return Value::string(std::move(out));
}
Value m_center(Interpreter& in, const Value& self, CallArgs& a) { return pad_impl(in, self, a, 0, "center"); }
Value m_ljust(Interpreter& in, const Value& self, CallArgs& a) { return pad_impl(in, self, a, 1, "ljust"); }
Value m_rjust(Interpreter& in, const Value& self, CallArgs& a) { return pad_impl(in, self, a, 2, "rjust"); }
Value m_removeprefix(Interpreter&, const Value& self, CallArgs& a) {
  ArgReader r(a, "removeprefix", {"prefix"});
  if (!r.get(0)) throw_error("removeprefix() takes exactly one argument");
  const std::string& p = expect_string(*r.get(0), "prefix");
  const std::string& s = self.as_string();
  return Value::string(s.compare(0, p.size(), p) == 0 ? s.substr(p.size()) : s);
}
Value m_removesuffix(Interpreter&, const Value& self, CallArgs& a) {
  ArgReader r(a, "removesuffix", {"suffix"});
  if (!r.get(0)) throw_error("removesuffix() takes exactly one argument");
  const std::string& p = expect_string(*r.get(0), "suffix");
  const std::string& s = self.as_string();
  bool has = !p.empty() && s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
  return Value::string(has ? s.substr(0, s.size() - p.size()) : s);
}

Value d_items(Interpreter&, const Value& self, CallArgs& a) {
  ArgReader r(a, "items", {});
  std::vector<Value> out;
  for (const auto& [k, v] : self.as_dict().items) out.push_back(Value::list({k, v}, true));
  return Value::sequence(std::move(out), SeqKind::kDictItems);
}
Value d_keys(Interpreter&, const Value& self, CallArgs& a) {
  ArgReader r(a, "keys", {});
  return Value::sequence(iterate(self), SeqKind::kDictKeys);
}
Value d_values(Interpreter&, const Value& self, CallArgs& a) {
  ArgReader r(a, "values", {});
  std::vector<Value> out;
  for (const auto& kv : self.as_dict().items) out.push_back(kv.second);
  return Value::sequence(std::move(out), SeqKind::kDictValues);
}
Value d_get(Interpreter&, const Value& self, CallArgs& a) {
  ArgReader r(a, "get", {"key", "default"});
  if (!r.get(0)) throw_error("get expected at least 1 argument, got 0");
  hash_key(*r.get(0));
  const Value* v = self.as_dict().find(*r.get(0));
  if (v) return *v;
  return r.get_or(1, Value::none());
}
Value d_copy(Interpreter&, const Value& self, CallArgs& a) {
  ArgReader r(a, "copy", {});
  return Value::dict(self.as_dict().items);
}
Value l_count(Interpreter&, const Value& self, CallArgs& a) {
  ArgReader r(a, "count", {"value"});
  if (!r.get(0)) throw_error("count() takes exactly one argument (0 given)");
  int64_t n = 0;
  for (const auto& x : self.items()) n += values_equal(x, *r.get(0)) ? 1 : 0;
  return Value::integer(n);
}
Value l_index(Interpreter&, const Value& self, CallArgs& a) {
  ArgReader r(a, "index", {"value"});
  if (!r.get(0)) throw_error("index expected at least 1 argument, got 0");
  const auto& items = self.items();
  for (size_t i = 0; i < items.size(); ++i)
    if (values_equal(items[i], *r.get(0))) return Value::integer(static_cast<int64_t>(i));
  throw_error(fmt::format("{} is not in list", repr(*r.get(0))));
}
Value l_copy(Interpreter&, const Value& self, CallArgs& a) {
  ArgReader r(a, "copy", {});
  return Value::list(self.items(), self.is_tuple());
}

struct MethodEntry {
  const char* name;
  Method fn;
};

const MethodEntry kStringMethods[] = {
    {"strip", m_strip},       {"lstrip", m_lstrip},         {"rstrip", m_rstrip},
    {"split", m_split},       {"rsplit", m_rsplit},         {"splitlines", m_splitlines},
    {"startswith", m_startswith}, {"endswith", m_endswith}, {"upper", m_upper},
    {"lower", m_lower},       {"title", m_title},           {"capitalize", m_capitalize},
    {"replace", m_replace},   {"find", m_find},             {"rfind", m_rfind},
    {"count", m_count},       {"join", m_join},             {"format", m_format},
    {"isdigit", char_class<cp_digit>}, {"isnumeric", char_class<cp_digit>}, {"isdecimal", char_class<cp_digit>},
    {"isalpha", char_class<cp_alpha>}, {"isalnum", char_class<cp_alnum>}, {"isspace", char_class<py_isspace>},
    {"isupper", m_isupper},   {"islower", m_islower},       {"center", m_center},
    {"ljust", m_ljust},       {"rjust", m_rjust},           {"removeprefix", m_removeprefix},
    {"removesuffix", m_removesuffix},
};
const MethodEntry kDictMethods[] = {
    {"items", d_items}, {"keys", d_keys}, {"values", d_values}, {"get", d_get}, {"copy", d_copy},
};
const MethodEntry kListMethods[] = {
    {"count", l_count}, {"index", l_index}, {"copy", l_copy},
};
const char* const kUnsafeDict[] = {"clear", "pop", "popitem", "setdefault", "update"};
const char* const kUnsafeList[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};

template <size_t N>
std::optional<Value> lookup(const MethodEntry (&table)[N], const Value& self, const std::string& name) {
  for (const auto& m : table) {
    if (name != m.name) continue;
    Method fn = m.fn;
    return Value::function(
        name, [self, fn](Interpreter& in, CallArgs& args) { return fn(in, self, args); }, self.has_namespace());
  }
  return std::nullopt;
}

template <size_t N>
std::optional<Value> unsafe(const char* const (&names)[N], const Value& self, const std::string& name) {
  for (const char* n : names)
    if (name == n)
      return Value::undefined(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(self)));
  return std::nullopt;
}

}  // namespace

std::optional<Value> find_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) return lookup(kStringMethods, obj, name);
  if (obj.is_dict() && !obj.is_namespace()) {
    if (auto m = lookup(kDictMethods, obj, name)) return m;
    return unsafe(kUnsafeDict, obj, name);
  }
  if (obj.is_sequence()) {
    if (auto m = lookup(kListMethods, obj, name)) return m;
    if (!obj.is_tuple()) return unsafe(kUnsafeList, obj, name);
  }
  return std::nullopt;
}

}  // namespace pagoda::tmpl

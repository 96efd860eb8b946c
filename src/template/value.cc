#include "template/value.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>

#include "template/unicode.h"

namespace pagoda::tmpl {

void throw_error(std::string message, StatusCode code) {
  throw TemplateException{code, std::move(message), {}, false};
}
void throw_error_at(SourcePos pos, std::string message, StatusCode code) {
  throw TemplateException{code, std::move(message), pos, false};
}

namespace {
const std::vector<Value> kEmptyItems;

void check_depth(int depth) {
  if (depth > kMaxValueDepth)
    throw_error(fmt::format("value nesting deeper than {} levels", kMaxValueDepth), StatusCode::kResourceExhausted);
}
}  // namespace

Value Value::list(std::vector<Value> items, bool tuple) {
  return sequence(std::move(items), tuple ? SeqKind::kTuple : SeqKind::kList);
}

Value Value::sequence(std::vector<Value> items, SeqKind kind) {
  auto obj = std::make_shared<ListObj>();
  int depth = 0;
  bool ns = false;
  for (const auto& v : items) {
    depth = std::max(depth, v.depth());
    ns = ns || v.has_namespace();
  }
  check_depth(depth + 1);
  obj->items = std::move(items);
  obj->kind = kind;
  obj->depth = depth + 1;
  obj->has_namespace = ns;
  return Value(ListPtr(std::move(obj)));
}

Value Value::dict(std::vector<std::pair<Value, Value>> items) {
  auto obj = std::make_shared<DictObj>();
  for (auto& [k, v] : items) obj->set(k, std::move(v));
  return Value(DictPtr(std::move(obj)));
}

Value Value::new_namespace() {
  auto obj = std::make_shared<DictObj>();
  obj->is_namespace = true;
  obj->has_namespace = true;
  return Value(DictPtr(std::move(obj)));
}

Value Value::function(std::string name, NativeFn fn, bool holds_namespace) {
  auto obj = std::make_shared<FunctionObj>();
  obj->name = std::move(name);
  obj->fn = std::move(fn);
  obj->holds_namespace = holds_namespace;
  return Value(FunctionPtr(std::move(obj)));
}

bool Value::is_namespace() const { return is_dict() && as_dict().is_namespace; }
bool Value::is_tuple() const { return is_list() && as_list().kind == SeqKind::kTuple; }
SeqKind Value::seq_kind() const { return as_list().kind; }
const std::vector<Value>& Value::items() const { return is_list() ? as_list().items : kEmptyItems; }

double Value::to_double() const {
  switch (kind()) {
    case Kind::kBool: return as_bool() ? 1.0 : 0.0;
    case Kind::kInt: return static_cast<double>(as_int());
    case Kind::kFloat: return as_float();
    default: return 0.0;
  }
}
int64_t Value::to_int() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  if (is_int()) return as_int();
  return 0;
}
int Value::depth() const {
  if (is_list()) return as_list().depth;
  if (is_dict()) return as_dict().depth;
  return 0;
}
bool Value::has_namespace() const {
  if (is_list()) return as_list().has_namespace;
  if (is_dict()) return as_dict().has_namespace;
  if (is_function()) return as_function().holds_namespace;
  return false;
}

const Value* DictObj::find(const Value& key) const {
  if (key.is_list() && !key.is_tuple()) return nullptr;
  if (key.is_dict() || key.is_undefined() || key.is_function()) return nullptr;
  auto it = index_.find(hash_key(key));
  return it == index_.end() ? nullptr : &items[it->second].second;
}
const Value* DictObj::find(const std::string& key) const {
  auto it = index_.find("s" + key);
  return it == index_.end() ? nullptr : &items[it->second].second;
}
void DictObj::set(const Value& key, Value value) {
  std::string h = hash_key(key);
  int d = value.depth() + 1;
  if (!is_namespace) check_depth(d);
  depth = std::max(depth, d);
  has_namespace = has_namespace || value.has_namespace();
  auto it = index_.find(h);
  if (it != index_.end()) {
    items[it->second].second = std::move(value);
    return;
  }
  index_.emplace(std::move(h), items.size());
  items.emplace_back(key, std::move(value));
}

std::string hash_key(const Value& v) {
  auto tagged = [](char tag, std::string s) {
    s.insert(s.begin(), tag);
    return s;
  };
  switch (v.kind()) {
    case Value::Kind::kString: return "s" + v.as_string();
    case Value::Kind::kBool:
    case Value::Kind::kInt: return tagged('i', std::to_string(v.to_int()));
    case Value::Kind::kFloat: {
      double d = v.as_float();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18)
        return tagged('i', std::to_string(static_cast<int64_t>(d)));
      return tagged('f', py_float_repr(d));
    }
    case Value::Kind::kNone: return "n";
    case Value::Kind::kList:
      if (v.is_tuple()) {
        std::string out = "t(";
        for (const auto& x : v.items()) out += hash_key(x) + ",";
        return out + ")";
      }
      break;
    default: break;
  }
  throw_error(fmt::format("unhashable type: '{}'", type_name(v)));
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return v.as_bool();
    case Value::Kind::kInt: return v.as_int() != 0;
    case Value::Kind::kFloat: return v.as_float() != 0.0;
    case Value::Kind::kString: return !v.as_string().empty();
    case Value::Kind::kList: return v.is_lazy() || !v.items().empty();
    case Value::Kind::kDict: return v.is_namespace() || v.as_dict().size() > 0;
    case Value::Kind::kFunction: return true;
  }
  return false;
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList:
      switch (v.seq_kind()) {
        case SeqKind::kList: return "list";
        case SeqKind::kTuple: return "tuple";
        case SeqKind::kGenerator: return "generator";
        case SeqKind::kReverseIterator: return "list_reverseiterator";
        case SeqKind::kDictItems: return "dict_items";
        case SeqKind::kDictKeys: return "dict_keys";
        case SeqKind::kDictValues: return "dict_values";
      }
      return "list";
    case Value::Kind::kDict: return v.is_namespace() ? "Namespace" : "dict";
    case Value::Kind::kFunction: return "function";
  }
  return "object";
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0.0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string s(buf, res.ptr);
  bool neg = false;
  if (s[0] == '-') {
    neg = true;
    s.erase(0, 1);
  }
  size_t e = s.find('e');
  std::string mant = s.substr(0, e);
  int exp = std::stoi(s.substr(e + 1));
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = neg ? "-" : "";
  int nd = static_cast<int>(digits.size());
  if (exp >= -4 && exp < 16) {
    int decpt = exp + 1;
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (decpt >= nd) {
      out += digits + std::string(decpt - nd, '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (nd > 1) {
    out += '.';
    out.append(digits, 1, std::string::npos);
  }
  out += exp < 0 ? "e-" : "e+";
  int ae = exp < 0 ? -exp : exp;
  if (ae < 10) out += "0";
  out += std::to_string(ae);
  return out;
}

std::string py_string_repr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  size_t i = 0;
  while (i < s.size()) {
    char32_t c = utf8_next(s, &i);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (!py_isprintable(c)) {
      if (c < 0x100)
        out += fmt::format("\\x{:02x}", static_cast<uint32_t>(c));
      else if (c < 0x10000)
        out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
      else
        out += fmt::format("\\U{:08x}", static_cast<uint32_t>(c));
    } else {
      utf8_append(&out, c);
    }
  }
  out += quote;
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {
void repr_into(const Value& v, std::string* out) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: *out += "Undefined"; return;
    case Value::Kind::kNone: *out += "None"; return;
    case Value::Kind::kBool: *out += v.as_bool() ? "True" : "False"; return;
    case Value::Kind::kInt: *out += std::to_string(v.as_int()); return;
    case Value::Kind::kFloat: *out += py_float_repr(v.as_float()); return;
    case Value::Kind::kString:
      if (v.is_markup()) *out += "Markup(";
      *out += py_string_repr(v.as_string());
      if (v.is_markup()) *out += ")";
      return;
    case Value::Kind::kList: {
      if (v.is_lazy()) {
        *out += '<';
        *out += type_name(v);
        *out += " object>";
        return;
      }
      bool view = !v.is_sequence();
      if (view) *out += type_name(v) + "(";
      bool tuple = v.is_tuple();
      *out += tuple ? '(' : '[';
      const auto& items = v.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) *out += ", ";
        repr_into(items[i], out);
      }
      if (tuple && items.size() == 1) *out += ',';
      *out += tuple ? ')' : ']';
      if (view) *out += ')';
      return;
    }
    case Value::Kind::kDict: {
      const auto& d = v.as_dict();
      if (d.is_namespace) *out += "<Namespace ";
      *out += '{';
      for (size_t i = 0; i < d.items.size(); ++i) {
        if (i) *out += ", ";
        repr_into(d.items[i].first, out);
        *out += ": ";
        if (d.items[i].second.is_namespace())
          *out += "<Namespace {...}>";  // namespaces may refer to themselves
        else
          repr_into(d.items[i].second, out);
      }
      *out += '}';
      if (d.is_namespace) *out += '>';
      return;
    }
    case Value::Kind::kFunction: *out += "<function " + v.as_function().name + ">"; return;
  }
}
}  // namespace

std::string repr(const Value& v) {
  std::string out;
  repr_into(v, &out);
  return out;
}

std::string to_str(const Value& v) {
  if (v.is_string()) return v.as_string();
  if (v.is_undefined()) return "";
  return repr(v);
}

bool values_equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.to_double() == b.to_double();
    return a.to_int() == b.to_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone: return true;
    case K::kString: return a.as_string() == b.as_string();
    case K::kList: {
      if (a.seq_kind() != b.seq_kind()) return false;
      if (a.is_lazy()) return &a.as_list() == &b.as_list();
      const auto &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!values_equal(x[i], y[i])) return false;
      return true;
    }
    case K::kDict: {
      if (a.is_namespace() || b.is_namespace()) return a.dict_ptr() == b.dict_ptr();
      const auto &x = a.as_dict(), &y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* o = y.find(k);
        if (!o || !values_equal(v, *o)) return false;
      }
      return true;
    }
    case K::kFunction: return &a.as_function() == &b.as_function();
    default: return false;
  }
}

int compare_values(const Value& a, const Value& b, const char* op) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.to_double(), y = b.to_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    int64_t x = a.to_int(), y = b.to_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_sequence() && b.is_sequence() && a.is_tuple() == b.is_tuple()) {
    const auto &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i])) continue;
      return compare_values(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  if (a.is_undefined() || b.is_undefined())
    throw_error(a.is_undefined() ? a.undefined_hint() : b.undefined_hint());
  throw_error(fmt::format("'{}' not supported between instances of '{}' and '{}'", op, type_name(a), type_name(b)));
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.items();
    case Value::Kind::kDict: {
      if (v.is_namespace()) break;
      std::vector<Value> keys;
      keys.reserve(v.as_dict().size());
      for (const auto& kv : v.as_dict().items) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> out;
      const std::string& s = v.as_string();
      size_t i = 0;
      while (i < s.size()) {
        size_t b = i;
        utf8_next(s, &i);
        out.push_back(Value::string(s.substr(b, i - b)));
      }
      return out;
    }
    default: break;
  }
  throw_error(fmt::format("'{}' object is not iterable", type_name(v)));
}

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(utf8_length(v.as_string()));
    case Value::Kind::kList:
      if (v.is_lazy()) break;
      return static_cast<int64_t>(v.items().size());
    case Value::Kind::kDict:
      if (!v.is_namespace()) return static_cast<int64_t>(v.as_dict().size());
      break;
    default: break;
  }
  throw_error(fmt::format("object of type '{}' has no len()", type_name(v)));
}

namespace {
template <class J>
Value from_json_impl(const J& j, int depth) {
  if (depth > kMaxValueDepth)
    throw_error(fmt::format("input nesting deeper than {} levels", kMaxValueDepth), StatusCode::kInvalidArgument);
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return Value::integer(static_cast<int64_t>(u));
      return Value::number(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float: return Value::number(j.template get<double>());
    case nlohmann::json::value_t::string: return Value::string(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json_impl(x, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      std::vector<std::pair<Value, Value>> items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        items.emplace_back(Value::string(it.key()), from_json_impl(it.value(), depth + 1));
      return Value::dict(std::move(items));
    }
    default: return Value::none();
  }
}
}  // namespace

Value from_json(const nlohmann::ordered_json& j) { return from_json_impl(j, 0); }
Value from_json(const nlohmann::json& j) { return from_json_impl(j, 0); }

}  // namespace pagoda::tmpl

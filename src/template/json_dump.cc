// Python's json.dumps for template values: what transformers' `tojson` filter returns.
// Matches CPython's encoder: ", " / ": " separators (or "," with indent), float repr, NaN /
// Infinity, \uXXXX escapes (lower-case hex, surrogate pairs with ensure_ascii), keys converted
// from int/float/bool/None, sort_keys, and the indent layout (newline + indent per level).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "template/builtins.h"
#include "template/unicode.h"

namespace pagoda::tmpl {
namespace {

void dump_string(const std::string& s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      if (!ensure_ascii) {
        out->push_back(static_cast<char>(c));
        ++i;
        continue;
      }
      char32_t cp = utf8_next(s, &i);
      if (cp >= 0x10000) {
        char32_t v = cp - 0x10000;
        *out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        *out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
      }
      continue;
    }
    ++i;
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c == 0x7F))
          *out += fmt::format("\\u{:04x}", c);
        else
          out->push_back(static_cast<char>(c));
    }
  }
  out->push_back('"');
}

std::string float_json(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return py_float_repr(d);
}

std::string key_string(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::kString: return k.as_string();
    case Value::Kind::kBool: return k.as_bool() ? "true" : "false";
    case Value::Kind::kNone: return "null";
    case Value::Kind::kInt: return std::to_string(k.as_int());
    case Value::Kind::kFloat: return float_json(k.as_float());
    default: throw_error(fmt::format("keys must be str, int, float, bool or None, not {}", type_name(k)));
  }
}

void dump(const Value& v, const JsonDumpOptions& o, int level, std::string* out) {
  switch (v.kind()) {
    case Value::Kind::kNone: *out += "null"; return;
    case Value::Kind::kBool: *out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: *out += std::to_string(v.as_int()); return;
    case Value::Kind::kFloat: *out += float_json(v.as_float()); return;
    case Value::Kind::kString: dump_string(v.as_string(), o.ensure_ascii, out); return;
    case Value::Kind::kList: {
      if (!v.is_sequence()) break;
      const auto& items = v.items();
      if (items.empty()) {
        *out += "[]";
        return;
      }
      std::string nl;
      if (o.has_indent) {
        nl = "\n";
        for (int i = 0; i <= level; ++i) nl += o.indent;
      }
      *out += '[';
      *out += nl;
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) *out += o.item_separator + nl;
        dump(items[i], o, level + 1, out);
      }
      if (o.has_indent) {
        *out += '\n';
        for (int i = 0; i < level; ++i) *out += o.indent;
      }
      *out += ']';
      return;
    }
    case Value::Kind::kDict: {
      if (v.is_namespace()) break;
      const auto& d = v.as_dict();
      if (d.size() == 0) {
        *out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& kv : d.items) items.push_back(&kv);
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](const auto* a, const auto* b) { return compare_values(a->first, b->first) < 0; });
      std::string nl;
      if (o.has_indent) {
        nl = "\n";
        for (int i = 0; i <= level; ++i) nl += o.indent;
      }
      *out += '{';
      *out += nl;
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) *out += o.item_separator + nl;
        dump_string(key_string(items[i]->first), o.ensure_ascii, out);
        *out += o.key_separator;
        dump(items[i]->second, o, level + 1, out);
      }
      if (o.has_indent) {
        *out += '\n';
        for (int i = 0; i < level; ++i) *out += o.indent;
      }
      *out += '}';
      return;
    }
    default: break;
  }
  std::string t = v.is_namespace() ? "TemplateNamespace" : (v.is_function() ? "function" : type_name(v));
  throw_error(fmt::format("Object of type {} is not JSON serializable", t));
}

}  // namespace

std::string json_dumps(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  dump(v, options, 0, &out);
  return out;
}

}  // namespace pagoda::tmpl

#include "grammar/json_schema_compiler.h"

#include <cmath>
#include <limits>
#include <set>
#include <unordered_map>

#include "common/utf8.h"
#include "grammar/regex_compiler.h"

namespace pagoda::grammar {

using ojson = nlohmann::ordered_json;

namespace {

constexpr int kMaxSchemaDepth = 128;
constexpr int64_t kMaxCount = 10000;        // minItems / maxItems / minLength / maxLength
constexpr int64_t kMaxInt = 999999999999999999;  // 18 digits

const char* const kUnsupported[] = {"multipleOf", "uniqueItems", "contains", "minContains", "maxContains",
                                    "patternProperties", "propertyNames", "minProperties", "maxProperties",
                                    "dependentRequired", "dependentSchemas", "if", "then", "else", "not",
                                    "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"};

std::string escape_codepoint(uint32_t cp) {
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: break;
  }
  if (cp < 0x20) return fmt::format("\\u{:04x}", cp);
  std::string s;
  append_utf8(static_cast<char32_t>(cp), &s);
  return s;
}

bool needs_escape(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\'; }

// A regex expression over decoded text -> the same over its JSON-escaped form.
ExprPtr json_escape(const ExprPtr& e) {
  switch (e->kind) {
    case Expr::kLiteral: {
      std::string out;
      for (size_t i = 0; i < e->literal.size();) out += escape_codepoint(decode_utf8(e->literal, &i));
      return ex::lit(out);
    }
    case Expr::kClass: {
      // Positive ranges first.
      std::vector<CodepointRange> r = e->ranges;
      std::sort(r.begin(), r.end(), [](auto a, auto b) { return a.lo < b.lo; });
      if (e->negated) {
        std::vector<CodepointRange> comp;
        uint32_t next = 0;
        for (auto x : r) {
          if (x.lo > next) comp.push_back({next, x.lo - 1});
          next = std::max(next, x.hi + 1);
        }
        if (next <= 0x10FFFF) comp.push_back({next, 0x10FFFF});
        r = comp;
      }
      std::vector<CodepointRange> plain;
      std::vector<ExprPtr> alts;
      for (auto x : r) {
        for (uint32_t cp = x.lo; cp <= std::min<uint32_t>(x.hi, 0x5C); ++cp)
          if (needs_escape(cp)) alts.push_back(ex::lit(escape_codepoint(cp)));
        // x minus {0x00-0x1F, 0x22, 0x5C}
        uint32_t lo = std::max<uint32_t>(x.lo, 0x20);
        const uint32_t cuts[] = {0x22, 0x5C};
        for (uint32_t c : cuts) {
          if (lo > x.hi) break;
          if (c >= lo && c <= x.hi) {
            if (c > lo) plain.push_back({lo, c - 1});
            lo = c + 1;
          }
        }
        if (lo <= x.hi) plain.push_back({lo, x.hi});
      }
      if (!plain.empty()) alts.insert(alts.begin(), ex::cls(plain));
      if (alts.empty()) return ex::cls({{0x20, 0x20}}, false);  // unreachable: classes are non-empty
      return ex::alt(std::move(alts));
    }
    case Expr::kSeq:
    case Expr::kAlt: {
      std::vector<ExprPtr> items;
      for (const auto& i : e->items) items.push_back(json_escape(i));
      return e->kind == Expr::kSeq ? ex::seq(std::move(items)) : ex::alt(std::move(items));
    }
    case Expr::kRepeat:
      return ex::repeat(json_escape(e->items[0]), e->min, e->max);
    case Expr::kRef:
      return e;
  }
  return e;
}

int num_digits(int64_t v) {
  int d = 1;
  while (v >= 10) {
    v /= 10;
    ++d;
  }
  return d;
}

// Decimal strings of equal length, lo <= hi.
ExprPtr same_length_range(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return ex::empty();
  if (lo == hi) return ex::lit(lo);
  if (lo[0] == hi[0]) return ex::seq({ex::lit(lo.substr(0, 1)), same_length_range(lo.substr(1), hi.substr(1))});
  const size_t n = lo.size() - 1;
  auto digits = [](char a, char b) { return ex::cls({{static_cast<uint32_t>(a), static_cast<uint32_t>(b)}}); };
  auto any = [&](size_t k) { return ex::repeat(digits('0', '9'), static_cast<int32_t>(k), static_cast<int32_t>(k)); };
  if (lo.substr(1) == std::string(n, '0') && hi.substr(1) == std::string(n, '9')) return ex::seq({digits(lo[0], hi[0]), any(n)});
  std::vector<ExprPtr> alts;
  alts.push_back(ex::seq({ex::lit(lo.substr(0, 1)), same_length_range(lo.substr(1), std::string(n, '9'))}));
  if (lo[0] + 1 <= hi[0] - 1) alts.push_back(ex::seq({digits(static_cast<char>(lo[0] + 1), static_cast<char>(hi[0] - 1)), any(n)}));
  alts.push_back(ex::seq({ex::lit(hi.substr(0, 1)), same_length_range(std::string(n, '0'), hi.substr(1))}));
  return ex::alt(std::move(alts));
}

// Decimal integers (no leading zeros) in [a, b], 0 <= a <= b.
ExprPtr nonneg_range(int64_t a, int64_t b) {
  std::vector<ExprPtr> alts;
  int64_t p = 1;  // 10^(d - 1)
  for (int d = 1; d <= num_digits(b); ++d) {
    // The largest d-digit number; 19 digits reach INT64_MAX (10^19 - 1 does not fit).
    const int64_t top = d >= 19 ? std::numeric_limits<int64_t>::max() : p * 10 - 1;
    const int64_t lo = std::max(a, d == 1 ? 0 : p), hi = std::min(b, top);
    if (lo <= hi && d >= num_digits(a)) alts.push_back(same_length_range(std::to_string(lo), std::to_string(hi)));
    if (d < 19) p *= 10;
  }
  return ex::alt(std::move(alts));
}

// Integers in [lo, hi]; -2^63 itself is not generated (its magnitude does not fit an int64_t).
ExprPtr int_range(int64_t lo, int64_t hi) {
  lo = std::max(lo, -std::numeric_limits<int64_t>::max());
  std::vector<ExprPtr> alts;
  if (lo < 0) alts.push_back(ex::seq({ex::lit("-"), nonneg_range(std::max<int64_t>(1, -std::min<int64_t>(hi, -1)), -lo)}));
  if (hi >= 0) alts.push_back(nonneg_range(std::max<int64_t>(lo, 0), hi));
  return ex::alt(std::move(alts));
}

const char* format_regex(const std::string& f) {
  static const std::unordered_map<std::string, const char*> formats = {
      {"date", "[1-9][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])"},
      {"time", "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](Z|[+-](0[0-9]|1[0-3]):[0-5][0-9])"},
      {"date-time", "[1-9][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](Z|[+-](0[0-9]|1[0-3]):[0-5][0-9])"},
      {"uuid", "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"},
      {"email", "[a-zA-Z0-9_%+-]{1,32}(\\.[a-zA-Z0-9_%+-]{1,16}){0,3}@[a-zA-Z0-9]{1,32}(\\.[a-zA-Z0-9]{1,16}){1,3}"},
      {"ipv4", "((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"},
  };
  auto it = formats.find(f);
  return it == formats.end() ? nullptr : it->second;
}

class SchemaCompiler {
 public:
  SchemaCompiler(GrammarBuilder* b, const ojson& root, std::string prefix) : b_(b), root_(root), prefix_(std::move(prefix)) {}

  Result<ExprPtr> visit(const ojson& s, const std::string& where, int depth) {
    if (depth > kMaxSchemaDepth) return invalid_argument("schema nested deeper than {} at {}", kMaxSchemaDepth, where);
    if (s.is_boolean()) {
      if (s.get<bool>()) return any_value();
      return invalid_argument("schema 'false' at {} matches nothing", where);
    }
    if (!s.is_object()) return invalid_argument("schema at {} must be an object or a boolean", where);
    for (const char* k : kUnsupported)
      if (s.contains(k)) return invalid_argument("JSON Schema keyword '{}' (at {}) is not supported", k, where);
    ExprPtr e;
    PAGODA_RETURN_IF_ERROR(visit_inner(s, where, depth, &e));
    if (s.contains("nullable") && s["nullable"].is_boolean() && s["nullable"].get<bool>()) e = ex::alt({e, ex::lit("null")});
    return e;
  }

 private:
  Status visit_inner(const ojson& s, const std::string& where, int depth, ExprPtr* out) {
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) return invalid_argument("'$ref' at {} must be a string", where);
      return ref(s["$ref"].get<std::string>(), where, depth, out);
    }
    if (s.contains("const")) {
      *out = ex::lit(s["const"].dump());
      return {};
    }
    if (s.contains("enum")) {
      const ojson& en = s["enum"];
      if (!en.is_array() || en.empty()) return invalid_argument("'enum' at {} must be a non-empty array", where);
      std::vector<ExprPtr> alts;
      for (const auto& v : en) alts.push_back(ex::lit(v.dump()));
      *out = ex::alt(std::move(alts));
      return {};
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!s.contains(k)) continue;
      const ojson& list = s[k];
      if (!list.is_array() || list.empty()) return invalid_argument("'{}' at {} must be a non-empty array", k, where);
      std::vector<ExprPtr> alts;
      for (size_t i = 0; i < list.size(); ++i) {
        PAGODA_ASSIGN_OR_RETURN(ExprPtr a, visit(merge_siblings(s, list[i], k), fmt::format("{}/{}/{}", where, k, i), depth + 1));
        alts.push_back(a);
      }
      *out = ex::alt(std::move(alts));
      return {};
    }
    if (s.contains("allOf")) {
      const ojson& list = s["allOf"];
      if (!list.is_array() || list.size() != 1) return invalid_argument("'allOf' at {} is supported with exactly one schema", where);
      PAGODA_ASSIGN_OR_RETURN(*out, visit(merge_siblings(s, list[0], "allOf"), where + "/allOf/0", depth + 1));
      return {};
    }
    if (s.contains("type")) {
      const ojson& t = s["type"];
      if (t.is_string()) return visit_type(t.get<std::string>(), s, where, depth, out);
      if (!t.is_array() || t.empty()) return invalid_argument("'type' at {} must be a string or a non-empty array", where);
      std::vector<ExprPtr> alts;
      for (const auto& ti : t) {
        if (!ti.is_string()) return invalid_argument("'type' at {} must list strings", where);
        ExprPtr a;
        PAGODA_RETURN_IF_ERROR(visit_type(ti.get<std::string>(), s, where, depth, &a));
        alts.push_back(a);
      }
      *out = ex::alt(std::move(alts));
      return {};
    }
    // No type: infer from the keywords present.
    for (const char* k : {"properties", "additionalProperties", "required"})
      if (s.contains(k)) return visit_type("object", s, where, depth, out);
    for (const char* k : {"items", "prefixItems", "minItems", "maxItems"})
      if (s.contains(k)) return visit_type("array", s, where, depth, out);
    for (const char* k : {"minLength", "maxLength", "pattern", "format"})
      if (s.contains(k)) return visit_type("string", s, where, depth, out);
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
      if (s.contains(k)) return visit_type("number", s, where, depth, out);
    *out = any_value();
    return {};
  }

  // anyOf / allOf branches inherit the parent's other keywords (e.g. {"type": "object",
  // "anyOf": [{"required": [...]}, ...]}).
  static ojson merge_siblings(const ojson& parent, const ojson& branch, const char* key) {
    if (!branch.is_object()) return branch;
    ojson m = branch;
    for (auto it = parent.begin(); it != parent.end(); ++it) {
      if (it.key() == key || it.key() == "$defs" || it.key() == "definitions" || it.key() == "nullable") continue;
      if (!m.contains(it.key())) m[it.key()] = it.value();
    }
    return m;
  }

  Status ref(const std::string& r, const std::string& where, int depth, ExprPtr* out) {
    auto it = refs_.find(r);
    if (it != refs_.end()) {
      *out = ex::ref(it->second);
      return {};
    }
    if (r.empty() || r[0] != '#') return invalid_argument("'$ref' '{}' at {}: only local references (#...) are supported", r, where);
    const ojson* target = nullptr;
    try {
      target = &root_.at(ojson::json_pointer(r.substr(1)));
    } catch (const std::exception&) {
      return invalid_argument("'$ref' '{}' at {} does not resolve", r, where);
    }
    const std::string name = b_->fresh_name(prefix_ + "ref");
    refs_[r] = name;
    PAGODA_ASSIGN_OR_RETURN(ExprPtr body, visit(*target, r, depth + 1));
    b_->define(name, body);
    *out = ex::ref(name);
    return {};
  }

  Status visit_type(const std::string& t, const ojson& s, const std::string& where, int depth, ExprPtr* out) {
    if (t == "string") return string_expr(s, where, out);
    if (t == "integer") return integer_expr(s, where, true, out);
    if (t == "number") return integer_expr(s, where, false, out);
    if (t == "boolean") {
      *out = ex::alt({ex::lit("true"), ex::lit("false")});
      return {};
    }
    if (t == "null") {
      *out = ex::lit("null");
      return {};
    }
    if (t == "object") return object_expr(s, where, depth, out);
    if (t == "array") return array_expr(s, where, depth, out);
    return invalid_argument("unknown type '{}' at {}", t, where);
  }

  static Status count(const ojson& s, const char* key, const std::string& where, int64_t* v) {
    if (!s.contains(key)) return {};
    const ojson& x = s[key];
    if (!x.is_number_integer() && !(x.is_number_float() && std::floor(x.get<double>()) == x.get<double>()))
      return invalid_argument("'{}' at {} must be a non-negative integer", key, where);
    const double d = x.get<double>();
    if (d < 0) return invalid_argument("'{}' at {} must be a non-negative integer", key, where);
    if (d > kMaxCount) return invalid_argument("'{}' at {} is over the supported {}", key, where, kMaxCount);
    *v = static_cast<int64_t>(d);
    return {};
  }

  Status string_expr(const ojson& s, const std::string& where, ExprPtr* out) {
    int64_t mn = 0, mx = -1;
    PAGODA_RETURN_IF_ERROR(count(s, "minLength", where, &mn));
    PAGODA_RETURN_IF_ERROR(count(s, "maxLength", where, &mx));
    if (mx >= 0 && mx < mn) return invalid_argument("'maxLength' < 'minLength' at {}", where);
    std::string pattern;
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) return invalid_argument("'pattern' at {} must be a string", where);
      pattern = s["pattern"].get<std::string>();
    } else if (s.contains("format") && s["format"].is_string()) {
      if (const char* f = format_regex(s["format"].get<std::string>())) pattern = f;
    }
    if (!pattern.empty()) {
      if (mn > 0 || mx >= 0) return invalid_argument("'pattern' or 'format' with 'minLength'/'maxLength' at {} is not supported", where);
      auto re = parse_regex(pattern);
      if (!re.ok()) return invalid_argument("'pattern' at {}: {}", where, re.status().message());
      *out = ex::seq({ex::lit("\""), json_escape(*re), ex::lit("\"")});
      return {};
    }
    define_common();
    if (mn == 0 && mx < 0) {
      *out = ex::ref("json-string");
      return {};
    }
    *out = ex::seq({ex::lit("\""), ex::repeat(ex::ref("json-char"), static_cast<int32_t>(mn), static_cast<int32_t>(mx)), ex::lit("\"")});
    return {};
  }

  // Integer bounds from minimum / maximum / exclusive* (draft 4 boolean forms too).
  Status integer_expr(const ojson& s, const std::string& where, bool integer, ExprPtr* out) {
    auto num = [&](const char* k, double* v) -> Result<bool> {
      if (!s.contains(k) || s[k].is_boolean()) return false;
      if (!s[k].is_number()) return invalid_argument("'{}' at {} must be a number", k, where);
      *v = s[k].get<double>();
      return true;
    };
    double lo = -static_cast<double>(kMaxInt), hi = static_cast<double>(kMaxInt), v;
    bool bounded = false;
    auto flag = [&](const char* k) { return s.contains(k) && s[k].is_boolean() && s[k].get<bool>(); };
    PAGODA_ASSIGN_OR_RETURN(bool has_min, num("minimum", &v));
    if (has_min) {
      bounded = true;
      lo = flag("exclusiveMinimum") ? std::floor(v) + 1 : std::ceil(v);
    }
    PAGODA_ASSIGN_OR_RETURN(bool has_xmin, num("exclusiveMinimum", &v));
    if (has_xmin) {
      bounded = true;
      lo = std::max(lo, std::floor(v) + 1);
    }
    PAGODA_ASSIGN_OR_RETURN(bool has_max, num("maximum", &v));
    if (has_max) {
      bounded = true;
      hi = flag("exclusiveMaximum") ? std::ceil(v) - 1 : std::floor(v);
    }
    PAGODA_ASSIGN_OR_RETURN(bool has_xmax, num("exclusiveMaximum", &v));
    if (has_xmax) {
      bounded = true;
      hi = std::min(hi, std::ceil(v) - 1);
    }
    define_common();
    if (!bounded) {
      *out = ex::ref(integer ? "json-int" : "json-number");
      return {};
    }
    lo = std::max(lo, -static_cast<double>(kMaxInt));
    hi = std::min(hi, static_cast<double>(kMaxInt));
    if (lo > hi) return invalid_argument("no {} at {} satisfies its minimum/maximum (as an integer)", integer ? "integer" : "number", where);
    *out = int_range(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
    return {};
  }

  Status object_expr(const ojson& s, const std::string& where, int depth, ExprPtr* out) {
    define_common();
    std::vector<std::pair<std::string, const ojson*>> props;
    static const ojson kTrue = true;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) return invalid_argument("'properties' at {} must be an object", where);
      for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it) props.push_back({it.key(), &it.value()});
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return invalid_argument("'required' at {} must be an array", where);
      for (const auto& r : s["required"]) {
        if (!r.is_string()) return invalid_argument("'required' at {} must list strings", where);
        required.insert(r.get<std::string>());
      }
    }
    for (const auto& r : required) {
      bool found = false;
      for (const auto& p : props) found |= p.first == r;
      if (!found) props.push_back({r, &kTrue});
    }
    // Extra keys: absent additionalProperties means none when properties are listed.
    ExprPtr extra;
    if (s.contains("additionalProperties")) {
      const ojson& ap = s["additionalProperties"];
      if (!(ap.is_boolean() && !ap.get<bool>())) {
        PAGODA_ASSIGN_OR_RETURN(ExprPtr v, visit(ap, where + "/additionalProperties", depth + 1));
        extra = ex::seq({ex::ref("json-string"), ex::lit(":"), ex::ref("sp"), v});
      }
    } else if (props.empty()) {
      extra = ex::ref("json-kv");
    }
    std::vector<ExprPtr> kvs;
    for (const auto& [name, schema] : props) {
      PAGODA_ASSIGN_OR_RETURN(ExprPtr v, visit(*schema, where + "/properties/" + name, depth + 1));
      kvs.push_back(ex::seq({ex::lit(json_quote(name) + ":"), ex::ref("sp"), v}));
    }
    const size_t n = kvs.size();
    const std::string base = b_->fresh_name(prefix_ + "obj");
    auto name = [&](size_t i, int flag) { return fmt::format("{}-{}-{}", base, i, flag); };
    const ExprPtr comma = ex::seq({ex::lit(","), ex::ref("sp")});
    for (int flag = 0; flag < 2; ++flag) {
      ExprPtr tail;
      if (!extra) tail = ex::empty();
      else if (flag) tail = ex::star(ex::seq({comma, extra}));
      else tail = ex::opt(ex::seq({extra, ex::star(ex::seq({comma, extra}))}));
      b_->define(name(n, flag), tail);
    }
    for (size_t i = n; i-- > 0;) {
      for (int flag = 0; flag < 2; ++flag) {
        ExprPtr with = ex::seq({flag ? comma : ex::empty(), kvs[i], ex::ref(name(i + 1, 1))});
        if (required.count(props[i].first)) b_->define(name(i, flag), with);
        else b_->define(name(i, flag), ex::alt({with, ex::ref(name(i + 1, flag))}));
      }
    }
    *out = ex::seq({ex::lit("{"), ex::ref(name(0, 0)), ex::lit("}")});
    return {};
  }

  Status array_expr(const ojson& s, const std::string& where, int depth, ExprPtr* out) {
    define_common();
    int64_t mn = 0, mx = -1;
    PAGODA_RETURN_IF_ERROR(count(s, "minItems", where, &mn));
    PAGODA_RETURN_IF_ERROR(count(s, "maxItems", where, &mx));
    if (mx >= 0 && mx < mn) return invalid_argument("'maxItems' < 'minItems' at {}", where);
    std::vector<ExprPtr> prefix;
    if (s.contains("prefixItems")) {
      const ojson& p = s["prefixItems"];
      if (!p.is_array()) return invalid_argument("'prefixItems' at {} must be an array", where);
      for (size_t i = 0; i < p.size(); ++i) {
        PAGODA_ASSIGN_OR_RETURN(ExprPtr e, visit(p[i], fmt::format("{}/prefixItems/{}", where, i), depth + 1));
        prefix.push_back(e);
      }
    }
    ExprPtr item;
    bool items_allowed = true;
    if (s.contains("items")) {
      const ojson& it = s["items"];
      if (it.is_boolean() && !it.get<bool>()) items_allowed = false;
      else {
        PAGODA_ASSIGN_OR_RETURN(item, visit(it, where + "/items", depth + 1));
      }
    } else if (!prefix.empty()) {
      items_allowed = false;  // strict: a tuple without `items` has no more elements
    } else {
      item = ex::ref("json-value");
    }
    const ExprPtr comma = ex::seq({ex::lit(","), ex::ref("sp")});
    const int64_t k = static_cast<int64_t>(prefix.size());
    if (k == 0) {
      if (!items_allowed) {
        if (mn > 0) return invalid_argument("'minItems' at {} cannot be met with 'items': false", where);
        *out = ex::lit("[]");
        return {};
      }
      if (mx == 0) {
        *out = ex::lit("[]");
        return {};
      }
      ExprPtr more = ex::repeat(ex::seq({comma, item}), static_cast<int32_t>(std::max<int64_t>(mn - 1, 0)),
                                static_cast<int32_t>(mx < 0 ? -1 : mx - 1));
      ExprPtr body = ex::seq({item, more});
      *out = ex::seq({ex::lit("["), mn > 0 ? body : ex::opt(body), ex::lit("]")});
      return {};
    }
    if (mx >= 0 && mx < k) return invalid_argument("'maxItems' at {} is below the number of 'prefixItems'", where);
    std::vector<ExprPtr> parts{ex::lit("[")};
    for (int64_t i = 0; i < k; ++i) {
      if (i) parts.push_back(comma);
      parts.push_back(prefix[i]);
    }
    const int64_t extra_min = std::max<int64_t>(0, mn - k);
    const int64_t extra_max = items_allowed ? (mx < 0 ? -1 : mx - k) : 0;
    if (!items_allowed && extra_min > 0) return invalid_argument("'minItems' at {} exceeds the tuple length", where);
    if (items_allowed && extra_max != 0)
      parts.push_back(ex::repeat(ex::seq({comma, item}), static_cast<int32_t>(extra_min), static_cast<int32_t>(extra_max)));
    parts.push_back(ex::lit("]"));
    *out = ex::seq(std::move(parts));
    return {};
  }

  ExprPtr any_value() {
    define_common();
    return ex::ref("json-value");
  }

  // The shared rules (defined once per builder, whatever the prefix).
  void define_common() {
    if (b_->has("json-value")) return;
    const ExprPtr hex = ex::cls({{'0', '9'}, {'A', 'F'}, {'a', 'f'}});
    b_->define("sp", ex::opt(ex::lit(" ")));
    b_->define("json-char", ex::alt({ex::cls({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true),
                                     ex::seq({ex::lit("\\"), ex::alt({ex::cls({{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'}, {'f', 'f'}, {'n', 'n'}, {'r', 'r'}, {'t', 't'}}),
                                                                     ex::seq({ex::lit("u"), ex::repeat(hex, 4, 4)})})})}));
    b_->define("json-string", ex::seq({ex::lit("\""), ex::star(ex::ref("json-char")), ex::lit("\"")}));
    const ExprPtr digit = ex::cls({{'0', '9'}});
    b_->define("json-int", ex::seq({ex::opt(ex::lit("-")), ex::alt({ex::lit("0"), ex::seq({ex::cls({{'1', '9'}}), ex::repeat(digit, 0, 17)})})}));
    // At most 18 + 15 significant digits and a two-digit exponent: every number it allows is a
    // finite double (|x| < 1e117), as JSON parsers of clients read numbers (RFC 8259 section 6).
    b_->define("json-number", ex::seq({ex::ref("json-int"), ex::opt(ex::seq({ex::lit("."), ex::repeat(digit, 1, 15)})),
                                       ex::opt(ex::seq({ex::cls({{'e', 'e'}, {'E', 'E'}}), ex::opt(ex::cls({{'+', '+'}, {'-', '-'}})), ex::repeat(digit, 1, 2)}))}));
    b_->define("json-value", ex::alt({ex::ref("json-object"), ex::ref("json-array"), ex::ref("json-string"), ex::ref("json-number"),
                                      ex::lit("true"), ex::lit("false"), ex::lit("null")}));
    const ExprPtr comma = ex::seq({ex::lit(","), ex::ref("sp")});
    b_->define("json-kv", ex::seq({ex::ref("json-string"), ex::lit(":"), ex::ref("sp"), ex::ref("json-value")}));
    b_->define("json-object", ex::seq({ex::lit("{"), ex::opt(ex::seq({ex::ref("json-kv"), ex::star(ex::seq({comma, ex::ref("json-kv")}))})), ex::lit("}")}));
    b_->define("json-array", ex::seq({ex::lit("["), ex::opt(ex::seq({ex::ref("json-value"), ex::star(ex::seq({comma, ex::ref("json-value")}))})), ex::lit("]")}));
  }

  GrammarBuilder* b_;
  const ojson& root_;
  std::string prefix_;
  std::unordered_map<std::string, std::string> refs_;
};

}  // namespace

std::string json_quote(std::string_view text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size();) out += escape_codepoint(decode_utf8(text, &i));
  return out + "\"";
}

Result<ExprPtr> add_json_schema(GrammarBuilder* b, const ojson& schema, std::string_view prefix) {
  SchemaCompiler c(b, schema, std::string(prefix));
  return c.visit(schema, "#", 0);
}

Result<Grammar> compile_json_schema(const ojson& schema) {
  GrammarBuilder b;
  PAGODA_ASSIGN_OR_RETURN(ExprPtr e, add_json_schema(&b, schema, ""));
  b.define("root", e);
  return b.build("root");
}

Result<Grammar> compile_json_schema_text(std::string_view schema_text) {
  ojson schema;
  try {
    schema = ojson::parse(schema_text.begin(), schema_text.end());
  } catch (const std::exception& e) {
    return invalid_argument("schema is not valid JSON: {}", e.what());
  }
  return compile_json_schema(schema);
}

Result<Grammar> json_object_grammar() {
  GrammarBuilder b;
  const ojson schema = {{"type", "object"}};
  PAGODA_ASSIGN_OR_RETURN(ExprPtr e, add_json_schema(&b, schema, ""));
  b.define("root", e);
  return b.build("root");
}

}  // namespace pagoda::grammar

// Global functions visible to chat templates: Jinja's range / namespace / dict and the ones
// transformers adds (raise_exception, strftime_now). namespace() refuses underscore-prefixed
// attributes as transformers' TemplateNamespace does.
#include <fmt/format.h>

#include <ctime>

#include "template/builtins.h"

namespace pagoda::tmpl {

void check_namespace_attribute(const std::string& name) {
  if (!name.empty() && name[0] == '_')
    throw_error(fmt::format("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '{}'. "
                            "Please rename the attribute.",
                            name));
}

namespace {

Value g_range(Interpreter& in, CallArgs& a) {
  if (!a.kwargs.empty()) throw_error("range() takes no keyword arguments");
  if (a.args.empty() || a.args.size() > 3)
    throw_error(fmt::format("range expected at most 3 arguments, got {}", a.args.size()));
  int64_t start = 0, stop, step = 1;
  if (a.args.size() == 1) {
    stop = expect_int(a.args[0], "range");
  } else {
    start = expect_int(a.args[0], "range");
    stop = expect_int(a.args[1], "range");
    if (a.args.size() == 3) step = expect_int(a.args[2], "range");
  }
  if (step == 0) throw_error("range() arg 3 must not be zero");
  // Length computed without overflow before anything is allocated.
  __int128 n = 0;
  if (step > 0 && start < stop) n = ((__int128)stop - start - 1) / step + 1;
  if (step < 0 && start > stop) n = ((__int128)start - stop - 1) / (-(__int128)step) + 1;
  // Jinja's sandbox refuses ranges longer than MAX_RANGE.
  if (n > 100000) throw_error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  if (n > static_cast<__int128>(in.limits().max_items)) in.check_items(in.limits().max_items + 1);
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(n));
  int64_t v = start;
  for (__int128 i = 0; i < n; ++i, v += step) out.push_back(Value::integer(v));
  in.step(static_cast<uint64_t>(n));
  return Value::list(std::move(out));
}

void add_pairs(const Value& src, std::vector<std::pair<Value, Value>>* out) {
  if (src.is_dict() && !src.is_namespace()) {
    for (const auto& kv : src.as_dict().items) out->push_back(kv);
    return;
  }
  for (const auto& item : iterate(src)) {
    auto kv = iterate(item);
    if (kv.size() != 2) throw_error("dictionary update sequence element has wrong length; 2 is required");
    out->emplace_back(kv[0], kv[1]);
  }
}

Value g_namespace(Interpreter&, CallArgs& a) {
  if (a.args.size() > 1) throw_error("namespace() takes at most one positional argument");
  std::vector<std::pair<Value, Value>> items;
  if (!a.args.empty()) add_pairs(a.args[0], &items);
  for (auto& [k, v] : a.kwargs) items.emplace_back(Value::string(k), v);
  Value ns = Value::new_namespace();
  for (auto& [k, v] : items) {
    check_namespace_attribute(to_str(k));
    if (v.has_namespace()) throw_error("storing a namespace inside a namespace is not supported");
    ns.as_dict().set(k, v);
  }
  return ns;
}

Value g_dict(Interpreter&, CallArgs& a) {
  if (a.args.size() > 1) throw_error(fmt::format("dict expected at most 1 argument, got {}", a.args.size()));
  std::vector<std::pair<Value, Value>> items;
  if (!a.args.empty()) add_pairs(a.args[0], &items);
  for (auto& [k, v] : a.kwargs) items.emplace_back(Value::string(k), v);
  return Value::dict(std::move(items));
}

Value g_raise_exception(Interpreter&, CallArgs& a) {
  ArgReader r(a, "raise_exception", {"message"});
  TemplateException e;
  e.code = StatusCode::kInvalidArgument;
  e.message = r.get(0) ? to_str(*r.get(0)) : "";
  e.pos = a.pos;
  e.raised = true;
  throw e;
}

Value g_strftime_now(Interpreter& in, CallArgs& a) {
  ArgReader r(a, "strftime_now", {"format"});
  if (!r.get(0)) throw_error("strftime_now() missing required argument 'format'");
  const std::string& f = expect_string(*r.get(0), "strftime_now format");
  if (f.size() > 4096) throw_error("strftime_now format too long");
  // datetime.now() is naive: %z and %Z are empty, %f is microseconds (we have none).
  std::string g;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '%' && i + 1 < f.size()) {
      char c = f[i + 1];
      if (c == 'z' || c == 'Z') {
        ++i;
        continue;
      }
      if (c == 'f') {
        g += "000000";
        ++i;
        continue;
      }
      g += f[i];
      g += f[++i];
      continue;
    }
    g += f[i];
  }
  if (g.empty()) return Value::string("");
  std::tm tm = in.now();
  std::string buf(g.size() * 64 + 256, '\0');
  size_t n = std::strftime(buf.data(), buf.size(), g.c_str(), &tm);
  buf.resize(n);
  return Value::string(std::move(buf));
}

}  // namespace

void install_globals(Scope* scope) {
  scope->vars["range"] = Value::function("range", g_range);
  scope->vars["namespace"] = Value::function("namespace", g_namespace);
  scope->vars["dict"] = Value::function("dict", g_dict);
  scope->vars["raise_exception"] = Value::function("raise_exception", g_raise_exception);
  scope->vars["strftime_now"] = Value::function("strftime_now", g_strftime_now);
}

}  // namespace pagoda::tmpl

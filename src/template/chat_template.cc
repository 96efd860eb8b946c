#include "template/chat_template.h"

#include <fmt/format.h>

#include <new>

#include "template/builtins.h"
#include "template/parser.h"

namespace pagoda {

using tmpl::Body;
using tmpl::Expr;
using tmpl::ExprKind;
using tmpl::Value;

struct ChatTemplate::Impl {
  std::string source;
  Body body;
};

namespace {

Status to_status(const tmpl::TemplateException& e) {
  if (e.raised)
    return Status(e.code, fmt::format("chat template raised an exception at {}:{}: {}", e.pos.line, e.pos.column, e.message));
  return Status(e.code, fmt::format("chat template error at {}:{}: {}", e.pos.line, e.pos.column, e.message));
}

// Jinja resolves filter and test names when it compiles a template: an unknown one is an error
// right away, except inside an `if` statement or an inline if-expression (a "soft" frame), where
// it fails only if evaluated. Loops, macros, call/filter blocks and block sets open non-soft frames.
void check_names(const Expr* e, bool soft) {
  if (!e) return;
  if (e->kind == ExprKind::kCond) soft = true;
  if (!soft && e->kind == ExprKind::kFilter && !tmpl::find_filter(e->name))
    tmpl::throw_error_at(e->pos, fmt::format("no filter named '{}'", e->name));
  if (!soft && e->kind == ExprKind::kTest && !tmpl::find_test(e->name))
    tmpl::throw_error_at(e->pos, fmt::format("no test named '{}'", e->name));
  for (const auto& c : e->children) check_names(c.get(), soft);
  for (const auto& kv : e->kwargs) check_names(kv.second.get(), soft);
}

void check_names(const Body& body, bool soft) {
  using tmpl::StmtKind;
  for (const auto& s : body) {
    switch (s->kind) {
      case StmtKind::kIf:
        for (const auto& c : s->conds) check_names(c.get(), true);
        for (const auto& b : s->bodies) check_names(b, true);
        check_names(s->else_body, true);
        break;
      case StmtKind::kFor:
        check_names(s->expr.get(), soft);
        check_names(s->filter.get(), false);
        check_names(s->body, false);
        check_names(s->else_body, false);
        break;
      case StmtKind::kPrint:
      case StmtKind::kSet:
        check_names(s->expr.get(), soft);
        break;
      case StmtKind::kCallBlock:
        check_names(s->expr.get(), soft);
        for (const auto& c : s->defaults) check_names(c.get(), false);
        check_names(s->body, false);
        break;
      case StmtKind::kWith:
        for (const auto& c : s->values) check_names(c.get(), false);
        check_names(s->body, false);
        break;
      default:
        check_names(s->filter.get(), false);
        for (const auto& c : s->defaults) check_names(c.get(), false);
        check_names(s->body, false);
        break;
    }
  }
}

// transformers' _normalize_chat_messages (drop null-valued keys) and _alias_reasoning_fields.
template <class J>
Result<Value> prepare_messages(const J& messages) {
  if (!messages.is_array())
    return invalid_argument("chat template: messages must be a JSON array, got {}", messages.type_name());
  if (messages.empty())
    return invalid_argument("Cannot apply chat template to an empty conversation. Provide at least one message.");
  std::vector<Value> out;
  for (const auto& m : messages) {
    if (!m.is_object()) return invalid_argument("Chat messages should be dicts, but got {}", m.dump());
    std::vector<std::pair<Value, Value>> items;
    const J* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
      auto it = m.find(key);
      if (it != m.end() && !it->is_null()) {
        reasoning = &*it;
        break;
      }
    }
    if (reasoning) items.emplace_back(Value::string("thinking"), tmpl::from_json(*reasoning));
    for (auto it = m.begin(); it != m.end(); ++it)
      if (!it.value().is_null()) items.emplace_back(Value::string(it.key()), tmpl::from_json(it.value()));
    if (reasoning) items.emplace_back(Value::string("reasoning_content"), tmpl::from_json(*reasoning));
    // Value::dict keeps the first position of a repeated key and the last value, as
    // {"thinking": r, **message, "reasoning_content": r} does in Python.
    out.push_back(Value::dict(std::move(items)));
  }
  return Value::list(std::move(out));
}

template <class J>
Result<std::string> render_impl(const ChatTemplate& t, const Body& body, const J& messages,
                                const ChatTemplateOptions& o) {
  try {
    PAGODA_ASSIGN_OR_RETURN(Value msgs, prepare_messages(messages));
    auto globals = std::make_shared<tmpl::Scope>();
    tmpl::install_globals(globals.get());
    auto context = std::make_shared<tmpl::Scope>();
    context->parent = globals;
    const auto& bos = o.bos_token ? o.bos_token : t.bos_token();
    const auto& eos = o.eos_token ? o.eos_token : t.eos_token();
    if (bos) context->vars["bos_token"] = Value::string(*bos);
    if (eos) context->vars["eos_token"] = Value::string(*eos);
    context->vars["messages"] = msgs;
    context->vars["tools"] = o.tools.is_null() ? Value::none() : tmpl::from_json(o.tools);
    context->vars["documents"] = Value::none();
    context->vars["add_generation_prompt"] = Value::boolean(o.add_generation_prompt);
    if (!o.extra_context.is_null()) {
      if (!o.extra_context.is_object()) return invalid_argument("chat template: extra_context must be a JSON object");
      for (auto it = o.extra_context.begin(); it != o.extra_context.end(); ++it)
        context->vars[it.key()] = tmpl::from_json(it.value());
    }
    auto root = std::make_shared<tmpl::Scope>();
    root->parent = context;
    tmpl::Interpreter interp(o.limits, o.now);
    return interp.render(body, root);
  } catch (const tmpl::TemplateException& e) {
    return to_status(e);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("chat template: out of memory while rendering");
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, fmt::format("chat template: {}", e.what()));
  }
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string source) {
  try {
    auto impl = std::make_shared<Impl>();
    impl->body = tmpl::parse_template(source);
    check_names(impl->body, false);
    impl->source = std::move(source);
    return ChatTemplate(std::move(impl));
  } catch (const tmpl::TemplateException& e) {
    return to_status(e);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("chat template: out of memory while parsing");
  }
}

const std::string& ChatTemplate::source() const { return impl_->source; }

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages,
                                         const ChatTemplateOptions& options) const {
  return render_impl(*this, impl_->body, messages, options);
}

Result<std::string> ChatTemplate::render(const nlohmann::json& messages, const ChatTemplateOptions& options) const {
  return render_impl(*this, impl_->body, messages, options);
}

}  // namespace pagoda

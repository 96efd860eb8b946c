#include "server/http_api.h"

#include "server/access_log.h"
#include "server/process_metrics.h"

#include "server/generation_job.h"
#include "grammar/constraint.h"
#include "server/tool_call_grammar.h"
#include "server/http_request_rules.h"
#include "server/playground.h"
#include "server/fim_prompt.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::server {

using ojson = nlohmann::ordered_json;

// When the request being handled on this thread arrived (handle() sets it; submit() reads it
// synchronously below it, on the same thread).
static thread_local double t_request_start = 0;

namespace {

HttpResponse json_response(int status, const ojson& body) {
  HttpResponse r;
  r.status = status;
  r.body = dump_json(body);
  return r;
}

api::ApiError make_error(int status, std::string type, std::string message, std::string code = {}) {
  api::ApiError e;
  e.status = status;
  e.type = std::move(type);
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

api::ApiError error_from_status(const Status& st, const std::string& param = {}) {
  switch (st.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange: {
      api::ApiError e = api::bad_request(st.message(), param);
      if (st.code() == StatusCode::kOutOfRange) e.code = "context_length_exceeded";
      return e;
    }
    case StatusCode::kUnimplemented: return api::bad_request(st.message(), param, "unsupported");
    case StatusCode::kResourceExhausted: return make_error(429, "rate_limit_error", st.message(), "resource_exhausted");
    case StatusCode::kCancelled: return make_error(503, "service_unavailable", st.message(), "shutting_down");
    default: return make_error(500, "internal_error", st.message());
  }
}

// vLLM's truncate_prompt_tokens: keep the last `k` ids (k = -1: the model length).
void truncate_prompt(std::vector<int32_t>& ids, int32_t k, int64_t max_model_len) {
  const int64_t keep = k < 0 ? max_model_len : k;
  if (k != 0 && static_cast<int64_t>(ids.size()) > keep) ids.erase(ids.begin(), ids.end() - keep);
}

}  // namespace

HttpResponse error_response(const api::ApiError& e) {
  HttpResponse r;
  r.status = e.status;
  r.body = e.body();
  r.headers = e.headers;
  return r;
}

HttpResponse HttpApi::protocol_error(int status, const std::string& message) {
  const char* type = status == 413 ? "request_too_large" : status >= 500 ? "internal_error" : "invalid_request_error";
  ctx_.metrics().record_http("other", status);
  HttpResponse r = error_response(make_error(status, type, message));
  r.close = true;
  return r;
}

HandlerResult HttpApi::handle(HttpRequest& request) {
  std::string route_name = "other";
  const double start = ServingContext::now();
  t_request_start = start;
  // The route may move the request into deferred work: what the access line needs is kept here.
  AccessLogEntry access{request.remote, request.method, request.path};
  access.request_id = request.header("x-request-id").substr(0, 128);
  const std::string allow_origin = ctx_.cors_allow_origin(request.header("origin"));
  HandlerResult res = route(request, &route_name);
  if (res.deferred) {
    // Runs on the server's work pool; metrics, access line and CORS once the route's result is known.
    res.deferred = [this, work = std::move(res.deferred), route_name, allow_origin, access, start]() {
      t_request_start = start;  // a generation job started by `work` reads it on this thread
      HandlerResult r = work();
      finish(r, route_name, allow_origin, access, start);
      return r;
    };
    return res;
  }
  finish(res, route_name, allow_origin, access, start);
  return res;
}

void HttpApi::finish(HandlerResult& res, const std::string& route_name, const std::string& allow_origin,
                     AccessLogEntry access, double start) {
  ctx_.metrics().record_http(route_name, res.body ? 200 : res.response.status);
  // A generation job writes its own access line when it ends (GenerationJob).
  if (!res.body && ctx_.options().access_log && route_name != "/load") {  // /load: a probe, polled often
    access.status = res.response.status;
    access.latency_s = ServingContext::now() - start;
    write_access_log(access);
  }
  if (ctx_.draining()) res.response.close = true;
  if (!allow_origin.empty()) {
    auto& headers = res.body ? res.body_headers : res.response.headers;
    headers.push_back({"Access-Control-Allow-Origin", allow_origin});
    if (allow_origin != "*") headers.push_back({"Vary", "Origin"});
  }
}

HandlerResult HttpApi::route(HttpRequest& req, std::string* route_name) {
  struct Route {
    const char* path;
    const char* method;
    bool auth;
  };
  static const Route kRoutes[] = {
      {"/", "GET", false},
      {"/health", "GET", false},
      {"/version", "GET", false},
      {"/load", "GET", false},
      {"/metrics", "GET", false},
      {"/v1/models", "GET", true},
      {"/v1/completions", "POST", true},
      {"/v1/chat/completions", "POST", true},
      {"/tokenize", "POST", true},
      {"/detokenize", "POST", true},
  };
  std::string path = req.path;
  std::string model_id;
  if (path.rfind("/v1/models/", 0) == 0 && path.size() > 11) {
    model_id = path.substr(11);
    path = "/v1/models";
  }
  const Route* found = nullptr;
  for (const auto& r : kRoutes)
    if (path == r.path) found = &r;
  HandlerResult res;
  if (!found) {
    res.response = error_response(make_error(404, "not_found_error", "no route for " + req.method + " " + req.path, "not_found"));
    return res;
  }
  *route_name = found->path;
  const std::string allowed = std::string(found->method) == "GET" ? "GET, HEAD" : found->method;
  if (req.method == "OPTIONS") {
    // CORS preflight: answered only for a configured origin.
    const std::string origin = req.header("origin");
    const std::string allow = ctx_.cors_allow_origin(origin);
    if (!allow.empty() && !req.header("access-control-request-method").empty()) {
      res.response.status = 204;
      res.response.content_type.clear();
      res.response.headers = {{"Access-Control-Allow-Methods", allowed + ", OPTIONS"},
                              {"Access-Control-Allow-Headers", "Authorization, Content-Type"},
                              {"Access-Control-Max-Age", "600"}};
      return res;
    }
    res.response = error_response(make_error(
        405, "invalid_request_error",
        origin.empty() || ctx_.options().allowed_origins.empty()
            ? "method OPTIONS is not allowed on " + std::string(found->path) + " (CORS is off: start the server with --allowed-origins)"
            : "origin '" + origin + "' is not allowed (see --allowed-origins)",
        "method_not_allowed"));
    res.response.headers.push_back({"Allow", allowed});
    return res;
  }
  const bool head_of_get = req.method == "HEAD" && std::string(found->method) == "GET";
  if (req.method != found->method && !head_of_get) {
    res.response = error_response(make_error(405, "invalid_request_error",
                                             "method " + req.method + " is not allowed on " + found->path + " (use " +
                                                 found->method + ")",
                                             "method_not_allowed"));
    res.response.headers.push_back({"Allow", allowed});
    return res;
  }
  if (found->auth || (path == "/metrics" && ctx_.options().metrics_require_key)) {
    if (auto e = ctx_.check_auth(req.header("authorization"))) {
      res.response = error_response(*e);
      return res;
    }
  }
  if (auto v = check_request_content_type(req.method, req.header("content-type"))) {
    res.response = error_response(make_error(v->status, "invalid_request_error", v->message, "unsupported_media_type"));
    return res;
  }
  if (path == "/") {
    res.response.content_type = "text/html; charset=utf-8";
    res.response.body = playground_html();
    return res;
  }
  if (path == "/health") {
    res.response = health();
    return res;
  }
  if (path == "/version") {
    res.response = json_response(200, ojson{{"version", PAGODA_VERSION}});
    return res;
  }
  if (path == "/metrics") {
    res.response = metrics();
    return res;
  }
  if (path == "/load") {
    res.response = load();
    return res;
  }
  if (ctx_.draining() && path != "/v1/models") {
    res.response = error_response(make_error(503, "service_unavailable", "the server is shutting down", "shutting_down"));
    return res;
  }
  if (path == "/v1/models") {
    res.response = models(model_id);
    return res;
  }
  // Parsing, templating and tokenizing: off the I/O threads. The request is moved into the work.
  auto owned = std::make_shared<HttpRequest>(std::move(req));
  if (path == "/v1/completions") res.deferred = [this, owned] { return completions(*owned); };
  else if (path == "/v1/chat/completions") res.deferred = [this, owned] { return chat_completions(*owned); };
  else if (path == "/tokenize") res.deferred = [this, owned] {
    HandlerResult r;
    r.response = tokenize(*owned);
    return r;
  };
  else if (path == "/detokenize") res.deferred = [this, owned] {
    HandlerResult r;
    r.response = detokenize(*owned);
    return r;
  };
  return res;
}

HttpResponse HttpApi::health() {
  if (ctx_.draining()) return json_response(503, ojson{{"status", "draining"}});
  return json_response(200, ojson{{"status", "ok"}});
}

HttpResponse HttpApi::load() {
  const EngineStats s = ctx_.engine().stats();
  return json_response(200, ojson{{"status", ctx_.draining() ? "draining" : "ok"},
                                  {"model", ctx_.model_name()},
                                  {"running", s.num_running},
                                  {"waiting", s.num_waiting},
                                  {"kv_cache_usage", s.kv_cache_usage},
                                  {"prefix_cache_queries", s.prefix_cache_queries},
                                  {"prefix_cache_hits", s.prefix_cache_hits}});
}

HttpResponse HttpApi::metrics() {
  HttpResponse r;
  r.content_type = std::string(kPrometheusContentType);
  r.body = rename_metric_prefix(ctx_.metrics().render(ctx_.engine().stats()), ctx_.options().metrics_prefix) +
           render_process_metrics();
  return r;
}

HttpResponse HttpApi::models(const std::string& one) {
  ojson m{{"id", ctx_.model_name()},
          {"object", "model"},
          {"created", ctx_.created()},
          {"owned_by", "pagoda"},
          {"root", ctx_.engine().info().model_path},
          {"max_model_len", ctx_.engine().max_model_len()},
          {"vocab_size", ctx_.engine().info().vocab_size}};
  if (!one.empty()) {
    if (one != ctx_.model_name()) return error_response(*ctx_.check_model(one));
    return json_response(200, m);
  }
  return json_response(200, ojson{{"object", "list"}, {"data", ojson::array({m})}});
}

HttpResponse HttpApi::tokenize(HttpRequest& req) {
  api::TokenizeRequest t;
  if (auto e = api::parse_tokenize_request(req.body, &t)) return error_response(*e);
  if (auto e = ctx_.check_model(t.model)) return error_response(*e);
  Engine& engine = ctx_.engine();
  std::vector<int32_t> ids;
  if (t.is_chat) {
    auto text = engine.apply_chat_template(t.messages, t.add_generation_prompt);
    if (!text.ok()) return error_response(error_from_status(text.status(), "messages"));
    ids = engine.tokenize(*text, t.add_special_tokens, /*parse_special=*/true);
  } else {
    ids = engine.tokenize(t.prompt, t.add_special_tokens);
  }
  return json_response(200, ojson{{"count", ids.size()}, {"max_model_len", engine.max_model_len()}, {"tokens", ids}});
}

HttpResponse HttpApi::detokenize(HttpRequest& req) {
  api::DetokenizeRequest d;
  if (auto e = api::parse_detokenize_request(req.body, &d)) return error_response(*e);
  if (auto e = ctx_.check_model(d.model)) return error_response(*e);
  const int64_t vocab = ctx_.engine().info().vocab_size;
  for (int32_t t : d.tokens)
    if (t >= vocab) return error_response(api::bad_request("token id " + std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")", "tokens"));
  return json_response(200, ojson{{"prompt", ctx_.engine().detokenize(d.tokens)}});
}

HandlerResult HttpApi::completions(HttpRequest& req) {
  HandlerResult res;
  api::CompletionRequest c;
  if (auto e = api::parse_completion_request(req.body, &c)) {
    res.response = error_response(*e);
    return res;
  }
  if (auto e = ctx_.check_model(c.model)) {
    res.response = error_response(*e);
    return res;
  }
  Prepared p;
  Engine& engine = ctx_.engine();
  const bool add_special = c.options.add_special_tokens.value_or(true);
  std::optional<FimTokens> fim;
  std::vector<int32_t> suffix_ids;
  if (!c.suffix.empty()) {
    const Tokenizer& tok = engine.tokenizer();
    fim = fim_tokens_of({tok.fim_prefix_id(), tok.fim_suffix_id(), tok.fim_middle_id()},
                        [&](int32_t id) { return std::string(tok.token_text(id)); },
                        [&](std::string_view t) { return tok.token_id(t); });
    if (!fim) {
      res.response = error_response(api::bad_request(
          "'suffix' needs a model that can fill in the middle: the tokenizer of " + ctx_.model_name() +
              " has no FIM tokens (such as <|fim_prefix|> <|fim_suffix|> <|fim_middle|>)",
          "suffix", "unsupported_parameter"));
      return res;
    }
    suffix_ids = engine.tokenize(c.suffix, /*add_special=*/false);
  }
  for (auto& in : c.prompts) {
    std::vector<int32_t> ids;
    if (in.is_ids) {
      ids = std::move(in.ids);
      if (c.echo) p.echo_texts.push_back(engine.detokenize(ids, /*skip_special=*/true));
    } else {
      ids = engine.tokenize(in.text, add_special && !fim);
      if (c.echo) p.echo_texts.push_back(in.text);
    }
    if (fim) {
      const Tokenizer& tok = engine.tokenizer();
      const int32_t bos = !in.is_ids && add_special && tok.add_bos() ? tok.bos_id() : -1;
      ids = fim_prompt(*fim, bos, ids, suffix_ids);
    }
    truncate_prompt(ids, c.options.truncate_prompt_tokens, engine.max_model_len());
    p.prompts.push_back(std::move(ids));
  }
  p.echo_logprobs = c.echo_logprobs;
  return submit(req, false, c.model, std::move(p), c.options);
}

HandlerResult HttpApi::chat_completions(HttpRequest& req) {
  HandlerResult res;
  api::ChatRequest c;
  if (auto e = api::parse_chat_request(req.body, &c)) {
    res.response = error_response(*e);
    return res;
  }
  if (auto e = ctx_.check_model(c.model)) {
    res.response = error_response(*e);
    return res;
  }
  Engine& engine = ctx_.engine();
  auto text = engine.apply_chat_template(c.messages, c.add_generation_prompt, c.tools, c.chat_template_kwargs);
  if (!text.ok()) {
    res.response = error_response(error_from_status(text.status(), "messages"));
    return res;
  }
  std::string prompt = *text;
  if (c.continue_final_message && !c.messages.empty()) {
    // Cut the rendered text after the last message's content so the model continues it.
    const std::string last = c.messages.back().value("content", "");
    const size_t pos = last.empty() ? std::string::npos : prompt.rfind(last);
    if (pos != std::string::npos) prompt.resize(pos + last.size());
  }
  Prepared p;
  p.prompts.push_back(engine.tokenize(prompt, c.options.add_special_tokens.value_or(false), /*parse_special=*/true));
  truncate_prompt(p.prompts.back(), c.options.truncate_prompt_tokens, engine.max_model_len());
  using TC = api::ChatRequest::ToolChoice;
  if (!c.tools.is_null() && c.tool_choice != TC::kNone) {
    const api::ToolCallFormat& format = api::tool_call_format_for_template(engine.chat_template_source());
    p.tool_format = &format;
    p.parallel_tool_calls = c.parallel_tool_calls;
    if (c.tool_choice == TC::kRequired || c.tool_choice == TC::kNamed) {
      if (c.options.structured.kind != api::StructuredOutput::Kind::kNone) {
        res.response = error_response(api::bad_request("'" + c.options.structured.param +
                                                           "' cannot be combined with tool_choice required or a named function",
                                                       "tool_choice"));
        return res;
      }
      const std::string only = c.tool_choice == TC::kNamed ? c.tool_choice_name : std::string();
      auto g = tool_call_grammar(format, c.tools, only, c.parallel_tool_calls);
      if (!g.ok()) {
        res.response = error_response(api::bad_request(g.status().message(), "tools"));
        return res;
      }
      grammar::ConstraintSource src;
      src.kind = grammar::ConstraintKind::kGrammar;
      src.text = "tools " + format.name + " " + only + (c.parallel_tool_calls ? " parallel " : " single ") + c.tools.dump();
      src.grammar = std::make_shared<const grammar::Grammar>(std::move(g).value());
      auto spec = engine.constraint(src);
      if (!spec.ok()) {
        res.response = error_response(api::bad_request(spec.status().message(), "tools"));
        return res;
      }
      p.constraint = *spec;
    }
  }
  return submit(req, true, c.model, std::move(p), c.options);
}

HandlerResult HttpApi::submit(HttpRequest& req, bool chat, const std::string& model, Prepared prepared,
                              const api::GenerationOptions& o) {
  HandlerResult res;
  Engine& engine = ctx_.engine();
  const int64_t max_len = engine.max_model_len();
  const int64_t vocab = engine.info().vocab_size;
  for (const auto& [token, bias] : o.logit_bias)
    if (token >= vocab) {
      res.response = error_response(api::bad_request("'logit_bias' names token " + std::to_string(token) +
                                                         ", outside the vocabulary [0, " + std::to_string(vocab) + ")",
                                                     "logit_bias"));
      return res;
    }
  // Admission charge: every prompt plus its possible output, best_of times.
  int64_t tokens = 0;
  for (const auto& ids : prepared.prompts) {
    if (ids.empty()) {
      res.response = error_response(api::bad_request("the prompt is empty", chat ? "messages" : "prompt"));
      return res;
    }
    const int64_t out = o.max_tokens > 0 ? o.max_tokens : std::max<int64_t>(0, max_len - static_cast<int64_t>(ids.size()));
    tokens += static_cast<int64_t>(ids.size()) + out * o.best_of;
  }
  const std::string auth = req.header("authorization");
  auto admitted = ctx_.admit(ctx_.caller_key(auth, req.remote), tokens,
                             static_cast<int32_t>(prepared.prompts.size()) * o.best_of);
  if (auto* e = std::get_if<api::ApiError>(&admitted)) {
    res.response = error_response(*e);
    return res;
  }
  auto ticket = std::move(std::get<std::unique_ptr<ServingContext::Ticket>>(admitted));

  // Structured output: compile (or find cached) before admitting anything.
  std::shared_ptr<const TokenConstraintSpec> constraint;
  if (o.structured.kind != api::StructuredOutput::Kind::kNone) {
    grammar::ConstraintSource src;
    using K = api::StructuredOutput::Kind;
    switch (o.structured.kind) {
      case K::kJsonObject: src.kind = grammar::ConstraintKind::kJsonObject; break;
      case K::kJsonSchema: src.kind = grammar::ConstraintKind::kJsonSchema; break;
      case K::kRegex: src.kind = grammar::ConstraintKind::kRegex; break;
      case K::kChoice: src.kind = grammar::ConstraintKind::kChoice; break;
      case K::kGrammar: src.kind = grammar::ConstraintKind::kGrammar; break;
      case K::kNone: break;
    }
    src.text = o.structured.text;
    src.choices = o.structured.choices;
    auto compiled = engine.constraint(src);
    if (!compiled.ok()) {
      res.response = error_response(api::bad_request("'" + o.structured.param + "': " + compiled.status().message(), o.structured.param));
      return res;
    }
    constraint = *compiled;
  }
  if (prepared.constraint) constraint = prepared.constraint;

  JobSpec spec;
  spec.chat = chat;
  spec.stream = o.stream;
  spec.include_usage = o.include_usage;
  spec.continuous_usage = o.continuous_usage;
  spec.n = o.n;
  spec.best_of = o.best_of;
  spec.logprobs = o.logprobs;
  spec.tokens_as_ids = o.return_tokens_as_token_ids;
  spec.id = ctx_.make_id(chat ? "chatcmpl" : "cmpl");
  spec.model = ctx_.model_name();
  spec.created = static_cast<int64_t>(std::time(nullptr));
  spec.access.remote = req.remote;
  spec.access.method = req.method;
  spec.access.path = req.path;
  spec.access.request_id = req.header("x-request-id").substr(0, 128);
  spec.start = t_request_start;
  spec.echo_texts = std::move(prepared.echo_texts);
  spec.echo_logprobs = prepared.echo_logprobs;
  spec.prompt_logprobs = o.prompt_logprobs;
  // The prompt logprobs computed: vLLM's prompt_logprobs, or the legacy echo's top-N (logprobs).
  const int32_t prompt_top = std::max(o.prompt_logprobs, prepared.echo_logprobs ? o.logprobs : -1);
  if (prompt_top >= 0) spec.prompt_ids = prepared.prompts;
  spec.tool_format = prepared.tool_format;
  spec.parallel_tool_calls = prepared.parallel_tool_calls;
  (void)model;

  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::string> ids;
  for (size_t i = 0; i < prepared.prompts.size(); ++i) {
    GenerateRequest g;
    g.request_id = prepared.prompts.size() == 1 ? spec.id : spec.id + "-" + std::to_string(i);
    g.prompt_ids = std::move(prepared.prompts[i]);
    g.add_special_tokens = false;
    g.sampling.temperature = o.temperature;
    g.sampling.top_p = o.top_p;
    g.sampling.top_k = o.top_k;
    g.sampling.min_p = o.min_p;
    g.sampling.presence_penalty = o.presence_penalty;
    g.sampling.frequency_penalty = o.frequency_penalty;
    g.sampling.repetition_penalty = o.repetition_penalty;
    g.sampling.seed = o.seed;
    // best_of > n ranks the samples by their logprobs: computed even when not returned.
    g.sampling.logprobs = o.best_of > o.n ? std::max(o.logprobs, 0) : o.logprobs;
    g.sampling.logit_bias = o.logit_bias;
    g.sampling.prompt_logprobs = prompt_top;
    g.sampling.constraint = constraint;
    g.stop.max_tokens = o.max_tokens;
    g.stop.min_tokens = o.min_tokens;
    g.stop.ignore_eos = o.ignore_eos;
    g.stop.stop = o.stop;
    g.stop.stop_token_ids = o.stop_token_ids;
    g.stop.include_stop_str_in_output = o.include_stop_str_in_output;
    g.n = o.best_of;
    g.priority = o.priority;
    g.skip_special_tokens = o.skip_special_tokens;
    auto stream = engine.submit(std::move(g));
    if (!stream.ok()) {
      for (const auto& id : ids) engine.cancel(id);
      res.response = error_response(error_from_status(stream.status(), stream.status().code() == StatusCode::kOutOfRange ? (o.max_tokens > 0 ? "max_tokens" : (chat ? "messages" : "prompt")) : ""));
      return res;
    }
    ids.push_back((*stream)->id());
    streams.push_back(std::move(*stream));
  }
  res.body = std::make_shared<GenerationJob>(ctx_, std::move(spec), std::move(streams), std::move(ids), std::move(ticket));
  return res;
}

}  // namespace pagoda::server

// The HTTP routes of `pagoda serve`: OpenAI-compatible API, health, metrics, tokenizer endpoints
// and the playground page.
//
//   GET  /                     playground (HTML)
//   GET  /health               200 {"status":"ok"}; 503 while draining
//   GET  /version              {"version": "<the project version>"} (vLLM's route; no key needed)
//   GET  /metrics              Prometheus text format
//   GET  /v1/models            the served model (OpenAI list format, with vLLM's max_model_len);
//                              /v1/models/{id} one model
//   POST /v1/completions       prompt(s) -> text (SSE with stream=true)
//   POST /v1/chat/completions  messages -> assistant message (SSE with stream=true)
//   POST /tokenize             {prompt | messages} -> {tokens, count, max_model_len}
//   POST /detokenize           {tokens} -> {prompt}
//
// With API keys configured, /v1/*, /tokenize and /detokenize need `Authorization: Bearer <key>`
// (scheme case-insensitive); /metrics too with --metrics-require-key; /, /health never (probes).
// HEAD works on every GET route. POST bodies must be `Content-Type: application/json` (415).
// CORS is off unless origins are configured (ServeOptions::allowed_origins): then a preflight
// OPTIONS from such an origin is 204 and responses carry Access-Control-Allow-Origin.
// The POST routes' parsing, templating and tokenizing run deferred (on the server's work pool).
// Every error is OpenAI's {"error": {...}} body. Each response is counted in
// pagoda:http_requests_total{route,status} (unknown paths as route "other").
#pragma once

#include <string>

#include "api/tool_call_parser.h"
#include "core/token_constraint.h"
#include "server/access_log.h"
#include "server/http_server.h"
#include "server/serving_context.h"

namespace pagoda::server {

class HttpApi : public HttpHandler {
 public:
  explicit HttpApi(ServingContext& ctx) : ctx_(ctx) {}
  HandlerResult handle(HttpRequest& request) override;
  HttpResponse protocol_error(int status, const std::string& message) override;

 private:
  HandlerResult route(HttpRequest& request, std::string* route_name);
  // Metrics, the draining close and CORS headers on a route's final result.
  // Metrics, the access line (non-streamed results) and CORS headers of a route's result.
  void finish(HandlerResult& res, const std::string& route_name, const std::string& allow_origin,
              AccessLogEntry access, double start);
  HandlerResult completions(HttpRequest& request);
  HandlerResult chat_completions(HttpRequest& request);
  HttpResponse tokenize(HttpRequest& request);
  HttpResponse detokenize(HttpRequest& request);
  HttpResponse models(const std::string& one);
  HttpResponse health();
  // GET /load: {"status": "ok"|"draining", "model", "running", "waiting", "kv_cache_usage" (0..1),
  // "prefix_cache_queries", "prefix_cache_hits"}: the cheap load report the gateway polls.
  HttpResponse load();
  HttpResponse metrics();

  // Submits one engine request per prompt and builds the job (or the error response).
  struct Prepared {
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::string> echo_texts;
    bool echo_logprobs = false;  // completions echo + logprobs: the prompt's logprobs lead each choice's
    // Tool calling with tool_choice required / named: the constraint forcing a call (wins over
    // options.structured, which the parser rejects together with such a tool_choice).
    std::shared_ptr<const TokenConstraintSpec> constraint;
    const api::ToolCallFormat* tool_format = nullptr;  // chat with tools: parse calls in this format
    bool parallel_tool_calls = true;
  };
  HandlerResult submit(HttpRequest& request, bool chat, const std::string& model, Prepared prepared,
                       const api::GenerationOptions& options);

  ServingContext& ctx_;
};

HttpResponse error_response(const api::ApiError& e);

}  // namespace pagoda::server

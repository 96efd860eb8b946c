#include "server/serving_context.h"

#include "server/http_request_rules.h"

#include <chrono>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <string_view>
#include <ctime>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace pagoda::server {

std::string ServeOptions::to_string() const {
  return fmt::format(
      "http {}:{} ({} io threads) | grpc port {} | api keys {} | rate limit rps {} tpm {} | max queued {} | served name "
      "'{}' | shutdown timeout {} s | body limit {} B | idle timeout {} s | access log {} | stats every {} s | "
      "metrics prefix {} | max connections {} | parse threads {} | cors {} | metrics need key {}",
      host, port, http_threads, grpc_port > 0 ? std::to_string(grpc_port) : "off", api_keys.size(),
      rate_limit.requests_per_s, rate_limit.tokens_per_min, max_queued_requests, served_model_name, shutdown_timeout_s,
      max_body_bytes, idle_timeout_s, access_log ? "on" : "off", stats_interval_s, metrics_prefix, max_connections,
      parse_threads, allowed_origins.empty() ? std::string("off") : fmt::format("{}", fmt::join(allowed_origins, ",")),
      metrics_require_key && !api_keys.empty());
}

ServingContext::ServingContext(Engine& engine, ServeOptions options)
    : engine_(engine),
      options_(std::move(options)),
      model_name_(options_.served_model_name.empty() ? engine.model_name() : options_.served_model_name),
      metrics_(model_name_),
      limiter_(options_.rate_limit),
      created_(static_cast<int64_t>(std::time(nullptr))),
      rng_(std::random_device{}()) {
  engine_.set_step_observer([this](int64_t tokens) { metrics_.record_step(tokens); });
}

ServingContext::~ServingContext() { engine_.set_step_observer(nullptr); }

double ServingContext::now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::optional<api::ApiError> ServingContext::check_auth(const std::string& authorization) const {
  if (options_.api_keys.empty()) return std::nullopt;
  const std::string key = bearer_token(authorization);
  for (const auto& k : options_.api_keys)
    if (!key.empty() && key == k) return std::nullopt;
  api::ApiError e;
  e.status = 401;
  e.type = "authentication_error";
  e.code = "invalid_api_key";
  e.message = authorization.empty() ? "missing API key: send 'Authorization: Bearer <key>'" : "invalid API key";
  e.headers.push_back({"WWW-Authenticate", "Bearer"});
  return e;
}

std::string ServingContext::cors_allow_origin(const std::string& origin) const {
  if (origin.empty()) return {};
  for (const auto& o : options_.allowed_origins) {
    if (o == "*") return "*";
    if (o == origin) return origin;
  }
  return {};
}

std::optional<api::ApiError> ServingContext::check_model(const std::string& requested) const {
  if (requested.empty() || requested == model_name_) return std::nullopt;
  api::ApiError e;
  e.status = 404;
  e.type = "not_found_error";
  e.param = "model";
  e.code = "model_not_found";
  e.message = "the model '" + requested + "' does not exist; this server serves '" + model_name_ + "'";
  return e;
}

std::string ServingContext::caller_key(const std::string& authorization, const std::string& remote) const {
  if (!options_.api_keys.empty()) return "key:" + bearer_token(authorization);
  return "addr:" + remote;
}

ServingContext::Ticket::~Ticket() {
  ctx_->in_flight_ -= sequences_;
  if (charged_ > used_) ctx_->limiter_.refund(key_, static_cast<double>(charged_ - used_), ServingContext::now());
}

std::variant<std::unique_ptr<ServingContext::Ticket>, api::ApiError> ServingContext::admit(const std::string& key,
                                                                                           int64_t tokens,
                                                                                           int32_t sequences) {
  if (draining()) {
    api::ApiError e;
    e.status = 503;
    e.type = "service_unavailable";
    e.code = "shutting_down";
    e.message = "the server is shutting down";
    return e;
  }
  if (options_.max_queued_requests > 0) {
    const int64_t capacity = engine_.info().max_num_seqs;
    const int64_t most = capacity + options_.max_queued_requests;
    if (sequences > most) {
      // Could never be admitted, even on an idle server: not a reason to retry.
      api::ApiError e = api::bad_request(
          fmt::format("the request asks for {} sequences (prompts x n) but the server holds at most {} ({} running + {} "
                      "waiting); send fewer prompts or a smaller n",
                      sequences, most, capacity, options_.max_queued_requests),
          "n", "too_many_sequences");
      return e;
    }
    const int64_t in_flight = in_flight_.load();
    const int64_t waiting = in_flight + sequences - capacity;
    if (waiting > options_.max_queued_requests) {
      api::ApiError e;
      e.status = 429;
      e.type = "rate_limit_error";
      e.code = "queue_full";
      e.message = fmt::format(
          "the server is at capacity ({} sequences running, {} waiting, at most {} may wait); retry later",
          std::min(in_flight, capacity), std::max<int64_t>(0, in_flight - capacity), options_.max_queued_requests);
      e.headers.push_back({"Retry-After", "1"});
      return e;
    }
  }
  if (auto wait = limiter_.admit(key, static_cast<double>(tokens), now())) {
    api::ApiError e;
    e.status = 429;
    e.type = "rate_limit_error";
    e.code = "rate_limit_exceeded";
    e.message = fmt::format("rate limit exceeded (rps {}, tpm {}); retry in {:.2f} s", options_.rate_limit.requests_per_s,
                            options_.rate_limit.tokens_per_min, *wait);
    e.headers.push_back({"Retry-After", std::to_string(static_cast<int64_t>(std::ceil(*wait)))});
    return e;
  }
  in_flight_ += sequences;
  return std::unique_ptr<Ticket>(new Ticket(this, key, tokens, sequences));
}

void ServingContext::track(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  tracked_.insert(id);
}
void ServingContext::untrack(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  tracked_.erase(id);
}
size_t ServingContext::num_tracked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tracked_.size();
}
void ServingContext::cancel_all() {
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ids.assign(tracked_.begin(), tracked_.end());
  }
  for (const auto& id : ids) engine_.cancel(id);
}

std::string ServingContext::make_id(const char* prefix) {
  uint64_t a, b;
  {
    std::lock_guard<std::mutex> lock(mu_);
    a = rng_();
    b = rng_();
  }
  return fmt::format("{}-{:016x}{:08x}", prefix, a, static_cast<uint32_t>(b));
}

}  // namespace pagoda::server

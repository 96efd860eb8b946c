// State shared by the HTTP and gRPC front ends of one `pagoda serve` process: the engine, the
// options, API keys, rate limits and the waiting-queue bound, metrics, the draining flag, and the
// engine requests in flight (for graceful shutdown).
//
// Admission (admit()): a request is charged one request and (prompt + max output) tokens on its
// key's buckets, and counts its sequences against the queue bound: sequences in flight beyond
// max_num_seqs are "waiting"; more than max_queued_requests waiting is a 429. The returned
// Ticket gives back unused tokens and the sequences when destroyed.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <unordered_set>
#include <variant>
#include <vector>

#include "api/openai_request.h"
#include "engine/engine.h"
#include "server/server_metrics.h"
#include "server/token_bucket.h"

namespace pagoda::server {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  int grpc_port = 0;                       // 0: no gRPC server
  std::vector<std::string> api_keys;       // empty: no authentication
  RateLimitConfig rate_limit;
  int64_t max_queued_requests = 1024;      // sequences waiting beyond max_num_seqs; 0: unbounded
  std::string served_model_name;           // empty: the engine's model_name()
  double shutdown_timeout_s = 10;
  int http_threads = 2;
  size_t max_body_bytes = 8 << 20;
  double idle_timeout_s = 30;
  double write_timeout_s = 30;
  bool access_log = true;                  // one INFO line per request (server/access_log.h)
  double stats_interval_s = 10;            // the periodic stats line (server/stats_logger.h); 0: off
  std::string metrics_prefix = "pagoda";   // /metrics names PREFIX:...; "vllm" for vLLM's dashboards
  int64_t max_connections = 0;             // open HTTP connections; 0: no limit
  int parse_threads = 2;                   // workers parsing / templating / tokenizing requests
  size_t max_pending_parses = 4096;        // requests that may wait for such a worker (503 beyond); above
                                           // max_queued_requests + max_num_seqs, so a burst the engine would
                                           // queue is not refused before it reaches the engine
  // CORS: origins allowed to call the API from a browser ("*": any). Empty: no CORS headers and
  // preflight requests are refused (a page on another origin cannot read responses or send JSON).
  std::vector<std::string> allowed_origins;
  bool metrics_require_key = false;        // /metrics needs an API key too (when keys are set)
  std::string to_string() const;
};

class ServingContext {
 public:
  ServingContext(Engine& engine, ServeOptions options);
  ~ServingContext();  // detaches the engine's step observer

  Engine& engine() { return engine_; }
  const ServeOptions& options() const { return options_; }
  const std::string& model_name() const { return model_name_; }
  ServerMetrics& metrics() { return metrics_; }
  int64_t created() const { return created_; }  // unix seconds at start-up

  bool draining() const { return draining_.load(); }
  void set_draining() { draining_.store(true); }

  // `authorization` is the Authorization header (or gRPC metadata) value; nullopt when allowed.
  std::optional<api::ApiError> check_auth(const std::string& authorization) const;
  // The Access-Control-Allow-Origin value for a request from `origin`; empty when not allowed.
  std::string cors_allow_origin(const std::string& origin) const;
  // 404 for a model name that is not ours (empty: the default).
  std::optional<api::ApiError> check_model(const std::string& requested) const;
  // The rate-limit key of a caller: with API keys configured, the key it authenticated with (the
  // caller passed check_auth); without keys, its address (`remote` without a port), whatever
  // Authorization header it sends.
  std::string caller_key(const std::string& authorization, const std::string& remote) const;
  RateLimiter& limiter() { return limiter_; }

  class Ticket {
   public:
    ~Ticket();
    void set_used_tokens(int64_t used) { used_ = used; }

   private:
    friend class ServingContext;
    Ticket(ServingContext* ctx, std::string key, int64_t charged, int32_t sequences)
        : ctx_(ctx), key_(std::move(key)), charged_(charged), used_(charged), sequences_(sequences) {}
    ServingContext* ctx_;
    std::string key_;
    int64_t charged_, used_;
    int32_t sequences_;
  };
  // 429 (with Retry-After) when rate-limited or the queue is full, 503 while draining.
  std::variant<std::unique_ptr<Ticket>, api::ApiError> admit(const std::string& key, int64_t tokens, int32_t sequences);
  int64_t sequences_in_flight() const { return in_flight_.load(); }

  // Engine requests in flight, for cancel_all() at the end of a graceful shutdown.
  void track(const std::string& engine_id);
  void untrack(const std::string& engine_id);
  size_t num_tracked() const;
  void cancel_all();

  // "chatcmpl-<24 hex>" and the like.
  std::string make_id(const char* prefix);
  // Seconds on a monotonic clock.
  static double now();

 private:
  Engine& engine_;
  ServeOptions options_;
  std::string model_name_;
  ServerMetrics metrics_;
  RateLimiter limiter_;
  int64_t created_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> in_flight_{0};
  mutable std::mutex mu_;
  std::unordered_set<std::string> tracked_;
  std::mt19937_64 rng_;
};

}  // namespace pagoda::server

// The gateway's configuration: where it listens, its workers, routing, admission and resilience
// settings. Built from a JSON file (docs/gateway.md gives every key) and/or command-line flags.
//
// A worker is a URL "http://HOST:PORT" serving one or more models (the model names the gateway
// routes by; empty: learned from the worker's /v1/models). A DNS entry ("dns": "NAME:PORT") is
// resolved periodically; every address it yields is a worker (a Kubernetes headless service).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/token_bucket.h"

namespace pagoda::gateway {

struct WorkerSpec {
  std::string host;  // numeric address or DNS name
  int port = 0;
  std::vector<std::string> models;  // empty: whatever the worker's /v1/models says
  double weight = 1;                // relative capacity (> 0)
  bool dns = false;                 // host is a name re-resolved every dns_interval_s
  std::string label() const { return host + ":" + std::to_string(port); }
};

struct ApiKeySpec {
  std::string key;
  RateLimitConfig limit;  // per key; 0: unlimited
};

struct GatewayConfig {
  std::string host = "127.0.0.1";
  int port = 8080;
  int threads = 2;
  std::vector<WorkerSpec> workers;

  // Routing.
  std::string policy = "prefix";        // "prefix" (affinity, bounded load) | "least-load" | "round-robin"
  std::string session_header = "x-session-id";  // session affinity by this header's value ("" : off)
  int prefix_chunk_chars = 64;          // prompt characters per hashed block
  int prefix_chunks = 4;                // leading blocks that form the affinity key
  double load_bound = 1.25;             // consistent hashing with bounded loads: c >= 1
  int64_t load_bound_floor = 8;         // in-flight requests a worker may always hold (batching)

  // Admission.
  std::vector<ApiKeySpec> api_keys;     // empty: no authentication
  RateLimitConfig global_limit;         // over all callers
  int64_t max_inflight = 256;           // requests proxied at once
  int64_t max_queue = 1024;             // requests waiting for a slot beyond max_inflight (then 503)
  double queue_timeout_s = 10;
  size_t body_limit = 1 << 20;          // request body bytes (413 beyond)
  int64_t default_max_tokens = 256;     // the token charge of a request without max_tokens

  // Upstream timeouts and resilience.
  double connect_timeout_s = 2;
  double first_byte_timeout_s = 60;     // from the request written to the response head
  double stream_idle_timeout_s = 30;    // between two body reads from a worker
  // Connections to workers are kept alive and reused for this long after a response (below the
  // workers' own idle timeout, 30 s by default); 0: a new connection per request.
  double upstream_keepalive_s = 4;
  double client_idle_timeout_s = 30;    // waiting for a client's request
  int max_attempts = 3;                 // workers tried for one request (first byte not yet sent)
  double health_interval_s = 1;
  double health_timeout_s = 1;
  int unhealthy_after_checks = 3;       // consecutive failed checks that take a worker out (busy != dead)
  double eject_s = 5;                   // passive ejection time (doubled on each repeat, max 8x)
  int eject_after_failures = 1;         // consecutive failures that eject
  double dns_interval_s = 5;
  double drain_timeout_s = 30;          // SIGTERM: how long streams may run on
  std::string worker_api_key;           // sent to workers as "Authorization: Bearer ..." ("" : none)
};

// Reads a JSON configuration file over `config` (keys absent keep their value). Errors name the key.
Status load_config_file(const std::string& path, GatewayConfig* config);
// Parses "http://HOST:PORT[#model1,model2][@weight]" or "dns:NAME:PORT[#models][@weight]".
Result<WorkerSpec> parse_worker(const std::string& spec);
// Range checks (ports, weights, limits, policy name); the message names the offending setting.
Status validate(const GatewayConfig& config);

}  // namespace pagoda::gateway

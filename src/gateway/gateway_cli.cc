#include "gateway/gateway_cli.h"

#include <signal.h>

#include <cstdio>

#include "common/log.h"
#include "gateway/gateway_server.h"

namespace pagoda::gateway {

void add_gateway_options(CLI::App* app, GatewayCli& cli) {
  GatewayConfig& f = cli.flags;
  app->add_option("--config", cli.config_file, "JSON configuration file (docs/gateway.md); flags override it");
  app->add_option("--worker", cli.workers,
                  "a worker: http://HOST:PORT[#model1,model2][@weight] or dns:NAME:PORT[#models][@weight] (repeatable)");
  app->add_option("--api-key", cli.api_keys, "an accepted API key, optionally with its limit: KEY[:rps=5,tpm=20000] (repeatable)");
  app->add_option("--global-rate-limit", cli.global_limit, "rate limit over all callers: rps=R,tpm=T");
  app->add_flag("--check-config", cli.check_only, "validate the configuration, print a summary and exit");
#define PAGODA_GW_FLAG(name, field, desc)                                              \
  {                                                                                    \
    CLI::Option* o = app->add_option(name, f.field, desc);                             \
    cli.apply.push_back([o, &cli](GatewayConfig& c) {                                  \
      if (o->count()) c.field = cli.flags.field;                                       \
    });                                                                                \
  }
  PAGODA_GW_FLAG("--host", host, "address to listen on");
  PAGODA_GW_FLAG("--port", port, "port to listen on (0: any free port, printed at start)");
  PAGODA_GW_FLAG("--threads", threads, "I/O threads (an event loop each; client connections are dealt to them in turn)");
  PAGODA_GW_FLAG("--policy", policy, "routing: prefix (affinity with bounded load), least-load, round-robin");
  PAGODA_GW_FLAG("--session-header", session_header, "header whose value pins a session to a worker (\"\": off)");
  PAGODA_GW_FLAG("--prefix-chunk-chars", prefix_chunk_chars, "prompt characters per hashed prefix block");
  PAGODA_GW_FLAG("--prefix-chunks", prefix_chunks, "leading blocks that form the prefix-affinity key");
  PAGODA_GW_FLAG("--load-bound", load_bound, "bounded-load factor c >= 1 of affinity routing");
  PAGODA_GW_FLAG("--load-bound-floor", load_bound_floor, "in-flight requests a worker may always hold before affinity overflows");
  PAGODA_GW_FLAG("--max-inflight", max_inflight, "requests proxied at once");
  PAGODA_GW_FLAG("--max-queue", max_queue, "requests that may wait for a slot (beyond: 503)");
  PAGODA_GW_FLAG("--queue-timeout", queue_timeout_s, "seconds a request may wait for a slot");
  PAGODA_GW_FLAG("--body-limit", body_limit, "request body bytes (beyond: 413)");
  PAGODA_GW_FLAG("--default-max-tokens", default_max_tokens, "tokens charged for a request without max_tokens");
  PAGODA_GW_FLAG("--connect-timeout", connect_timeout_s, "seconds to connect to a worker");
  PAGODA_GW_FLAG("--first-byte-timeout", first_byte_timeout_s, "seconds from sending a request to a worker's response head");
  PAGODA_GW_FLAG("--stream-idle-timeout", stream_idle_timeout_s, "seconds between two reads of a worker's response");
  PAGODA_GW_FLAG("--upstream-keepalive", upstream_keepalive_s,
                 "seconds a connection to a worker is kept for the next request (0: a new connection per request)");
  PAGODA_GW_FLAG("--client-idle-timeout", client_idle_timeout_s, "seconds to wait for a client's request");
  PAGODA_GW_FLAG("--max-attempts", max_attempts, "workers tried for one request before its first byte is sent");
  PAGODA_GW_FLAG("--health-interval", health_interval_s, "seconds between active health checks");
  PAGODA_GW_FLAG("--health-timeout", health_timeout_s, "seconds a health check may take");
  PAGODA_GW_FLAG("--unhealthy-after", unhealthy_after_checks, "consecutive failed health checks that take a worker out");
  PAGODA_GW_FLAG("--eject-time", eject_s, "seconds a failing worker is ejected (doubles on repeats, up to 8x)");
  PAGODA_GW_FLAG("--eject-after", eject_after_failures, "consecutive failures that eject a worker");
  PAGODA_GW_FLAG("--dns-interval", dns_interval_s, "seconds between DNS refreshes of dns: workers");
  PAGODA_GW_FLAG("--drain-timeout", drain_timeout_s, "SIGTERM: seconds requests in flight may run on");
  PAGODA_GW_FLAG("--worker-api-key", worker_api_key, "API key sent to the workers");
#undef PAGODA_GW_FLAG
}

int run_gateway(GatewayCli& cli) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  GatewayConfig config;
  auto fail = [](const Status& st) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    return 1;
  };
  if (!cli.config_file.empty()) {
    if (Status st = load_config_file(cli.config_file, &config); !st.ok()) return fail(st);
  }
  for (auto& a : cli.apply) a(config);
  for (const auto& spec : cli.workers) {
    auto w = parse_worker(spec);
    if (!w.ok()) return fail(w.status());
    config.workers.push_back(*w);
  }
  for (const auto& spec : cli.api_keys) {
    ApiKeySpec k;
    const size_t colon = spec.find(':');
    k.key = spec.substr(0, colon);
    if (colon != std::string::npos) {
      if (auto e = parse_rate_limit(spec.substr(colon + 1), &k.limit)) return fail(invalid_argument("--api-key {}: {}", k.key, *e));
    }
    config.api_keys.push_back(k);
  }
  if (!cli.global_limit.empty()) {
    if (auto e = parse_rate_limit(cli.global_limit, &config.global_limit)) return fail(invalid_argument("--global-rate-limit: {}", *e));
  }
  if (Status st = validate(config); !st.ok()) return fail(st);
  if (cli.check_only) {
    std::printf("gateway config ok: %zu workers, %zu api keys, policy %s, listen %s:%d\n", config.workers.size(),
                config.api_keys.size(), config.policy.c_str(), config.host.c_str(), config.port);
    return 0;
  }

  const double drain_timeout = config.drain_timeout_s;
  GatewayServer server(config);
  if (Status st = server.listen(); !st.ok()) return fail(st);
  std::string names;
  for (const auto& w : config.workers) names += std::string(names.empty() ? "" : " ") + (w.dns ? "dns:" : "") + w.label();
  log_info("gateway", "listening on http://{}:{} policy={} workers: {}", config.host, server.port(), config.policy, names);
  std::fprintf(stdout, "gateway listening on http://%s:%d\n", config.host.c_str(), server.port());
  std::fflush(stdout);
  server.start();
  int sig = 0;
  sigwait(&signals, &sig);
  log_info("gateway", "signal {}: draining (up to {:.0f} s)", sig, drain_timeout);
  const int64_t left = server.drain(drain_timeout);
  if (left > 0) log_warn("gateway", "{} requests still in flight after the drain timeout: cut", left);
  server.stop();
  log_info("gateway", "stopped");
  return 0;
}

}  // namespace pagoda::gateway

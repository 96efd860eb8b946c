// `pagoda serve`: the OpenAI-compatible HTTP server (SSE streaming, /metrics, playground) and,
// with --grpc-port, the gRPC service, on one engine.
//
// Start-up binds the HTTP port first (a port in use fails at once, before the model loads; the
// gRPC port is checked the same way), then loads the model and prints the engine and server
// configuration and the memory plan; a model that fails to load or a port that cannot be bound is a
// message and exit code 1.
// SIGTERM / SIGINT: graceful shutdown. New requests get 503 and /health says 503; in-flight
// requests get --shutdown-timeout seconds to finish, then are cancelled (their streams end with
// finish_reason "abort"); exit code 0.
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include "cli/command.h"
#include "common/log.h"
#include "common/startup_profile.h"
#include "cli/options.h"
#include "engine/engine.h"
#include "engine/engine_config.h"
#include "model/model_config.h"
#include "runtime/memory_plan.h"
#include "common/dtype.h"
#include "server/grpc_server.h"
#include "server/http_api.h"
#include "server/http_server.h"
#include "server/startup_handler.h"
#include "server/listen_socket.h"
#include "server/stats_logger.h"
#include "cli/progress.h"
#include "server/serving_context.h"

namespace pagoda::cli {
namespace {

struct ServeCliOptions {
  server::ServeOptions serve;
  EngineConfig engine;
  KvTierOptions kv_tiers;
  std::string cpu_offload;
  std::string kv_dtype = "f16";
  std::string rate_limit;
  double rps = 0, tpm = 0;
  bool no_prefix_caching = false;
  SpeculativeOptions spec;
  TuningFlags tuning;
  std::string allowed_origins;
  int64_t max_connections = -1;  // -1: from the file-descriptor limit
  bool profile_startup = false;
};

// Raises the soft file-descriptor limit to the hard one; returns the soft limit now in force.
int64_t raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur == RLIM_INFINITY ? int64_t{1} << 20 : static_cast<int64_t>(rl.rlim_cur);
}

// "a,b , c" -> {"a", "b", "c"}; empty items dropped.
std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    const size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b != std::string::npos) out.push_back(item.substr(b, e - b + 1));
    start = end + 1;
  }
  return out;
}

int run_serve(ServeCliOptions& o) {
  if (!check_tensor_parallel_option(o.engine.tensor_parallel_size, "serve")) return 2;
  // Signals are taken synchronously by the main thread (sigwait); block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  const int64_t fd_limit = raise_fd_limit();
  // Descriptors beyond the HTTP connections: model files, gRPC, the engine, logs.
  constexpr int64_t kReservedFds = 64;
  if (o.max_connections < 0) o.max_connections = std::max<int64_t>(16, fd_limit - kReservedFds);
  o.serve.max_connections = o.max_connections;
  o.serve.allowed_origins = split_list(o.allowed_origins);
  for (const auto& origin : o.serve.allowed_origins) {
    if (origin != "*" && origin.find("://") == std::string::npos) {
      std::cerr << "pagoda serve: --allowed-origins: '" << origin
                << "' is not an origin (scheme://host[:port]) or '*'\n";
      return 2;
    }
  }

  auto kv = dtype_from_name(o.kv_dtype);
  if (!kv) {
    log_error("serve", "unknown --kv-dtype '{}'", o.kv_dtype);
    return 2;
  }
  if (!resolve_device_option(o.engine.device, "serve", o.engine.model)) return 2;
  if (!check_max_model_len("serve", o.engine.model, o.engine.max_model_len)) return 2;
  // Claim the ports before the (slow) model load.
  auto bound = server::BoundSocket::bind(o.serve.host, o.serve.port);
  if (!bound.ok()) {
    log_error("serve", "{}", bound.status().message());
    return 1;
  }
  if (o.serve.grpc_port > 0) {
    auto grpc_probe = server::BoundSocket::bind(o.serve.host, o.serve.grpc_port);
    if (!grpc_probe.ok()) {
      log_error("serve", "gRPC: {}", grpc_probe.status().message());
      return 1;
    }
  }
  log_info("serve", "bound {}:{}; loading the model", o.serve.host, bound->port());
  o.engine.kv_dtype = *kv;
  o.engine.enable_prefix_caching = !o.no_prefix_caching;
  o.engine.kv_tiers = resolve_kv_tier_options(o.kv_tiers);
  if (!resolve_cpu_offload_option(o.cpu_offload, o.engine.cpu_offload_bytes, "serve")) return 2;
  if (!resolve_speculative_options(o.spec, o.engine.speculative, "serve")) return 2;
  auto tuning = resolve_tuning(o.tuning);
  if (!tuning.ok()) {
    std::cerr << "pagoda serve: " << tuning.status().to_string() << "\n";
    return 2;
  }
  o.engine.tuning = *tuning;
  if (!o.rate_limit.empty()) {
    if (auto err = server::parse_rate_limit(o.rate_limit, &o.serve.rate_limit)) {
      std::cerr << "pagoda serve: --rate-limit: " << *err << "\n";
      return 2;
    }
  }
  if (o.rps > 0) o.serve.rate_limit.requests_per_s = o.rps;
  if (o.tpm > 0) o.serve.rate_limit.tokens_per_min = o.tpm;

  log_info("serve", "engine: {}", o.engine.to_string());
  log_info("serve", "server: {}", o.serve.to_string());
  // Listen before the (slow) model load: /health answers 503 {"status": "loading"} and every
  // other route 503 until the engine is ready (server/startup_handler.h).
  server::StartupHandler startup;
  server::HttpServerOptions ho;
  ho.host = o.serve.host;
  ho.port = bound->port();
  ho.bound_fd = bound->release();
  ho.threads = o.serve.http_threads;
  ho.body_limit = o.serve.max_body_bytes;
  ho.idle_timeout_s = o.serve.idle_timeout_s;
  ho.write_timeout_s = o.serve.write_timeout_s;
  ho.max_connections = o.serve.max_connections;
  ho.worker_threads = o.serve.parse_threads;
  ho.max_pending = o.serve.max_pending_parses;
  auto http = std::make_unique<server::HttpServer>(ho, startup);
  if (Status st = http->listen(); !st.ok()) {
    log_error("serve", "{}", st.message());
    return 1;
  }
  http->start();
  log_info("serve", "listening on http://{}:{} (health: loading)", o.serve.host, http->port());
  const auto t0 = std::chrono::steady_clock::now();
  auto engine = [&] {
    Progress progress("serve", "loading weights", "B");
    o.engine.load_progress = [&progress](int64_t done, int64_t total) { progress.update(done, total); };
    auto created = Engine::create(o.engine);
    o.engine.load_progress = nullptr;
    return created;
  }();
  if (!engine.ok()) {
    log_error("serve", "cannot start the engine: {}", engine.status().to_string());
    startup.set_failed(engine.status().message());
    http->stop();
    return 1;
  }
  log_info("serve", "model loaded in {:.2f} s: {} (max_model_len {}, chat template {})",
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                           (*engine)->model_config().summary(), (*engine)->max_model_len(),
                           (*engine)->has_chat_template() ? "yes" : "no");
  log_info("serve", "memory plan:\n{}", (*engine)->memory_plan().to_string());

  server::ServingContext ctx(**engine, o.serve);
  server::HttpApi api(ctx);
  // Every return below stops the server first: its handler points at `api`.
  std::unique_ptr<server::GrpcServer> grpc;
  if (o.serve.grpc_port > 0) {
    grpc = std::make_unique<server::GrpcServer>(ctx);
    if (Status st = grpc->start(o.serve.host, o.serve.grpc_port); !st.ok()) {
      log_error("serve", "gRPC: {}", st.message());
      http->stop();
      (*engine)->shutdown();
      return 1;
    }
  }
  startup.set_ready(api);
  startup_profile::record("launch to ready (health 200)", 0, startup_profile::now_s());
  server::StatsLogger stats(**engine, o.serve.stats_interval_s);
  log_info("serve", "serving '{}' on http://{}:{}{} (ready {:.2f} s after launch)", ctx.model_name(), o.serve.host,
                           http->port(), grpc ? fmt::format(" and gRPC {}:{}", o.serve.host, grpc->port()) : "",
                           startup_profile::now_s());
  if (o.profile_startup) log_info("serve", "{}", startup_profile::report());

  int sig = 0;
  sigwait(&signals, &sig);
  log_info("serve", "{} received: draining ({} sequences in flight, timeout {} s)",
                           sig == SIGTERM ? "SIGTERM" : "SIGINT", ctx.sequences_in_flight(), o.serve.shutdown_timeout_s);
  ctx.set_draining();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.serve.shutdown_timeout_s);
  while (ctx.sequences_in_flight() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (ctx.sequences_in_flight() > 0) {
    log_warn("serve", "shutdown timeout: cancelling {} sequences", ctx.sequences_in_flight());
    ctx.cancel_all();
    // Let the cancelled streams write their last chunk.
    const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (ctx.sequences_in_flight() > 0 && std::chrono::steady_clock::now() < grace)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stats.stop();
  if (grpc) grpc->shutdown(0.5);
  // Stop the io threads, then the engine (no output callback can run after it is joined), then
  // free the connections (their jobs' cancels reach a stopped engine harmlessly).
  http->stop();
  (*engine)->shutdown();
  http.reset();
  log_info("serve", "stopped");
  return 0;
}

const CommandRegistration kServe("serve", "OpenAI-compatible HTTP server (and gRPC) over one engine", [](CLI::App* app) {
  auto o = std::make_shared<ServeCliOptions>();
  auto& s = o->serve;
  auto& e = o->engine;
  e.device = "auto";
  app->add_option("model,--model,-m", e.model, "GGUF file or Hugging Face model directory")->required();
  app->add_option("--tokenizer", e.tokenizer, "Tokenizer (default: the model's)");
  app->add_option("--host", s.host, "Address to listen on");
  app->add_option("--port", s.port, "HTTP port (0: any free port)")->check(port_range());
  app->add_option("--grpc-port", s.grpc_port, "gRPC port (0: no gRPC)")->check(port_range());
  app->add_option("--api-key", s.api_keys, "API key clients must send as 'Authorization: Bearer KEY' (repeatable)");
  app->add_option("--served-model-name", s.served_model_name, "Model name in the API (default: the file name)");
  app->add_option("--rate-limit", o->rate_limit, "Per-key limits, e.g. 'rps=5,tpm=20000'");
  app->add_option("--rate-limit-rps", o->rps, "Per-key requests per second (burst: one second's worth)")->check(CLI::NonNegativeNumber);
  app->add_option("--rate-limit-tpm", o->tpm, "Per-key tokens (prompt + max output) per minute")->check(CLI::NonNegativeNumber);
  app->add_option("--max-queued-requests", s.max_queued_requests, "Sequences that may wait beyond --max-num-seqs before 429 (0: unbounded)")->check(CLI::NonNegativeNumber);
  app->add_option("--shutdown-timeout", s.shutdown_timeout_s, "Seconds in-flight requests get to finish on SIGTERM")->check(CLI::NonNegativeNumber);
  app->add_option("--http-threads", s.http_threads, "I/O threads of the HTTP server")->check(CLI::Range(1, 1024));
  app->add_option("--max-body-bytes", s.max_body_bytes, "Largest request body (413 beyond)")->check(CLI::PositiveNumber);
  app->add_option("--idle-timeout", s.idle_timeout_s, "Seconds to wait for a request on an open connection")->check(CLI::PositiveNumber);
  app->add_option("--write-timeout", s.write_timeout_s, "Seconds one write to a slow client may take")->check(CLI::PositiveNumber);
  app->add_option("--max-connections", o->max_connections,
                  "Open HTTP connections; more are answered 503 at once (default: the fd limit less 64)");
  app->add_option("--parse-threads", s.parse_threads, "Workers that parse, template and tokenize requests off the I/O threads");
  app->add_option("--max-pending-parses", s.max_pending_parses, "Requests that may wait for a parse worker (503 beyond)");
  app->add_option("--allowed-origins", o->allowed_origins,
                  "CORS: comma-separated origins (e.g. 'https://app.example') or '*' allowed to call the API from a "
                  "browser (default: none, CORS off)");
  app->add_flag("--metrics-require-key", s.metrics_require_key,
                "With --api-key: /metrics needs a key too (/ and /health never do)");
  app->add_option("-t,--threads", e.threads, "Compute threads (default: one per core)")->check(CLI::Range(0, 4096));
  add_device_options(app, e.device, e.dtype, e.cuda_graphs);
  add_quantization_option(app, e.quantization);
  add_load_format_option(app, e.load_format);
  add_tuning_options(app, o->tuning);
  app->add_option("--gpu-memory-utilization", e.memory_utilization, "CUDA: fraction of the GPU's memory to use (0: default)")->check(CLI::Range(0.0, 1.0));
  app->add_option("--max-model-len,-c,--ctx-size", e.max_model_len, "Maximum sequence length (default: the model's)")->check(CLI::NonNegativeNumber);
  app->add_option("--max-num-seqs", e.scheduler.max_num_seqs, "Sequences batched together")->check(CLI::Range(1, 1048576));
  app->add_option("--max-num-batched-tokens", e.scheduler.max_num_batched_tokens, "Token budget of one engine step")->check(CLI::Range(1, 1073741824));
  app->add_option("--block-size", e.block_size, "KV cache block size (tokens)")->check(CLI::Range(1, 4096));
  app->add_option("--kv-dtype", o->kv_dtype, "KV cache element type: f16, bf16, f32, f8_e4m3 (fp8; CUDA only)");
  app->add_option("--kv-cache-memory", e.kv_cache_memory, "KV cache bytes (default: enough for every sequence, at most 2 GiB)")->check(CLI::NonNegativeNumber);
  add_kv_tier_options(app, &o->kv_tiers);
  add_cpu_offload_option(app, &o->cpu_offload);
  add_n_gpu_layers_option(app, &e.n_gpu_layers);
  add_tensor_parallel_option(app, &e.tensor_parallel_size);
  app->add_option("--policy", e.scheduler.policy, "Scheduling policy: fcfs or priority");
  app->add_option("--max-queue-delay-us", e.max_queue_delay_us, "When idle, wait this long for more arrivals before a step")->check(CLI::Range(0, 60000000));
  app->add_flag("--no-prefix-caching", o->no_prefix_caching, "Disable the prefix cache");
  app->add_flag_callback("--no-sliding-window-eviction", [&e] { e.sliding_window_eviction = false; },
                         "Keep every KV block of a sliding-window model (default: release the blocks that left the window)");
  add_speculative_options(app, &o->spec);
  app->add_flag_callback("--no-access-log", [&s] { s.access_log = false; }, "No access log line per request");
  app->add_option("--stats-interval", s.stats_interval_s, "Seconds between the stats lines while serving (0: none)")
      ->check(CLI::Range(0.0, 86400.0));
  app->add_option("--metrics-prefix", s.metrics_prefix,
                  "Prefix of the /metrics names: pagoda, or vllm (vLLM's names, for its dashboards)")
      ->check(CLI::IsMember({"pagoda", "vllm"}));
  app->add_option("--plan-cache", e.plan_cache, "Engine plan cache: a directory, or off (default: $PAGODA_PLAN_CACHE, else off). A CPU start maps the packed weights an earlier start wrote there");
  app->add_flag("--profile-startup", o->profile_startup,
                "Log where the time from launch to ready went (model, tokenizer, executor)");
  return [o] { return run_serve(*o); };
});

}  // namespace
}  // namespace pagoda::cli

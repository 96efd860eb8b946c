#include "gateway/gateway_server.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <random>
#include <optional>
#include <thread>

#include <unistd.h>

#include "common/log.h"
#include "gateway/admission.h"
#include "gateway/affinity_memory.h"
#include "gateway/gateway_metrics.h"
#include "gateway/http_frames.h"
#include "gateway/prefix_key.h"
#include "gateway/request_summary.h"
#include "gateway/router.h"
#include "gateway/slot_queue.h"
#include "gateway/stream_relay.h"
#include "gateway/upstream_pool.h"
#include "gateway/worker_probe.h"
#include "gateway/worker_set.h"

namespace pagoda::gateway {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using net::awaitable;
using net::use_awaitable;
using json = nlohmann::json;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::chrono::steady_clock::duration secs(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

enum class Failure { kNone, kConnect, kTimeout, k5xx, kStreamCut, kProtocol, kClientGone };

const char* failure_name(Failure f) {
  switch (f) {
    case Failure::kConnect: return "connect";
    case Failure::kTimeout: return "timeout";
    case Failure::k5xx: return "5xx";
    case Failure::kStreamCut: return "stream_cut";
    case Failure::kProtocol: return "protocol";
    case Failure::kClientGone: return "client_gone";
    default: return "none";
  }
}

// One proxied request as it goes through the gateway.
struct Exchange {
  std::string id, method, path, route, key, remote;
  double start = 0, ttft = -1;
  double upstream_sent = 0;  // when the request was written to the worker of the current attempt
  double ttft_overhead = -1;  // the gateway's own part of ttft (see ttft_overhead_seconds)
  int status = 0;
  std::string worker = "-", reason = "-";
  int attempts = 0;
  int64_t load = -1, bound = 0;  // the first choice's in-flight count before it and its load bound (0: none)
  bool stream = false, close_after = false, sent_any = false;
  Failure failure = Failure::kNone;
  std::string detail;  // the last upstream error's message
};

}  // namespace

struct GatewayServer::Impl {
  explicit Impl(GatewayConfig c) : config(std::move(c)), workers(config), admission(config),
                                   slots(config.max_inflight, config.max_queue), contexts(make_contexts(config.threads)),
                                   probes(*contexts[0], config, workers, stopping) {}

  // One io_context per I/O thread, each run by that thread alone, so a connection's handlers need
  // no strand and its readiness events no hand-over between threads. Accepted
  // connections are dealt to the contexts in turn; a connection and its requests' worker
  // connections stay on the context that accepted it. contexts[0] also runs the acceptor and
  // the health and DNS loops.
  static std::vector<std::unique_ptr<net::io_context>> make_contexts(int threads) {
    std::vector<std::unique_ptr<net::io_context>> v;
    for (int t = 0; t < std::max(1, threads); ++t) v.push_back(std::make_unique<net::io_context>(1));
    return v;
  }

  GatewayConfig config;
  WorkerSet workers;
  Admission admission;
  SlotQueue slots;
  GatewayMetrics metrics;
  AffinityMemory affinity;
  std::vector<std::unique_ptr<net::io_context>> contexts;
  tcp::acceptor acceptor{*contexts[0]};  // used on contexts[0] only
  size_t next_context = 0;  // the context of the next accepted connection (accept loop only)
  std::vector<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  std::atomic<bool> draining{false}, stopping{false};
  std::atomic<int64_t> requests_in_flight{0};
  std::atomic<uint64_t> rotation{0};
  int port = 0;
  std::mt19937_64 rng{std::random_device{}()};
  std::mutex rng_mu;
  WorkerProbes probes;
  UpstreamPool pool{config.upstream_keepalive_s, static_cast<size_t>(std::max<int64_t>(1, config.max_inflight))};
  static constexpr size_t kReadBytes = 16 << 10;  // upstream read size (the chunk buffer's)
  static constexpr size_t kMaxChunkBytes = 8 << 20;  // a relayed chunk is held whole up to this size

  // ---- client side ----

  awaitable<void> serve_client(tcp::socket socket) {
    beast::tcp_stream client(std::move(socket));
    std::string remote;
    {
      beast::error_code ec;
      auto ep = client.socket().remote_endpoint(ec);
      if (!ec) remote = ep.address().to_string();
    }
    beast::flat_buffer buffer;
    buffer.reserve(kReadBytes);  // a request head and body in one read, mostly
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(config.body_limit);
      parser.header_limit(16 << 10);
      beast::error_code ec;
      client.expires_after(secs(config.client_idle_timeout_s));
      co_await http::async_read_header(client, buffer, parser, net::redirect_error(use_awaitable, ec));
      if (!ec && parser.chunked()) {
        // Chunked request bodies are refused: clients of the OpenAI API send Content-Length, and
        // Beast 1.74's chunk-header parser has an assertion the fuzzer reaches (http_request_fuzz).
        const std::string body = error_json("invalid_request_error", "send the request body with Content-Length (chunked request bodies are not accepted)", "length_required");
        co_await send_simple(client, 411, body, Headers(), true);
        break;
      }
      if (!ec && !parser.is_done()) {
        if (beast::iequals(parser.get()[http::field::expect], "100-continue")) {
          static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
          co_await net::async_write(client, net::buffer(kContinue), net::redirect_error(use_awaitable, ec));
        }
        if (!ec) co_await http::async_read(client, buffer, parser, net::redirect_error(use_awaitable, ec));
      }
      if (ec) {
        if (ec == http::error::body_limit) {
          co_await send_simple(client, 413, error_json("invalid_request_error",
                                                       "the request body is larger than the gateway's limit of " +
                                                           std::to_string(config.body_limit) + " bytes",
                                                       "request_too_large"), {}, true);
        } else if (ec == http::error::header_limit) {
          co_await send_simple(client, 431, error_json("invalid_request_error", "the request headers are too large", ""), {}, true);
        } else if (ec != http::error::end_of_stream && ec != net::error::eof && ec != beast::error::timeout &&
                   ec != net::error::connection_reset && ec != net::error::operation_aborted &&
                   ec != http::error::partial_message) {
          co_await send_simple(client, 400, error_json("invalid_request_error", "malformed HTTP request: " + ec.message(), ""), {}, true);
        }
        break;
      }
      auto req = parser.release();
      Exchange ex;
      ex.start = now_s();
      ex.method = std::string(req.method_string());
      ex.path = std::string(req.target());
      ex.remote = remote;
      ex.close_after = !req.keep_alive() || draining.load();
      ex.id = request_id(std::string(req["x-request-id"]));
      ++requests_in_flight;
      try {
        co_await handle(client, req, ex);
      } catch (const std::exception& e) {
        log_error("gateway", "{} internal error: {}", ex.id, e.what());
        ex.close_after = true;
      }
      --requests_in_flight;
      finish_log(ex);
      if (ex.close_after || draining.load()) break;
    }
    beast::error_code ignored;
    client.socket().shutdown(tcp::socket::shutdown_send, ignored);
    client.close();
  }

  std::string request_id(const std::string& given) {
    bool ok = !given.empty() && given.size() <= 128;
    for (char c : given) ok &= c > 32 && c < 127;
    if (ok) return given;
    std::lock_guard<std::mutex> lock(rng_mu);
    return fmt::format("gw-{:016x}", rng());
  }

  awaitable<void> send_simple(beast::tcp_stream& client, int status, const std::string& body, Headers headers,
                              bool close, const std::string& content_type = "application/json") {
    std::string out = format_head(status, content_type, headers, false, body.size(), close) + body;
    client.expires_after(secs(config.client_idle_timeout_s));
    beast::error_code ec;
    co_await net::async_write(client, net::buffer(out), net::redirect_error(use_awaitable, ec));
  }

  awaitable<void> reply(beast::tcp_stream& client, Exchange& ex, int status, const std::string& body,
                        Headers headers = {}, const std::string& content_type = "application/json") {
    ex.status = status;
    headers.push_back({"x-request-id", ex.id});
    if (draining.load()) ex.close_after = true;
    co_await send_simple(client, status, body, std::move(headers), ex.close_after, content_type);
    ex.sent_any = true;
  }

  awaitable<void> handle(beast::tcp_stream& client, http::request<http::string_body>& req, Exchange& ex) {
    std::string path = ex.path.substr(0, ex.path.find('?'));
    const bool get = req.method() == http::verb::get || req.method() == http::verb::head;
    if (path == "/health") {
      ex.route = "/health";
      const int64_t up = workers.num_available(now_s());
      const bool ok = up > 0 && !draining.load();
      co_return co_await reply(client, ex, ok ? 200 : 503, health_json(ok, up));
    }
    if (path == "/metrics") {
      ex.route = "/metrics";
      co_return co_await reply(client, ex, 200, metrics.render(gauges()), {}, "text/plain; version=0.0.4; charset=utf-8");
    }
    if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) {
      ex.route = "/v1/models";
      if (!get) co_return co_await reply(client, ex, 405, error_json("invalid_request_error", "use GET", "method_not_allowed"), header1("Allow", "GET, HEAD"));
      std::string key;
      if (auto r = admission.authenticate(std::string(req[http::field::authorization]), &key))
        co_return co_await refuse(client, ex, *r);
      int status = 200;
      const std::string one = path.size() > 11 ? path.substr(11) : std::string();
      const std::string body = models_json(one, &status);
      co_return co_await reply(client, ex, status, body);
    }
    const bool chat = path == "/v1/chat/completions";
    if (!chat && path != "/v1/completions") {
      ex.route = "other";
      co_return co_await reply(client, ex, 404, error_json("not_found_error", "no route for " + ex.method + " " + path, "not_found"));
    }
    ex.route = path;
    if (req.method() != http::verb::post)
      co_return co_await reply(client, ex, 405, error_json("invalid_request_error", "use POST", "method_not_allowed"), header1("Allow", "POST"));
    if (draining.load())
      co_return co_await reply(client, ex, 503, error_json("service_unavailable", "the gateway is shutting down", "shutting_down"));
    if (auto r = admission.authenticate(std::string(req[http::field::authorization]), &ex.key))
      co_return co_await refuse(client, ex, *r);
    auto summary = summarize_request(chat, req.body(), config.default_max_tokens);
    if (!summary.ok())
      co_return co_await reply(client, ex, 400, error_json("invalid_request_error", summary.status().message(), ""));
    ex.stream = summary->stream;
    std::string model = summary->model;
    const double now = now_s();
    if (model.empty()) {
      const auto ms = workers.models(now);
      if (ms.size() == 1) model = ms[0].first;
    }
    if (workers.available(model, now).empty()) {
      std::string names;
      for (const auto& [m, n] : workers.models(now)) names += (names.empty() ? "" : ", ") + m;
      if (model.empty() || !names.empty()) {
        std::string message = "model '" + model + "' is not served by any available worker (served: " + names + ")";
        if (model.empty()) message = "'model' is required (served: " + names + ")";
        const std::string body = error_json("invalid_request_error", message, "model_not_found");
        co_return co_await reply(client, ex, 404, body);
      }
      co_return co_await reply(client, ex, 503, error_json("service_unavailable", "no worker is available", "no_worker"), header1("Retry-After", "1"));
    }
    if (auto r = admission.charge(ex.key, static_cast<double>(summary->estimated_tokens), now))
      co_return co_await refuse(client, ex, *r);
    const auto slot = co_await slots.acquire(config.queue_timeout_s);
    if (slot != SlotQueue::kGranted) {
      metrics.count("rate_limited_total", labels("scope", "queue"));
      co_return co_await reply(client, ex, 503, error_json("service_unavailable",
                                                          slot == SlotQueue::kFull ? "the gateway's request queue is full" : "timed out waiting in the gateway's queue",
                                                          "queue_full"), header1("Retry-After", "1"));
    }
    struct SlotGuard {  // released however proxy() ends (an exception included)
      SlotQueue& q;
      ~SlotGuard() { q.release(); }
    } guard{slots};
    co_await proxy(client, req, ex, *summary, model);
  }

  awaitable<void> refuse(beast::tcp_stream& client, Exchange& ex, const Refusal& r) {
    Headers h;
    if (r.status == 429) {
      h.push_back({"Retry-After", std::to_string(static_cast<int64_t>(std::ceil(std::max(r.retry_after_s, 0.001))))});
      metrics.count("rate_limited_total", labels("scope", r.scope));
    }
    if (r.status == 401) h.push_back({"WWW-Authenticate", "Bearer"});
    co_await reply(client, ex, r.status, error_json(r.type, r.message, r.code), std::move(h));
  }

  std::string health_json(bool ok, int64_t up) {
    json body{{"status", draining.load() ? "draining" : ok ? "ok" : "no_workers"},
              {"workers_available", up}, {"workers", workers.all().size()}};
    return body.dump();
  }

  std::string models_json(const std::string& one, int* status) {
    json data = json::array();
    for (const auto& [m, n] : workers.models(now_s())) {
      json e{{"id", m}, {"object", "model"}, {"created", 0}, {"owned_by", "pagoda"}, {"workers", n}};
      if (!one.empty() && m == one) return e.dump();
      data.push_back(e);
    }
    if (!one.empty()) {
      *status = 404;
      return error_json("invalid_request_error", "model '" + one + "' is not served", "model_not_found");
    }
    json out{{"object", "list"}, {"data", data}};
    return out.dump();
  }

  std::string gauges() {
    std::string g;
    g += fmt::format("# HELP pagoda_gateway_inflight Requests being proxied\n# TYPE pagoda_gateway_inflight gauge\npagoda_gateway_inflight {}\n", slots.active());
    g += fmt::format("# HELP pagoda_gateway_queued Requests waiting for a slot\n# TYPE pagoda_gateway_queued gauge\npagoda_gateway_queued {}\n", slots.queued());
    std::string up, infl, tok;
    const double now = now_s();
    for (const auto& w : workers.all()) {
      const std::string l = GatewayMetrics::label_string({{"worker", w->label}});
      up += fmt::format("pagoda_gateway_worker_up{{{}}} {}\n", l, workers.is_available(*w, now) ? 1 : 0);
      infl += fmt::format("pagoda_gateway_worker_inflight{{{}}} {}\n", l, w->inflight.load());
      tok += fmt::format("pagoda_gateway_worker_outstanding_tokens{{{}}} {}\n", l, w->outstanding_tokens.load());
    }
    g += "# HELP pagoda_gateway_worker_up 1 while the worker is available for new requests\n# TYPE pagoda_gateway_worker_up gauge\n" + up;
    g += "# HELP pagoda_gateway_worker_inflight The gateway's requests in flight on the worker\n# TYPE pagoda_gateway_worker_inflight gauge\n" + infl;
    g += "# HELP pagoda_gateway_worker_outstanding_tokens Estimated tokens of those requests\n# TYPE pagoda_gateway_worker_outstanding_tokens gauge\n" + tok;
    return g;
  }

  void finish_log(Exchange& ex) {
    const double total = now_s() - ex.start;
    if (ex.route == "/health" || ex.route == "/metrics") return;
    metrics.count("requests_total", labels("route", ex.route, "worker", ex.worker, "code", std::to_string(ex.status)));
    metrics.observe("request_duration_seconds", labels("route", ex.route), total);
    if (ex.ttft >= 0) metrics.observe("ttft_seconds", labels("route", ex.route), ex.ttft);
    if (ex.ttft_overhead >= 0) metrics.observe("ttft_overhead_seconds", labels("route", ex.route), ex.ttft_overhead);
    log_info("gateway", "{} {} \"{} {}\" {} worker={} reason={}{} attempts={}{}{} {:.1f} ms{}", ex.id,
             ex.remote.empty() ? "-" : ex.remote, ex.method, ex.path, ex.status, ex.worker, ex.reason,
             ex.bound > 0 ? fmt::format(" load={}/{}", ex.load + 1, ex.bound) : "", ex.attempts,
             ex.ttft >= 0 ? fmt::format(" ttft={:.1f}ms gw={:.2f}ms", 1000 * ex.ttft, 1000 * ex.ttft_overhead) : "",
             ex.failure != Failure::kNone ? std::string(" failure=") + failure_name(ex.failure) : "", 1000 * total,
             ex.stream ? " stream" : "");
  }

  // ---- upstream ----

  struct Candidates {
    std::vector<std::shared_ptr<Worker>> workers;
    std::vector<Candidate> view;
  };

  Candidates candidates(const std::string& model, const std::vector<std::string>& tried) {
    Candidates c;
    for (auto& w : workers.available(model, now_s())) {
      if (std::find(tried.begin(), tried.end(), w->label) != tried.end()) continue;
      Candidate v;
      v.label = w->label;
      v.weight = w->spec.weight;
      v.inflight = w->inflight.load();
      v.outstanding_tokens = w->outstanding_tokens.load();
      workers.read(*w, nullptr, &v.reported_requests, &v.kv_usage);
      c.workers.push_back(w);
      c.view.push_back(v);
    }
    return c;
  }

  awaitable<void> proxy(beast::tcp_stream& client, http::request<http::string_body>& req, Exchange& ex,
                        const RequestSummary& summary, const std::string& model) {
    RouteInput in;
    in.policy = config.policy;
    in.load_bound = config.load_bound;
    in.load_bound_floor = config.load_bound_floor;
    in.tokens_per_request = config.default_max_tokens;
    if (!config.session_header.empty()) {
      const auto sv = req[config.session_header];
      if (!sv.empty()) in.session_key = fnv1a64(std::string_view(sv.data(), sv.size()));
    }
    const auto pkey = prefix_key(summary.affinity_text, config.prefix_chunk_chars, config.prefix_chunks);
    in.prefix_key = pkey;
    std::vector<std::string> tried;
    std::string last_body = error_json("service_unavailable", "no worker is available for model '" + model + "'", "no_worker");
    int last_status = 503;
    Headers last_headers;
    for (int attempt = 1; attempt <= config.max_attempts; ++attempt) {
      Candidates c = candidates(model, tried);
      if (c.view.empty()) break;
      in.rotation = rotation.fetch_add(1);
      const RouteDecision d = choose_worker(c.view, in);
      std::shared_ptr<Worker> w = c.workers[d.index];
      tried.push_back(w->label);
      ex.attempts = attempt;
      ex.worker = w->label;
      ex.reason = attempt == 1 ? d.reason : "retry";
      if (attempt == 1) ex.load = d.inflight, ex.bound = d.bound;
      if (attempt > 1) metrics.count("retries_total", labels("route", ex.route));
      metrics.count("routing_decisions_total", labels("worker", w->label, "reason", ex.reason));
      if (attempt == 1 && pkey && config.policy == "prefix" && !in.session_key) {
        metrics.count("prefix_affinity_lookups_total", Headers());
        if (affinity.record(*pkey, w->label)) metrics.count("prefix_affinity_hits_total", Headers());
      }
      struct LoadGuard {  // the worker's in-flight share, given back however the attempt ends
        Worker& w;
        int64_t tokens;
        LoadGuard(Worker& worker, int64_t t) : w(worker), tokens(t) {
          w.inflight += 1;
          w.outstanding_tokens += tokens;
        }
        ~LoadGuard() {
          w.inflight -= 1;
          w.outstanding_tokens -= tokens;
        }
      };
      Failure f;
      {
        LoadGuard load(*w, summary.estimated_tokens);
        f = co_await attempt_on(client, *w, req, ex, &last_status, &last_body, &last_headers);
      }
      ex.failure = f;
      if (f == Failure::kNone) {
        workers.record_success(*w);
        co_return;
      }
      if (f == Failure::kClientGone) co_return;
      metrics.count("upstream_errors_total", labels("worker", w->label, "kind", failure_name(f)));
      workers.record_failure(*w, now_s());
      pool.drop(w->label);
      log_warn("gateway", "{} attempt {} on {} failed: {} ({}){}", ex.id, attempt, w->label, failure_name(f), ex.detail,
               ex.sent_any ? " (after the first byte: not retried)" : "");
      if (ex.sent_any) co_return;
    }
    // Nothing sent: the last worker error (a 5xx it answered) or 502/503.
    if (ex.attempts > 0 && last_status < 500) last_status = 502;
    if (ex.attempts > 0 && last_status == 502)
      last_body = error_json("bad_gateway", "every worker tried failed (" + std::string(failure_name(ex.failure)) + ")", "upstream_failed");
    last_headers.push_back({"x-pagoda-worker", ex.worker});
    last_headers.push_back({"x-pagoda-route-reason", ex.reason});
    co_await reply(client, ex, last_status, last_body, last_headers);
  }

  // One attempt on worker `w`. Returns kNone when the response was relayed completely (whatever its
  // status below 500). A 5xx response is kept in *status/body/headers (sent if no other worker works).
  awaitable<Failure> attempt_on(beast::tcp_stream& client, Worker& w, http::request<http::string_body>& req,
                                Exchange& ex, int* err_status, std::string* err_body, Headers* err_headers) {
    auto ex_ = co_await net::this_coro::executor;
    beast::tcp_stream up(ex_);
    beast::error_code ec;
    tcp::endpoint ep(net::ip::make_address(w.address, ec), static_cast<unsigned short>(w.spec.port));
    if (ec) {
      ex.detail = "bad address " + w.address;
      co_return Failure::kConnect;
    }
    std::string out = ex.method + " " + ex.path + " HTTP/1.1\r\nHost: " + w.label +
                      "\r\nContent-Type: application/json\r\nX-Request-Id: " + ex.id + "\r\nX-Forwarded-For: " +
                      (ex.remote.empty() ? "-" : ex.remote) + (pool.enabled() ? "" : "\r\nConnection: close") +
                      "\r\nContent-Length: " + std::to_string(req.body().size()) + "\r\n";
    if (!config.worker_api_key.empty()) {
      out += "Authorization: Bearer " + config.worker_api_key + "\r\n";
    } else if (!admission.auth_enabled() && !req[http::field::authorization].empty()) {
      out += "Authorization: " + std::string(req[http::field::authorization]) + "\r\n";
    }
    out += "\r\n" + req.body();
    // Whole SSE events per read (a 512-byte default would split each event over two reads and
    // two writes to the client).
    beast::flat_buffer ubuf;
    ubuf.reserve(kReadBytes);
    std::optional<http::response_parser<http::buffer_body>> parser;
    // A kept-alive connection first (upstream_pool.h); one the worker closed meanwhile fails
    // before any byte of the response, and then a new connection carries the request.
    for (bool fresh = !pool.enabled();; fresh = true) {
      bool reused = false;
      if (!fresh) {
        if (const int fd = pool.take(w.label, now_s()); fd >= 0) {
          up.socket().assign(ep.protocol(), fd, ec);
          reused = !ec;
          if (ec) ::close(fd);
        }
      }
      if (!reused) {
        up.expires_after(secs(config.connect_timeout_s));
        co_await up.async_connect(ep, net::redirect_error(use_awaitable, ec));
        if (ec) ex.detail = "connect: " + ec.message();
        if (ec) co_return ec == beast::error::timeout ? Failure::kTimeout : Failure::kConnect;
        beast::error_code ignored;
        up.socket().set_option(tcp::no_delay(true), ignored);
      }
      metrics.count("upstream_connections_total", labels("worker", w.label, "kind", reused ? "reused" : "new"));
      up.expires_after(secs(config.first_byte_timeout_s));
      co_await net::async_write(up, net::buffer(out), net::redirect_error(use_awaitable, ec));
      ex.upstream_sent = now_s();
      if (ec && reused && ec != beast::error::timeout) {
        up.close();
        continue;
      }
      if (ec) ex.detail = "write: " + ec.message();
      if (ec) co_return ec == beast::error::timeout ? Failure::kTimeout : Failure::kConnect;
      parser.emplace();
      parser->body_limit(std::uint64_t{1} << 50);  // boost::none compares wrongly in Beast 1.74 (len > none)
      co_await http::async_read_header(up, ubuf, *parser, net::redirect_error(use_awaitable, ec));
      if (ec && reused && ec != beast::error::timeout && ubuf.size() == 0) {
        up.close();
        continue;
      }
      if (ec) ex.detail = "response head: " + ec.message();
      if (ec) co_return ec == beast::error::timeout ? Failure::kTimeout : Failure::kConnect;
      break;
    }
    auto& p = *parser;
    const int status = static_cast<int>(p.get().result_int());
    const std::string ctype(p.get()[http::field::content_type]);
    const bool sse = status == 200 && ctype.rfind("text/event-stream", 0) == 0;
    Headers headers = labels("x-request-id", ex.id, "x-pagoda-worker", w.label, "x-pagoda-route-reason", ex.reason);
    if (auto ra = p.get()[http::field::retry_after]; !ra.empty()) headers.push_back({"Retry-After", std::string(ra)});
    if (sse && p.chunked()) co_return co_await relay_stream(client, up, ubuf, p, ex, w, ctype, headers);
    std::string body;
    std::vector<char> chunk(kReadBytes);
    std::string head;  // the response head, sent with the first chunk
    bool head_sent = false;
    while (!p.is_done()) {
      p.get().body().data = chunk.data();
      p.get().body().size = chunk.size();
      up.expires_after(secs(config.stream_idle_timeout_s));
      co_await http::async_read_some(up, ubuf, p, net::redirect_error(use_awaitable, ec));
      const double read_at = head_sent ? 0 : now_s();
      if (ec == http::error::need_buffer) ec = {};
      const size_t n = chunk.size() - p.get().body().size;
      if (!ec && n > 0 && sse) {
        // One gathered write per read: [response head] chunk-size line, the bytes as read, CRLF
        // (no copy of the data, no allocation after the first chunk).
        if (!head_sent) {
          Headers h = labels("Cache-Control", "no-cache", "X-Accel-Buffering", "no");
          h.insert(h.end(), headers.begin(), headers.end());
          head = format_head(200, ctype, h, true, 0, ex.close_after);
        }
        char size_line[24];
        const int size_len = snprintf(size_line, sizeof size_line, "%zx\r\n", n);
        const std::array<net::const_buffer, 4> frame{net::buffer(head), net::buffer(size_line, static_cast<size_t>(size_len)),
                                                     net::buffer(chunk.data(), n), net::buffer("\r\n", 2)};
        const bool written = co_await write_client(client, frame);
        head.clear();
        if (!written) co_return Failure::kClientGone;
        if (!head_sent) {
          const double t = now_s();
          ex.ttft = t - ex.start;
          ex.ttft_overhead = (ex.upstream_sent - ex.start) + (t - read_at);
        }
        head_sent = ex.sent_any = true;
        ex.status = 200;
      } else if (!ec && n > 0) {
        body.append(chunk.data(), n);
        if (body.size() > (64u << 20)) co_return Failure::kProtocol;
      }
      if (ec) {
        ex.detail = "body: " + ec.message();
        const Failure f = ec == beast::error::timeout ? Failure::kTimeout : Failure::kStreamCut;
        if (head_sent) co_await end_cut_stream(client, ex, f);
        co_return f;
      }
    }
    // Read to its end: the connection serves the next request to this worker if it stays open.
    if (pool.enabled() && p.get().keep_alive() && ubuf.size() == 0) {
      const int fd = up.socket().release(ec);
      if (!ec) pool.put(w.label, fd, now_s());
    }
    if (sse) {
      if (!head_sent) {
        Headers h = headers;
        std::string frame = format_head(200, ctype, h, true, 0, ex.close_after);
        frame += "0\r\n\r\n";
        if (!(co_await write_client(client, frame))) co_return Failure::kClientGone;
        ex.sent_any = true;
        ex.status = 200;
        co_return Failure::kNone;
      }
      ex.status = 200;
      co_return (co_await write_client(client, "0\r\n\r\n")) ? Failure::kNone : Failure::kClientGone;
    }
    if (status >= 500) {
      *err_status = status;
      *err_body = body;
      *err_headers = {};
      co_return Failure::k5xx;
    }
    ex.status = status;
    if (draining.load()) ex.close_after = true;
    const std::string full = format_head(status, ctype, headers, false, body.size(), ex.close_after) + body;
    const bool ok = co_await write_client(client, full);
    ex.sent_any = true;
    co_return ok ? Failure::kNone : Failure::kClientGone;
  }

  // A stream the worker framed in chunks (every SSE response of `pagoda serve`): relayed chunk for
  // chunk (stream_relay.h), the connection kept when it ends cleanly.
  awaitable<Failure> relay_stream(beast::tcp_stream& client, beast::tcp_stream& up, beast::flat_buffer& ubuf,
                                  http::response_parser<http::buffer_body>& p, Exchange& ex, Worker& w,
                                  const std::string& ctype, const Headers& headers) {
    Headers h = labels("Cache-Control", "no-cache", "X-Accel-Buffering", "no");
    h.insert(h.end(), headers.begin(), headers.end());
    // The worker connection goes back to the pool before the stream's last write to the client
    // (the client may send its next request the moment the stream ends).
    auto keep = [&]() -> bool {
      if (!pool.enabled() || !p.get().keep_alive()) return false;
      beast::error_code ec;
      const int fd = up.socket().release(ec);
      if (ec) return false;
      pool.put(w.label, fd, now_s());
      return true;
    };
    const RelayResult r = co_await relay_chunked_stream(up.socket(), client.socket(), ubuf,
                                                        format_head(200, ctype, h, true, 0, ex.close_after),
                                                        config.stream_idle_timeout_s, config.client_idle_timeout_s,
                                                        kReadBytes, kMaxChunkBytes, keep);
    if (r.sent_any) {
      ex.sent_any = true;
      ex.status = 200;
      ex.ttft = r.first_write_at - ex.start;
      ex.ttft_overhead = (ex.upstream_sent - ex.start) + (r.first_write_at - r.first_read_at);
    }
    ex.detail = r.detail;
    switch (r.outcome) {
      case RelayResult::kComplete:
        if (!r.released && r.reusable) keep();
        co_return Failure::kNone;
      case RelayResult::kClientGone:
        co_return Failure::kClientGone;
      default: {
        const Failure f = r.outcome == RelayResult::kUpstreamTimeout ? Failure::kTimeout
                          : r.outcome == RelayResult::kProtocol      ? Failure::kProtocol
                                                                      : Failure::kStreamCut;
        if (r.sent_any) co_await end_cut_stream(client, ex, f);
        co_return f;
      }
    }
  }

  // Cut mid-stream (after the first byte, at a chunk boundary): an OpenAI-style error event, then
  // the end of the chunked body (no [DONE]: the stream did not complete); the connection closes.
  awaitable<void> end_cut_stream(beast::tcp_stream& client, Exchange& ex, Failure f) {
    std::string frame;
    append_chunk("data: " + error_json("server_error",
                                       std::string("the worker serving this request failed mid-stream (") +
                                           (f == Failure::kTimeout ? "timed out" : "connection lost") + ")",
                                       "upstream_stream_cut") + "\n\n",
                 &frame);
    frame += "0\r\n\r\n";
    ex.close_after = true;
    co_await write_client(client, frame);
  }

  awaitable<bool> write_client(beast::tcp_stream& client, const std::string& data) {
    co_return co_await write_client(client, std::array<net::const_buffer, 1>{net::buffer(data)});
  }
  template <size_t N>
  awaitable<bool> write_client(beast::tcp_stream& client, const std::array<net::const_buffer, N>& buffers) {
    beast::error_code ec;
    client.expires_after(secs(config.client_idle_timeout_s));
    co_await net::async_write(client, buffers, net::redirect_error(use_awaitable, ec));
    co_return !ec;
  }

  awaitable<void> accept_loop() {
    while (acceptor.is_open()) {
      beast::error_code ec;
      auto& ctx = *contexts[next_context++ % contexts.size()];
      tcp::socket s = co_await acceptor.async_accept(ctx.get_executor(), net::redirect_error(use_awaitable, ec));
      if (ec == net::error::operation_aborted || !acceptor.is_open()) co_return;
      if (ec) {
        net::steady_timer t(co_await net::this_coro::executor);
        t.expires_after(std::chrono::milliseconds(50));
        co_await t.async_wait(net::redirect_error(use_awaitable, ec));
        continue;
      }
      beast::error_code ignored;
      s.set_option(tcp::no_delay(true), ignored);
      auto executor = s.get_executor();
      net::co_spawn(executor, serve_client(std::move(s)), net::detached);
    }
  }
};

GatewayServer::GatewayServer(GatewayConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}
GatewayServer::~GatewayServer() { stop(); }

int GatewayServer::port() const { return impl_->port; }

Status GatewayServer::listen() {
  auto& c = impl_->config;
  beast::error_code ec;
  auto addr = net::ip::make_address(c.host, ec);
  if (ec) return make_status(StatusCode::kInvalidArgument, "gateway: bad --host '{}': {}", c.host, ec.message());
  tcp::endpoint ep(addr, static_cast<unsigned short>(c.port));
  auto& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return make_status(StatusCode::kIoError, "gateway: cannot listen on {}:{}: {}", c.host, c.port, ec.message());
  impl_->port = a.local_endpoint().port();
  return Status();
}

void GatewayServer::start() {
  auto& i = *impl_;
  auto& control = *i.contexts[0];
  for (auto& c : i.contexts) i.work.push_back(net::make_work_guard(*c));
  net::co_spawn(control, i.accept_loop(), net::detached);
  net::co_spawn(net::make_strand(control), i.probes.health_loop(), net::detached);
  net::co_spawn(net::make_strand(control), i.probes.dns_loop(), net::detached);
  for (auto& c : i.contexts) i.threads.emplace_back([ctx = c.get()] { ctx->run(); });
}

int64_t GatewayServer::drain(double timeout_s) {
  auto& i = *impl_;
  i.draining = true;
  net::post(*i.contexts[0], [&i] {
    beast::error_code ec;
    i.acceptor.close(ec);
  });
  const double deadline = now_s() + timeout_s;
  while (i.requests_in_flight.load() > 0 && now_s() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return i.requests_in_flight.load();
}

void GatewayServer::stop() {
  auto& i = *impl_;
  if (i.threads.empty()) return;
  i.stopping = true;
  net::post(*i.contexts[0], [&i] {
    beast::error_code ec;
    i.acceptor.close(ec);
  });
  i.work.clear();
  for (auto& c : i.contexts) c->stop();
  for (auto& t : i.threads) t.join();
  i.threads.clear();
}

}  // namespace pagoda::gateway

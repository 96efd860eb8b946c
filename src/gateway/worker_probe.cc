#include "gateway/worker_probe.h"

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <chrono>

#include "common/log.h"

namespace pagoda::gateway {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using net::use_awaitable;

std::chrono::steady_clock::duration secs(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

net::awaitable<void> WorkerProbes::health_loop() {
  net::steady_timer timer(co_await net::this_coro::executor);
  while (!stopping_.load()) {
    for (auto& w : workers_.all()) net::co_spawn(net::make_strand(ioc_), check_worker(w), net::detached);
    timer.expires_after(secs(config_.health_interval_s));
    beast::error_code ec;
    co_await timer.async_wait(net::redirect_error(use_awaitable, ec));
  }
}

// GET /load (or /health where the worker has none) with health_timeout_s.
net::awaitable<void> WorkerProbes::check_worker(std::shared_ptr<Worker> w) {
  WorkerLoad load;
  beast::error_code ec;
  auto ex_ = co_await net::this_coro::executor;
  beast::tcp_stream up(ex_);
  tcp::endpoint ep(net::ip::make_address(w->address, ec), static_cast<unsigned short>(w->spec.port));
  if (!ec) {
    up.expires_after(secs(config_.health_timeout_s));
    co_await up.async_connect(ep, net::redirect_error(use_awaitable, ec));
  }
  const bool has_load = w->has_load_endpoint.load();
  if (!ec) {
    http::request<http::empty_body> req(http::verb::get, has_load ? "/load" : "/health", 11);
    req.set(http::field::host, w->label);
    req.set(http::field::connection, "close");
    co_await http::async_write(up, req, net::redirect_error(use_awaitable, ec));
  }
  http::response<http::string_body> res;
  if (!ec) {
    beast::flat_buffer b;
    co_await http::async_read(up, b, res, net::redirect_error(use_awaitable, ec));
  }
  if (!ec) {
    const int status = static_cast<int>(res.result_int());
    if (status == 404 && has_load) {
      w->has_load_endpoint = false;
      co_return;  // the next round asks /health
    }
    load.ok = status == 200;
    load.draining = status == 503;
    if (has_load && status == 200) {
      auto j = nlohmann::json::parse(res.body(), nullptr, false);
      if (j.is_object()) {
        load.model = j.value("model", std::string());
        load.running = j.value("running", int64_t{0});
        load.waiting = j.value("waiting", int64_t{0});
        load.kv_usage = j.value("kv_cache_usage", 0.0);
        load.draining = j.value("status", std::string("ok")) == "draining";
        if (load.draining) load.ok = false;
      }
    }
  }
  workers_.health_result(*w, load, now_s());
}

net::awaitable<void> WorkerProbes::dns_loop() {
  net::steady_timer timer(co_await net::this_coro::executor);
  tcp::resolver resolver(co_await net::this_coro::executor);
  while (!stopping_.load()) {
    for (const auto& spec : config_.workers) {
      if (!spec.dns) continue;
      beast::error_code ec;
      auto results = co_await resolver.async_resolve(spec.host, std::to_string(spec.port), net::redirect_error(use_awaitable, ec));
      if (ec) {
        log_warn("gateway", "cannot resolve {}: {} (keeping its workers)", spec.label(), ec.message());
        continue;
      }
      std::vector<std::string> addrs;
      for (const auto& r : results) {
        const std::string a = r.endpoint().address().to_string();
        if (std::find(addrs.begin(), addrs.end(), a) == addrs.end()) addrs.push_back(a);
      }
      workers_.set_resolved(spec, addrs);
    }
    timer.expires_after(secs(config_.dns_interval_s));
    beast::error_code ec;
    co_await timer.async_wait(net::redirect_error(use_awaitable, ec));
  }
}

}  // namespace pagoda::gateway

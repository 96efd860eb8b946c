// The gateway's view of its workers kept current: active health checks (GET /load, or /health
// where a worker has no /load, every health_interval_s with health_timeout_s) and the periodic
// re-resolution of DNS worker names (every dns_interval_s), both reported to the WorkerSet.
//
// Thread-safety: the loops run as coroutines on the io_context given; `stopping` ends them at
// their next round. The WorkerSet is thread-safe.
#pragma once

#include <utility>  // std::exchange, which Boost 1.74's awaitable.hpp uses without including it

#include <boost/asio.hpp>

#include <atomic>
#include <memory>

#include "gateway/config.h"
#include "gateway/worker_set.h"

namespace pagoda::gateway {

class WorkerProbes {
 public:
  WorkerProbes(boost::asio::io_context& ioc, const GatewayConfig& config, WorkerSet& workers,
               const std::atomic<bool>& stopping)
      : ioc_(ioc), config_(config), workers_(workers), stopping_(stopping) {}

  // Checks every worker each health_interval_s (each check on a strand of its own).
  boost::asio::awaitable<void> health_loop();
  // Re-resolves the DNS worker specs each dns_interval_s (a failed lookup keeps the old addresses).
  boost::asio::awaitable<void> dns_loop();

 private:
  boost::asio::awaitable<void> check_worker(std::shared_ptr<Worker> w);

  boost::asio::io_context& ioc_;
  const GatewayConfig& config_;
  WorkerSet& workers_;
  const std::atomic<bool>& stopping_;
};

}  // namespace pagoda::gateway

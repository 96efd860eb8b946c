// Idle keep-alive connections to the workers, shared by every I/O thread. A
// connection whose response was read to its end (and that the worker keeps alive) is put back as
// its bare socket handle, released from its Asio socket, and the next request to the same worker
// adopts it on its own thread's io_context: no connect, and no accept and new connection on the worker, in the
// path to the first token.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace pagoda::gateway {

class UpstreamPool {
 public:
  // Connections idle longer than max_idle_s are closed instead of reused (keep it below the
  // workers' own idle timeout, `pagoda serve --idle-timeout`, 30 s by default); at most
  // max_per_worker are kept per worker (the rest closed). max_idle_s <= 0: nothing is kept.
  UpstreamPool(double max_idle_s, size_t max_per_worker) : max_idle_s_(max_idle_s), max_per_worker_(max_per_worker) {}
  ~UpstreamPool();  // closes what is kept
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  bool enabled() const { return max_idle_s_ > 0; }
  // The most recently returned connection to `worker` that is still open, or -1 (the caller then
  // connects). Connections past max_idle_s, closed by the worker (a peek reads end-of-file or an
  // error) or holding unexpected bytes are closed and skipped. The caller owns the handle.
  int take(const std::string& worker, double now);
  // Keeps `fd` (a connected socket with no request in flight) for `worker`; takes ownership.
  void put(const std::string& worker, int fd, double now);
  // Closes every connection kept for `worker` (after it failed: its connections may be dead).
  void drop(const std::string& worker);
  // Connections kept for `worker` now.
  size_t idle(const std::string& worker);
  // Connections adopted by take() since the start.
  size_t reused() {
    std::lock_guard<std::mutex> lock(mu_);
    return reused_;
  }

 private:
  struct Idle {
    int fd;
    double since;
  };
  const double max_idle_s_;
  const size_t max_per_worker_;
  std::mutex mu_;
  std::unordered_map<std::string, std::vector<Idle>> idle_;  // per worker, oldest first
  size_t reused_ = 0;
};

}  // namespace pagoda::gateway

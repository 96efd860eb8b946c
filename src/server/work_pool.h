// A fixed set of worker threads with a bounded FIFO of tasks: the HTTP server runs request
// parsing, chat templating and tokenizing here so that its I/O threads only move bytes (/health and
// /metrics keep answering however large the bodies being parsed are).
//
// try_submit() refuses (returns false) when `max_queued` tasks are already waiting: the caller
// answers 503 instead of queueing without bound. Tasks must not throw. The destructor (or stop())
// finishes the tasks already taken by a worker, drops the queued ones, and joins.
//
// Thread-safety: try_submit() and stop() may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pagoda::server {

class WorkPool {
 public:
  WorkPool(int threads, size_t max_queued);
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  bool try_submit(std::function<void()> task);
  void stop();
  size_t queued() const;

 private:
  void run();
  const size_t max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace pagoda::server

#include "server/work_pool.h"

#include <algorithm>

namespace pagoda::server {

WorkPool::WorkPool(int threads, size_t max_queued) : max_queued_(std::max<size_t>(1, max_queued)) {
  const int n = std::max(1, threads);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { run(); });
}

WorkPool::~WorkPool() { stop(); }

bool WorkPool::try_submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || tasks_.size() >= max_queued_) return false;
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

size_t WorkPool::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tasks_.size();
}

void WorkPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    tasks_.clear();
  }
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

void WorkPool::run() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (stopping_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace pagoda::server

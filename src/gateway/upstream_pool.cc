#include "gateway/upstream_pool.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace pagoda::gateway {
namespace {

// An idle HTTP connection shows nothing to read: EOF (the worker closed it), an error (reset)
// or bytes (not ours) all make it unusable.
bool still_open(int fd) {
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

}  // namespace

UpstreamPool::~UpstreamPool() {
  for (auto& [worker, list] : idle_)
    for (const Idle& c : list) ::close(c.fd);
}

int UpstreamPool::take(const std::string& worker, double now) {
  for (;;) {
    Idle c{-1, 0};
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = idle_.find(worker);
      if (it == idle_.end() || it->second.empty()) return -1;
      c = it->second.back();
      it->second.pop_back();
    }
    if (now - c.since <= max_idle_s_ && still_open(c.fd)) {
      std::lock_guard<std::mutex> lock(mu_);
      ++reused_;
      return c.fd;
    }
    ::close(c.fd);
  }
}

void UpstreamPool::put(const std::string& worker, int fd, double now) {
  if (!enabled()) {
    ::close(fd);
    return;
  }
  int evicted = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& list = idle_[worker];
    if (list.size() >= max_per_worker_) {
      evicted = list.front().fd;
      list.erase(list.begin());
    }
    list.push_back({fd, now});
  }
  if (evicted >= 0) ::close(evicted);
}

void UpstreamPool::drop(const std::string& worker) {
  std::vector<Idle> list;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = idle_.find(worker);
    if (it == idle_.end()) return;
    list.swap(it->second);
  }
  for (const Idle& c : list) ::close(c.fd);
}

size_t UpstreamPool::idle(const std::string& worker) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = idle_.find(worker);
  return it == idle_.end() ? 0 : it->second.size();
}

}  // namespace pagoda::gateway

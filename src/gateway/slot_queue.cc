#include "gateway/slot_queue.h"

#include <chrono>

namespace pagoda::gateway {

namespace net = boost::asio;

net::awaitable<SlotQueue::Outcome> SlotQueue::acquire(double timeout_s) {
  auto ex = co_await net::this_coro::executor;
  auto waiter = std::make_shared<Waiter>(ex);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (active_ < max_) {
      ++active_;
      co_return kGranted;
    }
    if (static_cast<int64_t>(queue_.size()) >= max_queue_) co_return kFull;
    queue_.push_back(waiter);
  }
  waiter->timer.expires_after(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s)));
  boost::system::error_code ec;
  co_await waiter->timer.async_wait(net::redirect_error(net::use_awaitable, ec));
  std::lock_guard<std::mutex> lock(mu_);
  if (waiter->granted) co_return kGranted;
  queue_.remove(waiter);
  co_return kTimeout;
}

void SlotQueue::release() {
  std::shared_ptr<Waiter> next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.empty()) {
      --active_;
      return;
    }
    next = queue_.front();
    queue_.pop_front();
    next->granted = true;  // the slot passes to it
  }
  net::post(next->timer.get_executor(), [next] { next->timer.cancel(); });
}

int64_t SlotQueue::active() {
  std::lock_guard<std::mutex> lock(mu_);
  return active_;
}

int64_t SlotQueue::queued() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(queue_.size());
}

}  // namespace pagoda::gateway

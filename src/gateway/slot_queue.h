// Slots for requests being proxied: at most `max` at once, `max_queue` waiting (FIFO) for a
// timeout. Thread-safe; a waiter is woken on its own executor (its connection's I/O thread).
#pragma once

#include <utility>  // std::exchange, which Boost 1.74's awaitable.hpp uses without including it

#include <boost/asio.hpp>

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>

namespace pagoda::gateway {

class SlotQueue {
 public:
  SlotQueue(int64_t max, int64_t max_queue) : max_(max), max_queue_(max_queue) {}
  enum Outcome { kGranted, kFull, kTimeout };

  // A slot (kGranted; give it back with release()), or kFull when `max_queue` already wait, or
  // kTimeout after waiting `timeout_s`.
  boost::asio::awaitable<Outcome> acquire(double timeout_s);
  // Gives a slot back: to the longest waiter if any.
  void release();

  int64_t active();
  int64_t queued();

 private:
  struct Waiter {
    explicit Waiter(boost::asio::any_io_executor ex) : timer(ex) {}
    boost::asio::steady_timer timer;
    bool granted = false;
  };
  std::mutex mu_;
  int64_t max_, max_queue_, active_ = 0;
  std::list<std::shared_ptr<Waiter>> queue_;
};

}  // namespace pagoda::gateway

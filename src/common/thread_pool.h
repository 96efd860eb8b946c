// Fork-join thread pool for compute kernels.
//
// The calling thread is worker 0; `num_threads - 1` background threads are the rest. `run(fn)`
// calls fn(ith, nth) on every worker and returns when all have finished. Workers spin briefly
// between jobs (decode issues hundreds of small jobs per token, so a futex wake per job would
// dominate), then sleep on a futex. A sleeping worker announces itself in `sleepers_` before its
// last look at the epoch; dispatch() bumps the epoch then wakes only if someone sleeps (both
// seq_cst, so a wake-up cannot be lost; libstdc++ 12's atomic::wait/notify_all lost wake-ups here
// and hung the pool under load).
//
// Thread-safety: run() must not be called concurrently or re-entrantly (one forward pass owns the
// pool at a time). Exceptions must not escape fn.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace pagoda {

class ThreadPool {
 public:
  // num_threads <= 0: one per online core.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return num_threads_; }

  template <class Fn>
  void run(Fn&& fn) {
    if (num_threads_ == 1) {
      fn(0, 1);
      return;
    }
    auto thunk = [](void* ctx, int ith, int nth) { (*static_cast<std::remove_reference_t<Fn>*>(ctx))(ith, nth); };
    dispatch(thunk, &fn);
  }

  // Splits [0, n) into contiguous chunks of at least `grain` items, one per worker.
  template <class Fn>  // fn(begin, end)
  void parallel_for(int64_t n, int64_t grain, Fn&& fn) {
    if (n <= 0) return;
    int64_t max_chunks = (n + grain - 1) / (grain > 0 ? grain : 1);
    int nth = static_cast<int>(std::min<int64_t>(num_threads_, max_chunks));
    if (nth <= 1) {
      fn(int64_t{0}, n);
      return;
    }
    run([&](int ith, int) {
      if (ith >= nth) return;
      int64_t begin = n * ith / nth, end = n * (ith + 1) / nth;
      if (begin < end) fn(begin, end);
    });
  }

  // Calls fn(i) for every i in [0, n); workers claim items one at a time from a shared counter,
  // so items of uneven cost (attention over different context lengths) balance themselves. Put
  // the most expensive items first.
  template <class Fn>  // fn(index)
  void parallel_for_dynamic(int64_t n, Fn&& fn) {
    if (n <= 0) return;
    if (num_threads_ == 1 || n == 1) {
      for (int64_t i = 0; i < n; ++i) fn(i);
      return;
    }
    std::atomic<int64_t> next{0};
    run([&](int, int) {
      for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n; i = next.fetch_add(1, std::memory_order_relaxed))
        fn(i);
    });
  }

  static int default_num_threads();

 private:
  using Thunk = void (*)(void*, int, int);
  void dispatch(Thunk thunk, void* ctx);
  void worker_loop(int ith);

  int num_threads_;
  std::vector<std::thread> threads_;
  alignas(64) std::atomic<uint32_t> epoch_{0};
  alignas(64) std::atomic<int> pending_{0};
  alignas(64) std::atomic<int> sleepers_{0};
  alignas(64) Thunk thunk_ = nullptr;
  void* ctx_ = nullptr;
  std::atomic<bool> stop_{false};
};

}  // namespace pagoda

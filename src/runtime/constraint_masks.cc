#include "runtime/constraint_masks.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace pagoda {

namespace {

// The work of one step, claimed by the workers of one pool job: rows first (each row once), then
// the parts of the jobs the rows handed out, listed as the rows find them (each job once).
struct StepWork {
  std::span<ConstraintMaskRow> rows;
  const std::function<void(size_t)>& prepare;
  std::vector<std::shared_ptr<MaskJob>> jobs;  // jobs[k]: the job row k waits for (none: its mask is written)
  std::atomic<int64_t> next_row{0}, rows_done{0};
  // Parts: items [0, published) are readable; each index is claimed by one worker.
  std::mutex mu;
  std::vector<MaskJob*> listed;                 // distinct jobs (mu)
  std::vector<std::pair<MaskJob*, int32_t>> parts;  // capacity reserved up front: never reallocated
  std::atomic<int64_t> published{0}, next_part{0};

  StepWork(std::span<ConstraintMaskRow> r, const std::function<void(size_t)>& p) : rows(r), prepare(p), jobs(r.size()) {}

  void row(int64_t k) {
    if (prepare) prepare(static_cast<size_t>(k));
    ConstraintMaskRow& r = rows[k];
    std::shared_ptr<MaskJob> job;
    if (!r.mask.empty() && !r.constraint->fill_mask_if_ready(r.mask, &job)) {
      std::lock_guard<std::mutex> lock(mu);
      bool seen = false;
      for (MaskJob* j : listed) seen = seen || j == job.get();
      if (!seen) {
        listed.push_back(job.get());
        if (parts.capacity() < parts.size() + static_cast<size_t>(job->parts())) parts.reserve(2 * parts.capacity() + job->parts());
        for (int32_t p = 0; p < job->parts(); ++p) parts.emplace_back(job.get(), p);
        published.store(static_cast<int64_t>(parts.size()), std::memory_order_release);
      }
      jobs[k] = std::move(job);
    }
    rows_done.fetch_add(1, std::memory_order_acq_rel);
  }

  // One worker's share: rows until none is left, then parts until none is left and no row is
  // still running (a running row may list more).
  void work() {
    const int64_t n = static_cast<int64_t>(rows.size());
    for (int64_t k = next_row.fetch_add(1, std::memory_order_relaxed); k < n; k = next_row.fetch_add(1, std::memory_order_relaxed)) row(k);
    for (int64_t i = next_part.fetch_add(1, std::memory_order_relaxed);; i = next_part.fetch_add(1, std::memory_order_relaxed)) {
      for (;;) {
        if (i < published.load(std::memory_order_acquire)) break;
        if (rows_done.load(std::memory_order_acquire) == n && i >= published.load(std::memory_order_acquire)) return;
        std::this_thread::yield();
      }
      std::pair<MaskJob*, int32_t> item;
      {
        std::lock_guard<std::mutex> lock(mu);  // parts may be growing (reserve) under the lock
        item = parts[i];
      }
      item.first->run_part(item.second);
    }
  }
};

}  // namespace

void fill_constraint_masks(ThreadPool& pool, std::span<ConstraintMaskRow> rows, const std::function<void(size_t)>& prepare) {
  const int64_t n = static_cast<int64_t>(rows.size());
  if (n == 0) return;
  StepWork w(rows, prepare);
  w.parts.reserve(static_cast<size_t>(n) * 16);
  if (pool.size() > 1 && n >= kParallelMaskRows) {
    pool.run([&](int, int) { w.work(); });
  } else {
    for (int64_t k = 0; k < n; ++k) w.row(k);
    if (w.parts.size() > 1) pool.parallel_for_dynamic(static_cast<int64_t>(w.parts.size()), [&](int64_t i) { w.parts[i].first->run_part(w.parts[i].second); });
    else if (!w.parts.empty()) w.parts[0].first->run_part(w.parts[0].second);
  }
  // The rows that waited for a job: their masks are cached now.
  for (int64_t k = 0; k < n; ++k)
    if (w.jobs[k]) rows[k].constraint->fill_mask(rows[k].mask);
}

}  // namespace pagoda

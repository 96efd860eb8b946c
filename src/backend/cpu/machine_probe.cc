#include "backend/cpu/machine_probe.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "common/cpu_features.h"
#include "common/tensor.h"

namespace pagoda::cpu {

namespace avx2 {
uint64_t read_sum(const void* p, size_t bytes);
}
namespace avx512 {
double fma_chains(int64_t iters);  // returns flops done
}
namespace vnni {
double dpbusd_chains(int64_t iters);  // returns int8 ops done
}

namespace {
uint64_t read_sum_scalar(const void* p, size_t bytes) {
  const auto* q = static_cast<const uint64_t*>(p);
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i + 4 <= bytes / 8; i += 4) {
    s0 += q[i];
    s1 += q[i + 1];
    s2 += q[i + 2];
    s3 += q[i + 3];
  }
  return s0 + s1 + s2 + s3;
}

template <class Fn>  // fn() -> work units done by one thread
double timed_parallel(ThreadPool& pool, Fn&& fn) {
  std::atomic<double> work{0};
  const auto t0 = std::chrono::steady_clock::now();
  pool.run([&](int, int) {
    const double w = fn();
    double cur = work.load();
    while (!work.compare_exchange_weak(cur, cur + w)) {
    }
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return work.load() / s;
}
}  // namespace

double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int reps) {
  auto buf = aligned_host_alloc(bytes, false);
  std::memset(buf.get(), 1, bytes);  // fault the pages in
  const bool avx2 = cpu_features().avx2;
  std::atomic<uint64_t> sink{0};
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run([&](int ith, int nth) {
      const size_t chunk = bytes / nth / 64 * 64;
      const auto* p = static_cast<const uint8_t*>(buf.get()) + chunk * ith;
      sink += avx2 ? avx2::read_sum(p, chunk) : read_sum_scalar(p, chunk);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(bytes) / s / 1e9);
  }
  return best;
}

double measure_fma_peak(ThreadPool& pool) {
  if (detect_isa_level() < IsaLevel::kAvx512) return 0;
  double best = 0;
  for (int r = 0; r < 3; ++r) best = std::max(best, timed_parallel(pool, [] { return avx512::fma_chains(20'000'000); }));
  return best / 1e9;
}

double measure_vnni_peak(ThreadPool& pool) {
  if (detect_isa_level() < IsaLevel::kAvx512Vnni) return 0;
  double best = 0;
  for (int r = 0; r < 3; ++r) best = std::max(best, timed_parallel(pool, [] { return vnni::dpbusd_chains(20'000'000); }));
  return best / 1e9;
}

}  // namespace pagoda::cpu

#include "runtime/machine_probe.h"

#include <immintrin.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "common/cpu_features.h"
#include "common/tensor.h"

namespace pagoda {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Sums 8 independent lanes so the loop is bound by loads, not the add latency.
__attribute__((noinline)) float sum_floats(const float* p, int64_t n) {
  float acc[16] = {0};
  for (int64_t i = 0; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += p[i + j];
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

// 12 independent FMA chains per vector register width; the asm barrier keeps the compiler from
// folding the loop (it may not reason about the registers' values across it).
__attribute__((target("avx512f"))) double fma_loop_avx512(int64_t iters) {
  __m512 a[12];
  for (auto& x : a) x = _mm512_set1_ps(1.0f);
  const __m512 m = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    for (auto& x : a) x = _mm512_fmadd_ps(x, m, c);
    __asm__ volatile("" : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]), "+v"(a[4]), "+v"(a[5]), "+v"(a[6]), "+v"(a[7]),
                     "+v"(a[8]), "+v"(a[9]), "+v"(a[10]), "+v"(a[11]));
  }
  float out[16];
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  _mm512_storeu_ps(out, s);
  return out[0];
}

__attribute__((target("avx2,fma"))) double fma_loop_avx2(int64_t iters) {
  __m256 a[12];
  for (auto& x : a) x = _mm256_set1_ps(1.0f);
  const __m256 m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    for (auto& x : a) x = _mm256_fmadd_ps(x, m, c);
    __asm__ volatile("" : "+x"(a[0]), "+x"(a[1]), "+x"(a[2]), "+x"(a[3]), "+x"(a[4]), "+x"(a[5]), "+x"(a[6]), "+x"(a[7]),
                     "+x"(a[8]), "+x"(a[9]), "+x"(a[10]), "+x"(a[11]));
  }
  float out[8];
  __m256 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, a[i]);
  _mm256_storeu_ps(out, s);
  return out[0];
}

}  // namespace

double measure_read_bandwidth(ThreadPool& pool, int64_t bytes, int repeats) {
  const int64_t n = bytes / 4 / 16 * 16;
  Tensor buf = Tensor::empty(DType::kF32, {n});
  // Touch every page (and give it non-trivial content) before timing.
  pool.parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
    float* p = buf.data_as<float>();
    for (int64_t i = b; i < e; ++i) p[i] = static_cast<float>(i & 1023);
  });
  double best = 0;
  std::vector<float> sink(pool.size());
  for (int r = 0; r < repeats; ++r) {
    const double t0 = now_seconds();
    pool.run([&](int ith, int nth) {
      const int64_t chunk = n / nth / 16 * 16;
      const int64_t b = chunk * ith, e = ith == nth - 1 ? n : b + chunk;
      sink[ith] += sum_floats(buf.data_as<float>() + b, e - b);
    });
    const double dt = now_seconds() - t0;
    best = std::max(best, static_cast<double>(n) * 4 / dt);
  }
  volatile float keep = sink[0];
  (void)keep;
  return best;
}

double measure_fma_peak(ThreadPool& pool) {
  const auto& f = cpu_features();
  const bool avx512 = f.avx512f && active_isa_level() >= IsaLevel::kAvx512;
  const bool avx2 = f.avx2 && f.fma;
  const int lanes = avx512 ? 16 : (avx2 ? 8 : 4);
  const int64_t iters = 20'000'000 / lanes * 4;
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    std::vector<double> sink(pool.size());
    const double t0 = now_seconds();
    pool.run([&](int ith, int) { sink[ith] = avx512 ? fma_loop_avx512(iters) : (avx2 ? fma_loop_avx2(iters) : 0); });
    const double dt = now_seconds() - t0;
    const double flops = static_cast<double>(iters) * 12 * lanes * 2 * pool.size();
    best = std::max(best, flops / dt);
  }
  return best;
}

int64_t peak_rss_bytes() {
  struct rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

}  // namespace pagoda

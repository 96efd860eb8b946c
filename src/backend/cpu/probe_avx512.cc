// AVX-512 FMA peak loop of measure_fma_peak (machine_probe.cc): 12 independent chains.
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstdint>

namespace pagoda::cpu::avx512 {

double fma_chains(int64_t iters) {
  __m512 a0 = _mm512_set1_ps(0.f), a1 = _mm512_set1_ps(1.f), a2 = _mm512_set1_ps(2.f), a3 = _mm512_set1_ps(3.f),
         a4 = _mm512_set1_ps(4.f), a5 = _mm512_set1_ps(5.f), a6 = _mm512_set1_ps(6.f), a7 = _mm512_set1_ps(7.f),
         a8 = _mm512_set1_ps(8.f), a9 = _mm512_set1_ps(9.f), a10 = _mm512_set1_ps(10.f), a11 = _mm512_set1_ps(11.f);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
#define P_STEP(i) a##i = _mm512_fmadd_ps(a##i, m, c);
  for (int64_t it = 0; it < iters; ++it) {
    P_STEP(0) P_STEP(1) P_STEP(2) P_STEP(3) P_STEP(4) P_STEP(5)
    P_STEP(6) P_STEP(7) P_STEP(8) P_STEP(9) P_STEP(10) P_STEP(11)
    __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7),
                     "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
  }
#undef P_STEP
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
  volatile float sink = _mm512_cvtss_f32(s);
  (void)sink;
  return static_cast<double>(iters) * 12 * 16 * 2;
}

}  // namespace pagoda::cpu::avx512

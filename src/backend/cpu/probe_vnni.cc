// AVX-512 VNNI peak loop of measure_vnni_peak (machine_probe.cc): 12 independent vpdpbusd chains.
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstdint>

namespace pagoda::cpu::vnni {

double dpbusd_chains(int64_t iters) {
  __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2), a3 = _mm512_set1_epi32(3),
          a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5), a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7),
          a8 = _mm512_set1_epi32(8), a9 = _mm512_set1_epi32(9), a10 = _mm512_set1_epi32(10), a11 = _mm512_set1_epi32(11);
  const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
#define P_STEP(i) a##i = _mm512_dpbusd_epi32(a##i, u, s);
  for (int64_t it = 0; it < iters; ++it) {
    P_STEP(0) P_STEP(1) P_STEP(2) P_STEP(3) P_STEP(4) P_STEP(5)
    P_STEP(6) P_STEP(7) P_STEP(8) P_STEP(9) P_STEP(10) P_STEP(11)
    __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7),
                     "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
  }
#undef P_STEP
  __m512i t = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                               _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
  t = _mm512_add_epi32(t, _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
  volatile int sink = _mm_cvtsi128_si32(_mm512_castsi512_si128(t));
  (void)sink;
  return static_cast<double>(iters) * 12 * 64 * 2;
}

}  // namespace pagoda::cpu::vnni

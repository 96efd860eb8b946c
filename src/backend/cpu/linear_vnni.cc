// Linear-layer kernels for AVX-512 + VNNI (vpdpbusd): the integer GEMM/GEMV of the qint and qint k
// families (layouts in kernels.h). Activation quantization: linear_x86_512.inc; float weights:
// linear_float_avx512.cc.
//
// Register tile: kG = 2 row groups (32 rows) x kT = 6 tokens. Per 32-element block and dword v of
// it, the tile loads (or unpacks) one code vector per group and broadcasts one activation dword per
// token; each broadcast feeds kG vpdpbusd. Why this shape (measured, docs/performance.md): next to
// 512-bit arithmetic Ice Lake issues only about one 512-bit load or broadcast per cycle, and the
// previous 1-group x 8-token tile needed one broadcast per vpdpbusd, which capped it near 50 % of
// the vpdpbusd peak before any other work; 2 x 6 needs 0.67 loads per vpdpbusd and leaves the FMA
// ports as the limit. Each (group, token) pair is one 8-long vpdpbusd chain per block (12 chains
// in flight hide the 5-cycle latency), then a convert and two float ops: acc += (d_w * d_x) *
// float(dot). The formats' code offsets (q4_0 8, q5_0 16, q8_0 128 on codes stored unsigned,
// q6_k 32, q3_k 4, tq2_0 1) are integer: the chain starts from -offset * sum(x codes) (ActQ8::c,
// c16; q3_k c16 / 8) instead of an FMA per token and block. Mins (q4_1, q5_1, q4_k, q5_k, q2_k)
// are one more FMA with d * sum(x).
//
// Batch invariance: the float operations for one (row, token) are the same sequence whatever the
// tile shape (1-2 groups, 1-6 tokens) and schedule (GEMV or GEMM), and integer dots are exact, so
// a token's output does not depend on M or on its position in the batch.
//
// Schedules: GEMV (up to kT tokens) streams each group pair's records once with software prefetch;
// GEMM walks token chunks whose activations stay in L2, and within a chunk each group pair's
// records (L1/L2) serve all token tiles.
// GCC 12 headers trip -Wmaybe-uninitialized on _mm512_undefined_ps() inside the intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include "backend/cpu/kernels.h"

#define PAGODA_VNNI 1

namespace pagoda::cpu::vnni {

#include "backend/cpu/linear_x86_512.inc"

namespace {

constexpr int kG = 2;      // row groups per register tile
constexpr int kT = 6;      // tokens per register tile
constexpr int64_t kTile = kT;  // ActQ8::tile
// GEMM token chunk, in register tiles: a group pair's records (L1) serve this many token tiles
// before the next pair. Small chunks keep the chunk's output rows few (each tile stores 2 x 64 B
// into every one of its rows, N floats apart: spread over hundreds of rows, i.e. 4 KB pages, those
// stores cost ~25 % of the tile; measured 1.4x faster on SmolLM2 shapes with 8 tiles than with
// 76), large enough that weights larger than L2 are not re-streamed too often (K = 8192: 8 tiles
// beat 2 and 4).
constexpr int64_t kChunkTiles = 8;

inline void store_rows(float* y, __m512 v, int64_t rows) {
  _mm512_mask_storeu_ps(y, rows >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << rows) - 1), v);
}
inline __m512 bcast_f(const float* p) { return _mm512_set1_ps(*p); }
inline __m512i bcast_i(const int32_t* p) { return _mm512_set1_epi32(*p); }
inline __m512i add_high(__m512i c, const uint8_t* mask, char value) {
  uint64_t mk;
  __builtin_memcpy(&mk, mask, 8);
  return _mm512_mask_add_epi8(c, _cvtu64_mask64(mk), c, _mm512_set1_epi8(value));
}

// ---- legacy formats (q4_0, q4_1, q5_0, q5_1, q8_0) ----
template <DType T>
struct QFmt : QintLayout<T> {
  static constexpr int32_t kOffset =
      T == DType::kQ4_0 ? 8 : T == DType::kQ5_0 ? 16 : (T == DType::kQ8_0 || T == DType::kIQ4_XS) ? 128 : 0;
};

// Code vectors of dwords v and v + 4 of a record (elements 4v.. and 16 + 4v.. of each row).
template <DType T>
inline void codes(const uint8_t* rec, int v, __m512i low4, __m512i* lo, __m512i* hi) {
  using F = QFmt<T>;
  const uint8_t* cp = rec + F::kCodesAt;
  if constexpr (F::kQ8) {
    *lo = _mm512_loadu_si512(cp + 64 * v);
    *hi = _mm512_loadu_si512(cp + 64 * (v + 4));
  } else {
    const __m512i raw = _mm512_loadu_si512(cp + 64 * v);
    *lo = _mm512_and_si512(raw, low4);
    *hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
    if constexpr (F::kHigh) {
      *lo = add_high(*lo, cp + 256 + 8 * v, 16);
      *hi = add_high(*hi, cp + 256 + 8 * (v + 4), 16);
    }
  }
}

// y[t0 + t][16 (g0 + g) + r] = W[rows of G groups] . x_t for TT tokens; rec[g]: the first record of
// group g; t0 a multiple of kTile.
template <DType T, int G, int TT>
inline void qtile(const uint8_t* const* rec0, int64_t nb, const ActQ8& a, int64_t t0, bool prefetch, float* y,
                  int64_t ldy, const int64_t* rows) {
  using F = QFmt<T>;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 acc[G][TT];
  for (int g = 0; g < G; ++g)
    for (int t = 0; t < TT; ++t) acc[g][t] = _mm512_setzero_ps();
  const uint8_t* rec[G];
  for (int g = 0; g < G; ++g) rec[g] = rec0[g];
  const int64_t i0 = act_index(a, t0, 0);
  const int8_t* xq = a.q + 32 * i0;
  const float* xd = a.d + i0;
  const float* xs = a.s + i0;
  const int32_t* xc = F::kOffset != 0 ? a.c + i0 : nullptr;
  for (int64_t b = 0; b < nb; ++b) {
    if (prefetch) {
      // a few KB ahead (the hardware streamer stops at 4 KB page boundaries)
      for (int g = 0; g < G; ++g)
        for (int64_t l = 0; l < F::kRecord; l += 64) _mm_prefetch(reinterpret_cast<const char*>(rec[g] + kPrefetchBytes + l), _MM_HINT_T0);
    }
    __m512i is[G][TT];
    for (int t = 0; t < TT; ++t) {
      const __m512i init = F::kOffset != 0 ? bcast_i(xc + t) : _mm512_setzero_si512();
      for (int g = 0; g < G; ++g) is[g][t] = init;
    }
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      __m512i lo[G], hi[G];
      for (int g = 0; g < G; ++g) codes<T>(rec[g], v, low4, &lo[g], &hi[g]);
      for (int t = 0; t < TT; ++t) {
        const __m512i xl = bcast_x(xq + 32 * t + 4 * v), xh = bcast_x(xq + 32 * t + 16 + 4 * v);
        for (int g = 0; g < G; ++g) {
          is[g][t] = _mm512_dpbusd_epi32(is[g][t], lo[g], xl);
          is[g][t] = _mm512_dpbusd_epi32(is[g][t], hi[g], xh);
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      __m512 dw;
      if constexpr (F::kF32Scale) {
        dw = _mm512_loadu_ps(reinterpret_cast<const float*>(rec[g]));
      } else {
        dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec[g])));
      }
      __m512 mw = _mm512_setzero_ps();
      if constexpr (F::kMin) mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec[g] + 32)));
      for (int t = 0; t < TT; ++t) {
        acc[g][t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, bcast_f(xd + t)), _mm512_cvtepi32_ps(is[g][t]), acc[g][t]);
        if constexpr (F::kMin) acc[g][t] = _mm512_fmadd_ps(mw, bcast_f(xs + t), acc[g][t]);
      }
      rec[g] += F::kRecord;
    }
    xq += 32 * kTile;
    xd += kTile;
    xs += kTile;
    if constexpr (F::kOffset != 0) xc += kTile;
  }
  for (int g = 0; g < G; ++g)
    for (int t = 0; t < TT; ++t) store_rows(y + t * ldy + 16 * g, acc[g][t], rows[g]);
}

// ---- k-quants (q4_k, q5_k, q6_k): per super-block f32 row scales, per 32-element sub-block 6/8-bit
// scales widened in registers ----
template <DType T>
using KFmt = QintKLayout<T>;

inline __m512 widen_u8(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512 widen_i8(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// Code vector of dword v (0..7) of a k-quant sub-block record r.
template <DType T>
inline __m512i kcode(const uint8_t* r, int v, __m512i low4) {
  using F = KFmt<T>;
  const uint8_t* cp = r + F::kCodesAt;
  if constexpr (F::k2Bit) {
    const __m512i raw = _mm512_loadu_si512(cp + 64 * (v >> 2));
    const __m512i sh = (v & 3) == 0 ? raw : _mm512_srli_epi16(raw, 2 * (v & 3));
    const __m512i c = _mm512_and_si512(sh, _mm512_set1_epi8(3));
    if constexpr (F::kQ3) return add_high(c, r + F::kMasksAt + 8 * v, 4);
    return c;
  }
  const __m512i raw = _mm512_loadu_si512(cp + 64 * (v & 3));
  __m512i c = v < 4 ? _mm512_and_si512(raw, low4) : _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
  if constexpr (F::kHigh || F::kQ6) c = add_high(c, cp + 256 + 8 * v, 16);
  if constexpr (F::kQ6) c = add_high(c, cp + 320 + 8 * v, 32);
  return c;
}

template <DType T, int G, int TT>
inline void qktile(const uint8_t* const* sb0, int64_t ns, const ActQ8& a, int64_t t0, bool prefetch, float* y,
                   int64_t ldy, const int64_t* rows) {
  using F = KFmt<T>;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 acc[G][TT];
  for (int g = 0; g < G; ++g)
    for (int t = 0; t < TT; ++t) acc[g][t] = _mm512_setzero_ps();
  const uint8_t* sb[G];
  for (int g = 0; g < G; ++g) sb[g] = sb0[g];
  const int64_t i0 = act_index(a, t0, 0);
  const int8_t* xq = a.q + 32 * i0;
  const float* xd = a.d + i0;
  const float* xs = a.s + i0;
  const int32_t* xc16 = (F::kQ6 || F::kQ3) ? a.c16 + 2 * i0 : nullptr;
  const int32_t* xc = F::kTQ ? a.c + i0 : nullptr;
  const float* xs16 = a.s16 + 2 * i0;
  for (int64_t s = 0; s < ns; ++s) {
    for (int j = 0; j < 8; ++j) {
      const uint8_t* r[G];
      for (int g = 0; g < G; ++g) {
        r[g] = sb[g] + F::kHeader + j * F::kRecord;
        if (prefetch) {
          for (int64_t l = 0; l < F::kRecord; l += 64) _mm_prefetch(reinterpret_cast<const char*>(r[g] + kPrefetchBytes + l), _MM_HINT_T0);
          if (j == 0)
            for (int64_t l = 0; l < F::kHeader; l += 64) _mm_prefetch(reinterpret_cast<const char*>(sb[g] + F::kSuper + kPrefetchBytes + l), _MM_HINT_T0);
        }
      }
      if constexpr (F::kTQ) {
        // one 8-long chain per sub-block from -sum(x codes) (the code offset 1), one row scale
        __m512i is[G][TT];
        for (int t = 0; t < TT; ++t) {
          const __m512i init = bcast_i(xc + t);
          for (int g = 0; g < G; ++g) is[g][t] = init;
        }
#pragma GCC unroll 8
        for (int v = 0; v < 8; ++v) {
          __m512i c[G];
          for (int g = 0; g < G; ++g) c[g] = kcode<T>(r[g], v, low4);
          for (int t = 0; t < TT; ++t) {
            const __m512i xv = bcast_x(xq + 32 * t + 4 * v);
            for (int g = 0; g < G; ++g) is[g][t] = _mm512_dpbusd_epi32(is[g][t], c[g], xv);
          }
        }
        for (int g = 0; g < G; ++g) {
          const __m512 dw = _mm512_loadu_ps(reinterpret_cast<const float*>(sb[g]));
          for (int t = 0; t < TT; ++t)
            acc[g][t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, bcast_f(xd + t)), _mm512_cvtepi32_ps(is[g][t]), acc[g][t]);
        }
      } else if constexpr (F::kQ6 || F::kQ3 || F::kQ2) {
        // two halves of 16 with their own scales: elements 0..15 are dwords 0..3, 16..31 dwords 4..7
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          __m512i is[G][TT];
          for (int t = 0; t < TT; ++t) {
            // q6_k: c16 = -32 * sum(x codes); q3_k's offset 4: c16 / 8 (exact)
            const __m512i init = F::kQ6   ? bcast_i(xc16 + 2 * t + h)
                                 : F::kQ3 ? _mm512_srai_epi32(bcast_i(xc16 + 2 * t + h), 3)
                                          : _mm512_setzero_si512();
            for (int g = 0; g < G; ++g) is[g][t] = init;
          }
#pragma GCC unroll 4
          for (int v = 4 * h; v < 4 * h + 4; ++v) {
            __m512i c[G];
            for (int g = 0; g < G; ++g) c[g] = kcode<T>(r[g], v, low4);
            for (int t = 0; t < TT; ++t) {
              const __m512i xv = bcast_x(xq + 32 * t + 4 * v);
              for (int g = 0; g < G; ++g) is[g][t] = _mm512_dpbusd_epi32(is[g][t], c[g], xv);
            }
          }
          for (int g = 0; g < G; ++g) {
            if constexpr (F::kQ2) {
              // scale | min << 4 per row
              const __m512i sm = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r[g] + 16 * h)));
              const __m512 dsc = _mm512_mul_ps(_mm512_loadu_ps(reinterpret_cast<const float*>(sb[g])),
                                               _mm512_cvtepi32_ps(_mm512_and_si512(sm, _mm512_set1_epi32(15))));
              const __m512 dmn = _mm512_mul_ps(_mm512_loadu_ps(reinterpret_cast<const float*>(sb[g] + 64)),
                                               _mm512_cvtepi32_ps(_mm512_srli_epi32(sm, 4)));
              for (int t = 0; t < TT; ++t) {
                acc[g][t] = _mm512_fmadd_ps(_mm512_mul_ps(dsc, bcast_f(xd + t)), _mm512_cvtepi32_ps(is[g][t]), acc[g][t]);
                acc[g][t] = _mm512_fnmadd_ps(dmn, bcast_f(xs16 + 2 * t + h), acc[g][t]);
              }
            } else {
              const __m512 dsc = _mm512_mul_ps(_mm512_loadu_ps(reinterpret_cast<const float*>(sb[g])), widen_i8(r[g] + 16 * h));
              for (int t = 0; t < TT; ++t)
                acc[g][t] = _mm512_fmadd_ps(_mm512_mul_ps(dsc, bcast_f(xd + t)), _mm512_cvtepi32_ps(is[g][t]), acc[g][t]);
            }
          }
        }
      } else {
        __m512i is[G][TT];
        for (int g = 0; g < G; ++g)
          for (int t = 0; t < TT; ++t) is[g][t] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
          __m512i lo[G], hi[G];
          for (int g = 0; g < G; ++g) {
            lo[g] = kcode<T>(r[g], v, low4);
            hi[g] = kcode<T>(r[g], v + 4, low4);
          }
          for (int t = 0; t < TT; ++t) {
            const __m512i xl = bcast_x(xq + 32 * t + 4 * v), xh = bcast_x(xq + 32 * t + 16 + 4 * v);
            for (int g = 0; g < G; ++g) {
              is[g][t] = _mm512_dpbusd_epi32(is[g][t], lo[g], xl);
              is[g][t] = _mm512_dpbusd_epi32(is[g][t], hi[g], xh);
            }
          }
        }
        for (int g = 0; g < G; ++g) {
          const __m512 dsc = _mm512_mul_ps(_mm512_loadu_ps(reinterpret_cast<const float*>(sb[g])), widen_u8(r[g]));
          const __m512 dmn = _mm512_mul_ps(_mm512_loadu_ps(reinterpret_cast<const float*>(sb[g] + 64)), widen_u8(r[g] + 16));
          for (int t = 0; t < TT; ++t) {
            acc[g][t] = _mm512_fmadd_ps(_mm512_mul_ps(dsc, bcast_f(xd + t)), _mm512_cvtepi32_ps(is[g][t]), acc[g][t]);
            acc[g][t] = _mm512_fnmadd_ps(dmn, bcast_f(xs + t), acc[g][t]);
          }
        }
      }
      xq += 32 * kTile;
      xd += kTile;
      xs += kTile;
      if constexpr (F::kQ6 || F::kQ3) xc16 += 2 * kTile;
      if constexpr (F::kTQ) xc += kTile;
      xs16 += 2 * kTile;
    }
    for (int g = 0; g < G; ++g) sb[g] += F::kSuper;
  }
  for (int g = 0; g < G; ++g)
    for (int t = 0; t < TT; ++t) store_rows(y + t * ldy + 16 * g, acc[g][t], rows[g]);
}

// ---- schedules ----
template <DType T, bool kK, int G, int TT>
inline void run_tile(const uint8_t* const* rec, int64_t nb, const ActQ8& a, int64_t t0, bool prefetch, float* y,
                     int64_t ldy, const int64_t* rows) {
  if constexpr (kK) {
    qktile<T, G, TT>(rec, nb / 8, a, t0, prefetch, y, ldy, rows);
  } else {
    qtile<T, G, TT>(rec, nb, a, t0, prefetch, y, ldy, rows);
  }
}

template <DType T, bool kK, int G>
inline void run_tile_t(int mt, const uint8_t* const* rec, int64_t nb, const ActQ8& a, int64_t t0, bool prefetch,
                       float* y, int64_t ldy, const int64_t* rows) {
  switch (mt) {
    case 1: run_tile<T, kK, G, 1>(rec, nb, a, t0, prefetch, y, ldy, rows); break;
    case 2: run_tile<T, kK, G, 2>(rec, nb, a, t0, prefetch, y, ldy, rows); break;
    case 3: run_tile<T, kK, G, 3>(rec, nb, a, t0, prefetch, y, ldy, rows); break;
    case 4: run_tile<T, kK, G, 4>(rec, nb, a, t0, prefetch, y, ldy, rows); break;
    case 5: run_tile<T, kK, G, 5>(rec, nb, a, t0, prefetch, y, ldy, rows); break;
    default: run_tile<T, kK, G, 6>(rec, nb, a, t0, prefetch, y, ldy, rows); break;
  }
}

// kK: k-quant (group stride ns super-blocks), else legacy (nb records).
template <DType T, bool kK>
void qgemm_t(const uint8_t* packed, int64_t k, int64_t g0, int64_t g1, const ActQ8& a, int64_t m0, int64_t m1,
             float* y, int64_t ldy, int64_t n_total) {
  const int64_t nb = k / 32;
  int64_t gbytes;
  if constexpr (kK) {
    gbytes = (k / 256) * KFmt<T>::kSuper;
  } else {
    gbytes = nb * QFmt<T>::kRecord;
  }
  const bool gemv = m1 - m0 <= kT;  // weights streamed once: prefetch them
  const int64_t mc = kChunkTiles * kT;
  for (int64_t mb = m0; mb < m1; mb += mc) {
    const int64_t me = mb + mc < m1 ? mb + mc : m1;
    for (int64_t g = g0; g < g1; g += kG) {
      const int nv = static_cast<int>(g1 - g < kG ? g1 - g : kG);
      const uint8_t* rec[kG];
      int64_t rows[kG];
      for (int v = 0; v < nv; ++v) {
        rec[v] = packed + (g + v) * gbytes;
        rows[v] = n_total - 16 * (g + v);
      }
      for (int64_t t0 = mb; t0 < me; t0 += kT) {
        const int mt = static_cast<int>(me - t0 < kT ? me - t0 : kT);
        float* yt = y + t0 * ldy + 16 * g;
        if (nv == kG) {
          run_tile_t<T, kK, kG>(mt, rec, nb, a, t0, gemv, yt, ldy, rows);
        } else {
          run_tile_t<T, kK, 1>(mt, rec, nb, a, t0, gemv, yt, ldy, rows);
        }
      }
    }
  }
}

void qgemm_impl(DType t, const uint8_t* packed, int64_t k, int64_t g0, int64_t g1, const ActQ8& a, int64_t m0,
                int64_t m1, float* y, int64_t ldy, int64_t n_total) {
  switch (t) {
    case DType::kQ4_0: qgemm_t<DType::kQ4_0, false>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kQ4_1: qgemm_t<DType::kQ4_1, false>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kQ5_0: qgemm_t<DType::kQ5_0, false>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kQ5_1: qgemm_t<DType::kQ5_1, false>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kQ8_0: qgemm_t<DType::kQ8_0, false>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kIQ4_XS: qgemm_t<DType::kIQ4_XS, false>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kQ2_K: qgemm_t<DType::kQ2_K, true>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kQ3_K: qgemm_t<DType::kQ3_K, true>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kQ4_K: qgemm_t<DType::kQ4_K, true>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kQ5_K: qgemm_t<DType::kQ5_K, true>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kQ6_K: qgemm_t<DType::kQ6_K, true>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kTQ2_0: qgemm_t<DType::kTQ2_0, true>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    default: __builtin_trap();
  }
}

int32_t act_offset(DType t) {
  switch (t) {
    case DType::kQ4_0: return QFmt<DType::kQ4_0>::kOffset;
    case DType::kQ5_0: return QFmt<DType::kQ5_0>::kOffset;
    case DType::kQ8_0: return QFmt<DType::kQ8_0>::kOffset;
    case DType::kIQ4_XS: return QFmt<DType::kIQ4_XS>::kOffset;
    case DType::kQ6_K:
    case DType::kQ3_K: return 32;
    case DType::kTQ2_0: return 1;
    default: return 0;
  }
}

}  // namespace

const KernelTable* kernel_table() {
  static const KernelTable t{IsaLevel::kAvx512Vnni, quantize_act_impl, qgemm_impl, avx512::fgemm_512, true,
                             kTile, act_offset, avx512::pack_x_512, avx512::fgemm_packed_512};
  return &t;
}

}  // namespace pagoda::cpu::vnni

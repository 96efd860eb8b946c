// Linear-layer kernels for AVX2 + FMA + F16C (same packed layouts as the AVX-512 kernels, see
// kernels.h and linear_x86_512.inc). A 256-bit vector holds 8 rows' dwords, so each 16-row group
// is processed as two halves (h = 0: bytes 0..31 of every 64-byte chunk, h = 1: bytes 32..63); the
// second half re-reads the group's records from L2. The integer dot is vpmaddubsw + vpmaddwd
// (q8_0: |w| times x with w's sign, since biased codes up to 255 would saturate int16).
#include <immintrin.h>

#include "backend/cpu/kernels.h"

namespace pagoda::cpu::avx2 {
namespace {

constexpr int kMaxTile = 4;
constexpr int64_t kTile = 8;  // ActQ8::tile of these kernels (tiles of kMaxTile tokens start at multiples of 4)

inline float hmax8(__m256 v) {
  __m128 q = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  q = _mm_max_ps(q, _mm_movehl_ps(q, q));
  q = _mm_max_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}
inline int hsum8_epi32(__m256i v) {
  __m128i q = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  q = _mm_add_epi32(q, _mm_shuffle_epi32(q, 0x4E));
  q = _mm_add_epi32(q, _mm_shuffle_epi32(q, 0xB1));
  return _mm_cvtsi128_si32(q);
}

void quantize_act_impl(const float* x, int64_t ldx, int64_t m0, int64_t m1, int64_t k, const ActQ8& a) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t m = m0; m < m1; ++m) {
    const float* xr = x + m * ldx;
    for (int64_t b = 0; b < k / 32; ++b) {
      const int64_t i = act_index(a, m, b);
      __m256 v[4];
      for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(xr + 32 * b + 8 * i);
      const __m256 am = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask)),
                                      _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask)));
      const float amax = hmax8(am);
      const __m256 id = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
      __m256i qi[4];
      for (int i = 0; i < 4; ++i) qi[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
      const __m256i p = _mm256_permutevar8x32_epi32(
          _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3])), perm);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.q + 32 * i), p);
      const int sum0 = hsum8_epi32(_mm256_add_epi32(qi[0], qi[1])), sum1 = hsum8_epi32(_mm256_add_epi32(qi[2], qi[3]));
      const float d = amax / 127.0f;
      a.d[i] = d;
      a.s[i] = d * static_cast<float>(sum0 + sum1);
      a.s16[2 * i] = d * static_cast<float>(sum0);
      a.s16[2 * i + 1] = d * static_cast<float>(sum1);
      if (a.c) a.c[i] = -a.offset * (sum0 + sum1);
      if (a.c16) {
        a.c16[2 * i] = -32 * sum0;
        a.c16[2 * i + 1] = -32 * sum1;
      }
    }
  }
}

inline __m256i bcast_x(const int8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// 32 bits of a code-bit mask -> bytes of `value` (bit set) or 0.
inline __m256i expand_bits(uint32_t bits, char value) {
  const __m256i rep = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                                          _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL,
                                                             0x0303030303030303LL));
  const __m256i sel = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(rep, sel), sel), _mm256_set1_epi8(value));
}
inline __m256i expand_bits16(uint32_t bits) { return expand_bits(bits, 16); }

template <DType T>
struct QFmt : QintLayout<T> {
  static constexpr float kOffset = T == DType::kQ4_0 ? 8.f : T == DType::kQ5_0 ? 16.f : 0.f;
};

template <DType T, int MT>
inline void qint_tile(const uint8_t* rec, int64_t nb, const ActQ8& a, int64_t t0, int h, __m256* acc) {
  using F = QFmt<T>;
  const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  for (int t = 0; t < MT; ++t) acc[t] = _mm256_setzero_ps();
  const int64_t i0 = act_index(a, t0, 0);
  const int8_t* xq = a.q + 32 * i0;
  const float* xd = a.d + i0;
  const float* xs = a.s + i0;
  for (int64_t b = 0; b < nb; ++b, rec += F::kRecord, xq += 32 * kTile, xd += kTile, xs += kTile) {
    __m256 dw;
    if constexpr (F::kF32Scale) {
      dw = _mm256_loadu_ps(reinterpret_cast<const float*>(rec) + 8 * h);
    } else {
      dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + 16 * h)));
    }
    const uint8_t* cp = rec + F::kCodesAt;
    __m256i isum[MT];
    for (int t = 0; t < MT; ++t) isum[t] = _mm256_setzero_si256();
    if constexpr (F::kQ8) {
      for (int v = 0; v < 8; ++v) {
        const __m256i w = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(cp + 64 * v + 32 * h)),
                                           _mm256_set1_epi8(static_cast<char>(0x80)));
        const __m256i aw = _mm256_abs_epi8(w);
        for (int t = 0; t < MT; ++t) {
          const __m256i xv = bcast_x(xq + 32 * t + 4 * v);
          isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, w)), ones));
        }
      }
    } else {
      for (int c = 0; c < 4; ++c) {
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cp + 64 * c + 32 * h));
        __m256i lo = _mm256_and_si256(raw, low4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
        if constexpr (F::kHigh) {
          uint32_t mlo, mhi;
          __builtin_memcpy(&mlo, cp + 256 + 8 * c + 4 * h, 4);
          __builtin_memcpy(&mhi, cp + 256 + 8 * (c + 4) + 4 * h, 4);
          lo = _mm256_or_si256(lo, expand_bits16(mlo));
          hi = _mm256_or_si256(hi, expand_bits16(mhi));
        }
        for (int t = 0; t < MT; ++t) {
          const int8_t* xb = xq + 32 * t;
          const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast_x(xb + 4 * c)),
                                               _mm256_maddubs_epi16(hi, bcast_x(xb + 16 + 4 * c)));
          isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(s16, ones));
        }
      }
    }
    __m256 mw = _mm256_setzero_ps();
    if constexpr (F::kMin) mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + 32 + 16 * h)));
    for (int t = 0; t < MT; ++t) {
      const float dx = xd[t];
      const float sx = xs[t];
      const __m256 fs = _mm256_cvtepi32_ps(isum[t]);
      if constexpr (F::kMin) {
        acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(dx)), fs, acc[t]);
        acc[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(sx), acc[t]);
      } else if constexpr (F::kOffset != 0.f) {
        acc[t] = _mm256_fmadd_ps(dw, _mm256_fmadd_ps(fs, _mm256_set1_ps(dx), _mm256_set1_ps(-F::kOffset * sx)), acc[t]);
      } else {
        acc[t] = _mm256_fmadd_ps(dw, _mm256_mul_ps(fs, _mm256_set1_ps(dx)), acc[t]);
      }
    }
  }
}

inline void store_rows(float* y, __m256 v, int64_t rows) {
  if (rows >= 8) {
    _mm256_storeu_ps(y, v);
  } else if (rows > 0) {
    alignas(32) float tmp[8];
    _mm256_store_ps(tmp, v);
    for (int64_t i = 0; i < rows; ++i) y[i] = tmp[i];
  }
}

inline int64_t token_chunk(int64_t k, int64_t elem_bytes) {
  int64_t c = (256 * 1024) / (k * elem_bytes);
  c = c / kMaxTile * kMaxTile;
  return c < kMaxTile ? kMaxTile : c;
}

template <DType T>
void qgemm_t(const uint8_t* packed, int64_t k, int64_t g0, int64_t g1, const ActQ8& a, int64_t m0, int64_t m1,
             float* y, int64_t ldy, int64_t n_total) {
  using F = QFmt<T>;
  const int64_t nb = k / 32, mc = token_chunk(k, 1);
  __m256 acc[kMaxTile];
  for (int64_t mb = m0; mb < m1; mb += mc) {
    const int64_t me = mb + mc < m1 ? mb + mc : m1;
    for (int64_t g = g0; g < g1; ++g) {
      const uint8_t* rec = packed + g * nb * F::kRecord;
      for (int h = 0; h < 2; ++h) {
        const int64_t rows = n_total - 16 * g - 8 * h;
        if (rows <= 0) break;
        for (int64_t t0 = mb; t0 < me; t0 += kMaxTile) {
          const int mt = static_cast<int>(me - t0 < kMaxTile ? me - t0 : kMaxTile);
          switch (mt) {
            case 1: qint_tile<T, 1>(rec, nb, a, t0, h, acc); break;
            case 2: qint_tile<T, 2>(rec, nb, a, t0, h, acc); break;
            case 3: qint_tile<T, 3>(rec, nb, a, t0, h, acc); break;
            default: qint_tile<T, 4>(rec, nb, a, t0, h, acc); break;
          }
          for (int t = 0; t < mt; ++t) store_rows(y + (t0 + t) * ldy + 16 * g + 8 * h, acc[t], rows);
        }
      }
    }
  }
}

// ---- k-quants (layout in kernels.h), one half (8 rows) at a time ----
template <DType T>
using KFmt = QintKLayout<T>;

inline __m256 widen8(const uint8_t* p, bool is_signed) {
  const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v));
}

template <DType T, int MT>
inline void qint_k_tile(const uint8_t* sb, int64_t ns, const ActQ8& a, int64_t t0, int h, __m256* acc) {
  using F = KFmt<T>;
  const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  for (int t = 0; t < MT; ++t) acc[t] = _mm256_setzero_ps();
  const int64_t i0 = act_index(a, t0, 0);
  const int8_t* xq = a.q + 32 * i0;
  const float* xd = a.d + i0;
  const float* xs = a.s + i0;
  const float* xs16 = a.s16 + 2 * i0;
  for (int64_t s = 0; s < ns; ++s, sb += F::kSuper) {
    const __m256 dsup = _mm256_loadu_ps(reinterpret_cast<const float*>(sb) + 8 * h);
    __m256 msup = _mm256_setzero_ps();
    if constexpr (F::kHeader == 128) msup = _mm256_loadu_ps(reinterpret_cast<const float*>(sb + 64) + 8 * h);
    for (int j = 0; j < 8; ++j) {
      const uint8_t* r = sb + F::kHeader + j * F::kRecord;
      constexpr bool kPer16 = F::kQ6 || F::kQ3 || F::kQ2;  // two scales per sub-block (elements 0..15, 16..31)
      constexpr bool kSigned = F::kQ6 || F::kQ3;
      __m256 d0 = dsup, d1 = msup;
      __m256 mlo = _mm256_setzero_ps(), mhi = _mm256_setzero_ps();
      if constexpr (F::kTQ) {
        // the row scale alone
      } else if constexpr (F::kQ2) {
        // scale | min << 4 per row
        const __m256i slo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(r + 8 * h)));
        const __m256i shi = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(r + 16 + 8 * h)));
        const __m256i m15 = _mm256_set1_epi32(15);
        d0 = _mm256_mul_ps(dsup, _mm256_cvtepi32_ps(_mm256_and_si256(slo, m15)));
        d1 = _mm256_mul_ps(dsup, _mm256_cvtepi32_ps(_mm256_and_si256(shi, m15)));
        mlo = _mm256_mul_ps(msup, _mm256_cvtepi32_ps(_mm256_srli_epi32(slo, 4)));
        mhi = _mm256_mul_ps(msup, _mm256_cvtepi32_ps(_mm256_srli_epi32(shi, 4)));
      } else {
        d0 = _mm256_mul_ps(dsup, widen8(r + 8 * h, kSigned));
        d1 = _mm256_mul_ps(kPer16 ? dsup : msup, widen8(r + 16 + 8 * h, kSigned));
      }
      const uint8_t* cp = r + F::kCodesAt;
      __m256i ilo[MT], ihi[MT];
      for (int t = 0; t < MT; ++t) ilo[t] = ihi[t] = _mm256_setzero_si256();
      __m256i raw_lo = _mm256_setzero_si256(), raw_hi = _mm256_setzero_si256();  // q2_k: the two code vectors
      if constexpr (F::k2Bit) {
        raw_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cp + 32 * h));
        raw_hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cp + 64 + 32 * h));
      }
      for (int c = 0; c < 4; ++c) {
        __m256i lo, hi;
        if constexpr (F::k2Bit) {
          const __m256i low2 = _mm256_set1_epi8(3);
          lo = _mm256_and_si256(_mm256_srli_epi16(raw_lo, 2 * c), low2);
          hi = _mm256_and_si256(_mm256_srli_epi16(raw_hi, 2 * c), low2);
          if constexpr (F::kQ3) {
            uint32_t mlo, mhi;
            __builtin_memcpy(&mlo, r + F::kMasksAt + 8 * c + 4 * h, 4);
            __builtin_memcpy(&mhi, r + F::kMasksAt + 8 * (c + 4) + 4 * h, 4);
            lo = _mm256_or_si256(lo, expand_bits(mlo, 4));
            hi = _mm256_or_si256(hi, expand_bits(mhi, 4));
          }
        } else {
          const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cp + 64 * c + 32 * h));
          lo = _mm256_and_si256(raw, low4);
          hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
        }
        if constexpr (F::kHigh || F::kQ6) {
          uint32_t mlo, mhi;
          __builtin_memcpy(&mlo, cp + 256 + 8 * c + 4 * h, 4);
          __builtin_memcpy(&mhi, cp + 256 + 8 * (c + 4) + 4 * h, 4);
          lo = _mm256_or_si256(lo, expand_bits(mlo, 16));
          hi = _mm256_or_si256(hi, expand_bits(mhi, 16));
        }
        if constexpr (F::kQ6) {
          uint32_t mlo, mhi;
          __builtin_memcpy(&mlo, cp + 320 + 8 * c + 4 * h, 4);
          __builtin_memcpy(&mhi, cp + 320 + 8 * (c + 4) + 4 * h, 4);
          lo = _mm256_or_si256(lo, expand_bits(mlo, 32));
          hi = _mm256_or_si256(hi, expand_bits(mhi, 32));
        }
        for (int t = 0; t < MT; ++t) {
          const int8_t* xb = xq + 32 * t;
          // one vpmaddubsw per int16 sum: codes <= 63 keep 2 * 63 * 127 in range
          ilo[t] = _mm256_add_epi32(ilo[t], _mm256_madd_epi16(_mm256_maddubs_epi16(lo, bcast_x(xb + 4 * c)), ones));
          ihi[t] = _mm256_add_epi32(ihi[t], _mm256_madd_epi16(_mm256_maddubs_epi16(hi, bcast_x(xb + 16 + 4 * c)), ones));
        }
      }
      for (int t = 0; t < MT; ++t) {
        const __m256 dx = _mm256_set1_ps(xd[t]);
        if constexpr (F::kQ6 || F::kQ3) {
          constexpr float kOff = F::kQ6 ? -32.f : -4.f;  // the code offset
          const float slo = xs16[2 * t], shi = xs16[2 * t + 1];
          acc[t] = _mm256_fmadd_ps(d0, _mm256_fmadd_ps(_mm256_cvtepi32_ps(ilo[t]), dx, _mm256_set1_ps(kOff * slo)), acc[t]);
          acc[t] = _mm256_fmadd_ps(d1, _mm256_fmadd_ps(_mm256_cvtepi32_ps(ihi[t]), dx, _mm256_set1_ps(kOff * shi)), acc[t]);
        } else if constexpr (F::kTQ) {
          const __m256 fs = _mm256_cvtepi32_ps(_mm256_add_epi32(ilo[t], ihi[t]));
          acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d0, dx), fs, acc[t]);
          acc[t] = _mm256_fnmadd_ps(d0, _mm256_set1_ps(xs[t]), acc[t]);  // the code offset 1
        } else if constexpr (F::kQ2) {
          const float slo = xs16[2 * t], shi = xs16[2 * t + 1];
          acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d0, dx), _mm256_cvtepi32_ps(ilo[t]), acc[t]);
          acc[t] = _mm256_fnmadd_ps(mlo, _mm256_set1_ps(slo), acc[t]);
          acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d1, dx), _mm256_cvtepi32_ps(ihi[t]), acc[t]);
          acc[t] = _mm256_fnmadd_ps(mhi, _mm256_set1_ps(shi), acc[t]);
        } else {
          const __m256 fs = _mm256_cvtepi32_ps(_mm256_add_epi32(ilo[t], ihi[t]));
          acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d0, dx), fs, acc[t]);
          acc[t] = _mm256_fnmadd_ps(d1, _mm256_set1_ps(xs[t]), acc[t]);
        }
      }
      xq += 32 * kTile;
      xd += kTile;
      xs += kTile;
      xs16 += 2 * kTile;
    }
  }
}

template <DType T>
void qgemm_k_t(const uint8_t* packed, int64_t k, int64_t g0, int64_t g1, const ActQ8& a, int64_t m0, int64_t m1,
               float* y, int64_t ldy, int64_t n_total) {
  using F = KFmt<T>;
  const int64_t ns = k / 256, mc = token_chunk(k, 1);
  __m256 acc[kMaxTile];
  for (int64_t mb = m0; mb < m1; mb += mc) {
    const int64_t me = mb + mc < m1 ? mb + mc : m1;
    for (int64_t g = g0; g < g1; ++g) {
      const uint8_t* sb = packed + g * ns * F::kSuper;
      for (int h = 0; h < 2; ++h) {
        const int64_t rows = n_total - 16 * g - 8 * h;
        if (rows <= 0) break;
        for (int64_t t0 = mb; t0 < me; t0 += kMaxTile) {
          const int mt = static_cast<int>(me - t0 < kMaxTile ? me - t0 : kMaxTile);
          switch (mt) {
            case 1: qint_k_tile<T, 1>(sb, ns, a, t0, h, acc); break;
            case 2: qint_k_tile<T, 2>(sb, ns, a, t0, h, acc); break;
            case 3: qint_k_tile<T, 3>(sb, ns, a, t0, h, acc); break;
            default: qint_k_tile<T, 4>(sb, ns, a, t0, h, acc); break;
          }
          for (int t = 0; t < mt; ++t) store_rows(y + (t0 + t) * ldy + 16 * g + 8 * h, acc[t], rows);
        }
      }
    }
  }
}

void qgemm_impl(DType t, const uint8_t* packed, int64_t k, int64_t g0, int64_t g1, const ActQ8& a, int64_t m0,
                int64_t m1, float* y, int64_t ldy, int64_t n_total) {
  switch (t) {
    case DType::kQ4_0: qgemm_t<DType::kQ4_0>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kQ4_1: qgemm_t<DType::kQ4_1>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kQ5_0: qgemm_t<DType::kQ5_0>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kQ5_1: qgemm_t<DType::kQ5_1>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kQ8_0: qgemm_t<DType::kQ8_0>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kIQ4_XS: qgemm_t<DType::kIQ4_XS>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kQ2_K: qgemm_k_t<DType::kQ2_K>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kQ3_K: qgemm_k_t<DType::kQ3_K>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kQ4_K: qgemm_k_t<DType::kQ4_K>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kQ5_K: qgemm_k_t<DType::kQ5_K>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kQ6_K: qgemm_k_t<DType::kQ6_K>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    case DType::kTQ2_0: qgemm_k_t<DType::kTQ2_0>(packed, k, g0, g1, a, m0, m1, y, ldy, n_total); break;
    default: __builtin_trap();
  }
}


// ---- float family: one group (2 vectors of 8 rows) x MT <= 4 tokens ----
template <DType T>
inline __m256 load8(const void* p, int64_t e, int h) {
  if constexpr (T == DType::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + 16 * e + 8 * h);
  } else if constexpr (T == DType::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + 16 * e + 8 * h)));
  } else {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + 16 * e + 8 * h));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
  }
}

// out[2t], out[2t + 1] = rows 0..7, 8..15 of the group . x_t. One FMA chain per output over
// k = 0, 1, ..., K - 1 (whatever MT): a token's result does not depend on the batch (the AVX-512
// kernels keep the same contract, see linear_float_avx512.cc).
template <DType T, int MT>
inline void float_tile(const uint8_t* gp, int64_t k, const float* x, int64_t ldx, __m256* out) {
  __m256 acc[2 * MT];
  for (int i = 0; i < 2 * MT; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t e = 0; e < k; ++e) {
    const __m256 w0 = load8<T>(gp, e, 0), w1 = load8<T>(gp, e, 1);
    for (int t = 0; t < MT; ++t) {
      const __m256 xb = _mm256_broadcast_ss(x + t * ldx + e);
      acc[2 * t] = _mm256_fmadd_ps(w0, xb, acc[2 * t]);
      acc[2 * t + 1] = _mm256_fmadd_ps(w1, xb, acc[2 * t + 1]);
    }
  }
  for (int i = 0; i < 2 * MT; ++i) out[i] = acc[i];
}

template <DType T>
void fgemm_t(const uint8_t* packed, int64_t k, int64_t g0, int64_t g1, const float* x, int64_t ldx, int64_t m0,
             int64_t m1, float* y, int64_t ldy, int64_t n_total) {
  const int64_t gbytes = 16 * k * (T == DType::kF32 ? 4 : 2);
  const int64_t mc = token_chunk(k, 4);
  __m256 out[2 * kMaxTile];
  for (int64_t mb = m0; mb < m1; mb += mc) {
    const int64_t me = mb + mc < m1 ? mb + mc : m1;
    for (int64_t g = g0; g < g1; ++g) {
      const uint8_t* gp = packed + g * gbytes;
      for (int64_t t0 = mb; t0 < me; t0 += kMaxTile) {
        const int mt = static_cast<int>(me - t0 < kMaxTile ? me - t0 : kMaxTile);
        const float* xt = x + t0 * ldx;
        switch (mt) {
          case 1: float_tile<T, 1>(gp, k, xt, ldx, out); break;
          case 2: float_tile<T, 2>(gp, k, xt, ldx, out); break;
          case 3: float_tile<T, 3>(gp, k, xt, ldx, out); break;
          default: float_tile<T, 4>(gp, k, xt, ldx, out); break;
        }
        for (int t = 0; t < mt; ++t) {
          store_rows(y + (t0 + t) * ldy + 16 * g, out[2 * t], n_total - 16 * g);
          store_rows(y + (t0 + t) * ldy + 16 * g + 8, out[2 * t + 1], n_total - 16 * g - 8);
        }
      }
    }
  }
}

void fgemm_impl(DType t, const uint8_t* packed, int64_t k, int64_t g0, int64_t g1, const float* x, int64_t ldx,
                int64_t m0, int64_t m1, float* y, int64_t ldy, int64_t n_total) {
  switch (t) {
    case DType::kF32: fgemm_t<DType::kF32>(packed, k, g0, g1, x, ldx, m0, m1, y, ldy, n_total); break;
    case DType::kF16: fgemm_t<DType::kF16>(packed, k, g0, g1, x, ldx, m0, m1, y, ldy, n_total); break;
    case DType::kBF16: fgemm_t<DType::kBF16>(packed, k, g0, g1, x, ldx, m0, m1, y, ldy, n_total); break;
    default: __builtin_trap();
  }
}

}  // namespace

const KernelTable* kernel_table() {
  static const KernelTable t{IsaLevel::kAvx2, quantize_act_impl, qgemm_impl, fgemm_impl, true, kTile, nullptr, nullptr, nullptr};
  return &t;
}

}  // namespace pagoda::cpu::avx2

// AVX2 + F16C path of convert_float_row (float_convert.cc): 8 elements a step. f16 -> f32 by
// vcvtph2ps (exact, subnormals included; signalling NaNs keep their bits as in fp16_to_f32); f32 -> bf16 by the integer round-to-nearest-even of
// common/half.h's f32_to_bf16, NaNs made quiet the same way.
#include <immintrin.h>

#include <cstdint>

#include "common/dtype.h"

namespace pagoda::quant::avx2 {
namespace {

inline __m256 load8(DType t, const void* src, int64_t i) {
  if (t == DType::kF32) return _mm256_loadu_ps(static_cast<const float*>(src) + i);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(src) + i));
  if (t == DType::kF16) {
    // vcvtph2ps makes a signalling NaN quiet; fp16_to_f32 keeps its bits (sign | exp | man << 13).
    const __m256i x = _mm256_cvtepu16_epi32(h);
    const __m256i exp = _mm256_and_si256(x, _mm256_set1_epi32(0x7c00));
    const __m256i man = _mm256_and_si256(x, _mm256_set1_epi32(0x3ff));
    const __m256i nan = _mm256_andnot_si256(_mm256_cmpeq_epi32(man, _mm256_setzero_si256()),
                                            _mm256_cmpeq_epi32(exp, _mm256_set1_epi32(0x7c00)));
    const __m256i kept = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x8000)), 16),
                                         _mm256_or_si256(_mm256_set1_epi32(0x7f800000), _mm256_slli_epi32(man, 13)));
    return _mm256_castsi256_ps(_mm256_blendv_epi8(_mm256_castps_si256(_mm256_cvtph_ps(h)), kept, nan));
  }
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));  // bf16
}

// 8 f32 -> 8 bf16 (in the low 128 bits), exactly f32_to_bf16.
inline __m128i to_bf16(__m256 v) {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i abs = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));  // signed compare: abs < 2^31
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
  // Pack the 16-bit halves (values < 2^16): packus works per 128-bit lane, then fix the order.
  const __m256i packed = _mm256_packus_epi32(r, r);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

}  // namespace

bool convert_float_row(DType st, const void* src, DType dt, void* dst, int64_t n) {
  if (dt == DType::kF32) {
    auto* out = static_cast<float*>(dst);
    for (int64_t i = 0; i < n; i += 8) _mm256_storeu_ps(out + i, load8(st, src, i));
    return true;
  }
  if (dt != DType::kBF16) return false;
  auto* out = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), to_bf16(load8(st, src, i)));
  return true;
}

}  // namespace pagoda::quant::avx2

// The traits table of the weight and activation formats, and the row-conversion front end.
#include "quant/quant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "common/check.h"
#include "common/half.h"
#include "quant/formats.h"

namespace pagoda::quant {
namespace {

using namespace ref;

// kF8E4M3Rows: [f32 scale][n E4M3 codes]; w = scale * e4m3(code), the product in f32.
void dequantize_row_f8_rows(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  float s;
  std::memcpy(&s, p, 4);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp8_e4m3_to_f32(p[4 + i]) * s;
}
// scale = max|x| / 448, code = e4m3(x / scale) (nearest even, saturating); all zeros: scale 0.
void quantize_row_f8_rows(const float* src, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::abs(src[i]));
  const float s = amax / 448.0f;
  std::memcpy(p, &s, 4);
  for (int64_t i = 0; i < n; ++i) p[4 + i] = s != 0.0f ? f32_to_fp8_e4m3(src[i] / s) : 0;
}

constexpr std::array kOps = {
    QuantOps{DType::kF32, 1, 4, dequantize_row_f32, quantize_row_f32, DType::kF32, vec_dot_f32_f32},
    QuantOps{DType::kF16, 1, 2, dequantize_row_f16, quantize_row_f16, DType::kF32, vec_dot_f16_f32},
    QuantOps{DType::kBF16, 1, 2, dequantize_row_bf16, quantize_row_bf16, DType::kF32, vec_dot_bf16_f32},
    QuantOps{DType::kQ4_0, 32, 18, dequantize_row_q4_0, quantize_row_q4_0, DType::kQ8_0, vec_dot_q4_0_q8_0},
    QuantOps{DType::kQ4_1, 32, 20, dequantize_row_q4_1, quantize_row_q4_1, DType::kQ8_1, vec_dot_q4_1_q8_1},
    QuantOps{DType::kQ5_0, 32, 22, dequantize_row_q5_0, quantize_row_q5_0, DType::kQ8_0, vec_dot_q5_0_q8_0},
    QuantOps{DType::kQ5_1, 32, 24, dequantize_row_q5_1, quantize_row_q5_1, DType::kQ8_1, vec_dot_q5_1_q8_1},
    QuantOps{DType::kQ8_0, 32, 34, dequantize_row_q8_0, quantize_row_q8_0, DType::kQ8_0, vec_dot_q8_0_q8_0},
    QuantOps{DType::kQ8_1, 32, 36, dequantize_row_q8_1, quantize_row_q8_1, DType::kQ8_1, nullptr},
    QuantOps{DType::kQ4_K, 256, 144, dequantize_row_q4_k, quantize_row_q4_k, DType::kQ8_K, vec_dot_q4_k_q8_k},
    QuantOps{DType::kQ5_K, 256, 176, dequantize_row_q5_k, quantize_row_q5_k, DType::kQ8_K, vec_dot_q5_k_q8_k},
    QuantOps{DType::kQ6_K, 256, 210, dequantize_row_q6_k, quantize_row_q6_k, DType::kQ8_K, vec_dot_q6_k_q8_k},
    QuantOps{DType::kQ2_K, 256, 84, dequantize_row_q2_k, quantize_row_q2_k, DType::kQ8_K, vec_dot_q2_k_q8_k},
    QuantOps{DType::kQ3_K, 256, 110, dequantize_row_q3_k, quantize_row_q3_k, DType::kQ8_K, vec_dot_q3_k_q8_k},
    QuantOps{DType::kIQ4_NL, 32, 18, dequantize_row_iq4_nl, quantize_row_iq4_nl, DType::kQ8_0, vec_dot_iq4_nl_q8_0},
    QuantOps{DType::kIQ4_XS, 256, 136, dequantize_row_iq4_xs, quantize_row_iq4_xs, DType::kQ8_K, vec_dot_iq4_xs_q8_k},
    QuantOps{DType::kTQ1_0, 256, 54, dequantize_row_tq1_0, quantize_row_tq1_0, DType::kQ8_K, vec_dot_tq1_0_q8_k},
    QuantOps{DType::kTQ2_0, 256, 66, dequantize_row_tq2_0, quantize_row_tq2_0, DType::kQ8_K, vec_dot_tq2_0_q8_k},
    QuantOps{DType::kQ8_K, 256, 292, dequantize_row_q8_k, quantize_row_q8_k, DType::kQ8_K, nullptr},
    // No CPU dot product: the CPU backend runs these weights as bf16 (model_loader.h).
    QuantOps{DType::kF8E4M3Rows, 1, 1, dequantize_row_f8_rows, quantize_row_f8_rows, DType::kF32, nullptr},
};

}  // namespace

const QuantOps* quant_ops(DType t) {
  for (const auto& o : kOps)
    if (o.dtype == t) return &o;
  return nullptr;
}

static const QuantOps& ops_or_die(DType t, int64_t n) {
  const QuantOps* o = quant_ops(t);
  PAGODA_CHECK(o != nullptr, "no conversions for dtype {}", dtype_name(t));
  PAGODA_CHECK(n % o->block_size == 0, "row of {} elements is not a multiple of {}'s block size {}", n,
               dtype_name(t), o->block_size);
  PAGODA_CHECK(o->block_bytes == dtype_traits(t).block_bytes, "traits disagree on {}", dtype_name(t));
  return *o;
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) { ops_or_die(t, n).to_float(src, dst, n); }
void quantize_row(DType t, const float* src, void* dst, int64_t n) { ops_or_die(t, n).from_float(src, dst, n); }

float vec_dot(DType t, const void* w, const void* a, int64_t n) {
  const QuantOps& o = ops_or_die(t, n);
  PAGODA_CHECK(o.vec_dot != nullptr, "{} is not a weight format", dtype_name(t));
  return o.vec_dot(w, a, n);
}

}  // namespace pagoda::quant

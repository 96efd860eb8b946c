// Per-format reference functions (internal to quant/; use quant.h's table). Rows are n elements,
// n a multiple of the block size.
#pragma once

#include <cstdint>

namespace pagoda::quant::ref {

#define PAGODA_QUANT_FORMAT(name)                                 \
  void dequantize_row_##name(const void* src, float* dst, int64_t n); \
  void quantize_row_##name(const float* src, void* dst, int64_t n);

PAGODA_QUANT_FORMAT(f32)
PAGODA_QUANT_FORMAT(f16)
PAGODA_QUANT_FORMAT(bf16)
PAGODA_QUANT_FORMAT(q4_0)
PAGODA_QUANT_FORMAT(q4_1)
PAGODA_QUANT_FORMAT(q5_0)
PAGODA_QUANT_FORMAT(q5_1)
PAGODA_QUANT_FORMAT(q8_0)
PAGODA_QUANT_FORMAT(q8_1)
PAGODA_QUANT_FORMAT(q4_k)
PAGODA_QUANT_FORMAT(q5_k)
PAGODA_QUANT_FORMAT(q6_k)
PAGODA_QUANT_FORMAT(q8_k)
PAGODA_QUANT_FORMAT(q2_k)
PAGODA_QUANT_FORMAT(q3_k)
PAGODA_QUANT_FORMAT(iq4_nl)
PAGODA_QUANT_FORMAT(iq4_xs)
PAGODA_QUANT_FORMAT(tq1_0)
PAGODA_QUANT_FORMAT(tq2_0)
#undef PAGODA_QUANT_FORMAT

// Weight row . activation row (the activation in the partner format).
float vec_dot_f32_f32(const void* w, const void* a, int64_t n);
float vec_dot_f16_f32(const void* w, const void* a, int64_t n);
float vec_dot_bf16_f32(const void* w, const void* a, int64_t n);
float vec_dot_q4_0_q8_0(const void* w, const void* a, int64_t n);
float vec_dot_q4_1_q8_1(const void* w, const void* a, int64_t n);
float vec_dot_q5_0_q8_0(const void* w, const void* a, int64_t n);
float vec_dot_q5_1_q8_1(const void* w, const void* a, int64_t n);
float vec_dot_q8_0_q8_0(const void* w, const void* a, int64_t n);
float vec_dot_q4_k_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_q5_k_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_q6_k_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_q2_k_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_q3_k_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_iq4_xs_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_tq1_0_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_tq2_0_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_iq4_nl_q8_0(const void* w, const void* a, int64_t n);

}  // namespace pagoda::quant::ref

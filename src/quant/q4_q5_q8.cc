// Reference (scalar) conversions and dot products of the legacy 32-element block formats:
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the activation format Q8_1. Quantizers reproduce ggml's
// round-to-nearest *_ref rules bit for bit (truncating casts, fp16 scale rounding), so the gguf
// Python package quantizes identical bytes; the tests check that.
#include <cmath>
#include <cstring>

#include "common/half.h"
#include "quant/blocks.h"
#include "quant/formats.h"

namespace pagoda::quant::ref {
namespace {

// Element j of a 4-bit nibble array laid out as ggml's legacy blocks.
inline int nibble(const uint8_t* qs, int j) { return j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4); }
inline int high_bit(const uint8_t* qh, int j) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return (h >> j) & 1;
}

void absmax_signed(const float* x, int n, float* amax, float* max) {
  *amax = 0;
  *max = 0;
  for (int j = 0; j < n; ++j) {
    if (*amax < std::fabs(x[j])) {
      *amax = std::fabs(x[j]);
      *max = x[j];
    }
  }
}
void min_max(const float* x, int n, float* mn, float* mx) {
  *mn = INFINITY;
  *mx = -INFINITY;
  for (int j = 0; j < n; ++j) {
    if (x[j] < *mn) *mn = x[j];
    if (x[j] > *mx) *mx = x[j];
  }
}

}  // namespace

// ---- Q4_0 ----
void dequantize_row_q4_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < kQK; ++j) dst[i * kQK + j] = d * static_cast<float>(nibble(b[i].qs, j) - 8);
  }
}
void quantize_row_q4_0(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    float amax, max;
    absmax_signed(x, kQK, &amax, &max);
    const float d = max / -8;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    b[i].d = f32_to_fp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      int q0 = static_cast<int8_t>(x[j] * id + 8.5f);
      int q1 = static_cast<int8_t>(x[j + 16] * id + 8.5f);
      q0 = q0 > 15 ? 15 : q0;
      q1 = q1 > 15 ? 15 : q1;
      b[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// ---- Q4_1 ----
void dequantize_row_q4_1(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_f32(b[i].d), m = fp16_to_f32(b[i].m);
    for (int j = 0; j < kQK; ++j) dst[i * kQK + j] = d * static_cast<float>(nibble(b[i].qs, j)) + m;
  }
}
void quantize_row_q4_1(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ4_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    float mn, mx;
    min_max(x, kQK, &mn, &mx);
    const float d = (mx - mn) / 15;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    b[i].d = f32_to_fp16(d);
    b[i].m = f32_to_fp16(mn);
    for (int j = 0; j < kQK / 2; ++j) {
      int q0 = static_cast<int8_t>((x[j] - mn) * id + 0.5f);
      int q1 = static_cast<int8_t>((x[j + 16] - mn) * id + 0.5f);
      q0 = q0 > 15 ? 15 : q0;
      q1 = q1 > 15 ? 15 : q1;
      b[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// ---- Q5_0 ----
void dequantize_row_q5_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < kQK; ++j) {
      const int q = nibble(b[i].qs, j) | (high_bit(b[i].qh, j) << 4);
      dst[i * kQK + j] = d * static_cast<float>(q - 16);
    }
  }
}
void quantize_row_q5_0(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ5_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    float amax, max;
    absmax_signed(x, kQK, &amax, &max);
    const float d = max / -16;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    b[i].d = f32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      int q0 = static_cast<int8_t>(x[j] * id + 16.5f);
      int q1 = static_cast<int8_t>(x[j + 16] * id + 16.5f);
      q0 = q0 > 31 ? 31 : q0;
      q1 = q1 > 31 ? 31 : q1;
      b[i].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
    }
    std::memcpy(b[i].qh, &qh, 4);
  }
}

// ---- Q5_1 ----
void dequantize_row_q5_1(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_f32(b[i].d), m = fp16_to_f32(b[i].m);
    for (int j = 0; j < kQK; ++j) {
      const int q = nibble(b[i].qs, j) | (high_bit(b[i].qh, j) << 4);
      dst[i * kQK + j] = d * static_cast<float>(q) + m;
    }
  }
}
void quantize_row_q5_1(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ5_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    float mn, mx;
    min_max(x, kQK, &mn, &mx);
    const float d = (mx - mn) / 31;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    b[i].d = f32_to_fp16(d);
    b[i].m = f32_to_fp16(mn);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = static_cast<uint8_t>((x[j] - mn) * id + 0.5f);
      const int q1 = static_cast<uint8_t>((x[j + 16] - mn) * id + 0.5f);
      b[i].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
    }
    std::memcpy(b[i].qh, &qh, 4);
  }
}

// ---- Q8_0 / Q8_1 ----
void dequantize_row_q8_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < kQK; ++j) dst[i * kQK + j] = d * static_cast<float>(b[i].qs[j]);
  }
}
void quantize_row_q8_0(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    float amax, max;
    absmax_signed(x, kQK, &amax, &max);
    const float d = amax / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    b[i].d = f32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) b[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}
void dequantize_row_q8_1(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < kQK; ++j) dst[i * kQK + j] = d * static_cast<float>(b[i].qs[j]);
  }
}
void quantize_row_q8_1(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    float amax, max;
    absmax_signed(x, kQK, &amax, &max);
    const float d = amax / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    b[i].d = f32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      b[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
      sum += b[i].qs[j];
    }
    b[i].s = f32_to_fp16(static_cast<float>(sum) * d);
  }
}

// ---- dot products (integer within a block, one float multiply per block) ----
float vec_dot_q4_0_q8_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += (nibble(x[i].qs, j) - 8) * y[i].qs[j];
    sum += static_cast<float>(sumi) * fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d);
  }
  return sum;
}
float vec_dot_q4_1_q8_1(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += nibble(x[i].qs, j) * y[i].qs[j];
    sum += static_cast<float>(sumi) * fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d) +
           fp16_to_f32(x[i].m) * fp16_to_f32(y[i].s);
  }
  return sum;
}
float vec_dot_q5_0_q8_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += ((nibble(x[i].qs, j) | (high_bit(x[i].qh, j) << 4)) - 16) * y[i].qs[j];
    sum += static_cast<float>(sumi) * fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d);
  }
  return sum;
}
float vec_dot_q5_1_q8_1(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += (nibble(x[i].qs, j) | (high_bit(x[i].qh, j) << 4)) * y[i].qs[j];
    sum += static_cast<float>(sumi) * fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d) +
           fp16_to_f32(x[i].m) * fp16_to_f32(y[i].s);
  }
  return sum;
}
float vec_dot_q8_0_q8_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += x[i].qs[j] * y[i].qs[j];
    sum += static_cast<float>(sumi) * fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d);
  }
  return sum;
}

}  // namespace pagoda::quant::ref

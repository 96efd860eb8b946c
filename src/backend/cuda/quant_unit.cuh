// The GGUF block formats as the CUDA kernels decode them (quant_matmul.cu's dense matmuls and
// moe_quant.cu's grouped expert matmuls read one description).
//
// Unit u of a weight row (its 32 elements 32u .. 32u + 31) decodes to eight packed words of signed
// int8 codes q (elements 4i .. 4i + 3 in word i, in order) with w = sa * q + mn for the first 16
// elements and sb * q + mn for the last 16 (sa == sb except Q6_K, whose 16-element sub-blocks have
// their own scales). Rows are in the device layout (quant_layout.h: planar, 16-byte aligned), so a
// unit's codes are one or two aligned 16-byte loads in every format.
#pragma once

#include <cuda_fp16.h>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/mma_utils.cuh"
#include "common/dtype.h"

namespace pagoda::cuda {

struct Unit {
  int32_t q[8];       // signed int8 codes, 4 a word, element order
  float sa, sb, mn;   // w = (first 16 ? sa : sb) * q + mn
};

__device__ __forceinline__ float ld_half(const uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(p)));
}
__device__ __forceinline__ uint32_t ld32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ uint4 ld128(const uint8_t* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ uint32_t word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }
__device__ __forceinline__ float half_lo(uint32_t w) { return __half2float(__ushort_as_half(static_cast<uint16_t>(w & 0xFFFF))); }
__device__ __forceinline__ float half_hi(uint32_t w) { return __half2float(__ushort_as_half(static_cast<uint16_t>(w >> 16))); }
// Bits 0..3 of t to bit 0 of bytes 0..3 (no carries: the partial products do not overlap).
__device__ __forceinline__ uint32_t spread4(uint32_t t) { return (t * 0x00204081u) & 0x01010101u; }

template <DType F>
struct Format;

// Q4_K / Q5_K sub-block j's 6-bit scale and min (quant/blocks.h get_scale_min_k4) from the 12
// scale bytes (words y, z, w of the super-block's first 16 bytes).
__device__ __forceinline__ void scale_min_k4(int j, const uint4& head, float d, float dmin, float* s, float* mn) {
  const uint32_t w0 = head.y, w1 = head.z, w2 = head.w;
  auto byte = [&](int i) -> uint32_t {
    const uint32_t w = i < 4 ? w0 : (i < 8 ? w1 : w2);
    return (w >> (8 * (i & 3))) & 0xFF;
  };
  uint32_t sc, m;
  if (j < 4) {
    sc = byte(j) & 63;
    m = byte(j + 4) & 63;
  } else {
    sc = (byte(j + 4) & 0xF) | ((byte(j - 4) >> 6) << 4);
    m = (byte(j + 4) >> 4) | ((byte(j) >> 6) << 4);
  }
  *s = d * static_cast<float>(sc);
  *mn = -(dmin * static_cast<float>(m));
}

// Unit u = sub-block j = u % 8 of super-block u / 8: x = d * sc[j] * q - dmin * m[j]; q the low
// (j even) or high nibble of qs[32 (j / 2) + l].
template <>
struct Format<DType::kQ4_K> {
  static constexpr int kBytes = 144;
  __device__ static Unit decode(const uint8_t* row, int u, int /*units*/) {
    const uint8_t* b = row + (u >> 3) * kBytes;
    const int j = u & 7;
    Unit r;
    const uint4 head = ld128(b);  // d, dmin, scales[12]
    scale_min_k4(j, head, half_lo(head.x), half_hi(head.x), &r.sa, &r.mn);
    r.sb = r.sa;
    const uint8_t* qs = b + 16 + 32 * (j >> 1);
    const uint4 v0 = ld128(qs), v1 = ld128(qs + 16);
    const int shift = 4 * (j & 1);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      r.q[i] = static_cast<int32_t>((word(v0, i) >> shift) & 0x0F0F0F0Fu);
      r.q[4 + i] = static_cast<int32_t>((word(v1, i) >> shift) & 0x0F0F0F0Fu);
    }
    return r;
  }
};
// As Q4_K with bit j of qh[l] as the 5th bit of element l of sub-block j.
template <>
struct Format<DType::kQ5_K> {
  static constexpr int kBytes = 176;
  __device__ static Unit decode(const uint8_t* row, int u, int /*units*/) {
    const uint8_t* b = row + (u >> 3) * kBytes;
    const int j = u & 7;
    Unit r;
    const uint4 head = ld128(b);  // d, dmin, scales[12]
    scale_min_k4(j, head, half_lo(head.x), half_hi(head.x), &r.sa, &r.mn);
    r.sb = r.sa;
    const uint4 h0 = ld128(b + 16), h1 = ld128(b + 32);
    const uint8_t* qs = b + 48 + 32 * (j >> 1);
    const uint4 v0 = ld128(qs), v1 = ld128(qs + 16);
    const int shift = 4 * (j & 1);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      r.q[i] = static_cast<int32_t>(((word(v0, i) >> shift) & 0x0F0F0F0Fu) | (((word(h0, i) >> j) & 0x01010101u) << 4));
      r.q[4 + i] = static_cast<int32_t>(((word(v1, i) >> shift) & 0x0F0F0F0Fu) | (((word(h1, i) >> j) & 0x01010101u) << 4));
    }
    return r;
  }
};

// ---- planar rows (quant_layout.h): codes first, then the other fields, plane by plane -------

// x = d * (q - 8); q: nibbles, element j < 16 low of byte j, j >= 16 high of byte j - 16.
template <>
struct Format<DType::kQ4_0> {
  __device__ static Unit decode(const uint8_t* row, int u, int units) {
    const uint4 v = ld128(row + 16 * u);
    Unit r;
    r.sa = r.sb = ld_half(row + 16 * units + 2 * u);
    r.mn = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      r.q[i] = static_cast<int32_t>(__vsub4(word(v, i) & 0x0F0F0F0Fu, 0x08080808u));
      r.q[4 + i] = static_cast<int32_t>(__vsub4((word(v, i) >> 4) & 0x0F0F0F0Fu, 0x08080808u));
    }
    return r;
  }
};
// x = d * q + m.
template <>
struct Format<DType::kQ4_1> {
  __device__ static Unit decode(const uint8_t* row, int u, int units) {
    const uint4 v = ld128(row + 16 * u);
    const uint32_t dm = ld32(row + 16 * units + 4 * u);
    Unit r;
    r.sa = r.sb = half_lo(dm);
    r.mn = half_hi(dm);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      r.q[i] = static_cast<int32_t>(word(v, i) & 0x0F0F0F0Fu);
      r.q[4 + i] = static_cast<int32_t>((word(v, i) >> 4) & 0x0F0F0F0Fu);
    }
    return r;
  }
};
// x = d * (q - 16); q = nibble (as Q4_0) | bit j of qh << 4.
template <>
struct Format<DType::kQ5_0> {
  __device__ static Unit decode(const uint8_t* row, int u, int units) {
    const uint4 v = ld128(row + 16 * u);
    const uint32_t qh = ld32(row + 16 * units + 4 * u);
    Unit r;
    r.sa = r.sb = ld_half(row + 20 * units + 2 * u);
    r.mn = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t lo = (word(v, i) & 0x0F0F0F0Fu) | (spread4((qh >> (4 * i)) & 0xF) << 4);
      const uint32_t hi = ((word(v, i) >> 4) & 0x0F0F0F0Fu) | (spread4((qh >> (16 + 4 * i)) & 0xF) << 4);
      r.q[i] = static_cast<int32_t>(__vsub4(lo, 0x10101010u));
      r.q[4 + i] = static_cast<int32_t>(__vsub4(hi, 0x10101010u));
    }
    return r;
  }
};
// x = d * q + m; q as Q5_0 (unsigned).
template <>
struct Format<DType::kQ5_1> {
  __device__ static Unit decode(const uint8_t* row, int u, int units) {
    const uint4 v = ld128(row + 16 * u);
    const uint32_t qh = ld32(row + 16 * units + 4 * u);
    const uint32_t dm = ld32(row + 20 * units + 4 * u);
    Unit r;
    r.sa = r.sb = half_lo(dm);
    r.mn = half_hi(dm);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      r.q[i] = static_cast<int32_t>((word(v, i) & 0x0F0F0F0Fu) | (spread4((qh >> (4 * i)) & 0xF) << 4));
      r.q[4 + i] = static_cast<int32_t>(((word(v, i) >> 4) & 0x0F0F0F0Fu) | (spread4((qh >> (16 + 4 * i)) & 0xF) << 4));
    }
    return r;
  }
};
// x = d * q, q int8.
template <>
struct Format<DType::kQ8_0> {
  __device__ static Unit decode(const uint8_t* row, int u, int units) {
    const uint4 v0 = ld128(row + 32 * u), v1 = ld128(row + 32 * u + 16);
    Unit r;
    r.sa = r.sb = ld_half(row + 32 * units + 2 * u);
    r.mn = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      r.q[i] = static_cast<int32_t>(word(v0, i));
      r.q[4 + i] = static_cast<int32_t>(word(v1, i));
    }
    return r;
  }
};
// Unit u: half h = (u % 8) / 4 of super-block u / 8, quarter c = u % 4: element 128h + 32c + l has
// the nibble c / 2 of ql[64h + 32 (c % 2) + l] and bits 2c, 2c + 1 of qh[32h + l] as its 6 bits,
// q - 32, scale scales[8h + 2c + l / 16] (quant/blocks.h BlockQ6_K); the 208-byte super-blocks
// (ql, qh, scales) first, d in a plane after them.
template <>
struct Format<DType::kQ6_K> {
  __device__ static Unit decode(const uint8_t* row, int u, int units) {
    const uint8_t* b = row + (u >> 3) * 208;
    const int h = (u >> 2) & 1, c = u & 3;
    const uint8_t* ql = b + 64 * h + 32 * (c & 1);
    const uint8_t* qh = b + 128 + 32 * h;
    const uint4 l0 = ld128(ql), l1 = ld128(ql + 16), h0 = ld128(qh), h1 = ld128(qh + 16);
    const uint32_t sc = *reinterpret_cast<const uint16_t*>(b + 192 + 8 * h + 2 * c);
    const float d = ld_half(row + 208 * (units >> 3) + 2 * (u >> 3));
    Unit r;
    r.sa = d * static_cast<float>(static_cast<int8_t>(sc & 0xFF));
    r.sb = d * static_cast<float>(static_cast<int8_t>(sc >> 8));
    r.mn = 0.0f;
    const int ls = 4 * (c >> 1), hs = 2 * c;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t a = ((word(l0, i) >> ls) & 0x0F0F0F0Fu) | (((word(h0, i) >> hs) & 0x03030303u) << 4);
      const uint32_t e = ((word(l1, i) >> ls) & 0x0F0F0F0Fu) | (((word(h1, i) >> hs) & 0x03030303u) << 4);
      r.q[i] = static_cast<int32_t>(__vsub4(a, 0x20202020u));
      r.q[4 + i] = static_cast<int32_t>(__vsub4(e, 0x20202020u));
    }
    return r;
  }
};

// Elements 4j .. 4j + 3 of a decoded unit as two bf16 pairs (the lower element in the low half).
__device__ __forceinline__ void unit_quad_bf16(const Unit& u, int j, uint32_t& lo, uint32_t& hi) {
  const float s = j < 4 ? u.sa : u.sb;
  const uint32_t q = static_cast<uint32_t>(u.q[j]);
  const float w0 = s * static_cast<float>(static_cast<int8_t>(q & 0xFF)) + u.mn;
  const float w1 = s * static_cast<float>(static_cast<int8_t>((q >> 8) & 0xFF)) + u.mn;
  const float w2 = s * static_cast<float>(static_cast<int8_t>((q >> 16) & 0xFF)) + u.mn;
  const float w3 = s * static_cast<float>(static_cast<int8_t>(q >> 24)) + u.mn;
  lo = pack2(w0, w1, bf16{});
  hi = pack2(w2, w3, bf16{});
}

// x . w over unit u: the activations' 32 int8 codes (two 16-byte words) with their (d, d * sum q)
// pair (quantize_activations_q8), eight dp4a: dx * (sa * S_first + sb * S_last) + mn * s.
__device__ __forceinline__ float unit_dot_q8(const Unit& w, const int4& x0, const int4& x1, const float2& xd) {
  const int xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
  int s0 = 0, s1 = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    s0 = __dp4a(w.q[i], xs[i], s0);
    s1 = __dp4a(w.q[4 + i], xs[4 + i], s1);
  }
  return xd.x * (w.sa * static_cast<float>(s0) + w.sb * static_cast<float>(s1)) + w.mn * xd.y;
}

// fn(Format<F>{}) for a format with a decoder; false (fn not called) for any other.
template <class Fn>
bool dispatch_format(DType f, Fn&& fn) {
  switch (f) {
    case DType::kQ4_0: fn(Format<DType::kQ4_0>{}); return true;
    case DType::kQ4_1: fn(Format<DType::kQ4_1>{}); return true;
    case DType::kQ5_0: fn(Format<DType::kQ5_0>{}); return true;
    case DType::kQ5_1: fn(Format<DType::kQ5_1>{}); return true;
    case DType::kQ8_0: fn(Format<DType::kQ8_0>{}); return true;
    case DType::kQ4_K: fn(Format<DType::kQ4_K>{}); return true;
    case DType::kQ5_K: fn(Format<DType::kQ5_K>{}); return true;
    case DType::kQ6_K: fn(Format<DType::kQ6_K>{}); return true;
    default: return false;
  }
}

}  // namespace pagoda::cuda

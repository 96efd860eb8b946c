// Block layouts of the quantized formats, byte-for-byte as GGUF/ggml stores them.
//
// Every struct is trivially copyable and packed to its GGUF size (static_asserts below); a row of
// n elements in format T is n / T::kBlockSize consecutive blocks. fp16 fields are raw IEEE half
// bits (common/half.h converts). Decoding rules are in the comment of each struct; the scalar
// reference implementations (q4_q5_q8.cc, k_quants.cc) follow them literally.
#pragma once

#include <cstdint>

namespace pagoda::quant {

constexpr int kQK = 32;    // block size of the legacy formats
constexpr int kQKK = 256;  // super-block size of the k-quants
constexpr int kKScaleSize = 12;

// x[j] = d * (q[j] - 8); q[j] = qs[j] & 15 for j < 16, qs[j-16] >> 4 for j >= 16.
struct BlockQ4_0 {
  static constexpr int kBlockSize = kQK;
  uint16_t d;
  uint8_t qs[kQK / 2];
};
// x[j] = d * q[j] + m; nibbles as Q4_0.
struct BlockQ4_1 {
  static constexpr int kBlockSize = kQK;
  uint16_t d, m;
  uint8_t qs[kQK / 2];
};
// x[j] = d * (q[j] - 16); q[j] = nibble (as Q4_0) | bit j of qh (little-endian u32) << 4.
struct BlockQ5_0 {
  static constexpr int kBlockSize = kQK;
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// x[j] = d * q[j] + m; q[j] as Q5_0.
struct BlockQ5_1 {
  static constexpr int kBlockSize = kQK;
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// x[j] = d * qs[j].
struct BlockQ8_0 {
  static constexpr int kBlockSize = kQK;
  uint16_t d;
  int8_t qs[kQK];
};
// Activation partner of Q4_1/Q5_1: x[j] = d * qs[j]; s = d * sum(qs) (fp16).
struct BlockQ8_1 {
  static constexpr int kBlockSize = kQK;
  uint16_t d, s;
  int8_t qs[kQK];
};

// 8 sub-blocks of 32. Sub-block j: x = d * sc[j] * q - dmin * m[j], q = 4-bit, sc/m 6-bit packed in
// `scales` (see get_scale_min_k4). q of sub-block 2i is the low nibble of qs[32i + l], of 2i+1 the
// high nibble.
struct BlockQ4_K {
  static constexpr int kBlockSize = kQKK;
  uint16_t d, dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qs[kQKK / 2];
};
// As Q4_K with a 5th bit: bit j of qh[l] is the high bit of element l of sub-block j.
struct BlockQ5_K {
  static constexpr int kBlockSize = kQKK;
  uint16_t d, dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
// 16 sub-blocks of 16: x = d * scales[s] * (q - 32), q 6-bit: for each half h (128 elements;
// ql += 64h, qh += 32h), l < 32: elements l, l+32, l+64, l+96 take the low nibble of ql[l], low of
// ql[l+32], high of ql[l], high of ql[l+32] and bits (0,1), (2,3), (4,5), (6,7) of qh[l].
struct BlockQ6_K {
  static constexpr int kBlockSize = kQKK;
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
// Activation partner of the k-quants: x[j] = d * qs[j] (d is f32); bsums[i] = sum of qs[16i..16i+15].
struct BlockQ8_K {
  static constexpr int kBlockSize = kQKK;
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};

// 16 sub-blocks of 16: x = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4), q 2-bit: element
// 128h + 32j + l (h < 2, j < 4, l < 32) is bits 2j, 2j+1 of qs[32h + l].
struct BlockQ2_K {
  static constexpr int kBlockSize = kQKK;
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d, dmin;
};
// 16 sub-blocks of 16: x = d * (sc[s] - 32) * q, q = low2 - (hmask bit ? 0 : 4) in [-4, 3]; low2 of
// element 128h + 32j + l is bits 2j, 2j+1 of qs[32h + l], its hmask bit is bit j' of hmask[l] with
// element = 32j' + l. sc[s] 6-bit: low nibble of scales[s] (s < 8) or high nibble of scales[s - 8],
// high 2 bits at bits 2(s / 4) of scales[8 + s % 4].
struct BlockQ3_K {
  static constexpr int kBlockSize = kQKK;
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  uint16_t d;
};
// x[j] = d * kIq4nlValues[q[j]], nibbles as Q4_0.
struct BlockIQ4_NL {
  static constexpr int kBlockSize = kQK;
  uint16_t d;
  uint8_t qs[kQK / 2];
};
// 8 sub-blocks of 32: x = d * (ls[j] - 32) * kIq4nlValues[q], ls 6-bit: nibble j % 2 of
// scales_l[j / 2] | bits 2j, 2j+1 of scales_h << 4; sub-block j's nibbles in qs[16j ..] as Q4_0.
struct BlockIQ4_XS {
  static constexpr int kBlockSize = kQKK;
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQKK / 64];
  uint8_t qs[kQKK / 2];
};
// Ternary, x = d * (q - 1), q in {0, 1, 2}: element 128h + 32j + l is bits 2j, 2j+1 of qs[32h + l].
struct BlockTQ2_0 {
  static constexpr int kBlockSize = kQKK;
  uint8_t qs[kQKK / 4];
  uint16_t d;
};
// Ternary, x = d * (q - 1), five base-3 digits per byte stored as ceil(v * 256 / 243): digit k of
// byte b is ((uint8_t)(b * 3^k) * 3) >> 8. Elements 32k + l: digit k of qs[l] (l < 32); 160 + 16k + l:
// digit k of qs[32 + l] (l < 16); 240 + 4k + l: digit k (k < 4) of qh[l].
struct BlockTQ1_0 {
  static constexpr int kBlockSize = kQKK;
  uint8_t qs[(kQKK - 4 * kQKK / 64) / 5];
  uint8_t qh[kQKK / 64];
  uint16_t d;
};

// The 16 non-uniform levels of IQ4_NL / IQ4_XS (GGUF format constant).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockTQ2_0) == 66);
static_assert(sizeof(BlockTQ1_0) == 54);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

// Sub-block j (0..7) 6-bit scale and min of a Q4_K/Q5_K `scales` array.
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace pagoda::quant

// Weight repacking for the CPU kernels (layouts documented in kernels.h). Runs once per weight at
// load time; plain scalar code (the 16-bit float layout with SSE2 transposes), parallelism is the
// loader's business.
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "backend/cpu/kernels.h"
#include "common/check.h"
#include "common/half.h"
#include "quant/blocks.h"
#include "quant/codes.h"

namespace pagoda::cpu {
namespace {

using namespace quant;

bool has_min(DType t) { return t == DType::kQ4_1 || t == DType::kQ5_1; }
bool has_qh(DType t) { return t == DType::kQ5_0 || t == DType::kQ5_1; }

// Per-row accessors of one GGUF block of a legacy format.
struct LegacyBlock {
  uint16_t d = 0, m = 0;
  const uint8_t* qs = nullptr;  // 16 bytes of nibbles, or 32 int8 for q8_0 / iq4_nl
  uint32_t qh = 0;
  int8_t levels[32];            // iq4_nl: qs points here
};

LegacyBlock read_block(DType t, const uint8_t* p) {
  LegacyBlock b;
  b.qs = reinterpret_cast<const uint8_t*>(b.levels);
  switch (t) {
    case DType::kQ4_0: {
      auto* q = reinterpret_cast<const BlockQ4_0*>(p);
      b.d = q->d;
      b.qs = q->qs;
      break;
    }
    case DType::kQ4_1: {
      auto* q = reinterpret_cast<const BlockQ4_1*>(p);
      b.d = q->d;
      b.m = q->m;
      b.qs = q->qs;
      break;
    }
    case DType::kQ5_0: {
      auto* q = reinterpret_cast<const BlockQ5_0*>(p);
      b.d = q->d;
      b.qs = q->qs;
      std::memcpy(&b.qh, q->qh, 4);
      break;
    }
    case DType::kQ5_1: {
      auto* q = reinterpret_cast<const BlockQ5_1*>(p);
      b.d = q->d;
      b.m = q->m;
      b.qs = q->qs;
      std::memcpy(&b.qh, q->qh, 4);
      break;
    }
    case DType::kQ8_0: {
      auto* q = reinterpret_cast<const BlockQ8_0*>(p);
      b.d = q->d;
      b.qs = reinterpret_cast<const uint8_t*>(q->qs);
      break;
    }
    case DType::kIQ4_NL: decode_iq4_nl(p, b.levels, &b.d); break;
    default: PAGODA_CHECK(false, "not a qint format: {}", dtype_name(t));
  }
  return b;
}

// t: the source format (its kernel dtype kt: a legacy format).
void pack_qint(DType t, const uint8_t* w, int64_t n, int64_t k, uint8_t* dst) {
  const DType kt = kernel_dtype(t);
  const int64_t nb = k / kQBlock, groups = (n + kGroupRows - 1) / kGroupRows;
  const int64_t rec = qint_record_bytes(kt), bb = dtype_traits(t).block_bytes, rb = k / dtype_traits(t).block_size * bb;
  std::memset(dst, 0, groups * nb * rec);
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* r = dst + (g * nb + b) * rec;
      auto* d = reinterpret_cast<uint16_t*>(r);
      uint16_t* m = has_min(kt) ? d + 16 : nullptr;
      uint8_t* codes = r + (has_min(kt) ? 64 : 32);
      uint8_t* qh = codes + 256;
      for (int64_t row = 0; row < kGroupRows; ++row) {
        const int64_t src_row = g * kGroupRows + row;
        if (src_row >= n) break;
        const LegacyBlock blk = read_block(t, w + src_row * rb + b * bb);
        d[row] = blk.d;
        if (m) m[row] = blk.m;
        if (kt == DType::kQ8_0) {
          for (int v = 0; v < 8; ++v)
            for (int i = 0; i < 4; ++i) codes[64 * v + 4 * row + i] = blk.qs[4 * v + i] ^ 0x80;
        } else {
          for (int c = 0; c < 4; ++c) std::memcpy(codes + 64 * c + 4 * row, blk.qs + 4 * c, 4);
        }
        if (has_qh(kt)) {
          for (int v = 0; v < 8; ++v) {
            uint64_t mask;
            std::memcpy(&mask, qh + 8 * v, 8);
            for (int i = 0; i < 4; ++i) mask |= static_cast<uint64_t>((blk.qh >> (4 * v + i)) & 1) << (4 * row + i);
            std::memcpy(qh + 8 * v, &mask, 8);
          }
        }
      }
    }
  }
}

// iq4_xs: the q8 record with f32 scales d * (ls - 32), one record per 32-element sub-block.
void pack_iq4_xs(const uint8_t* w, int64_t n, int64_t k, uint8_t* dst) {
  const int64_t ns = k / 256, nb = k / kQBlock, groups = (n + kGroupRows - 1) / kGroupRows;
  const int64_t rec = qint_record_bytes(DType::kIQ4_XS), bb = dtype_traits(DType::kIQ4_XS).block_bytes;
  std::memset(dst, 0, groups * nb * rec);
  SuperBlockCodes c;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t row = 0; row < kGroupRows && g * kGroupRows + row < n; ++row)
      for (int64_t s = 0; s < ns; ++s) {
        decode_superblock(DType::kIQ4_XS, w + (g * kGroupRows + row) * ns * bb + s * bb, &c);
        for (int j = 0; j < 8; ++j) {
          uint8_t* r = dst + (g * nb + 8 * s + j) * rec;
          const float d = c.d * static_cast<float>(c.sc[2 * j]);
          std::memcpy(r + 4 * row, &d, 4);
          uint8_t* codes = r + 64;
          for (int v = 0; v < 8; ++v)
            for (int i = 0; i < 4; ++i)
              codes[64 * v + 4 * row + i] = static_cast<uint8_t>(c.q[32 * j + 4 * v + i]) ^ 0x80;
        }
      }
}

// Per row and super-block: codes[256] and sub-block scales of a k-quant block, in the kernel
// dtype's terms (q3_k: codes q + 4; tq: codes q + 1).
struct KBlock {
  float d = 0, dmin = 0;
  uint8_t codes[256];
  uint8_t sc[8], m[8];  // q4_k/q5_k per 32
  int8_t sc16[16];      // q6_k, q2_k per 16
  int8_t m16[16];       // q2_k per 16
};

KBlock read_k_block(DType t, const uint8_t* p) {
  KBlock k;
  if (has_superblock_codes(t)) {
    SuperBlockCodes c;
    decode_superblock(t, p, &c);
    const bool tq = t == DType::kTQ1_0 || t == DType::kTQ2_0;
    const int bias = t == DType::kQ2_K ? 0 : tq ? 1 : t == DType::kQ3_K ? 4 : 32;
    k.d = c.d;
    k.dmin = c.dmin;
    for (int e = 0; e < 256; ++e) k.codes[e] = static_cast<uint8_t>(c.q[e] + bias);
    for (int s = 0; s < 16; ++s) {
      k.sc16[s] = c.sc[s];
      k.m16[s] = c.m[s];
    }
  } else if (t == DType::kQ4_K || t == DType::kQ5_K) {
    const uint16_t* dd = reinterpret_cast<const uint16_t*>(p);
    k.d = fp16_to_f32(dd[0]);
    k.dmin = fp16_to_f32(dd[1]);
    const uint8_t* scales = p + 4;
    for (int j = 0; j < 8; ++j) get_scale_min_k4(j, scales, &k.sc[j], &k.m[j]);
    const uint8_t* qs = t == DType::kQ4_K ? reinterpret_cast<const BlockQ4_K*>(p)->qs : reinterpret_cast<const BlockQ5_K*>(p)->qs;
    for (int j = 0; j < 8; ++j)
      for (int l = 0; l < 32; ++l) {
        const uint8_t byte = qs[32 * (j / 2) + l];
        int q = (j % 2 == 0) ? (byte & 0xF) : (byte >> 4);
        if (t == DType::kQ5_K) q |= ((reinterpret_cast<const BlockQ5_K*>(p)->qh[l] >> j) & 1) << 4;
        k.codes[32 * j + l] = static_cast<uint8_t>(q);
      }
  } else {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(p);
    k.d = fp16_to_f32(b->d);
    for (int s = 0; s < 16; ++s) k.sc16[s] = b->scales[s];
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l) {
        const uint8_t* ql = b->ql + 64 * h;
        const uint8_t qh = b->qh[32 * h + l];
        k.codes[128 * h + l] = static_cast<uint8_t>((ql[l] & 0xF) | (((qh >> 0) & 3) << 4));
        k.codes[128 * h + l + 32] = static_cast<uint8_t>((ql[l + 32] & 0xF) | (((qh >> 2) & 3) << 4));
        k.codes[128 * h + l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh >> 4) & 3) << 4));
        k.codes[128 * h + l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh >> 6) & 3) << 4));
      }
  }
  return k;
}

// Sets bit 4r+i of mask v (8 masks at p) for element 4v+i of row r when `bit` of code is set.
void set_mask_bits(uint8_t* p, int row, const uint8_t* codes32, int bit) {
  for (int v = 0; v < 8; ++v) {
    uint64_t mask;
    std::memcpy(&mask, p + 8 * v, 8);
    for (int i = 0; i < 4; ++i) mask |= static_cast<uint64_t>((codes32[4 * v + i] >> bit) & 1) << (4 * row + i);
    std::memcpy(p + 8 * v, &mask, 8);
  }
}

void pack_qint_k(DType t, const uint8_t* w, int64_t n, int64_t k, uint8_t* dst) {
  const DType kt = kernel_dtype(t);
  const int64_t ns = k / 256, groups = (n + kGroupRows - 1) / kGroupRows;
  const int64_t sbb = qint_k_superblock_bytes(kt), bb = dtype_traits(t).block_bytes, rb = ns * bb;
  const bool q6 = kt == DType::kQ6_K, q2 = kt == DType::kQ2_K, q3 = kt == DType::kQ3_K, tq = kt == DType::kTQ2_0;
  const int64_t header = (q6 || q3 || tq) ? 64 : 128, rec = (sbb - header) / 8;
  std::memset(dst, 0, groups * ns * sbb);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t s = 0; s < ns; ++s) {
      uint8_t* sb = dst + (g * ns + s) * sbb;
      for (int64_t row = 0; row < kGroupRows && g * kGroupRows + row < n; ++row) {
        const KBlock kb = read_k_block(t, w + (g * kGroupRows + row) * rb + s * bb);
        std::memcpy(sb + 4 * row, &kb.d, 4);
        if (header == 128) std::memcpy(sb + 64 + 4 * row, &kb.dmin, 4);
        for (int j = 0; j < 8; ++j) {
          uint8_t* r = sb + header + j * rec;
          const uint8_t* c32 = kb.codes + 32 * j;
          if (q2 || q3 || tq) {
            if (q2) {
              r[row] = static_cast<uint8_t>(kb.sc16[2 * j] | (kb.m16[2 * j] << 4));
              r[16 + row] = static_cast<uint8_t>(kb.sc16[2 * j + 1] | (kb.m16[2 * j + 1] << 4));
            } else if (q3) {
              r[row] = static_cast<uint8_t>(kb.sc16[2 * j]);
              r[16 + row] = static_cast<uint8_t>(kb.sc16[2 * j + 1]);
            }
            uint8_t* codes = r + (tq ? 0 : 32);
            for (int v = 0; v < 8; ++v)
              for (int i = 0; i < 4; ++i)
                codes[64 * (v / 4) + 4 * row + i] |= static_cast<uint8_t>((c32[4 * v + i] & 3) << (2 * (v % 4)));
            if (q3) set_mask_bits(r + QintKLayout<DType::kQ3_K>::kMasksAt, static_cast<int>(row), c32, 2);
            continue;
          }
          if (q6) {
            r[row] = static_cast<uint8_t>(kb.sc16[2 * j]);
            r[16 + row] = static_cast<uint8_t>(kb.sc16[2 * j + 1]);
          } else {
            r[row] = kb.sc[j];
            r[16 + row] = kb.m[j];
          }
          uint8_t* codes = r + 32;
          for (int c = 0; c < 4; ++c)
            for (int i = 0; i < 4; ++i)
              codes[64 * c + 4 * row + i] = static_cast<uint8_t>((c32[4 * c + i] & 0xF) | ((c32[16 + 4 * c + i] & 0xF) << 4));
          if (kt == DType::kQ5_K || q6) set_mask_bits(codes + 256, static_cast<int>(row), c32, 4);
          if (q6) set_mask_bits(codes + 320, static_cast<int>(row), c32, 5);
        }
      }
    }
}

template <class E>
void pack_float_t(const E* w, int64_t n, int64_t k, E* dst) {
  const int64_t groups = (n + kGroupRows - 1) / kGroupRows;
  for (int64_t g = 0; g < groups; ++g) {
    E* out = dst + g * kGroupRows * k;
    const E* rows[kGroupRows];
    for (int64_t r = 0; r < kGroupRows; ++r) rows[r] = g * kGroupRows + r < n ? w + (g * kGroupRows + r) * k : nullptr;
    for (int64_t e = 0; e < k; ++e)
      for (int64_t r = 0; r < kGroupRows; ++r) out[e * kGroupRows + r] = rows[r] ? rows[r][e] : E{0};
  }
}

#if defined(__SSE2__)
// Columns [e0, e0 + 8) of 8 rows of 16-bit elements, transposed: t[j] holds element e0 + j of
// rows 0..7 in order.
inline void transpose8x8_u16(const uint16_t* const* rows, int64_t e0, __m128i t[8]) {
  __m128i r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i] + e0));
  const __m128i a0 = _mm_unpacklo_epi16(r[0], r[1]), a1 = _mm_unpackhi_epi16(r[0], r[1]);
  const __m128i a2 = _mm_unpacklo_epi16(r[2], r[3]), a3 = _mm_unpackhi_epi16(r[2], r[3]);
  const __m128i a4 = _mm_unpacklo_epi16(r[4], r[5]), a5 = _mm_unpackhi_epi16(r[4], r[5]);
  const __m128i a6 = _mm_unpacklo_epi16(r[6], r[7]), a7 = _mm_unpackhi_epi16(r[6], r[7]);
  const __m128i b0 = _mm_unpacklo_epi32(a0, a2), b1 = _mm_unpackhi_epi32(a0, a2);
  const __m128i b2 = _mm_unpacklo_epi32(a1, a3), b3 = _mm_unpackhi_epi32(a1, a3);
  const __m128i b4 = _mm_unpacklo_epi32(a4, a6), b5 = _mm_unpackhi_epi32(a4, a6);
  const __m128i b6 = _mm_unpacklo_epi32(a5, a7), b7 = _mm_unpackhi_epi32(a5, a7);
  t[0] = _mm_unpacklo_epi64(b0, b4);
  t[1] = _mm_unpackhi_epi64(b0, b4);
  t[2] = _mm_unpacklo_epi64(b1, b5);
  t[3] = _mm_unpackhi_epi64(b1, b5);
  t[4] = _mm_unpacklo_epi64(b2, b6);
  t[5] = _mm_unpackhi_epi64(b2, b6);
  t[6] = _mm_unpacklo_epi64(b3, b7);
  t[7] = _mm_unpackhi_epi64(b3, b7);
}
#endif

// 16-bit elements: the same layout as pack_float_t; full groups go 8 columns at a time through
// two 8x8 transposes (SSE2, part of x86-64), the rest element by element.
void pack_float_u16(const uint16_t* w, int64_t n, int64_t k, uint16_t* dst) {
  static_assert(kGroupRows == 16, "two 8-row transposes make a group");
  const int64_t groups = (n + kGroupRows - 1) / kGroupRows;
  for (int64_t g = 0; g < groups; ++g) {
    uint16_t* out = dst + g * kGroupRows * k;
    const uint16_t* rows[kGroupRows];
    for (int64_t r = 0; r < kGroupRows; ++r) rows[r] = g * kGroupRows + r < n ? w + (g * kGroupRows + r) * k : nullptr;
    int64_t e = 0;
#if defined(__SSE2__)
    if ((g + 1) * kGroupRows <= n) {
      for (; e + 8 <= k; e += 8) {
        __m128i lo[8], hi[8];
        transpose8x8_u16(rows, e, lo);
        transpose8x8_u16(rows + 8, e, hi);
        for (int j = 0; j < 8; ++j) {
          _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (e + j) * kGroupRows), lo[j]);
          _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (e + j) * kGroupRows + 8), hi[j]);
        }
      }
    }
#endif
    for (; e < k; ++e)
      for (int64_t r = 0; r < kGroupRows; ++r) out[e * kGroupRows + r] = rows[r] ? rows[r][e] : uint16_t{0};
  }
}

void pack_float(DType t, const uint8_t* w, int64_t n, int64_t k, uint8_t* dst) {
  if (t == DType::kF32) {
    pack_float_t(reinterpret_cast<const uint32_t*>(w), n, k, reinterpret_cast<uint32_t*>(dst));
  } else {
    pack_float_u16(reinterpret_cast<const uint16_t*>(w), n, k, reinterpret_cast<uint16_t*>(dst));
  }
}

}  // namespace

DType kernel_dtype(DType t) {
  switch (t) {
    case DType::kTQ1_0: return DType::kTQ2_0;
    case DType::kIQ4_NL: return DType::kQ8_0;
    default: return t;
  }
}

PackKind pack_kind(DType t) {
  switch (kernel_dtype(t)) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0:
    case DType::kIQ4_XS: return PackKind::kQint;
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kTQ2_0: return PackKind::kQintK;
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16: return PackKind::kFloat;
    default: return PackKind::kNone;
  }
}

int64_t qint_record_bytes(DType t) {
  switch (t) {
    case DType::kQ4_0: return QintLayout<DType::kQ4_0>::kRecord;
    case DType::kQ4_1: return QintLayout<DType::kQ4_1>::kRecord;
    case DType::kQ5_0: return QintLayout<DType::kQ5_0>::kRecord;
    case DType::kQ5_1: return QintLayout<DType::kQ5_1>::kRecord;
    case DType::kQ8_0: return QintLayout<DType::kQ8_0>::kRecord;
    case DType::kIQ4_XS: return QintLayout<DType::kIQ4_XS>::kRecord;
    default: return 0;
  }
}

int64_t qint_k_superblock_bytes(DType t) {
  switch (t) {
    case DType::kQ4_K: return QintKLayout<DType::kQ4_K>::kSuper;
    case DType::kQ5_K: return QintKLayout<DType::kQ5_K>::kSuper;
    case DType::kQ6_K: return QintKLayout<DType::kQ6_K>::kSuper;
    case DType::kQ2_K: return QintKLayout<DType::kQ2_K>::kSuper;
    case DType::kTQ2_0: return QintKLayout<DType::kTQ2_0>::kSuper;
    case DType::kQ3_K: return QintKLayout<DType::kQ3_K>::kSuper;
    default: return 0;
  }
}

int64_t packed_bytes(DType t, int64_t n, int64_t k) {
  const int64_t groups = (n + kGroupRows - 1) / kGroupRows;
  t = kernel_dtype(t);
  switch (pack_kind(t)) {
    case PackKind::kQint: return groups * (k / kQBlock) * qint_record_bytes(t);
    case PackKind::kQintK: return groups * (k / 256) * qint_k_superblock_bytes(t);
    case PackKind::kFloat: return groups * kGroupRows * k * dtype_traits(t).block_bytes;
    case PackKind::kNone: return 0;
  }
  return 0;
}

void pack_weight(DType t, const void* w, int64_t n, int64_t k, void* dst) {
  const auto* src = static_cast<const uint8_t*>(w);
  auto* out = static_cast<uint8_t*>(dst);
  switch (pack_kind(t)) {
    case PackKind::kQint:
      if (t == DType::kIQ4_XS) {
        pack_iq4_xs(src, n, k, out);
      } else {
        pack_qint(t, src, n, k, out);
      }
      break;
    case PackKind::kQintK: pack_qint_k(t, src, n, k, out); break;
    case PackKind::kFloat: pack_float(t, src, n, k, out); break;
    case PackKind::kNone: PAGODA_CHECK(false, "{} has no packed layout", dtype_name(t));
  }
}

}  // namespace pagoda::cpu

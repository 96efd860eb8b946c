// Reference (scalar) conversions and dot products of the low-bit weight formats: Q2_K, Q3_K,
// IQ4_NL, IQ4_XS, TQ1_0 and TQ2_0 (layouts in quant/blocks.h).
//
// Every format is decoded to integers once (quant/codes.h); dequantize and vec_dot are written on
// those codes. The quantizers are ours (any valid encoding is a valid GGUF block): per sub-block a
// short search over candidate scales with a least-squares refit, then the sub-block scales are
// quantized against the fp16 super-block scale and the codes recomputed with the final scales.
#include <cmath>
#include <cstddef>
#include <cstring>

#include "common/check.h"
#include "common/half.h"
#include "quant/blocks.h"
#include "quant/codes.h"
#include "quant/formats.h"

namespace pagoda::quant {
namespace {

inline int nearest_int(float f) { return static_cast<int>(std::lrintf(f)); }
inline int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

void decode_q2_k(const BlockQ2_K& b, SuperBlockCodes* c) {
  c->d = fp16_to_f32(b.d);
  c->dmin = fp16_to_f32(b.dmin);
  for (int s = 0; s < 16; ++s) {
    c->sc[s] = static_cast<int8_t>(b.scales[s] & 0xF);
    c->m[s] = static_cast<int8_t>(b.scales[s] >> 4);
  }
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l) c->q[128 * h + 32 * j + l] = static_cast<int8_t>((b.qs[32 * h + l] >> (2 * j)) & 3);
}

int q3_k_scale(const uint8_t* scales, int s) {
  const int low = s < 8 ? (scales[s] & 0xF) : (scales[s - 8] >> 4);
  const int high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
  return (low | (high << 4)) - 32;
}

void decode_q3_k(const BlockQ3_K& b, SuperBlockCodes* c) {
  c->d = fp16_to_f32(b.d);
  c->dmin = 0;
  for (int s = 0; s < 16; ++s) {
    c->sc[s] = static_cast<int8_t>(q3_k_scale(b.scales, s));
    c->m[s] = 0;
  }
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l) {
        const int e = 128 * h + 32 * j + l;
        const int low = (b.qs[32 * h + l] >> (2 * j)) & 3;
        const int hbit = (b.hmask[e % 32] >> (e / 32)) & 1;
        c->q[e] = static_cast<int8_t>(low - (hbit ? 0 : 4));
      }
}

int iq4_xs_scale(const BlockIQ4_XS& b, int j) {
  const int low = (b.scales_l[j / 2] >> (4 * (j % 2))) & 0xF;
  const int high = (b.scales_h >> (2 * j)) & 3;
  return (low | (high << 4)) - 32;
}

void decode_iq4_xs(const BlockIQ4_XS& b, SuperBlockCodes* c) {
  c->d = fp16_to_f32(b.d);
  c->dmin = 0;
  for (int j = 0; j < 8; ++j) {
    const int8_t sc = static_cast<int8_t>(iq4_xs_scale(b, j));
    c->sc[2 * j] = c->sc[2 * j + 1] = sc;
    c->m[2 * j] = c->m[2 * j + 1] = 0;
    for (int l = 0; l < 16; ++l) {
      c->q[32 * j + l] = kIq4nlValues[b.qs[16 * j + l] & 0xF];
      c->q[32 * j + 16 + l] = kIq4nlValues[b.qs[16 * j + l] >> 4];
    }
  }
}

void set_ternary_scales(SuperBlockCodes* c, uint16_t d) {
  c->d = fp16_to_f32(d);
  c->dmin = 0;
  for (int s = 0; s < 16; ++s) {
    c->sc[s] = 1;
    c->m[s] = 0;
  }
}

void decode_tq2_0(const BlockTQ2_0& b, SuperBlockCodes* c) {
  set_ternary_scales(c, b.d);
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l)
        c->q[128 * h + 32 * j + l] = static_cast<int8_t>(((b.qs[32 * h + l] >> (2 * j)) & 3) - 1);
}

constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
inline int8_t tq1_digit(uint8_t byte, int k) {
  const uint8_t v = static_cast<uint8_t>(byte * kPow3[k]);
  return static_cast<int8_t>(((static_cast<uint16_t>(v) * 3) >> 8) - 1);
}

void decode_tq1_0(const BlockTQ1_0& b, SuperBlockCodes* c) {
  set_ternary_scales(c, b.d);
  for (int k = 0; k < 5; ++k) {
    for (int l = 0; l < 32; ++l) c->q[32 * k + l] = tq1_digit(b.qs[l], k);
    for (int l = 0; l < 16; ++l) c->q[160 + 16 * k + l] = tq1_digit(b.qs[32 + l], k);
  }
  for (int k = 0; k < 4; ++k)
    for (int l = 0; l < 4; ++l) c->q[240 + 4 * k + l] = tq1_digit(b.qh[l], k);
}

template <class Block>
void dequantize_codes(DType t, const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const Block*>(src);
  SuperBlockCodes c;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    decode_superblock(t, &b[i], &c);
    for (int s = 0; s < 16; ++s) {
      const float dl = c.d * static_cast<float>(c.sc[s]);
      const float ml = c.dmin * static_cast<float>(c.m[s]);
      for (int l = 0; l < 16; ++l) dst[i * kQKK + 16 * s + l] = dl * static_cast<float>(c.q[16 * s + l]) - ml;
    }
  }
}

// Weight super-blocks (decoded) . Q8_K activations: integer sums per 16, scales per super-block.
template <class Block>
float vec_dot_codes(DType t, const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  SuperBlockCodes c;
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    decode_superblock(t, &x[i], &c);
    int sumi = 0, summ = 0;
    for (int s = 0; s < 16; ++s) {
      int dot = 0;
      for (int l = 0; l < 16; ++l) dot += c.q[16 * s + l] * y[i].qs[16 * s + l];
      sumi += c.sc[s] * dot;
      summ += c.m[s] * y[i].bsums[s];
    }
    sum += y[i].d * (c.d * static_cast<float>(sumi) - c.dmin * static_cast<float>(summ));
  }
  return sum;
}

// ---- quantizer helpers ----

// x ~ scale * q - min, q in [0, nmax], min >= 0. Returns scale, writes min.
float fit_min_scale(const float* x, int n, int nmax, float* out_min) {
  float mn = x[0], mx = x[0];
  for (int i = 1; i < n; ++i) {
    mn = std::fmin(mn, x[i]);
    mx = std::fmax(mx, x[i]);
  }
  if (mn > 0) mn = 0;
  *out_min = -mn;
  if (mx == mn) return 0;
  float best_a = (mx - mn) / nmax, best_b = mn;
  double best_err = INFINITY;
  for (int step = -6; step <= 6; ++step) {
    const float iscale = (nmax + 0.15f * step) / (mx - mn);
    double sq = 0, sqq = 0, sx = 0, sqx = 0;
    int q[32];
    for (int i = 0; i < n; ++i) {
      q[i] = clampi(nearest_int(iscale * (x[i] - mn)), 0, nmax);
      sq += q[i];
      sqq += static_cast<double>(q[i]) * q[i];
      sx += x[i];
      sqx += static_cast<double>(q[i]) * x[i];
    }
    const double det = n * sqq - sq * sq;
    if (det <= 0) continue;
    double a = (n * sqx - sq * sx) / det, b = (sqq * sx - sq * sqx) / det;
    if (b > 0) {
      b = 0;
      a = sqq > 0 ? sqx / sqq : 0;
    }
    if (a <= 0) continue;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = a * q[i] + b - x[i];
      err += e * e;
    }
    if (err < best_err) {
      best_err = err;
      best_a = static_cast<float>(a);
      best_b = static_cast<float>(b);
    }
  }
  *out_min = -best_b;
  return best_a;
}

// x ~ scale * level(x / scale) with level the nearest of `levels` (n_levels sorted values).
int nearest_level(const int8_t* levels, int n_levels, float v) {
  int best = 0;
  float best_e = std::fabs(v - levels[0]);
  for (int i = 1; i < n_levels; ++i) {
    const float e = std::fabs(v - levels[i]);
    if (e < best_e) {
      best_e = e;
      best = i;
    }
  }
  return best;
}

// Signed scale for x ~ scale * levels[idx]: candidates around max / level_at_max, least-squares
// refit, best squared error.
float fit_level_scale(const float* x, int n, const int8_t* levels, int n_levels, int level_at_max) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  if (amax == 0) return 0;
  float best = max / level_at_max;
  double best_err = INFINITY;
  for (int step = -8; step <= 8; ++step) {
    const float scale = max / (level_at_max + 0.05f * level_at_max * step / 8);
    double sqx = 0, sqq = 0;
    int idx[32];
    for (int i = 0; i < n; ++i) {
      idx[i] = nearest_level(levels, n_levels, x[i] / scale);
      sqx += static_cast<double>(levels[idx[i]]) * x[i];
      sqq += static_cast<double>(levels[idx[i]]) * levels[idx[i]];
    }
    if (sqq == 0) continue;
    const double a = sqx / sqq;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = a * levels[idx[i]] - x[i];
      err += e * e;
    }
    if (err < best_err) {
      best_err = err;
      best = static_cast<float>(a);
    }
  }
  return best;
}

constexpr int8_t kQ3Levels[8] = {-4, -3, -2, -1, 0, 1, 2, 3};

}  // namespace

bool has_superblock_codes(DType t) {
  return t == DType::kQ2_K || t == DType::kQ3_K || t == DType::kIQ4_XS || t == DType::kTQ1_0 || t == DType::kTQ2_0;
}

void decode_superblock(DType t, const void* block, SuperBlockCodes* out) {
  switch (t) {
    case DType::kQ2_K: decode_q2_k(*static_cast<const BlockQ2_K*>(block), out); return;
    case DType::kQ3_K: decode_q3_k(*static_cast<const BlockQ3_K*>(block), out); return;
    case DType::kIQ4_XS: decode_iq4_xs(*static_cast<const BlockIQ4_XS*>(block), out); return;
    case DType::kTQ1_0: decode_tq1_0(*static_cast<const BlockTQ1_0*>(block), out); return;
    case DType::kTQ2_0: decode_tq2_0(*static_cast<const BlockTQ2_0*>(block), out); return;
    default: PAGODA_CHECK(false, "{} has no super-block codes", dtype_name(t));
  }
}

void decode_iq4_nl(const void* block, int8_t* q, uint16_t* d_bits) {
  const auto& b = *static_cast<const BlockIQ4_NL*>(block);
  *d_bits = b.d;
  for (int l = 0; l < 16; ++l) {
    q[l] = kIq4nlValues[b.qs[l] & 0xF];
    q[l + 16] = kIq4nlValues[b.qs[l] >> 4];
  }
}

namespace ref {

// ---- Q2_K ----
void dequantize_row_q2_k(const void* src, float* dst, int64_t n) { dequantize_codes<BlockQ2_K>(DType::kQ2_K, src, dst, n); }
void quantize_row_q2_k(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ2_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    float scale[16], min[16], max_scale = 0, max_min = 0;
    for (int s = 0; s < 16; ++s) {
      scale[s] = fit_min_scale(x + 16 * s, 16, 3, &min[s]);
      max_scale = std::fmax(max_scale, scale[s]);
      max_min = std::fmax(max_min, min[s]);
    }
    b[i].d = f32_to_fp16(max_scale / 15);
    b[i].dmin = f32_to_fp16(max_min / 15);
    const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
    std::memset(b[i].qs, 0, sizeof(b[i].qs));
    for (int s = 0; s < 16; ++s) {
      const int sc = d > 0 ? clampi(nearest_int(scale[s] / d), 0, 15) : 0;
      const int m = dmin > 0 ? clampi(nearest_int(min[s] / dmin), 0, 15) : 0;
      b[i].scales[s] = static_cast<uint8_t>(sc | (m << 4));
      const float ds = d * sc, dm = dmin * m;
      for (int l = 0; l < 16; ++l) {
        const int e = 16 * s + l;
        const int q = ds > 0 ? clampi(nearest_int((x[e] + dm) / ds), 0, 3) : 0;
        b[i].qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(q << (2 * ((e % 128) / 32)));
      }
    }
  }
}
float vec_dot_q2_k_q8_k(const void* w, const void* a, int64_t n) { return vec_dot_codes<BlockQ2_K>(DType::kQ2_K, w, a, n); }

// ---- Q3_K ----
void dequantize_row_q3_k(const void* src, float* dst, int64_t n) { dequantize_codes<BlockQ3_K>(DType::kQ3_K, src, dst, n); }
void quantize_row_q3_k(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ3_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    float scale[16], amax = 0, max = 0;
    for (int s = 0; s < 16; ++s) {
      scale[s] = fit_level_scale(x + 16 * s, 16, kQ3Levels, 8, -4);
      if (std::fabs(scale[s]) > amax) {
        amax = std::fabs(scale[s]);
        max = scale[s];
      }
    }
    // the largest scale maps to -32 (the 6-bit range is [-32, 31])
    b[i].d = f32_to_fp16(max / -32);
    const float d = fp16_to_f32(b[i].d);
    std::memset(&b[i], 0, offsetof(BlockQ3_K, d));
    for (int s = 0; s < 16; ++s) {
      const int sc = d != 0 ? clampi(nearest_int(scale[s] / d), -32, 31) : 0;
      const int u = sc + 32;
      if (s < 8) {
        b[i].scales[s] |= static_cast<uint8_t>(u & 0xF);
      } else {
        b[i].scales[s - 8] |= static_cast<uint8_t>((u & 0xF) << 4);
      }
      b[i].scales[8 + s % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (s / 4)));
      const float ds = d * sc;
      for (int l = 0; l < 16; ++l) {
        const int e = 16 * s + l;
        const int q = ds != 0 ? clampi(nearest_int(x[e] / ds), -4, 3) : 0;
        const int low = q >= 0 ? q : q + 4;
        b[i].qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(low << (2 * ((e % 128) / 32)));
        if (q >= 0) b[i].hmask[e % 32] |= static_cast<uint8_t>(1u << (e / 32));
      }
    }
  }
}
float vec_dot_q3_k_q8_k(const void* w, const void* a, int64_t n) { return vec_dot_codes<BlockQ3_K>(DType::kQ3_K, w, a, n); }

// ---- IQ4_NL ----
void dequantize_row_iq4_nl(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    int8_t q[kQK];
    uint16_t d_bits;
    decode_iq4_nl(&b[i], q, &d_bits);
    const float d = fp16_to_f32(d_bits);
    for (int j = 0; j < kQK; ++j) dst[i * kQK + j] = d * static_cast<float>(q[j]);
  }
}
void quantize_row_iq4_nl(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockIQ4_NL*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    b[i].d = f32_to_fp16(fit_level_scale(x, kQK, kIq4nlValues, 16, -127));
    const float d = fp16_to_f32(b[i].d);
    for (int l = 0; l < 16; ++l) {
      const int lo = d != 0 ? nearest_level(kIq4nlValues, 16, x[l] / d) : 8;
      const int hi = d != 0 ? nearest_level(kIq4nlValues, 16, x[l + 16] / d) : 8;
      b[i].qs[l] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}
float vec_dot_iq4_nl_q8_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_NL*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int8_t q[kQK];
    uint16_t d_bits;
    decode_iq4_nl(&x[i], q, &d_bits);
    int dot = 0;
    for (int j = 0; j < kQK; ++j) dot += q[j] * y[i].qs[j];
    sum += fp16_to_f32(d_bits) * fp16_to_f32(y[i].d) * static_cast<float>(dot);
  }
  return sum;
}

// ---- IQ4_XS ----
void dequantize_row_iq4_xs(const void* src, float* dst, int64_t n) {
  dequantize_codes<BlockIQ4_XS>(DType::kIQ4_XS, src, dst, n);
}
void quantize_row_iq4_xs(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockIQ4_XS*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    float scale[8], amax = 0, max = 0;
    for (int j = 0; j < 8; ++j) {
      scale[j] = fit_level_scale(x + 32 * j, 32, kIq4nlValues, 16, -127);
      if (std::fabs(scale[j]) > amax) {
        amax = std::fabs(scale[j]);
        max = scale[j];
      }
    }
    b[i].d = f32_to_fp16(max / -32);
    const float d = fp16_to_f32(b[i].d);
    b[i].scales_h = 0;
    std::memset(b[i].scales_l, 0, sizeof(b[i].scales_l));
    for (int j = 0; j < 8; ++j) {
      const int ls = (d != 0 ? clampi(nearest_int(scale[j] / d), -32, 31) : 0) + 32;
      b[i].scales_l[j / 2] |= static_cast<uint8_t>((ls & 0xF) << (4 * (j % 2)));
      b[i].scales_h = static_cast<uint16_t>(b[i].scales_h | ((ls >> 4) << (2 * j)));
      const float ds = d * (ls - 32);
      for (int l = 0; l < 16; ++l) {
        const int lo = ds != 0 ? nearest_level(kIq4nlValues, 16, x[32 * j + l] / ds) : 8;
        const int hi = ds != 0 ? nearest_level(kIq4nlValues, 16, x[32 * j + 16 + l] / ds) : 8;
        b[i].qs[16 * j + l] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
}
float vec_dot_iq4_xs_q8_k(const void* w, const void* a, int64_t n) {
  return vec_dot_codes<BlockIQ4_XS>(DType::kIQ4_XS, w, a, n);
}

// ---- TQ1_0 / TQ2_0 (ternary) ----
namespace {
// d = absmax, q = round(x / d) + 1 in {0, 1, 2}.
void ternary_codes(const float* x, uint16_t* d_bits, uint8_t* q) {
  float amax = 0;
  for (int j = 0; j < kQKK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  *d_bits = f32_to_fp16(amax);
  const float d = fp16_to_f32(*d_bits);
  for (int j = 0; j < kQKK; ++j) q[j] = static_cast<uint8_t>(d > 0 ? clampi(nearest_int(x[j] / d), -1, 1) + 1 : 1);
}
// Five (or four) base-3 digits, most significant first, as ceil(v * 256 / 243).
uint8_t pack_digits(const uint8_t* digits, int count, int stride) {
  int v = 0;
  for (int k = 0; k < 5; ++k) v = 3 * v + (k < count ? digits[k * stride] : 0);
  return static_cast<uint8_t>((v * 256 + 242) / 243);
}
}  // namespace

void dequantize_row_tq1_0(const void* src, float* dst, int64_t n) { dequantize_codes<BlockTQ1_0>(DType::kTQ1_0, src, dst, n); }
void quantize_row_tq1_0(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockTQ1_0*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint8_t q[kQKK];
    ternary_codes(src + i * kQKK, &b[i].d, q);
    for (int l = 0; l < 32; ++l) b[i].qs[l] = pack_digits(q + l, 5, 32);
    for (int l = 0; l < 16; ++l) b[i].qs[32 + l] = pack_digits(q + 160 + l, 5, 16);
    for (int l = 0; l < 4; ++l) b[i].qh[l] = pack_digits(q + 240 + l, 4, 4);
  }
}
float vec_dot_tq1_0_q8_k(const void* w, const void* a, int64_t n) { return vec_dot_codes<BlockTQ1_0>(DType::kTQ1_0, w, a, n); }

void dequantize_row_tq2_0(const void* src, float* dst, int64_t n) { dequantize_codes<BlockTQ2_0>(DType::kTQ2_0, src, dst, n); }
void quantize_row_tq2_0(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockTQ2_0*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint8_t q[kQKK];
    ternary_codes(src + i * kQKK, &b[i].d, q);
    std::memset(b[i].qs, 0, sizeof(b[i].qs));
    for (int e = 0; e < kQKK; ++e) b[i].qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(q[e] << (2 * ((e % 128) / 32)));
  }
}
float vec_dot_tq2_0_q8_k(const void* w, const void* a, int64_t n) { return vec_dot_codes<BlockTQ2_0>(DType::kTQ2_0, w, a, n); }

}  // namespace ref
}  // namespace pagoda::quant

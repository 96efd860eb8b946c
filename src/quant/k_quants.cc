// Reference (scalar) conversions and dot products of the k-quants (256-element super-blocks):
// Q4_K, Q5_K, Q6_K and the activation format Q8_K.
//
// Dequantizers follow the GGUF layouts literally. The quantizers are ours: per sub-block a short
// search over candidate scales with a least-squares refit (scale and min for Q4_K/Q5_K, scale for
// Q6_K), then the sub-block scales are themselves quantized (6-bit / int8) against the fp16
// super-block scale and the codes are recomputed with the final scales.
#include <cmath>
#include <cstring>

#include "common/half.h"
#include "quant/blocks.h"
#include "quant/formats.h"

namespace pagoda::quant::ref {
namespace {

inline int nearest_int(float f) { return static_cast<int>(std::lrintf(f)); }
inline int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Fits x ~ scale * q - min with q in [0, nmax], min >= 0 (so the represented range includes 0,
// as the format's mins are subtracted). Returns scale, writes min.
float fit_scale_min(const float* x, int n, int nmax, float* out_min) {
  float mn = x[0], mx = x[0];
  for (int i = 1; i < n; ++i) {
    mn = std::fmin(mn, x[i]);
    mx = std::fmax(mx, x[i]);
  }
  if (mn > 0) mn = 0;
  if (mx == mn) {
    *out_min = -mn;
    return 0;
  }
  float best_scale = (mx - mn) / nmax, best_min = -mn, best_err = INFINITY;
  int q[kQKK];
  for (int step = -8; step <= 8; ++step) {
    const float iscale = (nmax + 0.1f * step) / (mx - mn);
    double sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int i = 0; i < n; ++i) {
      q[i] = clampi(nearest_int(iscale * (x[i] - mn)), 0, nmax);
      sq += q[i];
      sqq += static_cast<double>(q[i]) * q[i];
      sx += x[i];
      sqx += static_cast<double>(q[i]) * x[i];
    }
    // least squares for x ~ a*q + b
    const double det = n * sqq - sq * sq;
    if (det <= 0) continue;
    double a = (n * sqx - sq * sx) / det;
    double b = (sqq * sx - sq * sqx) / det;
    if (b > 0) {  // min must be <= 0: refit with b = 0
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
      best_err = static_cast<float>(err);
      best_scale = static_cast<float>(a);
      best_min = static_cast<float>(-b);
    }
  }
  *out_min = best_min;
  return best_scale;
}

// Fits x ~ scale * q with q in [-nmax, nmax - 1] (signed scale). Returns scale.
float fit_scale_symmetric(const float* x, int n, int nmax) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax == 0) return 0;
  float best_scale = max / -nmax, best_err = INFINITY;
  for (int step = -6; step <= 6; ++step) {
    const float iscale = -(nmax + 0.1f * step) / max;
    double sqx = 0, sqq = 0;
    int q[16];
    for (int i = 0; i < n; ++i) {
      q[i] = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      sqx += static_cast<double>(q[i]) * x[i];
      sqq += static_cast<double>(q[i]) * q[i];
    }
    if (sqq == 0) continue;
    const double a = sqx / sqq;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = a * q[i] - x[i];
      err += e * e;
    }
    if (err < best_err) {
      best_err = static_cast<float>(err);
      best_scale = static_cast<float>(a);
    }
  }
  return best_scale;
}

void pack_scales_k4(const uint8_t* sc, const uint8_t* m, uint8_t* scales) {
  std::memset(scales, 0, kKScaleSize);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales[j] = sc[j];
      scales[j + 4] = m[j];
    } else {
      scales[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
    }
  }
}

// Shared by Q4_K (nmax 15) and Q5_K (nmax 31): the 6-bit scales/mins, fp16 d/dmin, and codes L.
void quantize_superblock_k(const float* x, int nmax, uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales,
                           uint8_t* L) {
  float scale[8], min[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    scale[j] = fit_scale_min(x + 32 * j, 32, nmax, &min[j]);
    max_scale = std::fmax(max_scale, scale[j]);
    max_min = std::fmax(max_min, min[j]);
  }
  const float d = max_scale / 63, dmin = max_min / 63;
  *d_out = f32_to_fp16(d);
  *dmin_out = f32_to_fp16(dmin);
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(d > 0 ? clampi(nearest_int(scale[j] / d), 0, 63) : 0);
    m[j] = static_cast<uint8_t>(dmin > 0 ? clampi(nearest_int(min[j] / dmin), 0, 63) : 0);
  }
  pack_scales_k4(sc, m, scales);
  const float df = fp16_to_f32(*d_out), dminf = fp16_to_f32(*dmin_out);
  for (int j = 0; j < 8; ++j) {
    const float ds = df * sc[j], dm = dminf * m[j];
    for (int l = 0; l < 32; ++l)
      L[32 * j + l] = static_cast<uint8_t>(ds > 0 ? clampi(nearest_int((x[32 * j + l] + dm) / ds), 0, nmax) : 0);
  }
}

}  // namespace

// ---- Q4_K ----
void dequantize_row_q4_k(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
    const uint8_t* q = b[i].qs;
    float* y = dst + i * kQKK;
    for (int j = 0; j < 8; j += 2) {
      uint8_t sc, m;
      get_scale_min_k4(j, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      get_scale_min_k4(j + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
    }
  }
}
void quantize_row_q4_k(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ4_K*>(dst);
  uint8_t L[kQKK];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    quantize_superblock_k(src + i * kQKK, 15, &b[i].d, &b[i].dmin, b[i].scales, L);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l)
        b[i].qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
  }
}

// ---- Q5_K ----
void dequantize_row_q5_k(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
    const uint8_t* ql = b[i].qs;
    const uint8_t* qh = b[i].qh;
    float* y = dst + i * kQKK;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < 8; j += 2) {
      uint8_t sc, m;
      get_scale_min_k4(j, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      get_scale_min_k4(j + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}
void quantize_row_q5_k(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ5_K*>(dst);
  uint8_t L[kQKK];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    quantize_superblock_k(src + i * kQKK, 31, &b[i].d, &b[i].dmin, b[i].scales, L);
    std::memset(b[i].qh, 0, sizeof(b[i].qh));
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l)
        b[i].qs[32 * c + l] = static_cast<uint8_t>((L[64 * c + l] & 0xF) | ((L[64 * c + 32 + l] & 0xF) << 4));
    for (int j = 0; j < 8; ++j)
      for (int l = 0; l < 32; ++l) b[i].qh[l] |= static_cast<uint8_t>(((L[32 * j + l] >> 4) & 1) << j);
  }
}

// ---- Q6_K ----
void dequantize_row_q6_k(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = fp16_to_f32(b[i].d);
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    const int8_t* sc = b[i].scales;
    float* y = dst + i * kQKK;
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}
void quantize_row_q6_k(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ6_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    float scale[16], amax = 0;
    for (int s = 0; s < 16; ++s) {
      scale[s] = fit_scale_symmetric(x + 16 * s, 16, 32);
      amax = std::fmax(amax, std::fabs(scale[s]));
    }
    const float d = amax / 127;
    b[i].d = f32_to_fp16(d);
    const float df = fp16_to_f32(b[i].d);
    uint8_t L[kQKK];
    for (int s = 0; s < 16; ++s) {
      const int sc = d > 0 ? clampi(nearest_int(scale[s] / d), -127, 127) : 0;
      b[i].scales[s] = static_cast<int8_t>(sc);
      const float ds = df * sc;
      for (int l = 0; l < 16; ++l)
        L[16 * s + l] = static_cast<uint8_t>(ds != 0 ? clampi(nearest_int(x[16 * s + l] / ds), -32, 31) + 32 : 32);
    }
    for (int h = 0; h < 2; ++h) {
      const uint8_t* Lh = L + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int q1 = Lh[l], q2 = Lh[l + 32], q3 = Lh[l + 64], q4 = Lh[l + 96];
        b[i].ql[64 * h + l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        b[i].ql[64 * h + l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
        b[i].qh[32 * h + l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
    }
  }
}

// ---- Q8_K ----
void dequantize_row_q8_k(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i)
    for (int j = 0; j < kQKK; ++j) dst[i * kQKK + j] = b[i].d * b[i].qs[j];
}
void quantize_row_q8_k(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    float amax = 0;
    for (int j = 0; j < kQKK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float iscale = amax > 0 ? 127.0f / amax : 0.0f;
    b[i].d = amax > 0 ? 1.0f / iscale : 0.0f;
    for (int j = 0; j < kQKK; ++j) b[i].qs[j] = static_cast<int8_t>(clampi(nearest_int(iscale * x[j]), -127, 127));
    for (int s = 0; s < 16; ++s) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += b[i].qs[16 * s + l];
      b[i].bsums[s] = static_cast<int16_t>(sum);
    }
  }
}

// ---- dot products against Q8_K: integer sums per sub-block, scales applied per super-block ----
float vec_dot_q4_k_q8_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      get_scale_min_k4(j, x[i].scales, &sc, &m);
      const uint8_t* q = x[i].qs + 32 * (j / 2);
      int s = 0;
      for (int l = 0; l < 32; ++l) s += ((j & 1) ? (q[l] >> 4) : (q[l] & 0xF)) * y[i].qs[32 * j + l];
      sumi += sc * s;
      summ += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
    }
    sum += y[i].d * (fp16_to_f32(x[i].d) * sumi - fp16_to_f32(x[i].dmin) * summ);
  }
  return sum;
}
float vec_dot_q5_k_q8_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      get_scale_min_k4(j, x[i].scales, &sc, &m);
      const uint8_t* q = x[i].qs + 32 * (j / 2);
      int s = 0;
      for (int l = 0; l < 32; ++l) {
        const int v = ((j & 1) ? (q[l] >> 4) : (q[l] & 0xF)) | (((x[i].qh[l] >> j) & 1) << 4);
        s += v * y[i].qs[32 * j + l];
      }
      sumi += sc * s;
      summ += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
    }
    sum += y[i].d * (fp16_to_f32(x[i].d) * sumi - fp16_to_f32(x[i].dmin) * summ);
  }
  return sum;
}
float vec_dot_q6_k_q8_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int8_t L[kQKK];
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = x[i].ql + 64 * h;
      const uint8_t* qh = x[i].qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        L[128 * h + l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        L[128 * h + l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        L[128 * h + l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        L[128 * h + l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
    int sumi = 0;
    for (int s = 0; s < 16; ++s) {
      int t = 0;
      for (int l = 0; l < 16; ++l) t += L[16 * s + l] * y[i].qs[16 * s + l];
      sumi += x[i].scales[s] * t;
    }
    sum += fp16_to_f32(x[i].d) * y[i].d * sumi;
  }
  return sum;
}

}  // namespace pagoda::quant::ref

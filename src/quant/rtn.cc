#include "quant/rtn.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "common/half.h"

namespace pagoda::quant {
namespace {

float fp16_round(float x) { return fp16_to_f32(f32_to_fp16(x)); }
float bf16_round(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// numpy's np.round (half to even) in the default rounding mode.
float round_even(float x) { return std::nearbyint(x); }

GroupedIntWeight make_weight(int64_t n, int64_t k, int bits, int64_t group) {
  PAGODA_CHECK(n > 0 && k > 0 && group > 0 && k % group == 0, "RTN: group {} does not divide k {}", group, k);
  GroupedIntWeight q;
  q.n = n;
  q.k = k;
  q.group = group;
  q.bits = bits;
  q.codes.resize(static_cast<size_t>(n * k));
  q.zeros.resize(static_cast<size_t>(n * (k / group)));
  q.scales.resize(q.zeros.size());
  return q;
}

// Widens [lo, hi] to hold every value of a group (the rules that keep zero in the range start
// from [0, 0]).
void widen_range(const float* x, int64_t len, float& lo, float& hi) {
  for (int64_t j = 0; j < len; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
}

// Codes of one group: clamp(round(w / scale) + zero, lo, hi) + offset, all in f32 as numpy.
void encode_group(const float* w, int64_t len, float scale, float zero, float lo, float hi, int offset, uint8_t* out) {
  for (int64_t j = 0; j < len; ++j) {
    float c = scale != 0.0f ? round_even(w[j] / scale) + zero : zero;
    c = std::min(std::max(c, lo), hi);
    out[j] = static_cast<uint8_t>(static_cast<int32_t>(c) + offset);
  }
}

}  // namespace

GroupedIntWeight rtn_gptq(const float* w, int64_t n, int64_t k, int bits, int64_t group, bool symmetric) {
  PAGODA_CHECK(bits == 4 || bits == 8, "RTN: {} bits", bits);
  GroupedIntWeight q = make_weight(n, k, bits, group);
  const float maxq = static_cast<float>((1 << bits) - 1);
  const int64_t G = k / group;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const float* x = w + r * k + g * group;
      float xmin = 0.0f, xmax = 0.0f;
      widen_range(x, group, xmin, xmax);
      if (symmetric) {
        xmax = std::max(std::abs(xmin), xmax);
        if (xmin < 0) xmin = -xmax;
      }
      if (xmin == 0.0f && xmax == 0.0f) {
        xmin = -1.0f;
        xmax = 1.0f;
      }
      const float scale = fp16_round((xmax - xmin) / maxq);
      const float zero = symmetric ? static_cast<float>(1 << (bits - 1)) : round_even(-xmin / scale);
      const size_t cell = static_cast<size_t>(r * G + g);
      q.scales[cell] = f32_to_fp16(scale);
      q.zeros[cell] = static_cast<int32_t>(zero);
      encode_group(x, group, scale, zero, 0.0f, maxq, 0, q.codes.data() + r * k + g * group);
    }
  return q;
}

GroupedIntWeight rtn_awq(const float* w, int64_t n, int64_t k, int64_t group) {
  GroupedIntWeight q = make_weight(n, k, 4, group);
  const int64_t G = k / group;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const float* x = w + r * k + g * group;
      float mn = x[0], mx = x[0];
      widen_range(x + 1, group - 1, mn, mx);
      const float scale = fp16_round(std::max(mx - mn, 1e-5f) / 15.0f);
      const float zero = std::min(std::max(-round_even(mn / scale), 0.0f), 15.0f);
      const size_t cell = static_cast<size_t>(r * G + g);
      q.scales[cell] = f32_to_fp16(scale);
      q.zeros[cell] = static_cast<int32_t>(zero);
      encode_group(x, group, scale, zero, 0.0f, 15.0f, 0, q.codes.data() + r * k + g * group);
    }
  return q;
}

GroupedIntWeight rtn_ct(const float* w, int64_t n, int64_t k, int bits, int64_t group, bool symmetric,
                        ScaleRounding rounding, std::vector<float>* scales_f32) {
  PAGODA_CHECK(bits == 4 || bits == 8, "RTN: {} bits", bits);
  GroupedIntWeight q = make_weight(n, k, bits, group);
  const int off = 1 << (bits - 1);
  const float qmin = static_cast<float>(-off), qmax = static_cast<float>(off - 1);
  const int64_t G = k / group;
  if (scales_f32) scales_f32->assign(q.scales.size(), 0.0f);
  auto round_scale = [rounding](float s) { return rounding == ScaleRounding::kFp16 ? fp16_round(s) : bf16_round(s); };
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const float* x = w + r * k + g * group;
      float mn = 0.0f, mx = 0.0f;
      widen_range(x, group, mn, mx);
      float scale, zp = 0.0f;
      if (symmetric) {
        scale = round_scale(std::max(std::abs(mn), mx) / ((qmax - qmin) / 2.0f));
      } else {
        scale = round_scale((mx - mn) / (qmax - qmin));
        zp = scale != 0.0f ? std::min(std::max(round_even(qmin - mn / scale), qmin), qmax) : 0.0f;
      }
      const size_t cell = static_cast<size_t>(r * G + g);
      q.scales[cell] = f32_to_fp16(scale);
      if (scales_f32) (*scales_f32)[cell] = scale;
      q.zeros[cell] = static_cast<int32_t>(zp) + off;
      encode_group(x, group, scale, zp, qmin, qmax, off, q.codes.data() + r * k + g * group);
    }
  return q;
}

Fp8Rows fp8_e4m3_per_row(const float* w, int64_t n, int64_t k) {
  Fp8Rows f;
  f.codes.resize(static_cast<size_t>(n * k));
  f.scales.resize(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    const float* x = w + r * k;
    float amax = 0.0f;
    for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::abs(x[c]));
    const float scale = amax / 448.0f;
    f.scales[static_cast<size_t>(r)] = scale;
    for (int64_t c = 0; c < k; ++c)
      f.codes[static_cast<size_t>(r * k + c)] = scale != 0.0f ? f32_to_fp8_e4m3(x[c] / scale) : 0;
  }
  return f;
}

void fp8_rows_to_bf16(const Fp8Rows& f, int64_t n, int64_t k, uint16_t* out) {
  for (int64_t r = 0; r < n; ++r) {
    const float s = f.scales[static_cast<size_t>(r)];
    for (int64_t c = 0; c < k; ++c)
      out[r * k + c] = fp8_e4m3_scaled_to_bf16(f.codes[static_cast<size_t>(r * k + c)], s);
  }
}

}  // namespace pagoda::quant

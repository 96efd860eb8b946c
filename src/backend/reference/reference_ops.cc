#include "backend/reference/reference_ops.h"

#include <cmath>
#include <limits>

#include "common/check.h"
#include "common/half.h"

namespace pagoda::reference {

void rms_norm(const float* x, const float* w, int64_t T, int64_t D, double eps, float* out) {
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(x[t * D + i]) * x[t * D + i];
    const double inv = 1.0 / std::sqrt(ss / D + eps);
    for (int64_t i = 0; i < D; ++i) out[t * D + i] = static_cast<float>(x[t * D + i] * inv * w[i]);
  }
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void geglu_tanh(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * up[i]);
  }
}

void rope_head(float* x, int64_t rope_dim, int64_t pos, std::span<const double> inv_freq, RopeLayout layout) {
  const int64_t half = rope_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(pos) * inv_freq[i];
    const double c = std::cos(angle), s = std::sin(angle);
    const int64_t a = layout == RopeLayout::kInterleaved ? 2 * i : i;
    const int64_t b = layout == RopeLayout::kInterleaved ? 2 * i + 1 : i + half;
    const double x0 = x[a], x1 = x[b];
    x[a] = static_cast<float>(x0 * c - x1 * s);
    x[b] = static_cast<float>(x0 * s + x1 * c);
  }
}

namespace {
float load_elem(const void* base, DType dt, int64_t idx) {
  switch (dt) {
    case DType::kF32: return static_cast<const float*>(base)[idx];
    case DType::kF16: return fp16_to_f32(static_cast<const uint16_t*>(base)[idx]);
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(base)[idx]);
    default: PAGODA_CHECK(false, "kv dtype {}", dtype_name(dt));
  }
}
}  // namespace

float kv_read_k(const KvLayerView& c, int64_t slot, int64_t h, int64_t d) {
  const int64_t block = slot / c.block_size, off = slot % c.block_size;
  return load_elem(c.k, c.dtype, c.head_block_offset(block, h) + d * c.block_size + off);
}

float kv_read_v(const KvLayerView& c, int64_t slot, int64_t h, int64_t d) {
  const int64_t block = slot / c.block_size, off = slot % c.block_size;
  return load_elem(c.v, c.dtype, c.head_block_offset(block, h) + off * c.head_dim + d);
}

void dense_attention(const float* q, float* out, int64_t num_queries, int64_t context_len,
                     std::span<const int32_t> block_table, const KvLayerView& cache, int64_t num_heads, double scale,
                     int64_t sliding_window, double softcap) {
  const int64_t d = cache.head_dim, kvh = cache.num_kv_heads, group = num_heads / kvh;
  // Gather: dense K, V [context_len, kvh, d].
  std::vector<double> K(context_len * kvh * d), V(context_len * kvh * d);
  for (int64_t p = 0; p < context_len; ++p) {
    const int64_t slot = static_cast<int64_t>(block_table[p / cache.block_size]) * cache.block_size + p % cache.block_size;
    for (int64_t h = 0; h < kvh; ++h)
      for (int64_t i = 0; i < d; ++i) {
        K[(p * kvh + h) * d + i] = kv_read_k(cache, slot, h, i);
        V[(p * kvh + h) * d + i] = kv_read_v(cache, slot, h, i);
      }
  }
  std::vector<double> scores(context_len);
  for (int64_t t = 0; t < num_queries; ++t) {
    const int64_t pos = context_len - num_queries + t;
    const int64_t lo = sliding_window > 0 ? std::max<int64_t>(0, pos - sliding_window + 1) : 0;
    for (int64_t hq = 0; hq < num_heads; ++hq) {
      const int64_t h = hq / group;
      const float* qv = q + (t * num_heads + hq) * d;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t p = lo; p <= pos; ++p) {
        double s = 0;
        for (int64_t i = 0; i < d; ++i) s += qv[i] * K[(p * kvh + h) * d + i];
        scores[p] = s * scale;
        if (softcap > 0) scores[p] = softcap * std::tanh(scores[p] / softcap);
        mx = std::max(mx, scores[p]);
      }
      double sum = 0;
      for (int64_t p = lo; p <= pos; ++p) sum += (scores[p] = std::exp(scores[p] - mx));
      float* o = out + (t * num_heads + hq) * d;
      for (int64_t i = 0; i < d; ++i) {
        double acc = 0;
        for (int64_t p = lo; p <= pos; ++p) acc += scores[p] * V[(p * kvh + h) * d + i];
        o[i] = static_cast<float>(acc / sum);
      }
    }
  }
}

}  // namespace pagoda::reference

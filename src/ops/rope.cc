#include "ops/rope.h"

#include <cmath>
#include <numbers>

#include "backend/cpu/cpu_kernels.h"
#include "common/half.h"

namespace pagoda {

RopeTable::RopeTable(const RopeSpec& spec, int64_t max_positions, std::span<const float> freq_factors)
    : rope_dim_(spec.rope_dim), max_positions_(max_positions), layout_(spec.layout) {
  PAGODA_CHECK(rope_dim_ > 0 && rope_dim_ % 2 == 0 && max_positions_ > 0, "rope table dim {} positions {}", rope_dim_, max_positions_);
  const int64_t half = rope_dim_ / 2;
  PAGODA_CHECK(freq_factors.empty() || static_cast<int64_t>(freq_factors.size()) == half, "rope_freqs has {} entries, want {}",
               freq_factors.size(), half);
  PAGODA_CHECK(spec.scaling.kind != RopeScaling::Kind::kLongRope || !freq_factors.empty(),
               "longrope needs its per-frequency factors");
  // LongRoPE scales cos and sin (so q.k by its square); 1 for every other kind.
  const float mscale =
      spec.scaling.kind == RopeScaling::Kind::kLongRope ? static_cast<float>(spec.scaling.attention_factor) : 1.0f;
  inv_freq_.resize(half);
  const auto& rs = spec.scaling;
  for (int64_t i = 0; i < half; ++i) {
    // As transformers: exponent and power in f32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rope_dim_);
    double f = static_cast<float>(1.0 / static_cast<double>(std::pow(static_cast<float>(spec.theta), exponent)));
    if (!freq_factors.empty()) {
      f /= freq_factors[i];
    } else if (rs.kind == RopeScaling::Kind::kLinear) {
      f /= rs.factor;
    } else if (rs.kind == RopeScaling::Kind::kLlama3) {
      const double old_ctx = static_cast<double>(rs.original_max_position);
      const double low_wavelen = old_ctx / rs.low_freq_factor;
      const double high_wavelen = old_ctx / rs.high_freq_factor;
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f = f / rs.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_ctx / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        f = (1 - smooth) * f / rs.factor + smooth * f;
      }
    }
    inv_freq_[i] = static_cast<float>(f);
  }
  cos_.resize(max_positions_ * half);
  sin_.resize(max_positions_ * half);
  for (int64_t p = 0; p < max_positions_; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * static_cast<float>(inv_freq_[i]);  // f32 product, as torch
      cos_[p * half + i] = static_cast<float>(std::cos(static_cast<double>(angle))) * mscale;
      sin_[p * half + i] = static_cast<float>(std::sin(static_cast<double>(angle))) * mscale;
    }
  }
}

void RopeKvWriteParams::check() const {
  PAGODA_CHECK(q && k && v && rope, "rope_kv_write: missing input");
  const int64_t T = static_cast<int64_t>(positions.size());
  const int64_t d = cache.head_dim;
  PAGODA_CHECK(q->dtype() == DType::kF32 && q->ndim() == 2 && q->dim(0) == T && q->dim(1) == num_heads * d,
               "rope_kv_write q {} (T={}, heads={}, head_dim={})", q->shape_string(), T, num_heads, d);
  PAGODA_CHECK(k->dtype() == DType::kF32 && k->ndim() == 2 && k->dim(0) == T && k->dim(1) == cache.num_kv_heads * d,
               "rope_kv_write k {}", k->shape_string());
  PAGODA_CHECK(v->shape() == k->shape() && v->dtype() == DType::kF32, "rope_kv_write v {}", v->shape_string());
  PAGODA_CHECK(static_cast<int64_t>(slots.size()) == T, "rope_kv_write: {} slots for {} tokens", slots.size(), T);
  PAGODA_CHECK(rope->rope_dim() <= d, "rope dim {} > head_dim {}", rope->rope_dim(), d);
  PAGODA_CHECK(cache.dtype == DType::kF32 || cache.dtype == DType::kF16 || cache.dtype == DType::kBF16, "kv dtype {}",
               dtype_name(cache.dtype));
  PAGODA_CHECK(!q_norm || q_norm->numel() == d, "q_norm size");
  PAGODA_CHECK(!k_norm || k_norm->numel() == d, "k_norm size");
  for (int64_t t = 0; t < T; ++t) {
    PAGODA_CHECK(positions[t] >= 0 && positions[t] < rope->max_positions(), "position {} outside the rope table (max {})",
                 positions[t], rope->max_positions());
    PAGODA_CHECK(slots[t] < cache.num_blocks * cache.block_size, "slot {} outside the cache", slots[t]);
  }
}

namespace {

void rotate(float* x, const RopeTable& rope, int64_t pos) {
  const int64_t half = rope.rope_dim() / 2;
  const float* c = rope.cos(pos);
  const float* s = rope.sin(pos);
  if (rope.layout() == RopeLayout::kInterleaved) {
    for (int64_t i = 0; i < half; ++i) {
      const float x0 = x[2 * i], x1 = x[2 * i + 1];
      x[2 * i] = x0 * c[i] - x1 * s[i];
      x[2 * i + 1] = x0 * s[i] + x1 * c[i];
    }
  } else {
    for (int64_t i = 0; i < half; ++i) {
      const float x0 = x[i], x1 = x[i + half];
      x[i] = x0 * c[i] - x1 * s[i];
      x[i + half] = x0 * s[i] + x1 * c[i];
    }
  }
}

}  // namespace

void rope_kv_write(const RopeKvWriteParams& p, ThreadPool& pool) {
  p.check();
  const auto& kern = cpu::cpu_kernels();
  const int64_t T = static_cast<int64_t>(p.positions.size());
  const int64_t d = p.cache.head_dim, kvh = p.cache.num_kv_heads;
  const float eps = static_cast<float>(p.norm_eps);
  pool.parallel_for(T, 4, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t pos = p.positions[t];
      float* qrow = p.q->data_as<float>() + t * p.num_heads * d;
      for (int64_t h = 0; h < p.num_heads; ++h) {
        float* x = qrow + h * d;
        if (p.q_norm) kern.rms_norm_row(x, p.q_norm->data_as<float>(), d, eps, x);
        rotate(x, *p.rope, pos);
      }
      float* krow = p.k->data_as<float>() + t * kvh * d;
      const float* vrow = p.v->data_as<float>() + t * kvh * d;
      for (int64_t h = 0; h < kvh; ++h) {
        float* x = krow + h * d;
        if (p.k_norm) kern.rms_norm_row(x, p.k_norm->data_as<float>(), d, eps, x);
        rotate(x, *p.rope, pos);
      }
      const int64_t slot = p.slots[t];
      if (slot < 0) continue;
      kern.kv_write_token(p.cache, slot, krow, vrow);
    }
  });
}

}  // namespace pagoda

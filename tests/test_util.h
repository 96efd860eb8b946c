// Shared helpers for the op tests: random data, NMSE, ISA-level iteration.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/isa.h"
#include "common/cpu_features.h"
#include "model/model_config.h"

namespace pagoda::test {

// nmse = mse(out, ref) / mse(ref, 0); returns +inf if out has a NaN/Inf (checked first).
inline double nmse(const float* out, const float* ref, int64_t n) {
  double err = 0, pow = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    const double d = static_cast<double>(out[i]) - ref[i];
    err += d * d;
    pow += static_cast<double>(ref[i]) * ref[i];
  }
  return pow == 0 ? (err == 0 ? 0 : INFINITY) : err / pow;
}
inline double nmse(const std::vector<float>& out, const std::vector<float>& ref) {
  return nmse(out.data(), ref.data(), static_cast<int64_t>(std::min(out.size(), ref.size())));
}

inline std::vector<float> random_floats(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A one-layer config with just the attention shape (op tests of attention, RoPE and the KV cache).
inline ModelConfig attention_config(int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t max_positions = 4096) {
  ModelConfig c;
  c.vocab_size = 10;
  c.hidden_size = heads * head_dim;
  c.intermediate_size = 4;
  c.num_layers = 1;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.rope_dim = head_dim;
  c.max_position_embeddings = max_positions;
  return c;
}

// Every ISA level this machine can run and this build has kernels for, scalar first.
inline std::vector<IsaLevel> supported_isa_levels() { return cpu::supported_isa_levels(); }

// Caps the ISA level for the scope of a test case.
class ScopedIsaCap {
 public:
  explicit ScopedIsaCap(IsaLevel level) { set_isa_level_cap(level); }
  ~ScopedIsaCap() { set_isa_level_cap(IsaLevel::kAmx); }
};

}  // namespace pagoda::test

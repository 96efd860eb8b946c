#include "ops/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/activation.h"

namespace pagoda {
namespace {

int64_t rows_of(const LinearWeight& w) { return linear_weight_tensor(w).dim(0); }
int64_t cols_of(const LinearWeight& w) { return linear_weight_tensor(w).dim(1); }

// An f32 [rows, cols] view of the flat buffer `buf`, grown when too small (the view does not own it).
Tensor rows_view(Tensor& buf, int64_t rows, int64_t cols) {
  const int64_t n = std::max<int64_t>(rows * cols, 1);
  if (!buf.defined() || buf.numel() < n) buf = Tensor::empty(DType::kF32, {n});
  return Tensor::view(DType::kF32, {rows, cols}, buf.data(), nullptr);
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

void moe_route(const float* logits, int64_t T, int64_t E, int64_t k, bool normalize_top_k, int32_t* ids,
               float* weights) {
  std::vector<float> p(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits + t * E;
    float mx = l[0];
    for (int64_t e = 1; e < E; ++e) mx = std::max(mx, l[e]);
    double sum = 0;
    for (int64_t e = 0; e < E; ++e) {
      p[e] = std::exp(l[e] - mx);
      sum += p[e];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t e = 0; e < E; ++e) p[e] *= inv;
    // Selection of the k largest (k is small): repeated scans, ties to the lower index.
    int32_t* id = ids + t * k;
    float* w = weights + t * k;
    float kept = 0;
    for (int64_t j = 0; j < k; ++j) {
      int32_t best = -1;
      for (int64_t e = 0; e < E; ++e) {
        bool taken = false;
        for (int64_t i = 0; i < j; ++i) taken = taken || id[i] == e;
        if (taken) continue;
        if (best < 0 || p[e] > p[best]) best = static_cast<int32_t>(e);
      }
      id[j] = best;
      w[j] = p[best];
      kept += p[best];
    }
    if (normalize_top_k)
      for (int64_t j = 0; j < k; ++j) w[j] /= kept;
  }
}

void moe_mlp(const MoeWeights& w, const Tensor& x, Tensor& out, MoeScratch& s, ThreadPool& pool) {
  PAGODA_CHECK(w.router != nullptr && !w.experts.empty(), "moe_mlp: no router or experts");
  const int64_t T = x.dim(0), D = x.dim(1), E = static_cast<int64_t>(w.experts.size()), k = w.top_k;
  PAGODA_CHECK(x.dtype() == DType::kF32 && out.dtype() == DType::kF32 && x.ndim() == 2 && out.shape() == x.shape(),
               "moe_mlp: x {} out {}", x.shape_string(), out.shape_string());
  PAGODA_CHECK(rows_of(*w.router) == E && cols_of(*w.router) == D, "moe_mlp: router {} for {} experts of width {}",
               linear_weight_tensor(*w.router).shape_string(), E, D);
  PAGODA_CHECK(k >= 1 && k <= E, "moe_mlp: top-k {} of {} experts", k, E);
  const int64_t F = cols_of(*w.experts[0].down);
  for (const MoeExpertWeights& e : w.experts)
    PAGODA_CHECK(e.gate_up != nullptr && e.down != nullptr && rows_of(*e.gate_up) == 2 * F && cols_of(*e.gate_up) == D &&
                     rows_of(*e.down) == D && cols_of(*e.down) == F,
                 "moe_mlp: an expert's weights do not match [2F, D] / [D, F] with F = {}, D = {}", F, D);

  // 1. Routing.
  s.logits.resize(static_cast<size_t>(T * E));
  s.ids.resize(static_cast<size_t>(T * k));
  s.weights.resize(static_cast<size_t>(T * k));
  linear(*w.router, x.data_as<const float>(), T, s.logits.data(), pool);
  pool.parallel_for(T, 8, [&](int64_t b, int64_t e) {
    moe_route(s.logits.data() + b * E, e - b, E, k, w.normalize_top_k, s.ids.data() + b * k, s.weights.data() + b * k);
  });

  // 2. Counting sort of the (token, slot) pairs by expert; tokens ascend within an expert.
  s.offsets.assign(static_cast<size_t>(E + 1), 0);
  for (int64_t i = 0; i < T * k; ++i) ++s.offsets[static_cast<size_t>(s.ids[i]) + 1];
  for (int64_t e = 0; e < E; ++e) s.offsets[e + 1] += s.offsets[e];
  s.order.resize(static_cast<size_t>(T * k));
  {
    std::vector<int32_t> fill(s.offsets.begin(), s.offsets.end() - 1);
    for (int64_t i = 0; i < T * k; ++i) s.order[static_cast<size_t>(fill[s.ids[i]]++)] = static_cast<int32_t>(i);
  }
  s.expert_tokens.assign(static_cast<size_t>(E), 0);
  for (int64_t e = 0; e < E; ++e) s.expert_tokens[e] = s.offsets[e + 1] - s.offsets[e];

  // 3. The shared expert (or zeros) first.
  float* o = out.data_as<float>();
  const float* xs = x.data_as<const float>();
  if (w.shared_gate_up != nullptr) {
    PAGODA_CHECK(w.shared_down != nullptr && w.shared_gate != nullptr, "moe_mlp: shared expert without down or gate");
    const int64_t Fs = cols_of(*w.shared_down);
    Tensor gu = rows_view(s.gate_up, T, 2 * Fs);
    Tensor act = rows_view(s.act, T, Fs);
    Tensor g = rows_view(s.shared_gate, T, 1);
    linear(*w.shared_gate_up, x, gu, pool);
    swiglu_fused(gu, act, pool);
    linear(*w.shared_down, act, out, pool);
    linear(*w.shared_gate, x, g, pool);
    const float* gp = g.data_as<const float>();
    pool.parallel_for(T, 4, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const float sg = sigmoid(gp[t]);
        for (int64_t d = 0; d < D; ++d) o[t * D + d] *= sg;
      }
    });
  } else {
    std::memset(o, 0, static_cast<size_t>(T * D) * sizeof(float));
  }

  // 4. Each expert over the gathered rows of its tokens, its weighted outputs added into theirs.
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = s.expert_tokens[e];
    if (n == 0) continue;
    const int32_t* pairs = s.order.data() + s.offsets[e];
    Tensor rows = rows_view(s.rows, n, D);
    Tensor gu = rows_view(s.gate_up, n, 2 * F);
    Tensor act = rows_view(s.act, n, F);
    Tensor y = rows_view(s.out_rows, n, D);
    float* r = rows.data_as<float>();
    pool.parallel_for(n, 16, [&](int64_t b, int64_t end) {
      for (int64_t i = b; i < end; ++i)
        std::memcpy(r + i * D, xs + static_cast<int64_t>(pairs[i] / k) * D, static_cast<size_t>(D) * sizeof(float));
    });
    linear(*w.experts[e].gate_up, rows, gu, pool);
    swiglu_fused(gu, act, pool);
    linear(*w.experts[e].down, act, y, pool);
    const float* yp = y.data_as<const float>();
    pool.parallel_for(n, 16, [&](int64_t b, int64_t end) {
      for (int64_t i = b; i < end; ++i) {
        const int64_t t = pairs[i] / k;
        const float g = s.weights[static_cast<size_t>(pairs[i])];
        for (int64_t d = 0; d < D; ++d) o[t * D + d] += g * yp[i * D + d];
      }
    });
  }
}

}  // namespace pagoda

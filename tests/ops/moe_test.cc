// Tier 2 (ops): the mixture-of-experts MLP (ops/moe.h) against a plain double-precision reference
// on the dequantized weights: routing (softmax, top-k, optional renormalisation), the experts'
// SwiGLU, the sigmoid-gated shared expert. Weight dtypes f32 / f16 / bf16 and GGUF quants, token
// counts from decode (1) to prefill (64), batches that route to every expert and batches whose
// tokens all go to one expert. NMSE budgets: float weights exact up to f32 rounding (linear_test's
// 1e-11); quantized weights 3e-4, three times linear_test's single-matmul 1e-4: an expert is two
// chained integer matmuls, each quantizing its input to 8 bits, the second's input the SwiGLU
// output (measured 1.3e-4 to 1.7e-4 here).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "ops/linear.h"
#include "ops/moe.h"
#include "quant/quant.h"
#include "test_util.h"

namespace pagoda {
namespace {

constexpr int64_t D = 256, F = 256, Fs = 256, E = 8;

std::vector<float> gaussian(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// A weight of dtype t from f32 values, and its dequantized values (what the reference multiplies).
struct Weight {
  std::shared_ptr<const LinearWeight> prepared;
  std::vector<float> values;  // [n, k] dequantized
  int64_t n = 0, k = 0;
};

Weight make_weight(DType t, int64_t n, int64_t k, std::vector<float> src) {
  Tensor w = Tensor::empty(t, {n, k});
  for (int64_t r = 0; r < n; ++r) quant::quantize_row(t, src.data() + r * k, w.row_ptr(r), k);
  Weight out;
  out.n = n;
  out.k = k;
  out.values.resize(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r) quant::dequantize_row(t, w.row_ptr(r), out.values.data() + r * k, k);
  auto p = prepare_linear(w, "w");
  PAGODA_CHECK(p.ok(), "{}", p.status().to_string());
  out.prepared = *p;
  return out;
}

std::vector<double> matvec(const Weight& w, const float* x) {
  std::vector<double> y(static_cast<size_t>(w.n));
  for (int64_t r = 0; r < w.n; ++r) {
    double s = 0;
    for (int64_t i = 0; i < w.k; ++i) s += static_cast<double>(w.values[r * w.k + i]) * x[i];
    y[r] = s;
  }
  return y;
}

// swiglu MLP of one token in double: down(silu(gate x) * up x), gate_up [2F', D].
std::vector<double> mlp(const Weight& gate_up, const Weight& down, const float* x) {
  const auto gu = matvec(gate_up, x);
  const int64_t f = gate_up.n / 2;
  std::vector<float> act(static_cast<size_t>(f));
  for (int64_t i = 0; i < f; ++i) act[i] = static_cast<float>(gu[i] / (1.0 + std::exp(-gu[i])) * gu[f + i]);
  return matvec(down, act.data());
}

struct Layer {
  Weight router;
  std::vector<Weight> gate_up, down;
  Weight shared_gate_up, shared_down, shared_gate;
  bool shared = false;
  MoeWeights view(int64_t top_k, bool normalize) const {
    MoeWeights w;
    w.router = router.prepared.get();
    for (int64_t e = 0; e < E; ++e) w.experts.push_back({gate_up[e].prepared.get(), down[e].prepared.get()});
    w.top_k = top_k;
    w.normalize_top_k = normalize;
    if (shared) {
      w.shared_gate_up = shared_gate_up.prepared.get();
      w.shared_down = shared_down.prepared.get();
      w.shared_gate = shared_gate.prepared.get();
    }
    return w;
  }
};

// Experts and shared expert in dtype t; the router f32 (llama.cpp's quantizer keeps ffn_gate_inp
// in float; a quantized router's near-ties would make the top-k choice of the reference and of the
// kernel differ by more than any error budget). `router` overrides the router's values.
Layer make_layer(DType t, bool shared, uint32_t seed, std::vector<float> router = {}) {
  Layer l;
  if (router.empty()) router = gaussian(E * D, seed, 2.0f / std::sqrt(static_cast<float>(D)));
  l.router = make_weight(DType::kF32, E, D, router);
  for (int64_t e = 0; e < E; ++e) {
    l.gate_up.push_back(make_weight(t, 2 * F, D, gaussian(2 * F * D, seed + 10 + e, 1.0f / 16)));
    l.down.push_back(make_weight(t, D, F, gaussian(D * F, seed + 100 + e, 1.0f / 16)));
  }
  l.shared = shared;
  if (shared) {
    l.shared_gate_up = make_weight(t, 2 * Fs, D, gaussian(2 * Fs * D, seed + 200, 1.0f / 16));
    l.shared_down = make_weight(t, D, Fs, gaussian(D * Fs, seed + 201, 1.0f / 16));
    l.shared_gate = make_weight(DType::kF32, 1, D, gaussian(D, seed + 202, 1.0f / 16));
  }
  return l;
}

// The reference output [T, D] and the number of tokens each expert received.
std::vector<float> reference(const Layer& l, const std::vector<float>& x, int64_t T, int64_t k, bool normalize,
                             std::vector<int64_t>* counts) {
  std::vector<float> out(static_cast<size_t>(T * D));
  counts->assign(E, 0);
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x.data() + t * D;
    const auto logits = matvec(l.router, xt);
    const double mx = *std::max_element(logits.begin(), logits.end());
    std::vector<double> p(E);
    double sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += p[e] = std::exp(logits[e] - mx);
    for (auto& v : p) v /= sum;
    std::vector<int64_t> order(E);
    for (int64_t e = 0; e < E; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    double kept = 0;
    for (int64_t j = 0; j < k; ++j) kept += p[order[j]];
    std::vector<double> y(D, 0.0);
    if (l.shared) {
      const auto s = mlp(l.shared_gate_up, l.shared_down, xt);
      const double g = 1.0 / (1.0 + std::exp(-matvec(l.shared_gate, xt)[0]));
      for (int64_t d = 0; d < D; ++d) y[d] += g * s[d];
    }
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = order[j];
      ++(*counts)[e];
      const double w = normalize ? p[e] / kept : p[e];
      const auto ye = mlp(l.gate_up[e], l.down[e], xt);
      for (int64_t d = 0; d < D; ++d) y[d] += w * ye[d];
    }
    for (int64_t d = 0; d < D; ++d) out[t * D + d] = static_cast<float>(y[d]);
  }
  return out;
}

std::vector<float> run(const Layer& l, const std::vector<float>& x, int64_t T, int64_t k, bool normalize,
                       std::vector<int64_t>* counts, ThreadPool& pool) {
  Tensor xt = Tensor::empty(DType::kF32, {T, D});
  std::copy(x.begin(), x.end(), xt.data_as<float>());
  Tensor out = Tensor::empty(DType::kF32, {T, D});
  MoeScratch s;
  moe_mlp(l.view(k, normalize), xt, out, s, pool);
  *counts = s.expert_tokens;
  return {out.data_as<float>(), out.data_as<float>() + T * D};
}

struct Case {
  DType t;
  double budget;
};

class MoeTest : public ::testing::TestWithParam<Case> {};

TEST_P(MoeTest, MatchesReferenceAtDecodeAndPrefill) {
  const Case c = GetParam();
  ThreadPool pool(2);
  for (bool shared : {false, true}) {
    const Layer l = make_layer(c.t, shared, 7);
    for (int64_t T : {1, 3, 9, 64}) {
      for (auto [k, normalize] : {std::pair<int64_t, bool>{2, true}, {2, false}, {3, false}, {1, true}}) {
        SCOPED_TRACE(testing::Message() << dtype_name(c.t) << " T=" << T << " k=" << k << " normalize=" << normalize
                                        << " shared=" << shared);
        const auto x = gaussian(T * D, static_cast<uint32_t>(1000 + T), 1.0f);
        std::vector<int64_t> want_counts, got_counts;
        const auto want = reference(l, x, T, k, normalize, &want_counts);
        const auto got = run(l, x, T, k, normalize, &got_counts, pool);
        EXPECT_EQ(got_counts, want_counts) << "the kernel routed tokens to other experts than the reference";
        EXPECT_LE(test::nmse(got, want), c.budget);
        if (T == 64) {
          // Random routing of 64 tokens reaches every expert (the grouped path runs all of them).
          for (int64_t e = 0; e < E; ++e) EXPECT_GT(got_counts[e], 0) << "expert " << e << " received no token";
        }
      }
    }
  }
}

TEST_P(MoeTest, EveryTokenToOneExpert) {
  // Positive activations and a router whose row 5 is a large positive constant: every token's
  // top-1 is expert 5 (k = 1: one expert runs, on all 40 tokens; k = 2: the second varies).
  const Case c = GetParam();
  ThreadPool pool(2);
  std::vector<float> router = gaussian(E * D, 3, 0.01f);
  for (int64_t i = 0; i < D; ++i) router[5 * D + i] = 0.05f;
  const Layer l = make_layer(c.t, false, 11, router);
  const int64_t T = 40;
  std::vector<float> x = gaussian(T * D, 5, 1.0f);
  for (auto& v : x) v = std::abs(v) + 0.1f;
  for (int64_t k : {1, 2}) {
    SCOPED_TRACE(testing::Message() << dtype_name(c.t) << " k=" << k);
    std::vector<int64_t> want_counts, got_counts;
    const auto want = reference(l, x, T, k, true, &want_counts);
    const auto got = run(l, x, T, k, true, &got_counts, pool);
    EXPECT_EQ(got_counts[5], T);
    if (k == 1)
      for (int64_t e = 0; e < E; ++e)
        if (e != 5) EXPECT_EQ(got_counts[e], 0);
    EXPECT_EQ(got_counts, want_counts);
    EXPECT_LE(test::nmse(got, want), c.budget);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MoeTest,
                         ::testing::Values(Case{DType::kF32, 1e-11}, Case{DType::kF16, 1e-11}, Case{DType::kBF16, 1e-11},
                                           Case{DType::kQ8_0, 3e-4}, Case{DType::kQ4_0, 3e-4}, Case{DType::kQ4_K, 3e-4},
                                           Case{DType::kQ6_K, 3e-4}),
                         [](const auto& info) { return std::string(dtype_name(info.param.t)); });

TEST(MoeRoute, TopKTiesAndNormalisation) {
  // Logits with a tie between experts 1 and 3: the lower index first.
  const float logits[] = {0.0f, 2.0f, -1.0f, 2.0f, 1.0f};
  int32_t ids[3];
  float w[3];
  moe_route(logits, 1, 5, 3, false, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 3);
  EXPECT_EQ(ids[2], 4);
  double z = 0;
  for (float l : logits) z += std::exp(l - 2.0);
  EXPECT_NEAR(w[0], 1.0 / z, 1e-6);
  EXPECT_NEAR(w[2], std::exp(-1.0) / z, 1e-6);
  moe_route(logits, 1, 5, 3, true, ids, w);
  EXPECT_NEAR(w[0] + w[1] + w[2], 1.0, 1e-6);
  EXPECT_NEAR(w[0] / w[2], std::exp(1.0), 1e-5);
}

}  // namespace
}  // namespace pagoda

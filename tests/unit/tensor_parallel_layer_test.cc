// The tensor-parallel plan's slicing, checked numerically before any GPU runs it: one decoder
// layer (RMSNorm, GQA attention with half-split RoPE over a causal prompt, SwiGLU MLP) of a small
// random model in plain f32, computed whole and then per rank from the weights sliced as
// plan_tensor_parallel() says, the ranks' partial o and down outputs summed as the all-reduce
// would, and the vocabulary-parallel output head's per-rank logits gathered and argmaxed as the
// distributed argmax would. Tolerance: |sharded - whole| <= 1e-4 x (1 + max |whole|) (f32; only the
// summation order of the o / down products differs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <stdexcept>
#include <random>

#include "model/tensor_parallel_plan.h"

namespace pagoda {
namespace {

using Mat = std::vector<float>;  // row-major, shape by context

struct Weights {
  std::map<std::string, Mat> full;  // by GGUF name, in the declared shape
};

Weights random_weights(const std::vector<TensorDecl>& table, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, 0.2f);
  Weights w;
  for (const TensorDecl& d : table) {
    int64_t e = 1;
    for (int64_t x : d.shape) e *= x;
    Mat m(static_cast<size_t>(e));
    const bool norm = d.shape.size() == 1 && d.gguf_name.find("norm") != std::string::npos;
    for (float& v : m) v = norm ? 1.f + 0.1f * n(rng) : n(rng);
    w.full[d.gguf_name] = std::move(m);
  }
  return w;
}

// The rank's part of a 1-d or 2-d tensor [rows, cols], concatenating `s.ranges` along s.dim.
Mat slice(const Mat& m, const TensorShard& s) {
  if (s.kind == ShardKind::kReplicated) return m;
  const auto& sh = s.decl.shape;
  const int64_t rows = sh[0], cols = sh.size() > 1 ? sh[1] : 1;
  Mat out;
  if (s.dim == 0) {
    for (const ShardRange& r : s.ranges)
      out.insert(out.end(), m.begin() + r.offset * cols, m.begin() + (r.offset + r.length) * cols);
  } else {
    for (int64_t i = 0; i < rows; ++i)
      for (const ShardRange& r : s.ranges)
        out.insert(out.end(), m.begin() + i * cols + r.offset, m.begin() + i * cols + r.offset + r.length);
  }
  return out;
}

// y[T, N] = x[T, K] W[N, K]^T (+ b[N])
Mat matmul(const Mat& x, const Mat& w, int64_t T, int64_t N, int64_t K, const Mat* b = nullptr) {
  Mat y(static_cast<size_t>(T * N));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double acc = b ? (*b)[static_cast<size_t>(n)] : 0.0;
      for (int64_t k = 0; k < K; ++k) acc += double(x[static_cast<size_t>(t * K + k)]) * w[static_cast<size_t>(n * K + k)];
      y[static_cast<size_t>(t * N + n)] = static_cast<float>(acc);
    }
  return y;
}

Mat rms_norm(const Mat& x, const Mat& g, int64_t T, int64_t D, double eps) {
  Mat y(x.size());
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += double(x[static_cast<size_t>(t * D + i)]) * x[static_cast<size_t>(t * D + i)];
    const double r = 1.0 / std::sqrt(ss / D + eps);
    for (int64_t i = 0; i < D; ++i)
      y[static_cast<size_t>(t * D + i)] = static_cast<float>(x[static_cast<size_t>(t * D + i)] * r * g[static_cast<size_t>(i)]);
  }
  return y;
}

// Half-split RoPE on `heads` heads of width hd, token t at position t.
void rope(Mat& x, int64_t T, int64_t heads, int64_t hd, double theta) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < hd / 2; ++i) {
        const double a = t * std::pow(theta, -2.0 * i / hd);
        float& x0 = x[static_cast<size_t>((t * heads + h) * hd + i)];
        float& x1 = x[static_cast<size_t>((t * heads + h) * hd + i + hd / 2)];
        const double r0 = x0 * std::cos(a) - x1 * std::sin(a), r1 = x0 * std::sin(a) + x1 * std::cos(a);
        x0 = static_cast<float>(r0);
        x1 = static_cast<float>(r1);
      }
}

// What one rank (or the whole model: the size-1 plan) computes of one layer: its partial o and
// down products. `global_kv_of_head(h)` maps a global query head to its global KV head.
struct LayerParts {
  const Mat *attn_norm, *ffn_norm, *wq, *wk, *wv, *wo, *gate, *up, *down;
  const Mat *bq = nullptr, *bk = nullptr, *bv = nullptr;
};

struct Dims {
  int64_t T, D, hd, group;  // group: query heads per KV head (whole model)
  double eps, theta;
};

Mat attention_partial(const Mat& x, const LayerParts& p, const RankShards& r, const Dims& d) {
  const int64_t Hq = r.num_heads, Hk = r.num_kv_heads, T = d.T, hd = d.hd;
  const Mat h = rms_norm(x, *p.attn_norm, T, d.D, d.eps);
  Mat q = matmul(h, *p.wq, T, Hq * hd, d.D, p.bq);
  Mat k = matmul(h, *p.wk, T, Hk * hd, d.D, p.bk);
  const Mat v = matmul(h, *p.wv, T, Hk * hd, d.D, p.bv);
  rope(q, T, Hq, hd, d.theta);
  rope(k, T, Hk, hd, d.theta);
  Mat att(static_cast<size_t>(T * Hq * hd), 0.f);
  for (int64_t j = 0; j < Hq; ++j) {
    const int64_t kvj = (r.first_head + j) / d.group - r.first_kv_head;  // the rank's slot of the head's KV head
    EXPECT_GE(kvj, 0);
    EXPECT_LT(kvj, Hk);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> s(static_cast<size_t>(t + 1));
      double mx = -1e300, sum = 0;
      for (int64_t u = 0; u <= t; ++u) {
        double dot = 0;
        for (int64_t i = 0; i < hd; ++i)
          dot += double(q[static_cast<size_t>((t * Hq + j) * hd + i)]) * k[static_cast<size_t>((u * Hk + kvj) * hd + i)];
        s[static_cast<size_t>(u)] = dot / std::sqrt(double(hd));
        mx = std::max(mx, s[static_cast<size_t>(u)]);
      }
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (int64_t i = 0; i < hd; ++i) {
        double acc = 0;
        for (int64_t u = 0; u <= t; ++u) acc += s[static_cast<size_t>(u)] / sum * v[static_cast<size_t>((u * Hk + kvj) * hd + i)];
        att[static_cast<size_t>((t * Hq + j) * hd + i)] = static_cast<float>(acc);
      }
    }
  }
  return matmul(att, *p.wo, T, d.D, Hq * hd);
}

Mat mlp_partial(const Mat& x, const LayerParts& p, int64_t F, const Dims& d) {
  const Mat h = rms_norm(x, *p.ffn_norm, d.T, d.D, d.eps);
  const Mat g = matmul(h, *p.gate, d.T, F, d.D), u = matmul(h, *p.up, d.T, F, d.D);
  Mat a(g.size());
  for (size_t i = 0; i < g.size(); ++i) a[i] = static_cast<float>(g[i] / (1.0 + std::exp(-double(g[i]))) * u[i]);
  return matmul(a, *p.down, d.T, d.D, F);
}

struct Run {
  Mat out;                      // the layer's output [T, D]
  std::vector<int64_t> argmax;  // the output head's greedy token per row
};

// The rank's part of a stacked expert tensor [E, N, K] split along dim 1 (N) or 2 (K).
Mat slice_experts(const Mat& m, const TensorShard& s) {
  const int64_t E = s.decl.shape[0], N = s.decl.shape[1], K = s.decl.shape[2];
  EXPECT_EQ(s.ranges.size(), 1u);
  const ShardRange r = s.ranges[0];
  Mat out;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t n = 0; n < N; ++n) {
      if (s.dim == 1 && (n < r.offset || n >= r.offset + r.length)) continue;
      const auto row = m.begin() + (e * N + n) * K;
      if (s.dim == 1) out.insert(out.end(), row, row + K);
      else out.insert(out.end(), row + r.offset, row + r.offset + r.length);
    }
  return out;
}

// One layer then the output head, per the plan: each rank's partials summed (the all-reduce), the
// vocabulary-parallel logits' per-rank (max, index) reduced to the lowest index of the largest.
// `swap_o`: give rank r rank (r+1)'s o slice (a wrong plan the check must catch).
Run run_layer(const ModelConfig& c, const TensorParallelPlan& plan, const Weights& w, const Mat& x, bool swap_o = false) {
  const Dims d{static_cast<int64_t>(x.size()) / c.hidden_size, c.hidden_size, c.head_dim, c.num_heads / c.num_kv_heads,
               c.rms_norm_eps, c.rope_theta};
  const bool fused = c.family == ArchFamily::kPhi3;
  std::vector<std::map<std::string, Mat>> local(plan.ranks.size());
  for (size_t r = 0; r < plan.ranks.size(); ++r)
    for (const TensorShard& s : plan.ranks[r].tensors) local[r][s.decl.gguf_name] = slice(w.full.at(s.decl.gguf_name), s);
  if (swap_o)
    for (size_t r = 0; r + 1 < local.size(); r += 2) std::swap(local[r]["blk.0.attn_output.weight"], local[r + 1]["blk.0.attn_output.weight"]);
  Mat attn_sum(x.size(), 0.f), mlp_sum(x.size(), 0.f);
  std::vector<std::map<std::string, Mat>> split(plan.ranks.size());  // fused tensors cut into their parts
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const RankShards& rs = plan.ranks[r];
    auto& L = local[r];
    const int64_t qn = rs.num_heads * d.hd * d.D, kn = rs.num_kv_heads * d.hd * d.D, fn = rs.intermediate_size * d.D;
    auto& S = split[r];
    if (fused) {
      const Mat& qkv = L.at("blk.0.attn_qkv.weight");
      S["q"].assign(qkv.begin(), qkv.begin() + qn);
      S["k"].assign(qkv.begin() + qn, qkv.begin() + qn + kn);
      S["v"].assign(qkv.begin() + qn + kn, qkv.end());
      const Mat& gu = L.at("blk.0.ffn_up.weight");
      S["gate"].assign(gu.begin(), gu.begin() + fn);
      S["up"].assign(gu.begin() + fn, gu.end());
    }
    LayerParts p{&L.at("blk.0.attn_norm.weight"), &L.at("blk.0.ffn_norm.weight"),
                 fused ? &S["q"] : &L.at("blk.0.attn_q.weight"), fused ? &S["k"] : &L.at("blk.0.attn_k.weight"),
                 fused ? &S["v"] : &L.at("blk.0.attn_v.weight"), &L.at("blk.0.attn_output.weight"),
                 fused ? &S["gate"] : &L.at("blk.0.ffn_gate.weight"), fused ? &S["up"] : &L.at("blk.0.ffn_up.weight"),
                 &L.at("blk.0.ffn_down.weight")};
    if (c.attention_bias) {
      p.bq = &L.at("blk.0.attn_q.bias");
      p.bk = &L.at("blk.0.attn_k.bias");
      p.bv = &L.at("blk.0.attn_v.bias");
    }
    const Mat a = attention_partial(x, p, rs, d);
    for (size_t i = 0; i < a.size(); ++i) attn_sum[i] += a[i];
  }
  Mat x1 = x;
  for (size_t i = 0; i < x1.size(); ++i) x1[i] += attn_sum[i];  // residual after the all-reduce
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    auto& L = local[r];
    auto& S = split[r];
    LayerParts p{&L.at("blk.0.attn_norm.weight"), &L.at("blk.0.ffn_norm.weight"), nullptr, nullptr, nullptr, nullptr,
                 fused ? &S["gate"] : &L.at("blk.0.ffn_gate.weight"), fused ? &S["up"] : &L.at("blk.0.ffn_up.weight"),
                 &L.at("blk.0.ffn_down.weight")};
    const Mat m = mlp_partial(x1, p, plan.ranks[r].intermediate_size, d);
    for (size_t i = 0; i < m.size(); ++i) mlp_sum[i] += m[i];
  }
  Run run;
  run.out = x1;
  for (size_t i = 0; i < x1.size(); ++i) run.out[i] += mlp_sum[i];
  // Output head: vocabulary-parallel (tied: the embedding's rows), distributed argmax.
  const Mat hn = rms_norm(run.out, w.full.at("output_norm.weight"), d.T, d.D, d.eps);
  const std::string head = c.tie_word_embeddings ? "token_embd.weight" : "output.weight";
  run.argmax.assign(static_cast<size_t>(d.T), -1);
  std::vector<float> best(static_cast<size_t>(d.T), -INFINITY);
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const RankShards& rs = plan.ranks[r];
    const int64_t n = rs.vocab_end - rs.vocab_begin;
    const Mat logits = matmul(hn, local[r].at(head), d.T, n, d.D);
    for (int64_t t = 0; t < d.T; ++t)
      for (int64_t i = 0; i < n; ++i) {  // ranks in order, strict >: ties to the lowest index
        const float v = logits[static_cast<size_t>(t * n + i)];
        if (v > best[static_cast<size_t>(t)]) best[static_cast<size_t>(t)] = v, run.argmax[static_cast<size_t>(t)] = rs.vocab_begin + i;
      }
  }
  return run;
}

ModelConfig small(ArchFamily fam, int64_t H, int64_t KV) {
  ModelConfig c;
  c.family = fam;
  c.arch_name = arch_family_name(fam);
  c.vocab_size = 301;  // not a multiple of the ranks: padded
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_layers = 1;
  c.num_heads = H;
  c.num_kv_heads = KV;
  c.head_dim = 16;
  c.rope_dim = 16;
  c.max_position_embeddings = 64;
  return c;
}

void check_model(const ModelConfig& c, const std::vector<int>& sizes) {
  auto whole = plan_tensor_parallel(c, 1);
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  const Weights w = random_weights(whole->table, 7);
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.f, 1.f);
  Mat x(static_cast<size_t>(5 * c.hidden_size));  // 5 tokens of a causal prompt
  for (float& v : x) v = n(rng);
  const Run ref = run_layer(c, *whole, w, x);
  float mx = 0;
  for (float v : ref.out) mx = std::max(mx, std::fabs(v));
  const float tol = 1e-4f * (1 + mx);
  for (int size : sizes) {
    SCOPED_TRACE(std::string(arch_family_name(c.family)) + " tp " + std::to_string(size));
    auto plan = plan_tensor_parallel(c, size);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    const Run got = run_layer(c, *plan, w, x);
    float err = 0;
    for (size_t i = 0; i < ref.out.size(); ++i) err = std::max(err, std::fabs(got.out[i] - ref.out[i]));
    EXPECT_LE(err, tol) << "max |sharded - whole|";
    EXPECT_EQ(got.argmax, ref.argmax);
    // The check can fail: ranks holding each other's o slices give another output.
    const Run wrong = run_layer(c, *plan, w, x, /*swap_o=*/true);
    float werr = 0;
    for (size_t i = 0; i < ref.out.size(); ++i) werr = std::max(werr, std::fabs(wrong.out[i] - ref.out[i]));
    EXPECT_GT(werr, 100 * tol) << "a swapped o slice went unnoticed";
  }
}

TEST(TensorParallelLayer, LlamaGqaMatchesTheWholeLayerAtTwoAndFourRanks) {
  check_model(small(ArchFamily::kLlama, 4, 4), {2, 4});  // MHA-like: one KV head per query head
  check_model(small(ArchFamily::kLlama, 8, 4), {2, 4});  // GQA groups of 2
}

TEST(TensorParallelLayer, ReplicatedKvHeadsWithBiasesMatchAtFourRanks) {
  ModelConfig c = small(ArchFamily::kQwen2, 8, 2);  // 2 KV heads at 4 ranks: each on 2 ranks
  c.attention_bias = true;
  c.tie_word_embeddings = true;
  check_model(c, {2, 4});
}

// The MoE MLP (router replicated, each expert's width split) and the vocabulary-parallel embedding:
// each rank's partial down products summed, and each rank's embedding rows (zeros outside its
// range) summed, equal the whole computation.
TEST(TensorParallelLayer, MoeExpertsAndEmbeddingMatch) {
  ModelConfig c = small(ArchFamily::kMixtral, 8, 4);
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.expert_intermediate_size = 32;
  c.norm_topk_prob = true;
  auto whole = plan_tensor_parallel(c, 1);
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  const Weights w = random_weights(whole->table, 5);
  const int64_t T = 6, D = c.hidden_size, E = c.num_experts;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  Mat h(static_cast<size_t>(T * D));
  for (float& v : h) v = nd(rng);
  // Routing is computed whole on every rank (the router is replicated): the same experts and weights.
  const Mat router = matmul(h, w.full.at("blk.0.ffn_gate_inp.weight"), T, E, D);
  std::vector<std::vector<std::pair<int64_t, double>>> routes(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int64_t> idx(static_cast<size_t>(E));
    std::iota(idx.begin(), idx.end(), 0);
    const float* lg = &router[static_cast<size_t>(t * E)];
    std::partial_sort(idx.begin(), idx.begin() + 2, idx.end(), [&](int64_t a, int64_t b) { return lg[a] > lg[b]; });
    const double w0 = 1.0, w1 = std::exp(double(lg[idx[1]]) - lg[idx[0]]);
    routes[static_cast<size_t>(t)] = {{idx[0], w0 / (w0 + w1)}, {idx[1], w1 / (w0 + w1)}};
  }
  // Experts of width F given as [E, F, D] gate / up and [E, D, F] down.
  auto moe = [&](const Mat& gate, const Mat& up, const Mat& down, int64_t F) {
    Mat y(static_cast<size_t>(T * D), 0.f);
    for (int64_t t = 0; t < T; ++t)
      for (const auto& [e, rw] : routes[static_cast<size_t>(t)]) {
        const Mat x(h.begin() + t * D, h.begin() + (t + 1) * D);
        const Mat g = matmul(x, Mat(gate.begin() + e * F * D, gate.begin() + (e + 1) * F * D), 1, F, D);
        const Mat u = matmul(x, Mat(up.begin() + e * F * D, up.begin() + (e + 1) * F * D), 1, F, D);
        Mat a(static_cast<size_t>(F));
        for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(g[i] / (1.0 + std::exp(-double(g[i]))) * u[i]);
        const Mat o = matmul(a, Mat(down.begin() + e * D * F, down.begin() + (e + 1) * D * F), 1, D, F);
        for (int64_t i = 0; i < D; ++i) y[static_cast<size_t>(t * D + i)] += static_cast<float>(rw * o[static_cast<size_t>(i)]);
      }
    return y;
  };
  const Mat ref = moe(w.full.at("blk.0.ffn_gate_exps.weight"), w.full.at("blk.0.ffn_up_exps.weight"),
                      w.full.at("blk.0.ffn_down_exps.weight"), c.expert_intermediate_size);
  float mx = 0;
  for (float v : ref) mx = std::max(mx, std::fabs(v));
  const std::vector<int64_t> tokens = {0, 1, 150, 151, 299, 300};
  for (int size : {2, 4}) {
    SCOPED_TRACE("tp " + std::to_string(size));
    auto plan = plan_tensor_parallel(c, size);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    Mat sum(ref.size(), 0.f), emb(static_cast<size_t>(static_cast<int64_t>(tokens.size()) * D), 0.f);
    for (const RankShards& r : plan->ranks) {
      auto get = [&](const std::string& n) -> const TensorShard& {
        for (const TensorShard& s : r.tensors)
          if (s.decl.gguf_name == n) return s;
        throw std::runtime_error(n);
      };
      const Mat part = moe(slice_experts(w.full.at("blk.0.ffn_gate_exps.weight"), get("blk.0.ffn_gate_exps.weight")),
                           slice_experts(w.full.at("blk.0.ffn_up_exps.weight"), get("blk.0.ffn_up_exps.weight")),
                           slice_experts(w.full.at("blk.0.ffn_down_exps.weight"), get("blk.0.ffn_down_exps.weight")),
                           r.expert_intermediate_size);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
      EXPECT_EQ(get("blk.0.ffn_gate_inp.weight").kind, ShardKind::kReplicated);
      const Mat rows = slice(w.full.at("token_embd.weight"), get("token_embd.weight"));
      for (size_t t = 0; t < tokens.size(); ++t) {
        const int64_t id = tokens[t];
        if (id < r.vocab_begin || id >= r.vocab_end) continue;  // zeros from this rank
        for (int64_t i = 0; i < D; ++i) emb[t * D + i] += rows[static_cast<size_t>((id - r.vocab_begin) * D + i)];
      }
    }
    float err = 0;
    for (size_t i = 0; i < ref.size(); ++i) err = std::max(err, std::fabs(sum[i] - ref[i]));
    EXPECT_LE(err, 1e-4f * (1 + mx)) << "max |sharded - whole| of the MoE output";
    const Mat& full_emb = w.full.at("token_embd.weight");
    for (size_t t = 0; t < tokens.size(); ++t)
      for (int64_t i = 0; i < D; ++i)
        ASSERT_EQ(emb[t * D + i], full_emb[static_cast<size_t>(tokens[t] * D + i)]) << "token " << tokens[t];
  }
}

TEST(TensorParallelLayer, FusedQkvAndGateUpMatch) {
  check_model(small(ArchFamily::kPhi3, 4, 2), {2});
  check_model(small(ArchFamily::kPhi3, 8, 8), {2, 4});
}

}  // namespace
}  // namespace pagoda

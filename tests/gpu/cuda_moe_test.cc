// The mixture-of-experts kernels (backend/cuda/moe.cu) against plain references: routing against
// the CPU's moe_route (ops/moe.h), the sort against a stable host sort, and a whole MoE layer
// (route, sort, grouped gate/up + SwiGLU, grouped down, combine with and without a shared expert)
// against a double-precision host computation that rounds where the f32 / bf16 device path
// rounds, through both expert paths (grouped GEMV and grouped SIMT GEMM), for decode-sized and
// prefill-sized steps, steps whose tokens reach every expert and steps whose tokens all go to one
// expert (segments of many SIMT tiles); experts in every GGUF block format with kernels through
// the grouped int8 GEMV and the grouped tensor-core GEMM (moe_matmul_quant). Every case skips with
// a message when no GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "cuda_fixtures.h"
#include "gpu_test_util.h"
#include "ops/moe.h"
#include "test_util.h"

#include "quant/quant.h"

#if PAGODA_HAVE_CUDA
#include "backend/cuda/kernels.h"
#include "backend/cuda/quant_layout.h"
#endif

namespace pagoda {
namespace {

#if !PAGODA_HAVE_CUDA
TEST(CudaMoe, Skipped) { PAGODA_REQUIRE_GPU(); }
#else

using test::download_as;
using test::random_floats;
using test::round_to;
using test::to_device;
using test::to_host;
using test::upload_as;

struct MoeCase {
  int64_t T, E, k, D, F;
  bool normalize;
  bool shared;      // a shared expert's output and gate (Qwen2-MoE)
  bool one_expert;  // every token's top choice is expert 1 (k == 1: one segment of T rows)
  bool ties = false;  // logits in groups of 4 equal values: the lower expert wins a tie
};

// The host side of a random MoE layer and its device copy in `dtype`.
struct MoeLayer {
  MoeCase c;
  DType dtype;
  std::vector<float> x, logits, shared_out, shared_gate;         // x, gate rounded to dtype
  std::vector<std::vector<float>> gate_up, down;                 // per expert, rounded to dtype
  cuda::DeviceBuffer d_x, d_logits, d_shared_out, d_shared_gate, d_ptrs;
  std::vector<cuda::DeviceBuffer> d_experts;

  MoeLayer(const MoeCase& mc, DType dt, uint64_t seed) : c(mc), dtype(dt) {
    const int64_t T = c.T, E = c.E, D = c.D, F = c.F;
    x = round_to(random_floats(T * D, seed, -1, 1), dt);
    // Router logits without near-ties (a permuted grid of spacing 6 / E, jittered by a quarter of
    // it), so the device and the host pick the same experts in the same order.
    logits.resize(T * E);
    std::mt19937_64 rng(seed + 1);
    const auto jitter = random_floats(T * E, seed + 4, -0.25f, 0.25f);
    std::vector<int> perm(E);
    for (int64_t t = 0; t < T; ++t) {
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int64_t e = 0; e < E; ++e)
        logits[t * E + e] = c.ties ? static_cast<float>(perm[e] / 4) * 0.5f - 2.0f
                                   : -3.0f + 6.0f * (perm[e] + 0.5f + jitter[t * E + e]) / E;
    }
    if (c.one_expert)
      for (int64_t t = 0; t < T; ++t) logits[t * E + 1] = 20.0f;
    const float su = 1.0f / std::sqrt(static_cast<float>(D)), sd = 1.0f / std::sqrt(static_cast<float>(F));
    std::vector<const void*> ptrs;
    for (int64_t e = 0; e < E; ++e) {
      gate_up.push_back(round_to(random_floats(2 * F * D, seed + 10 + 2 * e, -2 * su, 2 * su), dt));
      down.push_back(round_to(random_floats(D * F, seed + 11 + 2 * e, -2 * sd, 2 * sd), dt));
    }
    for (int64_t e = 0; e < E; ++e) ptrs.push_back(d_experts.emplace_back(upload_as(gate_up[e], dt)).get());
    for (int64_t e = 0; e < E; ++e) ptrs.push_back(d_experts.emplace_back(upload_as(down[e], dt)).get());
    d_ptrs = to_device(ptrs);
    d_x = upload_as(x, dt);
    d_logits = to_device(logits);
    if (c.shared) {
      shared_out = random_floats(T * D, seed + 2, -1, 1);
      shared_gate = round_to(random_floats(D, seed + 3, -0.2f, 0.2f), dt);
      d_shared_out = to_device(shared_out);
      d_shared_gate = upload_as(shared_gate, dt);
    }
  }
  const void* const* gate_up_ptrs() const { return d_ptrs.as<const void* const>(); }
  const void* const* down_ptrs() const { return d_ptrs.as<const void* const>() + c.E; }

  // The layer's output per token (what the combine adds to the residual) for routing (ids,
  // weights), in double, with the device path's roundings: gate/up and SwiGLU outputs in dtype.
  // Over the experts' weights `gu` / `dn` (default: gate_up / down); q8: the expert matmuls'
  // inputs (x and the SwiGLU outputs) replaced by their int8 quantization per 32 values as
  // quantize_activations_q8 computes it (the quantized experts' GEMV).
  std::vector<double> reference(const std::vector<int32_t>& ids, const std::vector<float>& w,
                                const std::vector<std::vector<float>>* gu_w = nullptr,
                                const std::vector<std::vector<float>>* dn_w = nullptr, bool q8 = false) const {
    const int64_t T = c.T, D = c.D, F = c.F, k = c.k;
    const auto& gate_up_w = gu_w != nullptr ? *gu_w : gate_up;
    const auto& down_w = dn_w != nullptr ? *dn_w : down;
    auto rnd = [&](double v) { return dtype == DType::kF32 ? v : static_cast<double>(round_to({static_cast<float>(v)}, dtype)[0]); };
    // quantize_q8_kernel's arithmetic in f32: d = max|v| / 127, q = round-half-even(v / d), v' = d q.
    auto q8_round = [](std::vector<float> v) {
      for (size_t b = 0; b < v.size(); b += 32) {
        float amax = 0;
        for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::abs(v[i]));
        const float d = amax / 127.0f;
        for (size_t i = b; i < b + 32; ++i) v[i] = amax > 0 ? d * std::nearbyint(v[i] / d) : 0.0f;
      }
      return v;
    };
    std::vector<double> out(T * D, 0.0);
    std::vector<double> act(F);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> x_in(x.begin() + t * D, x.begin() + (t + 1) * D);
      if (q8) x_in = q8_round(x_in);
      const float* xt = x_in.data();
      if (c.shared) {
        double g = 0;
        for (int64_t d = 0; d < D; ++d) g += double(xt[d]) * shared_gate[d];
        const double sg = 1.0 / (1.0 + std::exp(-g));
        for (int64_t d = 0; d < D; ++d) out[t * D + d] = shared_out[t * D + d] * sg;
      }
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = ids[t * k + j];
        const std::vector<float>& gu = gate_up_w[e];
        for (int64_t f = 0; f < F; ++f) {
          double g = 0, u = 0;
          for (int64_t d = 0; d < D; ++d) {
            g += double(gu[f * D + d]) * xt[d];
            u += double(gu[(F + f) * D + d]) * xt[d];
          }
          g = rnd(g);
          u = rnd(u);
          act[f] = rnd(g / (1.0 + std::exp(-g)) * u);
        }
        if (q8) {
          std::vector<float> a(act.begin(), act.end());
          a = q8_round(a);
          std::copy(a.begin(), a.end(), act.begin());
        }
        for (int64_t d = 0; d < D; ++d) {
          double y = 0;
          for (int64_t f = 0; f < F; ++f) y += double(down_w[e][d * F + f]) * act[f];
          out[t * D + d] += w[t * k + j] * y;
        }
      }
    }
    return out;
  }
};

// Device buffers of one run of the layer.
struct MoeRun {
  cuda::DeviceBuffer ids, weights, order, seg, gu, act, out, residual;
  cuda::MoeSegments segments;
  MoeRun(const MoeCase& c, DType dt)
      : ids(c.T * c.k * 4), weights(c.T * c.k * 4), order(c.T * c.k * 4), seg((3 * c.E + 4) * 4),
        gu(c.T * c.k * 2 * c.F * 4), act(c.T * c.k * c.F * 4), out(c.T * c.k * c.D * 4), residual(c.T * c.D * 4) {
    int32_t* s = seg.as<int32_t>();
    segments = {s, s + c.E, s + 2 * c.E + 1, s + 3 * c.E + 2};
    CUDA_CHECK(cudaMemset(seg.get(), 0, seg.bytes()));  // seg[3E + 3]: moe_norm_route's counter
    CUDA_CHECK(cudaMemset(residual.get(), 0, residual.bytes()));
    (void)dt;
  }
};

// The grouped gate/up matmul of a step (x: the tokens' rows, gathered through the pairs' order)
// and the grouped down matmul (the pairs' SwiGLU rows, scattered back to pair order, f32), over
// the expert pointer tables w; outputs and modes set by the caller.
cuda::MoeMatmulParams gate_up_params(const MoeCase& c, const MoeRun& r, const void* x, const void* const* w) {
  cuda::MoeMatmulParams up;
  up.x = x;
  up.ldx = c.D;
  up.gather = r.order.as<int32_t>();
  up.gather_div = static_cast<int>(c.k);
  up.w = w;
  up.N = static_cast<int>(2 * c.F);
  up.K = static_cast<int>(c.D);
  up.seg = r.segments;
  up.P = c.T * c.k;
  up.E = c.E;
  up.max_rows = c.T;  // as the executor sets it (T 1: the one-row GEMV)
  return up;
}
cuda::MoeMatmulParams down_params(const MoeCase& c, const MoeRun& r, const void* const* w) {
  cuda::MoeMatmulParams dn;
  dn.x = r.act.get();
  dn.ldx = c.F;
  dn.w = w;
  dn.N = static_cast<int>(c.D);
  dn.K = static_cast<int>(c.F);
  dn.y = r.out.get();
  dn.ldy = c.D;
  dn.scatter = r.order.as<int32_t>();
  dn.seg = r.segments;
  dn.P = c.T * c.k;
  dn.E = c.E;
  dn.max_rows = c.T;
  dn.mode = cuda::GemmOut::kStoreF32;
  return dn;
}

// The combine of a step's expert outputs (r.out, by pair) into the zero residual, with L's shared
// expert when the case has one; returns the residual after a device sync.
std::vector<float> combine_into_residual(const MoeLayer& L, MoeRun& r) {
  const MoeCase& c = L.c;
  cuda::MoeCombineParams cp;
  cp.expert_out = r.out.as<float>();
  cp.weights = r.weights.as<float>();
  cp.ids = r.ids.as<int32_t>();
  cp.T = c.T;
  cp.top_k = static_cast<int>(c.k);
  cp.D = static_cast<int>(c.D);
  cp.residual = r.residual.as<float>();
  if (c.shared) {
    cp.shared_out = L.d_shared_out.as<float>();
    cp.hidden = L.d_x.get();
    cp.shared_gate = L.d_shared_gate.get();
  }
  cuda::moe_combine(cp, L.dtype, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  return to_host<float>(r.residual, c.T * c.D);
}

// Route and sort (fused_route: the single-block moe_route_sort, else moe_route + moe_sort),
// experts (gemv, else the SIMT GEMM or with mma the tensor-core one), combine into a zero residual
// (one token through the GEMV without a shared expert: moe_down_combine); returns the residual.
std::vector<float> run_layer(const MoeLayer& L, MoeRun& r, bool gemv, bool fused_route = false, bool mma = false) {
  const MoeCase& c = L.c;
  const int64_t P = c.T * c.k;
  if (fused_route) {
    cuda::moe_route_sort(L.d_logits.as<float>(), c.T, c.E, c.k, c.normalize, r.ids.as<int32_t>(), r.weights.as<float>(),
                         r.order.as<int32_t>(), r.segments, nullptr);
  } else {
    cuda::moe_route(L.d_logits.as<float>(), c.T, c.E, c.k, c.normalize, r.ids.as<int32_t>(), r.weights.as<float>(), nullptr);
    cuda::moe_sort(r.ids.as<int32_t>(), P, c.E, r.order.as<int32_t>(), r.segments, nullptr);
  }
  cuda::MoeMatmulParams up = gate_up_params(c, r, L.d_x.get(), L.gate_up_ptrs());
  up.tensor_cores = mma;
  if (gemv) {
    up.y = r.act.get();
    up.ldy = c.F;
    up.mode = cuda::GemmOut::kSwiGlu;
    cuda::moe_matmul(up, L.dtype, true, nullptr);
  } else {
    up.y = r.gu.get();
    up.ldy = 2 * c.F;
    up.mode = cuda::GemmOut::kStoreAct;
    cuda::moe_matmul(up, L.dtype, false, nullptr);
    cuda::swiglu(r.gu.get(), P, c.F, r.act.get(), L.dtype, nullptr);
  }
  cuda::MoeMatmulParams dn = down_params(c, r, L.down_ptrs());
  dn.tensor_cores = mma;
  if (gemv && c.T == 1 && !c.shared) {  // the executor's choice: the combine inside the down GEMV
    cuda::moe_down_combine(dn, r.weights.as<float>(), r.residual.as<float>(), L.dtype, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    return to_host<float>(r.residual, c.T * c.D);
  }
  cuda::moe_matmul(dn, L.dtype, gemv, nullptr);
  return combine_into_residual(L, r);
}

const MoeCase kCases[] = {
    {1, 64, 8, 256, 64, false, false, false},   // OLMoE-like decode: 8 of 64 experts, 56 unselected
    {1, 64, 8, 2048, 256, true, false, false},  // OLMoE's width: moe_gemv1's warps take several outputs
    {2, 64, 8, 256, 64, false, false, false},
    {8, 64, 8, 256, 64, true, false, false},
    {5, 64, 8, 128, 64, false, false, false, true},  // ties among the router logits
    {1, 8, 2, 64, 96, true, false, false},      // Mixtral-like decode
    {1, 60, 4, 128, 64, true, true, false},     // Qwen2-MoE-like decode: one token with a shared expert
    {3, 64, 8, 256, 128, false, true, false},   // OLMoE / Qwen2-MoE-like decode batch, shared expert
    {40, 16, 4, 128, 64, true, false, false},   // every expert reached
    {200, 4, 1, 64, 32, false, false, true},    // one expert: a segment of 200 rows (4 SIMT tiles)
    {300, 128, 8, 64, 32, true, true, false},   // 2400 pairs over 128 experts
    {70, 16, 2, 72, 40, false, false, false},   // K and N not multiples of the GEMM tiles (72, 40, 80)
};

// Checks a step's routing on the device (r: ids, weights, order, seg) against the CPU's moe_route
// of `logits` and a stable host sort by expert; returns the CPU's weights.
std::vector<float> expect_routing(const MoeCase& c, const std::vector<float>& logits, const MoeRun& r) {
  const int64_t P = c.T * c.k;
  std::vector<int32_t> want_ids(P);
  std::vector<float> want_w(P);
  moe_route(logits.data(), c.T, c.E, c.k, c.normalize, want_ids.data(), want_w.data());
  const auto ids = to_host<int32_t>(r.ids, P);
  const auto w = to_host<float>(r.weights, P);
  EXPECT_EQ(ids, want_ids) << "T " << c.T << " E " << c.E;
  for (int64_t i = 0; i < P; ++i) EXPECT_NEAR(w[i], want_w[i], 1e-6 * std::max(1.0f, want_w[i])) << "pair " << i;
  // order: the pairs stably sorted by expert; segments: the active experts ascending.
  std::vector<int32_t> want_order(P);
  std::iota(want_order.begin(), want_order.end(), 0);
  std::stable_sort(want_order.begin(), want_order.end(), [&](int32_t a, int32_t b) { return want_ids[a] < want_ids[b]; });
  EXPECT_EQ(to_host<int32_t>(r.order, P), want_order) << "T " << c.T;
  const auto seg = to_host<int32_t>(r.seg, 3 * c.E + 3);
  std::vector<int32_t> count(c.E, 0);
  for (int32_t e : want_ids) ++count[e];
  int32_t s = 0, begin = 0, tile = 0;
  for (int64_t e = 0; e < c.E; ++e) {
    if (count[e] == 0) continue;
    EXPECT_EQ(seg[s], e);                   // expert
    EXPECT_EQ(seg[c.E + s], begin);         // begin
    EXPECT_EQ(seg[2 * c.E + 1 + s], tile);  // tile
    begin += count[e];
    tile += (count[e] + cuda::kMoeTile - 1) / cuda::kMoeTile;
    ++s;
  }
  EXPECT_EQ(seg[3 * c.E + 2], s) << "active experts";
  EXPECT_EQ(seg[c.E + s], P);
  EXPECT_EQ(seg[2 * c.E + 1 + s], tile);
  return want_w;
}

// Both routings (moe_route + moe_sort, and the fused moe_route_sort) against the CPU's routing and
// a stable host sort.
TEST(CudaMoe, RoutingMatchesTheCpuAndTheSortIsStable) {
  PAGODA_REQUIRE_GPU();
  for (const MoeCase& c : kCases) {
    for (bool fused : {false, true}) {
      SCOPED_TRACE(fused ? "moe_route_sort" : "moe_route + moe_sort");
      MoeLayer L(c, DType::kF32, 100 + c.T);
      MoeRun r(c, DType::kF32);
      CUDA_CHECK(cudaMemset(r.seg.get(), 0xff, (3 * c.E + 3) * 4));  // no entry left from an earlier write
      run_layer(L, r, true, fused);
      const auto want_w = expect_routing(c, L.logits, r);
      const int32_t s = to_host<int32_t>(r.seg, 3 * c.E + 3)[3 * c.E + 2];  // active experts
      if (c.one_expert) {
        EXPECT_EQ(s, 1);
      }
      if (c.T == 40) {
        EXPECT_EQ(s, c.E) << "the case meant to reach every expert";
      }
      if (c.ties) {  // each token's top choices include equal probabilities (groups of 4 equal logits)
        EXPECT_EQ(want_w[0], want_w[1]);
      }
    }
  }
}

// moe_norm_route (the decode steps' norm + router + routing in one launch) against the separate
// kernels: hidden against the rms_norm kernel (the same arithmetic, another block size: within a
// rounding of the compute dtype), logits against a double-precision product of the router and the
// kernel's own hidden, the routing against the CPU's on the kernel's logits. Launched twice: the
// last-block counter must be back at 0 and the second launch give the same bits. Shapes: OLMoE
// (E 64, k 8, D 2048), Qwen3-MoE-like (E 128), Mixtral-like (E 8, k 2, D 4096) and E 60 (a partial
// last block of experts).
TEST(CudaMoe, NormRouteMatchesTheSeparateKernels) {
  PAGODA_REQUIRE_GPU();
  const MoeCase cases[] = {
      {1, 64, 8, 2048, 8, false, false, false},
      {4, 128, 8, 512, 8, true, false, false},
      {2, 8, 2, 4096, 8, true, false, false},
      {3, 60, 4, 64, 8, false, false, false},
  };
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (const MoeCase& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " T " + std::to_string(c.T) + " E " + std::to_string(c.E));
      ASSERT_TRUE(cuda::moe_norm_route_supported(c.T, c.D, dt));
      const int64_t T = c.T, D = c.D, E = c.E;
      const auto residual = random_floats(T * D, 31 + T, -2, 2);
      const auto norm_w = random_floats(D, 32, 0.5f, 1.5f);
      const float scale = 3.0f / std::sqrt(static_cast<float>(D));
      const auto router = round_to(random_floats(E * D, 33 + E, -scale, scale), dt);
      const auto d_res = to_device(residual), d_nw = to_device(norm_w);
      const auto d_router = upload_as(router, dt);
      cuda::DeviceBuffer hidden(T * D * 4), logits(T * E * 4), want_hidden(T * D * 4);
      MoeRun r(c, dt);
      cuda::MoeNormRouteParams p;
      p.residual = d_res.as<float>();
      p.norm_w = d_nw.as<float>();
      p.eps = 1e-6f;
      p.router = d_router.get();
      p.T = T;
      p.D = D;
      p.E = E;
      p.k = c.k;
      p.normalize = c.normalize;
      p.hidden = hidden.get();
      p.logits = logits.as<float>();
      p.ids = r.ids.as<int32_t>();
      p.weights = r.weights.as<float>();
      p.order = r.order.as<int32_t>();
      p.seg = r.segments;
      p.done = reinterpret_cast<unsigned*>(r.seg.as<int32_t>() + 3 * E + 3);
      cuda::moe_norm_route(p, dt, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      const auto ids1 = to_host<int32_t>(r.ids, T * c.k);
      const auto order1 = to_host<int32_t>(r.order, T * c.k);
      const auto got_logits1 = to_host<float>(logits, T * E);
      EXPECT_EQ(to_host<int32_t>(r.seg, 3 * E + 4)[3 * E + 3], 0) << "the counter is reset";
      cuda::moe_norm_route(p, dt, nullptr);
      cuda::rms_norm(p.residual, nullptr, T, D, p.norm_w, p.eps, want_hidden.get(), dt, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      EXPECT_EQ(to_host<int32_t>(r.seg, 3 * E + 4)[3 * E + 3], 0) << "the counter is reset";
      const auto got_logits = to_host<float>(logits, T * E);
      EXPECT_EQ(got_logits, got_logits1) << "the second launch";
      EXPECT_EQ(to_host<int32_t>(r.ids, T * c.k), ids1);
      EXPECT_EQ(to_host<int32_t>(r.order, T * c.k), order1);
      const auto h = download_as(hidden, T * D, dt), want_h = download_as(want_hidden, T * D, dt);
      const double rel = dt == DType::kF32 ? 1e-5 : 1.0 / 128;
      int bad = 0;
      for (int64_t i = 0; i < T * D; ++i) bad += std::abs(h[i] - want_h[i]) > rel * std::abs(want_h[i]) + 1e-6;
      EXPECT_EQ(bad, 0) << "hidden against the rms_norm kernel";
      for (int64_t t = 0; t < T; ++t)
        for (int64_t e = 0; e < E; ++e) {
          double dot = 0, mag = 0;
          for (int64_t d = 0; d < D; ++d) {
            dot += double(h[t * D + d]) * router[e * D + d];
            mag += std::abs(double(h[t * D + d]) * router[e * D + d]);
          }
          EXPECT_NEAR(got_logits[t * E + e], dot, 1e-5 * mag + 1e-6) << "token " << t << " expert " << e;
        }
      expect_routing(c, got_logits, r);
    }
  }
}

TEST(CudaMoe, LayerMatchesTheReferenceOnEveryExpertPath) {
  PAGODA_REQUIRE_GPU();
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (const MoeCase& c : kCases) {
      MoeLayer L(c, dt, 7 + c.T);
      for (const char* path : {"gemv", "simt", "mma"}) {
        const bool gemv = path[0] == 'g', mma = path[0] == 'm';
        if (mma && dt != DType::kBF16) continue;
        MoeRun r(c, dt);
        // The executor's choice: the fused routing for the steps that take the GEMV.
        const auto got = run_layer(L, r, gemv, gemv && c.T <= cuda::kMoeGemvMaxTokens, mma);
        const auto ref = L.reference(to_host<int32_t>(r.ids, c.T * c.k), to_host<float>(r.weights, c.T * c.k));
        double worst = 0, peak = 0;
        for (size_t i = 0; i < ref.size(); ++i) {
          worst = std::max(worst, std::abs(got[i] - ref[i]));
          peak = std::max(peak, std::abs(ref[i]));
        }
        // f32: f32 accumulation over D + F inputs; bf16: the same operands rounded as the device
        // rounds them, so only accumulation order and an occasional one-ulp rounding flip differ.
        const double bound = (dt == DType::kF32 ? 2e-5 : 4e-3) * peak;
        EXPECT_LE(worst, bound) << dtype_name(dt) << " " << path << " T " << c.T << " E " << c.E;
        std::printf("[cuda-moe] %s %s T %lld E %lld k %lld: max|diff| %.2e = %.2e x max|out|\n", std::string(dtype_name(dt)).c_str(),
                    path, static_cast<long long>(c.T), static_cast<long long>(c.E),
                    static_cast<long long>(c.k), worst, worst / peak);
      }
    }
  }
}

// The SIMT expert path (the --batch-invariant mode's) gives a token the same bits alone and in a
// batch whose other tokens change the segments it lands in.
TEST(CudaMoe, SimtPathIsBatchInvariant) {
  PAGODA_REQUIRE_GPU();
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const MoeCase batch{40, 16, 4, 128, 64, true, true, false};
    MoeLayer L(batch, dt, 5);
    MoeRun r(batch, dt);
    const auto all = run_layer(L, r, false);
    for (int64_t t : {0, 17, 39}) {
      MoeCase one = batch;
      one.T = 1;
      MoeLayer S(one, dt, 5);  // the same weights (same seeds), then token t's inputs
      S.x.assign(L.x.begin() + t * batch.D, L.x.begin() + (t + 1) * batch.D);
      S.logits.assign(L.logits.begin() + t * batch.E, L.logits.begin() + (t + 1) * batch.E);
      S.shared_out.assign(L.shared_out.begin() + t * batch.D, L.shared_out.begin() + (t + 1) * batch.D);
      S.d_x = upload_as(S.x, dt);
      S.d_logits = to_device(S.logits);
      S.d_shared_out = to_device(S.shared_out);
      MoeRun rs(one, dt);
      const auto solo = run_layer(S, rs, false);
      for (int64_t d = 0; d < batch.D; ++d)
        ASSERT_EQ(solo[d], all[t * batch.D + d]) << dtype_name(dt) << " token " << t << " column " << d;
    }
  }
}

// A layer's experts in a GGUF block format: each expert's bf16 weights (MoeLayer's) quantized by
// the host's reference quantizer, uploaded in the device layout (quant_layout.h); values: the
// host's dequantization (exact), rounded: the same rounded to bf16 (what the tensor-core path
// multiplies).
struct QuantExperts {
  DType format;
  std::vector<std::vector<float>> gate_up, down, gate_up_bf16, down_bf16;
  std::vector<cuda::DeviceBuffer> blocks;
  cuda::DeviceBuffer d_ptrs;

  QuantExperts(const MoeLayer& L, DType f) : format(f) {
    std::vector<const void*> ptrs;
    auto add = [&](const std::vector<float>& w, int64_t N, int64_t K, std::vector<std::vector<float>>& values,
                   std::vector<std::vector<float>>& rounded) {
      const int64_t rb = row_bytes(f, K);
      std::vector<uint8_t> file(static_cast<size_t>(N * rb));
      std::vector<float> v(static_cast<size_t>(N * K));
      for (int64_t n = 0; n < N; ++n) {
        quant::quantize_row(f, w.data() + n * K, file.data() + n * rb, K);
        quant::dequantize_row(f, file.data() + n * rb, v.data() + n * K, K);
      }
      std::vector<uint8_t> dev(static_cast<size_t>(N * cuda::device_row_bytes(f, K)));
      cuda::to_device_quant_layout(f, file.data(), dev.data(), N, K);
      ptrs.push_back(blocks.emplace_back(to_device(dev)).get());
      rounded.push_back(round_to(v, DType::kBF16));
      values.push_back(std::move(v));
    };
    const int64_t E = L.c.E, D = L.c.D, F = L.c.F;
    for (int64_t e = 0; e < E; ++e) add(L.gate_up[e], 2 * F, D, gate_up, gate_up_bf16);
    for (int64_t e = 0; e < E; ++e) add(L.down[e], D, F, down, down_bf16);
    d_ptrs = to_device(ptrs);
  }
};

// The executor's quantized-expert sequence (cuda_step_ops.cc moe_mlp): routing, then gemv: the
// grouped int8 GEMV with SwiGLU, the grouped int8 GEMV down (one token: with the combine,
// moe_down_combine_quant); else the grouped tensor-core GEMM, SwiGLU, the GEMM down; then the
// combine into a zero residual. Returns the residual.
std::vector<float> run_quant_layer(const MoeLayer& L, const QuantExperts& Q, MoeRun& r, bool gemv) {
  const MoeCase& c = L.c;
  const int64_t P = c.T * c.k;
  cuda::moe_route(L.d_logits.as<float>(), c.T, c.E, c.k, c.normalize, r.ids.as<int32_t>(), r.weights.as<float>(), nullptr);
  cuda::moe_sort(r.ids.as<int32_t>(), P, c.E, r.order.as<int32_t>(), r.segments, nullptr);
  cuda::MoeMatmulParams up = gate_up_params(c, r, L.d_x.get(), Q.d_ptrs.as<const void* const>());
  up.w_row_bytes = cuda::device_row_bytes(Q.format, c.D);
  if (gemv) {
    up.y = r.act.get();
    up.ldy = c.F;
    up.mode = cuda::GemmOut::kSwiGlu;
    cuda::moe_matmul_quant(up, Q.format, true, nullptr);
  } else {
    up.y = r.gu.get();
    up.ldy = 2 * c.F;
    up.mode = cuda::GemmOut::kStoreAct;
    cuda::moe_matmul_quant(up, Q.format, false, nullptr);
    cuda::swiglu(r.gu.get(), P, c.F, r.act.get(), DType::kBF16, nullptr);
  }
  cuda::MoeMatmulParams dn = down_params(c, r, Q.d_ptrs.as<const void* const>() + c.E);
  dn.w_row_bytes = cuda::device_row_bytes(Q.format, c.F);
  if (gemv && c.T == 1) {  // the executor's choice: the combine inside the down GEMV
    cuda::moe_down_combine_quant(dn, Q.format, r.weights.as<float>(), r.residual.as<float>(), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    return to_host<float>(r.residual, c.T * c.D);
  }
  cuda::moe_matmul_quant(dn, Q.format, gemv, nullptr);
  return combine_into_residual(L, r);  // L: bf16, no shared expert in these cases
}

// Quantized experts (moe_matmul_quant) in every block format with kernels, through both paths:
// the int8 GEMV against the reference over the host-dequantized weights with q8-rounded inputs
// (the same operands: only summation order and a rare rounding flip differ), the tensor-core GEMM
// against the reference over those weights rounded to bf16 (its operands). Decode steps (one
// token, a few), steps reaching every expert, one expert with 200 rows (4 tiles), N not a
// multiple of the 64-column tile (D 96, the small-block formats).
TEST(CudaMoe, QuantizedExpertsMatchTheReferenceOnBothPaths) {
  PAGODA_REQUIRE_GPU();
  const MoeCase cases[] = {
      {1, 64, 8, 256, 256, false, false, false},  // OLMoE / Qwen3-MoE-like decode
      {5, 64, 8, 512, 256, true, false, false},   // a decode batch: GEMV segments of several rows
      {40, 16, 4, 256, 512, true, false, false},  // every expert reached
      {200, 4, 1, 256, 256, false, false, true},  // one expert, 200 rows
      {70, 16, 2, 96, 256, false, false, false},  // N = 96 past a tile (Q4_0 .. Q8_0 only: K 96)
  };
  const DType formats[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                           DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
  int ran = 0;
  for (DType f : formats) {
    const int64_t block = dtype_traits(f).block_size;
    for (const MoeCase& c : cases) {
      if (c.D % block != 0 || c.F % block != 0) continue;
      MoeLayer L(c, DType::kBF16, 50 + c.T);
      const QuantExperts Q(L, f);
      for (const bool gemv : {true, false}) {
        if (gemv && c.T > cuda::kMoeGemvMaxTokens) continue;
        MoeRun r(c, DType::kBF16);
        const auto got = run_quant_layer(L, Q, r, gemv);
        const auto ids = to_host<int32_t>(r.ids, c.T * c.k);
        const auto w = to_host<float>(r.weights, c.T * c.k);
        const auto ref = gemv ? L.reference(ids, w, &Q.gate_up, &Q.down, true)
                              : L.reference(ids, w, &Q.gate_up_bf16, &Q.down_bf16, false);
        double worst = 0, peak = 0;
        for (size_t i = 0; i < ref.size(); ++i) {
          worst = std::max(worst, std::abs(got[i] - ref[i]));
          peak = std::max(peak, std::abs(ref[i]));
        }
        EXPECT_LE(worst, 4e-3 * peak) << dtype_name(f) << (gemv ? " gemv" : " mma") << " T " << c.T << " E " << c.E;
        std::printf("[cuda-moe-quant] %s %s T %lld E %lld k %lld: max|diff| %.2e = %.2e x max|out|\n",
                    std::string(dtype_name(f)).c_str(), gemv ? "gemv" : "mma", static_cast<long long>(c.T),
                    static_cast<long long>(c.E), static_cast<long long>(c.k), worst, worst / peak);
        ++ran;
      }
    }
  }
  EXPECT_GE(ran, 50);
}

// The quantized experts' tensor-core GEMM (the --batch-invariant mode's path for them) gives a
// token the same bits alone and in a batch of 40.
TEST(CudaMoe, QuantizedGemmIsBatchInvariant) {
  PAGODA_REQUIRE_GPU();
  for (DType f : {DType::kQ4_K, DType::kQ8_0}) {
    const MoeCase batch{40, 16, 4, 256, 256, true, false, false};
    MoeLayer L(batch, DType::kBF16, 9);
    const QuantExperts Q(L, f);
    MoeRun r(batch, DType::kBF16);
    const auto all = run_quant_layer(L, Q, r, false);
    for (int64_t t : {0, 17, 39}) {
      MoeCase one = batch;
      one.T = 1;
      MoeLayer S(one, DType::kBF16, 9);  // the same weights (same seeds), then token t's inputs
      S.x.assign(L.x.begin() + t * batch.D, L.x.begin() + (t + 1) * batch.D);
      S.logits.assign(L.logits.begin() + t * batch.E, L.logits.begin() + (t + 1) * batch.E);
      S.d_x = upload_as(S.x, DType::kBF16);
      S.d_logits = to_device(S.logits);
      MoeRun rs(one, DType::kBF16);
      const auto solo = run_quant_layer(S, Q, rs, false);
      for (int64_t d = 0; d < batch.D; ++d)
        ASSERT_EQ(solo[d], all[t * batch.D + d]) << dtype_name(f) << " token " << t << " column " << d;
    }
  }
}

#endif  // PAGODA_HAVE_CUDA

}  // namespace
}  // namespace pagoda

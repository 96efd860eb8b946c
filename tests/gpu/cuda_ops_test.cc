// The CUDA kernels against plain references (the GPU column of the op tier): RMSNorm, embedding,
// SwiGLU, GEMV, cuBLASLt, the batch-invariant GEMM, and the sampler against the CPU sampler (the
// attention path's kernels: cuda_attention_test.cc). Every case skips with a message when no GPU
// is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "backend/reference/reference_ops.h"
#include "cuda_fixtures.h"
#include "gpu_test_util.h"
#include "runtime/model_runner.h"
#include "runtime/sampler.h"
#include "test_util.h"

#if PAGODA_HAVE_CUDA
#include "backend/cuda/blas.h"
#include "backend/cuda/kernels.h"
#endif

namespace pagoda {
namespace {

#if !PAGODA_HAVE_CUDA
TEST(CudaOps, Skipped) { PAGODA_REQUIRE_GPU(); }
#else

using test::download_as;
using test::nmse;
using test::random_floats;
using test::round_to;
using test::to_device;
using test::to_host;
using test::upload_as;

// RMSNorm over gathered rows (the norm, the embedding, the gated activations and every weight
// format's matmul are op-harness cases: tests/op_cases/op_cases.cc, run here by
// cuda_op_backend_test.cc).
TEST(CudaOps, RmsNormOfGatheredRows) {
  PAGODA_REQUIRE_GPU();
  for (int64_t D : {70, 4096}) {  // 70: the scalar kernel; D % 4 == 0: the float4 one
    const int64_t T = 5;
    auto x = random_floats(T * D, 1, -3, 3), w = random_floats(D, 2, 0.5f, 1.5f);
    std::vector<float> ref(T * D);
    reference::rms_norm(x.data(), w.data(), T, D, 1e-5, ref.data());
    const std::vector<int32_t> rows = {3, 0, 4};
    auto dx = to_device(x), dw = to_device(w), drows = to_device(rows);
    for (DType out : {DType::kF32, DType::kBF16}) {
      cuda::DeviceBuffer dy(T * D * 4);
      cuda::rms_norm(dx.as<float>(), drows.as<int32_t>(), 3, D, dw.as<float>(), 1e-5f, dy.get(), out, nullptr);
      const auto y = download_as(dy, 3 * D, out);
      for (int i = 0; i < 3; ++i)
        EXPECT_LT(nmse(y.data() + i * D, ref.data() + rows[i] * D, D), out == DType::kF32 ? 1e-12 : 1e-5) << "gathered row " << i;
    }
  }
}

// The Gemma row kernels: the post-norm added into a residual, the embedding scale and the logit
// soft-capping (GeGLU is an op-harness case).
TEST(CudaOps, GemmaRowKernels) {
  PAGODA_REQUIRE_GPU();
  const int64_t T = 3, D = 72;
  auto x = random_floats(T * D, 6, -3, 3), w = random_floats(D, 7, 0.5f, 1.5f), res = random_floats(T * D, 8, -1, 1);
  std::vector<float> normed(T * D), want(T * D);
  reference::rms_norm(x.data(), w.data(), T, D, 1e-6, normed.data());
  for (int64_t i = 0; i < T * D; ++i) want[i] = res[i] + normed[i];
  auto dx = to_device(x), dw = to_device(w), dres = to_device(res);
  cuda::rms_norm_add(dx.as<float>(), T, D, dw.as<float>(), 1e-6f, dres.as<float>(), nullptr);
  EXPECT_LT(nmse(to_host<float>(dres, T * D), want), 1e-12);
  cuda::scale_f32(dx.as<float>(), T * D, 25.25f, nullptr);
  auto scaled = to_host<float>(dx, T * D);
  for (int64_t i = 0; i < T * D; ++i) ASSERT_EQ(scaled[i], x[i] * 25.25f) << i;
  auto logits = random_floats(T * D, 9, -80, 80);
  auto dl = to_device(logits);
  cuda::softcap_f32(dl.as<float>(), T * D, 30.0f, nullptr);
  auto capped = to_host<float>(dl, T * D);
  for (int64_t i = 0; i < T * D; ++i) {
    ASSERT_NEAR(capped[i], 30.0 * std::tanh(logits[i] / 30.0), 1e-4) << i;
    ASSERT_LE(std::abs(capped[i]), 30.0f);
  }
}

// y[m, n] = sum_k x[m, k] w[n, k] in double.
std::vector<double> matmul_ref(const std::vector<float>& x, const std::vector<float>& w, int64_t M, int64_t N, int64_t K) {
  std::vector<double> y(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += double(x[m * K + k]) * w[n * K + k];
      y[m * N + n] = acc;
    }
  return y;
}
double nmse_d(const std::vector<float>& got, const std::vector<double>& ref) {
  std::vector<float> r(ref.begin(), ref.end());
  return nmse(got, r);
}

TEST(CudaOps, GemvAndMatmulsMatchReference) {
  PAGODA_REQUIRE_GPU();
  for (int64_t K : {256, 4104}) {
    const int64_t N = 300;
    auto w = round_to(random_floats(N * K, 21, -1, 1), DType::kBF16);
    auto dw = upload_as(w, DType::kBF16);
    for (int64_t M = 1; M <= cuda::kGemvMaxM; ++M) {
      auto x = round_to(random_floats(M * K, 22 + M, -1, 1), DType::kBF16);
      auto dx = upload_as(x, DType::kBF16);
      auto ref = matmul_ref(x, w, M, N, K);
      cuda::DeviceBuffer y(M * N * 4);
      cuda::gemv_bf16(dx.get(), dw.get(), M, N, K, y.get(), N, cuda::GemmOut::kStoreF32, nullptr);
      EXPECT_LT(nmse_d(to_host<float>(y, M * N), ref), 1e-10) << "M " << M << " K " << K;
      // Accumulate into a prefilled y.
      std::vector<float> base = random_floats(M * N, 5);
      auto dyb = to_device(base);
      cuda::gemv_bf16(dx.get(), dw.get(), M, N, K, dyb.get(), N, cuda::GemmOut::kAddF32, nullptr);
      auto acc_ref = ref;
      for (int64_t i = 0; i < M * N; ++i) acc_ref[i] += base[i];
      EXPECT_LT(nmse_d(to_host<float>(dyb, M * N), acc_ref), 1e-10);
      cuda::gemv_bf16(dx.get(), dw.get(), M, N, K, y.get(), N, cuda::GemmOut::kStoreAct, nullptr);
      EXPECT_LT(nmse_d(download_as(y, M * N, DType::kBF16), ref), 1e-5);
      // Fused gate/up + SwiGLU: rows [0, N/2) gate, [N/2, N) up.
      const int64_t F = N / 2;
      cuda::gemv_bf16(dx.get(), dw.get(), M, N, K, y.get(), F, cuda::GemmOut::kSwiGlu, nullptr);
      std::vector<float> sw_ref(M * F);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t i = 0; i < F; ++i) {
          const float g = bf16_to_f32(f32_to_bf16(float(ref[m * N + i]))), u = bf16_to_f32(f32_to_bf16(float(ref[m * N + F + i])));
          sw_ref[m * F + i] = g / (1.0f + std::exp(-g)) * u;
        }
      EXPECT_LT(nmse(download_as(y, M * F, DType::kBF16), sw_ref), 1e-5);
      // RMSNorm fused into the prologue: x = bf16(rms_norm(residual[rows[m]]) * g).
      if (cuda::gemv_norm_supported(M, K)) {
        auto res = random_floats((M + 2) * K, 40 + M, -3, 3), g = random_floats(K, 41, 0.5f, 1.5f);
        std::vector<int32_t> rows;
        for (int64_t m = 0; m < M; ++m) rows.push_back(static_cast<int32_t>((m * 3 + 2) % (M + 2)));
        std::vector<float> xn(M * K);
        for (int64_t m = 0; m < M; ++m) reference::rms_norm(res.data() + rows[m] * K, g.data(), 1, K, 1e-5, xn.data() + m * K);
        xn = round_to(xn, DType::kBF16);
        auto nref = matmul_ref(xn, w, M, N, K);
        auto dres = to_device(res), dg = to_device(g), drows = to_device(rows);
        const cuda::GemvNorm nrm{dres.as<float>(), drows.as<int32_t>(), dg.as<float>(), 1e-5f};
        cuda::gemv_bf16(nullptr, dw.get(), M, N, K, y.get(), N, cuda::GemmOut::kStoreF32, nullptr, &nrm);
        EXPECT_LT(nmse_d(to_host<float>(y, M * N), nref), 1e-6) << "fused norm M " << M << " K " << K;
      }
    }
  }
  // One row with the fused norm at the sizes of qkv, gate/up and lm_head (thousands of blocks, more
  // than the GPU holds at once), an output count that is no multiple of a block's 8, in both
  // output modes it serves.
  {
    const int64_t N = 2 * 20011, K = 512, F = N / 2;
    auto w = round_to(random_floats(N * K, 51, -1, 1), DType::kBF16);
    auto res = random_floats(K, 52, -3, 3), g = random_floats(K, 53, 0.5f, 1.5f);
    std::vector<float> xn(K);
    reference::rms_norm(res.data(), g.data(), 1, K, 1e-5, xn.data());
    xn = round_to(xn, DType::kBF16);
    auto ref = matmul_ref(xn, w, 1, N, K);
    auto dw = upload_as(w, DType::kBF16);
    auto dres = to_device(res), dg = to_device(g);
    const cuda::GemvNorm nrm{dres.as<float>(), nullptr, dg.as<float>(), 1e-5f};
    cuda::DeviceBuffer y(N * 4);
    cuda::gemv_bf16(nullptr, dw.get(), 1, N, K, y.get(), N, cuda::GemmOut::kStoreF32, nullptr, &nrm);
    EXPECT_LT(nmse_d(to_host<float>(y, N), ref), 1e-6) << "fused norm, many blocks";
    cuda::gemv_bf16(nullptr, dw.get(), 1, N, K, y.get(), F, cuda::GemmOut::kSwiGlu, nullptr, &nrm);
    std::vector<float> sw_ref(F);
    for (int64_t i = 0; i < F; ++i) {
      const float gt = bf16_to_f32(f32_to_bf16(float(ref[i]))), u = bf16_to_f32(f32_to_bf16(float(ref[F + i])));
      sw_ref[i] = gt / (1.0f + std::exp(-gt)) * u;
    }
    EXPECT_LT(nmse(download_as(y, F, DType::kBF16), sw_ref), 1e-5) << "fused norm + SwiGLU, many blocks";
    // Two outputs a warp (GemvPairs): the same bits as one a warp; an odd N falls back to one.
    for (const int64_t n : {N, N - 1}) {
      cuda::GemvNorm one = nrm, two = nrm;
      one.pairs = cuda::GemvPairs::kNever;
      two.pairs = cuda::GemvPairs::kAlways;
      EXPECT_EQ(cuda::gemv_takes_pairs(1, n, cuda::GemmOut::kStoreF32, &two), n % 2 == 0) << "N " << n;
      EXPECT_FALSE(cuda::gemv_takes_pairs(1, n, cuda::GemmOut::kStoreF32, &one));
      cuda::DeviceBuffer y1(n * 4), y2(n * 4);
      cuda::gemv_bf16(nullptr, dw.get(), 1, n, K, y1.get(), n, cuda::GemmOut::kStoreF32, nullptr, &one);
      cuda::gemv_bf16(nullptr, dw.get(), 1, n, K, y2.get(), n, cuda::GemmOut::kStoreF32, nullptr, &two);
      const auto a = to_host<float>(y1, n), b = to_host<float>(y2, n);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), n * 4), 0) << "two outputs a warp, N " << n;
      EXPECT_LT(nmse_d(b, std::vector<double>(ref.begin(), ref.begin() + n)), 1e-6) << "two outputs a warp, N " << n;
    }
  }
  // cuBLASLt: bf16 -> f32 / bf16, f32 -> f32 (pure FP32), accumulate.
  cuda::BlasLt blas;
  const int64_t M = 37, N = 96, K = 136;
  for (DType in : {DType::kBF16, DType::kF32}) {
    auto x = round_to(random_floats(M * K, 31, -1, 1), in), w = round_to(random_floats(N * K, 32, -1, 1), in);
    auto dx = upload_as(x, in), dw = upload_as(w, in);
    auto ref = matmul_ref(x, w, M, N, K);
    cuda::DeviceBuffer y(M * N * 4);
    blas.matmul(dx.get(), dw.get(), in, M, N, K, y.get(), DType::kF32, false, nullptr);
    EXPECT_LT(nmse_d(to_host<float>(y, M * N), ref), 1e-10) << dtype_name(in);
    blas.matmul(dx.get(), dw.get(), in, M, N, K, y.get(), DType::kF32, true, nullptr);  // y = 2 x W^T
    auto twice = ref;
    for (auto& v : twice) v *= 2;
    EXPECT_LT(nmse_d(to_host<float>(y, M * N), twice), 1e-10) << dtype_name(in) << " accumulate";
    if (in == DType::kBF16) {
      blas.matmul(dx.get(), dw.get(), in, M, N, K, y.get(), DType::kBF16, false, nullptr);
      EXPECT_LT(nmse_d(download_as(y, M * N, DType::kBF16), ref), 1e-5);
    }
    // Batch-invariant SIMT GEMM: correct, and each row bit-identical whatever M is.
    cuda::gemm_simt(dx.get(), dw.get(), in, M, N, K, y.get(), N, cuda::GemmOut::kStoreF32, nullptr);
    auto full = to_host<float>(y, M * N);
    EXPECT_LT(nmse_d(full, ref), 1e-10);
    for (int64_t m0 : {int64_t{0}, int64_t{5}, int64_t{36}}) {
      for (int64_t mm : {int64_t{1}, int64_t{13}}) {
        if (m0 + mm > M) continue;
        const auto* xs = static_cast<const uint8_t*>(dx.get()) + m0 * K * (in == DType::kF32 ? 4 : 2);
        cuda::DeviceBuffer ys(mm * N * 4);
        cuda::gemm_simt(xs, dw.get(), in, mm, N, K, ys.get(), N, cuda::GemmOut::kStoreF32, nullptr);
        auto part = to_host<float>(ys, mm * N);
        ASSERT_EQ(0, std::memcmp(part.data(), full.data() + m0 * N, mm * N * 4)) << "rows " << m0 << "+" << mm;
      }
    }
  }
}

// Candidate set of the CPU sampler's rules (descending p, ties to the lower id) for checks.
std::vector<int32_t> cpu_candidates(const std::vector<float>& logits, const SamplingParams& p, std::vector<double>* probs) {
  const int32_t V = static_cast<int32_t>(logits.size());
  std::vector<float> w(V);
  float mx = -INFINITY;
  for (int32_t i = 0; i < V; ++i) mx = std::max(mx, w[i] = logits[i] / p.temperature);
  for (auto& v : w) v = std::exp(v - mx);
  std::vector<int32_t> idx;
  for (int32_t i = 0; i < V; ++i)
    if (p.min_p <= 0 || w[i] >= p.min_p) idx.push_back(i);
  std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); });
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < idx.size()) idx.resize(p.top_k);
  double kept = 0;
  for (int32_t i : idx) kept += w[i];
  if (p.top_p < 1) {
    double cum = 0;
    size_t cut = 0;
    for (; cut < idx.size(); ++cut) {
      cum += w[idx[cut]];
      if (cum >= p.top_p * kept) break;
    }
    idx.resize(std::min(cut + 1, idx.size()));
  }
  if (probs) {
    probs->assign(V, 0.0);
    double s = 0;
    for (int32_t i : idx) s += w[i];
    for (int32_t i : idx) (*probs)[i] = w[i] / s;
  }
  return idx;
}

TEST(CudaOps, SamplerMatchesCpuSemantics) {
  PAGODA_REQUIRE_GPU();
  const int64_t V = 1000;
  std::mt19937 rng(5);
  // Rows: random logits with a few exact ties at the top.
  const int rows = 6;
  std::vector<float> logits(rows * V);
  for (int r = 0; r < rows; ++r) {
    auto row = random_floats(V, 100 + r, -4, 4);
    row[17] = row[400] = 5.0f;  // tie at the top: the lower id wins
    std::copy(row.begin(), row.end(), logits.begin() + r * V);
  }
  struct Spec {
    SamplingParams p;
    std::vector<int32_t> prompt, output, blocked;
    uint64_t seed;
  };
  std::vector<Spec> specs(rows);
  specs[0].p.temperature = 0;                                    // greedy (tie -> 17)
  specs[1].p.temperature = 0.7f;                                 // plain temperature: same token as the CPU
  specs[1].p.logprobs = 5;
  specs[2].p.temperature = 0;                                    // penalties change the argmax
  specs[2].p.repetition_penalty = 1.5f;
  specs[2].p.presence_penalty = 0.5f;
  specs[2].p.frequency_penalty = 0.3f;
  specs[2].prompt = {17, 5, 6};
  specs[2].output = {400, 400, 9};
  specs[3].p.temperature = 1.3f;                                 // all filters
  specs[3].p.top_k = 50;
  specs[3].p.top_p = 0.8f;
  specs[3].p.min_p = 0.02f;
  specs[4].p.temperature = 0;                                    // min_tokens mask
  specs[4].blocked = {17, 400};
  specs[4].p.logprobs = 3;
  specs[5].p.temperature = 0.9f;
  specs[5].p.top_p = 0.5f;
  for (int r = 0; r < rows; ++r) specs[r].seed = 1000 + r;

  auto run_gpu = [&](const std::vector<double>& uniforms) {
    std::vector<cuda::SampleRowParams> prm(rows);
    std::vector<cuda::PenaltyEntry> pens;
    std::vector<int32_t> blocked;
    for (int r = 0; r < rows; ++r) {
      const Spec& s = specs[r];
      cuda::SampleRowParams& q = prm[r];
      q = {};
      q.logits_row = r;
      q.top_k = s.p.top_k;
      q.temperature = s.p.temperature;
      q.top_p = s.p.top_p;
      q.min_p = s.p.min_p;
      q.repetition_penalty = s.p.repetition_penalty;
      q.presence_penalty = s.p.presence_penalty;
      q.frequency_penalty = s.p.frequency_penalty;
      q.logprobs = s.p.logprobs;
      q.uniform = uniforms[r];
      q.pen_begin = static_cast<int32_t>(pens.size());
      std::vector<int32_t> all = s.prompt;
      all.insert(all.end(), s.output.begin(), s.output.end());
      std::sort(all.begin(), all.end());
      all.erase(std::unique(all.begin(), all.end()), all.end());
      for (int32_t t : all) pens.push_back({t, static_cast<int32_t>(std::count(s.output.begin(), s.output.end(), t))});
      q.pen_count = static_cast<int32_t>(pens.size()) - q.pen_begin;
      q.block_begin = static_cast<int32_t>(blocked.size());
      blocked.insert(blocked.end(), s.blocked.begin(), s.blocked.end());
      q.block_count = static_cast<int32_t>(s.blocked.size());
    }
    if (pens.empty()) pens.push_back({0, 0});
    if (blocked.empty()) blocked.push_back(0);
    auto dl = to_device(logits), dp = to_device(prm), dpen = to_device(pens), dbl = to_device(blocked);
    cuda::DeviceBuffer work(rows * V * 4), mask(rows * V), out(rows * sizeof(cuda::SampleOutput));
    cuda::sample_rows(dl.as<float>(), V, dp.as<cuda::SampleRowParams>(), rows, dpen.as<cuda::PenaltyEntry>(),
                      dbl.as<int32_t>(), work.as<float>(), mask.as<uint8_t>(), out.as<cuda::SampleOutput>(), nullptr);
    return to_host<cuda::SampleOutput>(out, rows);
  };

  std::vector<double> u(rows);
  for (int r = 0; r < rows; ++r) u[r] = token_rng(specs[r].seed, 3).uniform();
  const auto got = run_gpu(u);
  const auto again = run_gpu(u);
  Sampler cpu;
  for (int r = 0; r < rows; ++r) {
    const Spec& s = specs[r];
    std::vector<float> row(logits.begin() + r * V, logits.begin() + (r + 1) * V);
    for (int32_t b : s.blocked) row[b] = -INFINITY;
    Rng rg = token_rng(s.seed, 3);
    const SampleResult want = cpu.sample(row, s.p, TokenHistory{s.prompt, s.output}, rg);
    EXPECT_EQ(got[r].token, again[r].token) << "row " << r << ": not deterministic";
    if (s.p.greedy() || (s.p.top_k <= 0 && s.p.top_p >= 1 && s.p.min_p <= 0)) {
      EXPECT_EQ(got[r].token, want.token) << "row " << r;  // same walk order as the CPU: same token
    } else {
      auto cands = cpu_candidates(row, s.p, nullptr);
      EXPECT_NE(std::find(cands.begin(), cands.end(), got[r].token), cands.end()) << "row " << r << " outside the candidates";
    }
    if (s.p.logprobs >= 0) {
      EXPECT_NEAR(got[r].logprob, want.logprob, 1e-4) << "row " << r;
      for (int k = 0; k < s.p.logprobs; ++k) {
        EXPECT_EQ(got[r].top_ids[k], want.top[k].token) << "row " << r << " top " << k;
        EXPECT_NEAR(got[r].top_logprobs[k], want.top[k].logprob, 1e-4);
      }
    }
  }
  EXPECT_EQ(got[0].token, 17);
  EXPECT_NE(got[4].token, 17);
  EXPECT_NE(got[4].token, 400);
  // Distribution under all filters: stratified draws hit each candidate in proportion to its
  // probability (the walk maps u in [0, 1) onto the candidates' cumulative mass).
  const int draws = 600;
  std::vector<std::vector<int>> hist(rows, std::vector<int>(V, 0));
  for (int i = 0; i < draws; ++i) {
    const auto o = run_gpu(std::vector<double>(rows, (i + 0.5) / draws));
    for (int r = 0; r < rows; ++r) ++hist[r][o[r].token];
  }
  for (int r : {3, 5}) {
    std::vector<double> probs;
    std::vector<float> row(logits.begin() + r * V, logits.begin() + (r + 1) * V);
    cpu_candidates(row, specs[r].p, &probs);
    double worst = 0;
    for (int64_t t = 0; t < V; ++t) {
      worst = std::max(worst, std::abs(hist[r][t] - probs[t] * draws));
      if (probs[t] == 0) {
        EXPECT_EQ(hist[r][t], 0) << "row " << r << " token " << t << " is not a candidate";
      }
    }
    EXPECT_LE(worst, 2.0) << "row " << r;
  }
}

// Prompt logprobs (cuda::row_logprobs, the CUDA executor's row_logprobs) against the CPU
// executor's (fill_logprobs + token_rank): logprob, rank and top N of rows picked out of a larger
// logits buffer, on a small and on a 151,936-token vocabulary, with ties (rank shared, ids in
// order), a row with -inf entries (never listed) and the row's best and worst token.
TEST(CudaOps, RowLogprobsMatchTheCpu) {
  PAGODA_REQUIRE_GPU();
  for (const int64_t V : {int64_t{1000}, int64_t{151936}}) {
    const int rows = 6;
    std::vector<float> logits(rows * V);
    for (int r = 0; r < rows; ++r) {
      auto row = random_floats(V, 900 + r + V, -6, 6);
      std::copy(row.begin(), row.end(), logits.begin() + r * V);
    }
    for (int64_t v = 0; v < 40; ++v) logits[1 * V + v * 7] = 7.5f;            // a 40-way tie at the top
    for (int64_t v = 0; v < V; v += 3) logits[2 * V + v] = -INFINITY;          // masked-out entries
    const int32_t best3 = static_cast<int32_t>(std::max_element(logits.begin() + 3 * V, logits.begin() + 4 * V) -
                                               (logits.begin() + 3 * V));
    const int32_t worst4 = static_cast<int32_t>(std::min_element(logits.begin() + 4 * V, logits.begin() + 5 * V) -
                                                (logits.begin() + 4 * V));
    // (row, token, top_n): rows out of order, one row asked twice.
    const std::vector<cuda::RowLogprobRow> ask = {{5, 17, 20}, {1, 7 * 3, 5},  {2, 1, 3},  {3, best3, 0},
                                                  {4, worst4, 1}, {0, static_cast<int32_t>(V - 1), 20}, {5, 17, 0}};
    const int64_t n = static_cast<int64_t>(ask.size());
    auto dl = to_device(logits), da = to_device(ask);
    cuda::DeviceBuffer out(n * sizeof(cuda::SampleOutput)), ranks(n * 4);
    cuda::row_logprobs(dl.as<float>(), V, da.as<cuda::RowLogprobRow>(), n, out.as<cuda::SampleOutput>(),
                       ranks.as<int32_t>(), nullptr);
    const auto got = to_host<cuda::SampleOutput>(out, n);
    const auto got_rank = to_host<int32_t>(ranks, n);
    std::vector<int32_t> scratch;
    for (int64_t i = 0; i < n; ++i) {
      std::span<const float> row(logits.data() + ask[i].logits_row * V, static_cast<size_t>(V));
      SampleResult want;
      want.token = ask[i].token;
      fill_logprobs(row, ask[i].top_n, want, scratch);
      EXPECT_NEAR(got[i].logprob, want.logprob, 1e-4) << "V " << V << " ask " << i;
      EXPECT_EQ(got_rank[i], token_rank(row, ask[i].token)) << "V " << V << " ask " << i;
      size_t listed = 0;
      for (int k = 0; k < ask[i].top_n && got[i].top_ids[k] >= 0; ++k, ++listed) {
        ASSERT_LT(static_cast<size_t>(k), want.top.size());
        EXPECT_EQ(got[i].top_ids[k], want.top[k].token) << "V " << V << " ask " << i << " top " << k;
        EXPECT_NEAR(got[i].top_logprobs[k], want.top[k].logprob, 1e-4);
      }
      EXPECT_EQ(listed, want.top.size()) << "V " << V << " ask " << i;
    }
    EXPECT_EQ(got_rank[1], 1) << "a token tied at the top has rank 1";
    EXPECT_EQ(got_rank[3], 1);
    EXPECT_EQ(got[1].top_ids[0], 0) << "ties listed in id order";
  }
}

// logit_bias moves the choice exactly as on the CPU and leaves the logprobs alone; under a
// token mask the logprobs are of the allowed tokens and masked tokens are never listed (CPU:
// runtime/sampler.h, D37).
TEST(CudaOps, LogitBiasAndMaskedLogprobsMatchTheCpu) {
  PAGODA_REQUIRE_GPU();
  const int64_t V = 1000;
  const int rows = 3;
  std::vector<float> logits(rows * V);
  for (int r = 0; r < rows; ++r) {
    auto row = random_floats(V, 700 + r, -4, 4);
    std::copy(row.begin(), row.end(), logits.begin() + r * V);
  }
  std::vector<SamplingParams> ps(rows);
  ps[0].temperature = 0;
  ps[0].logprobs = 3;
  ps[0].logit_bias = {{123, 9.0f}, {5, -100.0f}};
  ps[1].temperature = 0.7f;
  ps[1].logprobs = 2;
  ps[1].logit_bias = {{77, 30.0f}, {78, 30.0f}};
  ps[2].temperature = 0;
  ps[2].logprobs = 5;                            // more than the 3 allowed tokens
  ps[2].logit_bias = {{600, 20.0f}};
  const std::vector<int32_t> allowed = {10, 600, 999};
  std::vector<uint32_t> mask((V + 31) / 32, 0u);
  for (int32_t t : allowed) mask[t / 32] |= 1u << (t % 32);
  std::vector<cuda::SampleRowParams> prm(rows);
  std::vector<cuda::BiasEntry> biases;
  std::vector<double> u(rows);
  for (int r = 0; r < rows; ++r) {
    cuda::SampleRowParams& q = prm[r];
    q = {};
    q.logits_row = r;
    q.temperature = ps[r].temperature;
    q.top_p = 1;
    q.repetition_penalty = 1;
    q.logprobs = ps[r].logprobs;
    u[r] = token_rng(50 + r, 0).uniform();
    q.uniform = u[r];
    q.bias_begin = static_cast<int32_t>(biases.size());
    for (const auto& [t, b] : ps[r].logit_bias) biases.push_back({t, b});
    q.bias_count = static_cast<int32_t>(biases.size()) - q.bias_begin;
  }
  std::vector<cuda::PenaltyEntry> pens = {{0, 0}};
  std::vector<int32_t> blocked = {0}, mask_rows = {2};
  auto dl = to_device(logits), dp = to_device(prm), dpen = to_device(pens), dbl = to_device(blocked);
  auto dbias = to_device(biases), dmask = to_device(mask), drows = to_device(mask_rows);
  cuda::DeviceBuffer work(rows * V * 4), m8(rows * V), out(rows * sizeof(cuda::SampleOutput));
  cuda::apply_token_masks(dl.as<float>(), V, drows.as<int32_t>(), dmask.as<uint32_t>(), static_cast<int64_t>(mask.size()), 1,
                          nullptr);
  cuda::sample_rows(dl.as<float>(), V, dp.as<cuda::SampleRowParams>(), rows, dpen.as<cuda::PenaltyEntry>(),
                    dbl.as<int32_t>(), work.as<float>(), m8.as<uint8_t>(), out.as<cuda::SampleOutput>(), nullptr,
                    /*plain_greedy=*/false, dbias.as<cuda::BiasEntry>());
  const auto got = to_host<cuda::SampleOutput>(out, rows);
  Sampler cpu;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> row(logits.begin() + r * V, logits.begin() + (r + 1) * V);
    Rng rg = token_rng(50 + r, 0);
    const SampleResult want = cpu.sample(row, ps[r], {}, rg, r == 2 ? std::span<const uint32_t>(mask) : std::span<const uint32_t>());
    EXPECT_EQ(got[r].token, want.token) << "row " << r;
    EXPECT_NEAR(got[r].logprob, want.logprob, 1e-4) << "row " << r;
    size_t listed = 0;
    for (int k = 0; k < ps[r].logprobs; ++k) {
      if (got[r].top_ids[k] < 0) break;
      ASSERT_LT(static_cast<size_t>(k), want.top.size()) << "row " << r;
      EXPECT_EQ(got[r].top_ids[k], want.top[k].token) << "row " << r << " top " << k;
      EXPECT_NEAR(got[r].top_logprobs[k], want.top[k].logprob, 1e-4);
      ++listed;
    }
    EXPECT_EQ(listed, want.top.size()) << "row " << r;
  }
  EXPECT_EQ(got[0].token, 123);
  EXPECT_TRUE(got[1].token == 77 || got[1].token == 78) << got[1].token;
  EXPECT_EQ(got[2].token, 600);
}

// Plain greedy rows through the split argmax: the general kernel's token (lowest id among tied
// maxima) for ties across slices, the maximum at either end, a constant row, -inf runs, and rows
// read through a permuted logits_row.
TEST(CudaOps, SplitGreedyMatchesTheGeneralSampler) {
  PAGODA_REQUIRE_GPU();
  for (const int64_t V : {int64_t{128256}, int64_t{5003}}) {
    ASSERT_TRUE(cuda::sample_rows_split_greedy(V)) << V;
    const int rows = 6;
    std::vector<float> logits(rows * V);
    for (int r = 0; r < rows; ++r) {
      auto row = random_floats(V, 300 + r, -4, 4);
      std::copy(row.begin(), row.end(), logits.begin() + r * V);
    }
    auto at = [&](int r, int64_t i) -> float& { return logits[r * V + i]; };
    at(1, 10) = at(1, V - 5) = at(1, V / 2) = 9.0f;  // tie in three slices: 10
    at(2, V - 1) = 9.0f;                             // the very last id
    at(3, 0) = 9.0f;                                 // the very first id
    for (int64_t i = 0; i < V; ++i) at(4, i) = -1.0f;  // constant: 0
    for (int64_t i = 0; i < V / 3; ++i) at(5, i) = -INFINITY;
    std::vector<cuda::SampleRowParams> prm(rows);
    for (int r = 0; r < rows; ++r) {
      prm[r] = {};
      prm[r].logits_row = rows - 1 - r;
      prm[r].temperature = 0;
      prm[r].top_p = 1;
      prm[r].repetition_penalty = 1;
      prm[r].logprobs = -1;
    }
    auto dl = to_device(logits), dp = to_device(prm);
    std::vector<cuda::PenaltyEntry> pens{{0, 0}};
    std::vector<int32_t> blocked{0};
    auto dpen = to_device(pens), dbl = to_device(blocked);
    auto run = [&](bool split) {
      cuda::DeviceBuffer work(rows * V * 4), mask(rows * V), out(rows * sizeof(cuda::SampleOutput));
      cuda::sample_rows(dl.as<float>(), V, dp.as<cuda::SampleRowParams>(), rows, dpen.as<cuda::PenaltyEntry>(),
                        dbl.as<int32_t>(), work.as<float>(), mask.as<uint8_t>(), out.as<cuda::SampleOutput>(), nullptr, split);
      return to_host<cuda::SampleOutput>(out, rows);
    };
    const auto general = run(false), split = run(true);
    for (int r = 0; r < rows; ++r) {
      const int lr = rows - 1 - r;
      const auto b = logits.begin() + lr * V;
      const int32_t want = static_cast<int32_t>(std::max_element(b, b + V) - b);  // first maximum
      EXPECT_EQ(general[r].token, want) << "V " << V << " row " << r;
      EXPECT_EQ(split[r].token, want) << "V " << V << " row " << r;
      EXPECT_EQ(split[r].logprob, 0.0f);
    }
    EXPECT_EQ(split[rows - 1 - 1].token, 10);
    EXPECT_EQ(split[rows - 1 - 2].token, V - 1);
    EXPECT_EQ(split[rows - 1 - 3].token, 0);
    EXPECT_EQ(split[rows - 1 - 4].token, 0);
  }
}

#endif  // PAGODA_HAVE_CUDA

}  // namespace
}  // namespace pagoda

// 2:4 structured sparsity on CUDA (backend/cuda/sparse_2of4.h, cuSPARSELt):
//   1. the pattern check: a weight pruned to 2:4 (the two largest |w| of each group of 4 inputs
//      kept) holds it; the same weight with one group of three nonzeros, or dense, does not;
//   2. the sparse GEMM of 16 to 1024 rows (Llama-3-8B's qkv and down shapes and a small one)
//      against a double reference on the same bf16 values: NMSE <= 2e-5 (bf16 output rounding);
//   3. our own 2:4 layout: pack_2of4 counts the groups that break the pattern; gemv_2of4 of 1 to 8
//      rows in every mode against a double reference;
//   4. the tiny llama3 checkpoint pruned to 2:4, its config.json declaring it (compressed-tensors
//      sparsity_config): with --cuda-sparsity auto the executor holds every decoder linear in the
//      two 2:4 layouts (no dense copy) and runs our GEMV below --cuda-sparse-min-rows rows,
//      cuSPARSELt from there; its logits over prefills of 24 to 384 rows and decode steps of 1, 4
//      and 16 rows (the GEMV, the padded tail, aligned rows) against the dense run of the same
//      checkpoint (--cuda-sparsity off): top-1 agreement on >= 98 % of rows and mean KL <= 1e-3
//      (the sparse GEMM rounds its outputs to bf16 before the f32 residual add; cuBLASLt writes
//      f32); the planner counts the layouts.
// Needs libcusparseLt.so.0 on the library path (scripts/gpu_run.sh sets it from the GPU image's
// pip package); skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <tuple>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cuda_batch_run.h"
#include "gpu_test_util.h"
#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "model/model_loader.h"
#include "reference_data.h"
#include "runtime/cuda_executor.h"
#include "test_paths.h"

#if PAGODA_HAVE_CUDA
#include "backend/cuda/kernels.h"
#include "backend/cuda/sparse_2of4.h"
#include "common/half.h"
#endif

namespace pagoda {
namespace {

#if PAGODA_HAVE_CUDA

using cuda::GemmOut;

// Keeps the two largest |w| of every group of 4 consecutive values of each row (ties: the earlier).
void prune_2of4(float* w, int64_t n) {
  for (int64_t g = 0; g + 4 <= n; g += 4) {
    int a = 0, b = 1;
    if (std::fabs(w[g + b]) > std::fabs(w[g + a])) std::swap(a, b);
    for (int i = 2; i < 4; ++i) {
      const float v = std::fabs(w[g + i]);
      if (v > std::fabs(w[g + a])) {
        b = a;
        a = i;
      } else if (v > std::fabs(w[g + b])) {
        b = i;
      }
    }
    for (int i = 0; i < 4; ++i)
      if (i != a && i != b) w[g + i] = 0.0f;
  }
}

std::unique_ptr<cuda::SparseLt> sparse_lt() {
  auto lib = cuda::SparseLt::create();
  EXPECT_TRUE(lib.ok()) << lib.status().to_string();
  return lib.ok() ? std::move(lib).value() : nullptr;
}

float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

std::vector<uint16_t> bf16_of(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]);
  return b;
}

TEST(CudaSparse, PatternCheckFindsEveryGroupOfThree) {
  PAGODA_REQUIRE_GPU();
  auto lib = sparse_lt();
  ASSERT_NE(lib, nullptr);
  const int64_t N = 256, K = 512;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(N * K));
  for (float& v : w) v = nd(rng);
  auto holds = [&](const std::vector<float>& m) {
    auto dev = test::to_device(bf16_of(m));
    auto r = lib->holds_2of4(dev.get(), N, K, nullptr);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() && *r;
  };
  EXPECT_FALSE(holds(w)) << "a dense weight";
  for (int64_t r = 0; r < N; ++r) prune_2of4(w.data() + r * K, K);
  EXPECT_TRUE(holds(w)) << "a pruned weight";
  for (const int64_t at : {int64_t{0}, (N / 2) * K + 100, N * K - 4}) {
    std::vector<float> bad = w;
    const int64_t g = at / 4 * 4;
    for (int i = 0; i < 3; ++i)
      if (bad[static_cast<size_t>(g + i)] == 0.0f) bad[static_cast<size_t>(g + i)] = 0.5f;
    EXPECT_FALSE(holds(bad)) << "three nonzeros in the group at " << g;
  }
  std::printf("[cuda-sparse] cuSPARSELt %s\n", lib->version().c_str());
}

TEST(CudaSparse, GemmMatchesTheDenseProduct) {
  PAGODA_REQUIRE_GPU();
  auto lib = sparse_lt();
  ASSERT_NE(lib, nullptr);
  const struct {
    int64_t N, K;
  } shapes[] = {{256, 512}, {6144, 4096}, {4096, 14336}};
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const auto& sh : shapes) {
    const int64_t N = sh.N, K = sh.K;
    std::vector<float> w(static_cast<size_t>(N * K));
    for (float& v : w) v = round_bf16(nd(rng) * 0.02f);
    for (int64_t r = 0; r < N; ++r) prune_2of4(w.data() + r * K, K);
    auto wd = test::to_device(bf16_of(w));
    auto holds = lib->holds_2of4(wd.get(), N, K, nullptr);
    ASSERT_TRUE(holds.ok() && *holds);
    cuda::Sparse2of4Weight sw;
    const Status cs = lib->compress(wd.get(), N, K, sw, nullptr);
    ASSERT_TRUE(cs.ok()) << cs.to_string();
    auto bytes = lib->compressed_bytes(N, K);
    ASSERT_TRUE(bytes.ok());
    EXPECT_EQ(static_cast<int64_t>(sw.compressed.bytes()), *bytes);
    EXPECT_LE(*bytes, N * K * 2 * 10 / 16) << "about 9/16 of the bf16 bytes";
    for (const int64_t M : {int64_t{16}, int64_t{64}, int64_t{1024}}) {
      SCOPED_TRACE(::testing::Message() << "N " << N << " K " << K << " M " << M);
      std::vector<float> x(static_cast<size_t>(M * K));
      for (float& v : x) v = round_bf16(nd(rng));
      auto xd = test::to_device(bf16_of(x));
      cuda::DeviceBuffer yd(static_cast<size_t>(M * N * 2));
      const Status st = lib->matmul(xd.get(), sw, M, yd.get(), nullptr);
      ASSERT_TRUE(st.ok()) << st.to_string();
      CUDA_CHECK(cudaDeviceSynchronize());
      const auto y = test::to_host<uint16_t>(yd, static_cast<size_t>(M * N));
      double err = 0, ref2 = 0;
      // About 64k outputs checked: every row, a stride of columns (all of the small shape's).
      const int64_t stride = std::max<int64_t>(1, M * N / 65536) | 1;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = (m * 7) % stride; n < N; n += stride) {
          double ref = 0;
          const float* wr = w.data() + n * K;
          const float* xr = x.data() + m * K;
          for (int64_t k = 0; k < K; ++k) ref += static_cast<double>(wr[k]) * xr[k];
          const double d = bf16_to_f32(y[static_cast<size_t>(m * N + n)]) - ref;
          err += d * d;
          ref2 += ref * ref;
        }
      EXPECT_LE(err / ref2, 2e-5);
      std::printf("[cuda-sparse] N %5lld K %5lld M %4lld: NMSE %.3g vs the double product\n", static_cast<long long>(N),
                  static_cast<long long>(K), static_cast<long long>(M), err / ref2);
      EXPECT_FALSE(lib->matmul(xd.get(), sw, M + 1, yd.get(), nullptr).ok()) << "rows not a multiple of 16";
    }
  }
}

// Our own 2:4 layout (kernels.h pack_2of4 / gemv_2of4): the pack counts every group of three
// nonzeros; the GEMV of 1 to 8 rows in every mode against a double reference on the same bf16
// values: NMSE <= 1e-9 for f32 outputs (the same products, summed in another order), <= 1e-5 for
// bf16 ones and SwiGLU (their rounding).
TEST(CudaSparse, OwnLayoutGemvMatchesTheDenseProduct) {
  PAGODA_REQUIRE_GPU();
  const struct {
    int64_t N, K;
    GemmOut mode;
  } shapes[] = {{256, 512, GemmOut::kStoreF32},
                {6144, 4096, GemmOut::kStoreF32},
                {4096, 4096, GemmOut::kAddF32},
                {28672, 4096, GemmOut::kSwiGlu},
                {4096, 14336, GemmOut::kAddF32},
                {272, 1024, GemmOut::kStoreAct}};
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  cuda::DeviceBuffer violations(sizeof(int));
  auto count_violations = [&](const cuda::DeviceBuffer& dense, int64_t N, int64_t K, cuda::DeviceBuffer& packed) {
    CUDA_CHECK(cudaMemset(violations.get(), 0, sizeof(int)));
    cuda::pack_2of4(dense.get(), N, K, packed.get(), violations.as<int>(), nullptr);
    return test::to_host<int>(violations, 1)[0];
  };
  for (const auto& sh : shapes) {
    const int64_t N = sh.N, K = sh.K;
    std::vector<float> w(static_cast<size_t>(N * K));
    for (float& v : w) v = round_bf16(nd(rng) * 0.05f);
    cuda::DeviceBuffer packed(static_cast<size_t>(cuda::sparse_2of4_bytes(N, K)));
    EXPECT_GT(count_violations(test::to_device(bf16_of(w)), N, K, packed), N * K / 8) << "a dense weight";
    for (int64_t r = 0; r < N; ++r) prune_2of4(w.data() + r * K, K);
    // One group of three, then a group with one nonzero and one with none (padded positions).
    std::vector<float> three = w;
    three[static_cast<size_t>(K + 4)] = three[static_cast<size_t>(K + 5)] = three[static_cast<size_t>(K + 6)] = 0.25f;
    EXPECT_EQ(count_violations(test::to_device(bf16_of(three)), N, K, packed), 1);
    w[0] = w[1] = w[2] = w[3] = 0.0f;
    w[4] = w[5] = w[6] = 0.0f;
    w[7] = 0.5f;
    ASSERT_EQ(count_violations(test::to_device(bf16_of(w)), N, K, packed), 0);
    const bool swiglu = sh.mode == GemmOut::kSwiGlu;
    const bool f32_out = sh.mode == GemmOut::kStoreF32 || sh.mode == GemmOut::kAddF32;
    const int64_t n_out = swiglu ? N / 2 : N;
    for (const int64_t M : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{8}}) {
      SCOPED_TRACE(::testing::Message() << "N " << N << " K " << K << " M " << M);
      std::vector<float> x(static_cast<size_t>(M * K));
      for (float& v : x) v = round_bf16(nd(rng));
      std::vector<float> y0(static_cast<size_t>(M * n_out));
      for (float& v : y0) v = sh.mode == GemmOut::kAddF32 ? nd(rng) : 0.0f;
      auto xd = test::to_device(bf16_of(x));
      auto yd = f32_out ? test::to_device(y0) : cuda::DeviceBuffer(static_cast<size_t>(M * n_out * 2));
      cuda::gemv_2of4(xd.get(), packed.get(), M, N, K, yd.get(), n_out, sh.mode, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<float> y(static_cast<size_t>(M * n_out));
      if (f32_out) {
        y = test::to_host<float>(yd, y.size());
      } else {
        const auto bits = test::to_host<uint16_t>(yd, y.size());
        for (size_t i = 0; i < y.size(); ++i) y[i] = bf16_to_f32(bits[i]);
      }
      auto dot = [&](int64_t m, int64_t n) {
        double ref = 0;
        for (int64_t k = 0; k < K; ++k) ref += static_cast<double>(w[static_cast<size_t>(n * K + k)]) * x[static_cast<size_t>(m * K + k)];
        return ref;
      };
      double err = 0, ref2 = 0;
      const int64_t stride = std::max<int64_t>(1, M * n_out / 32768) | 1;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = (m * 5) % stride; n < n_out; n += stride) {
          double ref = dot(m, n);
          if (swiglu) {
            const double g = round_bf16(static_cast<float>(ref)), u = round_bf16(static_cast<float>(dot(m, n_out + n)));
            ref = g / (1.0 + std::exp(-g)) * u;
          }
          if (sh.mode == GemmOut::kAddF32) ref += y0[static_cast<size_t>(m * n_out + n)];
          const double d = y[static_cast<size_t>(m * n_out + n)] - ref;
          err += d * d;
          ref2 += ref * ref;
        }
      EXPECT_LE(err / ref2, f32_out ? 1e-9 : 1e-5);
      if (M == 1 || M == 8)
        std::printf("[cuda-sparse] gemv_2of4 N %5lld K %5lld M %lld: NMSE %.3g vs the double product\n",
                    static_cast<long long>(N), static_cast<long long>(K), static_cast<long long>(M), err / ref2);
    }
  }
}

// The tiny llama3 checkpoint with every decoder linear pruned to 2:4 and a config.json that says
// so (compressed-tensors sparsity_config, stored dense), written to `out`.
void write_pruned_llama3(const std::string& out) {
  namespace fs = std::filesystem;
  const std::string src = test::models_dir() + "/tiny/llama3";
  fs::create_directories(out);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(src + "/config.json"));
  cfg["quantization_config"] = {{"quant_method", "compressed-tensors"},
                                {"format", "dense"},
                                {"sparsity_config",
                                 {{"format", "dense"}, {"sparsity_structure", "2:4"}, {"targets", {"Linear"}},
                                  {"ignore", {"lm_head"}}, {"global_sparsity", 0.5}}}};
  std::ofstream(out + "/config.json") << cfg.dump(2);
  auto file = SafetensorsFile::open(src + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  std::vector<SafetensorsEntry> entries;
  for (const auto& info : (*file)->tensors()) {
    ASSERT_EQ(info.dtype_name, "F32") << info.name;
    const bool prune = info.name.find(".layers.") != std::string::npos && info.shape.size() == 2;
    auto bytes = (*file)->tensor_bytes(info);
    std::vector<uint8_t> data(bytes.begin(), bytes.end());
    if (prune) {
      float* w = reinterpret_cast<float*>(data.data());
      for (int64_t r = 0; r < info.shape[0]; ++r) prune_2of4(w + r * info.shape[1], info.shape[1]);
    }
    entries.push_back({info.name, info.dtype_name, info.shape, info.nbytes(),
                       [data = std::move(data)]() -> Result<std::vector<uint8_t>> { return data; }});
  }
  const Status st = write_safetensors(out + "/model.safetensors", std::move(entries));
  ASSERT_TRUE(st.ok()) << st.to_string();
}

TEST(CudaSparse, PrunedModelMatchesItsDenseForward) {
  PAGODA_REQUIRE_GPU();
  namespace fs = std::filesystem;
  ASSERT_TRUE(fs::exists(test::models_dir() + "/tiny/llama3/model.safetensors"))
      << "scripts/make_test_models.sh writes the tiny models";
  const std::string dir = (fs::temp_directory_path() / fmt::format("pagoda_sparse_llama3_{}", ::getpid())).string();
  write_pruned_llama3(dir);
  ModelLoadOptions lo;
  lo.cpu_kernels = false;
  auto m = load_model(dir, lo);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(m->config.sparsity_2of4);
  const int64_t V = m->config.vocab_size;
  const int64_t linears = static_cast<int64_t>(m->model->weights().linears.size()) - 1;  // all but the output head
  // sparse_min_rows 2 (the default): one-row steps on our GEMV, the others on cuSPARSELt; 9: up to 8
  // rows on our GEMV; 1: every step on cuSPARSELt.
  for (const auto& [B, len, min_rows] : {std::tuple<int64_t, int64_t, int>{1, 24, 2}, {4, 24, 2}, {16, 24, 2},
                                         {4, 24, 9}, {1, 24, 1}}) {
    SCOPED_TRACE(::testing::Message() << "batch " << B << " prompt " << len << " sparse GEMM from " << min_rows << " rows");
    CudaExecutorOptions sparse_opts, dense_opts;
    sparse_opts.dtype = dense_opts.dtype = "bf16";
    sparse_opts.tuning.sparse_min_rows = min_rows;
    sparse_opts.tuning.sparsity = "auto";
    dense_opts.tuning.sparsity = "off";
    auto sparse = test::run_batch(*m, B, len, 6, sparse_opts);
    ASSERT_TRUE(sparse.ok()) << sparse.status().to_string();
    auto dense = test::run_batch(*m, B, len, 6, dense_opts);
    ASSERT_TRUE(dense.ok()) << dense.status().to_string();
    EXPECT_NE(sparse->describe.find(fmt::format("2:4 sparse {} linears", linears)), std::string::npos)
        << sparse->describe;
    EXPECT_EQ(dense->describe.find("2:4"), std::string::npos) << dense->describe;
    EXPECT_GT(sparse->weight_bytes, dense->weight_bytes) << "the planner counts the two 2:4 layouts (3/16 more)";
    ASSERT_EQ(sparse->rows, dense->rows);
    int64_t top1 = 0;
    double kl = 0, worst = 0;
    for (int64_t r = 0; r < sparse->rows; ++r) {
      const float* a = dense->logits.data() + r * V;
      const float* b = sparse->logits.data() + r * V;
      top1 += test::argmax(a, V) == test::argmax(b, V);
      const double k = test::kl_divergence(a, b, V);
      kl += k;
      worst = std::max(worst, k);
    }
    kl /= static_cast<double>(sparse->rows);
    EXPECT_GE(top1 * 100, sparse->rows * 98);
    EXPECT_LE(kl, 1e-3);
    std::printf("[cuda-sparse] tiny llama3 2:4, batch %2lld prompt %lld, sparse GEMM from %d rows: top-1 %lld/%lld, KL "
                "mean %.3g max %.3g vs the dense matmuls\n",
                static_cast<long long>(B), static_cast<long long>(len), min_rows, static_cast<long long>(top1),
                static_cast<long long>(sparse->rows), kl, worst);
  }
  // The checkpoint declares the pattern but the tuning turns it off: nothing compressed (above);
  // asked of a model whose linears do not hold it: a clear error.
  auto dense_model = load_model(test::models_dir() + "/tiny/llama3", lo);
  ASSERT_TRUE(dense_model.ok());
  CudaExecutorOptions ask;
  ask.dtype = "bf16";
  ask.tuning.sparsity = "2:4";
  auto refused = test::run_batch(*dense_model, 1, 8, 1, ask);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("no linear of this model holds the 2:4 pattern"), std::string::npos)
      << refused.status().to_string();
  fs::remove_all(dir);
}

#else
TEST(CudaSparse, NeedsCuda) { GTEST_SKIP() << "GPU test skipped: no CUDA in this build"; }
#endif

}  // namespace
}  // namespace pagoda

// Kernel micro-benchmarks of the CUDA backend on Llama-3-8B shapes (pagoda_cuda_kernel_bench, built
// with PAGODA_CUDA; not a test: nothing here is registered with CTest), in sections PAGODA_KBENCH_ONLY can pick (a list such as "gemv,decode"; all when unset): gemv
// (decode GEMVs vs cuBLASLt, heuristic and autotuned, at M = 1 .. 384), l2 (batch-1 GEMVs with
// their weights hot vs cold in L2), decode (split-KV attention at 256 x 1500 keys with scattered
// and in-order block tables, 64 x 1000, 1 x 8192 / 32768 and the short launches 1 x 512, 8 x 1024:
// tensor-core and SIMT kernels), prefill (tensor-core prefill attention at 8192 tokens: mma.sync at query
// tiles 64 and 128, wgmma at 128 on compute capability 9.0; the prefill GEMMs), elementwise (the prefill elementwise kernels), verify (a
// speculative verification's 5 query rows of one sequence at 384 and 4096 keys: the split-KV row
// kernels, as a verification graph runs them, vs one tile of the prefill kernel, as an eager
// verification step did; the matmuls at 5 rows are in gemv: cuBLASLt M=5, SIMT GEMM M=5), qgemv (the
// int8 GEMV over Q4_0 / Q4_K / Q8_0 / Q6_K weights at M = 1, 2, 8, weights cold; the q8
// activation kernels, fused with the norm and not), sparse (2:4 weights: the dense GEMV vs our 2:4
// GEMV at M = 1..8, cuBLASLt vs cuSPARSELt at M = 16..8192). Median of
// CUDA-event timings after warm-ups, on random data. A measurement: the ASSERTs only stop a section
// whose set-up failed. Run on a GPU machine: scripts/gpu_run.sh kbench (docs/cuda.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "cuda_fixtures.h"
#include "gpu_test_util.h"

#if PAGODA_HAVE_CUDA
#include "backend/cuda/blas.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/quant_layout.h"
#include "backend/cuda/sparse_2of4.h"
#include "common/half.h"
#endif

namespace pagoda {
namespace {

#if PAGODA_HAVE_CUDA

using test::to_device;

// Median milliseconds of fn over `reps` runs after 3 warm-ups.
double time_ms(const std::function<void()>& fn, int reps = 20) {
  for (int i = 0; i < 3; ++i) fn();
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    CUDA_CHECK(cudaEventRecord(a, nullptr));
    fn();
    CUDA_CHECK(cudaEventRecord(b, nullptr));
    CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// A device buffer of `bytes` filled with random bf16 values in [-1, 1] (random, not constant).
cuda::DeviceBuffer random_device(size_t bytes) {
  static cuda::DeviceBuffer pattern;
  constexpr size_t kPattern = size_t{32} << 20;  // bytes
  if (!pattern.get()) {
    std::vector<uint16_t> h(kPattern / 2);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (auto& v : h) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      v = f32_to_bf16(static_cast<float>(static_cast<int64_t>(s % 2001) - 1000) * 1e-3f);
    }
    pattern = to_device(h);
  }
  cuda::DeviceBuffer b(bytes);
  for (size_t off = 0; off < bytes; off += kPattern)
    CUDA_CHECK(cudaMemcpy(b.as<uint8_t>() + off, pattern.get(), std::min(kPattern, bytes - off), cudaMemcpyDeviceToDevice));
  return b;
}

// A quantized [N, K] weight in the device layout (quant_layout.h): random codes, every fp16 scale
// and min field set to a random value in [2^-10, 2^-7] (valid, finite), Q6_K's int8 sub-block
// scales random. Timing only: the values need not come from a quantizer.
cuda::DeviceBuffer random_quant_device(DType f, int64_t N, int64_t K) {
  const int64_t bb = dtype_traits(f).block_bytes, blocks = N * (K / dtype_traits(f).block_size);
  std::vector<uint8_t> h(static_cast<size_t>(blocks * bb));
  uint64_t s = 0x2545f4914f6cdd1dull;
  auto next = [&] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  };
  for (size_t i = 0; i + 8 <= h.size(); i += 8) {
    const uint64_t v = next();
    std::memcpy(h.data() + i, &v, 8);
  }
  // Byte offsets of the fp16 fields in a block (GGUF layouts, quant/blocks.h).
  std::vector<int64_t> halves;
  switch (f) {
    case DType::kQ4_0: case DType::kQ8_0: halves = {0}; break;
    case DType::kQ4_K: halves = {0, 2}; break;
    case DType::kQ6_K: halves = {208}; break;
    default: ADD_FAILURE() << "random_quant_device: no layout for " << dtype_name(f); return cuda::DeviceBuffer(16);
  }
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t o : halves) {
      const uint16_t v = f32_to_fp16(std::ldexp(1.0f + static_cast<float>(next() % 1024) / 1024.0f, -10 + static_cast<int>(next() % 3)));
      std::memcpy(h.data() + b * bb + o, &v, 2);
    }
  std::vector<uint8_t> dev(static_cast<size_t>(N * cuda::device_row_bytes(f, K)));
  cuda::to_device_quant_layout(f, h.data(), dev.data(), N, K);
  return to_device(dev);
}

TEST(CudaKernelBench, LlamaEightBShapes) {
  PAGODA_REQUIRE_GPU();
  // PAGODA_KBENCH_ONLY=gemv,decode,... runs only the sections named (all when unset).
  const char* only = std::getenv("PAGODA_KBENCH_ONLY");
  // Whole names: "qgemv" does not pick "gemv".
  auto want = [&](const char* section) {
    return !only || (std::string(",") + only + ",").find(std::string(",") + section + ",") != std::string::npos;
  };
  auto ceil = cuda_measure_ceilings(0, int64_t{2} << 30, 8192);
  ASSERT_TRUE(ceil.ok());
  const double bw = ceil->copy_bandwidth;
  std::printf("[kbench] device copy bandwidth %.1f GB/s (read + write)\n", bw / 1e9);
  const int64_t D = 4096, F = 14336, V = 128256, H = 32, KVH = 8, Dh = 128, Nqkv = (H + 2 * KVH) * Dh;
  auto report_bw = [&](const std::string& name, double bytes, double ms) {
    std::printf("[kbench] %-40s %8.1f us %8.1f GB/s %5.1f%% of copy\n", name.c_str(), ms * 1e3, bytes / ms / 1e6,
                100.0 * bytes / (ms * 1e-3) / bw);
  };
  cuda::BlasLt blas;
  struct Shape {
    const char* name;
    int64_t N, K;
    cuda::GemmOut mode;
    bool norm;
  };
  const Shape shapes[] = {{"qkv  6144x4096 +norm", Nqkv, D, cuda::GemmOut::kStoreF32, true},
                          {"o    4096x4096 +=", D, D, cuda::GemmOut::kAddF32, false},
                          {"gate/up 28672x4096 +norm +swiglu", 2 * F, D, cuda::GemmOut::kSwiGlu, true},
                          {"down 4096x14336 +=", D, F, cuda::GemmOut::kAddF32, false},
                          {"lm_head 128256x4096 +norm", V, D, cuda::GemmOut::kStoreF32, true}};
  auto x = random_device(384 * F * 2), res = random_device(64 * D * 4), g = random_device(D * 4);
  cuda::DeviceBuffer y(std::max(size_t{64} * V * 4, size_t{384} * 2 * F * 4));
  CUDA_CHECK(cudaMemset(res.get(), 0, res.bytes()));  // residual values only scale the norm
  CUDA_CHECK(cudaMemset(y.get(), 0, y.bytes()));
  for (const Shape& sh : shapes) {
    if (!want("gemv")) break;
    auto w = random_device(static_cast<size_t>(sh.N * sh.K * 2));
    const double bytes = static_cast<double>(sh.N) * sh.K * 2;
    const cuda::GemvNorm nrm{res.as<float>(), nullptr, g.as<float>(), 1e-5f};
    const int64_t ldy = sh.mode == cuda::GemmOut::kSwiGlu ? sh.N / 2 : sh.N;
    auto run_gemv = [&](int64_t M) {
      return time_ms([&] {
        cuda::gemv_bf16(x.get(), w.get(), M, sh.N, sh.K, y.get(), ldy, sh.mode, nullptr, sh.norm ? &nrm : nullptr);
      });
    };
    for (int64_t M : {1, 2, 4}) report_bw(fmt::format("gemv M={} {}", M, sh.name), bytes, run_gemv(M));
    // The batch-invariant SIMT GEMM at a verification's 5 rows (gate/up without the fused SwiGLU).
    {
      const cuda::GemmOut mode = sh.mode == cuda::GemmOut::kSwiGlu ? cuda::GemmOut::kStoreAct : sh.mode;
      const double ms = time_ms([&] { cuda::gemm_simt(x.get(), w.get(), DType::kBF16, 5, sh.N, sh.K, y.get(), sh.N, mode, nullptr); });
      report_bw(fmt::format("simt gemm M=5 {}", sh.name), bytes, ms);
    }
    // cuBLASLt at decode batches: the heuristic's first choice, then autotuned (BlasLt::set_autotune).
    for (int64_t M : {1, 5, 8, 64, 256, 384}) {
      for (bool tuned : {false, true}) {
        if (M > 64 && sh.N == V) continue;  // x / y buffers hold 64 rows of the vocabulary
        if (tuned && M < cuda::BlasLt::kTuneMinM) continue;
        cuda::BlasLt bl;
        bl.set_autotune(tuned);
        const bool f32_out = sh.mode != cuda::GemmOut::kSwiGlu;
        const double ms = time_ms([&] {
          bl.matmul(x.get(), w.get(), DType::kBF16, M, sh.N, sh.K, y.get(), f32_out ? DType::kF32 : DType::kBF16,
                    sh.mode == cuda::GemmOut::kAddF32, nullptr);
        });
        std::printf("[kbench] %-40s %8.1f us %8.1f TFLOP/s\n",
                    fmt::format("cublasLt M={} {}{}", M, sh.name, tuned ? " tuned" : "").c_str(), ms * 1e3,
                    2.0 * M * sh.N * sh.K / ms / 1e9);
      }
    }
  }
  // Batch-1 GEMVs with their weights cold in L2 (a different copy of the matrix each run, 8 copies
  // of 33-50 MB: more than the L2 holds) against hot (the same copy each run, as the gemv section
  // times them): how much of a small GEMV's time is DRAM and how much is the kernel's own latency.
  if (want("l2")) {
    for (const Shape& sh : shapes) {
      const double bytes = static_cast<double>(sh.N) * sh.K * 2;
      if (bytes > double(48 << 20)) continue;  // qkv (48 MiB) and o (32 MiB): the ones the 50 MiB L2 holds
      std::vector<cuda::DeviceBuffer> ws;
      for (int i = 0; i < 8; ++i) ws.push_back(random_device(static_cast<size_t>(bytes)));
      const cuda::GemvNorm nrm{res.as<float>(), nullptr, g.as<float>(), 1e-5f};
      for (bool cold : {false, true}) {
        int next = 0;
        const double ms = time_ms([&] {
          const void* w = ws[cold ? (next++ % 8) : 0].get();
          cuda::gemv_bf16(x.get(), w, 1, sh.N, sh.K, y.get(), sh.N, sh.mode, nullptr, sh.norm ? &nrm : nullptr);
        });
        report_bw(fmt::format("gemv M=1 {} L2 {}", sh.name, cold ? "cold" : "hot"), bytes, ms);
      }
    }
  }
  // The int8 GEMV over native quantized weights (gemv_quant; dp4a over q8 activations) at batch 1,
  // 2 and 8 on the 8B layer shapes and Qwen3-30B-A3B's attention, weights cold in L2 (a different copy each run: copies of at
  // least 160 MB in all), GB/s counted on the weight bytes read (device_row_bytes x N); then the
  // kernels that make its activations at M = 1: quantize_activations_q8 alone, rms_norm +
  // quantize_activations_q8 (the unfused path) and rms_norm_q8 (the fused one).
  if (want("qgemv")) {
    const Shape qshapes[] = {{"qkv  6144x4096", Nqkv, D, cuda::GemmOut::kStoreF32, false},
                             {"o    4096x4096 +=", D, D, cuda::GemmOut::kAddF32, false},
                             {"gate/up 28672x4096 +swiglu", 2 * F, D, cuda::GemmOut::kSwiGlu, false},
                             {"down 4096x14336 +=", D, F, cuda::GemmOut::kAddF32, false},
                             // Qwen3-30B-A3B's attention (hidden 2048, 32 x 128 query heads, 4 kv heads)
                             {"a3b qkv 5120x2048", 5120, 2048, cuda::GemmOut::kStoreF32, false},
                             {"a3b o 2048x4096 +=", 2048, 4096, cuda::GemmOut::kAddF32, false}};
    const int64_t kMaxM = 8;
    auto xa = random_device(static_cast<size_t>(kMaxM * F * 2));
    cuda::DeviceBuffer xq(kMaxM * F), xds(kMaxM * (F / 32) * 8), yq(kMaxM * 2 * F * 4);
    cuda::quantize_activations_q8(xa.get(), DType::kBF16, kMaxM, F, xq.as<int8_t>(), xds.as<float2>(), nullptr);
    CUDA_CHECK(cudaMemset(yq.get(), 0, yq.bytes()));
    for (DType f : {DType::kQ4_0, DType::kQ4_K, DType::kQ8_0, DType::kQ6_K}) {
      for (const Shape& sh : qshapes) {
        const double bytes = static_cast<double>(cuda::device_row_bytes(f, sh.K)) * sh.N;
        const int copies = std::max(2, static_cast<int>(std::ceil(160e6 / bytes)));
        std::vector<cuda::DeviceBuffer> ws;
        ws.push_back(random_quant_device(f, sh.N, sh.K));
        for (int i = 1; i < copies; ++i) {
          cuda::DeviceBuffer c(ws.front().bytes());
          CUDA_CHECK(cudaMemcpy(c.get(), ws.front().get(), c.bytes(), cudaMemcpyDeviceToDevice));
          ws.push_back(std::move(c));
        }
        const int64_t ldy = sh.mode == cuda::GemmOut::kSwiGlu ? sh.N / 2 : sh.N;
        for (int64_t M : {1, 2, 8}) {
          // xq holds rows of F codes; the GEMV reads M x K of them (any valid codes do for timing).
          int next = 0;
          const double ms = time_ms([&] {
            const void* w = ws[next++ % copies].get();
            cuda::gemv_quant(xq.as<int8_t>(), xds.as<float2>(), w, f, M, sh.N, sh.K, yq.get(), ldy, sh.mode, nullptr);
          });
          std::printf("[kbench] %-40s %8.1f us %8.1f GB/s %5.1f%% of copy\n",
                      fmt::format("qgemv {} M={} {}", dtype_name(f), M, sh.name).c_str(), ms * 1e3, bytes / ms / 1e6,
                      100.0 * bytes / (ms * 1e-3) / bw);
        }
      }
    }
    for (int64_t K : {D, F}) {
      auto xr = random_device(static_cast<size_t>(K * 4));
      auto gk = random_device(static_cast<size_t>(K * 4));
      cuda::DeviceBuffer xn(K * 2);
      cuda::rms_norm(xr.as<float>(), nullptr, 1, K, gk.as<float>(), 1e-5f, xn.get(), DType::kBF16, nullptr);
      std::printf("[kbench] %-40s %8.1f us\n", fmt::format("quantize_activations_q8 M=1 K={}", K).c_str(),
                  1e3 * time_ms([&] {
                    cuda::quantize_activations_q8(xn.get(), DType::kBF16, 1, K, xq.as<int8_t>(), xds.as<float2>(), nullptr);
                  }));
      std::printf("[kbench] %-40s %8.1f us\n", fmt::format("rms_norm + quantize_q8 M=1 K={}", K).c_str(),
                  1e3 * time_ms([&] {
                    cuda::rms_norm(xr.as<float>(), nullptr, 1, K, gk.as<float>(), 1e-5f, xn.get(), DType::kBF16, nullptr);
                    cuda::quantize_activations_q8(xn.get(), DType::kBF16, 1, K, xq.as<int8_t>(), xds.as<float2>(), nullptr);
                  }));
      bool fused = true;
      const double ms = time_ms([&] {
        fused = fused && cuda::rms_norm_q8(xr.as<float>(), nullptr, 1, K, gk.as<float>(), 1e-5f, DType::kBF16,
                                           xq.as<int8_t>(), xds.as<float2>(), nullptr);
      });
      ASSERT_TRUE(fused) << "rms_norm_q8 refused K " << K;
      std::printf("[kbench] %-40s %8.1f us\n", fmt::format("rms_norm_q8 M=1 K={}", K).c_str(), ms * 1e3);
    }
  }
  if (want("sparse")) {
    // 2:4 sparse weights: the dense GEMV vs our 2:4 GEMV (9/16 of the bytes) at 1..8 rows, weights
    // cold (copies past L2); cuBLASLt vs cuSPARSELt's sparse GEMM (bf16 out) at 16..8192 rows.
    const Shape sshapes[] = {{"qkv  6144x4096", Nqkv, D, cuda::GemmOut::kStoreF32, false},
                             {"o    4096x4096 +=", D, D, cuda::GemmOut::kAddF32, false},
                             {"gate/up 28672x4096 +swiglu", 2 * F, D, cuda::GemmOut::kSwiGlu, false},
                             {"down 4096x14336 +=", D, F, cuda::GemmOut::kAddF32, false}};
    auto lib = cuda::SparseLt::create();
    if (!lib.ok()) std::printf("[kbench] cuSPARSELt unavailable: %s\n", lib.status().to_string().c_str());
    constexpr int64_t kMaxRows = 8192;
    auto xs = random_device(static_cast<size_t>(kMaxRows * F * 2));
    cuda::DeviceBuffer ys(static_cast<size_t>(kMaxRows * 2 * F * 2)), viol(sizeof(int));
    CUDA_CHECK(cudaMemset(ys.get(), 0, ys.bytes()));
    for (const Shape& sh : sshapes) {
      // A 2:4 weight: the random pattern with two of every four values zeroed (positions vary by group).
      std::vector<uint16_t> h(static_cast<size_t>(sh.N * sh.K));
      uint64_t st = 0x9e3779b97f4a7c15ull;
      for (size_t i = 0; i < h.size(); i += 4) {
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        const int a = static_cast<int>(st % 4), b = (a + 1 + static_cast<int>((st >> 8) % 3)) % 4;
        for (int j = 0; j < 4; ++j)
          h[i + static_cast<size_t>(j)] = (j == a || j == b) ? f32_to_bf16(static_cast<float>((st >> (16 + 4 * j)) % 15 + 1) * 1e-2f) : 0;
      }
      auto dense = to_device(h);
      const double dense_bytes = static_cast<double>(sh.N) * sh.K * 2;
      const double packed_bytes = static_cast<double>(cuda::sparse_2of4_bytes(sh.N, sh.K));
      const int copies = std::max(2, static_cast<int>(std::ceil(160e6 / packed_bytes)));
      std::vector<cuda::DeviceBuffer> dws, pws;
      for (int i = 0; i < copies; ++i) {
        cuda::DeviceBuffer d(dense.bytes());
        CUDA_CHECK(cudaMemcpy(d.get(), dense.get(), d.bytes(), cudaMemcpyDeviceToDevice));
        cuda::DeviceBuffer p(static_cast<size_t>(packed_bytes));
        CUDA_CHECK(cudaMemset(viol.get(), 0, sizeof(int)));
        cuda::pack_2of4(d.get(), sh.N, sh.K, p.get(), viol.as<int>(), nullptr);
        dws.push_back(std::move(d));
        pws.push_back(std::move(p));
      }
      ASSERT_EQ(test::to_host<int>(viol, 1)[0], 0) << "the bench weight is 2:4";
      const int64_t ldy = sh.mode == cuda::GemmOut::kSwiGlu ? sh.N / 2 : sh.N;
      for (int64_t M : {1, 2, 4, 8}) {
        int next = 0;
        const double sparse_ms = time_ms([&] {
          cuda::gemv_2of4(xs.get(), pws[next++ % copies].get(), M, sh.N, sh.K, ys.get(), ldy, sh.mode, nullptr);
        });
        report_bw(fmt::format("2:4 gemv M={} {}", M, sh.name), packed_bytes, sparse_ms);
        if (!cuda::gemv_supported(M, sh.K)) continue;  // the dense GEMV takes up to 4 rows
        next = 0;
        const double dense_ms = time_ms([&] {
          cuda::gemv_bf16(xs.get(), dws[next++ % copies].get(), M, sh.N, sh.K, ys.get(), ldy, sh.mode, nullptr);
        });
        report_bw(fmt::format("dense gemv M={} {}", M, sh.name), dense_bytes, dense_ms);
        std::printf("[kbench] %-40s %8.2fx\n", fmt::format("2:4 gemv speedup M={} {}", M, sh.name).c_str(),
                    dense_ms / sparse_ms);
      }
      if (!lib.ok()) continue;
      cuda::Sparse2of4Weight sw;
      const Status cs = (*lib)->compress(dense.get(), sh.N, sh.K, sw, nullptr);
      ASSERT_TRUE(cs.ok()) << cs.to_string();
      for (int64_t M : {16, 64, 256, 1024, 8192}) {
        const double flop = 2.0 * M * sh.N * sh.K;
        const double cublas_ms = time_ms([&] {
          blas.matmul(xs.get(), dense.get(), DType::kBF16, M, sh.N, sh.K, ys.get(), DType::kBF16, false, nullptr);
        });
        Status st;
        const double sparse_ms = time_ms([&] { st = (*lib)->matmul(xs.get(), sw, M, ys.get(), nullptr); });
        ASSERT_TRUE(st.ok()) << st.to_string();
        std::printf("[kbench] %-40s %8.1f us %7.1f TFLOP/s | cuSPARSELt %8.1f us %7.1f TFLOP/s dense-equivalent: %.2fx\n",
                    fmt::format("cublasLt bf16 M={} {}", M, sh.name).c_str(), cublas_ms * 1e3, flop / cublas_ms / 1e9,
                    sparse_ms * 1e3, flop / sparse_ms / 1e9, cublas_ms / sparse_ms);
      }
    }
  }
  // Split-KV attention: batch 256 x 1500 keys, 64 x 1000, batch 1 at 8192 and 32768 keys, and the
  // short launches 1 x 512 and 8 x 1024 (the SIMT kernel by default); variants below.
  // Block tables scattered over the cache (as a long-running engine's are), and for 256 x 1500 also
  // in order (each row's pages adjacent): the cost of the scatter (DRAM pages, TLB reach).
  struct DecodeCase {
    int64_t rows, ctx;
    bool in_order;
  };
  // PAGODA_KBENCH_KV=f8_e4m3: the attention sections on an FP8 cache (the KV bytes halve).
  const char* kv_env = std::getenv("PAGODA_KBENCH_KV");
  const DType kv_dt = kv_env && *kv_env ? dtype_from_name(kv_env).value_or(DType::kF32) : DType::kBF16;
  ASSERT_TRUE(kv_dt == DType::kBF16 || kv_dt == DType::kF8E4M3) << "PAGODA_KBENCH_KV: bf16 or f8_e4m3, got " << kv_env;
  const int64_t kv_es = row_bytes(kv_dt, 1);
  std::vector<DecodeCase> cases = {{256, 1500, false}, {256, 1500, true}, {64, 1000, false}, {1, 8192, false},
                                   {1, 32768, false},  {1, 512, false},   {8, 1024, false}};
  // PAGODA_KBENCH_DECODE=ROWS:KEYS,...: these cases instead (scattered tables), e.g. a throughput
  // run's decode step (440:1500) for Nsight Compute.
  if (const char* e = std::getenv("PAGODA_KBENCH_DECODE"); e && *e) {
    cases.clear();
    for (const char* c = e; *c;) {
      char* end = nullptr;
      const int64_t rows = std::strtoll(c, &end, 10);
      const int64_t ctx = *end == ':' ? std::strtoll(end + 1, &end, 10) : 0;
      ASSERT_TRUE(rows > 0 && ctx > 0) << "PAGODA_KBENCH_DECODE: ROWS:KEYS,... expected, got " << e;
      cases.push_back({rows, ctx, false});
      c = *end == ',' ? end + 1 : end;
    }
  }
  for (auto [rows, ctx, in_order] : cases) {
    if (!want("decode")) break;
    const int64_t bs = 16, blocks_per = (ctx + bs - 1) / bs, blocks = rows * blocks_per;
    auto kc = random_device(static_cast<size_t>(blocks * KVH * bs * Dh * kv_es)), vc = random_device(kc.bytes());
    std::vector<int32_t> tables(rows * blocks_per), rt(rows), rs(rows), rc(rows, static_cast<int32_t>(ctx));
    for (int64_t i = 0; i < rows * blocks_per; ++i) tables[i] = static_cast<int32_t>(in_order ? i : (i * 7919) % blocks);
    for (int64_t r = 0; r < rows; ++r) rt[r] = rs[r] = static_cast<int32_t>(r);
    auto q = random_device(static_cast<size_t>(rows * H * Dh * 4));
    CUDA_CHECK(cudaMemset(q.get(), 0, q.bytes()));
    cuda::DeviceBuffer out(rows * H * Dh * 2);
    const test::AttnCase shape{H, KVH, Dh, bs, kv_dt, 0, DType::kBF16};
    const test::RowBatch rb(rt, rs, rc, tables, blocks_per, shape);
    cuda::RowAttentionParams p = rb.params(shape, q.as<float>(), out.get(), {kc.get(), vc.get(), kv_dt, blocks, bs, KVH, Dh});
    p.max_keys = ctx;
    // The default choice (tensor cores, SIMT for short launches), a grid of one wave (3 blocks an SM;
    // the default is two waves), SIMT, and for short launches tensor cores.
    struct Variant {
      const char* label;
      bool tensor_cores, tc_short;
      int blocks_per_sm;
    };
    const bool short_launch = cuda::row_attention_short(rows, ctx);
    for (const Variant& v : {Variant{"", true, false, 0}, Variant{" grid 3/SM", true, false, 3},
                             Variant{" (SIMT)", false, false, 0}, Variant{" (tensor cores)", true, true, 0}}) {
      if (v.tc_short && !short_launch) continue;
      if (short_launch && v.tensor_cores && !v.tc_short) continue;  // the same launch as SIMT
      p.tensor_cores = v.tensor_cores;
      p.tensor_cores_short = v.tc_short;
      p.blocks_per_sm = v.blocks_per_sm;
      const double ms = time_ms([&] { cuda::row_attention(p, nullptr); });
      report_bw(fmt::format("split-KV attention {} x {}{}{}", rows, ctx, in_order ? " in order" : "", v.label),
                2.0 * rows * ctx * KVH * Dh * kv_es, ms);
      // The tensor-core kernel's bound on a row's splits (row_attention_splits picks it by default;
      // 32: one split per 256 keys, the rule before).
      if (std::getenv("PAGODA_KBENCH_SPLITS") && v.tensor_cores && !v.tc_short && v.blocks_per_sm == 0)
        for (int ns : {32, 16, 4, 2, 1}) {
          p.target_splits = ns;
          const double kms = time_ms([&] { cuda::row_attention(p, nullptr); });
          p.target_splits = 0;
          report_bw(fmt::format("split-KV attention {} x {} splits <= {}", rows, ctx, ns), 2.0 * rows * ctx * KVH * Dh * kv_es, kms);
        }
    }
  }
  // A verification's attention: one sequence, 5 query rows at contexts ctx - 4 .. ctx, one layer.
  for (int64_t ctx : {int64_t{384}, int64_t{4096}}) {
    if (!want("verify")) break;
    const int64_t bs = 16, blocks = (ctx + bs - 1) / bs, R = 5;
    auto kc = random_device(static_cast<size_t>(blocks * KVH * bs * Dh * kv_es)), vc = random_device(kc.bytes());
    std::vector<int32_t> table(blocks), rt(R), rs(R, 0), rc(R);
    for (int64_t i = 0; i < blocks; ++i) table[i] = static_cast<int32_t>(i);
    for (int64_t r = 0; r < R; ++r) {
      rt[r] = static_cast<int32_t>(r);
      rc[r] = static_cast<int32_t>(ctx - R + 1 + r);
    }
    auto q = random_device(static_cast<size_t>(R * H * Dh * 4));
    CUDA_CHECK(cudaMemset(q.get(), 0, q.bytes()));
    cuda::DeviceBuffer out(R * H * Dh * 2);
    const cuda::KvCacheLayer cache{kc.get(), vc.get(), kv_dt, blocks, bs, KVH, Dh};
    const test::AttnCase shape{H, KVH, Dh, bs, kv_dt, 0, DType::kBF16};
    const test::RowBatch rb(rt, rs, rc, table, blocks, shape);
    cuda::RowAttentionParams p = rb.params(shape, q.as<float>(), out.get(), cache);
    const double bytes = 2.0 * ctx * KVH * Dh * kv_es;  // one sequence's keys and values
    for (bool tc : {false, true}) {
      p.max_keys = cuda::row_attention_short(R, ctx) ? std::min(ctx, cuda::kRowShortKeys) : ctx;
      p.tensor_cores = tc;
      p.tensor_cores_short = tc;
      report_bw(fmt::format("verify 5 rows x {} split-KV {}", ctx, tc ? "tensor cores" : "SIMT"), bytes,
                time_ms([&] { cuda::row_attention(p, nullptr); }));
    }
    auto dt = to_device(table);
    std::vector<cuda::PrefillSeq> seqs = {{0, static_cast<int32_t>(R), static_cast<int32_t>(ctx), 0}};
    std::vector<cuda::PrefillItem> items = {{0, 0}};
    auto dseqs = to_device(seqs), ditems = to_device(items);
    for (int tile : {64, 128}) {
      cuda::PrefillAttentionParams pp;
      pp.q = q.as<float>();
      pp.q_stride = H * Dh;
      pp.out = out.get();
      pp.out_dtype = DType::kBF16;
      pp.out_stride = H * Dh;
      pp.seqs = dseqs.as<cuda::PrefillSeq>();
      pp.items = ditems.as<cuda::PrefillItem>();
      pp.num_items = 1;
      pp.block_tables = dt.as<int32_t>();
      pp.bt_stride = blocks;
      pp.cache = cache;
      pp.num_heads = H;
      pp.scale = 0.088f;
      pp.tile_q = tile;
      report_bw(fmt::format("verify 5 rows x {} prefill tile {}", ctx, tile), bytes,
                time_ms([&] { cuda::prefill_attention(pp, nullptr); }));
    }
  }
  // Tensor-core prefill attention, 8192 tokens, one layer.
  if (want("prefill")) {
    const int64_t T = 8192, bs = 16, blocks = T / bs;
    auto kc = random_device(static_cast<size_t>(blocks * KVH * bs * Dh * kv_es)), vc = random_device(kc.bytes());
    auto q = random_device(static_cast<size_t>(T * H * Dh * 4));
    CUDA_CHECK(cudaMemset(q.get(), 0, q.bytes()));
    std::vector<int32_t> table(blocks);
    for (int64_t i = 0; i < blocks; ++i) table[i] = static_cast<int32_t>(i);
    auto dt = to_device(table);
    std::vector<cuda::PrefillSeq> seqs = {{0, static_cast<int32_t>(T), static_cast<int32_t>(T), 0}};
    auto dseqs = to_device(seqs);
    cuda::DeviceBuffer out(T * H * Dh * 2);
    const std::pair<int, cuda::PrefillKernel> variants[] = {
        {64, cuda::PrefillKernel::kMmaSync}, {128, cuda::PrefillKernel::kMmaSync}, {128, cuda::PrefillKernel::kWgmma}};
    for (auto [tile, kernel] : variants) {
      std::vector<cuda::PrefillItem> items;
      for (int32_t q0 = static_cast<int32_t>(T) - tile; q0 >= 0; q0 -= tile) items.push_back({0, q0});
      auto ditems = to_device(items);
      cuda::PrefillAttentionParams p;
      p.q = q.as<float>();
      p.q_stride = H * Dh;
      p.out = out.get();
      p.out_dtype = DType::kBF16;
      p.out_stride = H * Dh;
      p.seqs = dseqs.as<cuda::PrefillSeq>();
      p.items = ditems.as<cuda::PrefillItem>();
      p.num_items = static_cast<int64_t>(items.size());
      p.block_tables = dt.as<int32_t>();
      p.bt_stride = blocks;
      p.cache = {kc.get(), vc.get(), kv_dt, blocks, bs, KVH, Dh};
      p.num_heads = H;
      p.scale = 0.088f;
      p.tile_q = tile;
      p.kernel = kernel;
      const bool wgmma = kernel == cuda::PrefillKernel::kWgmma;
      if (wgmma && !cuda::prefill_attention_wgmma_supported(p)) continue;
      const double ms = time_ms([&] { cuda::prefill_attention(p, nullptr); }, 5);
      const double flops = 4.0 * H * Dh * (double(T) * (T + 1) / 2);
      std::printf("[kbench] %-40s %8.1f us %8.1f TFLOP/s\n",
                  fmt::format("prefill attention 8192 tile {}{}", tile, wgmma ? " wgmma" : "").c_str(), ms * 1e3,
                  flops / ms / 1e9);
    }
  }
  // The elementwise kernels of prefill at 8192 tokens (bytes read + written).
  if (want("elementwise")) {
    const int64_t T = 8192, bs = 16, blocks = T / bs;
    auto gu = random_device(static_cast<size_t>(T * 2 * F * 2));
    cuda::DeviceBuffer act(static_cast<size_t>(T * F * 2));
    report_bw("swiglu 8192 x 14336 bf16", 3.0 * T * F * 2,
              time_ms([&] { cuda::swiglu(gu.get(), T, F, act.get(), DType::kBF16, nullptr); }, 10));
    cuda::DeviceBuffer xr(static_cast<size_t>(T * D * 4)), xn(static_cast<size_t>(T * D * 2));
    CUDA_CHECK(cudaMemset(xr.get(), 0, xr.bytes()));
    report_bw("rms_norm 8192 x 4096 f32 -> bf16", double(T) * D * 6,
              time_ms([&] { cuda::rms_norm(xr.as<float>(), nullptr, T, D, g.as<float>(), 1e-5f, xn.get(), DType::kBF16, nullptr); }, 10));
    cuda::DeviceBuffer qkv(static_cast<size_t>(T * Nqkv * 4)), qo(static_cast<size_t>(T * H * Dh * 4));
    CUDA_CHECK(cudaMemset(qkv.get(), 0, qkv.bytes()));
    cuda::DeviceBuffer kc(static_cast<size_t>(blocks * KVH * bs * Dh * 2)), vc(kc.bytes());
    std::vector<float> cs(static_cast<size_t>(T * Dh / 2), 1.0f), sn(cs.size(), 0.0f);
    std::vector<int32_t> pos(T), slots(T);
    for (int64_t i = 0; i < T; ++i) pos[i] = slots[i] = static_cast<int32_t>(i);
    auto dcs = to_device(cs), dsn = to_device(sn), dpos = to_device(pos), dslots = to_device(slots);
    cuda::RopeKvParams rp;
    rp.qkv = qkv.as<float>();
    rp.num_tokens = T;
    rp.num_heads = H;
    rp.head_dim = rp.rope_dim = Dh;
    rp.cos = dcs.as<float>();
    rp.sin = dsn.as<float>();
    rp.positions = dpos.as<int32_t>();
    rp.slots = dslots.as<int32_t>();
    rp.q_out = qo.as<float>();
    rp.cache = {kc.get(), vc.get(), DType::kF16, blocks, bs, KVH, Dh};
    report_bw("rope + KV write 8192 tokens", double(T) * (Nqkv * 4 + H * Dh * 4 + 2 * KVH * Dh * 2),
              time_ms([&] { cuda::rope_kv_write(rp, nullptr); }, 10));
  }
  // Prefill GEMMs at M = 8192 (cuBLASLt): f32 out, bf16 out, f32 accumulate.
  if (want("prefill")) {
    const int64_t M = 8192;
    auto xa = random_device(static_cast<size_t>(M * F * 2));
    cuda::DeviceBuffer ya(static_cast<size_t>(M) * 2 * F * 4);
    CUDA_CHECK(cudaMemset(ya.get(), 0, ya.bytes()));
    for (const Shape& sh : shapes) {
      if (sh.N == V) continue;
      auto w = random_device(static_cast<size_t>(sh.N * sh.K * 2));
      const bool f32_out = sh.mode != cuda::GemmOut::kSwiGlu;
      const double ms = time_ms([&] {
        blas.matmul(xa.get(), w.get(), DType::kBF16, M, sh.N, sh.K, ya.get(), f32_out ? DType::kF32 : DType::kBF16,
                    sh.mode == cuda::GemmOut::kAddF32, nullptr);
      }, 5);
      std::printf("[kbench] %-40s %8.1f us %8.1f TFLOP/s (%.1f%% of %.0f)\n",
                  fmt::format("cublasLt M=8192 {}", sh.name).c_str(), ms * 1e3, 2.0 * M * sh.N * sh.K / ms / 1e9,
                  100.0 * 2.0 * M * sh.N * sh.K / (ms * 1e-3) / ceil->bf16_gemm_flops, ceil->bf16_gemm_flops / 1e12);
    }
  }
}

#endif

}  // namespace
}  // namespace pagoda

// linear() on the projection shapes of SmolLM2-135M (hidden 576, ffn 1536, vocab 49152; q4_1,
// q8_0) and Llama-3.2-1B (hidden 2048, ffn 8192, vocab 128256; f16, q8_0), GEMV (M = 1) and GEMM
// (M = 512), 1 and 2 threads; the other formats on a 2048 x 2048 shape, and q2_k, tq2_0, q3_k (the
// 2-bit code layouts) on Llama's FFN shape. Counters: GB/s = weight bytes / time (the decode
// roofline), GFLOP/s = 2 M N K / time, and their ratios to the machine's measured read bandwidth /
// peak (measured once per thread count; the int paths are compared with the VNNI peak, float with
// the FMA peak).
//
//   build/bench/pagoda_kernel_bench --benchmark_filter=Linear --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <ctime>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/isa.h"
#include "backend/cpu/machine_probe.h"
#include "ops/linear.h"
#include "quant/quant.h"

namespace {

using pagoda::DType;

struct Ceilings {
  double bw_gbs, fma_gflops, vnni_gops;
};

const Ceilings& ceilings(int threads) {
  static std::map<int, Ceilings> cache;
  auto it = cache.find(threads);
  if (it == cache.end()) {
    pagoda::ThreadPool pool(threads);
    Ceilings c{pagoda::cpu::measure_read_bandwidth(pool, size_t{512} << 20, 3), pagoda::cpu::measure_fma_peak(pool),
               pagoda::cpu::measure_vnni_peak(pool)};
    it = cache.emplace(threads, c).first;
  }
  return it->second;
}

// One quantized random row repeated (quantizing 100M+ elements per benchmark would dominate).
pagoda::Tensor make_weight(DType t, int64_t n, int64_t k) {
  pagoda::Tensor w = pagoda::Tensor::empty(t, {n, k});
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  const int64_t distinct = 64;
  std::vector<float> row(k);
  for (int64_t r = 0; r < std::min(n, distinct); ++r) {
    for (auto& v : row) v = dist(rng);
    pagoda::quant::quantize_row(t, row.data(), w.row_ptr(r), k);
  }
  for (int64_t r = distinct; r < n; ++r) std::memcpy(w.row_ptr(r), w.row_ptr(r % distinct), w.row_bytes());
  return w;
}

struct Prepared {
  pagoda::Tensor w;
  std::shared_ptr<const pagoda::LinearWeight> lw;
};

const Prepared& prepared(DType t, int64_t n, int64_t k) {
  static std::map<std::tuple<int, int64_t, int64_t>, Prepared> cache;
  const auto key = std::make_tuple(static_cast<int>(t), n, k);
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() > 2) cache.clear();  // keep memory bounded (vocab-sized weights are large)
    Prepared p;
    p.w = make_weight(t, n, k);
    p.lw = *pagoda::prepare_linear(p.w, "bench");
    it = cache.emplace(key, std::move(p)).first;
  }
  return it->second;
}

void BM_Linear(benchmark::State& state, DType t, int64_t n, int64_t k) {
  const int64_t m = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const Ceilings& c = ceilings(threads);
  const Prepared& p = prepared(t, n, k);
  pagoda::ThreadPool pool(threads);
  std::vector<float> x(m * k), y(m * n);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  for (auto& v : x) v = dist(rng);
  timespec c0, c1;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
  for (auto _ : state) {
    pagoda::linear(*p.lw, x.data(), m, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  }
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
  // Process CPU seconds: on a shared, oversubscribed machine the 1-thread figure per CPU second is
  // the load-independent one (for 2 threads it also counts the spinning of waiting workers).
  const double cpu_s = (c1.tv_sec - c0.tv_sec) + 1e-9 * (c1.tv_nsec - c0.tv_nsec);
  const double s = state.iterations();
  const double bytes = static_cast<double>(p.w.nbytes());
  const double flops = 2.0 * m * n * k;
  state.counters["GB/s"] = benchmark::Counter(bytes * s / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * s / 1e9, benchmark::Counter::kIsRate);
  state.counters["GB/s_cpu"] = bytes * s / 1e9 / cpu_s * threads;
  state.counters["GFLOP/s_cpu"] = flops * s / 1e9 / cpu_s * threads;
  state.counters["bw_GB/s"] = c.bw_gbs;
  const bool int_path = pagoda::is_quantized(t);
  const double peak = int_path ? c.vnni_gops : c.fma_gflops;
  state.counters["peak_G/s"] = peak;
  // ratios use real time on both sides (the ceilings are measured the same way, just before)
  state.counters["bw_ratio"] = benchmark::Counter(bytes * s / 1e9 / c.bw_gbs, benchmark::Counter::kIsRate);
  if (peak > 0) state.counters["peak_ratio"] = benchmark::Counter(flops * s / 1e9 / peak, benchmark::Counter::kIsRate);
  state.SetLabel(std::string(pagoda::dtype_name(t)) + " " + isa_level_name(pagoda::linear_weight_isa(*p.lw)));
}

struct Shape {
  const char* model;
  const char* name;
  int64_t n, k;
};

int register_all() {
  const std::vector<Shape> smol = {{"smollm2", "attn_q_o", 576, 576}, {"smollm2", "attn_kv", 192, 576},
                                   {"smollm2", "ffn_gate_up", 1536, 576}, {"smollm2", "ffn_down", 576, 1536},
                                   {"smollm2", "lm_head", 49152, 576}};
  const std::vector<Shape> llama = {{"llama1b", "attn_q_o", 2048, 2048}, {"llama1b", "attn_kv", 512, 2048},
                                    {"llama1b", "ffn_gate_up", 8192, 2048}, {"llama1b", "ffn_down", 2048, 8192},
                                    {"llama1b", "lm_head", 128256, 2048}};
  auto reg = [](const Shape& s, DType t) {
    const bool vocab = std::string(s.name) == "lm_head";
    const std::string base = std::string("Linear/") + s.model + "/" + s.name + "/" + std::string(pagoda::dtype_name(t));
    auto* gemv = benchmark::RegisterBenchmark((base + "/gemv").c_str(), BM_Linear, t, s.n, s.k);
    gemv->ArgNames({"M", "threads"})->Args({1, 1})->Args({1, 2})->UseRealTime()->Unit(benchmark::kMicrosecond);
    if (!vocab) {
      auto* gemm = benchmark::RegisterBenchmark((base + "/gemm").c_str(), BM_Linear, t, s.n, s.k);
      gemm->ArgNames({"M", "threads"})->Args({16, 2})->Args({64, 2})->Args({512, 1})->Args({512, 2})->UseRealTime()->Unit(benchmark::kMillisecond);
    }
  };
  for (const auto& s : smol)
    for (DType t : {DType::kQ4_1, DType::kQ8_0}) reg(s, t);
  for (const auto& s : llama)
    for (DType t : {DType::kF16, DType::kQ8_0}) reg(s, t);
  // the other weight formats on one mid-size shape, for comparison
  for (DType t : {DType::kF32, DType::kBF16, DType::kQ4_0, DType::kQ5_0, DType::kQ5_1, DType::kQ4_K, DType::kQ5_K,
                  DType::kQ6_K})
    reg(Shape{"formats", "2048x2048", 2048, 2048}, t);
  // the 2-bit layout (q2_k; tq1_0 and tq2_0 run its kernels) and q3_k (q6_k's) at the decode size
  for (DType t : {DType::kQ2_K, DType::kTQ2_0, DType::kQ3_K}) reg(llama[2], t);
  return 0;
}
const int registered = register_all();

}  // namespace

namespace {

// Every projection of one SmolLM2-135M-Instruct Q4_1 forward step (30 layers x q, k, v, o, gate,
// up, down in q4_1 + the tied q8_0 output head, as in the GGUF the project runs), M tokens: the
// matmul share of a decode (M = 1) or prefill (M = 512) step, comparable with llama.cpp's tg / pp
// on the same model (its figures include attention, norms, sampling: a few % at this size).
void BM_SmolLM2StepMatmuls(benchmark::State& state) {
  const int64_t m = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  struct W {
    int64_t n, k;
    DType t;
  };
  const std::vector<W> layer = {{576, 576, DType::kQ4_1},  {192, 576, DType::kQ4_1},  {192, 576, DType::kQ4_1},
                                {576, 576, DType::kQ4_1},  {1536, 576, DType::kQ4_1}, {1536, 576, DType::kQ4_1},
                                {576, 1536, DType::kQ4_1}};
  static std::vector<Prepared> weights;
  static double total_bytes = 0;
  if (weights.empty()) {
    for (int l = 0; l < 30; ++l)
      for (const W& w : layer) {
        Prepared p;
        p.w = make_weight(w.t, w.n, w.k);
        p.lw = *pagoda::prepare_linear(p.w, "layer");
        total_bytes += static_cast<double>(p.w.nbytes());
        weights.push_back(std::move(p));
      }
    Prepared head;
    head.w = make_weight(DType::kQ8_0, 49152, 576);
    head.lw = *pagoda::prepare_linear(head.w, "output");
    total_bytes += static_cast<double>(head.w.nbytes());
    weights.push_back(std::move(head));
  }
  pagoda::ThreadPool pool(threads);
  std::vector<float> x(m * 1536, 0.5f), y(m * 49152);
  for (auto _ : state) {
    for (size_t i = 0; i + 1 < weights.size(); ++i) pagoda::linear(*weights[i].lw, x.data(), m, y.data(), pool);
    // the output head only on the last token (what a forward pass does)
    pagoda::linear(*weights.back().lw, x.data(), 1, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(m) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["GB/s"] = benchmark::Counter(total_bytes * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SmolLM2StepMatmuls)
    ->ArgNames({"M", "threads"})
    ->Args({1, 1})
    ->Args({1, 2})
    ->Args({512, 1})
    ->Args({512, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

// `pagoda bench`: llama-bench style offline throughput of the model forward pass.
//   pp<P>: one prompt of P tokens processed in one batch into an empty cache.
//   tg<N>: N decode steps of B sequences (one new token each per step), context growing 1..N.
// Every record carries achieved memory bandwidth (weights + KV bytes read per step / step time)
// against the machine's measured read bandwidth, and for pp the achieved FLOP/s against the
// measured f32 FMA peak. Timing: a warm-up run, then R repetitions (mean and stddev).
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "common/cpu_features.h"
#include "model/model_loader.h"
#include "backend/cpu/machine_probe.h"
#include "common/process_stats.h"

namespace pagoda::cli {

std::vector<CommandInfo>& bench_subcommand_registry() {
  static std::vector<CommandInfo> registry;
  return registry;
}

namespace {

struct BenchOptions {
  std::string model;
  int prompt = 512;
  int gen = 128;
  int batch = 1;
  int threads = 0;
  int repeats = 5;
  std::string kv_dtype = "f16";
  std::string isa;
  bool json = false;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Stats {
  double mean = 0, stddev = 0;
};
Stats stats_of(const std::vector<double>& v) {
  Stats s;
  if (v.empty()) return s;
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  double var = 0;
  for (double x : v) var += (x - s.mean) * (x - s.mean);
  s.stddev = v.size() > 1 ? std::sqrt(var / (v.size() - 1)) : 0;
  return s;
}

struct MachineCeilings {
  double read_bandwidth = 0, fma_peak = 0, vnni_peak = 0;  // bytes/s, flop/s, op/s
};

MachineCeilings measure_ceilings(int threads) {
  ThreadPool pool(threads);
  return {cpu::measure_read_bandwidth(pool) * 1e9, cpu::measure_fma_peak(pool) * 1e9, cpu::measure_vnni_peak(pool) * 1e9};
}

// Runs the probes in a forked child (before this process starts any thread) and reads the
// result back through a pipe; falls back to measuring in-process if fork fails.
MachineCeilings measure_ceilings_in_child(int threads) {
  int fds[2];
  if (pipe(fds) != 0) return measure_ceilings(threads);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return measure_ceilings(threads);
  }
  if (pid == 0) {
    close(fds[0]);
    const MachineCeilings c = measure_ceilings(threads);
    const ssize_t n = write(fds[1], &c, sizeof(c));
    _exit(n == static_cast<ssize_t>(sizeof(c)) ? 0 : 1);
  }
  close(fds[1]);
  MachineCeilings c;
  const ssize_t n = read(fds[0], &c, sizeof(c));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return n == static_cast<ssize_t>(sizeof(c)) ? c : measure_ceilings(threads);
}

int run_bench(const BenchOptions& o) {
  if (!o.isa.empty()) {
    IsaLevel level;
    if (!parse_isa_level(o.isa, &level)) {
      std::cerr << "pagoda bench: unknown --isa '" << o.isa << "' (scalar, avx2, avx512, avx512-vnni, amx)\n";
      return 2;
    }
    set_isa_level_cap(level);
  }
  auto kv_dtype = dtype_from_name(o.kv_dtype);
  if (!kv_dtype || (*kv_dtype != DType::kF32 && *kv_dtype != DType::kF16 && *kv_dtype != DType::kBF16)) {
    std::cerr << "pagoda bench: --kv-dtype must be f32, f16 or bf16\n";
    return 2;
  }
  if (o.prompt < 0 || o.gen < 0 || o.batch < 1 || o.repeats < 1) {
    std::cerr << "pagoda bench: -p, -n must be >= 0, -b and -r >= 1\n";
    return 2;
  }
  // Machine ceilings, bytes/s and op/s: decode is bound by the first, prefill by the FMA peak
  // (float weights) or the int8 VNNI peak (quantized weights, integer dot products). Measured in
  // a child process so the probe's 512 MiB buffer stays out of this process's peak RSS.
  const MachineCeilings ceilings = measure_ceilings_in_child(o.threads);
  const double bandwidth = ceilings.read_bandwidth, fma_peak = ceilings.fma_peak, vnni_peak = ceilings.vnni_peak;
  ModelLoadOptions lo;
  lo.max_model_len = std::max(o.prompt, o.gen) + 1;
  auto loaded = load_model(o.model, lo);
  if (!loaded.ok()) {
    std::cerr << "pagoda bench: " << loaded.status().to_string() << "\n";
    return 1;
  }
  const ModelConfig& cfg = loaded->config;
  ThreadPool pool(o.threads);

  // Bytes of every matmul weight (read once per forward step) and the linear-parameter count.
  const LlamaWeights& w = loaded->model->weights();
  int64_t weight_bytes = 0, linear_params = 0;
  for (const LinearWeight* lw : w.linear_weights()) {
    weight_bytes += linear_weight_tensor(*lw).nbytes();
    if (lw != w.output.get()) linear_params += linear_weight_tensor(*lw).numel();
  }
  const bool quantized = is_quantized(linear_weight_tensor(*w.layers.at(0).wqkv).dtype());
  const double compute_peak = quantized && vnni_peak > 0 ? vnni_peak : fma_peak;
  const char* peak_name = quantized && vnni_peak > 0 ? "int8 VNNI" : "f32 FMA";
  const int64_t kv_token_bytes = cfg.kv_bytes_per_token(*kv_dtype);
  const int64_t block_size = 16;
  const int64_t max_ctx = std::max(o.prompt, o.gen) + 1;
  const int64_t blocks_per_seq = (max_ctx + block_size - 1) / block_size;
  const int64_t seqs = std::max(1, o.batch);
  KvCacheStorage kv(cfg, blocks_per_seq * seqs, block_size, *kv_dtype);
  ForwardWorkspace ws;
  Tensor logits;
  std::vector<std::vector<int32_t>> tables(seqs);
  for (int64_t s = 0; s < seqs; ++s)
    for (int64_t b = 0; b < blocks_per_seq; ++b) tables[s].push_back(static_cast<int32_t>(s * blocks_per_seq + b));
  auto token = [&](int64_t i) { return static_cast<int32_t>((i * 7919 + 13) % cfg.vocab_size); };

  nlohmann::json records = nlohmann::json::array();
  auto report = [&](const std::string& test, int64_t tokens, const std::vector<double>& times, double bytes, double flops) {
    std::vector<double> tps;
    for (double t : times) tps.push_back(tokens / t);
    const Stats s = stats_of(tps);
    const double mean_time = std::accumulate(times.begin(), times.end(), 0.0) / times.size();
    nlohmann::json r;
    r["test"] = test;
    r["tokens"] = tokens;
    r["tokens_per_s"] = s.mean;
    r["tokens_per_s_stddev"] = s.stddev;
    r["runs"] = times.size();
    r["bytes_read"] = bytes;
    r["bandwidth_gb_s"] = bytes / mean_time / 1e9;
    r["bandwidth_ratio"] = bytes / mean_time / bandwidth;
    if (flops > 0) {
      r["gflop_s"] = flops / mean_time / 1e9;
      r["compute_peak_ratio"] = flops / mean_time / compute_peak;
    }
    records.push_back(r);
  };

  if (o.prompt > 0) {
    std::vector<int32_t> ids(o.prompt);
    for (int i = 0; i < o.prompt; ++i) ids[i] = token(i);
    std::vector<double> times;
    for (int r = -1; r < o.repeats; ++r) {
      ForwardBatch b;
      b.add_sequence(ids, o.prompt, tables[0], block_size);
      const auto t0 = std::chrono::steady_clock::now();
      loaded->model->forward(b, kv, ws, logits, pool);
      if (r >= 0) times.push_back(seconds_since(t0));
    }
    const double attn_flops = 4.0 * cfg.num_layers * cfg.num_heads * cfg.head_dim * (double(o.prompt) * (o.prompt + 1) / 2);
    const double flops = 2.0 * linear_params * o.prompt + attn_flops + 2.0 * cfg.vocab_size * cfg.hidden_size;
    const double bytes = weight_bytes + double(kv_token_bytes) * o.prompt;
    report(fmt::format("pp{}", o.prompt), o.prompt, times, bytes, flops);
  }
  if (o.gen > 0) {
    std::vector<double> times;
    double bytes = 0;
    for (int r = -1; r < o.repeats; ++r) {
      double t = 0, run_bytes = 0;
      for (int step = 0; step < o.gen; ++step) {
        ForwardBatch b;
        for (int64_t s = 0; s < seqs; ++s) b.add_sequence({token(step + s)}, step + 1, tables[s], block_size);
        const auto t0 = std::chrono::steady_clock::now();
        loaded->model->forward(b, kv, ws, logits, pool);
        t += seconds_since(t0);
        run_bytes += weight_bytes + double(kv_token_bytes) * (step + 1) * seqs;
      }
      if (r >= 0) times.push_back(t);
      bytes = run_bytes;
    }
    report(o.batch > 1 ? fmt::format("tg{} b{}", o.gen, o.batch) : fmt::format("tg{}", o.gen), int64_t(o.gen) * seqs,
           times, bytes, 0);
  }

  nlohmann::json out;
  out["model"] = o.model;
  out["config"] = cfg.summary();
  out["threads"] = pool.size();
  out["isa"] = isa_level_name(active_isa_level());
  out["cpu"] = cpu_features().brand;
  out["kv_dtype"] = o.kv_dtype;
  out["weight_bytes"] = weight_bytes;
  out["machine_read_bandwidth_gb_s"] = bandwidth / 1e9;
  out["machine_fma_peak_gflop_s"] = fma_peak / 1e9;
  out["machine_vnni_peak_gop_s"] = vnni_peak / 1e9;
  out["compute_peak_used"] = peak_name;
  out["peak_rss_mib"] = static_cast<double>(peak_rss_bytes()) / (1 << 20);
  out["results"] = records;
  if (o.json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format("model {}  threads {}  isa {}  kv {}\n", o.model, pool.size(), isa_level_name(active_isa_level()),
                           o.kv_dtype);
  std::cout << fmt::format("machine: read bandwidth {:.1f} GB/s, f32 FMA peak {:.1f} GFLOP/s, int8 VNNI peak {:.1f} GOP/s; "
                           "compute ratios use the {} peak; peak RSS {:.0f} MiB\n",
                           bandwidth / 1e9, fma_peak / 1e9, vnni_peak / 1e9, peak_name,
                           static_cast<double>(peak_rss_bytes()) / (1 << 20));
  std::cout << fmt::format("| {:<10} | {:>16} | {:>12} | {:>8} | {:>12} | {:>8} |\n", "test", "t/s", "GB/s", "bw %", "GFLOP/s", "peak %");
  std::cout << "|------------|------------------|--------------|----------|--------------|----------|\n";
  for (const auto& r : records) {
    const bool has_flops = r.contains("gflop_s");
    std::cout << fmt::format("| {:<10} | {:>8.2f} ± {:<5.2f} | {:>12.2f} | {:>7.1f}% | {:>12} | {:>8} |\n",
                             r["test"].get<std::string>(), r["tokens_per_s"].get<double>(),
                             r["tokens_per_s_stddev"].get<double>(), r["bandwidth_gb_s"].get<double>(),
                             100 * r["bandwidth_ratio"].get<double>(),
                             has_flops ? fmt::format("{:.1f}", r["gflop_s"].get<double>()) : "-",
                             has_flops ? fmt::format("{:.1f}%", 100 * r["compute_peak_ratio"].get<double>()) : "-");
  }
  return 0;
}

const CommandRegistration kBench("bench", "Benchmarks: offline pp/tg (llama-bench style, the default), `serve`, `throughput`", [](CLI::App* app) {
  auto o = std::make_shared<BenchOptions>();
  // Sub-subcommands (bench serve, bench throughput) register themselves; without one, --model is needed.
  auto subs = std::make_shared<std::vector<std::pair<CLI::App*, std::function<int()>>>>();
  for (auto& cmd : bench_subcommand_registry()) {
    CLI::App* sub = app->add_subcommand(cmd.name, cmd.description);
    subs->emplace_back(sub, cmd.setup(sub));
  }
  app->require_subcommand(0, 1);
  app->add_option("--model,-m", o->model, "GGUF file or Hugging Face model directory");
  app->add_option("-p,--prompt", o->prompt, "Prompt tokens for the pp test (0: skip)");
  app->add_option("-n,--gen", o->gen, "Generated tokens for the tg test (0: skip)");
  app->add_option("-b,--batch", o->batch, "Sequences decoded together in the tg test");
  app->add_option("-t,--threads", o->threads, "Threads (default: one per core)");
  app->add_option("-r,--repeats", o->repeats, "Timed repetitions (after one warm-up)");
  app->add_option("--kv-dtype", o->kv_dtype, "KV cache element type: f16, bf16, f32");
  app->add_option("--isa", o->isa, "Cap the kernel ISA level: scalar, avx2, avx512, avx512-vnni, amx");
  app->add_flag("--json", o->json, "Print JSON");
  return [o, subs] {
    for (auto& [sub, action] : *subs)
      if (sub->parsed()) return action();
    if (o->model.empty()) {
      std::cerr << "pagoda bench: --model is required (or use `pagoda bench serve` / `pagoda bench throughput`)\n";
      return 2;
    }
    return run_bench(*o);
  };
});

}  // namespace
}  // namespace pagoda::cli

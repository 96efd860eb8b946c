// `pagoda bench`: llama-bench style offline throughput of the model forward pass, on the CPU or a
// CUDA device (--device), through the same ModelExecutor the engine uses.
//   pp<P>: one prompt of P tokens processed in one batch into an empty cache.
//   tg<N>: N decode steps of B sequences (one new token each per step, greedy sampling included),
//          context growing 1..N.
//   --requests R: offline serving throughput instead: R requests of --input-len prompt tokens
//          and --output-len generated tokens (ignore EOS, greedy) submitted at once to the engine
//          core (continuous batching, chunked prefill); output tokens/s and total tokens/s.
// Every pp/tg record carries achieved memory bandwidth (weights + KV bytes read per step / step
// time) against the machine's measured bandwidth, and for pp the achieved FLOP/s against the
// measured compute peak. CPU: read bandwidth and f32 FMA (or int8 VNNI) peak. CUDA: the
// device-to-device copy bandwidth (bytes read + bytes written, as the achieved figure counts
// bytes moved) and the cuBLASLt bf16 GEMM rate at 8192^3 (the FP8 GEMM's for FP8 weights kept on
// the device: F8E4M3Rows). Timing: a warm-up run, then R
// repetitions (mean and stddev).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "backend/cpu/machine_probe.h"
#include "cli/command.h"
#include "cli/options.h"
#include "common/cpu_features.h"
#include "common/process_stats.h"
#include "engine/engine_core.h"
#include "engine/tensor_parallel_executor.h"
#include "model/model_loader.h"
#include "runtime/cuda_executor.h"
#include "runtime/split_executor.h"
#include "engine/device_spec.h"
#include "runtime/memory_plan.h"

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
  std::vector<int> batches = {1};
  int threads = 0;
  int repeats = 5;
  std::string kv_dtype = "f16";
  std::string isa;
  bool json = false;
  WeightQuantization quantization = WeightQuantization::kNone;
  LoadFormat load_format = LoadFormat::kAuto;
  std::string device = "auto";
  std::string dtype = "auto";
  bool cuda_graphs = true;
  bool compare_graphs = false;
  bool batch_invariant = false;
  int prefill_tile = 128;
  // Offline serving throughput: one run per (requests, input, output) triple (lists are zipped).
  std::vector<int> requests;
  std::vector<int> input_len = {128};
  std::vector<int> output_len = {128};
  int max_num_seqs = 256;
  int max_num_batched_tokens = 8192;
  double memory_utilization = 0.9;
  std::string cpu_offload;
  int64_t cpu_offload_bytes = 0;  // resolved from cpu_offload before run_bench
  int64_t n_gpu_layers = -1;      // CPU + GPU layer split (EngineConfig::n_gpu_layers)
  int tensor_parallel_size = 1;   // EngineConfig::tensor_parallel_size
  TuningFlags tuning_flags;
  TuningConfig tuning;  // resolved from tuning_flags and the environment before run_bench
  SpeculativeOptions spec_flags;
  SpeculativeConfig speculative;  // resolved from spec_flags before run_bench (offline throughput runs)
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

// Rank 0's executor of a tensor-parallel model and the other ranks (engine/tensor_parallel_executor.h);
// co null: CPU ranks.
Result<std::unique_ptr<ModelExecutor>> tensor_parallel_executor(const LoadedModel& loaded, const BenchOptions& o, int device,
                                                                const KvCacheSpec& spec, CudaExecutorOptions* co,
                                                                ThreadPool& pool) {
  TensorParallelSetup ts;
  ts.device_index = device;
  ts.model = o.model;
  ts.load_format = o.load_format;
  ts.quantization = o.quantization;
  ts.threads = o.threads;
  PAGODA_ASSIGN_OR_RETURN(auto group, start_tensor_parallel(ts, loaded, co));
  return make_tensor_parallel_executor(std::move(group), loaded, spec, co, pool);
}

// Offline throughput through the engine core (no tokenizer, no server thread): one core, one run
// per (requests, input length, output length).
int run_throughput(const BenchOptions& o, LoadedModel loaded, const DType kv_dtype, nlohmann::json& runs) {
  const size_t n_runs = o.requests.size();
  auto pick = [](const std::vector<int>& v, size_t i) { return v.at(std::min(i, v.size() - 1)); };
  int max_len = 0;
  for (size_t i = 0; i < n_runs; ++i) max_len = std::max(max_len, pick(o.input_len, i) + pick(o.output_len, i) + 1);
  EngineConfig cfg;
  cfg.model = o.model;
  cfg.threads = o.threads;
  cfg.device = o.device;
  cfg.quantization = o.quantization;
  cfg.load_format = o.load_format;
  cfg.dtype = o.dtype;
  cfg.cuda_graphs = o.cuda_graphs;
  cfg.batch_invariant = o.batch_invariant;
  cfg.tuning = o.tuning;
  cfg.kv_dtype = kv_dtype;
  cfg.max_model_len = max_len;
  cfg.scheduler.max_num_seqs = o.max_num_seqs;
  cfg.scheduler.max_num_batched_tokens = o.max_num_batched_tokens;
  if (o.device != "cpu") cfg.memory_utilization = o.memory_utilization;
  cfg.cpu_offload_bytes = o.cpu_offload_bytes;
  cfg.n_gpu_layers = o.n_gpu_layers;
  cfg.tensor_parallel_size = o.tensor_parallel_size;
  cfg.speculative = o.speculative;
  const int64_t vocab = loaded.config.vocab_size;
  ThreadPool pool(o.threads);
  const auto t_create = std::chrono::steady_clock::now();
  auto core = EngineCore::create(cfg, std::move(loaded), pool);
  if (!core.ok()) {
    std::cerr << "pagoda bench: " << core.status().to_string() << "\n";
    return 1;
  }
  const double create_s = seconds_since(t_create);
  if (!o.json)
    std::cout << (*core)->executor().describe() << "\ntuning: " << o.tuning.to_string() << "\n"
              << (*core)->memory_plan().to_string() << "\n";
  std::mt19937_64 rng(1234);
  for (size_t run = 0; run < n_runs; ++run) {
    const int n_req = o.requests[run], in_len = pick(o.input_len, run), out_len = pick(o.output_len, run);
    for (int i = 0; i < n_req; ++i) {
      auto r = std::make_unique<Request>();
      r->id = fmt::format("bench-{}-{}", run, i);
      for (int k = 0; k < in_len; ++k) r->prompt.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
      r->sampling.temperature = 0;
      r->stop.max_tokens = out_len;
      r->stop.ignore_eos = true;
      const Status st = (*core)->add_request(std::move(r));
      if (!st.ok()) {
        std::cerr << "pagoda bench: " << st.to_string() << "\n";
        return 1;
      }
    }
    const int64_t preempt0 = (*core)->scheduler().num_preemptions();
    const CoreStats spec0 = (*core)->stats();
    const auto t0 = std::chrono::steady_clock::now();
    int64_t steps = 0;
    double next_report = 10;
    while ((*core)->has_unfinished()) {
      (*core)->step();
      ++steps;
      if (const double el = seconds_since(t0); el >= next_report) {  // progress, in case a run is cut short
        const CoreStats& cs = (*core)->stats();
        std::cerr << fmt::format("[progress] {:.0f} s: {} steps, {} generated tokens ({:.0f} tok/s so far)\n", el, steps,
                                 cs.generation_tokens, cs.generation_tokens / el);
        next_report += 10;
      }
    }
    const double secs = seconds_since(t0);
    std::cerr << (*core)->executor().profile_report();
    {
      const CoreStats& cs = (*core)->stats();
      std::cerr << fmt::format("engine steps {}: schedule {:.2f} s, runner {:.2f} s, update {:.2f} s\n", cs.steps,
                               cs.schedule_s, cs.execute_s, cs.update_s);
    }
    const int64_t out_tokens = int64_t{n_req} * out_len, in_tokens = int64_t{n_req} * in_len;
    const DeviceMemoryStats dm = (*core)->executor().device_memory();
    nlohmann::json r;
    r["test"] = fmt::format("throughput {}x({} in, {} out)", n_req, in_len, out_len);
    r["requests"] = n_req;
    r["input_len"] = in_len;
    r["output_len"] = out_len;
    r["max_num_seqs"] = o.max_num_seqs;
    r["max_num_batched_tokens"] = o.max_num_batched_tokens;
    r["seconds"] = secs;
    r["steps"] = steps;
    r["output_tokens_per_s"] = out_tokens / secs;
    r["total_tokens_per_s"] = (out_tokens + in_tokens) / secs;
    r["requests_per_s"] = n_req / secs;
    r["preemptions"] = (*core)->scheduler().num_preemptions() - preempt0;
    r["device_memory_used_gib"] = static_cast<double>(dm.used) / (1 << 30);
    r["engine_create_s"] = create_s;
    r["memory_plan"] = (*core)->memory_plan().to_json();
    r["device"] = (*core)->executor().describe();
    {
      const CoreStats& cs = (*core)->stats();
      std::vector<int64_t> per_pos(cs.spec_accepted_per_position);
      for (size_t j = 0; j < per_pos.size() && j < spec0.spec_accepted_per_position.size(); ++j)
        per_pos[j] -= spec0.spec_accepted_per_position[j];
      const int64_t drafts = cs.spec_num_drafts - spec0.spec_num_drafts;
      const int64_t draft_tokens = cs.spec_num_draft_tokens - spec0.spec_num_draft_tokens;
      const int64_t accepted = cs.spec_num_accepted_tokens - spec0.spec_num_accepted_tokens;
      if (o.speculative.enabled()) {
        r["speculative"] = o.speculative.to_string();
        r["spec_num_drafts"] = drafts;
        r["spec_num_draft_tokens"] = draft_tokens;
        r["spec_num_accepted_tokens"] = accepted;
        r["spec_accepted_per_position"] = per_pos;
        if (!o.json)
          std::cout << "speculative " << o.speculative.to_string() << ": "
                    << speculative_summary(drafts, draft_tokens, accepted, per_pos) << "\n";
      }
    }
    if (!o.json)
      std::cout << fmt::format("{}: {:.2f} s, {} steps, {:.1f} output tok/s, {:.1f} total tok/s, {:.2f} req/s, {} preemptions, "
                               "device memory used {:.1f} GiB\n",
                               r["test"].get<std::string>(), secs, steps, out_tokens / secs,
                               (out_tokens + in_tokens) / secs, n_req / secs, r["preemptions"].get<int64_t>(),
                               static_cast<double>(dm.used) / (1 << 30));
    runs.push_back(r);
  }
  return 0;
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
  auto dev = parse_device(o.device);
  if (!dev.ok()) {
    std::cerr << "pagoda bench: " << dev.status().to_string() << "\n";
    return 2;
  }
  const bool cuda = dev->type == Device::kCuda;
  auto kv_dtype = dtype_from_name(o.kv_dtype);
  if (!kv_dtype || !kv_cache_dtype_supported(*kv_dtype)) {
    std::cerr << "pagoda bench: --kv-dtype must be f32, f16, bf16 or f8_e4m3 (fp8, CUDA only)\n";
    return 2;
  }
  const int max_batch = o.batches.empty() ? 1 : *std::max_element(o.batches.begin(), o.batches.end());
  const int min_batch = o.batches.empty() ? 1 : *std::min_element(o.batches.begin(), o.batches.end());
  if (o.prompt < 0 || o.gen < 0 || min_batch < 1 || o.repeats < 1) {
    std::cerr << "pagoda bench: -p, -n must be >= 0, -b and -r >= 1\n";
    return 2;
  }
  for (int r : o.requests)
    if (r < 1) {
      std::cerr << "pagoda bench: --requests must be >= 1\n";
      return 2;
    }
  int max_len = std::max(o.prompt, o.gen) + 1;
  for (size_t i = 0; i < o.requests.size(); ++i)
    max_len = std::max(max_len, o.input_len.at(std::min(i, o.input_len.size() - 1)) +
                                    o.output_len.at(std::min(i, o.output_len.size() - 1)) + 1);
  // CPU ceilings, bytes/s and op/s: decode is bound by the first, prefill by the FMA peak (float
  // weights) or the int8 VNNI peak (quantized weights, integer dot products). Measured in a child
  // process so the probe's 512 MiB buffer stays out of this process's peak RSS.
  const MachineCeilings cpu_ceilings =
      cuda || (o.prompt == 0 && o.gen == 0) ? MachineCeilings{} : measure_ceilings_in_child(o.threads);
  ModelLoadOptions lo;
  lo.max_model_len = max_len;
  // A layer split's CPU part reads its layers prepared for the CPU kernels (from layer N on).
  lo.cpu_kernels = !cuda || o.n_gpu_layers > 0;
  lo.cpu_kernels_from_layer = cuda ? std::max<int64_t>(0, o.n_gpu_layers) : 0;
  lo.quantization = o.quantization;
  lo.load_format = o.load_format;
  lo.tensor_parallel_size = o.tensor_parallel_size;
  const auto t_load = std::chrono::steady_clock::now();
  auto loaded = load_model(o.model, lo);
  if (!loaded.ok()) {
    std::cerr << "pagoda bench: " << loaded.status().to_string() << "\n";
    return 1;
  }
  const double load_s = seconds_since(t_load);
  const ModelConfig cfg = loaded->config;
  const int64_t split_layers = cuda && o.n_gpu_layers > 0 && o.n_gpu_layers < cfg.num_layers ? o.n_gpu_layers : 0;
  ThreadPool pool(cuda && split_layers == 0 ? 1 : o.threads);
  nlohmann::json records = nlohmann::json::array();
  nlohmann::json out;
  out["model"] = o.model;
  out["config"] = cfg.summary();
  out["kv_dtype"] = o.kv_dtype;
  out["tuning"] = o.tuning.to_string();
  out["model_load_s"] = load_s;

  if (o.prompt > 0 || o.gen > 0) {
    // Machine ceilings: decode is bound by bandwidth, prefill by the compute peak.
    double bandwidth = 0, compute_peak = 0;
    std::string peak_name, bw_name, machine;
    const auto& linears = loaded->model->weights().linears;
    const bool quantized = std::any_of(linears.begin(), linears.end(),
                                       [](const LinearEntry& e) { return is_quantized(e.parts.at(0).dtype()); });
    // FP8 weights (F8E4M3Rows, kept on the device): prefill runs the FP8 GEMM, so its rate is the peak.
    const bool fp8 = std::any_of(linears.begin(), linears.end(),
                                 [](const LinearEntry& e) { return e.parts.at(0).dtype() == DType::kF8E4M3Rows; });
    if (cuda) {
      auto c = cuda_measure_ceilings(dev->index, int64_t{4} << 30, 8192, fp8);
      if (!c.ok()) {
        std::cerr << "pagoda bench: " << c.status().to_string() << "\n";
        return 1;
      }
      bandwidth = c->copy_bandwidth;
      compute_peak = fp8 ? c->fp8_gemm_flops : c->bf16_gemm_flops;
      peak_name = !fp8 ? "cuBLASLt bf16 GEMM 8192^3"
                  : c->fp8_outer_vec ? "cuBLASLt FP8 GEMM 8192^3 (e4m3, outer-vector scales)"
                                     : "cuBLASLt FP8 GEMM 8192^3 (e4m3, unscaled: no outer-vector kernel)";
      out["machine_bf16_gemm_gflop_s"] = c->bf16_gemm_flops / 1e9;
      if (fp8) out["machine_fp8_gemm_gflop_s"] = c->fp8_gemm_flops / 1e9;
      bw_name = "device copy (read + write)";
      machine = c->device_name;
    } else {
      bandwidth = cpu_ceilings.read_bandwidth;
      const double fma_peak = cpu_ceilings.fma_peak, vnni_peak = cpu_ceilings.vnni_peak;
      compute_peak = quantized && vnni_peak > 0 ? vnni_peak : fma_peak;
      peak_name = quantized && vnni_peak > 0 ? "int8 VNNI" : "f32 FMA";
      bw_name = "read";
      machine = cpu_features().brand;
    }

    // KV: sequence 0 holds the prompt test's tokens (or a decode run's), the others a decode run's.
    const int64_t block_size = 16;
    const int64_t max_ctx = std::max(o.prompt, o.gen) + 1;
    const int64_t blocks_first = (max_ctx + block_size - 1) / block_size;
    const int64_t blocks_decode = (int64_t{o.gen} + 1 + block_size - 1) / block_size;
    const int64_t seqs = max_batch;
    KvCacheSpec spec;
    spec.num_blocks = blocks_first + blocks_decode * (seqs - 1);
    spec.block_size = block_size;
    spec.dtype = *kv_dtype;
    std::unique_ptr<ModelExecutor> ex;
    if (cuda) {
      CudaExecutorOptions co;
      co.device = dev->index;
      co.dtype = o.dtype;
      co.max_num_tokens = std::max<int64_t>(o.prompt, seqs);
      co.max_num_seqs = seqs;
      co.max_model_len = max_ctx;
      co.cuda_graphs = o.cuda_graphs;
      co.batch_invariant = o.batch_invariant;
      co.prefill_tile_q = o.prefill_tile;
      co.cpu_offload_bytes = std::max<int64_t>(0, o.cpu_offload_bytes);  // auto: none (no memory plan here)
      co.tuning = o.tuning;
      if (split_layers > 0) co.layers = {0, split_layers};
      auto r = loaded->tensor_parallel.size > 1 ? tensor_parallel_executor(*loaded, o, dev->index, spec, &co, pool)
                                                : make_cuda_executor(*loaded->model, spec, co);
      if (!r.ok()) {
        std::cerr << "pagoda bench: " << r.status().to_string() << "\n";
        return 1;
      }
      ex = std::move(*r);
      if (split_layers > 0)
        ex = make_split_executor(std::move(ex), make_cpu_executor(*loaded->model, spec, pool, {split_layers, -1}),
                                 cfg.num_layers);
    } else {
      if (*kv_dtype == DType::kF8E4M3) {
        std::cerr << "pagoda bench: --kv-dtype f8_e4m3 needs --device cuda\n";
        return 2;
      }
      if (loaded->tensor_parallel.size > 1) {
        auto r = tensor_parallel_executor(*loaded, o, 0, spec, nullptr, pool);
        if (!r.ok()) {
          std::cerr << "pagoda bench: " << r.status().to_string() << "\n";
          return 1;
        }
        ex = std::move(*r);
      } else {
        ex = make_cpu_executor(*loaded->model, spec, pool);
      }
    }

    // Bytes of every matmul weight (read once per forward step: in the executor's own layout, e.g.
    // a GPU's device formats, else the host tensors') and the linear-parameter count. Of a mixture
    // of experts' expert matrices a step reads only the selected experts': at most min(E, tokens x
    // k) of the E experts of a layer (exactly k at batch 1), and a token multiplies by k of them.
    const ModelWeights& w = loaded->model->weights();
    std::vector<bool> is_expert(w.linears.size(), false);
    for (const ExpertSet& set : w.expert_sets)
      for (const auto* ids : {&set.gate_up, &set.down})
        for (LinearId id : *ids) is_expert[static_cast<size_t>(id.index)] = true;
    int64_t weight_bytes = 0, expert_bytes = 0;
    double linear_params = 0;  // multiplied by one token
    const double expert_share = cfg.is_moe() ? double(cfg.num_experts_per_tok) / cfg.num_experts : 1.0;
    for (size_t i = 0; i < w.linears.size(); ++i)
      for (const Tensor& part : w.linears[i].parts) {
        weight_bytes += part.nbytes();
        if (is_expert[i]) expert_bytes += part.nbytes();
        if (static_cast<int32_t>(i) != w.output.index) linear_params += part.numel() * (is_expert[i] ? expert_share : 1.0);
      }
    if (ex->linear_weight_bytes() >= 0) weight_bytes = ex->linear_weight_bytes();
    if (ex->expert_weight_bytes() >= 0) expert_bytes = ex->expert_weight_bytes();
    // The matmul weight bytes a step of `tokens` tokens reads (an upper bound for MoE above batch 1).
    auto weights_read = [&](int64_t tokens) {
      if (!cfg.is_moe()) return double(weight_bytes);
      const double experts = std::min<double>(cfg.num_experts, double(tokens) * cfg.num_experts_per_tok);
      return double(weight_bytes - expert_bytes) + double(expert_bytes) * experts / cfg.num_experts;
    };
    const int64_t kv_token_bytes = cfg.kv_bytes_per_token(*kv_dtype);
    std::vector<std::vector<int32_t>> tables(seqs);
    for (int64_t b = 0; b < blocks_first; ++b) tables[0].push_back(static_cast<int32_t>(b));
    for (int64_t s = 1; s < seqs; ++s)
      for (int64_t b = 0; b < blocks_decode; ++b)
        tables[s].push_back(static_cast<int32_t>(blocks_first + (s - 1) * blocks_decode + b));
    auto token = [&](int64_t i) { return static_cast<int32_t>((i * 7919 + 13) % cfg.vocab_size); };
    SamplingParams greedy;
    greedy.temperature = 0;
    std::vector<SampleResult> sampled;
    // One step: the engine's path (device-side greedy sampling when the executor offers it).
    auto step = [&](const ForwardBatch& b) {
      if (ex->samples_on_device()) {
        std::vector<SampleSpec> specs(b.logits_rows.size());
        for (size_t i = 0; i < specs.size(); ++i) {
          specs[i].logits_row = static_cast<int64_t>(i);
          specs[i].params = &greedy;
        }
        ex->forward_sample(b, specs, sampled, {});
      } else {
        ex->forward(b);
      }
    };
    // times: wall seconds of each run; cpu: this process's CPU seconds (all threads) of the same runs.
    auto report = [&](const std::string& test, int64_t tokens, const std::vector<double>& times,
                      const std::vector<double>& cpu, double bytes, double flops) {
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
      // Per CPU second: on a shared machine the rate that does not move with the other tenants'
      // load (one thread; with several, spinning workers count too).
      const double mean_cpu = std::accumulate(cpu.begin(), cpu.end(), 0.0) / cpu.size();
      if (mean_cpu > 0) r["tokens_per_cpu_s"] = tokens / mean_cpu;
      // Weight offload: every forward pass copies the streamed layers host -> device; the bound is
      // that copy at the bandwidth measured at start-up.
      const WeightStreamingStats ws = ex->weight_streaming();
      if (ws.bytes_per_pass > 0 && ws.bandwidth > 0) {
        const double passes = test.rfind("pp", 0) == 0 ? 1.0 : static_cast<double>(o.gen);
        r["offload_bytes_per_s"] = passes * ws.bytes_per_pass / mean_time;
        r["offload_bound_ratio"] = passes * ws.bytes_per_pass / mean_time / ws.bandwidth;
        r["offload_ms_per_streamed_layer"] = mean_time / passes / ws.layers * 1e3;
      }
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
      std::vector<double> times, cpu;
      for (int r = -1; r < o.repeats; ++r) {
        ForwardBatch b;
        b.add_sequence(ids, o.prompt, tables[0], block_size);
        const double c0 = process_cpu_seconds();
        const auto t0 = std::chrono::steady_clock::now();
        step(b);
        if (r >= 0) {
          times.push_back(seconds_since(t0));
          cpu.push_back(process_cpu_seconds() - c0);
        }
      }
      const double attn_flops = 4.0 * cfg.num_layers * cfg.num_heads * cfg.head_dim * (double(o.prompt) * (o.prompt + 1) / 2);
      const double flops = 2.0 * linear_params * o.prompt + attn_flops + 2.0 * cfg.vocab_size * cfg.hidden_size;
      const double bytes = weights_read(o.prompt) + double(kv_token_bytes) * o.prompt;
      report(fmt::format("pp{}", o.prompt), o.prompt, times, cpu, bytes, flops);
    }
    std::vector<bool> graph_modes = {true};
    if (o.compare_graphs && ex->set_graphs_enabled(true)) graph_modes = {true, false};
    for (int batch : o.batches) {
      if (o.gen <= 0) break;
      for (bool graphs : graph_modes) {
        ex->set_graphs_enabled(graphs);
        std::vector<double> times, cpu;
        double bytes = 0;
        for (int r = -1; r < o.repeats; ++r) {
          double t = 0, c = 0, run_bytes = 0;
          for (int st = 0; st < o.gen; ++st) {
            ForwardBatch b;
            for (int64_t s = 0; s < batch; ++s) b.add_sequence({token(st + s)}, st + 1, tables[s], block_size);
            const double c0 = process_cpu_seconds();
            const auto t0 = std::chrono::steady_clock::now();
            step(b);
            t += seconds_since(t0);
            c += process_cpu_seconds() - c0;
            run_bytes += weights_read(batch) + double(kv_token_bytes) * (st + 1) * batch;
          }
          if (r >= 0) {
            times.push_back(t);
            cpu.push_back(c);
          }
          bytes = run_bytes;
        }
        std::string name = batch > 1 ? fmt::format("tg{} b{}", o.gen, batch) : fmt::format("tg{}", o.gen);
        if (graph_modes.size() > 1) name += graphs ? " graphs" : " eager";
        report(name, int64_t(o.gen) * batch, times, cpu, bytes, 0);
      }
    }
    ex->set_graphs_enabled(true);
    std::cerr << ex->profile_report();
    out["device"] = ex->describe();
    out["machine"] = machine;
    out["threads"] = pool.size();
    out["isa"] = isa_level_name(active_isa_level());
    out["weight_bytes"] = weight_bytes;
    if (cfg.is_moe()) {
      out["expert_weight_bytes"] = expert_bytes;
      out["batch1_weight_bytes_read"] = weights_read(1);
    }
    out["machine_bandwidth_gb_s"] = bandwidth / 1e9;
    out["machine_bandwidth_kind"] = bw_name;
    out["machine_compute_peak_gflop_s"] = compute_peak / 1e9;
    out["compute_peak_used"] = peak_name;
    const DeviceMemoryStats dm = ex->device_memory();
    if (dm.total > 0) out["device_memory_used_gib"] = static_cast<double>(dm.used) / (1 << 30);
    if (!o.json) {
      std::cout << fmt::format("model {}  device {}  kv {}\n", o.model, ex->describe(), o.kv_dtype);
      if (cfg.is_moe())
        std::cout << fmt::format("mixture of experts: {} of {} experts a token; weights {:.1f} MiB, of them experts {:.1f} "
                                 "MiB; a batch-1 step reads {:.1f} MiB (bandwidth figures count the selected experts' "
                                 "bytes: min(E, tokens x k) of E, an upper bound above batch 1)\n",
                                 cfg.num_experts_per_tok, cfg.num_experts, weight_bytes / 1048576.0,
                                 expert_bytes / 1048576.0, weights_read(1) / 1048576.0);
      std::cout << "tuning: " << o.tuning.to_string() << "\n";
      std::cout << fmt::format("machine {}: bandwidth {:.1f} GB/s ({}), compute peak {:.1f} GFLOP/s ({})\n", machine,
                               bandwidth / 1e9, bw_name, compute_peak / 1e9, peak_name);
      std::cout << fmt::format("| {:<18} | {:>18} | {:>10} | {:>7} | {:>11} | {:>7} |\n", "test", "t/s", "GB/s", "bw %",
                               "GFLOP/s", "peak %");
      std::cout << "|--------------------|--------------------|------------|---------|-------------|---------|\n";
      for (const auto& r : records) {
        const bool has_flops = r.contains("gflop_s");
        std::cout << fmt::format("| {:<18} | {:>10.2f} ± {:<5.2f} | {:>10.2f} | {:>6.1f}% | {:>11} | {:>7} |\n",
                                 r["test"].get<std::string>(), r["tokens_per_s"].get<double>(),
                                 r["tokens_per_s_stddev"].get<double>(), r["bandwidth_gb_s"].get<double>(),
                                 100 * r["bandwidth_ratio"].get<double>(),
                                 has_flops ? fmt::format("{:.1f}", r["gflop_s"].get<double>()) : "-",
                                 has_flops ? fmt::format("{:.1f}%", 100 * r["compute_peak_ratio"].get<double>()) : "-");
      }
      for (const auto& r : records)
        if (r.contains("offload_bound_ratio"))
          std::cout << fmt::format("offload {}: {:.2f} GB/s of streamed weights = {:.1f}% of the measured host -> device "
                                   "bandwidth; {:.2f} ms a forward pass per streamed layer\n",
                                   r["test"].get<std::string>(), r["offload_bytes_per_s"].get<double>() / 1e9,
                                   100 * r["offload_bound_ratio"].get<double>(),
                                   r["offload_ms_per_streamed_layer"].get<double>());
      std::cout.flush();
    }
  }
  out["results"] = records;
  nlohmann::json runs = nlohmann::json::array();
  if (!o.requests.empty()) {
    const int rc = run_throughput(o, std::move(*loaded), *kv_dtype, runs);
    if (rc != 0) return rc;
  }
  out["throughput"] = runs;
  out["peak_rss_mib"] = static_cast<double>(peak_rss_bytes()) / (1 << 20);
  out["anon_rss_mib"] = static_cast<double>(current_anon_rss_bytes()) / (1 << 20);
  if (o.json) std::cout << out.dump(2) << "\n";
  return 0;
}

const CommandRegistration kBench("bench", "Benchmarks: offline pp/tg (llama-bench style, the default), `serve`, `throughput`", [](CLI::App* app) {
  auto o = std::make_shared<BenchOptions>();
  // Sub-subcommands (bench serve, bench throughput) register themselves; without one, --model is needed.
  auto subs = std::make_shared<std::vector<std::pair<CLI::App*, std::function<int()>>>>();
  for (auto& cmd : bench_subcommand_registry()) {
    CLI::App* sub = app->add_subcommand(cmd.name, cmd.description);
    add_log_level_option(sub);
    subs->emplace_back(sub, cmd.setup(sub));
  }
  app->require_subcommand(0, 1);
  app->add_option("--model,-m", o->model, "GGUF file or Hugging Face model directory");
  app->add_option("-p,--prompt", o->prompt, "Prompt tokens for the pp test (0: skip)")->check(CLI::Range(0, 1048576));
  app->add_option("-n,--gen", o->gen, "Generated tokens for the tg test (0: skip)")->check(CLI::Range(0, 1048576));
  app->add_option("-b,--batch", o->batches, "Sequences decoded together in the tg test (several: -b 1,8,64)")->delimiter(',')->check(CLI::Range(1, 65536));
  app->add_option("-t,--threads", o->threads, "Threads (default: one per core)")->check(CLI::Range(0, 4096));
  app->add_option("-r,--repeats", o->repeats, "Timed repetitions (after one warm-up)")->check(CLI::Range(1, 1000000));
  app->add_option("--kv-dtype", o->kv_dtype, "KV cache element type: f16, bf16, f32, f8_e4m3 (fp8; CUDA only)");
  app->add_option("--isa", o->isa, "Cap the kernel ISA level: scalar, avx2, avx512, avx512-vnni, amx");
  add_device_options(app, o->device, o->dtype, o->cuda_graphs);
  add_quantization_option(app, o->quantization);
  add_load_format_option(app, o->load_format);
  add_tuning_options(app, o->tuning_flags);
  app->add_flag("--compare-graphs", o->compare_graphs, "CUDA: every tg test with graphs on, then off");
  app->add_flag("--batch-invariant", o->batch_invariant, "CUDA: fixed-order kernels (slow)");
  app->add_option("--prefill-tile", o->prefill_tile, "CUDA: queries per block of the prefill attention kernel (64, 128)")->check(CLI::Range(1, 1024));
  app->add_option("--requests", o->requests, "Offline throughput: requests per run (several: --requests 1000,200)")
      ->delimiter(',')->check(CLI::Range(1, 16777216));
  app->add_option("--input-len", o->input_len, "Offline throughput: prompt tokens per request, per run")->delimiter(',')->check(CLI::Range(1, 1048576));
  app->add_option("--output-len", o->output_len, "Offline throughput: generated tokens per request, per run")->delimiter(',')->check(CLI::Range(1, 1048576));
  app->add_option("--max-num-seqs", o->max_num_seqs, "Offline throughput: sequences per step")->check(CLI::Range(1, 1048576));
  app->add_option("--max-num-batched-tokens", o->max_num_batched_tokens, "Offline throughput: tokens per step")->check(CLI::Range(1, 1073741824));
  app->add_option("--memory-utilization,--gpu-memory-utilization", o->memory_utilization, "Offline throughput on a GPU: fraction of its memory")->check(CLI::Range(0.0, 1.0));
  add_speculative_options(app, &o->spec_flags);
  add_cpu_offload_option(app, &o->cpu_offload);
  add_n_gpu_layers_option(app, &o->n_gpu_layers);
  add_tensor_parallel_option(app, &o->tensor_parallel_size);
  app->add_flag("--json", o->json, "Print JSON");
  return [o, subs] {
    for (auto& [sub, action] : *subs)
      if (sub->parsed()) return action();
    if (o->model.empty()) {
      std::cerr << "pagoda bench: --model is required (or use `pagoda bench serve` / `pagoda bench throughput`)\n";
      return 2;
    }
    if (!check_tensor_parallel_option(o->tensor_parallel_size, "bench")) return 2;
    if (!resolve_device_option(o->device, "bench", o->model)) return 2;
    auto tuning = resolve_tuning(o->tuning_flags);
    if (!tuning.ok()) {
      std::cerr << "pagoda bench: " << tuning.status().to_string() << "\n";
      return 2;
    }
    o->tuning = *tuning;
    if (!resolve_speculative_options(o->spec_flags, o->speculative, "bench")) return 2;
    if (!resolve_cpu_offload_option(o->cpu_offload, o->cpu_offload_bytes, "bench")) return 2;
    {  // the engine's rule: -ngl 0 runs every layer on the CPU; GPU layers need a CUDA device
      EngineConfig split;
      split.device = o->device;
      split.n_gpu_layers = o->n_gpu_layers;
      auto resolved = resolve_layer_split(split);
      if (!resolved.ok()) {
        std::cerr << "pagoda bench: " << resolved.status().to_string() << "\n";
        return 2;
      }
      o->device = resolved->device;
    }
    return run_bench(*o);
  };
});

}  // namespace
}  // namespace pagoda::cli

// Subcommand registry for the `pagoda` executable. Each cmd_*.cc registers itself with a static
// CommandRegistration; main.cc builds the CLI11 app from the registry. Adding a subcommand is
// adding one file.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "common/env_config.h"
#include "common/tuning_config.h"
#include "model/load_format.h"
#include "model/online_quantization.h"

namespace pagoda::cli {

// Called once when the app is built: declares the subcommand's options on `sub` (binding them
// to state it owns) and returns the action to run if the subcommand is chosen. The action
// returns the process exit code.
using CommandSetup = std::function<std::function<int()>(CLI::App* sub)>;

struct CommandInfo {
  std::string name;
  std::string description;
  CommandSetup setup;
};

std::vector<CommandInfo>& command_registry();

// Sub-subcommands of `pagoda bench` (`bench serve`, `bench throughput`); `pagoda bench --model ...`
// without one runs the offline llama-bench style test.
std::vector<CommandInfo>& bench_subcommand_registry();
struct BenchSubcommandRegistration {
  BenchSubcommandRegistration(std::string name, std::string description, CommandSetup setup) {
    bench_subcommand_registry().push_back({std::move(name), std::move(description), std::move(setup)});
  }
};

// --device, --dtype and --no-cuda-graphs: the same for every subcommand that runs a model.
inline void add_device_options(CLI::App* app, std::string& device, std::string& dtype, bool& cuda_graphs) {
  app->add_option("--device", device,
                  "auto (the GPU when this build has CUDA and one is visible, else the CPU), cpu, cuda or cuda:N");
  app->add_option("--dtype", dtype, "CUDA compute dtype: auto (f32 for f32 weights, else bf16), f32, bf16");
  app->add_flag_callback("--no-cuda-graphs", [&cuda_graphs] { cuda_graphs = false; }, "CUDA: run decode steps eagerly");
}

// --quantization none|int4|int8|fp8 (model/online_quantization.h): quantize a 16-bit checkpoint's
// linears at load. An unknown value is refused by CLI11 with the list of modes.
inline void add_quantization_option(CLI::App* app, WeightQuantization& q) {
  app->add_option_function<std::string>(
         "--quantization,-q",
         [&q](const std::string& name) { q = *parse_weight_quantization(name); },
         "Quantize a 16-bit checkpoint's linear weights at load: int4 (RTN in blocks of 32 as llama.cpp's Q4_0), int8 "
         "(per-channel RTN, as Q8_0), fp8 (E4M3, per-channel scales; runs as bf16), none")
      ->check(CLI::Validator(
          [](std::string& v) {
            auto q = parse_weight_quantization(v);
            return q.ok() ? std::string() : q.status().message();
          },
          "none|int4|int8|fp8", "quantization"))
      ->default_str("none");
}

// --load-format auto|dummy (model/load_format.h): dummy loads random weights of a config.json's
// shape, no checkpoint. An unknown value is refused by CLI11 with the list of formats.
inline void add_load_format_option(CLI::App* app, LoadFormat& f) {
  app->add_option_function<std::string>(
         "--load-format", [&f](const std::string& name) { f = *parse_load_format(name); },
         "auto: the checkpoint at the model path; dummy: random weights of the config.json's shape, no checkpoint "
         "(for benchmarks)")
      ->check(CLI::Validator(
          [](std::string& v) {
            auto f = parse_load_format(v);
            return f.ok() ? std::string() : f.status().message();
          },
          "auto|dummy", "load format"))
      ->default_str("auto");
}

// The tuning flags as given on the command line (unset: empty / -1 / false).
struct TuningFlags {
  std::string row_attention;
  std::string prefill_attention;
  int simt_heads = -1;
  int gemv_max_rows = -1;
  std::string quant_weights;
  int quant_gemv_max_rows = -1;
  int quant_mma_max_rows = -1;
  std::string sparsity;
  int sparse_min_rows = -1;
  bool cuda_profile = false;
  std::string block_trace;
  std::string graph_capture;
};

// --cuda-row-attention, --cuda-prefill-attention, --cuda-simt-heads, --cuda-gemv-max-rows, --cuda-quant-weights,
// --cuda-quant-gemv-max-rows, --cuda-quant-mma-max-rows, --cuda-profile, --cuda-block-trace
// (common/tuning_config.h): the same for every subcommand that runs a model.
inline void add_tuning_options(CLI::App* app, TuningFlags& f) {
  app->add_option("--cuda-row-attention", f.row_attention,
                  "CUDA decode attention: auto, simt (no tensor cores), mma (tensor cores for short launches too)");
  app->add_option("--cuda-prefill-attention", f.prefill_attention,
                  "CUDA prefill attention: auto (wgmma on compute capability 9.0 where it applies), mma (mma.sync)");
  app->add_option("--cuda-simt-heads", f.simt_heads, "CUDA: query heads a SIMT attention block takes (0: auto, 1, 2, 4)");
  app->add_option("--cuda-gemv-max-rows", f.gemv_max_rows, "CUDA: rows up to which bf16 linear layers use the GEMV (0-4)");
  app->add_option("--cuda-quant-weights", f.quant_weights,
                  "CUDA: GGUF quantized weights native (kept in their blocks where kernels exist) or dequantize (bf16)");
  app->add_option("--cuda-quant-gemv-max-rows", f.quant_gemv_max_rows,
                  "CUDA: rows up to which quantized layers use the int8 GEMV (0-8; more rows dequantize for cuBLASLt)");
  app->add_option("--cuda-quant-mma-max-rows", f.quant_mma_max_rows,
                  "CUDA: rows up to which quantized layers over bf16 activations use the tensor-core matmul beyond "
                  "the int8 GEMV's rows (0-64; 0, the default: off; more rows dequantize for cuBLASLt)");
  app->add_option("--cuda-sparsity", f.sparsity,
                  "CUDA: 2:4 sparse linears (our GEMV, cuSPARSELt's GEMM): off (the default: dense), auto (when the "
                  "checkpoint declares 2:4 sparsity) or 2:4 (every linear that holds the pattern)");
  app->add_option("--cuda-sparse-min-rows", f.sparse_min_rows,
                  "CUDA: rows from which 2:4 sparse linears run cuSPARSELt's GEMM (fewer: our 2:4 GEMV; 1-9, default 2)");
  app->add_flag("--cuda-profile", f.cuda_profile, "CUDA: every step eager, GPU time per op reported by bench");
  app->add_option("--cuda-block-trace", f.block_trace,
                  "CUDA: per-warp trace of the last step to FILE (builds with -DPAGODA_CUDA_BLOCK_TRACE=ON)");
  app->add_option("--cuda-graph-capture", f.graph_capture,
                  "CUDA: decode graphs captured lazily (a bucket at its first decode step: start-up and the first "
                  "token never wait for them) or at start (every bucket before the engine is ready)");
}

// The tuning of a run: the defaults, then the PAGODA_* environment, then the flags given (a flag
// wins over the environment). An invalid-argument status names a bad variable or flag.
inline Result<TuningConfig> resolve_tuning(const TuningFlags& f) {
  TuningConfig t;
  PAGODA_RETURN_IF_ERROR(apply_tuning_env(t));
  if (!f.row_attention.empty()) t.row_attention = f.row_attention;
  if (!f.prefill_attention.empty()) t.prefill_attention = f.prefill_attention;
  if (!f.graph_capture.empty()) t.graph_capture = f.graph_capture;
  if (f.simt_heads >= 0) t.simt_heads = f.simt_heads;
  if (f.gemv_max_rows >= 0) t.gemv_max_rows = f.gemv_max_rows;
  if (!f.quant_weights.empty()) t.quant_weights = f.quant_weights;
  if (f.quant_gemv_max_rows >= 0) t.quant_gemv_max_rows = f.quant_gemv_max_rows;
  if (f.quant_mma_max_rows >= 0) t.quant_mma_max_rows = f.quant_mma_max_rows;
  if (!f.sparsity.empty()) t.sparsity = f.sparsity;
  if (f.sparse_min_rows >= 0) t.sparse_min_rows = f.sparse_min_rows;
  if (f.cuda_profile) t.cuda_profile = true;
  if (!f.block_trace.empty()) t.block_trace = f.block_trace;
  PAGODA_RETURN_IF_ERROR(t.validate());
  return t;
}

struct CommandRegistration {
  CommandRegistration(std::string name, std::string description, CommandSetup setup) {
    command_registry().push_back({std::move(name), std::move(description), std::move(setup)});
  }
};

}  // namespace pagoda::cli

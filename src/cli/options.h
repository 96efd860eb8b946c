// Shared command-line checks of the `pagoda` subcommands: the --device choice (auto resolved and
// said at start-up), --max-model-len against the model's context, --log-level. Each check prints
// one clear "pagoda CMD: ..." error on stderr and returns false when the input is refused.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/speculative_config.h"
#include "kv/kv_tier_config.h"

namespace pagoda::cli {

// "auto" becomes "cuda:0" when this build has the CUDA backend and a device is visible, else
// "cpu" (also when `model`, if given, is of a family the CUDA backend does not run); the choice
// and its reason are logged. Explicit devices are checked (parse_device) and kept.
bool resolve_device_option(std::string& device, std::string_view cmd, const std::string& model = {});

// Refuses a --max-model-len beyond the model's trained context (max_position_embeddings; read
// from the GGUF header or config.json without loading weights). There is no RoPE-scaling flag
// that would extend the context, so nothing allows it. 0 (the model's) always passes.
bool check_max_model_len(std::string_view cmd, const std::string& model, int64_t max_model_len);

// --log-level debug|info|warn|error on `app` (default info); sets the process-wide level
// (common/log.h) as soon as it is parsed.
void add_log_level_option(CLI::App* app);

// Speculative decoding options, shared by generate, bench, bench throughput and serve:
//   --spec-method ngram|draft  --spec-model PATH  --spec-tokens K  --spec-ngram-min N  --spec-ngram-max N
//   --spec-disable-batch-size B  --spec-no-adaptive
//   --speculative-config JSON   vLLM-style keys: method ("ngram" | "draft" | "draft_model"), model,
//                               num_speculative_tokens, prompt_lookup_min, prompt_lookup_max,
//                               disable_by_batch_size, adaptive (the flags above override it)
struct SpeculativeOptions {
  std::string json, method, model;
  int tokens = 0, ngram_min = 0, ngram_max = 0, disable_batch_size = -1;
  bool no_adaptive = false, device_head = false;
};
void add_speculative_options(CLI::App* app, SpeculativeOptions* o);
// Fills `out` (validated); false with a "pagoda CMD: ..." error on stderr.
bool resolve_speculative_options(const SpeculativeOptions& o, SpeculativeConfig& out, std::string_view cmd);
// "acceptance 0.71 (312/440 drafts accepted, per position 0.93 0.78 0.62 0.48), 2.4 tokens per step" or "".
std::string speculative_summary(int64_t drafts, int64_t draft_tokens, int64_t accepted, const std::vector<int64_t>& per_pos);

// KV cache tiers (kv/kv_tier_config.h), shared by serve and bench throughput / kv-tier:
//   --kv-host-gb G     host tier in GiB (page-locked on CUDA); preemption then swaps there
//   --swap-space B     the same in bytes (vLLM's older spelling); the larger of the two wins
//   --kv-disk-dir DIR  disk tier directory (below the host tier)   --kv-disk-gb G  its cap (16)
struct KvTierOptions {
  double host_gb = 0, disk_gb = 16;
  int64_t swap_space = 0;
  std::string disk_dir;
};
void add_kv_tier_options(CLI::App* app, KvTierOptions* o);
KvTierConfig resolve_kv_tier_options(const KvTierOptions& o);

// --cpu-offload-gb G|auto (CUDA weight offload, EngineConfig::cpu_offload_bytes): GiB of matmul
// weights, whole layers, kept in pinned host memory and streamed to the GPU every forward pass;
// "auto" (the default): only when the model would not fit otherwise; 0: never (a model that does
// not fit is refused). Resolved into bytes (EngineConfig::kAutoOffload for auto); false with a
// "pagoda CMD: ..." error on stderr.
void add_cpu_offload_option(CLI::App* app, std::string* o);
bool resolve_cpu_offload_option(const std::string& o, int64_t& bytes, std::string_view cmd);

// --n-gpu-layers N (llama.cpp's -ngl, rewritten to this name by main; EngineConfig::n_gpu_layers):
// with --device cuda the first N decoder layers on the GPU, the rest and the output head on the
// CPU; -1 (the default) or >= the model's layers: all on the GPU; 0: all on the CPU.
void add_n_gpu_layers_option(CLI::App* app, int64_t* n);

// --tensor-parallel-size N (vLLM's spelling; EngineConfig::tensor_parallel_size).
void add_tensor_parallel_option(CLI::App* app, int* n);
// False with a "pagoda CMD: ..." error on stderr when this build cannot run size n (> 1 today).
bool check_tensor_parallel_option(int n, std::string_view cmd);

// Range validators of the numeric options; CLI11 prints "--opt: Value X not in range [A - B]".
inline CLI::Range port_range() { return CLI::Range(0, 65535); }

}  // namespace pagoda::cli

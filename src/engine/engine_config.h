// Engine configuration: one struct, filled once (from the command line or a test), printed at
// start-up.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/dtype.h"
#include "common/status.h"
#include "common/tuning_config.h"
#include "core/speculative_config.h"
#include "kv/kv_tier_config.h"
#include "model/load_format.h"
#include "model/online_quantization.h"
#include "sched/scheduler.h"

namespace pagoda {

struct EngineConfig {
  std::string model;                 // .gguf file or Hugging Face directory (load_format dummy: or a config.json)
  std::string tokenizer;             // empty: the model's own (a config.json's: its directory's)
  // On-line quantization of a 16-bit checkpoint's linears at load (model/online_quantization.h);
  // the speculative draft model is loaded as it is.
  WeightQuantization quantization = WeightQuantization::kNone;
  // kDummy: random weights of the config.json's shape (ModelLoadOptions::load_format); no engine
  // plan cache is read or written, and the draft model is loaded as it is.
  LoadFormat load_format = LoadFormat::kAuto;
  int threads = 0;                   // 0: one per core
  int64_t max_model_len = 0;         // 0: the model's context length (capped to what the KV cache holds? no: an error)
  int32_t block_size = 16;
  DType kv_dtype = DType::kF16;
  int64_t kv_cache_memory = 0;       // bytes; 0: from memory_utilization (GPU) or the CPU default
  double memory_utilization = 0.0;   // 0: CPU default (kv_cache_memory or 2 GiB of KV)
  // KV cache tiers below the primary pool: host memory (also swap preemption's space: with a host
  // tier, preemption swaps instead of recomputing) and an optional disk directory.
  KvTierConfig kv_tiers;
  bool enable_prefix_caching = true;
  // A model whose every layer slides (Mistral v0.1 style): release the KV blocks that left the
  // window during decode (kv/kv_cache_manager.h), so a sequence holds a bounded number of blocks.
  bool sliding_window_eviction = true;
  int64_t max_queue_delay_us = 0;    // when idle, wait this long for more arrivals before the first step
  SchedulerConfig scheduler;
  std::string device = "cpu";        // "cpu" | "cuda" | "cuda:N" (engine/device_spec.h)
  std::string dtype = "auto";        // CUDA compute dtype: auto (f32 for f32 weights, else bf16) | f32 | bf16
  bool cuda_graphs = true;           // CUDA: decode steps replayed from graphs captured at start-up
  bool batch_invariant = false;      // CUDA: fixed-order kernels, tokens independent of the batch (slow)
  // CUDA weight offload (runtime/weight_offload_plan.h): bytes of matmul weights kept in pinned host
  // memory and streamed every forward pass; kAutoOffload: only as many as the model needs to fit
  // the memory budget with one sequence of max_model_len tokens (at most kAutoOffloadKvTokens when
  // max_model_len is 0: the model's context) (none when it fits); 0: never.
  static constexpr int64_t kAutoOffload = -1;
  static constexpr int64_t kAutoOffloadKvTokens = 4096;
  int64_t cpu_offload_bytes = kAutoOffload;
  // CPU + GPU layer split (llama.cpp's -ngl; runtime/split_executor.h): with a CUDA device, the
  // first n_gpu_layers decoder layers (and the embedding) run on the GPU, the rest and the output
  // head on the CPU from the mapped file. -1 or >= the model's layers: every layer on the GPU; 0:
  // the whole model on the CPU (as --device cpu). On the CPU device only -1 and 0 are accepted.
  int64_t n_gpu_layers = -1;
  // Tensor parallelism (docs/decisions.md D78): the model split over this many ranks, rank 0 this
  // process and the others `pagoda tp-worker` processes (engine/tensor_parallel_group.h): CUDA
  // devices device..device + N - 1 over NCCL (env PAGODA_TP_COMM=staged: every rank on the one
  // device, collectives through host memory; for tests), or CPU ranks over shared memory.
  int tensor_parallel_size = 1;
  TuningConfig tuning;               // kernel choices and diagnostics (flags over the environment)
  SpeculativeConfig speculative;     // speculative decoding (off unless a method is set)
  // Engine plan cache (engine/engine_plan.h): "" the default (common/env_config.h:
  // default_plan_cache_dir), "off" none, else a directory.
  std::string plan_cache;
  // Weight-loading progress (ModelLoadOptions::progress), called on the creating thread.
  std::function<void(int64_t done, int64_t total)> load_progress;

  std::string to_string() const;
};

// OK for a tensor parallel size this build runs (1); otherwise an error naming what is missing.
Status tensor_parallel_supported(int size);

// The configuration a layer split resolves to (after tensor_parallel_supported(), which every engine
// creation passes through here): --n-gpu-layers 0 with a CUDA device is the CPU
// device (llama.cpp's -ngl 0 runs every layer on the CPU); any other value is kept. An error when
// n_gpu_layers asks for GPU layers without a CUDA device, or is below -1.
Result<EngineConfig> resolve_layer_split(const EngineConfig& config);

}  // namespace pagoda

// Memory planner: predicts the engine's memory before anything is allocated, sizes the KV cache
// from a budget, and explains a configuration that cannot fit.
//
//   total = weights + activation workspace (grows with max_num_batched_tokens) + logits
//           + runtime overhead + KV blocks
//   KV bytes per token = 2 (K and V) x layers x kv_heads x head_dim x bytes per element
//
// The budget is either an explicit KV size (--kv-cache-memory) or a fraction of the device's
// memory (--memory-utilization x total) from which everything else is subtracted first.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "common/dtype.h"
#include "common/status.h"
#include "model/model_config.h"

namespace pagoda {

struct MemoryPlanInput {
  ModelConfig config;
  int64_t weight_bytes = 0;          // bytes of every tensor the model reads (mmapped or loaded)
  int64_t max_model_len = 0;         // 0: the model's context length
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  int32_t block_size = 16;
  DType kv_dtype = DType::kF16;
  int64_t device_memory = 0;         // total memory of the device (bytes)
  double memory_utilization = 0.9;   // fraction of device_memory the engine may use
  int64_t kv_cache_memory = 0;       // > 0: exact KV budget, overrides the fraction
  // Device executors (CUDA) state their own terms; -1: the CPU formulas below.
  int64_t workspace_bytes = -1;
  int64_t logits_bytes = -1;
  int64_t overhead_bytes = -1;
  int64_t device_reserved = 0;       // bytes already in use on the device (context, other processes)
  // KV cache tiers below the KV cache (kv/kv_tier_config.h), outside the budget above: host
  // memory (page-locked on CUDA) and a disk directory's cap; 0: none.
  int64_t kv_host_tier_bytes = 0;
  int64_t kv_disk_tier_bytes = 0;
  // The block manager releases blocks that left the sliding window (every layer slides:
  // config.sliding_window > 0 with no per-layer flags): a sequence then holds at most
  // kv_window_blocks_held (core/kv_window.h) blocks, the bound the plan counts.
  bool kv_window_eviction = true;
  // Speculative decoding's draft model on the same device: its fixed terms (weights, workspace,
  // logits, overhead and the KV of its lookahead blocks) and its KV bytes per token. The KV budget
  // then holds num_blocks blocks of the target's and as many of the draft's. 0: no draft model.
  // The same terms count an EAGLE-3 / MTP head run on the device (--spec-device-head): its weights,
  // pass buffers and lookahead blocks fixed, its one-layer cache a block per target block.
  int64_t draft_fixed_bytes = 0;
  int64_t draft_kv_bytes_per_token = 0;
  std::string draft_label = "draft model";  // what the draft terms are, in the printout
  // Weight offload (CUDA): weight bytes in pinned host memory (outside the budget; weight_bytes
  // counts the resident ones and the slots) and the plan's summary line; 0 / empty: none.
  int64_t offloaded_weight_bytes = 0;
  std::string offload_summary;
  // A layer split (runtime/split_executor.h): the device caches the K/V of its first
  // split_device_layers layers, the CPU those of the others in host memory (as many blocks, outside
  // the budget, at most split_host_kv_bytes of them: the block count is capped by both). weight_bytes
  // and the other device terms are the device part's. 0: no split.
  int64_t split_device_layers = 0;
  int64_t split_host_kv_bytes = 0;
};

struct MemoryPlan {
  int64_t weights = 0;
  int64_t workspace = 0;          // activations for max_num_batched_tokens tokens
  int64_t logits = 0;             // [max rows, vocab] f32
  int64_t runtime_overhead = 0;   // fixed allowance: tokenizer, code, allocator slack
  int64_t kv_cache = 0;           // num_blocks x block_bytes
  int64_t total = 0;
  int64_t budget = 0;             // memory the plan had to fit in
  int64_t kv_bytes_per_token = 0;
  int64_t block_bytes = 0;
  int64_t num_blocks = 0;         // usable KV blocks (the null block is extra, included in kv_cache)
  int64_t kv_tokens = 0;          // tokens the KV cache holds
  int64_t max_model_len = 0;
  double max_concurrency = 0;     // sequences of max_model_len that fit at once
  int64_t kv_window = 0;          // > 0: blocks outside this sliding window are released
  int64_t kv_tokens_per_sequence = 0;  // KV tokens one sequence of max_model_len holds at once
  // KV tiers (host memory outside the budget; the disk tier's files): blocks and bytes. With a
  // disk tier the host tier holds at least one sequence of max_model_len (its staging).
  int64_t host_tier_blocks = 0;
  int64_t host_tier = 0;          // host_tier_blocks x block_bytes (+ the null block)
  int64_t disk_tier = 0;          // the disk tier's cap
  int64_t disk_tier_blocks = 0;   // blocks of files that fit the cap
  // A draft model's share (inside the budget and total): its fixed terms and its KV of num_blocks
  // blocks (the lookahead blocks are in draft_fixed).
  int64_t draft_fixed = 0;
  int64_t draft_kv_cache = 0;
  std::string draft_label;  // MemoryPlanInput::draft_label
  int64_t offloaded_weights = 0;  // MemoryPlanInput::offloaded_weight_bytes
  std::string offload;            // MemoryPlanInput::offload_summary
  // A layer split: the device's layers [0, split_device_layers) (kv_bytes_per_token and block_bytes
  // count only those), of num_layers; the CPU part's KV cache in host memory (the same blocks).
  int64_t split_device_layers = 0;
  int64_t num_layers = 0;
  int64_t host_kv_cache = 0;

  std::string to_string() const;  // the start-up printout
  nlohmann::json to_json() const;
};

// Sets a layer split's terms of `in` (its config, kv_dtype, block_size and max_model_len set):
// device_layers of the model's layers on the device (0 < device_layers < layers; else no split), and
// the host memory the CPU part's KV cache may take: 2 GiB, or one sequence of max_model_len when
// that is more.
void set_layer_split(MemoryPlanInput& in, int64_t device_layers);

// Activation workspace of one forward pass over `tokens` tokens (what ForwardWorkspace and the
// linear kernels' activation scratch hold).
int64_t workspace_bytes(const ModelConfig& c, int64_t tokens);

// The sliding window whose outside blocks the block manager releases (0: none): the config's window
// when every layer slides and in.kv_window_eviction.
int64_t kv_eviction_window(const MemoryPlanInput& in);

// A plan, or kResourceExhausted naming the term that does not fit and what to change.
Result<MemoryPlan> plan_memory(const MemoryPlanInput& in);
// plan_memory refuses KV dtypes that kv_cache_dtype_supported (common/dtype.h) does not list.

// Total physical memory of this host (MemTotal), bytes.
int64_t host_memory_bytes();

}  // namespace pagoda

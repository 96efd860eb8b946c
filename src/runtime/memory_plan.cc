#include "runtime/memory_plan.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/kv_window.h"
#include "model/family.h"

namespace pagoda {
namespace {

constexpr int64_t kRuntimeOverhead = int64_t{64} << 20;

std::string bytes_str(int64_t b) {
  const double v = static_cast<double>(b);
  if (b >= (int64_t{1} << 30)) return fmt::format("{:.2f} GiB", v / (1 << 30));
  if (b >= (int64_t{1} << 20)) return fmt::format("{:.1f} MiB", v / (1 << 20));
  return fmt::format("{:.1f} KiB", v / 1024);
}

}  // namespace

int64_t workspace_bytes(const ModelConfig& c, int64_t tokens) {
  const int64_t rows = std::max<int64_t>(tokens, 16);
  // ForwardWorkspace: residual, hidden, proj, last_hidden [D]; qkv [Q + 2 KV]; q, attn [Q]; k, v [KV];
  // gate_up [2F]; act [F].
  const int64_t per_row = 4 * c.hidden_size + 3 * c.q_size() + 4 * c.kv_size() + 3 * c.intermediate_size;
  return rows * per_row * 4;
}

void set_layer_split(MemoryPlanInput& in, int64_t device_layers) {
  const int64_t L = in.config.num_layers;
  if (device_layers <= 0 || device_layers >= L) {
    in.split_device_layers = in.split_host_kv_bytes = 0;
    return;
  }
  in.split_device_layers = device_layers;
  const int64_t host_per_token = in.config.kv_bytes_per_token(in.kv_dtype) / L * (L - device_layers);
  const int64_t max_len = in.max_model_len > 0 ? in.max_model_len : in.config.max_position_embeddings;
  in.split_host_kv_bytes = std::max(int64_t{2} << 30, host_per_token * (max_len + 3 * int64_t{in.block_size}));
}

int64_t kv_eviction_window(const MemoryPlanInput& in) {
  return in.kv_window_eviction && in.config.sliding_layers.empty() ? in.config.sliding_window : 0;
}

Result<MemoryPlan> plan_memory(const MemoryPlanInput& in) {
  PAGODA_RETURN_IF_ERROR(in.config.validate());
  if (in.block_size <= 0) return invalid_argument("block size must be positive");
  if (!kv_cache_dtype_supported(in.kv_dtype))
    return invalid_argument("KV cache dtype {} is not supported: use f16, bf16, f32 or (CUDA) f8_e4m3", dtype_name(in.kv_dtype));
  if (in.max_num_seqs <= 0 || in.max_num_batched_tokens <= 0) return invalid_argument("max_num_seqs and max_num_batched_tokens must be positive");
  MemoryPlan p;
  p.max_model_len = in.max_model_len > 0 ? in.max_model_len : in.config.max_position_embeddings;
  p.weights = in.weight_bytes;
  p.workspace = in.workspace_bytes >= 0 ? in.workspace_bytes : workspace_bytes(in.config, in.max_num_batched_tokens);
  p.logits = in.logits_bytes >= 0
                 ? in.logits_bytes
                 : static_cast<int64_t>(std::min(in.max_num_seqs, in.max_num_batched_tokens)) * in.config.vocab_size * 4;
  p.runtime_overhead = (in.overhead_bytes >= 0 ? in.overhead_bytes : kRuntimeOverhead) + in.device_reserved;
  const int64_t L = in.config.num_layers;
  if (in.split_device_layers < 0 || in.split_device_layers >= L)
    return invalid_argument("layer split: {} device layers of {}", in.split_device_layers, L);
  p.num_layers = L;
  p.split_device_layers = in.split_device_layers;
  // K/V bytes are the same for every layer: a split's device part holds its share.
  const int64_t all_layers_per_token = in.config.kv_bytes_per_token(in.kv_dtype);
  p.kv_bytes_per_token = in.split_device_layers > 0 ? all_layers_per_token / L * in.split_device_layers : all_layers_per_token;
  const int64_t host_block_bytes = (all_layers_per_token - p.kv_bytes_per_token) * in.block_size;
  p.block_bytes = p.kv_bytes_per_token * in.block_size;
  p.draft_fixed = in.draft_fixed_bytes;
  p.draft_label = in.draft_label;
  const int64_t draft_block_bytes = in.draft_kv_bytes_per_token * in.block_size;
  p.offloaded_weights = in.offloaded_weight_bytes;
  p.offload = in.offload_summary;
  const int64_t fixed = p.weights + p.workspace + p.logits + p.runtime_overhead + p.draft_fixed;
  int64_t kv_budget;
  if (in.kv_cache_memory > 0) {
    kv_budget = in.kv_cache_memory;
    p.budget = fixed + kv_budget;
  } else {
    if (in.device_memory <= 0) return invalid_argument("no device memory size and no --kv-cache-memory");
    if (!(in.memory_utilization > 0 && in.memory_utilization <= 1))
      return invalid_argument("--memory-utilization must be in (0, 1], got {}", in.memory_utilization);
    p.budget = static_cast<int64_t>(in.memory_utilization * static_cast<double>(in.device_memory));
    kv_budget = p.budget - fixed;
    if (kv_budget <= 0) {
      std::string advice;
      if (p.weights >= p.workspace + p.logits) {
        // Q4_K stores 4.5 bits per weight.
        const double q4k = static_cast<double>(declared_parameter_count(in.config)) * 4.5 / 8.0;
        advice = fmt::format("the weights are the largest term: 4-bit weights (q4_k) would take about {}, weight offload streams layers from host memory (--cpu-offload-gb), or use a smaller model",
                             bytes_str(static_cast<int64_t>(q4k)));
      } else {
        advice = "the activation workspace is the largest term: lower --max-num-batched-tokens or --max-num-seqs";
      }
      return resource_exhausted(
          "the model does not fit: weights {} + workspace {} + logits {} + overhead {}{} = {} exceed the budget {} "
          "({:.0f}% of {}); {}; or give more memory",
          bytes_str(p.weights), bytes_str(p.workspace), bytes_str(p.logits), bytes_str(p.runtime_overhead),
          p.draft_fixed > 0 ? " + " + p.draft_label + " " + bytes_str(p.draft_fixed) : std::string(), bytes_str(fixed),
          bytes_str(p.budget), 100 * in.memory_utilization, bytes_str(in.device_memory), advice);
    }
  }
  // One extra block is the null block (padding in block tables).
  // A draft model's cache has a block for each of the target's.
  p.num_blocks = kv_budget / (p.block_bytes + draft_block_bytes) - 1;
  if (in.split_device_layers > 0) {
    // The CPU part's cache has a block for each of the device's, in host memory.
    if (in.split_host_kv_bytes <= 0) return invalid_argument("layer split without a host KV budget");
    p.num_blocks = std::min(p.num_blocks, in.split_host_kv_bytes / host_block_bytes - 1);
    p.host_kv_cache = (std::max<int64_t>(0, p.num_blocks) + 1) * host_block_bytes;
  }
  p.kv_tokens = std::max<int64_t>(0, p.num_blocks) * in.block_size;
  p.kv_cache = (std::max<int64_t>(0, p.num_blocks) + 1) * p.block_bytes;
  p.draft_kv_cache = std::max<int64_t>(0, p.num_blocks) * draft_block_bytes;
  p.total = fixed + p.kv_cache + p.draft_kv_cache;
  p.kv_window = kv_eviction_window(in);
  p.kv_tokens_per_sequence =
      kv_window_blocks_held(p.kv_window, in.block_size, p.max_model_len, in.max_num_batched_tokens) * in.block_size;
  p.kv_tokens_per_sequence = p.kv_window > 0 ? p.kv_tokens_per_sequence : p.max_model_len;
  p.max_concurrency = static_cast<double>(p.kv_tokens) / static_cast<double>(p.kv_tokens_per_sequence);
  p.host_tier_blocks = in.kv_host_tier_bytes / p.block_bytes;
  if (in.kv_disk_tier_bytes > 0) {
    p.host_tier_blocks = std::max(p.host_tier_blocks, (p.max_model_len + in.block_size - 1) / in.block_size + 1);
    p.disk_tier = in.kv_disk_tier_bytes;
    // A file is a 48-byte header, the block's token ids and its bytes (kv/disk_tier_store.h).
    p.disk_tier_blocks = in.kv_disk_tier_bytes / (48 + 4 * in.block_size + p.block_bytes);
  }
  p.host_tier = p.host_tier_blocks > 0 ? (p.host_tier_blocks + 1) * p.block_bytes : 0;
  if (p.kv_tokens < p.kv_tokens_per_sequence) {
    const int64_t need = (p.kv_tokens_per_sequence + in.block_size - 1) / in.block_size * p.block_bytes + p.block_bytes;
    return resource_exhausted(
        "KV cache too small: {} of KV memory holds {} tokens ({} bytes per token in {}), but one sequence of "
        "max_model_len {} needs {}{}; use --max-model-len {} or less, a smaller KV dtype (--kv-dtype), a more quantized "
        "model, or more memory (KV memory >= {})",
        bytes_str(kv_budget), p.kv_tokens, p.kv_bytes_per_token, dtype_name(in.kv_dtype), p.max_model_len,
        bytes_str(need),
        p.kv_window > 0 ? fmt::format(" (its {} tokens held at once, sliding window {})", p.kv_tokens_per_sequence, p.kv_window)
                        : std::string(),
        std::max<int64_t>(0, p.kv_tokens), bytes_str(need));
  }
  return p;
}

std::string MemoryPlan::to_string() const {
  std::ostringstream os;
  os << fmt::format("memory plan: weights {} + workspace {} + logits {} + overhead {} + KV cache {} = {} (budget {})\n",
                    bytes_str(weights), bytes_str(workspace), bytes_str(logits), bytes_str(runtime_overhead),
                    bytes_str(kv_cache), bytes_str(total), bytes_str(budget));
  if (split_device_layers > 0)
    os << fmt::format("layer split: layers [0, {}) and the embedding on the device (the terms above), layers [{}, {}) and "
                      "the output head on the CPU from the mapped file; their KV cache {} in host memory (the same {} "
                      "blocks, outside the budget)\n",
                      split_device_layers, split_device_layers, num_layers, bytes_str(host_kv_cache), num_blocks);
  if (offloaded_weights > 0)
    os << fmt::format("weight offload: {} in pinned host memory: {}\n", bytes_str(offloaded_weights), offload);
  if (draft_fixed > 0)
    os << fmt::format("{} (in the total): fixed {} + KV cache {}\n", draft_label, bytes_str(draft_fixed),
                      bytes_str(draft_kv_cache));
  os << fmt::format("KV cache: {} blocks x {} = {} tokens ({} bytes/token); max concurrency at {} tokens: {:.2f}x",
                    num_blocks, bytes_str(block_bytes), kv_tokens, kv_bytes_per_token, max_model_len, max_concurrency);
  if (kv_window > 0)
    os << fmt::format(" (sliding window {}: blocks outside it are released, a sequence holds at most {} tokens)", kv_window,
                      kv_tokens_per_sequence);
  if (host_tier_blocks > 0 || disk_tier > 0) {
    os << fmt::format("\nKV tiers: host {} ({} blocks, {} tokens; outside the budget)", bytes_str(host_tier), host_tier_blocks,
                      host_tier_blocks * (kv_bytes_per_token > 0 ? block_bytes / kv_bytes_per_token : 0));
    if (disk_tier > 0)
      os << fmt::format(", disk {} ({} blocks, {} tokens)", bytes_str(disk_tier), disk_tier_blocks,
                        disk_tier_blocks * (kv_bytes_per_token > 0 ? block_bytes / kv_bytes_per_token : 0));
  }
  return os.str();
}

nlohmann::json MemoryPlan::to_json() const {
  return {{"weights", weights},     {"workspace", workspace},       {"logits", logits},
          {"runtime_overhead", runtime_overhead}, {"kv_cache", kv_cache}, {"total", total},
          {"budget", budget},       {"kv_bytes_per_token", kv_bytes_per_token}, {"block_bytes", block_bytes},
          {"num_blocks", num_blocks}, {"kv_tokens", kv_tokens},     {"max_model_len", max_model_len},
          {"max_concurrency", max_concurrency}, {"kv_window", kv_window}, {"kv_tokens_per_sequence", kv_tokens_per_sequence},
          {"host_tier", host_tier}, {"host_tier_blocks", host_tier_blocks},
          {"disk_tier", disk_tier}, {"disk_tier_blocks", disk_tier_blocks}, {"draft_fixed", draft_fixed},
          {"draft_kv_cache", draft_kv_cache}, {"draft_label", draft_label}, {"offloaded_weights", offloaded_weights}, {"offload", offload},
          {"split_device_layers", split_device_layers}, {"num_layers", num_layers}, {"host_kv_cache", host_kv_cache}};
}

int64_t host_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemTotal:") return kb * 1024;
  return 0;
}

}  // namespace pagoda

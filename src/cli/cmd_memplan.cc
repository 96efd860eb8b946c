// `pagoda memplan`: the engine's memory plan for a model and a configuration, without loading
// weights: from a GGUF header, a Hugging Face directory, or a config.json alone (weight bytes
// then come from the declared tensor table and the config's torch_dtype).
#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/options.h"
#include "loader/gguf.h"
#include "loader/packed_int_checkpoint.h"
#include "model/model_loader.h"
#include "model/family.h"
#include "model/tensor_parallel_plan.h"
#include "engine/engine_config.h"
#include "runtime/cuda_block_formats.h"
#include "runtime/memory_plan.h"
#include "runtime/weight_offload_plan.h"

namespace pagoda::cli {
namespace {

struct MemplanOptions {
  std::string model;
  int64_t max_model_len = 0;
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  std::string memory;          // device memory, e.g. "80GiB"; default: this host's
  double memory_utilization = 0.9;
  std::string kv_cache_memory;
  std::string kv_dtype = "f16";
  std::string weight_dtype;    // config.json alone: overrides torch_dtype
  WeightQuantization quantization = WeightQuantization::kNone;  // on-line quantization at load
  int32_t block_size = 16;
  KvTierOptions tiers;
  std::string cpu_offload;     // --cpu-offload-gb G|auto (options.h)
  std::string sparsity = "off";  // --cuda-sparsity (TuningConfig::sparsity): auto counts a declared checkpoint's 2:4 layouts
  int64_t n_gpu_layers = -1;   // --n-gpu-layers N (options.h): a CPU + GPU layer split
  double h2d_gb_s = 25;        // host -> device bandwidth the offload prediction assumes
  int tensor_parallel_size = 1;  // > 1: each rank's plan (model/tensor_parallel_plan.h)
  bool json = false;
};

// "80GiB", "24GB", "512MiB", "1e9", "1073741824" -> bytes; -1 if malformed.
int64_t parse_bytes(const std::string& s) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (...) {
    return -1;
  }
  std::string unit = s.substr(pos);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double mul = 1;
  if (unit == "" || unit == "b") mul = 1;
  else if (unit == "kb") mul = 1e3;
  else if (unit == "mb") mul = 1e6;
  else if (unit == "gb") mul = 1e9;
  else if (unit == "tb") mul = 1e12;
  else if (unit == "kib" || unit == "k") mul = 1024.0;
  else if (unit == "mib" || unit == "m") mul = 1024.0 * 1024;
  else if (unit == "gib" || unit == "g") mul = 1024.0 * 1024 * 1024;
  else if (unit == "tib" || unit == "t") mul = 1024.0 * 1024 * 1024 * 1024;
  else return -1;
  if (!(v >= 0)) return -1;
  return static_cast<int64_t>(v * mul);
}

// Bytes of a declared tensor in native format `q` (rows of its innermost dimension).
int64_t quantized_bytes(const TensorDecl& d, DType q) {
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < d.shape.size(); ++i) rows *= d.shape[i];
  return rows * row_bytes(q, d.shape.back());
}

// A declared tensor as a memory plan sees it: its bytes and its format as loaded (after on-line
// quantization).
struct DeclFacts {
  int64_t bytes = 0;
  DType format = DType::kF32;
};

struct ModelFacts {
  ModelConfig config;
  int64_t weight_bytes = 0;
  std::string weight_source;
  ParameterFootprint footprint;
  std::vector<int64_t> layer_linear_bytes;  // [num_layers]: each layer's matmul weights (offload)
  int64_t output_bytes = 0;                  // the untied output head's (0: tied to the embedding)
  std::map<std::string, DeclFacts> decls;  // the declared tensors present, by GGUF name
  // Elements per quantization block of the layers' linears along K (1: 16-bit): where a
  // row-parallel cut may fall.
  int64_t k_block = 1;
};

// Bytes the CUDA executor adds to a mixture of experts' stored weights: it holds in bf16 the
// experts whose format the grouped MoE kernels do not read (backend/cuda dense_only_linears: a
// block format without CUDA kernels, FP8 rows, f32); 0 when every expert matrix is 16-bit or in a
// block format with kernels (cuda_block_format). `formats` gets the expanded formats' names.
int64_t cuda_expert_expansion(const ModelFacts& f, std::string* formats = nullptr) {
  if (!f.config.is_moe()) return 0;
  int64_t stored = 0, elements = 0;
  std::set<std::string> names;
  for (const TensorDecl& d : family_of(f.config).tensor_table(f.config)) {
    if (d.experts == 0) continue;
    auto it = f.decls.find(d.gguf_name);
    if (it == f.decls.end() || cuda_block_format(it->second.format)) continue;
    int64_t n = 1;
    for (int64_t x : d.shape) n *= x;
    if (2 * n > it->second.bytes) names.insert(std::string(dtype_name(it->second.format)));
    stored += it->second.bytes;
    elements += n;
  }
  if (formats != nullptr) *formats = fmt::format("{}", fmt::join(names, ", "));
  return std::max<int64_t>(0, 2 * elements - stored);
}

// Bytes the CUDA executor adds for a checkpoint that declares 2:4 sparsity with --cuda-sparsity auto or 2:4:
// each 16-bit decoder linear of a dense model held in two 2:4 layouts (ours, 9/16 of the bf16
// bytes, and cuSPARSELt's, at most 10/16) instead of bf16, 3/16 of its bytes more
// (backend/cuda sparse_2of4_candidates; an upper bound: a linear without the pattern stays bf16).
int64_t cuda_sparse_copies(const ModelFacts& f, const std::string& sparsity) {
  if (sparsity == "off" || !f.config.sparsity_2of4 || f.config.is_moe()) return 0;
  int64_t bytes = 0;
  for (const TensorDecl& d : family_of(f.config).tensor_table(f.config)) {
    if (!d.linear || d.layer < 0 || d.experts != 0) continue;
    auto it = f.decls.find(d.gguf_name);
    if (it == f.decls.end()) continue;
    int64_t n = 1;
    for (int64_t x : d.shape) n *= x;
    if (it->second.bytes == 2 * n) bytes += it->second.bytes * 3 / 16;
  }
  return bytes;
}

// The footprint of the declared tensors `facts_of` finds (nullopt: absent), noting each one into
// f.decls and each layer's matmul weight bytes into f.layer_linear_bytes on the way.
ParameterFootprint footprint_by_layer(ModelFacts& f,
                                      const std::function<std::optional<DeclFacts>(const TensorDecl&)>& facts_of) {
  f.layer_linear_bytes.assign(static_cast<size_t>(std::max<int64_t>(0, f.config.num_layers)), 0);
  f.decls.clear();
  return parameter_footprint(f.config, [&](const TensorDecl& d) -> int64_t {
    const std::optional<DeclFacts> facts = facts_of(d);
    if (!facts) return -1;
    const int64_t b = facts->bytes;
    if (b > 0) f.decls[d.gguf_name] = *facts;
    if (b > 0 && d.linear && d.layer >= 0 && d.layer < static_cast<int64_t>(f.layer_linear_bytes.size()))
      f.layer_linear_bytes[static_cast<size_t>(d.layer)] += b;
    if (b > 0 && d.gguf_name == "output.weight") f.output_bytes = b;
    return b;
  });
}

Result<ModelFacts> model_facts(const MemplanOptions& o) {
  ModelFacts f;
  const std::string config_path = config_json_path(o.model);
  if (config_path.empty()) {
    PAGODA_ASSIGN_OR_RETURN(auto gguf, GgufFile::open(o.model));
    PAGODA_ASSIGN_OR_RETURN(f.config, model_config_from_gguf(*gguf));
    for (const auto& t : gguf->tensors()) f.weight_bytes += static_cast<int64_t>(t.nbytes);
    f.weight_source = "GGUF tensor table";
    f.footprint = footprint_by_layer(f, [&](const TensorDecl& d) -> std::optional<DeclFacts> {
      const GgufTensorInfo* t = gguf->find_tensor(d.gguf_name);
      if (t == nullptr) return std::nullopt;
      if (d.linear && d.layer >= 0) f.k_block = std::max<int64_t>(f.k_block, dtype_traits(t->dtype).block_size);
      if (auto q = online_quantized_format(d, o.quantization)) {
        f.k_block = std::max<int64_t>(f.k_block, dtype_traits(*q).block_size);
        return DeclFacts{quantized_bytes(d, *q), *q};
      }
      return DeclFacts{static_cast<int64_t>(t->nbytes), t->dtype};
    });
    if (o.quantization != WeightQuantization::kNone) {
      // The tensors are mapped, not read: the same count (and refusals) as the load's.
      PAGODA_ASSIGN_OR_RETURN(auto src, load_weight_source(o.model));
      PAGODA_ASSIGN_OR_RETURN(f.weight_bytes, online_quantized_bytes(f.config, *src, o.quantization));
      f.weight_source = fmt::format("GGUF tensor table, the layers' linears quantized on-line ({})",
                                    weight_quantization_name(o.quantization));
    }
    return f;
  }
  std::ifstream in(config_path);
  if (!in) return io_error("cannot open '{}'", config_path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) return invalid_argument("'{}' is not valid JSON", config_path);
  PAGODA_ASSIGN_OR_RETURN(f.config, model_config_from_hf_json(j));
  std::string dt = o.weight_dtype;
  if (dt.empty()) dt = j.value("torch_dtype", j.value("dtype", std::string("bfloat16")));
  if (dt == "bfloat16") dt = "bf16";
  if (dt == "float16") dt = "f16";
  if (dt == "float32") dt = "f32";
  auto wdt = dtype_from_name(dt);
  if (!wdt) return invalid_argument("unknown weight dtype '{}'", dt);
  const int64_t params = declared_parameter_count(f.config);
  // Quantized dtypes: bytes per element from the block layout.
  const auto& tr = dtype_traits(*wdt);
  f.weight_bytes = params / tr.block_size * tr.block_bytes;
  // A required tensor of config.json's shape in format `t` (bytes from the block layout).
  auto in_format = [](const TensorDecl& d, const DTypeTraits& t) {
    int64_t n = 1;
    for (int64_t x : d.shape) n *= x;
    return DeclFacts{n / t.block_size * t.block_bytes, t.dtype};
  };
  f.footprint = footprint_by_layer(f, [&](const TensorDecl& d) -> std::optional<DeclFacts> {
    if (!d.required) return std::nullopt;
    return in_format(d, tr);
  });
  f.weight_source = fmt::format("{} parameters x {} from config.json", params, tr.name);
  f.k_block = tr.block_size;
  // GPTQ / AWQ / compressed-tensors: the decoder's linears in the native rows they load as.
  PAGODA_ASSIGN_OR_RETURN(std::optional<DType> packed, packed_int_linear_format(j));
  if (o.quantization != WeightQuantization::kNone) {
    if (packed)
      return invalid_argument("--quantization {}: '{}' is already quantized (quantization_config); on-line quantization "
                              "takes a 16-bit or f32 checkpoint",
                              weight_quantization_name(o.quantization), config_path);
    f.footprint = footprint_by_layer(f, [&](const TensorDecl& d) -> std::optional<DeclFacts> {
      if (!d.required) return std::nullopt;
      if (auto q = online_quantized_format(d, o.quantization)) {
        f.k_block = std::max<int64_t>(f.k_block, dtype_traits(*q).block_size);
        return DeclFacts{quantized_bytes(d, *q), *q};
      }
      return in_format(d, tr);
    });
    f.weight_bytes = f.footprint.total_bytes;
    f.weight_source = fmt::format("{} parameters from config.json: the layers' linears quantized on-line ({}), the rest {}",
                                  params, weight_quantization_name(o.quantization), tr.name);
    return f;
  }
  if (packed && o.weight_dtype.empty()) {
    const auto& qt = dtype_traits(*packed);
    f.footprint = footprint_by_layer(f, [&](const TensorDecl& d) -> std::optional<DeclFacts> {
      if (!d.required) return std::nullopt;
      return in_format(d, d.linear && d.layer >= 0 ? qt : tr);
    });
    f.weight_bytes = f.footprint.total_bytes;
    f.k_block = qt.block_size;  // the native rows the packed linears load as
    f.weight_source = fmt::format("{} parameters from config.json: the layers' linears as {} (quantization_config), "
                                  "the rest {}", params, qt.name, tr.name);
  }
  return f;
}

// Each rank's memory plan under tensor parallelism: the rank's shards of the declared weights (the
// undeclared ones, if any, whole), its query and KV heads' KV bytes, the rest as one GPU's. Every
// rank shares rank 0's block table, so the engine's KV blocks are the fewest any rank holds.
int run_tensor_parallel_memplan(const MemplanOptions& o, const ModelFacts& facts, const MemoryPlanInput& in) {
  const int n = o.tensor_parallel_size;
  auto tp = plan_tensor_parallel(facts.config, n, {.k_block = facts.k_block});
  if (!tp.ok()) {
    std::cerr << "pagoda memplan: " << tp.status().message() << "\n";
    return 2;
  }
  int64_t declared = 0;
  for (const auto& [name, d] : facts.decls) declared += d.bytes;
  nlohmann::json ranks = nlohmann::json::array();
  std::vector<std::string> lines;
  int64_t min_blocks = -1;
  bool fits = true;
  for (const RankShards& r : tp->ranks) {
    MemoryPlanInput ri = in;
    int64_t shards = 0;
    for (const TensorShard& s : r.tensors) {
      auto it = facts.decls.find(s.decl.gguf_name);
      if (it != facts.decls.end()) shards += shard_bytes(s, it->second.bytes);
    }
    ri.weight_bytes = in.weight_bytes - declared + shards;
    ri.config.num_heads = r.num_heads;
    ri.config.num_kv_heads = r.num_kv_heads;
    if (!facts.config.is_moe()) ri.config.intermediate_size = r.intermediate_size;
    auto p = plan_memory(ri);
    nlohmann::json jr = {{"rank", r.rank}, {"first_head", r.first_head}, {"heads", r.num_heads},
                         {"first_kv_head", r.first_kv_head}, {"kv_heads", r.num_kv_heads},
                         {"vocab_begin", r.vocab_begin}, {"vocab_end", r.vocab_end}, {"weights", ri.weight_bytes},
                         {"fits", p.ok()}};
    std::string head = fmt::format("rank {}: query heads [{}, {}), KV heads [{}, {}), vocabulary [{}, {}): weights {:.2f} GiB",
                                   r.rank, r.first_head, r.first_head + r.num_heads, r.first_kv_head,
                                   r.first_kv_head + r.num_kv_heads, r.vocab_begin, r.vocab_end,
                                   static_cast<double>(ri.weight_bytes) / (1 << 30));
    if (p.ok()) {
      jr["plan"] = p->to_json();
      min_blocks = min_blocks < 0 ? p->num_blocks : std::min(min_blocks, p->num_blocks);
      lines.push_back(fmt::format("{}, KV {} bytes per token, KV cache {:.2f} GiB ({} blocks), total {:.2f} GiB of {:.2f}",
                                  head, p->kv_bytes_per_token, static_cast<double>(p->kv_cache) / (1 << 30),
                                  p->num_blocks, static_cast<double>(p->total) / (1 << 30),
                                  static_cast<double>(p->budget) / (1 << 30)));
    } else {
      fits = false;
      jr["error"] = p.status().message();
      lines.push_back(fmt::format("{}; does not fit: {}", head, p.status().message()));
    }
    ranks.push_back(std::move(jr));
  }
  if (o.json) {
    nlohmann::json j;
    j["model"] = o.model;
    j["config"] = facts.config.to_json();
    j["weights_from"] = facts.weight_source;
    j["fits"] = fits;
    j["tensor_parallel"] = {{"size", n}, {"kv_head_replicas", tp->kv_head_replicas},
                            {"vocab_rows_per_rank", tp->vocab_rows_per_rank}, {"k_block", facts.k_block},
                            {"num_blocks", fits ? min_blocks : 0}, {"ranks", ranks}};
    std::cout << j.dump(2) << "\n";
    return fits ? 0 : 3;
  }
  std::cout << facts.config.summary() << "\n";
  std::cout << fmt::format("weights: {} bytes ({})\n", facts.weight_bytes, facts.weight_source);
  std::cout << fmt::format("tensor parallel size {}: KV heads {}, vocabulary {} rows per rank (padded), cuts on {}-element "
                           "blocks; per rank, with --memory each GPU's:\n",
                           n, tp->kv_head_replicas > 1 ? fmt::format("replicated x{}", tp->kv_head_replicas) : "split",
                           tp->vocab_rows_per_rank, facts.k_block);
  for (const std::string& l : lines) std::cout << "  " << l << "\n";
  if (!fits) return 3;
  std::cout << fmt::format("KV blocks (one block table for every rank: the fewest any rank holds): {}, {} tokens\n",
                           min_blocks, min_blocks * in.block_size);
  return 0;
}

int run_memplan(const MemplanOptions& o) {
  auto facts = model_facts(o);
  if (!facts.ok()) {
    std::cerr << "pagoda memplan: " << facts.status().to_string() << "\n";
    return 1;
  }
  const int64_t ctx = facts->config.max_position_embeddings;
  if (o.max_model_len > 0 && ctx > 0 && o.max_model_len > ctx) {
    std::cerr << fmt::format("pagoda memplan: --max-model-len {} exceeds the model's context length {} "
                             "(max_position_embeddings); use at most {}\n", o.max_model_len, ctx, ctx);
    return 2;
  }
  MemoryPlanInput in;
  in.config = facts->config;
  in.weight_bytes = facts->weight_bytes;
  in.max_model_len = o.max_model_len;
  in.max_num_seqs = o.max_num_seqs;
  in.max_num_batched_tokens = o.max_num_batched_tokens;
  in.block_size = o.block_size;
  in.memory_utilization = o.memory_utilization;
  auto kv = dtype_from_name(o.kv_dtype);
  if (!kv || !kv_cache_dtype_supported(*kv)) {
    std::cerr << "pagoda memplan: --kv-dtype must be f32, f16, bf16 or f8_e4m3\n";
    return 2;
  }
  in.kv_dtype = *kv;
  in.device_memory = o.memory.empty() ? host_memory_bytes() : parse_bytes(o.memory);
  if (in.device_memory < 0) {
    std::cerr << "pagoda memplan: cannot read --memory '" << o.memory << "' (e.g. 80GiB, 24GB, 1073741824)\n";
    return 2;
  }
  if (!o.kv_cache_memory.empty()) {
    in.kv_cache_memory = parse_bytes(o.kv_cache_memory);
    if (in.kv_cache_memory < 0) {
      std::cerr << "pagoda memplan: cannot read --kv-cache-memory '" << o.kv_cache_memory << "'\n";
      return 2;
    }
  }
  const KvTierConfig tiers = resolve_kv_tier_options(o.tiers);
  in.kv_host_tier_bytes = tiers.host_bytes;
  in.kv_disk_tier_bytes = tiers.disk_dir.empty() ? 0 : tiers.disk_bytes;
  int64_t offload_bytes = 0;
  if (!resolve_cpu_offload_option(o.cpu_offload, offload_bytes, "memplan")) return 2;
  const int64_t L = facts->config.num_layers;
  if (o.n_gpu_layers == 0) {
    std::cerr << "pagoda memplan: --n-gpu-layers 0 runs every layer on the CPU: plan it without the flag (and --memory "
                 "of this host)\n";
    return 2;
  }
  if (o.n_gpu_layers > 0 && o.n_gpu_layers < L) {
    // A layer split: the device holds layers [0, N) and the rest (embedding, norms); the later
    // layers' linears and the output head are the CPU's.
    if (!o.cpu_offload.empty() && o.cpu_offload != "auto" && offload_bytes > 0) {
      std::cerr << "pagoda memplan: --n-gpu-layers and --cpu-offload-gb both keep weights off the GPU: use one of them\n";
      return 2;
    }
    offload_bytes = 0;
    for (int64_t l = o.n_gpu_layers; l < L; ++l) in.weight_bytes -= facts->layer_linear_bytes[static_cast<size_t>(l)];
    in.weight_bytes -= facts->output_bytes;
    set_layer_split(in, o.n_gpu_layers);
  }
  if (o.tensor_parallel_size > 1) {
    if (in.split_device_layers > 0 || offload_bytes > 0) {
      std::cerr << "pagoda memplan: --tensor-parallel-size with --n-gpu-layers or --cpu-offload-gb is not planned: the "
                   "ranks hold every layer on their GPUs\n";
      return 2;
    }
    return run_tensor_parallel_memplan(o, *facts, in);
  }
  // Weight offload (runtime/weight_offload_plan.h), as the engine plans it on a GPU: an explicit
  // size, or (auto) the fewest layers that make one sequence of --max-model-len tokens fit (of at
  // most 4096 when it is the model's context).
  WeightOffloadPlan offload = plan_weight_offload(facts->layer_linear_bytes, std::max<int64_t>(0, offload_bytes));
  auto plan = plan_memory(in);
  if (offload_bytes == EngineConfig::kAutoOffload && !plan.ok() && in.kv_cache_memory <= 0 && in.split_device_layers == 0) {
    MemoryPlanInput probe = in;
    probe.weight_bytes = 0;
    probe.kv_cache_memory = int64_t{1} << 50;  // any size that fits: the fixed terms are what is read
    if (auto fixed = plan_memory(probe); fixed.ok()) {
      const int64_t max_len = o.max_model_len > 0 ? fixed->max_model_len
                                                  : std::min<int64_t>(fixed->max_model_len, EngineConfig::kAutoOffloadKvTokens);
      const int64_t kv_min = (max_len / in.block_size + 3) * fixed->block_bytes;
      const int64_t budget = static_cast<int64_t>(in.memory_utilization * static_cast<double>(in.device_memory));
      int64_t in_layers = 0;
      for (int64_t b : facts->layer_linear_bytes) in_layers += b;
      offload = plan_weight_offload_to_fit(facts->layer_linear_bytes, facts->weight_bytes - in_layers,
                                           budget - fixed->workspace - fixed->logits - fixed->runtime_overhead - kv_min);
      if (offload.streamed_bytes < 0) offload = plan_weight_offload(facts->layer_linear_bytes, 0);
    }
  }
  if (offload.num_streamed() > 0) {
    in.weight_bytes = facts->weight_bytes - offload.device_saving();
    in.offloaded_weight_bytes = offload.streamed_bytes;
    const double passes = o.h2d_gb_s * 1e9 / static_cast<double>(offload.streamed_bytes);
    in.offload_summary = fmt::format("{}; at {:.0f} GB/s host -> device (--h2d-gb-s) at most {:.2f} forward passes/s "
                                     "(decode steps: tokens/s at batch 1, x batch size above)",
                                     offload.summary(), o.h2d_gb_s, passes);
    plan = plan_memory(in);
  }
  if (o.json) {
    nlohmann::json j;
    j["model"] = o.model;
    j["config"] = facts->config.to_json();
    j["weights_from"] = facts->weight_source;
    j["parameters"] = facts->footprint.total_parameters;
    j["active_parameters"] = facts->footprint.active_parameters;
    j["cuda_weight_bytes"] = facts->weight_bytes + cuda_expert_expansion(*facts) + cuda_sparse_copies(*facts, o.sparsity);
    j["bytes_per_token"] = facts->footprint.bytes_per_token;
    j["fits"] = plan.ok();
    if (plan.ok()) j["plan"] = plan->to_json();
    else j["error"] = plan.status().message();
    std::cout << j.dump(2) << "\n";
    return plan.ok() ? 0 : 3;
  }
  std::cout << facts->config.summary() << "\n";
  std::cout << fmt::format("weights: {} bytes ({})\n", facts->weight_bytes, facts->weight_source);
  const ParameterFootprint& fp = facts->footprint;
  std::cout << fmt::format("parameters: {} total, {} active per token; {} bytes read per token at batch 1\n",
                           fp.total_parameters, fp.active_parameters, fp.bytes_per_token);
  std::string expanded;
  if (const int64_t extra = cuda_expert_expansion(*facts, &expanded); extra > 0)
    std::cout << fmt::format("note: on CUDA the experts in {} are held in bf16 (the MoE kernels read f16/bf16 and the "
                             "blocks of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K): {:.2f} GiB more weights there, "
                             "{:.2f} GiB in all\n",
                             expanded, extra / 1073741824.0, (facts->weight_bytes + extra) / 1073741824.0);
  if (const int64_t extra = cuda_sparse_copies(*facts, o.sparsity); extra > 0)
    std::cout << fmt::format("note: the checkpoint declares 2:4 sparsity: with --cuda-sparsity {} its linears that hold "
                             "the pattern are held in two 2:4 layouts (our GEMV's and cuSPARSELt's) instead of bf16 on "
                             "CUDA, up to {:.2f} GiB more weights there\n",
                             o.sparsity, extra / 1073741824.0);
  else if (facts->config.sparsity_2of4)
    std::cout << "note: the checkpoint declares 2:4 sparsity; it runs dense (--cuda-sparsity auto runs its 2:4 layouts)\n";
  if (!plan.ok()) {
    std::cout << "does not fit: " << plan.status().message() << "\n";
    return 3;
  }
  std::cout << plan->to_string() << "\n";
  if (facts->config.sliding_window > 0 && !facts->config.sliding_layers.empty())
    std::cout << fmt::format("note: every layer keeps every token's K/V, the sliding-window layers included (window {}): "
                             "the cache does not evict tokens that left the window yet\n",
                             facts->config.sliding_window);
  if (plan->max_concurrency < o.max_num_seqs)
    std::cout << fmt::format("note: at full length only {:.1f} of --max-num-seqs {} sequences fit at once; shorter "
                             "sequences share the cache (blocks are allocated as tokens arrive)\n",
                             plan->max_concurrency, o.max_num_seqs);
  return 0;
}

const CommandRegistration kMemplan("memplan", "Print the memory plan for a model and configuration without loading weights", [](CLI::App* app) {
  auto o = std::make_shared<MemplanOptions>();
  app->add_option("model,--model,-m", o->model, "GGUF file, Hugging Face directory or config.json")->required();
  app->add_option("--max-model-len,-c,--ctx-size", o->max_model_len, "Maximum sequence length (default: the model's)")->check(CLI::NonNegativeNumber);
  app->add_option("--max-num-seqs", o->max_num_seqs, "Maximum concurrent sequences")->check(CLI::Range(1, 1048576));
  app->add_option("--max-num-batched-tokens", o->max_num_batched_tokens, "Token budget per step")->check(CLI::Range(1, 1073741824));
  app->add_option("--memory", o->memory, "Device memory, e.g. 80GiB (default: this host's RAM)");
  app->add_option("--memory-utilization,--gpu-memory-utilization", o->memory_utilization, "Fraction of the device memory to use")->check(CLI::Range(0.0, 1.0));
  app->add_option("--kv-cache-memory", o->kv_cache_memory, "Exact KV cache size (overrides the fraction)");
  app->add_option("--kv-dtype", o->kv_dtype, "KV element type: f16, bf16, f32");
  app->add_option("--weight-dtype", o->weight_dtype, "Weights dtype when planning from config.json (default: torch_dtype)");
  add_quantization_option(app, o->quantization);
  app->add_option("--block-size", o->block_size, "KV block size in tokens")->check(CLI::Range(1, 4096));
  add_kv_tier_options(app, &o->tiers);
  add_n_gpu_layers_option(app, &o->n_gpu_layers);
  add_cpu_offload_option(app, &o->cpu_offload);
  app->add_option("--tensor-parallel-size", o->tensor_parallel_size,
                  "Plan each of N GPUs of a tensor-parallel split (the weights' shards, the ranks' KV heads)")
      ->check(CLI::Range(1, 1024));
  app->add_option("--h2d-gb-s", o->h2d_gb_s, "Host -> device bandwidth for the offload prediction, GB/s (PCIe 4.0 x16 "
                  "about 25, 5.0 x16 about 50; pagoda bench --cpu-offload-gb measures it)")->check(CLI::Range(0.1, 10000.0));
  app->add_option("--cuda-sparsity", o->sparsity, "Plan a 2:4 checkpoint's CUDA layouts: off (dense, the default), auto, 2:4")
      ->check(CLI::IsMember({"off", "auto", "2:4"}));
  app->add_flag("--json", o->json, "Print JSON");
  return [o] { return run_memplan(*o); };
});

}  // namespace
}  // namespace pagoda::cli

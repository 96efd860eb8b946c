#include "model/model_loader.h"

#include <algorithm>
#include <filesystem>
#include <thread>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "loader/gguf.h"
#include "loader/hf_model_dir.h"
#include "model/family.h"
#include "model/random_weights.h"
#include "model/tensor_parallel_source.h"
#include "common/startup_profile.h"

namespace pagoda {
namespace {

// --load-format dummy: the config of the config.json at `path` (a directory holding one, or the
// file) and random weights of its shape.
Result<OpenedCheckpoint> open_random_weights(const std::string& path, int threads) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return not_found("'{}' does not exist", path);
  const std::string config_path = config_json_path(path);
  if (config_path.empty())
    return invalid_argument("--load-format dummy needs a Hugging Face config.json (the file, or a directory holding "
                            "it); '{}' is neither", path);
  auto j = read_json_file(config_path);
  if (!j.ok()) return Status(j.status().code(), fmt::format("--load-format dummy: {}", j.status().message()));
  OpenedCheckpoint o;
  PAGODA_ASSIGN_OR_RETURN(o.config, model_config_from_hf_json(*j));
  PAGODA_ASSIGN_OR_RETURN(o.weights, make_random_weight_source(o.config, path, random_weight_dtype(*j), /*seed=*/0, threads));
  return o;
}

}  // namespace

Result<ModelConfig> model_config_from_source(const WeightSource& source) {
  if (const GgufFile* g = source.gguf()) return model_config_from_gguf(*g);
  if (const HfModelDir* d = source.hf_dir()) return model_config_from_hf_json(d->config());
  return invalid_argument("'{}': a lone .safetensors file has no config; pass its directory (with config.json)", source.path());
}

ParameterFootprint checkpoint_footprint(const ModelConfig& config, const WeightSource& source) {
  const WeightNaming naming = source.format() == WeightFormat::kGguf ? WeightNaming::kGguf : WeightNaming::kHuggingFace;
  return parameter_footprint(config, [&](const TensorDecl& d) -> int64_t {
    const std::string& name = decl_name(d, naming);
    if (name.empty()) return -1;
    if (d.experts > 0 && naming == WeightNaming::kHuggingFace) {
      int64_t bytes = 0;
      for (int64_t e = 0; e < d.experts; ++e) {
        const Tensor* t = source.find(expert_tensor_name(d, e));
        if (t == nullptr) return -1;
        bytes += t->nbytes();
      }
      return bytes;
    }
    const Tensor* t = source.find(name);
    return t == nullptr ? -1 : t->nbytes();
  });
}

std::string config_json_path(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return path + "/" + HfModelDir::kConfigFile;
  return path.size() > 5 && path.ends_with(".json") ? path : std::string();
}

Result<ModelConfig> load_model_config(const std::string& path) {
  if (const std::string config = config_json_path(path); !config.empty()) return model_config_from_hf_file(config);
  PAGODA_ASSIGN_OR_RETURN(auto gguf, GgufFile::open(path));
  return model_config_from_gguf(*gguf);
}

Result<OpenedCheckpoint> open_checkpoint(const std::string& path, LoadFormat format, int threads) {
  if (format == LoadFormat::kDummy) return open_random_weights(path, threads);
  OpenedCheckpoint o;
  PAGODA_ASSIGN_OR_RETURN(o.weights, load_weight_source(path));
  PAGODA_ASSIGN_OR_RETURN(o.config, model_config_from_source(*o.weights));
  return o;
}

namespace {

// Rank `rank` of `size`: m.weights becomes its shards (cut on the largest quantization block of the
// decoder linears) and m.tensor_parallel its place; returns the rank's config.
Result<ModelConfig> tensor_parallel_part(LoadedModel& m, WeightNaming naming, int size, int rank) {
  if (rank < 0 || rank >= size) return invalid_argument("tensor-parallel rank {} of {}", rank, size);
  ShardConstraints k;
  for (const TensorDecl& d : family_of(m.config).tensor_table(m.config)) {
    if (!d.linear || d.layer < 0) continue;
    const std::string name = d.experts > 0 && naming == WeightNaming::kHuggingFace ? expert_tensor_name(d, 0)
                                                                                  : decl_name(d, naming);
    if (const Tensor* t = m.weights->find(name)) k.k_block = std::max<int64_t>(k.k_block, dtype_traits(t->dtype()).block_size);
  }
  PAGODA_ASSIGN_OR_RETURN(const TensorParallelPlan plan, plan_tensor_parallel(m.config, size, k));
  std::shared_ptr<const WeightSource> full(std::move(m.weights));
  PAGODA_ASSIGN_OR_RETURN(m.weights, tensor_parallel_weight_source(full, plan, rank));
  const RankShards& rs = plan.ranks.at(static_cast<size_t>(rank));
  m.tensor_parallel = {size, rank, rs.vocab_begin, plan.vocab_rows_per_rank};
  return rank_model_config(m.config, plan, rank);
}

}  // namespace

Result<LoadedModel> load_model(const std::string& path, const ModelLoadOptions& options) {
  LoadedModel m;
  const int load_threads = options.load_threads > 0 ? options.load_threads
                                                    : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  startup_profile::Scope open_phase(options.load_format == LoadFormat::kDummy ? "model/random weights" : "model/open");
  PAGODA_ASSIGN_OR_RETURN(OpenedCheckpoint opened, open_checkpoint(path, options.load_format, load_threads));
  m.config = std::move(opened.config);
  m.weights = std::move(opened.weights);
  open_phase.stop();
  m.max_model_len = options.max_model_len > 0 ? options.max_model_len : m.config.max_position_embeddings;
  if (m.max_model_len <= 0 || m.max_model_len > kMaxContextLength)
    return invalid_argument("{}: max_model_len {} is out of range (1 to {})", path, m.max_model_len, kMaxContextLength);
  // FP8 weights stay F8E4M3Rows only where no CPU kernel reads them (the whole model on a device).
  const bool fp8_rows = !options.cpu_kernels || options.cpu_kernels_from_layer >= m.config.num_layers;
  if (options.precheck) {
    auto weight_bytes = online_quantized_bytes(m.config, *m.weights, options.quantization, fp8_rows);
    if (!weight_bytes.ok()) return Status(weight_bytes.status().code(), fmt::format("{}: {}", path, weight_bytes.status().message()));
    if (Status st = options.precheck(m.config, *weight_bytes, m.max_model_len); !st.ok())
      return Status(st.code(), fmt::format("{}: {}", path, st.message()));
  }
  if (options.quantization != WeightQuantization::kNone) {
    startup_profile::Scope quantize_phase(fmt::format("model/quantize ({})", weight_quantization_name(options.quantization)));
    auto q = quantize_weight_source(std::move(m.weights), m.config, options.quantization, load_threads);
    if (!q.ok()) return Status(q.status().code(), fmt::format("{}: {}", path, q.status().message()));
    m.weights = std::move(q).value();
  }
  if (!fp8_rows) {
    auto b = fp8_rows_as_bf16(std::move(m.weights), load_threads);
    if (!b.ok()) return Status(b.status().code(), fmt::format("{}: {}", path, b.status().message()));
    m.weights = std::move(b).value();
  }
  const WeightNaming naming = m.weights->format() == WeightFormat::kGguf ? WeightNaming::kGguf : WeightNaming::kHuggingFace;
  ModelConfig model_config = m.config;  // the rank's under tensor parallelism
  if (options.tensor_parallel_size > 1) {
    auto part = tensor_parallel_part(m, naming, options.tensor_parallel_size, options.tensor_parallel_rank);
    if (!part.ok()) return Status(part.status().code(), fmt::format("{}: {}", path, part.status().message()));
    model_config = std::move(part).value();
  }
  const WeightSource* source = m.weights.get();
  // Weight-loading progress: bytes of the distinct tensors the family has looked up so far.
  int64_t total = 0, done = 0;
  std::unordered_set<std::string> seen;
  if (options.progress)
    for (const auto& name : source->names())
      if (const Tensor* t = source->find(name)) total += t->nbytes();
  auto lookup = [source, &options, &done, &seen, total](const std::string& name) {
    auto t = source->get(name);
    if (options.progress && t.ok() && seen.insert(name).second) {
      done = std::min(total, done + (*t)->nbytes());
      options.progress(done, total);
    }
    return t;
  };
  ModelLoadParams params;
  params.max_positions = m.max_model_len;
  params.cpu_kernels = options.cpu_kernels && options.cpu_kernels_from_layer < m.config.num_layers;
  params.cpu_kernels_from_layer = options.cpu_kernels_from_layer;
  params.packed_in = options.packed_in;
  params.packed_out = options.packed_out;
  params.packed_counts = options.packed_counts;
  params.load_threads = load_threads;
  startup_profile::Scope weights_phase(params.cpu_kernels ? "model/weights (read, repack)" : "model/weights (map)");
  auto model = family_of(model_config).load(model_config, naming, lookup, params);
  weights_phase.stop();
  if (options.progress) options.progress(total, total);
  if (!model.ok()) return Status(model.status().code(), fmt::format("{}: {}", path, model.status().message()));
  m.model = std::move(model).value();
  return m;
}

}  // namespace pagoda

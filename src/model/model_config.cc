#include "model/model_config.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "loader/gguf.h"
#include "model/family.h"

namespace pagoda {

const char* arch_family_name(ArchFamily a) {
  switch (a) {
    case ArchFamily::kLlama: return "llama";
    case ArchFamily::kMistral: return "mistral";
    case ArchFamily::kQwen2: return "qwen2";
    case ArchFamily::kQwen3: return "qwen3";
  }
  return "?";
}

int64_t ModelConfig::kv_bytes_per_token(DType kv_dtype) const {
  return 2 * num_layers * num_kv_heads * row_bytes(kv_dtype, head_dim);
}

Status ModelConfig::validate() const {
  auto positive = [](int64_t v, const char* name) -> Status {
    if (v <= 0) return invalid_argument("model config: {} must be positive (got {})", name, v);
    return {};
  };
  PAGODA_RETURN_IF_ERROR(positive(vocab_size, "vocab_size"));
  PAGODA_RETURN_IF_ERROR(positive(hidden_size, "hidden_size"));
  PAGODA_RETURN_IF_ERROR(positive(intermediate_size, "intermediate_size"));
  PAGODA_RETURN_IF_ERROR(positive(num_layers, "num_layers"));
  PAGODA_RETURN_IF_ERROR(positive(num_heads, "num_heads"));
  PAGODA_RETURN_IF_ERROR(positive(num_kv_heads, "num_kv_heads"));
  PAGODA_RETURN_IF_ERROR(positive(head_dim, "head_dim"));
  PAGODA_RETURN_IF_ERROR(positive(max_position_embeddings, "max_position_embeddings"));
  if (num_heads % num_kv_heads != 0)
    return invalid_argument("model config: num_heads {} is not a multiple of num_kv_heads {}", num_heads, num_kv_heads);
  if (head_dim % 2 != 0) return invalid_argument("model config: head_dim {} must be even for RoPE", head_dim);
  if (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 != 0)
    return invalid_argument("model config: rope dimension {} must be even and in (0, head_dim={}]", rope_dim, head_dim);
  if (!(rms_norm_eps > 0) || !(rope_theta > 0)) return invalid_argument("model config: rms_norm_eps and rope_theta must be positive");
  if (num_layers > 4096 || num_heads > 4096 || hidden_size > (1 << 20) || vocab_size > (1 << 24))
    return invalid_argument("model config: implausible sizes (layers {}, heads {}, hidden {}, vocab {})", num_layers,
                            num_heads, hidden_size, vocab_size);
  return {};
}

std::string ModelConfig::summary() const {
  return fmt::format(
      "{} ({}): vocab {}, hidden {}, ffn {}, layers {}, heads {}/{} kv, head_dim {}, ctx {}, rope theta {} {}{}, "
      "eps {}, tied {}, qkv bias {}, qk norm {}",
      arch_family_name(family), arch_name, vocab_size, hidden_size, intermediate_size, num_layers, num_heads,
      num_kv_heads, head_dim, max_position_embeddings, rope_theta, rope_layout_name(rope_layout),
      rope_scaling.kind == RopeScaling::Kind::kLlama3   ? fmt::format(" llama3x{}", rope_scaling.factor)
      : rope_scaling.kind == RopeScaling::Kind::kLinear ? fmt::format(" linear x{}", rope_scaling.factor)
                                                        : std::string(),
      rms_norm_eps, tie_word_embeddings, attention_bias, qk_norm);
}

nlohmann::json ModelConfig::to_json() const {
  nlohmann::json j;
  j["family"] = arch_family_name(family);
  j["architecture"] = arch_name;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_layers"] = num_layers;
  j["num_heads"] = num_heads;
  j["num_kv_heads"] = num_kv_heads;
  j["head_dim"] = head_dim;
  j["context_length"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  j["rope_dim"] = rope_dim;
  j["rope_layout"] = rope_layout_name(rope_layout);
  const char* kinds[] = {"none", "linear", "llama3"};
  j["rope_scaling"] = {{"type", kinds[static_cast<int>(rope_scaling.kind)]}, {"factor", rope_scaling.factor}};
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["attention_bias"] = attention_bias;
  j["qk_norm"] = qk_norm;
  j["sliding_window"] = sliding_window;
  return j;
}

Result<ModelConfig> model_config_from_gguf(const GgufFile& g) {
  ModelConfig c;
  auto arch = g.get_string("general.architecture");
  if (!arch) return invalid_argument("GGUF has no general.architecture string");
  c.arch_name = *arch;
  const Family* family = find_family(*arch);
  if (family == nullptr)
    return unimplemented("architecture '{}' is not supported (supported: {})", *arch, supported_architectures());
  const std::string p = *arch + ".";
  auto need_int = [&](const std::string& key, int64_t* out) -> Status {
    auto v = g.get_int(p + key);
    if (!v) return invalid_argument("GGUF is missing integer metadata '{}{}'", p, key);
    *out = *v;
    return {};
  };
  PAGODA_RETURN_IF_ERROR(need_int("embedding_length", &c.hidden_size));
  PAGODA_RETURN_IF_ERROR(need_int("feed_forward_length", &c.intermediate_size));
  PAGODA_RETURN_IF_ERROR(need_int("block_count", &c.num_layers));
  PAGODA_RETURN_IF_ERROR(need_int("attention.head_count", &c.num_heads));
  PAGODA_RETURN_IF_ERROR(need_int("context_length", &c.max_position_embeddings));
  c.num_kv_heads = g.get_int(p + "attention.head_count_kv").value_or(c.num_heads);
  c.head_dim = g.get_int(p + "attention.key_length").value_or(c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
  c.rope_dim = g.get_int(p + "rope.dimension_count").value_or(c.head_dim);
  c.rms_norm_eps = g.get_float(p + "attention.layer_norm_rms_epsilon").value_or(1e-5);
  c.rope_theta = g.get_float(p + "rope.freq_base").value_or(10000.0);
  c.sliding_window = g.get_int(p + "attention.sliding_window").value_or(0);
  if (auto st = g.get_string(p + "rope.scaling.type")) {
    if (*st == "linear") {
      c.rope_scaling.kind = RopeScaling::Kind::kLinear;
      c.rope_scaling.factor = g.get_float(p + "rope.scaling.factor").value_or(1.0);
    } else if (*st != "none") {
      return unimplemented("rope scaling type '{}' is not supported", *st);
    }
  }
  // Llama 3.1+ GGUFs carry the llama3 frequency factors as a tensor (rope_freqs.weight); the
  // forward pass uses it directly, so no kind is set here.
  if (auto v = g.get_int(p + "vocab_size")) {
    c.vocab_size = *v;
  } else if (const GgufArray* toks = g.get_array("tokenizer.ggml.tokens")) {
    c.vocab_size = static_cast<int64_t>(toks->size());
  } else if (const GgufTensorInfo* emb = g.find_tensor("token_embd.weight"); emb && emb->dims.size() == 2) {
    c.vocab_size = emb->dims[1];
  }
  c.tie_word_embeddings = g.find_tensor("output.weight") == nullptr;
  PAGODA_RETURN_IF_ERROR(family->configure_gguf(*arch, g, c));
  PAGODA_RETURN_IF_ERROR(c.validate());
  return c;
}

Result<ModelConfig> model_config_from_hf_json(const nlohmann::json& j) {
  if (!j.is_object()) return invalid_argument("config.json is not a JSON object");
  ModelConfig c;
  const std::string model_type = j.value("model_type", std::string());
  c.arch_name = model_type;
  const Family* family = find_family(model_type);
  if (family == nullptr)
    return unimplemented("model_type '{}' is not supported (supported: {})", model_type, supported_architectures());
  try {
    auto need = [&](const char* key) -> Result<int64_t> {
      if (!j.contains(key) || !j[key].is_number_integer()) return invalid_argument("config.json: missing integer '{}'", key);
      return j[key].get<int64_t>();
    };
    PAGODA_ASSIGN_OR_RETURN(c.vocab_size, need("vocab_size"));
    PAGODA_ASSIGN_OR_RETURN(c.hidden_size, need("hidden_size"));
    PAGODA_ASSIGN_OR_RETURN(c.intermediate_size, need("intermediate_size"));
    PAGODA_ASSIGN_OR_RETURN(c.num_layers, need("num_hidden_layers"));
    PAGODA_ASSIGN_OR_RETURN(c.num_heads, need("num_attention_heads"));
    c.num_kv_heads = j.contains("num_key_value_heads") && j["num_key_value_heads"].is_number_integer()
                         ? j["num_key_value_heads"].get<int64_t>()
                         : c.num_heads;
    c.head_dim = j.contains("head_dim") && j["head_dim"].is_number_integer() ? j["head_dim"].get<int64_t>()
                                                                              : c.hidden_size / c.num_heads;
    c.rope_dim = c.head_dim;
    c.max_position_embeddings = j.value("max_position_embeddings", int64_t{2048});
    c.rms_norm_eps = j.value("rms_norm_eps", 1e-6);
    c.tie_word_embeddings = j.value("tie_word_embeddings", false);
    PAGODA_RETURN_IF_ERROR(family->configure_hf(model_type, j, c));
    // transformers 4.x: rope_theta + rope_scaling; 5.x: rope_parameters {rope_type, rope_theta, ...}.
    nlohmann::json rope = nlohmann::json::object();
    if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) rope = j["rope_scaling"];
    if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) rope = j["rope_parameters"];
    c.rope_theta = j.value("rope_theta", rope.value("rope_theta", 10000.0));
    std::string rope_type = rope.value("rope_type", rope.value("type", std::string("default")));
    if (rope_type == "llama3") {
      c.rope_scaling.kind = RopeScaling::Kind::kLlama3;
      c.rope_scaling.factor = rope.value("factor", 8.0);
      c.rope_scaling.low_freq_factor = rope.value("low_freq_factor", 1.0);
      c.rope_scaling.high_freq_factor = rope.value("high_freq_factor", 4.0);
      c.rope_scaling.original_max_position = rope.value("original_max_position_embeddings", int64_t{8192});
    } else if (rope_type == "linear") {
      c.rope_scaling.kind = RopeScaling::Kind::kLinear;
      c.rope_scaling.factor = rope.value("factor", 1.0);
    } else if (rope_type != "default") {
      return unimplemented("config.json: rope type '{}' is not supported", rope_type);
    }
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument("config.json: {}", e.what());
  }
  PAGODA_RETURN_IF_ERROR(c.validate());
  return c;
}

Result<ModelConfig> model_config_from_hf_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return io_error("cannot open '{}'", path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("'{}' is not valid JSON", path);
  return model_config_from_hf_json(j);
}

}  // namespace pagoda

#include "model/model_config.h"

#include <cmath>
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
    case ArchFamily::kGemma2: return "gemma2";
    case ArchFamily::kGemma3: return "gemma3";
    case ArchFamily::kMixtral: return "mixtral";
    case ArchFamily::kQwen2Moe: return "qwen2moe";
    case ArchFamily::kQwen3Moe: return "qwen3moe";
    case ArchFamily::kOlmoe: return "olmoe";
    case ArchFamily::kPhi3: return "phi3";
  }
  return "?";
}

int64_t ModelConfig::kv_bytes_per_token(DType kv_dtype) const {
  return 2 * num_layers * num_kv_heads * row_bytes(kv_dtype, head_dim);
}

Status ModelConfig::validate() const {
  auto in_range = [](int64_t v, int64_t hi, const char* name) -> Status {
    if (v <= 0) return invalid_argument("model config: {} must be positive (got {})", name, v);
    if (v > hi) return invalid_argument("model config: {} = {} is implausibly large (at most {})", name, v, hi);
    return {};
  };
  PAGODA_RETURN_IF_ERROR(in_range(vocab_size, kMaxVocabSize, "vocab_size"));
  PAGODA_RETURN_IF_ERROR(in_range(hidden_size, kMaxHiddenSize, "hidden_size"));
  PAGODA_RETURN_IF_ERROR(in_range(intermediate_size, kMaxIntermediateSize, "intermediate_size"));
  PAGODA_RETURN_IF_ERROR(in_range(num_layers, kMaxLayers, "num_layers"));
  PAGODA_RETURN_IF_ERROR(in_range(num_heads, kMaxHeads, "num_heads"));
  PAGODA_RETURN_IF_ERROR(in_range(num_kv_heads, kMaxHeads, "num_kv_heads"));
  PAGODA_RETURN_IF_ERROR(in_range(head_dim, kMaxHeadDim, "head_dim"));
  PAGODA_RETURN_IF_ERROR(in_range(max_position_embeddings, kMaxContextLength, "max_position_embeddings (context length)"));
  if (num_heads % num_kv_heads != 0)
    return invalid_argument("model config: num_heads {} is not a multiple of num_kv_heads {}", num_heads, num_kv_heads);
  if (head_dim % 2 != 0) return invalid_argument("model config: head_dim {} must be even for RoPE", head_dim);
  if (num_heads * head_dim > 4 * kMaxHiddenSize)
    return invalid_argument("model config: num_heads {} x head_dim {} is implausibly large", num_heads, head_dim);
  if (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 != 0)
    return invalid_argument("model config: rope dimension {} must be even and in (0, head_dim={}]", rope_dim, head_dim);
  if (!std::isfinite(rms_norm_eps) || !(rms_norm_eps > 0) || rms_norm_eps >= 1)
    return invalid_argument("model config: rms_norm_eps {} must be in (0, 1)", rms_norm_eps);
  if (!std::isfinite(rope_theta) || !(rope_theta > 0))
    return invalid_argument("model config: rope_theta {} must be positive and finite", rope_theta);
  if (sliding_window < 0) return invalid_argument("model config: sliding_window {} must be >= 0", sliding_window);
  if (!sliding_layers.empty() && static_cast<int64_t>(sliding_layers.size()) != num_layers)
    return invalid_argument("model config: {} sliding-window layer flags for {} layers", sliding_layers.size(), num_layers);
  for (auto [v, name] : {std::pair{query_pre_attn_scalar, "query_pre_attn_scalar"},
                         std::pair{attn_logit_softcap, "attn_logit_softcapping"},
                         std::pair{final_logit_softcap, "final_logit_softcapping"},
                         std::pair{rope_local_theta, "rope_local_base_freq"}})
    if (!std::isfinite(v) || v < 0 || v > 1e12)
      return invalid_argument("model config: {} {} must be finite and >= 0", name, v);
  if (num_experts != 0 || num_experts_per_tok != 0) {
    PAGODA_RETURN_IF_ERROR(in_range(num_experts, kMaxExperts, "expert count (num_experts)"));
    if (num_experts_per_tok <= 0 || num_experts_per_tok > num_experts)
      return invalid_argument("model config: experts per token (top-k) {} must be in [1, expert count {}]",
                              num_experts_per_tok, num_experts);
    PAGODA_RETURN_IF_ERROR(in_range(expert_intermediate_size, kMaxIntermediateSize, "expert feed-forward length"));
    if (shared_expert_intermediate_size < 0 || shared_expert_intermediate_size > kMaxIntermediateSize)
      return invalid_argument("model config: shared expert feed-forward length {} out of range", shared_expert_intermediate_size);
  }
  if (rope_scaling.kind != RopeScaling::Kind::kNone) {
    const RopeScaling& r = rope_scaling;
    if (!std::isfinite(r.factor) || !(r.factor > 0) || r.factor > 1e6)
      return invalid_argument("model config: rope scaling factor {} must be positive and finite", r.factor);
    if (r.kind == RopeScaling::Kind::kLlama3) {
      if (!std::isfinite(r.low_freq_factor) || !std::isfinite(r.high_freq_factor) || !(r.low_freq_factor > 0) ||
          !(r.high_freq_factor > r.low_freq_factor))
        return invalid_argument("model config: llama3 rope scaling needs 0 < low_freq_factor ({}) < high_freq_factor ({})",
                                r.low_freq_factor, r.high_freq_factor);
      if (r.original_max_position <= 0 || r.original_max_position > kMaxContextLength)
        return invalid_argument("model config: llama3 rope scaling original_max_position_embeddings {} out of range",
                                r.original_max_position);
    }
    if (r.kind == RopeScaling::Kind::kLongRope) {
      if (r.original_max_position <= 0 || r.original_max_position > kMaxContextLength)
        return invalid_argument("model config: longrope original_max_position_embeddings {} out of range",
                                r.original_max_position);
      if (!std::isfinite(r.attention_factor) || !(r.attention_factor > 0) || r.attention_factor > 1e3)
        return invalid_argument("model config: longrope attention factor {} must be positive and finite", r.attention_factor);
      for (const auto* list : {&rope_long_factors, &rope_short_factors}) {
        if (list->empty()) continue;
        if (static_cast<int64_t>(list->size()) != rope_dim / 2)
          return invalid_argument("model config: longrope factor lists need rope_dim / 2 = {} entries (got {})",
                                  rope_dim / 2, list->size());
        for (float f : *list)
          if (!std::isfinite(f) || !(f > 0) || f > 1e6)
            return invalid_argument("model config: longrope factor {} must be positive and finite", f);
      }
      if (rope_long_factors.empty() != rope_short_factors.empty())
        return invalid_argument("model config: longrope needs both long_factor and short_factor");
    }
  }
  return {};
}

std::string ModelConfig::summary() const {
  return fmt::format(
      "{} ({}): vocab {}, hidden {}, ffn {}, layers {}, heads {}/{} kv, head_dim {}, ctx {}, rope theta {} {}{}, "
      "eps {}, tied {}, qkv bias {}, qk norm {}",
      arch_family_name(family), arch_name, vocab_size, hidden_size, intermediate_size, num_layers, num_heads,
      num_kv_heads, head_dim, max_position_embeddings, rope_theta, rope_layout_name(rope_layout),
      rope_scaling.kind == RopeScaling::Kind::kLlama3     ? fmt::format(" llama3x{}", rope_scaling.factor)
      : rope_scaling.kind == RopeScaling::Kind::kLinear   ? fmt::format(" linear x{}", rope_scaling.factor)
      : rope_scaling.kind == RopeScaling::Kind::kLongRope ? fmt::format(" longrope (original {})", rope_scaling.original_max_position)
                                                          : std::string(),
      rms_norm_eps, tie_word_embeddings, attention_bias, qk_norm) +
         (is_moe() ? fmt::format(", experts {} top-{}{} ffn {}{}", num_experts, num_experts_per_tok,
                                 norm_topk_prob ? " normalized" : "", expert_intermediate_size,
                                 shared_expert_intermediate_size > 0
                                     ? fmt::format(", shared expert ffn {}", shared_expert_intermediate_size)
                                     : std::string())
                    : std::string()) +
         (sparsity_2of4 ? ", 2:4 sparse" : "");
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
  const char* kinds[] = {"none", "linear", "llama3", "longrope"};
  j["rope_scaling"] = {{"type", kinds[static_cast<int>(rope_scaling.kind)]}, {"factor", rope_scaling.factor}};
  if (rope_scaling.kind == RopeScaling::Kind::kLongRope) {
    j["rope_scaling"]["original_max_position_embeddings"] = rope_scaling.original_max_position;
    j["rope_scaling"]["attention_factor"] = rope_scaling.attention_factor;
  }
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["attention_bias"] = attention_bias;
  j["qk_norm"] = qk_norm;
  j["sliding_window"] = sliding_window;
  if (!sliding_layers.empty()) {
    int64_t n = 0;
    for (bool b : sliding_layers) n += b;
    j["sliding_window_layers"] = n;
  }
  if (query_pre_attn_scalar > 0) j["query_pre_attn_scalar"] = query_pre_attn_scalar;
  if (attn_logit_softcap > 0) j["attn_logit_softcapping"] = attn_logit_softcap;
  if (final_logit_softcap > 0) j["final_logit_softcapping"] = final_logit_softcap;
  if (rope_local_theta > 0) j["rope_local_theta"] = rope_local_theta;
  if (sparsity_2of4) j["sparsity"] = "2:4";
  if (is_moe()) {
    j["num_experts"] = num_experts;
    j["num_experts_per_tok"] = num_experts_per_tok;
    j["expert_intermediate_size"] = expert_intermediate_size;
    j["norm_topk_prob"] = norm_topk_prob;
    if (shared_expert_intermediate_size > 0) j["shared_expert_intermediate_size"] = shared_expert_intermediate_size;
    if (qk_norm_full) j["qk_norm_full"] = true;
  }
  return j;
}

Result<ModelConfig> model_config_from_gguf(const GgufFile& g) {
  ModelConfig c;
  auto arch = g.get_string("general.architecture");
  if (!arch) return invalid_argument("GGUF has no general.architecture string");
  c.arch_name = *arch;
  // llama.cpp writes Mixtral as architecture "llama" with an expert count (0 or absent: dense).
  const std::string family_arch =
      *arch == "llama" && g.get_int("llama.expert_count").value_or(0) > 0 ? std::string("mixtral") : *arch;
  const Family* family = find_family(family_arch);
  if (family == nullptr)
    return unimplemented("architecture '{}' is not supported (supported: {})", *arch, supported_architectures());
  const std::string p = *arch + ".";
  // A key that is present with the wrong type is reported as such, not as missing.
  auto typed = [&](const std::string& key, bool want_int) -> Status {
    const GgufValue* v = g.find(p + key);
    if (v == nullptr) return {};
    const bool ok = want_int ? v->as_int().has_value() && v->type != GgufType::kBool && v->type != GgufType::kFloat32 &&
                                   v->type != GgufType::kFloat64
                             : v->as_float().has_value() && v->type != GgufType::kBool;
    if (!ok)
      return invalid_argument("GGUF metadata '{}{}' has type {}, expected {}", p, key, gguf_type_name(v->type),
                              want_int ? "an integer" : "a number");
    return {};
  };
  auto need_int = [&](const std::string& key, int64_t* out) -> Status {
    PAGODA_RETURN_IF_ERROR(typed(key, true));
    auto v = g.get_int(p + key);
    if (!v) return invalid_argument("GGUF is missing integer metadata '{}{}'", p, key);
    *out = *v;
    return {};
  };
  for (const char* key : {"attention.head_count_kv", "attention.key_length", "rope.dimension_count",
                          "attention.sliding_window", "vocab_size"})
    PAGODA_RETURN_IF_ERROR(typed(key, true));
  for (const char* key : {"attention.layer_norm_rms_epsilon", "rope.freq_base", "rope.scaling.factor"})
    PAGODA_RETURN_IF_ERROR(typed(key, false));
  PAGODA_RETURN_IF_ERROR(need_int("embedding_length", &c.hidden_size));
  PAGODA_RETURN_IF_ERROR(need_int("feed_forward_length", &c.intermediate_size));
  PAGODA_RETURN_IF_ERROR(need_int("block_count", &c.num_layers));
  PAGODA_RETURN_IF_ERROR(need_int("attention.head_count", &c.num_heads));
  PAGODA_RETURN_IF_ERROR(need_int("context_length", &c.max_position_embeddings));
  c.num_kv_heads = g.get_int(p + "attention.head_count_kv").value_or(c.num_heads);
  if (c.num_heads <= 0) return invalid_argument("model config: {}attention.head_count must be positive (got {})", p, c.num_heads);
  if (!g.find(p + "attention.key_length") && c.hidden_size % c.num_heads != 0)
    return invalid_argument("model config: embedding_length {} is not a multiple of attention.head_count {}", c.hidden_size,
                            c.num_heads);
  c.head_dim = g.get_int(p + "attention.key_length").value_or(c.hidden_size / c.num_heads);
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
  PAGODA_RETURN_IF_ERROR(family->configure_gguf(family_arch, g, c));
  PAGODA_RETURN_IF_ERROR(c.validate());
  return c;
}

namespace {

// compressed-tensors' sparsity_config (in quantization_config, or compression_config in older
// llm-compressor releases): true for sparsity_structure "2:4" stored dense; false without one or for
// another structure (the weights are plain dense tensors either way); an error for a compressed
// storage format, whose tensors are not plain weights.
Result<bool> declared_2of4_sparsity(const nlohmann::json& j) {
  for (const char* key : {"quantization_config", "compression_config"}) {
    auto q = j.find(key);
    if (q == j.end() || !q->is_object()) continue;
    auto sc = q->find("sparsity_config");
    if (sc == q->end() || sc->is_null()) continue;
    if (!sc->is_object()) return invalid_argument("config.json: {}.sparsity_config is not an object", key);
    const std::string format = sc->value("format", std::string("dense"));
    if (format != "dense")
      return unimplemented("config.json: {}.sparsity_config format '{}' is not supported: its weights are stored "
                           "compressed; a 2:4 checkpoint stored dense (format 'dense') is", key, format);
    return sc->value("sparsity_structure", std::string()) == "2:4";
  }
  return false;
}

}  // namespace

Result<ModelConfig> model_config_from_hf_json(const nlohmann::json& j) {
  if (!j.is_object()) return invalid_argument("config.json is not a JSON object");
  ModelConfig c;
  if (j.contains("model_type") && !j["model_type"].is_string())
    return invalid_argument("config.json: 'model_type' has type {}, expected a string", j["model_type"].type_name());
  const std::string model_type = j.value("model_type", std::string());
  c.arch_name = model_type;
  if (j.contains("text_config") && j.contains("vision_config") && !j.contains("vocab_size"))
    return unimplemented("config.json: '{}' is a multimodal checkpoint (text_config + vision_config); its text decoder "
                         "alone is supported as a text-only checkpoint (e.g. Gemma3ForCausalLM, model_type gemma3_text)",
                         model_type);
  const Family* family = find_family(model_type);
  if (family == nullptr)
    return unimplemented("model_type '{}' is not supported (supported: {})", model_type, supported_architectures());
  try {
    // Integers: absent -> `fallback` (or an error when required); present with another type ->
    // "has type X, expected an integer".
    auto int_in = [&](const nlohmann::json& o, const char* key, std::optional<int64_t> fallback) -> Result<int64_t> {
      if (!o.contains(key) || (fallback && o[key].is_null())) {
        if (fallback) return *fallback;
        return invalid_argument("config.json: missing integer '{}'", key);
      }
      const auto& v = o[key];
      if (!v.is_number_integer())
        return invalid_argument("config.json: '{}' has type {}, expected an integer", key,
                                v.is_number_float() ? "float" : v.type_name());
      if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        return invalid_argument("config.json: '{}' = {} is out of range", key, v.get<uint64_t>());
      return v.get<int64_t>();
    };
    auto int_field = [&](const char* key, std::optional<int64_t> fallback) { return int_in(j, key, fallback); };
    auto number_field = [&](const nlohmann::json& o, const char* key, double fallback) -> Result<double> {
      if (!o.contains(key) || o[key].is_null()) return fallback;
      if (!o[key].is_number()) return invalid_argument("config.json: '{}' has type {}, expected a number", key, o[key].type_name());
      return o[key].get<double>();
    };
    PAGODA_ASSIGN_OR_RETURN(c.vocab_size, int_field("vocab_size", std::nullopt));
    PAGODA_ASSIGN_OR_RETURN(c.hidden_size, int_field("hidden_size", std::nullopt));
    PAGODA_ASSIGN_OR_RETURN(c.intermediate_size, int_field("intermediate_size", std::nullopt));
    PAGODA_ASSIGN_OR_RETURN(c.num_layers, int_field("num_hidden_layers", std::nullopt));
    PAGODA_ASSIGN_OR_RETURN(c.num_heads, int_field("num_attention_heads", std::nullopt));
    if (c.num_heads <= 0) return invalid_argument("config.json: num_attention_heads must be positive (got {})", c.num_heads);
    PAGODA_ASSIGN_OR_RETURN(c.num_kv_heads, int_field("num_key_value_heads", c.num_heads));
    if (!j.contains("head_dim") || j["head_dim"].is_null()) {
      if (c.hidden_size % c.num_heads != 0)
        return invalid_argument("config.json: hidden_size {} is not a multiple of num_attention_heads {}", c.hidden_size,
                                c.num_heads);
    }
    PAGODA_ASSIGN_OR_RETURN(c.head_dim, int_field("head_dim", c.hidden_size / c.num_heads));
    c.rope_dim = c.head_dim;
    PAGODA_ASSIGN_OR_RETURN(c.max_position_embeddings, int_field("max_position_embeddings", int64_t{2048}));
    PAGODA_ASSIGN_OR_RETURN(c.rms_norm_eps, number_field(j, "rms_norm_eps", 1e-6));
    c.tie_word_embeddings = j.value("tie_word_embeddings", false);
    if (j.contains("sliding_window") && !j["sliding_window"].is_null()) {
      PAGODA_ASSIGN_OR_RETURN(c.sliding_window, int_field("sliding_window", int64_t{0}));  // the family decides its use
    }
    // transformers 4.x: rope_theta + rope_scaling; 5.x: rope_parameters {rope_type, rope_theta, ...}.
    nlohmann::json rope = nlohmann::json::object();
    if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) rope = j["rope_scaling"];
    if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) rope = j["rope_parameters"];
    PAGODA_ASSIGN_OR_RETURN(const double nested_theta, number_field(rope, "rope_theta", 10000.0));
    PAGODA_ASSIGN_OR_RETURN(c.rope_theta, number_field(j, "rope_theta", nested_theta));
    std::string rope_type = rope.value("rope_type", rope.value("type", std::string("default")));
    if (rope_type == "llama3") {
      c.rope_scaling.kind = RopeScaling::Kind::kLlama3;
      PAGODA_ASSIGN_OR_RETURN(c.rope_scaling.factor, number_field(rope, "factor", 8.0));
      PAGODA_ASSIGN_OR_RETURN(c.rope_scaling.low_freq_factor, number_field(rope, "low_freq_factor", 1.0));
      PAGODA_ASSIGN_OR_RETURN(c.rope_scaling.high_freq_factor, number_field(rope, "high_freq_factor", 4.0));
      PAGODA_ASSIGN_OR_RETURN(c.rope_scaling.original_max_position,
                              int_in(rope, "original_max_position_embeddings", int64_t{8192}));
    } else if (rope_type == "linear") {
      c.rope_scaling.kind = RopeScaling::Kind::kLinear;
      PAGODA_ASSIGN_OR_RETURN(c.rope_scaling.factor, number_field(rope, "factor", 1.0));
    } else if (rope_type == "longrope" || rope_type == "su") {
      // Phi-3 / Phi-4-mini. transformers: factor = max_position_embeddings / original (unless
      // given), attention_factor = sqrt(1 + ln(factor) / ln(original)) when factor > 1 (unless given).
      c.rope_scaling.kind = RopeScaling::Kind::kLongRope;
      PAGODA_ASSIGN_OR_RETURN(const int64_t top_original, int_field("original_max_position_embeddings", c.max_position_embeddings));
      PAGODA_ASSIGN_OR_RETURN(c.rope_scaling.original_max_position,
                              int_in(rope, "original_max_position_embeddings", top_original));
      if (c.rope_scaling.original_max_position <= 0)
        return invalid_argument("config.json: original_max_position_embeddings must be positive (got {})",
                                c.rope_scaling.original_max_position);
      PAGODA_ASSIGN_OR_RETURN(c.rope_scaling.factor,
                              number_field(rope, "factor", static_cast<double>(c.max_position_embeddings) /
                                                               static_cast<double>(c.rope_scaling.original_max_position)));
      const double f = c.rope_scaling.factor;
      const double fallback = f > 1 && c.rope_scaling.original_max_position > 1
                                  ? std::sqrt(1 + std::log(f) / std::log(static_cast<double>(c.rope_scaling.original_max_position)))
                                  : 1.0;
      PAGODA_ASSIGN_OR_RETURN(c.rope_scaling.attention_factor, number_field(rope, "attention_factor", fallback));
      for (auto [key, out] : {std::pair{"long_factor", &c.rope_long_factors}, std::pair{"short_factor", &c.rope_short_factors}}) {
        if (!rope.contains(key) || !rope[key].is_array())
          return invalid_argument("config.json: longrope rope scaling needs a '{}' list", key);
        for (const auto& v : rope[key]) {
          if (!v.is_number()) return invalid_argument("config.json: '{}' holds a {}, expected numbers", key, v.type_name());
          out->push_back(static_cast<float>(v.get<double>()));
        }
      }
    } else if (rope_type != "default") {
      return unimplemented("config.json: rope type '{}' is not supported", rope_type);
    }
    PAGODA_ASSIGN_OR_RETURN(c.sparsity_2of4, declared_2of4_sparsity(j));
    // The family's flags last: it may refine the generic keys (Gemma 3's per-layer-type RoPE).
    PAGODA_RETURN_IF_ERROR(family->configure_hf(model_type, j, c));
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

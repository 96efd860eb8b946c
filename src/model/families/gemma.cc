// The Gemma family: Gemma 2 and Gemma 3 (text decoder). Decoder layers of GQA attention with
// RoPE and a GeGLU MLP (tanh GELU), each sub-block wrapped in a pre- and a post-RMSNorm whose
// weight is (1 + w); the embedding is scaled by sqrt(hidden). Interleaved sliding-window and
// global layers (Gemma 2: alternating; Gemma 3: five local to one global, local layers on their own
// RoPE base without scaling). Gemma 2 soft-caps the attention scores and the final logits; Gemma 3
// has per-head q/k RMSNorm instead. The attention scale is 1 / sqrt(query_pre_attn_scalar).
//
// Norm weights: Hugging Face checkpoints store w (the module computes x * (1 + w)); llama.cpp's
// converter stores 1 + w in GGUF (and llama.cpp multiplies by the stored value), so the loader adds
// 1 to the HF weights only.
// GGUF hyper-parameters llama.cpp's converter does not write follow llama.cpp's loader: the window
// pattern (attention.sliding_window_pattern, else 2 / 6), the local RoPE base (rope.freq_base_swa,
// else Gemma 2: the global one, Gemma 3: 10000) and query_pre_attn_scalar (hidden / heads for the
// 27B models, 46 / 62 layers; else head_dim).
#include <cmath>

#include <nlohmann/json.hpp>

#include "loader/gguf.h"
#include "model/families/families.h"
#include "model/weight_table_reader.h"
#include "ops/elementwise.h"

namespace pagoda {
namespace {

void set_variant(std::string_view arch, ModelConfig& c) {
  c.family = arch == "gemma2" ? ArchFamily::kGemma2 : ArchFamily::kGemma3;
  c.qk_norm = c.family == ArchFamily::kGemma3;
  c.attention_bias = false;
  c.rope_layout = RopeLayout::kHalfSplit;  // both formats: llama.cpp runs Gemma with NeoX rotation
}

// Layers i with i % period < period - 1 slide (llama.cpp's pattern; HF's default layer_types).
std::vector<bool> periodic_pattern(int64_t layers, int64_t period) {
  std::vector<bool> out(static_cast<size_t>(layers));
  for (int64_t i = 0; i < layers; ++i) out[static_cast<size_t>(i)] = period <= 0 || i % period < period - 1;
  return out;
}

Status configure_gguf(std::string_view arch, const GgufFile& g, ModelConfig& c) {
  set_variant(arch, c);
  const std::string p = std::string(arch) + ".";
  auto number = [&](const std::string& key, double fallback) -> Result<double> {
    const GgufValue* v = g.find(p + key);
    if (v == nullptr) return fallback;
    auto f = v->as_float();
    if (!f || v->type == GgufType::kBool)
      return invalid_argument("GGUF metadata '{}{}' has type {}, expected a number", p, key, gguf_type_name(v->type));
    return *f;
  };
  if (c.family == ArchFamily::kGemma2) {
    PAGODA_ASSIGN_OR_RETURN(c.attn_logit_softcap, number("attn_logit_softcapping", 0.0));
    if (!g.find(p + "attention.sliding_window")) c.sliding_window = 4096;  // llama.cpp's Gemma 2 default
  }
  PAGODA_ASSIGN_OR_RETURN(c.final_logit_softcap, number("final_logit_softcapping", 0.0));
  const bool big = (c.family == ArchFamily::kGemma2 && c.num_layers == 46) ||
                   (c.family == ArchFamily::kGemma3 && c.num_layers == 62);
  c.query_pre_attn_scalar = big ? static_cast<double>(c.hidden_size / c.num_heads) : static_cast<double>(c.head_dim);
  if (c.sliding_window > 0) {
    const GgufValue* pat = g.find(p + "attention.sliding_window_pattern");
    if (pat == nullptr) {
      c.sliding_layers = periodic_pattern(c.num_layers, c.family == ArchFamily::kGemma2 ? 2 : 6);
    } else if (const GgufArray* a = pat->as_array()) {
      if (static_cast<int64_t>(a->ints.size()) != c.num_layers)
        return invalid_argument("GGUF metadata '{}attention.sliding_window_pattern' has {} entries for {} layers", p,
                                a->ints.size(), c.num_layers);
      for (int64_t v : a->ints) c.sliding_layers.push_back(v != 0);
    } else if (auto period = pat->as_int(); period && pat->type != GgufType::kBool) {
      c.sliding_layers = periodic_pattern(c.num_layers, *period);
    } else {
      return invalid_argument("GGUF metadata '{}attention.sliding_window_pattern' must be an integer or a bool array", p);
    }
    // 0: the sliding layers share the global table (Gemma 2 without the key).
    PAGODA_ASSIGN_OR_RETURN(c.rope_local_theta,
                            number("rope.freq_base_swa", c.family == ArchFamily::kGemma2 ? 0.0 : 10000.0));
  }
  return {};
}

// A number that may be absent or null (then `fallback`).
Result<double> json_number(const nlohmann::json& j, const char* key, double fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number()) return invalid_argument("config.json: '{}' has type {}, expected a number", key, j[key].type_name());
  return j[key].get<double>();
}

// Runs after the generic keys (rope parsed from rope_theta / rope_scaling / rope_parameters);
// throws nlohmann::json::type_error on a mistyped key (the caller reports it).
Status configure_hf(std::string_view arch, const nlohmann::json& j, ModelConfig& c) {
  set_variant(arch == "gemma2" ? "gemma2" : "gemma3", c);
  PAGODA_ASSIGN_OR_RETURN(c.query_pre_attn_scalar, json_number(j, "query_pre_attn_scalar", static_cast<double>(c.head_dim)));
  PAGODA_ASSIGN_OR_RETURN(c.attn_logit_softcap,
                          json_number(j, "attn_logit_softcapping", c.family == ArchFamily::kGemma2 ? 50.0 : 0.0));
  PAGODA_ASSIGN_OR_RETURN(c.final_logit_softcap,
                          json_number(j, "final_logit_softcapping", c.family == ArchFamily::kGemma2 ? 30.0 : 0.0));
  if (!j.contains("sliding_window")) c.sliding_window = 4096;  // both configs' default
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    const auto& lt = j["layer_types"];
    if (static_cast<int64_t>(lt.size()) != c.num_layers)
      return invalid_argument("config.json: layer_types has {} entries for {} layers", lt.size(), c.num_layers);
    for (const auto& t : lt) {
      const std::string s = t.get<std::string>();
      if (s != "sliding_attention" && s != "full_attention")
        return unimplemented("config.json: layer type '{}' is not supported", s);
      c.sliding_layers.push_back(s == "sliding_attention");
    }
  } else {
    int64_t period = c.family == ArchFamily::kGemma2 ? 2 : 6;
    if (j.contains("sliding_window_pattern") && j["sliding_window_pattern"].is_number_integer())
      period = j["sliding_window_pattern"].get<int64_t>();
    c.sliding_layers = periodic_pattern(c.num_layers, period);
  }
  if (c.sliding_window <= 0) c.sliding_layers.clear();
  // RoPE: transformers 5 writes Gemma 3's per layer type ({"full_attention": {...},
  // "sliding_attention": {...}}); transformers 4 wrote rope_theta + rope_local_base_freq (+
  // rope_scaling for the global layers). Gemma 2 has one RoPE for every layer.
  const nlohmann::json* rp = j.contains("rope_parameters") && j["rope_parameters"].is_object() ? &j["rope_parameters"] : nullptr;
  if (rp != nullptr && rp->contains("full_attention")) {
    const auto& full = (*rp)["full_attention"];
    PAGODA_ASSIGN_OR_RETURN(c.rope_theta, json_number(full, "rope_theta", 1e6));
    const std::string type = full.value("rope_type", std::string("default"));
    c.rope_scaling = RopeScaling{};
    if (type == "linear") {
      c.rope_scaling.kind = RopeScaling::Kind::kLinear;
      PAGODA_ASSIGN_OR_RETURN(c.rope_scaling.factor, json_number(full, "factor", 1.0));
    } else if (type != "default") {
      return unimplemented("config.json: rope type '{}' of the full-attention layers is not supported", type);
    }
    if (rp->contains("sliding_attention")) {
      const auto& local = (*rp)["sliding_attention"];
      if (local.value("rope_type", std::string("default")) != "default")
        return unimplemented("config.json: rope type '{}' of the sliding layers is not supported",
                             local.value("rope_type", std::string()));
      PAGODA_ASSIGN_OR_RETURN(c.rope_local_theta, json_number(local, "rope_theta", 10000.0));
    }
  } else if (c.family == ArchFamily::kGemma3) {
    if (!j.contains("rope_theta") && (rp == nullptr || !rp->contains("rope_theta"))) c.rope_theta = 1e6;
    PAGODA_ASSIGN_OR_RETURN(c.rope_local_theta, json_number(j, "rope_local_base_freq", 10000.0));
  }
  if (c.sliding_layers.empty()) c.rope_local_theta = 0;
  return {};
}

std::vector<TensorDecl> tensor_table(const ModelConfig& c) {
  std::vector<TensorDecl> t;
  const int64_t D = c.hidden_size, F = c.intermediate_size;
  const int64_t Q = c.q_size(), KV = c.kv_size(), hd = c.head_dim;
  declare_embedding_and_output(t, c);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string g = fmt::format("blk.{}.", i);
    const std::string h = fmt::format("model.layers.{}.", i);
    auto add = [&](const char* gn, const char* hn, std::vector<int64_t> shape, bool linear) {
      t.push_back({g + gn, h + hn, std::move(shape), true, linear, i});
    };
    add("attn_norm.weight", "input_layernorm.weight", {D}, false);
    add("attn_q.weight", "self_attn.q_proj.weight", {Q, D}, true);
    add("attn_k.weight", "self_attn.k_proj.weight", {KV, D}, true);
    add("attn_v.weight", "self_attn.v_proj.weight", {KV, D}, true);
    add("attn_output.weight", "self_attn.o_proj.weight", {D, Q}, true);
    if (c.qk_norm) {
      add("attn_q_norm.weight", "self_attn.q_norm.weight", {hd}, false);
      add("attn_k_norm.weight", "self_attn.k_norm.weight", {hd}, false);
    }
    add("post_attention_norm.weight", "post_attention_layernorm.weight", {D}, false);
    add("ffn_norm.weight", "pre_feedforward_layernorm.weight", {D}, false);
    add("ffn_gate.weight", "mlp.gate_proj.weight", {F, D}, true);
    add("ffn_up.weight", "mlp.up_proj.weight", {F, D}, true);
    add("ffn_down.weight", "mlp.down_proj.weight", {D, F}, true);
    add("post_ffw_norm.weight", "post_feedforward_layernorm.weight", {D}, false);
  }
  return t;
}

struct GemmaLayer {
  VectorId attn_norm;        // [D] (1 + w)
  LinearId wqkv;             // [Q + KV + KV, D]
  VectorId q_norm, k_norm;   // optional [head_dim] (1 + w) (Gemma 3)
  LinearId wo;               // [D, Q]
  VectorId post_attn_norm;   // [D]
  VectorId ffn_norm;         // [D] the pre-feedforward norm
  LinearId gate_up;          // [F + F, D]
  LinearId down;             // [D, F]
  VectorId post_ffw_norm;    // [D]
  int64_t window = 0;        // 0: global layer
};

class GemmaModel final : public Model {
 public:
  GemmaModel(ModelConfig config, ModelWeights weights, RopeTable rope, RopeTable local_rope,
             std::vector<GemmaLayer> layers, VectorId output_norm, LinearId output)
      : Model(gemma_family(), std::move(config), std::move(weights), std::move(rope)),
        local_rope_(std::move(local_rope)),
        layers_(std::move(layers)),
        output_norm_(output_norm),
        output_(output) {}

  std::vector<const RopeTable*> rope_tables() const override {
    if (config().rope_local_theta > 0) return {&rope(), &local_rope_};
    return {&rope()};
  }

  void forward(LayerOps& ops) const override {
    const ModelConfig& c = config();
    const double eps = c.rms_norm_eps;
    AttentionArgs att;
    att.norm_eps = eps;
    att.scale = static_cast<float>(1.0 / std::sqrt(c.query_pre_attn_scalar));
    att.logit_softcap = static_cast<float>(c.attn_logit_softcap);
    ops.embed();
    ops.scale_residual(static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size))));
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const GemmaLayer& ly = layers_[static_cast<size_t>(l)];
      ops.begin_layer(l);
      ops.norm_qkv({ly.attn_norm, eps}, ly.wqkv);
      att.layer = l;
      att.q_norm = ly.q_norm;
      att.k_norm = ly.k_norm;
      att.sliding_window = ly.window;
      att.rope = ly.window > 0 && c.rope_local_theta > 0 ? &local_rope_ : &rope();
      ops.rope_kv_attention(att);
      ops.linear_post_norm_residual(ly.wo, {ly.post_attn_norm, eps});
      ops.gated_mlp_post_norm({ly.ffn_norm, eps}, ly.gate_up, ly.down, GateActivation::kGeluTanh, {ly.post_ffw_norm, eps});
      ops.end_layer(l);
    }
    ops.final_logits_softcap({output_norm_, eps}, output_, static_cast<float>(c.final_logit_softcap));
  }

 private:
  RopeTable local_rope_;  // the sliding layers' table (Gemma 3); unused when rope_local_theta is 0
  std::vector<GemmaLayer> layers_;
  VectorId output_norm_;
  LinearId output_;
};

Result<std::unique_ptr<Model>> load(const ModelConfig& config, WeightNaming naming, const TensorLookup& lookup,
                                    const ModelLoadParams& params) {
  PAGODA_RETURN_IF_ERROR(config.validate());
  if (config.query_pre_attn_scalar <= 0) return invalid_argument("gemma: query_pre_attn_scalar must be positive");
  const auto table = tensor_table(config);
  PAGODA_RETURN_IF_ERROR(validate_tensor_table(table, naming, lookup));
  WeightTableReader reader(table, naming, lookup, params.cpu_kernels);
  // A (1 + w) norm weight as f32: HF stores w, GGUF 1 + w (see the top of this file).
  const bool add_one = naming == WeightNaming::kHuggingFace;
  auto norm_of = [&](const std::string& gguf_name) -> Tensor {
    Tensor t = to_f32(*reader.find(gguf_name));
    if (add_one) {
      float* p = t.data_as<float>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = 1.0f + p[i];
    }
    return t;
  };
  ModelWeights w;

  w.token_embd = *reader.find("token_embd.weight");
  const VectorId output_norm = w.add_vector(norm_of("output_norm.weight"));
  PAGODA_RETURN_IF_ERROR(reader.add_output_head(w));
  const LinearId output = w.output;

  std::vector<GemmaLayer> layers;
  for (int64_t i = 0; i < config.num_layers; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    GemmaLayer ly;
    ly.attn_norm = w.add_vector(norm_of(p + "attn_norm.weight"));
    PAGODA_ASSIGN_OR_RETURN(ly.wqkv, reader.add_linear(w, {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"}, p + "attn_qkv"));
    if (config.qk_norm) {
      ly.q_norm = w.add_vector(norm_of(p + "attn_q_norm.weight"));
      ly.k_norm = w.add_vector(norm_of(p + "attn_k_norm.weight"));
    }
    PAGODA_ASSIGN_OR_RETURN(ly.wo, reader.add_linear(w, p + "attn_output.weight"));
    ly.post_attn_norm = w.add_vector(norm_of(p + "post_attention_norm.weight"));
    ly.ffn_norm = w.add_vector(norm_of(p + "ffn_norm.weight"));
    PAGODA_ASSIGN_OR_RETURN(ly.gate_up, reader.add_linear(w, {p + "ffn_gate.weight", p + "ffn_up.weight"}, p + "ffn_gate_up"));
    PAGODA_ASSIGN_OR_RETURN(ly.down, reader.add_linear(w, p + "ffn_down.weight"));
    ly.post_ffw_norm = w.add_vector(norm_of(p + "post_ffw_norm.weight"));
    ly.window = config.layer_window(i);
    layers.push_back(ly);
  }
  PAGODA_RETURN_IF_ERROR(reader.finish(w, params));
  RopeTable rope(config.rope_spec(), params.max_positions);
  RopeTable local_rope;
  if (config.rope_local_theta > 0)
    local_rope = RopeTable({config.rope_dim, config.rope_local_theta, config.rope_layout, RopeScaling{}}, params.max_positions);
  return std::unique_ptr<Model>(new GemmaModel(config, std::move(w), std::move(rope), std::move(local_rope),
                                               std::move(layers), output_norm, output));
}

}  // namespace

const Family& gemma_family() {
  static const Family f{"gemma", {"gemma2", "gemma3", "gemma3_text"}, configure_gguf, configure_hf, tensor_table, load};
  return f;
}

}  // namespace pagoda

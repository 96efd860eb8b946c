// The mixture-of-experts family: Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE. Pre-norm decoder layers
// of GQA attention with RoPE and a sparse MLP: a router picks the top-k of E SwiGLU experts per
// token (softmax, then top-k; renormalised to sum 1 for Mixtral and, with norm_topk_prob, the
// others). The variants are config flags:
//   Mixtral    (GGUF architecture "llama" with an expert count; HF "mixtral"): always renormalised,
//              interleaved RoPE rows in GGUF as for Llama, optional sliding window;
//   Qwen2-MoE  ("qwen2moe" / "qwen2_moe"): q/k/v biases, a shared expert scaled by
//              sigmoid(x . shared_expert_gate) added to every token's output;
//   Qwen3-MoE  ("qwen3moe" / "qwen3_moe"): per-head q/k RMSNorm, head_dim from the config;
//   OLMoE      ("olmoe"): RMSNorm over the whole q and k projections.
// GGUF keeps each layer's experts stacked (ffn_{gate,up,down}_exps, [E, F, D] / [E, D, F]) as
// llama.cpp's converter writes them; HF checkpoints hold one tensor per expert. Both load as one
// ExpertSet per layer (model/model_weights.h) without a stacked copy.
// GGUF routing normalisation follows llama.cpp (which has no key for it before
// expert_weights_norm): Mixtral and Qwen3-MoE renormalise, Qwen2-MoE and OLMoE do not.
#include <map>

#include <nlohmann/json.hpp>

#include "loader/gguf.h"
#include "model/families/families.h"
#include "model/weight_table_reader.h"
#include "ops/elementwise.h"

namespace pagoda {
namespace {

void set_variant(std::string_view arch, ModelConfig& c) {
  c.family = arch == "mixtral"                              ? ArchFamily::kMixtral
             : (arch == "qwen2moe" || arch == "qwen2_moe") ? ArchFamily::kQwen2Moe
             : (arch == "qwen3moe" || arch == "qwen3_moe") ? ArchFamily::kQwen3Moe
                                                           : ArchFamily::kOlmoe;
  c.attention_bias = c.family == ArchFamily::kQwen2Moe;
  c.qk_norm = c.family == ArchFamily::kQwen3Moe || c.family == ArchFamily::kOlmoe;
  c.qk_norm_full = c.family == ArchFamily::kOlmoe;
  c.norm_topk_prob = c.family == ArchFamily::kMixtral || c.family == ArchFamily::kQwen3Moe;
}

Status configure_gguf(std::string_view arch, const GgufFile& g, ModelConfig& c) {
  set_variant(arch, c);
  const std::string p = c.arch_name + ".";
  auto integer = [&](const std::string& key, std::optional<int64_t> fallback) -> Result<int64_t> {
    const GgufValue* v = g.find(p + key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return invalid_argument("GGUF is missing integer metadata '{}{}' (a mixture-of-experts model needs it)", p, key);
    }
    auto i = v->as_int();
    if (!i || v->type == GgufType::kBool || v->type == GgufType::kFloat32 || v->type == GgufType::kFloat64)
      return invalid_argument("GGUF metadata '{}{}' has type {}, expected an integer", p, key, gguf_type_name(v->type));
    return *i;
  };
  PAGODA_ASSIGN_OR_RETURN(c.num_experts, integer("expert_count", std::nullopt));
  PAGODA_ASSIGN_OR_RETURN(c.num_experts_per_tok, integer("expert_used_count", std::nullopt));
  const bool qwen = c.family == ArchFamily::kQwen2Moe || c.family == ArchFamily::kQwen3Moe;
  PAGODA_ASSIGN_OR_RETURN(c.expert_intermediate_size,
                          integer("expert_feed_forward_length", qwen ? std::nullopt : std::optional(c.intermediate_size)));
  if (c.family == ArchFamily::kQwen2Moe) {
    PAGODA_ASSIGN_OR_RETURN(c.shared_expert_intermediate_size, integer("expert_shared_feed_forward_length", std::nullopt));
  }
  if (const GgufValue* v = g.find(p + "expert_weights_norm")) {
    if (v->type != GgufType::kBool) return invalid_argument("GGUF metadata '{}expert_weights_norm' must be a bool", p);
    c.norm_topk_prob = v->as_int().value_or(0) != 0;
  }
  if (const GgufValue* v = g.find(p + "expert_gating_func"); v != nullptr && v->as_int().value_or(1) != 1)
    return unimplemented("GGUF '{}expert_gating_func' {}: only softmax routing is supported", p, v->as_int().value_or(-1));
  c.rope_layout = c.family == ArchFamily::kMixtral ? RopeLayout::kInterleaved : RopeLayout::kHalfSplit;
  return {};
}

// Throws nlohmann::json::type_error on a mistyped key (the caller reports it).
Status configure_hf(std::string_view arch, const nlohmann::json& j, ModelConfig& c) {
  set_variant(arch, c);
  c.rope_layout = RopeLayout::kHalfSplit;
  auto integer = [&](const char* key, std::optional<int64_t> fallback) -> Result<int64_t> {
    if (!j.contains(key) || j[key].is_null()) {
      if (fallback) return *fallback;
      return invalid_argument("config.json: missing integer '{}' (a mixture-of-experts model needs it)", key);
    }
    if (!j[key].is_number_integer()) return invalid_argument("config.json: '{}' has type {}, expected an integer", key, j[key].type_name());
    return j[key].get<int64_t>();
  };
  const bool qwen = c.family == ArchFamily::kQwen2Moe || c.family == ArchFamily::kQwen3Moe;
  PAGODA_ASSIGN_OR_RETURN(c.num_experts, integer(c.family == ArchFamily::kMixtral ? "num_local_experts" : "num_experts", std::nullopt));
  PAGODA_ASSIGN_OR_RETURN(c.num_experts_per_tok, integer("num_experts_per_tok", std::nullopt));
  PAGODA_ASSIGN_OR_RETURN(c.expert_intermediate_size, integer(qwen ? "moe_intermediate_size" : "intermediate_size", std::nullopt));
  if (c.family == ArchFamily::kQwen2Moe) {
    PAGODA_ASSIGN_OR_RETURN(c.shared_expert_intermediate_size, integer("shared_expert_intermediate_size", std::nullopt));
  }
  if (c.family != ArchFamily::kMixtral) c.norm_topk_prob = j.value("norm_topk_prob", false);
  if (qwen) {
    PAGODA_ASSIGN_OR_RETURN(const int64_t step, integer("decoder_sparse_step", int64_t{1}));
    const bool dense_layers = j.contains("mlp_only_layers") && j["mlp_only_layers"].is_array() && !j["mlp_only_layers"].empty();
    if (step != 1 || dense_layers)
      return unimplemented("config.json: dense MLP layers among the sparse ones (decoder_sparse_step {}, mlp_only_layers) are "
                           "not supported", step);
    c.attention_bias = c.family == ArchFamily::kQwen3Moe ? j.value("attention_bias", false) : j.value("qkv_bias", true);
  }
  if (c.family == ArchFamily::kOlmoe && j.contains("clip_qkv") && !j["clip_qkv"].is_null())
    return unimplemented("config.json: OLMoE clip_qkv is not supported");
  // The window applies to Mixtral when set; to Qwen only with use_sliding_window; OLMoE has none.
  if (c.family == ArchFamily::kOlmoe || (qwen && !j.value("use_sliding_window", false))) c.sliding_window = 0;
  return {};
}

struct ExpertNames {
  const char* gate_inp;  // the router
  const char* gate;      // expert e's gate / up / down ("{}": e)
  const char* up;
  const char* down;
};

ExpertNames hf_expert_names(const ModelConfig& c) {
  if (c.family == ArchFamily::kMixtral)
    return {"block_sparse_moe.gate.weight", "block_sparse_moe.experts.{}.w1.weight", "block_sparse_moe.experts.{}.w3.weight",
            "block_sparse_moe.experts.{}.w2.weight"};
  return {"mlp.gate.weight", "mlp.experts.{}.gate_proj.weight", "mlp.experts.{}.up_proj.weight",
          "mlp.experts.{}.down_proj.weight"};
}

std::vector<TensorDecl> tensor_table(const ModelConfig& c) {
  std::vector<TensorDecl> t;
  const int64_t D = c.hidden_size, E = c.num_experts, F = c.expert_intermediate_size, Fs = c.shared_expert_intermediate_size;
  const int64_t Q = c.q_size(), KV = c.kv_size(), hd = c.head_dim;
  const ExpertNames hn = hf_expert_names(c);
  declare_embedding_and_output(t, c);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string g = fmt::format("blk.{}.", i);
    const std::string h = fmt::format("model.layers.{}.", i);
    auto add = [&](const char* gn, const char* hname, std::vector<int64_t> shape, bool linear, int64_t experts = 0) {
      t.push_back({g + gn, h + hname, std::move(shape), true, linear, i, experts});
    };
    add("attn_norm.weight", "input_layernorm.weight", {D}, false);
    add("attn_q.weight", "self_attn.q_proj.weight", {Q, D}, true);
    add("attn_k.weight", "self_attn.k_proj.weight", {KV, D}, true);
    add("attn_v.weight", "self_attn.v_proj.weight", {KV, D}, true);
    add("attn_output.weight", "self_attn.o_proj.weight", {D, Q}, true);
    if (c.attention_bias) {
      add("attn_q.bias", "self_attn.q_proj.bias", {Q}, false);
      add("attn_k.bias", "self_attn.k_proj.bias", {KV}, false);
      add("attn_v.bias", "self_attn.v_proj.bias", {KV}, false);
    }
    if (c.qk_norm) {
      add("attn_q_norm.weight", "self_attn.q_norm.weight", {c.qk_norm_full ? Q : hd}, false);
      add("attn_k_norm.weight", "self_attn.k_norm.weight", {c.qk_norm_full ? KV : hd}, false);
    }
    add("ffn_norm.weight", "post_attention_layernorm.weight", {D}, false);
    add("ffn_gate_inp.weight", hn.gate_inp, {E, D}, true);
    add("ffn_gate_exps.weight", hn.gate, {E, F, D}, true, E);
    add("ffn_up_exps.weight", hn.up, {E, F, D}, true, E);
    add("ffn_down_exps.weight", hn.down, {E, D, F}, true, E);
    if (Fs > 0) {
      add("ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight", {1, D}, true);
      add("ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight", {Fs, D}, true);
      add("ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", {Fs, D}, true);
      add("ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", {D, Fs}, true);
    }
  }
  return t;
}

struct MoeLayer {
  VectorId attn_norm;       // [D]
  LinearId wqkv;            // [Q + KV + KV, D]
  VectorId qkv_bias;        // optional [Q + 2 KV] (Qwen2-MoE)
  VectorId q_norm, k_norm;  // optional: [head_dim] per head (Qwen3-MoE) or [Q] / [KV] whole (OLMoE)
  LinearId wo;              // [D, Q]
  VectorId ffn_norm;        // [D]
  MoeArgs moe;              // router, experts, shared expert
};

class MoeModel final : public Model {
 public:
  MoeModel(ModelConfig config, ModelWeights weights, RopeTable rope, std::vector<MoeLayer> layers, VectorId output_norm,
           LinearId output)
      : Model(moe_family(), std::move(config), std::move(weights), std::move(rope)),
        layers_(std::move(layers)),
        output_norm_(output_norm),
        output_(output) {}

  void forward(LayerOps& ops) const override {
    const ModelConfig& c = config();
    const double eps = c.rms_norm_eps;
    AttentionArgs att;
    att.norm_eps = eps;
    att.qk_norm_full = c.qk_norm_full;
    ops.embed();
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const MoeLayer& ly = layers_[static_cast<size_t>(l)];
      ops.begin_layer(l);
      ops.norm_qkv({ly.attn_norm, eps}, ly.wqkv);
      att.layer = l;
      att.qkv_bias = ly.qkv_bias;
      att.q_norm = ly.q_norm;
      att.k_norm = ly.k_norm;
      ops.rope_kv_attention(att);
      ops.linear_residual(ly.wo);
      ops.moe_mlp({ly.ffn_norm, eps}, ly.moe);
      ops.end_layer(l);
    }
    ops.final_logits({output_norm_, eps}, output_);
  }

 private:
  std::vector<MoeLayer> layers_;
  VectorId output_norm_;
  LinearId output_;
};

Result<std::unique_ptr<Model>> load(const ModelConfig& config, WeightNaming naming, const TensorLookup& checkpoint,
                                    const ModelLoadParams& params) {
  PAGODA_RETURN_IF_ERROR(config.validate());
  if (!config.is_moe()) return invalid_argument("mixture-of-experts model '{}' has no experts", config.arch_name);
  const auto table = tensor_table(config);
  // llama.cpp declares the shared-expert gate as a vector [D]; a converter may write it 1-d or as
  // the [1, D] matrix HF holds. Both are read as [1, D].
  std::map<std::string, Tensor> reshaped;
  const TensorLookup lookup = [&](const std::string& name) -> Result<const Tensor*> {
    auto r = checkpoint(name);
    if (r.ok() && (**r).ndim() == 1 && name.ends_with("ffn_gate_inp_shexp.weight")) {
      auto [it, _] = reshaped.emplace(name, (**r).reshape({1, (**r).dim(0)}));
      return &it->second;
    }
    return r;
  };
  PAGODA_RETURN_IF_ERROR(validate_tensor_table(table, naming, lookup));
  WeightTableReader reader(table, naming, lookup, params.cpu_kernels);
  ModelWeights w;
  w.token_embd = *reader.find("token_embd.weight");
  const VectorId output_norm = w.add_vector(reader.f32_concat({"output_norm.weight"}));
  PAGODA_RETURN_IF_ERROR(reader.add_output_head(w));
  const LinearId output = w.output;

  std::vector<MoeLayer> layers;
  for (int64_t i = 0; i < config.num_layers; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    MoeLayer ly;
    ly.attn_norm = w.add_vector(reader.f32_concat({p + "attn_norm.weight"}));
    PAGODA_ASSIGN_OR_RETURN(ly.wqkv, reader.add_linear(w, {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"}, p + "attn_qkv"));
    if (config.attention_bias) ly.qkv_bias = w.add_vector(reader.f32_concat({p + "attn_q.bias", p + "attn_k.bias", p + "attn_v.bias"}));
    if (config.qk_norm) {
      ly.q_norm = w.add_vector(reader.f32_concat({p + "attn_q_norm.weight"}));
      ly.k_norm = w.add_vector(reader.f32_concat({p + "attn_k_norm.weight"}));
    }
    PAGODA_ASSIGN_OR_RETURN(ly.wo, reader.add_linear(w, p + "attn_output.weight"));
    ly.ffn_norm = w.add_vector(reader.f32_concat({p + "ffn_norm.weight"}));
    PAGODA_ASSIGN_OR_RETURN(ly.moe.router, reader.add_linear(w, p + "ffn_gate_inp.weight"));
    PAGODA_ASSIGN_OR_RETURN(ly.moe.experts, reader.add_experts(w, p + "ffn_gate_exps.weight", p + "ffn_up_exps.weight",
                                                               p + "ffn_down_exps.weight", p + "ffn_exps"));
    ly.moe.top_k = config.num_experts_per_tok;
    ly.moe.normalize_top_k = config.norm_topk_prob;
    if (config.shared_expert_intermediate_size > 0) {
      PAGODA_ASSIGN_OR_RETURN(ly.moe.shared_gate_up,
                              reader.add_linear(w, {p + "ffn_gate_shexp.weight", p + "ffn_up_shexp.weight"}, p + "ffn_gate_up_shexp"));
      PAGODA_ASSIGN_OR_RETURN(ly.moe.shared_down, reader.add_linear(w, p + "ffn_down_shexp.weight"));
      PAGODA_ASSIGN_OR_RETURN(ly.moe.shared_gate, reader.add_linear(w, p + "ffn_gate_inp_shexp.weight"));
    }
    layers.push_back(ly);
  }
  PAGODA_RETURN_IF_ERROR(reader.finish(w, params));
  RopeTable rope(config.rope_spec(), params.max_positions);
  return std::unique_ptr<Model>(new MoeModel(config, std::move(w), std::move(rope), std::move(layers), output_norm, output));
}

}  // namespace

const Family& moe_family() {
  static const Family f{"moe", {"mixtral", "qwen2moe", "qwen2_moe", "qwen3moe", "qwen3_moe", "olmoe"},
                        configure_gguf, configure_hf, tensor_table, load};
  return f;
}

}  // namespace pagoda

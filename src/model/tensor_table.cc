#include "model/tensor_table.h"

#include <fmt/ranges.h>

namespace pagoda {

std::vector<TensorDecl> llama_family_tensor_table(const ModelConfig& c) {
  std::vector<TensorDecl> t;
  const int64_t D = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const int64_t Q = c.q_size(), KV = c.kv_size(), hd = c.head_dim;
  t.push_back({"token_embd.weight", "model.embed_tokens.weight", {V, D}, true, false});
  t.push_back({"output_norm.weight", "model.norm.weight", {D}, true, false});
  t.push_back({"output.weight", "lm_head.weight", {V, D}, !c.tie_word_embeddings, true});
  t.push_back({"rope_freqs.weight", "", {c.rope_dim / 2}, false, false});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string g = fmt::format("blk.{}.", i);
    const std::string h = fmt::format("model.layers.{}.", i);
    auto add = [&](const char* gn, const char* hn, std::vector<int64_t> shape, bool required, bool linear) {
      t.push_back({g + gn, h + hn, std::move(shape), required, linear, i});
    };
    add("attn_norm.weight", "input_layernorm.weight", {D}, true, false);
    add("attn_q.weight", "self_attn.q_proj.weight", {Q, D}, true, true);
    add("attn_k.weight", "self_attn.k_proj.weight", {KV, D}, true, true);
    add("attn_v.weight", "self_attn.v_proj.weight", {KV, D}, true, true);
    add("attn_output.weight", "self_attn.o_proj.weight", {D, Q}, true, true);
    if (c.attention_bias) {
      add("attn_q.bias", "self_attn.q_proj.bias", {Q}, true, false);
      add("attn_k.bias", "self_attn.k_proj.bias", {KV}, true, false);
      add("attn_v.bias", "self_attn.v_proj.bias", {KV}, true, false);
    }
    if (c.qk_norm) {
      add("attn_q_norm.weight", "self_attn.q_norm.weight", {hd}, true, false);
      add("attn_k_norm.weight", "self_attn.k_norm.weight", {hd}, true, false);
    }
    add("ffn_norm.weight", "post_attention_layernorm.weight", {D}, true, false);
    add("ffn_gate.weight", "mlp.gate_proj.weight", {F, D}, true, true);
    add("ffn_up.weight", "mlp.up_proj.weight", {F, D}, true, true);
    add("ffn_down.weight", "mlp.down_proj.weight", {D, F}, true, true);
  }
  return t;
}

int64_t declared_parameter_count(const ModelConfig& config) {
  int64_t n = 0;
  for (const auto& d : llama_family_tensor_table(config)) {
    if (!d.required) continue;
    int64_t e = 1;
    for (int64_t x : d.shape) e *= x;
    n += e;
  }
  return n;
}

Status validate_tensor_table(const std::vector<TensorDecl>& table, WeightNaming naming, const TensorLookup& lookup) {
  for (const auto& d : table) {
    const std::string& name = decl_name(d, naming);
    if (name.empty()) continue;
    auto found = lookup(name);
    if (!found.ok()) {
      if (found.status().code() != StatusCode::kNotFound) return found.status();
      if (d.required) return not_found("model is missing tensor '{}' (expected shape [{}])", name, fmt::join(d.shape, ", "));
      continue;
    }
    const Tensor* t = *found;
    if (t->shape() != d.shape)
      return invalid_argument("tensor '{}' has shape {}, expected [{}]", name, t->shape_string(), fmt::join(d.shape, ", "));
    const auto& tr = dtype_traits(t->dtype());
    const bool float_type = t->dtype() == DType::kF32 || t->dtype() == DType::kF16 || t->dtype() == DType::kBF16;
    if (d.linear && !tr.weight_supported) {
      if (!tr.unsupported_hint.empty())
        return unimplemented("tensor '{}': unsupported type {} ({})", name, tr.name, tr.unsupported_hint);
      return unimplemented("tensor '{}' has dtype {}, which is not supported for weights", name, tr.name);
    }
    if (!d.linear && !float_type && !(d.gguf_name == "token_embd.weight" && tr.weight_supported))
      return unimplemented("tensor '{}' has dtype {}; expected f32, f16 or bf16", name, tr.name);
  }
  return {};
}

}  // namespace pagoda

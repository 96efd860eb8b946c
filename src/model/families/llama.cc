// The Llama family: Llama 1/2/3.x, Mistral, Qwen2/2.5, Qwen3, SmolLM, TinyLlama, MiMo (a Qwen2
// whose checkpoint also holds MTP layers, model.mtp_layers.*, read by model/draft_head.h). Pre-norm
// decoder layers of GQA attention with RoPE and a SwiGLU MLP; the variants are config flags:
// q/k/v biases (Qwen2), per-head q/k RMSNorm (Qwen3), tied embeddings, RoPE layout and scaling
// (llama3 frequency factors as a tensor in GGUF), sliding window (Mistral).
#include <cmath>

#include <nlohmann/json.hpp>

#include "loader/gguf.h"
#include "model/families/dense_decoder.h"
#include "model/families/families.h"
#include "model/weight_table_reader.h"
#include "ops/elementwise.h"

namespace pagoda {
namespace {

// The variant's flags, the same in both formats: Qwen2 has q/k/v biases, Qwen3 per-head q/k norms.
void set_variant(std::string_view arch, ModelConfig& c) {
  c.family = arch == "llama" ? ArchFamily::kLlama : arch == "mistral" ? ArchFamily::kMistral
             : arch == "qwen2" || arch == "mimo" ? ArchFamily::kQwen2 : ArchFamily::kQwen3;
  c.attention_bias = c.family == ArchFamily::kQwen2;
  c.qk_norm = c.family == ArchFamily::kQwen3;
}

Status configure_gguf(std::string_view arch, const GgufFile&, ModelConfig& c) {
  set_variant(arch, c);
  // llama-family converters permute Q/K rows for the interleaved rotation; qwen converters do not.
  c.rope_layout = (c.family == ArchFamily::kLlama || c.family == ArchFamily::kMistral) ? RopeLayout::kInterleaved
                                                                                       : RopeLayout::kHalfSplit;
  return {};
}

// Throws nlohmann::json::type_error on a mistyped key (the caller reports it).
Status configure_hf(std::string_view arch, const nlohmann::json& j, ModelConfig& c) {
  set_variant(arch, c);
  c.rope_layout = RopeLayout::kHalfSplit;
  if (c.family == ArchFamily::kLlama || c.family == ArchFamily::kMistral) c.attention_bias = j.value("attention_bias", false);
  // The window (parsed and type-checked with the generic keys) applies to Mistral always, to the
  // others only with use_sliding_window.
  if (c.family != ArchFamily::kMistral && !j.value("use_sliding_window", false)) c.sliding_window = 0;
  return {};
}

std::vector<TensorDecl> tensor_table(const ModelConfig& c) {
  std::vector<TensorDecl> t;
  const int64_t D = c.hidden_size, F = c.intermediate_size;
  const int64_t Q = c.q_size(), KV = c.kv_size(), hd = c.head_dim;
  declare_embedding_and_output(t, c);
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

Result<std::unique_ptr<Model>> load(const ModelConfig& config, WeightNaming naming, const TensorLookup& lookup,
                                    const ModelLoadParams& params) {
  PAGODA_RETURN_IF_ERROR(config.validate());
  const auto table = tensor_table(config);
  PAGODA_RETURN_IF_ERROR(validate_tensor_table(table, naming, lookup));
  WeightTableReader reader(table, naming, lookup, params.cpu_kernels);
  ModelWeights w;

  w.token_embd = *reader.find("token_embd.weight");
  const VectorId output_norm = w.add_vector(reader.f32_concat({"output_norm.weight"}));
  PAGODA_RETURN_IF_ERROR(reader.add_output_head(w));
  const LinearId output = w.output;
  std::vector<float> rope_freqs;
  if (Tensor rf = reader.f32_concat({"rope_freqs.weight"}); rf.defined())
    rope_freqs.assign(rf.data_as<float>(), rf.data_as<float>() + rf.numel());

  std::vector<DenseDecoderLayer> layers;
  for (int64_t i = 0; i < config.num_layers; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    DenseDecoderLayer ly;
    ly.attn_norm = w.add_vector(reader.f32_concat({p + "attn_norm.weight"}));
    PAGODA_ASSIGN_OR_RETURN(ly.wqkv, reader.add_linear(w, {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"}, p + "attn_qkv"));
    if (config.attention_bias) ly.qkv_bias = w.add_vector(reader.f32_concat({p + "attn_q.bias", p + "attn_k.bias", p + "attn_v.bias"}));
    if (config.qk_norm) {
      ly.q_norm = w.add_vector(reader.f32_concat({p + "attn_q_norm.weight"}));
      ly.k_norm = w.add_vector(reader.f32_concat({p + "attn_k_norm.weight"}));
    }
    PAGODA_ASSIGN_OR_RETURN(ly.wo, reader.add_linear(w, p + "attn_output.weight"));
    ly.ffn_norm = w.add_vector(reader.f32_concat({p + "ffn_norm.weight"}));
    PAGODA_ASSIGN_OR_RETURN(ly.gate_up, reader.add_linear(w, {p + "ffn_gate.weight", p + "ffn_up.weight"}, p + "ffn_gate_up"));
    PAGODA_ASSIGN_OR_RETURN(ly.down, reader.add_linear(w, p + "ffn_down.weight"));
    layers.push_back(ly);
  }
  PAGODA_RETURN_IF_ERROR(reader.finish(w, params));
  RopeTable rope(config.rope_spec(), params.max_positions, rope_freqs);
  return std::unique_ptr<Model>(
      new DenseDecoderModel(llama_family(), config, std::move(w), std::move(rope), std::move(layers), output_norm, output));
}

}  // namespace

const Family& llama_family() {
  static const Family f{"llama", {"llama", "mistral", "qwen2", "qwen3", "mimo"}, configure_gguf, configure_hf, tensor_table, load};
  return f;
}

}  // namespace pagoda

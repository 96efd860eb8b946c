// The Phi-3 family: Phi-3 / Phi-3.5-mini, Phi-4, Phi-4-mini (HF Phi3ForCausalLM, GGUF arch phi3).
// The Llama layer (pre-norm GQA attention with RoPE, SwiGLU MLP) with the checkpoint's tensors
// already fused: qkv_proj [Q + 2 KV, D] (q, k, v rows) and gate_up_proj [2F, D] (gate rows, then
// up rows), the layouts the layer ops take, so they load as they are. The variants:
//   - partial rotary (partial_rotary_factor; Phi-4-mini rotates the first 0.75 of each head),
//   - LongRoPE (rope_scaling type "longrope" / "su"): per-frequency divisors from one of two lists
//     and cos / sin scaled by an attention factor; the long list when the engine's context
//     (max_positions) exceeds original_max_position_embeddings, else the short one. The choice
//     is made once per engine, as llama.cpp makes it (by context size), so every cached key is
//     rotated by the same table: transformers instead switches per forward pass by the longest
//     position, which agrees with this for any sequence inside the chosen regime,
//   - a sliding window on every layer where the config sets one (Phi-3-mini-4k: 2047; llama.cpp's
//     converter writes 0 for none),
//   - tied embeddings (Phi-4-mini).
// GGUF as llama.cpp's converter writes it: attn_qkv, ffn_up holding gate + up, NeoX (half-split)
// rotation, rope_factors_long / rope_factors_short [rope_dim / 2] f32 tensors,
// rope.scaling.original_context_length and rope.scaling.attn_factor (absent: transformers' rule
// from context_length / original_context_length).
#include <cmath>

#include <nlohmann/json.hpp>

#include "loader/gguf.h"
#include "model/families/dense_decoder.h"
#include "model/families/families.h"
#include "model/weight_table_reader.h"
#include "ops/elementwise.h"

namespace pagoda {
namespace {

const char kLongFactors[] = "rope_factors_long.weight";
const char kShortFactors[] = "rope_factors_short.weight";

Status configure_gguf(std::string_view, const GgufFile& g, ModelConfig& c) {
  c.family = ArchFamily::kPhi3;
  c.rope_layout = RopeLayout::kHalfSplit;
  c.attention_bias = false;
  c.qk_norm = false;
  const bool has_long = g.find_tensor(kLongFactors) != nullptr, has_short = g.find_tensor(kShortFactors) != nullptr;
  if (has_long != has_short) return invalid_argument("phi3 GGUF has one of rope_factors_long / rope_factors_short but not both");
  if (!has_long) return {};
  c.rope_scaling = RopeScaling{};
  c.rope_scaling.kind = RopeScaling::Kind::kLongRope;
  const GgufValue* orig = g.find("phi3.rope.scaling.original_context_length");
  if (orig == nullptr) return invalid_argument("phi3 GGUF with rope_factors_* has no phi3.rope.scaling.original_context_length");
  auto o = orig->as_int();
  if (!o || orig->type == GgufType::kBool || orig->type == GgufType::kFloat32 || orig->type == GgufType::kFloat64)
    return invalid_argument("GGUF metadata 'phi3.rope.scaling.original_context_length' has type {}, expected an integer",
                            gguf_type_name(orig->type));
  if (*o <= 0 || *o > kMaxContextLength)
    return invalid_argument("GGUF metadata 'phi3.rope.scaling.original_context_length' = {} out of range", *o);
  c.rope_scaling.original_max_position = *o;
  const double scale = static_cast<double>(c.max_position_embeddings) / static_cast<double>(*o);
  c.rope_scaling.factor = scale;
  c.rope_scaling.attention_factor = scale > 1 && *o > 1 ? std::sqrt(1 + std::log(scale) / std::log(static_cast<double>(*o))) : 1.0;
  if (const GgufValue* af = g.find("phi3.rope.scaling.attn_factor")) {
    auto f = af->as_float();
    if (!f || af->type == GgufType::kBool)
      return invalid_argument("GGUF metadata 'phi3.rope.scaling.attn_factor' has type {}, expected a number", gguf_type_name(af->type));
    c.rope_scaling.attention_factor = *f;
  }
  return {};
}

// After the generic keys (LongRoPE parsed there); throws nlohmann::json::type_error on a mistyped
// key (the caller reports it).
Status configure_hf(std::string_view, const nlohmann::json& j, ModelConfig& c) {
  c.family = ArchFamily::kPhi3;
  c.rope_layout = RopeLayout::kHalfSplit;
  c.attention_bias = false;
  c.qk_norm = false;
  // transformers 4: top level; 5: inside rope_parameters.
  double partial = 1.0;
  const nlohmann::json* where = nullptr;
  if (j.contains("partial_rotary_factor") && !j["partial_rotary_factor"].is_null()) where = &j;
  else if (j.contains("rope_parameters") && j["rope_parameters"].is_object() && j["rope_parameters"].contains("partial_rotary_factor"))
    where = &j["rope_parameters"];
  if (where != nullptr) {
    const auto& v = (*where)["partial_rotary_factor"];
    if (!v.is_number()) return invalid_argument("config.json: 'partial_rotary_factor' has type {}, expected a number", v.type_name());
    partial = v.get<double>();
    if (!std::isfinite(partial) || !(partial > 0) || partial > 1)
      return invalid_argument("config.json: partial_rotary_factor {} must be in (0, 1]", partial);
  }
  c.rope_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * partial);  // int(), as transformers
  return {};
}

std::vector<TensorDecl> tensor_table(const ModelConfig& c) {
  std::vector<TensorDecl> t;
  const int64_t D = c.hidden_size, F = c.intermediate_size;
  const int64_t Q = c.q_size(), KV = c.kv_size();
  declare_embedding_and_output(t, c);
  // GGUF only (config.json carries the lists); required there for a LongRoPE config.
  const bool gguf_factors = c.rope_scaling.kind == RopeScaling::Kind::kLongRope && c.rope_long_factors.empty();
  t.push_back({kLongFactors, "", {c.rope_dim / 2}, gguf_factors, false});
  t.push_back({kShortFactors, "", {c.rope_dim / 2}, gguf_factors, false});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string g = fmt::format("blk.{}.", i);
    const std::string h = fmt::format("model.layers.{}.", i);
    auto add = [&](const char* gn, const char* hn, std::vector<int64_t> shape, bool linear) {
      t.push_back({g + gn, h + hn, std::move(shape), true, linear, i});
    };
    add("attn_norm.weight", "input_layernorm.weight", {D}, false);
    add("attn_qkv.weight", "self_attn.qkv_proj.weight", {Q + 2 * KV, D}, true);
    add("attn_output.weight", "self_attn.o_proj.weight", {D, Q}, true);
    add("ffn_norm.weight", "post_attention_layernorm.weight", {D}, false);
    add("ffn_up.weight", "mlp.gate_up_proj.weight", {2 * F, D}, true);
    add("ffn_down.weight", "mlp.down_proj.weight", {D, F}, true);
  }
  return t;
}

// LongRoPE's list for an engine of `max_positions` (see the top of this file), as f32.
std::vector<float> longrope_factors(const ModelConfig& c, const WeightTableReader& reader, int64_t max_positions) {
  const bool use_long = max_positions > c.rope_scaling.original_max_position;
  if (!c.rope_long_factors.empty()) return use_long ? c.rope_long_factors : c.rope_short_factors;
  Tensor t = to_f32(*reader.find(use_long ? kLongFactors : kShortFactors));
  return {t.data_as<float>(), t.data_as<float>() + t.numel()};
}

Result<std::unique_ptr<Model>> load(const ModelConfig& config, WeightNaming naming, const TensorLookup& lookup,
                                    const ModelLoadParams& params) {
  PAGODA_RETURN_IF_ERROR(config.validate());
  const auto table = tensor_table(config);
  PAGODA_RETURN_IF_ERROR(validate_tensor_table(table, naming, lookup));
  WeightTableReader reader(table, naming, lookup, params.cpu_kernels);
  ModelWeights w;
  w.token_embd = *reader.find("token_embd.weight");
  const VectorId output_norm = w.add_vector(to_f32(*reader.find("output_norm.weight")));
  PAGODA_RETURN_IF_ERROR(reader.add_output_head(w));
  const LinearId output = w.output;
  std::vector<float> factors;
  if (config.rope_scaling.kind == RopeScaling::Kind::kLongRope) factors = longrope_factors(config, reader, params.max_positions);

  std::vector<DenseDecoderLayer> layers;
  for (int64_t i = 0; i < config.num_layers; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    DenseDecoderLayer ly;
    ly.attn_norm = w.add_vector(to_f32(*reader.find(p + "attn_norm.weight")));
    PAGODA_ASSIGN_OR_RETURN(ly.wqkv, reader.add_linear(w, p + "attn_qkv.weight"));
    PAGODA_ASSIGN_OR_RETURN(ly.wo, reader.add_linear(w, p + "attn_output.weight"));
    ly.ffn_norm = w.add_vector(to_f32(*reader.find(p + "ffn_norm.weight")));
    PAGODA_ASSIGN_OR_RETURN(ly.gate_up, reader.add_linear(w, p + "ffn_up.weight"));
    PAGODA_ASSIGN_OR_RETURN(ly.down, reader.add_linear(w, p + "ffn_down.weight"));
    layers.push_back(ly);
  }
  PAGODA_RETURN_IF_ERROR(reader.finish(w, params));
  RopeTable rope(config.rope_spec(), params.max_positions, factors);
  return std::unique_ptr<Model>(new DenseDecoderModel(phi3_family(), config, std::move(w), std::move(rope), std::move(layers), output_norm, output));
}

}  // namespace

const Family& phi3_family() {
  static const Family f{"phi3", {"phi3"}, configure_gguf, configure_hf, tensor_table, load};
  return f;
}

}  // namespace pagoda

// Hyper-parameters of a decoder-only transformer, read from GGUF metadata or a Hugging Face
// config.json. One struct describes every family we run; family differences are flags.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/dtype.h"
#include "common/rope_params.h"
#include "common/status.h"

namespace pagoda {

class GgufFile;

// Upper bounds ModelConfig::validate() accepts: far above every released checkpoint, low enough
// that sizes derived from them (RoPE tables, KV bytes per token) cannot overflow.
constexpr int64_t kMaxVocabSize = int64_t{1} << 24;
constexpr int64_t kMaxHiddenSize = int64_t{1} << 17;
constexpr int64_t kMaxIntermediateSize = int64_t{1} << 20;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxHeadDim = 4096;
constexpr int64_t kMaxContextLength = int64_t{1} << 24;
constexpr int64_t kMaxExperts = 4096;

enum class ArchFamily { kLlama, kMistral, kQwen2, kQwen3, kGemma2, kGemma3, kMixtral, kQwen2Moe, kQwen3Moe, kOlmoe,
                        kPhi3 };
const char* arch_family_name(ArchFamily a);

struct ModelConfig {
  ArchFamily family = ArchFamily::kLlama;
  std::string arch_name;  // as the file spells it: "llama", "qwen2", "LlamaForCausalLM", ...
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // usually hidden_size / num_heads; Qwen3 sets it explicitly
  int64_t max_position_embeddings = 0;  // trained context length
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  int64_t rope_dim = 0;  // rotated dimensions per head (the first rope_dim of each; < head_dim: Phi-4-mini)
  RopeScaling rope_scaling;
  RopeLayout rope_layout = RopeLayout::kHalfSplit;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections have biases (Qwen2)
  bool qk_norm = false;         // per-head RMSNorm on q and k before RoPE (Qwen3)
  int64_t sliding_window = 0;   // 0: full attention
  // Gemma 2 / 3 (0 / empty: absent):
  // Which layers use the sliding window ([num_layers]); empty: every layer does (Mistral).
  std::vector<bool> sliding_layers;
  double query_pre_attn_scalar = 0;  // attention scale 1 / sqrt(this); 0: 1 / sqrt(head_dim)
  double attn_logit_softcap = 0;     // scores = cap * tanh(scores / cap)
  double final_logit_softcap = 0;    // logits = cap * tanh(logits / cap)
  double rope_local_theta = 0;       // RoPE base of the sliding layers (no scaling); 0: rope_theta
  // Mixture of experts (model/families/moe.cc; num_experts 0: a dense MLP):
  int64_t num_experts = 0;                 // experts per layer
  int64_t num_experts_per_tok = 0;         // top-k experts each token is routed to
  int64_t expert_intermediate_size = 0;    // each expert's SwiGLU width
  bool norm_topk_prob = false;             // renormalise the k routing weights to sum 1 (Mixtral, Qwen3-MoE)
  int64_t shared_expert_intermediate_size = 0;  // > 0: a sigmoid-gated shared expert (Qwen2-MoE)
  bool qk_norm_full = false;  // RMSNorm over the whole q and k projections, not per head (OLMoE)
  // LongRoPE (rope_scaling kind kLongRope) per-frequency divisors from config.json, [rope_dim / 2]
  // each; empty for GGUF, which holds them as the rope_factors_long / _short tensors.
  std::vector<float> rope_long_factors, rope_short_factors;
  // The checkpoint declares 2:4 structured sparsity of its linear weights (compressed-tensors
  // sparsity_config, sparsity_structure "2:4", stored dense): the CUDA backend runs the linears
  // that hold the pattern on the sparse tensor cores (backend/cuda/sparse_2of4.h).
  bool sparsity_2of4 = false;

  bool is_moe() const { return num_experts > 0; }

  int64_t q_size() const { return num_heads * head_dim; }
  int64_t kv_size() const { return num_kv_heads * head_dim; }
  RopeSpec rope_spec() const { return {rope_dim, rope_theta, rope_layout, rope_scaling}; }
  // The window layer `layer` attends over (0: full attention).
  int64_t layer_window(int64_t layer) const {
    if (sliding_layers.empty()) return sliding_window;
    return sliding_layers[static_cast<size_t>(layer)] ? sliding_window : 0;
  }
  // 2 (K and V) x layers x kv_heads x head_dim x bytes per element.
  int64_t kv_bytes_per_token(DType kv_dtype) const;
  // Checks every hyper-parameter: sizes positive and below the kMax* bounds, heads divide, GQA
  // groups integral, eps / theta / scaling finite and in range. The message names the field.
  Status validate() const;
  std::string summary() const;  // one line for logs
  nlohmann::json to_json() const;
};

// From GGUF metadata ("<arch>.block_count", ...). vocab size from the token list or the
// embedding tensor. Rope layout: interleaved for llama-family GGUF (the converters permute Q/K),
// half-split for qwen2/qwen3.
Result<ModelConfig> model_config_from_gguf(const GgufFile& gguf);

// From a Hugging Face config.json object. Rope layout is half-split (HF checkpoints).
Result<ModelConfig> model_config_from_hf_json(const nlohmann::json& config);
Result<ModelConfig> model_config_from_hf_file(const std::string& config_json_path);

}  // namespace pagoda

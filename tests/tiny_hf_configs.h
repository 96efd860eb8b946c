// Tiny Hugging Face config.json objects for tests that need a real family's shapes and no
// checkpoint (random weights: model/random_weights.h): a GQA Llama (8 query / 2 KV heads of 16),
// Qwen2 on the same shape (q/k/v biases, tied embedding) and a Mixtral (4 experts, top-2).
#pragma once

#include <nlohmann/json.hpp>

namespace pagoda::test {

inline nlohmann::json tiny_llama_config() {
  return {{"model_type", "llama"},      {"hidden_size", 128},          {"intermediate_size", 384},
          {"num_hidden_layers", 2},     {"num_attention_heads", 8},    {"num_key_value_heads", 2},
          {"head_dim", 16},             {"max_position_embeddings", 256}, {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},      {"tie_word_embeddings", false}, {"vocab_size", 512}};
}

inline nlohmann::json tiny_qwen2_config() {
  nlohmann::json j = tiny_llama_config();
  j["model_type"] = "qwen2";
  j["tie_word_embeddings"] = true;
  return j;
}

inline nlohmann::json tiny_mixtral_config() {
  return {{"model_type", "mixtral"},   {"hidden_size", 64},           {"intermediate_size", 96},
          {"num_hidden_layers", 2},    {"num_attention_heads", 4},    {"num_key_value_heads", 2},
          {"head_dim", 16},            {"max_position_embeddings", 256}, {"num_local_experts", 4},
          {"num_experts_per_tok", 2},  {"rms_norm_eps", 1e-5},        {"rope_theta", 1e6},
          {"tie_word_embeddings", false}, {"vocab_size", 512}};
}

}  // namespace pagoda::test

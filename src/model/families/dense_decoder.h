// The forward pass of the dense pre-norm decoders (llama.cc, phi3.cc): per layer RMSNorm + fused
// q/k/v, RoPE + KV write + attention (optional q/k/v bias and per-head q/k norm), the output
// projection into the residual, RMSNorm + fused gate/up SwiGLU MLP; then the final norm and logits.
// A family that has this shape builds DenseDecoderLayers from its own tensor names and keeps its own
// Family (config parsing, tensor table).
#pragma once

#include <vector>

#include "model/model.h"

namespace pagoda {

struct DenseDecoderLayer {
  VectorId attn_norm;           // [D]
  LinearId wqkv;                // [Q + KV + KV, D]: q, k, v rows fused (they share their input)
  VectorId qkv_bias;            // optional [Q + KV + KV] (Qwen2)
  VectorId q_norm, k_norm;      // optional [head_dim] (Qwen3)
  LinearId wo;                  // [D, Q]
  VectorId ffn_norm;            // [D]
  LinearId gate_up;             // [F + F, D]: gate rows, then up rows
  LinearId down;                // [D, F]
};

class DenseDecoderModel final : public Model {
 public:
  DenseDecoderModel(const Family& family, ModelConfig config, ModelWeights weights, RopeTable rope,
                    std::vector<DenseDecoderLayer> layers, VectorId output_norm, LinearId output)
      : Model(family, std::move(config), std::move(weights), std::move(rope)),
        layers_(std::move(layers)),
        output_norm_(output_norm),
        output_(output) {}

  void forward(LayerOps& ops) const override {
    const ModelConfig& c = config();
    const double eps = c.rms_norm_eps;
    ops.embed();
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const DenseDecoderLayer& ly = layers_[static_cast<size_t>(l)];
      ops.begin_layer(l);
      ops.norm_qkv({ly.attn_norm, eps}, ly.wqkv);
      ops.rope_kv_attention({l, ly.qkv_bias, ly.q_norm, ly.k_norm, eps});
      ops.linear_residual(ly.wo);
      ops.gated_mlp({ly.ffn_norm, eps}, ly.gate_up, ly.down);
      ops.end_layer(l);
    }
    ops.final_logits({output_norm_, eps}, output_);
  }

 private:
  std::vector<DenseDecoderLayer> layers_;
  VectorId output_norm_;
  LinearId output_;
};

}  // namespace pagoda

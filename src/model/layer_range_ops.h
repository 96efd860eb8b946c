// Layer splits (llama.cpp's -ngl; runtime/split_executor.h): one forward pass computed by several
// executors, each running a contiguous range of the model's layers. LayerRangeOps is the LayerOps
// decorator that makes a family's unchanged forward run only one range: it passes to the backend's
// ops the calls of layers [begin, end) (those between begin_layer(l) and end_layer(l)), the calls
// before the first layer (embed, Gemma's embedding scale) only when begin == 0, and those after
// the last layer (the final norm and logits) only when end == num_layers. A call between two
// layers would belong to no range: it aborts (no family makes one).
#pragma once

#include <cstdint>
#include <string>

#include "model/layer_ops.h"

namespace pagoda {

// Layers [begin, end) of a model; end -1: through its last layer. The default is the whole model.
struct LayerRange {
  int64_t begin = 0;
  int64_t end = -1;

  int64_t end_in(int64_t num_layers) const { return end < 0 ? num_layers : end; }
  // The range embeds the tokens (its input is the token ids, not a residual stream).
  bool first() const { return begin == 0; }
  // The range computes the logits (its output is logits, not the residual stream).
  bool last(int64_t num_layers) const { return end_in(num_layers) == num_layers; }
  bool whole(int64_t num_layers) const { return first() && last(num_layers); }
  bool contains(int64_t layer, int64_t num_layers) const { return layer >= begin && layer < end_in(num_layers); }
  // "layers [4, 8) of 8" for logs and errors.
  std::string to_string(int64_t num_layers) const;
  // 0 <= begin < end <= num_layers.
  bool valid(int64_t num_layers) const { return begin >= 0 && begin < end_in(num_layers) && end_in(num_layers) <= num_layers; }
};

class LayerRangeOps final : public LayerOps {
 public:
  // `inner` must outlive this object; `range` must be valid() for num_layers.
  LayerRangeOps(LayerOps& inner, LayerRange range, int64_t num_layers);

  void begin_layer(int64_t layer) override;
  void end_layer(int64_t layer) override;
  void embed() override {
    if (active("embed")) inner_.embed();
  }
  void norm_qkv(const NormArgs& norm, LinearId w) override {
    if (active("norm_qkv")) inner_.norm_qkv(norm, w);
  }
  void rope_kv_attention(const AttentionArgs& args) override {
    if (active("rope_kv_attention")) inner_.rope_kv_attention(args);
  }
  void linear_residual(LinearId w) override {
    if (active("linear_residual")) inner_.linear_residual(w);
  }
  void gated_mlp(const NormArgs& norm, LinearId gate_up, LinearId down) override {
    if (active("gated_mlp")) inner_.gated_mlp(norm, gate_up, down);
  }
  void final_logits(const NormArgs& norm, LinearId w) override {
    if (active("final_logits")) inner_.final_logits(norm, w);
  }
  void scale_residual(float scale) override {
    if (active("scale_residual")) inner_.scale_residual(scale);
  }
  void linear_post_norm_residual(LinearId w, const NormArgs& post) override {
    if (active("linear_post_norm_residual")) inner_.linear_post_norm_residual(w, post);
  }
  void gated_mlp_post_norm(const NormArgs& norm, LinearId gate_up, LinearId down, GateActivation act,
                           const NormArgs& post) override {
    if (active("gated_mlp_post_norm")) inner_.gated_mlp_post_norm(norm, gate_up, down, act, post);
  }
  void moe_mlp(const NormArgs& norm, const MoeArgs& moe) override {
    if (active("moe_mlp")) inner_.moe_mlp(norm, moe);
  }
  void final_logits_softcap(const NormArgs& norm, LinearId w, float cap) override {
    if (active("final_logits_softcap")) inner_.final_logits_softcap(norm, w, cap);
  }

 private:
  // Whether a call at the current position belongs to the range.
  bool active(const char* op) const;

  LayerOps& inner_;
  LayerRange range_;
  int64_t num_layers_;
  int64_t current_ = -1;  // the layer begun and not ended; -1: between layers
  int64_t last_ended_ = -1;  // the last layer ended; -1: none yet (before the first layer)
};

}  // namespace pagoda

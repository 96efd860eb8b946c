#include "model/layer_linears.h"

#include <algorithm>

namespace pagoda {
namespace {

// Notes every LinearId an op names into the current layer's list (or `outside` between layers).
class RecordingOps final : public LayerOps {
 public:
  RecordingOps(const ModelWeights& w, LayerLinears& out) : w_(w), out_(out) {}

  void begin_layer(int64_t layer) override {
    PAGODA_CHECK(layer >= 0 && current_ < 0, "begin_layer({}) inside layer {}", layer, current_);
    if (out_.layers.size() <= static_cast<size_t>(layer)) out_.layers.resize(static_cast<size_t>(layer) + 1);
    current_ = layer;
  }
  void end_layer(int64_t layer) override {
    PAGODA_CHECK(layer == current_, "end_layer({}) closes layer {}", layer, current_);
    current_ = -1;
  }
  void embed() override {}
  void norm_qkv(const NormArgs&, LinearId w) override { note(w); }
  void rope_kv_attention(const AttentionArgs&) override {}
  void linear_residual(LinearId w) override { note(w); }
  void gated_mlp(const NormArgs&, LinearId gate_up, LinearId down) override {
    note(gate_up);
    note(down);
  }
  void final_logits(const NormArgs&, LinearId w) override { note(w); }
  void scale_residual(float) override {}
  void linear_post_norm_residual(LinearId w, const NormArgs&) override { note(w); }
  void gated_mlp_post_norm(const NormArgs&, LinearId gate_up, LinearId down, GateActivation, const NormArgs&) override {
    note(gate_up);
    note(down);
  }
  void moe_mlp(const NormArgs&, const MoeArgs& a) override {
    note(a.router);
    const ExpertSet& set = w_.expert_set(a.experts);
    for (LinearId id : set.gate_up) note(id);
    for (LinearId id : set.down) note(id);
    note(a.shared_gate_up);
    note(a.shared_down);
    note(a.shared_gate);
  }
  void final_logits_softcap(const NormArgs&, LinearId w, float) override { note(w); }

 private:
  void note(LinearId id) {
    if (!id.defined()) return;
    std::vector<LinearId>& list = current_ >= 0 ? out_.layers[static_cast<size_t>(current_)] : out_.outside;
    if (std::none_of(list.begin(), list.end(), [&](LinearId x) { return x.index == id.index; })) list.push_back(id);
  }

  const ModelWeights& w_;
  LayerLinears& out_;
  int64_t current_ = -1;
};

}  // namespace

LayerLinears layer_linears(const Model& model) {
  LayerLinears out;
  RecordingOps ops(model.weights(), out);
  model.forward(ops);
  return out;
}

}  // namespace pagoda

// A loaded model of any family: its hyper-parameters, its weights as flat tables (model_weights.h),
// its RoPE table, and its forward pass written against the layer ops (layer_ops.h). Executors hold
// a Model and never know the family.
// Thread-safety: immutable after load; forward() may run concurrently on different LayerOps.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/layer_ops.h"
#include "model/model_config.h"
#include "model/model_weights.h"
#include "ops/rope.h"

namespace pagoda {

struct Family;

class Model {
 public:
  virtual ~Model() = default;
  const Family& family() const { return family_; }
  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const RopeTable& rope() const { return rope_; }
  // Every RoPE table a forward pass may name in AttentionArgs::rope: rope() first, then the
  // family's per-layer tables (Gemma 3's sliding layers). Backends upload them at load.
  virtual std::vector<const RopeTable*> rope_tables() const { return {&rope_}; }

  // One forward pass of the step that `ops` carries (its batch, KV cache and activations).
  virtual void forward(LayerOps& ops) const = 0;

 protected:
  Model(const Family& family, ModelConfig config, ModelWeights weights, RopeTable rope)
      : family_(family), config_(std::move(config)), weights_(std::move(weights)), rope_(std::move(rope)) {}

 private:
  const Family& family_;
  ModelConfig config_;
  ModelWeights weights_;
  RopeTable rope_;
};

}  // namespace pagoda

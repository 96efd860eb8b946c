// Which matmul weights each layer of a model reads: found by running the family's forward pass
// against a recording LayerOps (every op a no-op that notes the LinearIds it names, experts
// included), so it holds for every family without naming its tensors. Weight offload and layer
// splits decide per layer with it.
#pragma once

#include <vector>

#include "model/model.h"

namespace pagoda {

struct LayerLinears {
  // [num_layers]: the ids named between begin_layer(l) and end_layer(l), each once, in first-use
  // order (an MoE layer's experts: every gate/up then every down weight of its set).
  std::vector<std::vector<LinearId>> layers;
  // Ids named outside any layer (the output projection), each once.
  std::vector<LinearId> outside;
};

LayerLinears layer_linears(const Model& model);

}  // namespace pagoda

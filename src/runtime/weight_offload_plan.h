// Weight offload (vLLM's --cpu-offload-gb): the matmul weights of some layers live in pinned host
// memory and are copied to the device on a copy stream for every forward pass, into two device
// slots used in turn (the copy of the next streamed layer overlaps the compute of the layers
// before it). This file is the choice of layers; backend/cuda/weight_streamer.h does the copies.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pagoda {

struct WeightOffloadPlan {
  std::vector<bool> streamed;   // [num_layers]
  int64_t streamed_bytes = 0;   // copied host -> device by every forward pass
  int64_t slot_bytes = 0;       // one device slot: the largest streamed layer's weights
  int64_t slots = 0;            // device slots: min(2, streamed layers)

  int64_t num_streamed() const;
  // Device bytes the plan saves: the streamed weights less the slots they run from (negative for
  // one or two streamed layers).
  int64_t device_saving() const { return streamed_bytes - slots * slot_bytes; }
  // "12 of 32 layers (5.23 GB) stream from host memory through 2 slots of 436.2 MiB".
  std::string summary() const;
};

// The fewest layers whose weights add up to at least `offload_bytes`, spread evenly over the
// layers (layer l streams when floor((l + 1) n / L) > floor(l n / L) for n streamed layers).
// layer_bytes [L]: the device bytes of each layer's matmul weights. offload_bytes <= 0: none; more
// than every layer holds: all of them.
WeightOffloadPlan plan_weight_offload(std::span<const int64_t> layer_bytes, int64_t offload_bytes);

// The fewest streamed layers that make resident weights plus slots fit in `device_weight_budget`
// bytes (auto offload: the memory planner's budget for weights). No layer when they fit already;
// an empty plan with streamed_bytes < 0 when even every layer streamed cannot fit
// (non_layer_bytes: embeddings, output head, norms: always resident).
WeightOffloadPlan plan_weight_offload_to_fit(std::span<const int64_t> layer_bytes, int64_t non_layer_bytes,
                                             int64_t device_weight_budget);

}  // namespace pagoda

#include "runtime/weight_offload_plan.h"

#include <algorithm>
#include <fmt/format.h>

namespace pagoda {
namespace {

// Layers l with floor((l + 1) n / L) > floor(l n / L): n layers spread over L.
WeightOffloadPlan spread(std::span<const int64_t> layer_bytes, int64_t n) {
  const int64_t L = static_cast<int64_t>(layer_bytes.size());
  WeightOffloadPlan p;
  p.streamed.assign(static_cast<size_t>(L), false);
  for (int64_t l = 0; l < L && n > 0; ++l) {
    if ((l + 1) * n / L == l * n / L) continue;
    p.streamed[static_cast<size_t>(l)] = true;
    p.streamed_bytes += layer_bytes[static_cast<size_t>(l)];
    p.slot_bytes = std::max(p.slot_bytes, layer_bytes[static_cast<size_t>(l)]);
  }
  p.slots = std::min<int64_t>(2, n);
  return p;
}

}  // namespace

int64_t WeightOffloadPlan::num_streamed() const { return std::count(streamed.begin(), streamed.end(), true); }

std::string WeightOffloadPlan::summary() const {
  return fmt::format("{} of {} layers ({:.2f} GB) stream from host memory through {} slot{} of {:.1f} MiB", num_streamed(),
                     streamed.size(), streamed_bytes / 1e9, slots, slots == 1 ? "" : "s", slot_bytes / 1048576.0);
}

WeightOffloadPlan plan_weight_offload(std::span<const int64_t> layer_bytes, int64_t offload_bytes) {
  const int64_t L = static_cast<int64_t>(layer_bytes.size());
  if (offload_bytes <= 0 || L == 0) return spread(layer_bytes, 0);
  for (int64_t n = 1; n < L; ++n) {
    WeightOffloadPlan p = spread(layer_bytes, n);
    if (p.streamed_bytes >= offload_bytes) return p;
  }
  return spread(layer_bytes, L);
}

WeightOffloadPlan plan_weight_offload_to_fit(std::span<const int64_t> layer_bytes, int64_t non_layer_bytes,
                                             int64_t device_weight_budget) {
  int64_t total = non_layer_bytes;
  for (int64_t b : layer_bytes) total += b;
  const int64_t L = static_cast<int64_t>(layer_bytes.size());
  for (int64_t n = 0; n <= L; ++n) {
    WeightOffloadPlan p = spread(layer_bytes, n);
    if (total - p.device_saving() <= device_weight_budget) return p;
  }
  WeightOffloadPlan none = spread(layer_bytes, 0);
  none.streamed_bytes = -1;
  return none;
}

}  // namespace pagoda

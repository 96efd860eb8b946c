#include "model/layer_range_ops.h"

#include <fmt/format.h>

namespace pagoda {

std::string LayerRange::to_string(int64_t num_layers) const {
  return fmt::format("layers [{}, {}) of {}", begin, end_in(num_layers), num_layers);
}

LayerRangeOps::LayerRangeOps(LayerOps& inner, LayerRange range, int64_t num_layers)
    : inner_(inner), range_(range), num_layers_(num_layers) {
  PAGODA_CHECK(range.valid(num_layers), "invalid layer range [{}, {}) of {} layers", range.begin, range.end, num_layers);
}

void LayerRangeOps::begin_layer(int64_t layer) {
  PAGODA_CHECK(current_ < 0 && layer == last_ended_ + 1, "begin_layer({}) after layer {} (current {})", layer,
               last_ended_, current_);
  current_ = layer;
  if (range_.contains(layer, num_layers_)) inner_.begin_layer(layer);
}

void LayerRangeOps::end_layer(int64_t layer) {
  PAGODA_CHECK(layer == current_, "end_layer({}) closes layer {}", layer, current_);
  if (range_.contains(layer, num_layers_)) inner_.end_layer(layer);
  current_ = -1;
  last_ended_ = layer;
}

bool LayerRangeOps::active(const char* op) const {
  if (current_ >= 0) return range_.contains(current_, num_layers_);
  if (last_ended_ < 0) return range_.first();
  PAGODA_CHECK(last_ended_ == num_layers_ - 1, "layer op {} between layers {} and {} belongs to no part of a layer split",
               op, last_ended_, last_ended_ + 1);
  return range_.last(num_layers_);
}

}  // namespace pagoda

// The bytes of the paged KV cache on the CPU: one K and one V tensor per layer, in the layout of
// ops/kv_layout.h. Which block belongs to which sequence is the KV cache manager's business
// (kv/); this class only owns memory. Not thread-safe; the runner owns it.
#pragma once

#include <vector>

#include "common/tensor.h"
#include "model/model_config.h"
#include "common/kv_layout.h"
#include "model/layer_range_ops.h"

namespace pagoda {

class KvCacheStorage {
 public:
  // The K and V of the layers in `layers` only (a part of a layer split, model/layer_range_ops.h);
  // layer(i) is valid for i in that range.
  KvCacheStorage(const ModelConfig& config, int64_t num_blocks, int64_t block_size, DType dtype, LayerRange layers = {});

  KvLayerView layer(int64_t i) const;
  int64_t first_layer() const { return first_layer_; }
  int64_t num_layers() const { return static_cast<int64_t>(k_.size()); }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  DType dtype() const { return dtype_; }
  int64_t bytes() const;  // total bytes of its layers' K and V
  // Bytes one block occupies across all the model's layers (K + V).
  static int64_t block_bytes(const ModelConfig& config, int64_t block_size, DType dtype);

 private:
  int64_t num_blocks_, block_size_, num_kv_heads_, head_dim_, first_layer_;
  DType dtype_;
  std::vector<Tensor> k_, v_;
};

}  // namespace pagoda

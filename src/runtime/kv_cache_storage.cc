#include "runtime/kv_cache_storage.h"

namespace pagoda {

KvCacheStorage::KvCacheStorage(const ModelConfig& config, int64_t num_blocks, int64_t block_size, DType dtype,
                               LayerRange layers)
    : num_blocks_(num_blocks), block_size_(block_size), num_kv_heads_(config.num_kv_heads), head_dim_(config.head_dim),
      first_layer_(layers.begin), dtype_(dtype) {
  PAGODA_CHECK(dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16, "kv cache dtype {} unsupported", dtype_name(dtype));
  PAGODA_CHECK(num_blocks > 0 && block_size > 0, "kv cache {} blocks of {}", num_blocks, block_size);
  PAGODA_CHECK(layers.valid(config.num_layers), "kv cache of layers [{}, {}) of {}", layers.begin, layers.end, config.num_layers);
  for (int64_t l = layers.begin; l < layers.end_in(config.num_layers); ++l) {
    // Zeroed: a slot is always written before it is read, but zeros keep stray reads finite.
    k_.push_back(Tensor::zeros(dtype, {num_blocks, num_kv_heads_, head_dim_, block_size}));
    v_.push_back(Tensor::zeros(dtype, {num_blocks, num_kv_heads_, block_size, head_dim_}));
  }
}

KvLayerView KvCacheStorage::layer(int64_t i) const {
  KvLayerView v;
  PAGODA_CHECK(i >= first_layer_ && i < first_layer_ + num_layers(), "kv cache layer {} outside this cache's [{}, {})", i,
               first_layer_, first_layer_ + num_layers());
  v.k = k_[static_cast<size_t>(i - first_layer_)].data();
  v.v = v_[static_cast<size_t>(i - first_layer_)].data();
  v.dtype = dtype_;
  v.num_blocks = num_blocks_;
  v.block_size = block_size_;
  v.num_kv_heads = num_kv_heads_;
  v.head_dim = head_dim_;
  return v;
}

int64_t KvCacheStorage::bytes() const {
  int64_t b = 0;
  for (size_t i = 0; i < k_.size(); ++i) b += k_[i].nbytes() + v_[i].nbytes();
  return b;
}

int64_t KvCacheStorage::block_bytes(const ModelConfig& config, int64_t block_size, DType dtype) {
  return config.kv_bytes_per_token(dtype) * block_size;
}

}  // namespace pagoda

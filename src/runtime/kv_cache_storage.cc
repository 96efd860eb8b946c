#include "runtime/kv_cache_storage.h"

namespace pagoda {

KvCacheStorage::KvCacheStorage(const ModelConfig& config, int64_t num_blocks, int64_t block_size, DType dtype)
    : num_blocks_(num_blocks), block_size_(block_size), num_kv_heads_(config.num_kv_heads), head_dim_(config.head_dim), dtype_(dtype) {
  PAGODA_CHECK(dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16, "kv cache dtype {} unsupported", dtype_name(dtype));
  PAGODA_CHECK(num_blocks > 0 && block_size > 0, "kv cache {} blocks of {}", num_blocks, block_size);
  for (int64_t l = 0; l < config.num_layers; ++l) {
    // Zeroed: a slot is always written before it is read, but zeros keep stray reads finite.
    k_.push_back(Tensor::zeros(dtype, {num_blocks, num_kv_heads_, head_dim_, block_size}));
    v_.push_back(Tensor::zeros(dtype, {num_blocks, num_kv_heads_, block_size, head_dim_}));
  }
}

KvLayerView KvCacheStorage::layer(int64_t i) const {
  KvLayerView v;
  v.k = k_.at(i).data();
  v.v = v_.at(i).data();
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

#include <cstring>

#include "runtime/cpu_layer_ops.h"
#include "runtime/kv_cache_storage.h"
#include "runtime/model_executor.h"

namespace pagoda {
namespace {

class CpuExecutor final : public ModelExecutor {
 public:
  CpuExecutor(const Model& model, const KvCacheSpec& spec, ThreadPool& pool)
      : model_(model), pool_(pool), kv_(model.config(), spec.num_blocks, spec.block_size, spec.dtype) {
    if (spec.num_host_blocks > 0)
      host_ = std::make_unique<KvCacheStorage>(model.config(), spec.num_host_blocks, spec.block_size, spec.dtype);
  }

  std::string device_name() const override { return "cpu"; }

  const Tensor& forward(const ForwardBatch& batch) override {
    cpu_forward(model_, batch, kv_, ws_, logits_, pool_);
    return logits_;
  }

  void swap_out(const std::vector<BlockCopy>& copies) override {
    PAGODA_CHECK(host_ != nullptr, "swap-out without host swap space");
    copy_blocks(copies, kv_, *host_);
  }
  void swap_in(const std::vector<BlockCopy>& copies) override {
    PAGODA_CHECK(host_ != nullptr, "swap-in without host swap space");
    copy_blocks(copies, *host_, kv_);
  }

  int64_t workspace_bytes() const override {
    return (logits_.defined() ? logits_.nbytes() : 0) + ws_.bytes();
  }
  int64_t kv_cache_bytes() const override { return kv_.bytes(); }

 private:
  void copy_blocks(const std::vector<BlockCopy>& copies, KvCacheStorage& from, KvCacheStorage& to) {
    for (int64_t l = 0; l < model_.config().num_layers; ++l) {
      const KvLayerView src = from.layer(l), dst = to.layer(l);
      const int64_t bytes = src.block_elems() * src.elem_bytes();
      for (const auto& [s, d] : copies) {
        std::memcpy(static_cast<uint8_t*>(dst.k) + d * bytes, static_cast<const uint8_t*>(src.k) + s * bytes, bytes);
        std::memcpy(static_cast<uint8_t*>(dst.v) + d * bytes, static_cast<const uint8_t*>(src.v) + s * bytes, bytes);
      }
    }
  }

  const Model& model_;
  ThreadPool& pool_;
  KvCacheStorage kv_;
  std::unique_ptr<KvCacheStorage> host_;
  ForwardWorkspace ws_;
  Tensor logits_;
};

}  // namespace

void ModelExecutor::forward_sample(const ForwardBatch&, std::span<const SampleSpec>, std::vector<SampleResult>&) {
  PAGODA_CHECK(false, "forward_sample() on an executor that does not sample on its device ({})", device_name());
}

std::unique_ptr<ModelExecutor> make_cpu_executor(const Model& model, const KvCacheSpec& spec, ThreadPool& pool) {
  return std::make_unique<CpuExecutor>(model, spec, pool);
}

}  // namespace pagoda

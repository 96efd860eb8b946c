// ModelExecutor: the device side of a model. It owns the weights' device copies (or views), the
// paged KV cache and the activation workspace, and runs one forward pass per call. The runner,
// scheduler and engine above it are device-independent; adding a backend is adding an executor.
//
// Contract: forward() writes the K/V of every batch token into the cache slots the batch names
// and returns logits for batch.logits_rows as [rows, vocab] f32 in host memory (valid until the
// next call). Block ids index the executor's cache; swap copies move whole blocks between it and
// host swap space. Not thread-safe: the engine-core thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/tensor.h"
#include "common/thread_pool.h"
#include "kv/kv_cache_manager.h"
#include "model/llama_model.h"
#include "runtime/forward_batch.h"

namespace pagoda {

struct KvCacheSpec {
  int64_t num_blocks = 0;       // including the null block
  int64_t block_size = 16;
  DType dtype = DType::kF16;
  int64_t num_host_blocks = 0;  // swap space (0: none)
};

class ModelExecutor {
 public:
  virtual ~ModelExecutor() = default;
  virtual std::string device_name() const = 0;
  virtual const Tensor& forward(const ForwardBatch& batch) = 0;
  virtual void swap_out(const std::vector<BlockCopy>& device_to_host) = 0;
  virtual void swap_in(const std::vector<BlockCopy>& host_to_device) = 0;
  // Bytes of activation workspace and logits currently allocated (memory-plan checks).
  virtual int64_t workspace_bytes() const = 0;
  // Bytes of the KV cache (device) as allocated.
  virtual int64_t kv_cache_bytes() const = 0;
};

// The CPU executor: the model's forward pass on `pool`, KV cache in host memory.
std::unique_ptr<ModelExecutor> make_cpu_executor(const LlamaModel& model, const KvCacheSpec& spec, ThreadPool& pool);

}  // namespace pagoda

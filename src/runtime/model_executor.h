// ModelExecutor: the device side of a model. It owns the weights' device copies (or views), the
// paged KV cache and the activation workspace, and runs one forward pass per call. The runner,
// scheduler and engine above it are device-independent; adding a backend is adding an executor.
//
// Contract: forward() writes the K/V of every batch token into the cache slots the batch names
// and returns logits for batch.logits_rows as [rows, vocab] f32 in host memory (valid until the
// next call). Block ids index the executor's cache; swap copies move whole blocks between it and
// host swap space. Not thread-safe: the engine-core thread owns it.
//
// Device-side sampling (optional): an executor whose samples_on_device() is true also implements
// forward_sample(): the forward pass, then one sample per SampleSpec on the device, so only the
// sampled ids (and requested logprobs) cross to the host. The runner calls it instead of
// forward() + the CPU sampler; the semantics are the CPU sampler's (runtime/sampler.h), with the
// draw u = token_rng(seed, output index).uniform() computed by the runner.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/tensor.h"
#include "common/thread_pool.h"
#include "core/block_ids.h"
#include "model/layer_range_ops.h"
#include "model/model.h"
#include "runtime/forward_batch.h"
#include "runtime/sampler.h"
#include "runtime/tensor_parallel_comm.h"

namespace pagoda {

struct DraftHead;        // model/draft_head.h
class DraftHeadRunner;   // runtime/draft_head_forward.h

struct KvCacheSpec {
  int64_t num_blocks = 0;       // including the null block
  int64_t block_size = 16;
  DType dtype = DType::kF16;
  int64_t num_host_blocks = 0;  // swap space (0: none)
};

// One row to sample on the device.
struct SampleSpec {
  int64_t logits_row = 0;                   // index into the batch's logits_rows
  const SamplingParams* params = nullptr;
  double uniform = 0;                       // the draw in [0, 1)
  TokenHistory history;                     // prompt and output tokens (penalties)
  std::span<const int32_t> blocked_ids;     // masked to -inf (min_tokens not reached); empty: none
  // Structured output: packed allowed-token mask (core/token_constraint.h), ceil(vocab / 32)
  // words; tokens whose bit is clear are masked to -inf before sampling. Empty: none.
  std::span<const uint32_t> allowed_mask;
};

// Prompt logprobs: one row of the last forward pass, scored against the token that follows it.
struct RowLogprobSpec {
  int64_t logits_row = 0;  // index into the last forward pass's logits_rows
  int32_t token = 0;       // the next prompt token, in [0, vocab)
  int32_t top_n = 0;       // also the n best tokens (0..20)
};

// Device memory as the executor sees it (NVML when present, else cudaMemGetInfo); 0 on the CPU.
struct DeviceMemoryStats {
  int64_t used = 0;   // bytes in use on the device (all processes)
  int64_t total = 0;
};

// Weight offload as the executor runs it (runtime/weight_offload_plan.h); zeros: none.
struct WeightStreamingStats {
  int64_t bytes_per_pass = 0;  // copied host -> device by every forward pass
  double bandwidth = 0;        // host -> device bytes/s, measured at start-up
  int64_t layers = 0;          // streamed layers
};

class ModelExecutor {
 public:
  virtual ~ModelExecutor() = default;
  virtual std::string device_name() const = 0;
  virtual const Tensor& forward(const ForwardBatch& batch) = 0;
  // forward() for a caller that does not read the logits (a tensor-parallel worker: it runs its
  // part of the step's collectives, rank 0 samples): a device executor leaves them on the device.
  // Complete on return, as forward().
  virtual void forward_discard(const ForwardBatch& batch) { forward(batch); }
  // Copies whole blocks between the KV cache and the host blocks (swap preemption, the host tier
  // of the KV cache). A device executor may run them asynchronously, ordered before the next
  // forward pass and before later host-block reads and writes.
  virtual void swap_out(const std::vector<BlockCopy>& device_to_host) = 0;
  virtual void swap_in(const std::vector<BlockCopy>& host_to_device) = 0;
  // One host block's bytes (all layers' K then V of its slots, layer by layer; host_block_bytes()
  // of them), read or written synchronously: the disk tier of the KV cache moves them. A read
  // sees every earlier swap_out(); a write is seen by every later swap_in(). Only executors with
  // host blocks (KvCacheSpec::num_host_blocks > 0) implement them.
  virtual int64_t host_block_bytes() const { return 0; }
  virtual void read_host_block(BlockId block, std::span<uint8_t> dst);
  virtual void write_host_block(BlockId block, std::span<const uint8_t> src);
  // Bytes of activation workspace and logits currently allocated (memory-plan checks).
  virtual int64_t workspace_bytes() const = 0;
  // Bytes of the KV cache (device) as allocated.
  virtual int64_t kv_cache_bytes() const = 0;

  virtual bool samples_on_device() const { return false; }
  // results[i] for specs[i]. Only called when samples_on_device(). before_sampling (may be
  // empty) is called once, on the calling thread, after the forward pass is launched and before
  // the specs' spans are read: the caller fills their contents there (the runner: the
  // structured-output masks), overlapping the device's work; the spans themselves (pointers and
  // sizes) are fixed when the call starts.
  virtual void forward_sample(const ForwardBatch& batch, std::span<const SampleSpec> specs,
                              std::vector<SampleResult>& results, const std::function<void()>& before_sampling);
  // The raw log-softmax (no masks, bias or penalties) of rows of the last forward() or
  // forward_sample() call: out[i] for rows[i]. Rows that a forward_sample() sampled from are not
  // asked for (their logits may carry the sampler's masks). Valid until the next forward call.
  // The CPU executor reads its host logits; a device executor reduces on the device, so only
  // these figures cross to the host.
  virtual void row_logprobs(std::span<const RowLogprobSpec> rows, std::vector<RowLogprobs>& out);
  virtual DeviceMemoryStats device_memory() const { return {}; }
  // One line for start-up logs: device, compute path, graphs.
  virtual std::string describe() const { return device_name(); }
  virtual WeightStreamingStats weight_streaming() const { return {}; }
  // Bytes of the matmul weights one forward step reads, in the layout the executor keeps them in
  // (device formats on a GPU); -1: the host tensors' bytes (the CPU reads the file's blocks).
  virtual int64_t linear_weight_bytes() const { return -1; }
  // Of those, the bytes of MoE experts' matrices (a step reads only its selected experts'), in
  // the same layout; -1: the host tensors' bytes.
  virtual int64_t expert_weight_bytes() const { return -1; }
  // Executors that replay steps from captured graphs can turn that off at run time (benchmarks
  // compare both); returns false when there is nothing to switch.
  virtual bool set_graphs_enabled(bool on) { return false; }
  // Hidden-state capture (EAGLE-3 heads): after set_hidden_capture({a_0, a_1, ...}) every forward()
  // and forward_sample() also keeps, for every batch token, the residual stream after target layer
  // a_i (its output), as host f32 rows [T, n * hidden_size] (layer a_0's columns first), returned
  // by captured_hidden() until the next forward call. An empty list turns it off. Returns false
  // where the executor cannot capture (then nothing changes).
  virtual bool set_hidden_capture(const std::vector<int64_t>& after_layers) { return after_layers.empty(); }
  virtual const Tensor* captured_hidden() const { return nullptr; }
  // The target's output projection alone (no final norm, no softcap) over host rows: logits
  // [m, vocab] f32 = x [m, hidden] f32 times the output head, both in host memory, complete on
  // return. For draft heads that share the target's output head (MTP) where the executor holds it
  // (a device executor). Between steps only; the last step's logits and captured rows stay valid.
  // Returns false where the executor does not offer it (the CPU executor: the head reads the
  // host weight itself).
  virtual bool output_logits(const float* x, int64_t m, float* logits) { return false; }
  // A runner of `head`'s passes on this executor's device: the head's matrices uploaded, its
  // one-layer KV cache of num_blocks x block_size slots in device memory, the target's embedding
  // (and for MTP its output head) read where the executor keeps them. `head` outlives the runner,
  // and the runner this executor. Null where the executor has none or cannot take the head (`why`
  // says which); the caller then runs the head on the host.
  virtual std::unique_ptr<DraftHeadRunner> make_draft_head_runner(const DraftHead& head, int64_t num_blocks,
                                                                  int64_t block_size, std::string& why);
  // Per-op device time gathered so far, as a table (CUDA with TuningConfig::cuda_profile); empty
  // when the executor does not profile.
  virtual std::string profile_report() const { return {}; }

  // Layer splits (runtime/split_executor.h): an executor made for a LayerRange of the model
  // (model/layer_range_ops.h) runs only those layers, its KV cache holding only them. One forward
  // pass of its range: `residual_in` is the residual stream [T, D] f32 in host memory entering
  // its first layer (given exactly when the range starts past layer 0; nullptr: the tokens are
  // embedded); returns the logits as forward() does when the range ends with the model's last
  // layer, else the residual stream after its last layer, [T, D] f32 in host memory (valid until
  // the next call). An executor of the whole model answers forward(batch) (residual_in nullptr).
  virtual const Tensor& forward_part(const ForwardBatch& batch, const Tensor* residual_in);
  // The layers this executor runs (the whole model unless it was made for a split).
  virtual LayerRange layer_range() const { return {}; }
};

// The CPU executor: the model's forward pass (or that of `layers` only) on `pool`, KV cache in
// host memory. `tp` (tensor parallelism; copied, its comm outliving the executor): `model` is one
// rank's and the forward meets the other ranks in tp->comm (runtime/cpu_layer_ops.h cpu_forward).
std::unique_ptr<ModelExecutor> make_cpu_executor(const Model& model, const KvCacheSpec& spec, ThreadPool& pool,
                                                 LayerRange layers = {}, const TensorParallelRank* tp = nullptr);

}  // namespace pagoda

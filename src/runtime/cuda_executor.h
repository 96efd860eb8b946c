// The CUDA executor (backend/cuda/cuda_executor.cc and its siblings): the model's forward pass, KV cache and
// sampling on one NVIDIA GPU. Built with PAGODA_CUDA; without it (backend/cuda/stub/cuda_unavailable.cc)
// every entry point reports that this build has no CUDA, so callers link everywhere and GPU tests
// skip with a clear message.
//
// Compute paths (chosen at load, printed by describe()):
//   bf16  weights bf16 on the device (f16 / f32 weights converted on the host, through pinned
//         staging), except GGUF quantized weights of the formats with kernels (Q4_0, Q4_1, Q5_0,
//         Q5_1, Q8_0, Q4_K, Q5_K, Q6_K: backend/cuda/device_weight.h), which keep their blocks and
//         run an int8 GEMV for few rows (dequantized into a scratch for more); other quantized
//         types are dequantized to bf16 at load (all of them with tuning.quant_weights
//         "dequantize"). bf16 activations into cuBLASLt matmuls with f32 accumulation, f32
//         residual stream, f32 q/k/v after the projection (RoPE in f32), attention on tensor
//         cores (prefill) / split-KV (decode).
//   f32   everything f32 (pure FP32 GEMMs, no TF32): the exact path the f32 reference sets and
//         the CPU/CUDA agreement tests use; also what tiny models and stories260K run.
// Batch invariance: in the default mode a request's greedy tokens can depend on the batch (the
// GEMM algorithm cuBLASLt picks depends on M; one-row steps use our GEMV; prefill rows use the
// tensor-core attention, decode rows the split-KV kernel). batch_invariant = true makes every
// linear layer a fixed-order SIMT GEMM and every attention row the split-KV kernel (splits depend
// on the row's context length only), so each row's arithmetic is the same in any batch: the
// engine's batch-equivalence tests run that way on the GPU. It is slow (tests only).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tuning_config.h"
#include "model/model_config.h"
#include "runtime/device_comm.h"
#include "runtime/model_executor.h"

namespace pagoda {

// Tensor parallelism (docs/decisions.md D78): the executor runs one rank's model
// (model/tensor_parallel_source.h: its heads, its MLP slice, its vocabulary rows) and meets the
// other ranks in `comm` where the sharded forward needs them: after the embedding lookup of its
// vocabulary rows (zeros elsewhere), after the row-parallel o and down projections (rank 0 adds
// its product into the residual stream, the others store theirs; the all-reduce of the residual
// completes it on every rank), and at the output head (every rank's logits gathered into
// [rows, vocab_size] on every rank, so sampling is the one-GPU code on each). comm null: the
// whole model, no collectives; a communicator of one rank runs the same path as several (its
// collectives copy).
struct CudaTensorParallel {
  DeviceComm* comm = nullptr;        // owned by the caller; outlives the executor
  int64_t vocab_begin = 0;           // this rank's vocabulary rows start here
  int64_t vocab_rows_per_rank = 0;   // TensorParallelPlan::vocab_rows_per_rank (padded)
  int64_t vocab_size = 0;            // the whole model's
  bool active() const { return comm != nullptr; }
};

struct CudaExecutorOptions {
  int device = 0;
  std::string dtype = "auto";        // auto (f32 when the linear weights are f32, else bf16) | f32 | bf16
  int64_t max_num_tokens = 2048;     // tokens per forward pass the workspace is sized for (grows on demand)
  int64_t max_num_seqs = 256;        // sequences per step; decode graphs are captured up to this batch
  int64_t max_model_len = 4096;      // block-table width = ceil(max_model_len / block_size)
  bool cuda_graphs = true;           // capture decode steps per batch-size bucket at start-up
  bool batch_invariant = false;
  int prefill_tile_q = 128;          // queries per block of the tensor-core prefill kernel: 64 or 128
  // Weight offload (runtime/weight_offload_plan.h): at least this many bytes of matmul weights, whole
  // layers spread over the model, stay in pinned host memory and stream to the device every forward
  // pass; 0: every weight resident.
  int64_t cpu_offload_bytes = 0;
  // A layer split's first part (runtime/split_executor.h): only layers [0, layers.end) run here, their
  // weights and the embedding uploaded, their K/V cached; forward_part() returns the residual stream
  // after them in host memory (no output head, no device sampling, no weight offload, no host KV
  // blocks, no hidden-state capture). The default: the whole model.
  LayerRange layers;
  TuningConfig tuning;               // kernel choices, profiler and block trace (validated at start)
  CudaTensorParallel tensor_parallel;
};

// The memory planner's terms for a CUDA executor with these options (bytes on the device).
struct CudaMemoryTerms {
  DType compute_dtype = DType::kF32;  // the activations' and uploaded weights' dtype (options.dtype resolved)
  int64_t weights = 0;     // resident weights plus the offload slots
  int64_t offloaded = 0;   // weight bytes that stay in pinned host memory (cpu_offload_bytes' plan)
  std::string offload_summary;  // WeightOffloadPlan::summary(); empty: no offload
  int64_t workspace = 0;   // activations for max_num_tokens + attention split buffers
  int64_t logits = 0;      // logits + sampling scratch for max_num_seqs rows
  int64_t overhead = 0;    // cuBLASLt workspace, graphs, allocator slack
};

// True when this build has CUDA and a device is visible; otherwise `why` says which is missing.
bool cuda_available(std::string* why = nullptr);
int cuda_device_count();

// cudaMemGetInfo of `device`.
struct CudaMemoryInfo {
  int64_t free = 0, total = 0;
};
Result<CudaMemoryInfo> cuda_memory_info(int device);

Result<CudaMemoryTerms> cuda_memory_terms(const Model& model, const CudaExecutorOptions& options);

// The device bytes of each layer's matmul weights in the executor's formats ([num_layers]), and of
// the weights outside the layers (embedding, output head, norms, RoPE tables): the inputs of an
// offload plan (plan_weight_offload_to_fit).
struct CudaLayerWeightBytes {
  std::vector<int64_t> layers;
  int64_t outside = 0;
};
Result<CudaLayerWeightBytes> cuda_layer_weight_bytes(const Model& model, const CudaExecutorOptions& options);

Result<std::unique_ptr<ModelExecutor>> make_cuda_executor(const Model& model, const KvCacheSpec& spec,
                                                          const CudaExecutorOptions& options);

// Whether the CUDA executor runs a model of this configuration (family and variant), in any build:
// an unimplemented status that says why and names the CPU otherwise (runtime/cuda_model_support.cc).
Status cuda_supports_model(const ModelConfig& config);

// Machine ceilings for `pagoda bench` on the GPU: device-to-device copy bandwidth (bytes/s,
// counting bytes read + bytes written) and the cuBLASLt bf16 and FP8 (e4m3 with outer-vector
// scales, bf16 out) GEMM rates at n^3 (FLOP/s).
struct CudaCeilings {
  double copy_bandwidth = 0;   // read + write
  double bf16_gemm_flops = 0;
  double fp8_gemm_flops = 0;
  bool fp8_outer_vec = false;  // the FP8 rate is of the outer-vector-scaled GEMM (else the unscaled one)
  std::string device_name;
};
// fp8_gemm: also the FP8 rate (left 0 otherwise).
Result<CudaCeilings> cuda_measure_ceilings(int device, int64_t copy_bytes = int64_t{4} << 30, int64_t gemm_n = 8192,
                                           bool fp8_gemm = false);

}  // namespace pagoda

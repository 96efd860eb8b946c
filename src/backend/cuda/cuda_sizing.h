// What the CUDA executor allocates, computed from the model and the options alone: the model
// dimensions it uses, the decode-graph batch buckets, the capacities the workspace is sized from
// and the byte counts of weights, activation workspace and logits. Shared by the executor (which
// allocates exactly these) and the memory planner (cuda_memory_terms, runtime/cuda_executor.h),
// so a plan and the allocation cannot drift apart (CudaEngine.PlannedMemoryMatchesAllocated).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/layer_linears.h"
#include "model/model.h"
#include "runtime/cuda_executor.h"
#include "runtime/weight_offload_plan.h"

namespace pagoda::cuda {

inline int64_t elem_bytes(DType t) { return row_bytes(t, 1); }  // plain types: f32, f16, bf16, f8_e4m3
inline int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

// --dtype auto | f32 | bf16 -> the compute dtype (auto: f32 when every matmul weight is f32, else bf16).
Result<DType> resolve_compute_dtype(const Model& m, const std::string& opt);

// Model dimensions the executor uses. F sizes the dense gated-MLP buffers: the intermediate size,
// or for a mixture of experts the shared expert's (0: none). E, topk, Fe: experts, experts a
// token, an expert's width (0 for dense models).
struct Dims {
  int64_t D, H, KVH, Dh, F, V, L, Q, Nqkv, half, max_pos;
  int64_t E, topk, Fe;
  explicit Dims(const Model& m);
};

// The linear entries (by index) that stay in the compute dtype whatever their checkpoint format:
// the experts' matrices of a kind (an expert set's gate/up, or its down) unless the grouped
// quantized kernels (kernels.h moe_matmul_quant) read them in their blocks: native quantization on,
// bf16 compute, every expert's matrix one device segment in one block format with kernels
// (cuda_block_format), without an input order. Dense linears are false.
std::vector<bool> dense_only_linears(const Model& m, DType act, bool native_quant);

// Batch sizes captured as decode graphs (ascending; the last is the largest).
std::vector<int64_t> graph_buckets(int64_t max_seqs);

// Capacities everything is sized from.
struct Capacities {
  int64_t tokens;     // workspace rows
  int64_t seqs;       // sequences per step (block-table rows, sampling rows)
  int64_t logits;     // logits rows
  int64_t att_rows;   // split-KV rows per launch (split buffers)
  int64_t max_bucket;
  explicit Capacities(const CudaExecutorOptions& o);
};

int64_t workspace_bytes_for(const Dims& d, DType act, int64_t tokens, int64_t att_rows);
// The MoE layers' part of it (0 for dense models): router logits, pairs, segments, expert
// activations and outputs for T * topk pairs, the shared expert's output.
int64_t moe_workspace_bytes_for(const Dims& d, DType act, int64_t tokens, bool shared_expert);
int64_t logits_bytes_for(const Dims& d, DType act, int64_t logits_rows, int64_t sample_rows);
// The output projection is the token embedding.
bool tied_output(const Model& m);
// Whether GGUF quantized weights stay in their blocks (TuningConfig::quant_weights "native").
bool native_quant(const CudaExecutorOptions& o);
int64_t weight_bytes_for(const Model& m, DType act, bool native_quant);
// Each layer's matmul weights on the device (offload): the linears a layer names
// (model/layer_linears.h), each linear's device bytes (by index; 0 for the tied output projection,
// which reads the embedding), and each layer's region, its linears at multiples of kSegmentAlign
// in that order.
struct LayerWeightBytes {
  LayerLinears linears;
  std::vector<int64_t> linear;  // [linear entries]
  std::vector<int64_t> region;  // [num_layers]
  int64_t in_layers = 0;        // sum of linear[] over the layers' linears
};
LayerWeightBytes layer_weight_bytes_for(const Model& m, DType act, bool native_quant);
// A layer split's first part (CudaExecutorOptions::layers): by linear index, the linears it does
// not hold (those of the later layers and the output head); all false for the whole model.
std::vector<bool> linears_off_device(const LayerLinears& ll, const Model& m, const CudaExecutorOptions& o);
// The offload plan of these options over those layers (none when cpu_offload_bytes is 0).
WeightOffloadPlan offload_plan_for(const LayerWeightBytes& b, const CudaExecutorOptions& o);
// The act-order gather's scratch: tokens x the largest K of a weight with an input order, in act.
int64_t input_order_scratch_bytes(const Model& m, DType act, int64_t tokens);
// Scratch of the native quantized matmuls: the largest GGUF-quantized weight dequantized to `act`
// (the cuBLASLt and SIMT paths) and the int8 activations of the GEMV (kQuantGemvMaxM rows of max_k);
// for FP8 weights, the FP8 activations of the cuBLASLt FP8 GEMM (tokens rows of fp8_max_k codes and
// their f32 scales; no dequantized copy).
// Each scratch is one buffer; its layout gives the byte offset of each part (256-aligned) and the
// buffer's size, for both the planner and the executor that carves the buffer.
struct QuantScratch {
  int64_t dequant_elems = 0;  // N * K of the largest GGUF-quantized weight; 0: none
  int64_t max_k = 0;          // of the GGUF-quantized weights
  int64_t fp8_max_k = 0, fp8_max_n = 0;  // of the FP8 weights
  // The GEMV's int8 activations [kQuantGemvMaxM, max_k] and their (d, d * sum) pairs
  // [kQuantGemvMaxM, max_k / 32] float2, then the dequantized weight [dequant_elems] act.
  struct Layout {
    int64_t xq = 0, xds = 0, dequant = 0, bytes = 0;
  };
  Layout layout(DType act) const;
  int64_t bytes(DType act) const { return layout(act).bytes; }
  // The FP8 activations of `tokens` rows (codes [tokens, fp8_max_k] e4m3, scales [tokens] f32),
  // then the f32 output [kFp8UnscaledRows, fp8_max_n] of the unscaled GEMM (where cuBLASLt has no
  // outer-vector scaling: BlasLt::matmul_fp8). All zero without FP8 weights.
  struct Fp8Layout {
    int64_t codes = 0, scales = 0, unscaled_out = 0, bytes = 0;
  };
  Fp8Layout fp8_layout(int64_t tokens) const;
  int64_t fp8_bytes(int64_t tokens) const { return fp8_layout(tokens).bytes; }
  static constexpr int64_t kFp8UnscaledRows = 256;
};
QuantScratch quant_scratch_for(const Model& m, DType act, bool native_quant);
// 2:4 sparsity (TuningConfig::sparsity "2:4", or "auto" and a checkpoint that declares it), by
// linear index: the linears the executor checks for the pattern and holds in 2:4 layouts when they
// hold it: every bf16 linear (one segment on the device, N and K multiples of 16, no act-order) but
// the output head, of a dense (not MoE) model, over bf16 activations, with every layer resident (no
// offload, no layer split), not batch-invariant, where cuSPARSELt loads. All false otherwise.
std::vector<bool> sparse_2of4_candidates(const Model& m, DType act, const CudaExecutorOptions& o);
// The device bytes 2:4 sparsity adds at most: every candidate in its two 2:4 layouts (ours 9/16 of
// the bf16 bytes, cuSPARSELt's at most 10/16) instead of bf16, 3/16 of its bytes more, and the
// scratch: the sparse GEMM's workspace, the padded rows' inputs and kSparseOutputScratch of
// outputs. 0 without candidates.
int64_t sparse_2of4_bytes_for(const Model& m, DType act, const CudaExecutorOptions& o);
constexpr int64_t kSparseWorkspace = int64_t{32} << 20;
constexpr int64_t kSparseOutputScratch = int64_t{16} << 20;
constexpr int64_t kOverhead = int64_t{512} << 20;  // cuBLASLt workspace, graphs, input buffers, slack

}  // namespace pagoda::cuda

// Linear layer front end: y = x W^T, the matmul every projection uses.
//
//   w: [N, K] weight in any weight dtype (f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k,
//      q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, tq1_0, tq2_0); row n holds the K inputs of output n.
//   x: [M, K] f32 activations (M tokens), contiguous.
//   y: [M, N] f32 output, written (not accumulated), contiguous.
//
// prepare_linear() runs once at load: it validates the weight, picks the kernels for the dtype and
// the ISA level (this machine's best, capped by set_isa_level_cap of common/cpu_features.h or by `max_isa`) and may
// repack the weight into the layout those kernels read (the prepared weight keeps the original
// alive). linear() validates shapes and dispatches: GEMV schedule for M <= 8 tokens (threads split
// the rows), tiled GEMM above.
// Thread-safety: linear() uses all workers of `pool`; a LinearWeight is immutable after prepare and
// may be used by several pools at once.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/cpu_features.h"
#include "common/status.h"
#include "common/tensor.h"
#include "common/thread_pool.h"

namespace pagoda {

struct LinearWeight;  // opaque: defined by the CPU backend

Result<std::shared_ptr<const LinearWeight>> prepare_linear(const Tensor& w, const std::string& name);
// Same, with the ISA level capped at max_isa (tests and benchmarks compare levels).
Result<std::shared_ptr<const LinearWeight>> prepare_linear(const Tensor& w, const std::string& name,
                                                           IsaLevel max_isa);
// Fused projections that share their input (q/k/v, gate/up): the weights [N_i, K] (same K) are
// concatenated along N, so one linear() call writes y[M, sum N_i] with weight i's outputs at
// columns [sum_{j<i} N_j, ...). Consecutive weights of one dtype form one group (one [sum, K]
// copy, one kernel pass); a fused weight whose parts differ in dtype (llama-quantize's mixes give
// attn_v a higher type than attn_q / attn_k) holds one group per run and linear() runs each into
// its columns, quantizing the activations once for all groups whose kernels can share them. The
// concatenated copies are owned by the prepared weight.
Result<std::shared_ptr<const LinearWeight>> prepare_linear_fused(const std::vector<Tensor>& ws,
                                                                 const std::string& name);
// Same, with the ISA level capped (kScalar: no repacking; device executors read the copy).
Result<std::shared_ptr<const LinearWeight>> prepare_linear_fused(const std::vector<Tensor>& ws,
                                                                 const std::string& name, IsaLevel max_isa);

// The original [N, K] tensor. For a fused weight whose kernels read a repacked copy, the
// concatenated original is released after packing: shape and dtype only (data() is null). For a
// mixed fused weight (linear_weight_mixed): a data-less [N, K] view with the first group's dtype;
// read linear_weight_parts instead.
const Tensor& linear_weight_tensor(const LinearWeight& w);
// The weight's groups in column (row-of-W) order, each an [N_g, K] tensor of one dtype: one entry
// (the tensor above) for a plain or single-dtype fused weight, one per dtype run for a mixed one.
// A group's data() is null when its kernels read a repacked copy (prepare with kScalar to keep
// the originals, as device executors do). Stacking the groups' rows gives W.
std::vector<Tensor> linear_weight_parts(const LinearWeight& w);
// The packed copy the kernels read, for a plain or single-dtype fused weight that has one (empty
// otherwise): what an engine plan persists so a later load skips the repacking.
std::span<const uint8_t> linear_weight_packed(const LinearWeight& w);
// prepare_linear (one part) or prepare_linear_fused (several, one dtype) with the packed layout
// given: `packed` holds the bytes linear_weight_packed returned for the same tensors on this
// machine's ISA level, `owner` keeps them alive. Nothing is repacked and no concatenated copy is
// made; the parts' data is not read (it may be a mapping the caller releases). Invalid argument
// if the parts differ in dtype or K, or the size is not the packed size of this ISA level.
Result<std::shared_ptr<const LinearWeight>> prepare_linear_prepacked(const std::vector<Tensor>& parts,
                                                                     const std::string& name,
                                                                     std::span<const uint8_t> packed,
                                                                     std::shared_ptr<const void> owner);
// Whether w is a fused weight with groups of different dtypes.
bool linear_weight_mixed(const LinearWeight& w);
// Whether the kernels read a repacked copy (of any group): the original's bytes are then never
// read again, and a caller that owns them (a memory-mapped file) may release their pages.
bool linear_weight_repacked(const LinearWeight& w);
IsaLevel linear_weight_isa(const LinearWeight& w);          // level its kernels were chosen for

// The same weight reading its inputs in `order` ([K] i32, a permutation; act-order checkpoints):
// linear() computes y = W x[:, order], gathering each row of x first.
std::shared_ptr<const LinearWeight> with_input_order(std::shared_ptr<const LinearWeight> w, const Tensor& order);

void linear(const LinearWeight& w, const Tensor& x, Tensor& y, ThreadPool& pool);

// Raw form for callers that manage their own buffers: x [m, K] f32, y [m, N] f32, contiguous.
void linear(const LinearWeight& w, const float* x, int64_t m, float* y, ThreadPool& pool);

}  // namespace pagoda

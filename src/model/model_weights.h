// A model's weights as the backends see them: one flat table of matmul weights and one of f32
// vectors, indexed by the ids a family's layer structs hold. A backend binds the table once
// (the CPU reads the prepared LinearWeights, CUDA uploads each entry's parts as a typed device
// weight), so a new family adds ids, not backend code.
// Ownership: parts are views of the checkpoint (the memory-mapped file the WeightSource keeps
// alive), never host copies; a device executor reads them once at upload.
// Thread-safety: immutable after load.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/tensor.h"
#include "ops/linear.h"

namespace pagoda {

// Index into ModelWeights::linears; -1: absent.
struct LinearId {
  int32_t index = -1;
  bool defined() const { return index >= 0; }
};

// Index into ModelWeights::vectors; -1: absent.
struct VectorId {
  int32_t index = -1;
  bool defined() const { return index >= 0; }
};

// Index into ModelWeights::expert_sets; -1: absent.
struct ExpertSetId {
  int32_t index = -1;
  bool defined() const { return index >= 0; }
};

// One mixture-of-experts layer's experts: E SwiGLU MLPs of one shape, expert e's gate and up rows
// fused in gate_up[e] ([2F, D]: gate rows, then up rows) and its down projection down[e] ([D, F]).
// Each matrix kind has one dtype across the experts (the loader checks it), so a device executor
// may stack them ([E, 2F, D], [E, D, F]) at upload; the CPU kernels read expert e's prepared weight.
struct ExpertSet {
  std::string name;
  std::vector<LinearId> gate_up, down;  // [E] each
  int64_t num_experts() const { return static_cast<int64_t>(gate_up.size()); }
};

// One matmul weight [N, K]: the parts [N_i, K] (any weight dtype each) stacked along N, so a fused
// projection (q/k/v, gate/up) is one weight whose outputs are part 0's, then part 1's, ...
struct LinearEntry {
  std::string name;
  std::vector<Tensor> parts;
  // Act-order checkpoints (loader/packed_int_checkpoint.h): [K] i32, column j of every part reads
  // input order[j], so y = W x[:, order]; undefined: column j reads input j.
  Tensor input_order;
  std::shared_ptr<const LinearWeight> cpu;  // prepared for the CPU kernels; null when loaded for a device

  int64_t n() const {
    int64_t n = 0;
    for (const Tensor& p : parts) n += p.dim(0);
    return n;
  }
  int64_t k() const { return parts.at(0).dim(1); }
};

struct ModelWeights {
  Tensor token_embd;  // [V, D] any weight dtype; rows are looked up by token id
  std::vector<LinearEntry> linears;  // in load order
  std::vector<Tensor> vectors;  // [n] f32: norm weights, biases
  std::vector<ExpertSet> expert_sets;  // MoE layers' experts (their matrices are entries of `linears`)
  LinearId output;              // the output projection (logits)
  bool tied_output = false;     // the output projection reads token_embd

  LinearId add_linear(LinearEntry w) {
    linears.push_back(std::move(w));
    return {static_cast<int32_t>(linears.size() - 1)};
  }
  // Undefined tensors give an absent id.
  VectorId add_vector(Tensor t) {
    if (!t.defined()) return {};
    vectors.push_back(std::move(t));
    return {static_cast<int32_t>(vectors.size() - 1)};
  }
  ExpertSetId add_expert_set(ExpertSet s) {
    expert_sets.push_back(std::move(s));
    return {static_cast<int32_t>(expert_sets.size() - 1)};
  }
  const ExpertSet& expert_set(ExpertSetId id) const { return expert_sets.at(static_cast<size_t>(id.index)); }
  const LinearEntry& linear(LinearId id) const { return linears.at(static_cast<size_t>(id.index)); }
  const Tensor& vector(VectorId id) const { return vectors.at(static_cast<size_t>(id.index)); }
};

}  // namespace pagoda

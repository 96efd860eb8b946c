// Mixture-of-experts MLP on the CPU: routing, then the experts run grouped by expert.
//
//   x   [T, D] f32, contiguous (the normalised residual stream of T tokens)
//   out [T, D] f32, contiguous, written (not accumulated)
//   router [E, D]; expert e: gate_up [2F, D] (gate rows, then up rows), down [D, F]; shared expert
//   (optional): gate_up [2Fs, D], down [D, Fs], gate [1, D]. Any weight dtype linear() runs.
//
// Routing (moe_route): p = softmax(x @ router^T) in f32 over the E experts, the top_k largest kept
// (ties: the lower expert index first), divided by their sum when normalize_top_k. Then the
// (token, expert) pairs are sorted by expert (tokens ascending within an expert) and each expert
// that received tokens runs once over the gathered rows of its tokens: at decode only the selected
// experts' weights are read, at prefill each expert's weights are read once for all its tokens
// (one GEMM of M = its token count). Every matmul uses all workers of the pool (linear()'s
// schedules). A token's expert outputs are added in ascending expert order after the shared
// expert's, so the result does not depend on the thread count.
// Thread-safety: one call at a time per scratch; the weights are shared read-only.
#pragma once

#include <cstdint>
#include <vector>

#include "common/tensor.h"
#include "common/thread_pool.h"
#include "ops/linear.h"

namespace pagoda {

struct MoeExpertWeights {
  const LinearWeight* gate_up = nullptr;  // [2F, D]
  const LinearWeight* down = nullptr;     // [D, F]
};

struct MoeWeights {
  const LinearWeight* router = nullptr;  // [E, D]
  std::vector<MoeExpertWeights> experts;  // [E], one F for all
  int64_t top_k = 0;
  bool normalize_top_k = false;
  const LinearWeight* shared_gate_up = nullptr;  // optional [2Fs, D]
  const LinearWeight* shared_down = nullptr;     // [D, Fs]
  const LinearWeight* shared_gate = nullptr;     // [1, D]: the shared expert's output is scaled by sigmoid(x . gate)
};

// Buffers reused across calls (grown on demand). After moe_mlp, expert_tokens[e] is the number of
// tokens routed to expert e in that call (tests and statistics read it).
struct MoeScratch {
  std::vector<float> logits, weights;
  std::vector<int32_t> ids, offsets, order;
  std::vector<int64_t> expert_tokens;
  Tensor rows, gate_up, act, out_rows, shared_gate;
};

// Top-k routing of T tokens over E experts: logits [T, E] (router outputs, f32); writes ids
// [T, k] (expert indices, descending probability) and weights [T, k].
void moe_route(const float* logits, int64_t T, int64_t E, int64_t k, bool normalize_top_k, int32_t* ids,
               float* weights);

// out = moe(x) as described above. Checks shapes (aborts with a message on a mismatch).
void moe_mlp(const MoeWeights& w, const Tensor& x, Tensor& out, MoeScratch& s, ThreadPool& pool);

}  // namespace pagoda

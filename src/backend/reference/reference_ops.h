// Plain scalar reference implementations of the non-matmul ops: the oracles the op tests compare
// every backend against. Written for clarity, accumulate in double, never optimised.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/dtype.h"
#include "common/rope_params.h"
#include "common/kv_layout.h"

namespace pagoda::reference {

// x, out: [T, D]; w: [D].
void rms_norm(const float* x, const float* w, int64_t T, int64_t D, double eps, float* out);
void swiglu(const float* gate, const float* up, int64_t n, float* out);
// out[i] = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) * up[i] (GeGLU, tanh GELU), in double.
void geglu_tanh(const float* gate, const float* up, int64_t n, float* out);

// Rotates one head vector x[head_dim] (first rope_dim dims) at `pos` with frequencies inv_freq
// (rope_dim/2 entries) in the given layout.
void rope_head(float* x, int64_t rope_dim, int64_t pos, std::span<const double> inv_freq, RopeLayout layout);

// Reads element `e` of slot `slot` / head `h` / dim `d` from a paged K or V cache.
float kv_read_k(const KvLayerView& c, int64_t slot, int64_t h, int64_t d);
float kv_read_v(const KvLayerView& c, int64_t slot, int64_t h, int64_t d);

// Dense causal attention for one sequence: gathers its first context_len tokens' K/V through the
// block table into dense arrays, then softmax(q k^T * scale) v in double; softcap > 0 replaces
// each scaled score s by softcap * tanh(s / softcap) (Gemma 2).
// q, out: [num_queries, num_heads, head_dim].
void dense_attention(const float* q, float* out, int64_t num_queries, int64_t context_len,
                     std::span<const int32_t> block_table, const KvLayerView& cache, int64_t num_heads, double scale,
                     int64_t sliding_window, double softcap = 0);

}  // namespace pagoda::reference

// Gated activations.
#pragma once

#include "common/tensor.h"
#include "common/thread_pool.h"

namespace pagoda {

// SwiGLU: out[t, i] = silu(gate[t, i]) * up[t, i]. gate, up, out: [T, F] f32; out may alias gate.
void swiglu(const Tensor& gate, const Tensor& up, Tensor& out, ThreadPool& pool);

// SwiGLU over fused gate/up projections: gate_up [T, 2F] holds gate in columns [0, F) and up in
// [F, 2F); out [T, F] = silu(gate) * up.
void swiglu_fused(const Tensor& gate_up, Tensor& out, ThreadPool& pool);

// GeGLU (tanh GELU, Gemma) over fused gate/up projections, same layout as swiglu_fused:
// out [T, F] = gelu_tanh(gate) * up.
void geglu_tanh_fused(const Tensor& gate_up, Tensor& out, ThreadPool& pool);

}  // namespace pagoda

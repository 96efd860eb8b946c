// RMSNorm front ends (Llama-family: y = x / sqrt(mean(x^2) + eps) * w, computed in f32).
#pragma once

#include "common/tensor.h"
#include "common/thread_pool.h"

namespace pagoda {

// x: [T, D] f32; w: [D] f32 (f16/bf16 accepted); out: [T, D] f32 (may alias x).
void rms_norm(const Tensor& x, const Tensor& w, double eps, Tensor& out, ThreadPool& pool);

// Fused residual add + RMSNorm: residual += x (in place), then out = rms_norm(residual) * w.
// residual, x, out: [T, D] f32; out may alias x (not residual).
void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& w, double eps, Tensor& out, ThreadPool& pool);

// Per-head RMSNorm (Qwen3 q_norm/k_norm): x: [T, H * head_dim] f32 normalised per head_dim
// slice in place with w: [head_dim].
void head_rms_norm(Tensor& x, int64_t head_dim, const Tensor& w, double eps, ThreadPool& pool);

}  // namespace pagoda

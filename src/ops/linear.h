// Linear layer front end: y = x W^T (+ bias), the matmul every projection uses.
//
//   w: [N, K] weight in any weight dtype (f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_k,
//      q5_k, q6_k); row n holds the K inputs of output n.
//   x: [M, K] f32 activations (M tokens).
//   y: [M, N] f32 output, written (not accumulated).
//
// prepare_linear() runs once at load: it validates the weight and may repack it into a layout
// the CPU kernels prefer (the prepared weight keeps the original alive). linear() validates
// shapes and dispatches to the best kernel for the dtype, M and the ISA level of this machine.
// Thread-safety: linear() uses all workers of `pool`; a LinearWeight is immutable after prepare.
#pragma once

#include <memory>

#include "common/status.h"
#include "common/tensor.h"
#include "common/thread_pool.h"

namespace pagoda {

struct LinearWeight;  // opaque: defined by the CPU backend

Result<std::shared_ptr<const LinearWeight>> prepare_linear(const Tensor& w, const std::string& name);
const Tensor& linear_weight_tensor(const LinearWeight& w);  // the original [N, K] tensor

void linear(const LinearWeight& w, const Tensor& x, Tensor& y, ThreadPool& pool);

}  // namespace pagoda

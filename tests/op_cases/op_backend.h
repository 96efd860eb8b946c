// The op-test harness shared by the CPU and the CUDA tiers: an op case (inputs, plain reference,
// NMSE budget) is written once in op_cases.cc and runs against every backend the test binary
// provides (make_op_backends(): the CPU at each ISA level in pagoda_ops_tests, the CUDA kernels
// with f32 and with bf16 activations in pagoda_gpu_tests).
//
// Contract: host vectors in and out, f32 values, row-major; a backend uploads, runs its kernels
// (the ones its executor dispatches to for that shape) and returns the f32 result. A backend is
// used by one test at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/tensor.h"
#include "model/layer_ops.h"

namespace pagoda::test {

class OpBackend {
 public:
  virtual ~OpBackend() = default;
  virtual std::string name() const = 0;
  // Empty when the backend can run here, else why not (the cases skip with it; the CUDA backend's
  // reason starts with "GPU test skipped:", the GPU tier's skip marker).
  virtual std::string unavailable() const { return {}; }
  // The NMSE the backend's activation precision may add to an op's own budget (bf16 activations:
  // inputs and outputs rounded to 8 significant bits).
  virtual double activation_nmse() const { return 0.0; }

  // y[T, D] = x / sqrt(mean(x^2) + eps) * w.
  virtual std::vector<float> rms_norm(const std::vector<float>& x, const std::vector<float>& w, int64_t T, int64_t D,
                                      double eps) = 0;
  // out[T, F] = act(gate) * up over fused gate_up [T, 2F] (gate columns first).
  virtual std::vector<float> gated_activation(const std::vector<float>& gate_up, int64_t T, int64_t F,
                                              GateActivation act) = 0;
  // Whether embedding() returns the table's dequantized rows exactly for a table of this dtype.
  virtual bool embeds_exactly(DType table) const = 0;
  // out[T, D] = the rows ids of table [V, D].
  virtual std::vector<float> embedding(const Tensor& table, const std::vector<int32_t>& ids) = 0;
  // y[M, N] = x[M, K] @ dequant(w)^T for a weight w [N, K] in any weight format the model loader
  // accepts (the backend converts it the way its loader does).
  virtual std::vector<float> linear(const Tensor& w, const std::vector<float>& x, int64_t M) = 0;
};

// Defined once per test binary: the backends its cases run on.
std::vector<std::shared_ptr<OpBackend>> make_op_backends();

// GoogleTest prints a case's parameter by its backend's name.
inline void PrintTo(const std::shared_ptr<OpBackend>& b, std::ostream* os) { *os << b->name(); }

}  // namespace pagoda::test

// cuBLASLt matmuls for the linear layers: y[M, N] (=, +=) x[M, K] . w[N, K]^T with row-major
// activations and [out, in] weights, computed as the column-major "TN" product
// D[N, M] = W^T(op T) X, the layout Hopper's GEMM kernels prefer.
//
// Types: bf16 x/w with f32 or bf16 y, or f32 everywhere (pure FP32: CUBLAS_COMPUTE_32F, never
// TF32); always f32 accumulation. accumulate = true adds into y (beta = 1, C == D in place): the
// residual add as an epilogue. The heuristic's choice is cached per (M, N, K, types, beta), with
// its descriptors (decode-sized M: the fastest of the heuristic's candidates, timed once), so a
// shape pays for the choice once; the workspace is fixed at
// construction, so calls are capturable in CUDA graphs.
// Thread-safety: one instance per stream/thread (the executor owns one).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "backend/cuda/cuda_common.h"
#include "common/dtype.h"

namespace pagoda::cuda {

class BlasLt {
 public:
  explicit BlasLt(size_t workspace_bytes = size_t{32} << 20);
  ~BlasLt();
  BlasLt(const BlasLt&) = delete;
  BlasLt& operator=(const BlasLt&) = delete;

  void matmul(const void* x, const void* w, DType in_dtype, int64_t M, int64_t N, int64_t K, void* y, DType out_dtype,
              bool accumulate, cudaStream_t stream);

  // FP8 W8A8 (Hopper tensor cores): y[M, N] (=, +=) x_scale[m] * w_scale[n] * sum_k e4m3(xq[m, k])
  // e4m3(w[n, k]), with xq [M, K] and w [N, K] e4m3 codes row-major (N and K multiples of 16,
  // 16-byte aligned: the TN layout FP8 requires) and the scales f32 vectors on the device ([M] and
  // [N]), applied by cuBLASLt's outer-vector scaling (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F:
  // w_scale as A's, x_scale as B's; cuBLAS >= 12.9 on Hopper). out_dtype bf16 (accumulate false)
  // or f32; f32 accumulation. False, with nothing launched, where this cuBLAS has no such kernel for
  // the shape and output (remembered per shape): the caller then takes matmul_fp8_unscaled and
  // scales the output itself. Plans cached and autotuned as matmul's.
  bool matmul_fp8(const void* xq, const float* x_scale, const void* w, const float* w_scale, int64_t M, int64_t N,
                  int64_t K, void* y, DType out_dtype, bool accumulate, cudaStream_t stream);
  // y[M, N] f32 = sum_k e4m3(xq[m, k]) e4m3(w[n, k]) (unit scales: cuBLASLt's FP8 GEMM of every
  // version with FP8), the fallback of matmul_fp8.
  void matmul_fp8_unscaled(const void* xq, const void* w, int64_t M, int64_t N, int64_t K, float* y,
                           cudaStream_t stream);

  size_t workspace_bytes() const { return workspace_.bytes(); }
  // Autotuning, while on (off by default; the CUDA executor turns it on for the warm-up of its
  // decode graphs, so a new M in a serving step never pays for it): the first call of a shape with
  // kTuneMinM <= M <= kTuneMaxM times up to kTuneCandidates of the heuristic's algorithms on its
  // own operands (into a scratch output), outside graph capture, and keeps the fastest; off: the
  // heuristic's first choice.
  void set_autotune(bool on) { autotune_ = on; }

  static constexpr int kTuneCandidates = 8, kTuneRuns = 20;
  // From 2 rows: one-row layers take the GEMV (cuda_executor.cc), every other decode shape cuBLASLt.
  static constexpr int64_t kTuneMinM = 2, kTuneMaxM = 1024, kTuneMaxOutBytes = int64_t{64} << 20;

 private:
  // matmul / matmul_fp8 / matmul_fp8_unscaled (in_dtype kF8E4M3Rows: e4m3 operands; kOuterVec:
  // with the scale vectors). False: no outer-vector algorithm (nothing launched).
  enum class Scaling { kNone, kOuterVec, kUnit };
  bool run(const void* x, const float* x_scale, const void* w, const float* w_scale, DType in_dtype, Scaling scaling,
           int64_t M, int64_t N, int64_t K, void* y, DType out_dtype, bool accumulate, cudaStream_t stream);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  DeviceBuffer workspace_;
  bool autotune_ = false;
};

}  // namespace pagoda::cuda

// 2:4 structured-sparse linear weights on the sparse tensor cores (compute capability 8.0+), through
// NVIDIA cuSPARSELt. A weight is 2:4 sparse when every group of 4 consecutive inputs (along K) of
// every output row holds at most 2 nonzeros; cuSPARSELt keeps its nonzeros and their positions
// (about 9/16 of the bf16 bytes) and multiplies them at twice the dense tensor-core rate.
//
// The library is loaded at run time (dlopen "libcusparseLt.so.0": the pip package
// nvidia-cusparselt-cu13, which PyTorch installs, or NVIDIA's tarball; LD_LIBRARY_PATH names its
// folder), versions 0.6 to 0.x, so builds and machines without it run everything else.
//
// Layout: y[M, N] = x[M, K] . w[N, K]^T as the column-major product D[N, M] = op(A) B with A the
// structured weight (K x N column-major, op transpose: the TN layout), B the activations (K x M),
// D the outputs (N x M, leading dimension N); bf16 in and out, f32 accumulation. M must be a
// multiple of kSparseRowAlign (callers pad). Plans are cached per (N, K, M); the workspace is
// fixed at construction, so matmuls are capturable in CUDA graphs once their plan exists.
// Thread-safety: one instance per executor (one stream at a time).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "backend/cuda/cuda_common.h"
#include "common/status.h"

namespace pagoda::cuda {

inline constexpr int64_t kSparseRowAlign = 16;

// A 2:4 [n, k] bf16 weight in its two layouts: ours (kernels.h sparse_2of4_bytes: values and
// 2-bit positions) for gemv_2of4, cuSPARSELt's compressed one (opaque) for its GEMM. Each holds
// 9/16 of the bf16 bytes; the dense weight is not kept.
struct Sparse2of4Weight {
  int64_t n = 0, k = 0;
  DeviceBuffer packed;
  DeviceBuffer compressed;
  int64_t bytes() const { return static_cast<int64_t>(packed.bytes() + compressed.bytes()); }
};

class SparseLt {
 public:
  // Loads the library and makes its handle on the current device; an unavailable status says why
  // (no library, an unsupported version, a device without sparse tensor cores).
  static Result<std::unique_ptr<SparseLt>> create(size_t workspace_bytes = size_t{32} << 20);
  // Whether the library loads (its version unchecked); `why` says why not.
  static bool available(std::string* why = nullptr);
  ~SparseLt();
  SparseLt(const SparseLt&) = delete;
  SparseLt& operator=(const SparseLt&) = delete;

  std::string version() const;  // "0.8.1"

  // Whether a cuSPARSELt matmul takes a weight of this shape (n, k multiples of 16 here).
  static bool shape_supported(int64_t n, int64_t k) { return n % 16 == 0 && k % 16 == 0 && n > 0 && k > 0; }

  // Whether the row-major bf16 [n, k] weight at w (device) is 2:4 sparse along k, by cuSPARSELt's
  // own check in the transposed layout compress() uses (the executor checks with pack_2of4; the
  // GPU tests hold the two to each other). Synchronizes s.
  Result<bool> holds_2of4(const void* w, int64_t n, int64_t k, cudaStream_t s);
  // cuSPARSELt's compressed copy of a 2:4 weight (holds_2of4 true) into out.compressed (n, k
  // set). Synchronizes s.
  Status compress(const void* w, int64_t n, int64_t k, Sparse2of4Weight& out, cudaStream_t s);
  // Bytes compress() allocates for an [n, k] weight.
  Result<int64_t> compressed_bytes(int64_t n, int64_t k);

  // y[M, n] bf16 (row stride n) = x[M, k] bf16 . W^T, M a positive multiple of kSparseRowAlign.
  // The first call of a shape makes its plan (host work; do it outside graph capture: the CUDA
  // executor's warm-up).
  Status matmul(const void* x, const Sparse2of4Weight& w, int64_t M, void* y, cudaStream_t s);

  struct Api;
  struct Plan;
  // cuSPARSELt's opaque structs are 512 bytes in 0.10 and at most 1024 in earlier releases.
  static constexpr size_t kOpaqueBytes = 4096;

 private:
  SparseLt() = default;
  Result<Plan*> plan_for(int64_t n, int64_t k, int64_t M);
  Status weight_descriptor(int64_t n, int64_t k, Plan& p) const;

  const Api* api_ = nullptr;
  struct alignas(16) Handle {
    uint8_t data[kOpaqueBytes];
  };
  std::unique_ptr<Handle> handle_;  // the library's opaque handle
  int version_[3] = {0, 0, 0};
  DeviceBuffer workspace_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::unique_ptr<Plan>> plans_;
};

}  // namespace pagoda::cuda

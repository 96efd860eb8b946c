#include "backend/cuda/blas.h"

#include <cublasLt.h>

#include <cstdio>
#include <map>
#include <string_view>
#include <tuple>

#include "common/check.h"

#define CUBLAS_CHECK(expr)                                                                           \
  do {                                                                                               \
    const cublasStatus_t pagoda_cublas_st_ = (expr);                                                 \
    PAGODA_CHECK(pagoda_cublas_st_ == CUBLAS_STATUS_SUCCESS, "{} failed: cuBLAS status {}", #expr, \
                 static_cast<int>(pagoda_cublas_st_));                                               \
  } while (0)

namespace pagoda::cuda {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    default: PAGODA_CHECK(false, "cuBLASLt: unsupported dtype {}", dtype_name(t));
  }
}

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool usable = true;  // false: no algorithm (FP8 outer-vector scaling), nothing to run
  bool ran = false;    // a launch succeeded
};

// The fastest of the `found` candidates for plan p on these operands: each launched once, then
// timed over `runs` launches into a scratch output (beta = 0, so y is not touched). The first
// candidate when no scratch memory is left.
cublasLtMatmulAlgo_t fastest_algo(cublasLtHandle_t handle, const Plan& p, const cublasLtMatmulHeuristicResult_t* cand,
                                  int found, const void* x, const void* w, size_t out_bytes, void* workspace,
                                  size_t workspace_bytes, cudaStream_t stream, int runs) {
  void* scratch = nullptr;
  if (cudaMalloc(&scratch, out_bytes) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the allocation error; tuning is optional
    return cand[0].algo;
  }
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  const float one = 1.0f, zero = 0.0f;
  cublasLtMatmulAlgo_t best_algo = cand[0].algo;
  float best = 0.0f;
  for (int i = 0; i < found; ++i) {
    auto run = [&] {
      return cublasLtMatmul(handle, p.desc, &one, w, p.a, x, p.b, &zero, scratch, p.c, scratch, p.c, &cand[i].algo,
                            workspace, workspace_bytes, stream);
    };
    if (run() != CUBLAS_STATUS_SUCCESS) continue;
    CUDA_CHECK(cudaEventRecord(e0, stream));
    for (int r = 0; r < runs; ++r) CUBLAS_CHECK(run());
    CUDA_CHECK(cudaEventRecord(e1, stream));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (best == 0.0f || ms < best) {
      best = ms;
      best_algo = cand[i].algo;
    }
  }
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  CUDA_CHECK(cudaFree(scratch));
  return best_algo;
}

// The FP8 matmul's scale vectors: A (the weight, op T: its N rows) and B (the activations: M).
void set_fp8_scales(cublasLtMatmulDesc_t desc, const float* a_scale, const float* b_scale) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale)));
}

}  // namespace

struct BlasLt::Impl {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  using Key = std::tuple<int64_t, int64_t, int64_t, int, int, bool>;
  std::map<Key, Plan> plans;
};

BlasLt::BlasLt(size_t workspace_bytes) : impl_(std::make_unique<Impl>()), workspace_(workspace_bytes) {
  CUBLAS_CHECK(cublasLtCreate(&impl_->handle));
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&impl_->pref));
  uint64_t ws = workspace_bytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(impl_->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
}

BlasLt::~BlasLt() {
  for (auto& [k, p] : impl_->plans) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.desc);
  }
  cublasLtMatmulPreferenceDestroy(impl_->pref);
  cublasLtDestroy(impl_->handle);
}

void BlasLt::matmul(const void* x, const void* w, DType in_dtype, int64_t M, int64_t N, int64_t K, void* y,
                    DType out_dtype, bool accumulate, cudaStream_t stream) {
  run(x, nullptr, w, nullptr, in_dtype, Scaling::kNone, M, N, K, y, out_dtype, accumulate, stream);
}

bool BlasLt::matmul_fp8(const void* xq, const float* x_scale, const void* w, const float* w_scale, int64_t M, int64_t N,
                        int64_t K, void* y, DType out_dtype, bool accumulate, cudaStream_t stream) {
  PAGODA_CHECK(K % 16 == 0 && N % 16 == 0, "matmul_fp8: N = {} and K = {} must be multiples of 16", N, K);
  PAGODA_CHECK(out_dtype == DType::kF32 || (out_dtype == DType::kBF16 && !accumulate),
               "matmul_fp8: the output is bf16 (stored) or f32");
  PAGODA_CHECK(x_scale != nullptr && w_scale != nullptr, "matmul_fp8: the scales are required");
  return run(xq, x_scale, w, w_scale, DType::kF8E4M3Rows, Scaling::kOuterVec, M, N, K, y, out_dtype, accumulate, stream);
}

void BlasLt::matmul_fp8_unscaled(const void* xq, const void* w, int64_t M, int64_t N, int64_t K, float* y,
                                 cudaStream_t stream) {
  PAGODA_CHECK(K % 16 == 0 && N % 16 == 0, "matmul_fp8_unscaled: N = {} and K = {} must be multiples of 16", N, K);
  run(xq, nullptr, w, nullptr, DType::kF8E4M3Rows, Scaling::kUnit, M, N, K, y, DType::kF32, false, stream);
}

bool BlasLt::run(const void* x, const float* x_scale, const void* w, const float* w_scale, DType in_dtype,
                 Scaling scaling, int64_t M, int64_t N, int64_t K, void* y, DType out_dtype, bool accumulate,
                 cudaStream_t stream) {
  if (M <= 0) return true;
  const bool fp8 = in_dtype == DType::kF8E4M3Rows, outer = scaling == Scaling::kOuterVec;
  const Impl::Key key{M, N, K, static_cast<int>(in_dtype) + 0x10000 * static_cast<int>(scaling),
                      static_cast<int>(out_dtype), accumulate};
  auto it = impl_->plans.find(key);
  if (it != impl_->plans.end() && !it->second.usable) return false;
  if (it != impl_->plans.end() && outer) set_fp8_scales(it->second.desc, w_scale, x_scale);
  if (it == impl_->plans.end()) {
    Plan p;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (outer) {
      // One f32 scale per row of op(A) = W (its N outputs) and per column of B = X^T (its M tokens).
      const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
      set_fp8_scales(p.desc, w_scale, x_scale);
    }
    const cudaDataType_t it_ = fp8 ? CUDA_R_8F_E4M3 : cuda_type(in_dtype), ot = cuda_type(out_dtype);
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, it_, K, N, K));  // W: K x N column-major, op T -> N x K
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, it_, K, M, K));  // X: K x M column-major
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, ot, N, M, N));   // Y: N x M column-major = [M, N] row-major
    cublasLtMatmulHeuristicResult_t res[kTuneCandidates]{};
    int found = 0;
    const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(impl_->handle, p.desc, p.a, p.b, p.c, p.c, impl_->pref,
                                                             kTuneCandidates, res, &found);
    if (outer && (hs != CUBLAS_STATUS_SUCCESS || found == 0)) {
      // This cuBLAS has no outer-vector FP8 kernel for the shape: remembered; the caller scales.
      p.usable = false;
      impl_->plans.emplace(key, p);
      return false;
    }
    CUBLAS_CHECK(hs);
    PAGODA_CHECK(found > 0, "cuBLASLt has no algorithm for M={} N={} K={} {} -> {}{}", M, N, K,
                 fp8 ? std::string_view("e4m3") : dtype_name(in_dtype), dtype_name(out_dtype),
                 accumulate ? " (accumulate)" : "");
    p.algo = res[0].algo;
    const int64_t out_bytes = M * row_bytes(out_dtype, N);
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
    if (autotune_ && found > 1 && M >= kTuneMinM && M <= kTuneMaxM && out_bytes <= kTuneMaxOutBytes &&
        capturing == cudaStreamCaptureStatusNone) {
      p.algo = fastest_algo(impl_->handle, p, res, found, x, w, static_cast<size_t>(out_bytes), workspace_.get(),
                            workspace_.bytes(), stream, kTuneRuns);
    }
    it = impl_->plans.emplace(key, p).first;
  }
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  Plan& p = it->second;
  const cublasStatus_t st = cublasLtMatmul(impl_->handle, p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo,
                                           workspace_.get(), workspace_.bytes(), stream);
  if (st != CUBLAS_STATUS_SUCCESS && outer && !p.ran) {
    p.usable = false;  // an outer-vector algorithm the heuristic offered but the library refuses to run
    return false;
  }
  CUBLAS_CHECK(st);
  p.ran = true;
  return true;
}

}  // namespace pagoda::cuda

// 2:4 sparse linears on the CUDA executor (backend/cuda/sparse_2of4.h, decisions.md#d88): the
// two 2:4 layouts made at load in place of a candidate's dense weight, and the matmul over them
// (our 2:4 GEMV for few rows, cuSPARSELt's sparse GEMM above).
#include "backend/cuda/cuda_executor_impl.h"
#include "common/log.h"

namespace pagoda::cuda_impl {

Status CudaExecutor::make_sparse_copies() {
  const ModelWeights& w = model_.weights();
  const std::vector<bool> candidates = cuda::sparse_2of4_candidates(model_, act_, opt_);
  if (std::none_of(candidates.begin(), candidates.end(), [](bool b) { return b; })) return {};
  const bool asked = opt_.tuning.sparsity == "2:4";  // else the checkpoint declares it
  auto lib = cuda::SparseLt::create(static_cast<size_t>(cuda::kSparseWorkspace));
  if (!lib.ok()) {
    if (asked) return lib.status();
    log_warn("cuda", "the checkpoint declares 2:4 sparsity, but its linears run dense: {}", lib.status().message());
    return {};
  }
  auto sparse = std::move(lib).value();
  // One candidate at a time: packed into our layout (the pack counts the groups that break the
  // pattern), compressed by cuSPARSELt, and its dense weight freed, so the peak is one weight's
  // two layouts beyond the dense weights.
  cuda::DeviceBuffer violations(sizeof(int));
  std::vector<std::string> dense;
  int64_t chosen = 0, max_k = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!candidates[i]) continue;
    cuda::DeviceWeight& dw = linears_[i];
    PAGODA_CHECK(dw.uniform() && dw.format() == DType::kBF16 && dw.data() != nullptr,
                 "2:4 candidate {} is not one resident bf16 segment", w.linears[i].name);
    PAGODA_ASSIGN_OR_RETURN(const int64_t compressed, sparse->compressed_bytes(dw.n, dw.k));
    const int64_t bytes = cuda::sparse_2of4_bytes(dw.n, dw.k) + compressed;
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (bytes + (int64_t{64} << 20) > static_cast<int64_t>(free_bytes))
      return resource_exhausted("the 2:4 layouts of {} need {:.2f} MiB and {:.2f} MiB of device memory is free: run "
                                "dense (--cuda-sparsity off) or use a larger GPU",
                                w.linears[i].name, bytes / 1048576.0, free_bytes / 1048576.0);
    auto sw = std::make_shared<cuda::Sparse2of4Weight>();
    sw->packed.reset(static_cast<size_t>(cuda::sparse_2of4_bytes(dw.n, dw.k)));
    CUDA_CHECK(cudaMemsetAsync(violations.get(), 0, sizeof(int), stream_));
    cuda::pack_2of4(dw.data(), dw.n, dw.k, sw->packed.get(), violations.as<int>(), stream_);
    int broken = 0;
    CUDA_CHECK(cudaMemcpyAsync(&broken, violations.get(), sizeof(int), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (broken > 0) {
      dense.push_back(w.linears[i].name);
      continue;
    }
    PAGODA_RETURN_IF_ERROR(sparse->compress(dw.data(), dw.n, dw.k, *sw, stream_));
    sparse_bytes_ += sw->bytes();
    sparse_read_bytes_ += static_cast<int64_t>(sw->packed.bytes());
    dw.sparse = std::move(sw);
    dw.storage.reset(0);  // the dense weight: nothing reads it now
    dw.segments.front().data = nullptr;
    max_k = std::max(max_k, dw.k);
    ++chosen;
  }
  const std::string dense_note =
      dense.empty() ? std::string()
                    : fmt::format("; {} without the pattern stay dense ({}{})", dense.size(), dense.front(),
                                  dense.size() > 1 ? fmt::format(" ... {}", dense.back()) : std::string());
  if (chosen == 0) {
    if (asked) return invalid_argument("--cuda-sparsity 2:4: no linear of this model holds the 2:4 pattern{}", dense_note);
    log_warn("cuda", "the checkpoint declares 2:4 sparsity, but no linear holds the pattern: they run dense");
    return {};
  }
  const int64_t scratch_x = cuda::align_up(cuda::kSparseRowAlign * max_k * 2, 256);
  sparse_y_bytes_ = cuda::kSparseOutputScratch;
  sparse_scratch_.reset(static_cast<size_t>(sparse_y_bytes_ + scratch_x));
  CUDA_CHECK(cudaMemset(sparse_scratch_.get(), 0, sparse_scratch_.bytes()));
  sparse_y_ = sparse_scratch_.as<uint8_t>();
  sparse_x_ = sparse_y_ + sparse_y_bytes_;
  sparse_ = std::move(sparse);
  log_info("cuda", "2:4 sparsity: {} linears in 2:4 layouts ({:.2f} GiB): our GEMV below {} rows, cuSPARSELt {} from "
           "there{}", chosen, sparse_bytes_ / 1073741824.0, opt_.tuning.sparse_min_rows, sparse_->version(), dense_note);
  return {};
}

void CudaExecutor::sparse_linear(const void* x, const cuda::DeviceWeight& w, int64_t M, void* y, GemmOut mode) {
  const cuda::Sparse2of4Weight& sw = *w.sparse;
  const int64_t N = w.n, K = w.k, align = cuda::kSparseRowAlign;
  if (sparse_gemv(M, w)) {
    cuda::gemv_2of4(x, sw.packed.get(), M, N, K, y, mode == GemmOut::kSwiGlu ? N / 2 : N, mode, stream_);
    return;
  }
  PAGODA_CHECK(mode != GemmOut::kSwiGlu, "the 2:4 sparse GEMM of {} rows has no fused SwiGLU", M);
  const bool f32_out = mode == GemmOut::kStoreF32 || mode == GemmOut::kAddF32;
  const int64_t out_elem = f32_out ? 4 : 2;
  auto run = [&](const void* xs, int64_t rows, void* out) {
    const Status st = sparse_->matmul(xs, sw, rows, out, stream_);
    PAGODA_CHECK(st.ok(), "2:4 sparse matmul of {} rows, N {} K {}: {}", rows, N, K, st.message());
  };
  // sparse_y_'s bf16 rows [0, m) into y's rows [m0, m0 + m) in the mode's dtype.
  auto finish = [&](int64_t m0, int64_t m) {
    uint8_t* dst = static_cast<uint8_t*>(y) + m0 * N * out_elem;
    if (mode == GemmOut::kAddF32)
      cuda::accumulate_bf16(sparse_y_, reinterpret_cast<float*>(dst), m * N, stream_);
    else if (f32_out)
      cuda::convert(sparse_y_, DType::kBF16, dst, DType::kF32, m * N, stream_);
    else
      CUDA_CHECK(cudaMemcpyAsync(dst, sparse_y_, static_cast<size_t>(m * N * 2), cudaMemcpyDeviceToDevice, stream_));
  };
  const int64_t aligned = M / align * align;
  if (!f32_out && aligned > 0) {
    run(x, aligned, y);  // bf16 rows straight into y
  } else {
    const int64_t chunk = std::max<int64_t>(align, sparse_y_bytes_ / (N * 2) / align * align);
    for (int64_t m0 = 0; m0 < aligned; m0 += chunk) {
      const int64_t m = std::min(chunk, aligned - m0);
      run(static_cast<const uint8_t*>(x) + m0 * K * 2, m, sparse_y_);
      finish(m0, m);
    }
  }
  if (aligned < M) {  // the last M % 16 rows, padded to 16 (the pad rows' outputs are dropped)
    const int64_t m = M - aligned;
    CUDA_CHECK(cudaMemcpyAsync(sparse_x_, static_cast<const uint8_t*>(x) + aligned * K * 2, static_cast<size_t>(m * K * 2),
                               cudaMemcpyDeviceToDevice, stream_));
    run(sparse_x_, align, sparse_y_);
    finish(aligned, m);
  }
}

}  // namespace pagoda::cuda_impl

// Helpers of the GPU tier: skip cleanly without a device, device buffers from host vectors.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/cuda_executor.h"

// Skips the test (with the reason) unless this build has CUDA and a device is visible.
#define PAGODA_REQUIRE_GPU()                                          \
  do {                                                                \
    std::string why_;                                                 \
    if (!::pagoda::cuda_available(&why_)) GTEST_SKIP() << "GPU test skipped: " << why_; \
  } while (0)

namespace pagoda::test {

// Directory of the bf16 GPU parity models and references (tools/make_gpu_references.py), or "".
inline std::string gpu_ref_dir() {
  const char* d = std::getenv("PAGODA_GPU_REF_DIR");
  return d ? d : "";
}

}  // namespace pagoda::test

#if PAGODA_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_common.h"

namespace pagoda::test {

template <class T>
cuda::DeviceBuffer to_device(const std::vector<T>& v) {
  cuda::DeviceBuffer b(std::max<size_t>(1, v.size() * sizeof(T)));
  if (!v.empty()) CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}
template <class T>
std::vector<T> to_host(const cuda::DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  CUDA_CHECK(cudaDeviceSynchronize());
  if (n) CUDA_CHECK(cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

}  // namespace pagoda::test
#endif

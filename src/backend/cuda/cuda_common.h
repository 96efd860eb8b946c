// Host-side CUDA helpers shared by the backend's .cc and .cu files: error-checking macros and
// owning buffers (device memory, pinned host memory). Plain C++ (no fmt, no CUDA C++ syntax), so
// nvcc and g++ both compile it.
//
// CUDA_CHECK(expr) aborts with file:line and the CUDA error string: a failing CUDA call is an
// invariant violation (bad launch, lost device), not an expected failure. Expected failures
// (out of memory while planning, no device) are checked explicitly and returned as Status.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace pagoda::cuda {

[[noreturn]] void cuda_fail(const char* file, int line, const char* expr, const char* msg);

}  // namespace pagoda::cuda

#define CUDA_CHECK(expr)                                                                     \
  do {                                                                                       \
    const cudaError_t pagoda_cuda_err_ = (expr);                                             \
    if (pagoda_cuda_err_ != cudaSuccess)                                                     \
      ::pagoda::cuda::cuda_fail(__FILE__, __LINE__, #expr, cudaGetErrorString(pagoda_cuda_err_)); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

// Invariant check usable in .cu files (no fmt): aborts with the message.
#define PAGODA_CUDA_REQUIRE(cond, msg)                                      \
  do {                                                                      \
    if (!(cond)) ::pagoda::cuda::cuda_fail(__FILE__, __LINE__, #cond, msg); \
  } while (0)

namespace pagoda::cuda {

// Device memory owned by this object (cudaMalloc / cudaFree). Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { reset(bytes); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  void reset(size_t bytes) {
    release();
    if (bytes > 0) CUDA_CHECK(cudaMalloc(&p_, bytes));
    bytes_ = bytes;
  }
  void release() {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    bytes_ = 0;
  }
  void* get() const { return p_; }
  template <class T>
  T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory (cudaHostAlloc / cudaFreeHost): staging for asynchronous copies.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes) { reset(bytes); }
  ~PinnedBuffer() { release(); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  void reset(size_t bytes) {
    release();
    if (bytes > 0) CUDA_CHECK(cudaHostAlloc(&p_, bytes, cudaHostAllocDefault));
    bytes_ = bytes;
  }
  void release() {
    if (p_) cudaFreeHost(p_);
    p_ = nullptr;
    bytes_ = 0;
  }
  void* get() const { return p_; }
  template <class T>
  T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace pagoda::cuda

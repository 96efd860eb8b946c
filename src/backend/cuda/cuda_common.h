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

// Memory owned by this object, allocated and freed by Alloc. Move-only.
template <class Alloc>
class OwnedBuffer {
 public:
  OwnedBuffer() = default;
  explicit OwnedBuffer(size_t bytes) { reset(bytes); }
  ~OwnedBuffer() { release(); }
  OwnedBuffer(const OwnedBuffer&) = delete;
  OwnedBuffer& operator=(const OwnedBuffer&) = delete;
  OwnedBuffer(OwnedBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  OwnedBuffer& operator=(OwnedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  void reset(size_t bytes) {
    release();
    if (bytes > 0) Alloc::allocate(&p_, bytes);
    bytes_ = bytes;
  }
  void release() {
    if (p_) Alloc::free(p_);
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

struct DeviceAlloc {
  static void allocate(void** p, size_t bytes) { CUDA_CHECK(cudaMalloc(p, bytes)); }
  static void free(void* p) { cudaFree(p); }
};
struct PinnedHostAlloc {
  static void allocate(void** p, size_t bytes) { CUDA_CHECK(cudaHostAlloc(p, bytes, cudaHostAllocDefault)); }
  static void free(void* p) { cudaFreeHost(p); }
};

// Device memory (cudaMalloc / cudaFree).
using DeviceBuffer = OwnedBuffer<DeviceAlloc>;
// Page-locked host memory (cudaHostAlloc / cudaFreeHost): staging for asynchronous copies.
using PinnedBuffer = OwnedBuffer<PinnedHostAlloc>;

}  // namespace pagoda::cuda

// Device queries, the NVML memory reading (dlopen'ed: the binary runs without libnvidia-ml), and
// the machine ceilings `pagoda bench` reports ratios against.
#include <dlfcn.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "backend/cuda/blas.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/device.h"
#include "backend/cuda/kernels.h"
#include "common/half.h"
#include "runtime/cuda_executor.h"

namespace pagoda {
namespace cuda {

void cuda_fail(const char* file, int line, const char* expr, const char* msg) {
  std::fprintf(stderr, "%s:%d: CUDA check failed: %s: %s\n", file, line, expr, msg);
  std::fflush(stderr);
  std::abort();
}

namespace {

// The ceilings' GEMM operands: n values in [-1, 1] in steps of 1e-3 (never all zeros), from a
// fixed xorshift sequence, so every probe multiplies the same data.
std::vector<float> probe_values(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t st = 0x9e3779b97f4a7c15ull;
  for (auto& x : v) {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    x = static_cast<float>(static_cast<int64_t>(st % 2001) - 1000) * 1e-3f;
  }
  return v;
}

// The few NVML entry points we use, resolved at run time.
struct Nvml {
  using InitFn = int (*)();
  using HandleByPciFn = int (*)(const char*, void**);
  struct Memory {
    unsigned long long total, free, used;
  };
  using MemFn = int (*)(void*, Memory*);
  bool ok = false;
  HandleByPciFn by_pci = nullptr;
  MemFn memory = nullptr;
};

Nvml& nvml() {
  static Nvml n;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    auto init = reinterpret_cast<Nvml::InitFn>(dlsym(lib, "nvmlInit_v2"));
    n.by_pci = reinterpret_cast<Nvml::HandleByPciFn>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    n.memory = reinterpret_cast<Nvml::MemFn>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
    n.ok = init && n.by_pci && n.memory && init() == 0;
  });
  return n;
}
}  // namespace

DeviceMemoryStats device_memory_stats(int device) {
  DeviceMemoryStats st;
  Nvml& n = nvml();
  if (n.ok) {
    char bus[64] = {};
    void* handle = nullptr;
    Nvml::Memory m{};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), device) == cudaSuccess && n.by_pci(bus, &handle) == 0 &&
        n.memory(handle, &m) == 0) {
      st.used = static_cast<int64_t>(m.used);
      st.total = static_cast<int64_t>(m.total);
      return st;
    }
  }
  size_t free_b = 0, total_b = 0;
  int prev = 0;
  cudaGetDevice(&prev);
  cudaSetDevice(device);
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
    st.used = static_cast<int64_t>(total_b - free_b);
    st.total = static_cast<int64_t>(total_b);
  }
  cudaSetDevice(prev);
  return st;
}

bool nvml_available() { return nvml().ok; }

}  // namespace cuda

bool cuda_available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = e != cudaSuccess ? std::string("no CUDA device: ") + cudaGetErrorString(e) : "no CUDA device visible";
    cudaGetLastError();  // clear the sticky-free error
    return false;
  }
  return true;
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

Result<CudaMemoryInfo> cuda_memory_info(int device) {
  std::string why;
  if (!cuda_available(&why)) return make_status(StatusCode::kNotFound, "{}", why);
  if (device < 0 || device >= cuda_device_count()) return invalid_argument("no CUDA device {}", device);
  CUDA_CHECK(cudaSetDevice(device));
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return CudaMemoryInfo{static_cast<int64_t>(free_b), static_cast<int64_t>(total_b)};
}

Result<CudaCeilings> cuda_measure_ceilings(int device, int64_t copy_bytes, int64_t gemm_n, bool fp8_gemm) {
  std::string why;
  if (!cuda_available(&why)) return make_status(StatusCode::kNotFound, "{}", why);
  CUDA_CHECK(cudaSetDevice(device));
  CudaCeilings c;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  c.device_name = prop.name;
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  // Median device time (ms) of 10 runs of `op` on stream s, each between two events.
  auto median_ms = [&](auto&& op) {
    std::vector<float> ms;
    for (int i = 0; i < 10; ++i) {
      CUDA_CHECK(cudaEventRecord(e0, s));
      op();
      CUDA_CHECK(cudaEventRecord(e1, s));
      CUDA_CHECK(cudaEventSynchronize(e1));
      float t = 0;
      CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return static_cast<double>(ms[ms.size() / 2]);
  };
  {
    // Device-to-device copy of copy_bytes: bandwidth counts bytes read + bytes written. Median of 10.
    cuda::DeviceBuffer a(static_cast<size_t>(copy_bytes)), b(static_cast<size_t>(copy_bytes));
    CUDA_CHECK(cudaMemsetAsync(a.get(), 1, static_cast<size_t>(copy_bytes), s));
    CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), static_cast<size_t>(copy_bytes), cudaMemcpyDeviceToDevice, s));
    const double ms = median_ms([&] {
      CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), static_cast<size_t>(copy_bytes), cudaMemcpyDeviceToDevice, s));
    });
    c.copy_bandwidth = 2.0 * static_cast<double>(copy_bytes) / (ms * 1e-3);
  }
  {
    // cuBLASLt bf16 GEMM n x n x n on random data (never zeros): median of 10 after 3 warm-ups.
    const int64_t n = gemm_n;
    const size_t bytes = static_cast<size_t>(n * n) * 2;
    cuda::DeviceBuffer x(bytes), w(bytes), y(static_cast<size_t>(n * n) * 2), tmp(static_cast<size_t>(n * n) * 4);
    const std::vector<float> host = cuda::probe_values(n * n);
    CUDA_CHECK(cudaMemcpy(tmp.get(), host.data(), host.size() * 4, cudaMemcpyHostToDevice));
    cuda::convert(tmp.get(), DType::kF32, x.get(), DType::kBF16, n * n, s);
    cuda::convert(tmp.get(), DType::kF32, w.get(), DType::kBF16, n * n, s);
    cuda::BlasLt blas;
    for (int i = 0; i < 3; ++i) blas.matmul(x.get(), w.get(), DType::kBF16, n, n, n, y.get(), DType::kBF16, false, s);
    const double ms =
        median_ms([&] { blas.matmul(x.get(), w.get(), DType::kBF16, n, n, n, y.get(), DType::kBF16, false, s); });
    c.bf16_gemm_flops = 2.0 * static_cast<double>(n) * n * n / (ms * 1e-3);
  }
  if (fp8_gemm) {
    // The same values as e4m3 codes (|v| <= 1: normal and subnormal codes), unit scale vectors,
    // bf16 out: the FP8 W8A8 GEMM the engine runs (BlasLt::matmul_fp8). Median of 10 after 3.
    const int64_t n = gemm_n;
    const std::vector<float> values = cuda::probe_values(n * n);
    std::vector<uint8_t> codes(values.size());
    for (size_t i = 0; i < values.size(); ++i) codes[i] = f32_to_fp8_e4m3(values[i]);
    std::vector<float> ones(static_cast<size_t>(n), 1.0f);
    cuda::DeviceBuffer xq(static_cast<size_t>(n * n)), wq(static_cast<size_t>(n * n)), sc(static_cast<size_t>(n) * 4),
        y(static_cast<size_t>(n * n) * 4);
    cuda::BlasLt blas;
    CUDA_CHECK(cudaMemcpy(xq.get(), codes.data(), codes.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(wq.get(), codes.data(), codes.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(sc.get(), ones.data(), ones.size() * 4, cudaMemcpyHostToDevice));
    // Without outer-vector FP8 kernels (matmul_fp8 false): the unscaled GEMM the engine falls back to.
    c.fp8_outer_vec = blas.matmul_fp8(xq.get(), sc.as<float>(), wq.get(), sc.as<float>(), n, n, n, y.get(), DType::kBF16,
                                      false, s);
    auto fp8 = [&] {
      if (c.fp8_outer_vec)
        blas.matmul_fp8(xq.get(), sc.as<float>(), wq.get(), sc.as<float>(), n, n, n, y.get(), DType::kBF16, false, s);
      else
        blas.matmul_fp8_unscaled(xq.get(), wq.get(), n, n, n, y.as<float>(), s);
    };
    for (int i = 0; i < 3; ++i) fp8();
    c.fp8_gemm_flops = 2.0 * static_cast<double>(n) * n * n / (median_ms(fp8) * 1e-3);
  }
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  CUDA_CHECK(cudaStreamDestroy(s));
  return c;
}

}  // namespace pagoda

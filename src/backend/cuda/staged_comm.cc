// The host-staged DeviceComm (runtime/cuda_comm.h): the device data through pinned host memory
// and a TensorParallelComm. Several ranks may share one GPU (NCCL refuses that), so the
// tensor-parallel CUDA forward is tested on a machine with one.
#include "backend/cuda/cuda_common.h"
#include "common/check.h"
#include "runtime/cuda_comm.h"

namespace pagoda {
namespace {

class StagedDeviceComm final : public DeviceComm {
 public:
  StagedDeviceComm(TensorParallelComm& host, int device) : host_(host), device_(device) {}
  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  bool capturable() const override { return false; }

  void all_reduce_sum(float* data, int64_t n, void* stream) override {
    if (n <= 0) return;
    float* h = staging(n);
    copy(h, data, n, cudaMemcpyDeviceToHost, stream);
    host_.all_reduce_sum(h, n);
    copy(data, h, n, cudaMemcpyHostToDevice, stream);
  }

  void all_gather(const float* send, float* recv, int64_t n, void* stream) override {
    if (n <= 0) return;
    const int64_t total = n * size();
    float* h = staging(n + total);
    copy(h, send, n, cudaMemcpyDeviceToHost, stream);
    host_.all_gather_columns(h, 1, n, n * rank(), h + n, total);
    copy(recv, h + n, total, cudaMemcpyHostToDevice, stream);
  }

 private:
  float* staging(int64_t floats) {
    const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
    if (host_buf_.bytes() < bytes) host_buf_.reset(bytes);
    return host_buf_.as<float>();
  }
  // Synchronous on `stream`: the host reads what the device wrote, and the device reads the host
  // data before the buffer is reused.
  void copy(void* dst, const void* src, int64_t floats, cudaMemcpyKind kind, void* stream) {
    CUDA_CHECK(cudaSetDevice(device_));
    auto s = static_cast<cudaStream_t>(stream);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(floats) * sizeof(float), kind, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
  }

  TensorParallelComm& host_;
  int device_;
  cuda::PinnedBuffer host_buf_;
};

}  // namespace

Result<std::unique_ptr<DeviceComm>> make_staged_comm(TensorParallelComm& host, int device) {
  if (host.size() < 1) return invalid_argument("a communicator of {} ranks", host.size());
  return std::unique_ptr<DeviceComm>(std::make_unique<StagedDeviceComm>(host, device));
}

}  // namespace pagoda

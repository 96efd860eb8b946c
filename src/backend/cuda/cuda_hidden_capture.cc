// The CUDA executor's hidden-state capture (ModelExecutor::set_hidden_capture): the residual
// stream after the chosen layers, for the draft heads of speculative decoding (EAGLE-3, MTP). An
// eager step copies the rows straight to pinned host memory; a graph copies them into a device
// buffer, copied to the host after the replay (in the graph's row order, capture_rows_ mapping
// them back to the batch's tokens).
#include <cstring>

#include "backend/cuda/cuda_executor_impl.h"

namespace pagoda::cuda_impl {

bool CudaExecutor::set_hidden_capture(const std::vector<int64_t>& after_layers) {
  if (partial()) return after_layers.empty();
  for (int64_t a : after_layers)
    if (a < 0 || a >= model_.config().num_layers) return false;
  if (after_layers == capture_) return true;
  CUDA_CHECK(cudaSetDevice(opt_.device));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  capture_ = after_layers;
  captured_ = Tensor();
  capture_rows_.clear();
  capture_host_.reset(0);
  capture_host_rows_ = 0;
  const int64_t W = capture_width();
  capture_dev_.reset(static_cast<size_t>(graph_.tok_cap * W) * sizeof(float));
  if (W > 0) reserve_capture_host(std::max<int64_t>(graph_.tok_cap, 256));
  // The graphs copy the captured layers' rows into capture_dev_ (or copy nothing): captured again,
  // at start-up capture now, lazily at each shape's next step otherwise.
  if (!graphs_.empty() || !captured_shapes_.empty()) {
    destroy_graphs();
    if (opt_.cuda_graphs && !cuda::block_trace_enabled() && !lazy_graphs()) capture_graphs();
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  return true;
}

void CudaExecutor::reserve_capture_host(int64_t rows) {
  if (rows <= capture_host_rows_) return;
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // earlier copies into the old buffer
  const int64_t n = align_up(rows, 256);
  capture_host_.reset(static_cast<size_t>(n * capture_width()) * sizeof(float));
  capture_host_rows_ = n;
}

void CudaExecutor::capture_layer(int64_t layer, int64_t T) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream_, &status));
  const bool in_graph = status != cudaStreamCaptureStatusNone;
  const int64_t n = static_cast<int64_t>(capture_.size()), D = d_.D;
  // A graph's rows go to the device buffer; an eager step's (and a graph's warm-up, whose rows
  // nobody reads) straight to pinned host memory.
  PAGODA_CHECK(T <= (in_graph ? graph_.tok_cap : capture_host_rows_), "hidden-state capture of {} rows: the {} buffer holds {}",
               T, in_graph ? "device" : "host", in_graph ? graph_.tok_cap : capture_host_rows_);
  float* dst = in_graph ? capture_dev_.as<float>() : capture_host_.as<float>();
  for (int64_t i = 0; i < n; ++i) {
    if (capture_[static_cast<size_t>(i)] != layer) continue;
    CUDA_CHECK(cudaMemcpy2DAsync(dst + i * D, static_cast<size_t>(n * D) * sizeof(float), residual_.as<float>(),
                                 static_cast<size_t>(D) * sizeof(float), static_cast<size_t>(D) * sizeof(float),
                                 static_cast<size_t>(T), in_graph ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost,
                                 stream_));
  }
}

void CudaExecutor::copy_graph_capture(int64_t rows, const std::vector<int32_t>* map) {
  if (capture_.empty()) return;
  PAGODA_CHECK(rows <= capture_host_rows_ && rows <= graph_.tok_cap, "graph capture rows {}", rows);
  CUDA_CHECK(cudaMemcpyAsync(capture_host_.get(), capture_dev_.get(), static_cast<size_t>(rows * capture_width()) * sizeof(float),
                             cudaMemcpyDeviceToHost, stream_));
  if (map != nullptr) capture_rows_ = *map;
}

void CudaExecutor::finish_capture(int64_t T) {
  if (capture_.empty()) return;
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // already idle after the step's last wait
  const int64_t W = capture_width();
  if (capture_rows_.empty()) {
    captured_ = Tensor::view(DType::kF32, {T, W}, capture_host_.get(), nullptr);
    return;
  }
  PAGODA_CHECK(static_cast<int64_t>(capture_rows_.size()) == T, "capture rows {} for {} tokens", capture_rows_.size(), T);
  captured_ = Tensor::empty(DType::kF32, {T, W});
  const float* src = capture_host_.as<const float>();
  float* dst = captured_.data_as<float>();
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(dst + t * W, src + static_cast<int64_t>(capture_rows_[static_cast<size_t>(t)]) * W,
                static_cast<size_t>(W) * sizeof(float));
}

}  // namespace pagoda::cuda_impl

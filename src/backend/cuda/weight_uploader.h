// Host -> device weight upload through two pinned staging buffers (threads convert into one while
// the other copies). Conversions: same dtype -> memcpy (quantized blocks: into the device layout,
// backend/cuda/quant_layout.h); f32/f16/bf16 -> bf16/f32 elementwise (quant/float_convert.h,
// vectorised); quantized -> dequantized (quant::dequantize_row) then rounded to the target dtype.
// The rows of a chunk are split over a pool of up to 16 threads made once per uploader. The
// destructor waits for the last copy.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_common.h"
#include "common/tensor.h"
#include "common/thread_pool.h"

namespace pagoda::cuda {

class WeightUploader {
 public:
  static constexpr size_t kChunk = size_t{64} << 20;
  explicit WeightUploader(cudaStream_t s);
  ~WeightUploader();
  WeightUploader(const WeightUploader&) = delete;
  WeightUploader& operator=(const WeightUploader&) = delete;

  // Rows [0, rows) of src ([rows, cols], any weight dtype) -> dst as dst_dtype (f32 or bf16/f16
  // storage of the same element size, or src's own quantized dtype: its blocks in the device
  // layout, device_row_bytes a row; not F8E4M3Rows: upload_fp8_rows), contiguous.
  void upload(const Tensor& src, DType dst_dtype, void* dst);
  // An F8E4M3Rows weight [rows, K] in the FP8 device layout (device_weight.h): its codes to
  // `codes` ([rows, K], contiguous), its row scales to `scales` ([rows] f32).
  void upload_fp8_rows(const Tensor& src, void* codes, void* scales);
  void upload_f32(const float* src, int64_t n, void* dst);
  // Bytes of host memory read so far (the source tensors' sizes).
  int64_t bytes_read() const { return bytes_read_; }

 private:
  uint8_t* next();
  void submit(void* dst, size_t bytes);

  cudaStream_t s_;
  PinnedBuffer buf_[2];
  cudaEvent_t ev_[2]{};
  int cur_ = 1;
  ThreadPool pool_;
  int64_t bytes_read_ = 0;
};

}  // namespace pagoda::cuda

#include "backend/cuda/weight_uploader.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/cuda/quant_layout.h"
#include "common/check.h"
#include "common/half.h"
#include "quant/float_convert.h"
#include "quant/quant.h"

namespace pagoda::cuda {
namespace {

int conversion_threads() { return static_cast<int>(std::max(1u, std::min(16u, std::thread::hardware_concurrency()))); }

}  // namespace

WeightUploader::WeightUploader(cudaStream_t s) : s_(s), pool_(conversion_threads()) {
  for (int i = 0; i < 2; ++i) {
    buf_[i].reset(kChunk);
    CUDA_CHECK(cudaEventCreateWithFlags(&ev_[i], cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(ev_[i], s_));
  }
}

WeightUploader::~WeightUploader() {
  cudaStreamSynchronize(s_);
  for (auto& e : ev_) cudaEventDestroy(e);
}

void WeightUploader::upload(const Tensor& src, DType dst_dtype, void* dst) {
  const int64_t rows = src.ndim() == 1 ? 1 : src.rows();
  const int64_t cols = src.ndim() == 1 ? src.numel() : src.dim(-1);
  // Quantized blocks are copied as they are (a native device format); else elements of 2 or 4 bytes.
  PAGODA_CHECK(!is_quantized(dst_dtype) || src.dtype() == dst_dtype, "a quantized device weight is its host blocks");
  PAGODA_CHECK(dst_dtype != DType::kF8E4M3Rows, "FP8 rows go through upload_fp8_rows");
  const int64_t out_row = device_row_bytes(dst_dtype, cols);
  const int64_t per = std::max<int64_t>(1, static_cast<int64_t>(kChunk) / out_row);
  PAGODA_CHECK(out_row <= static_cast<int64_t>(kChunk), "weight row too large for staging");
  for (int64_t r0 = 0; r0 < rows; r0 += per) {
    const int64_t n = std::min(per, rows - r0);
    uint8_t* stage = next();
    const bool float_pair = quant::float_row_convertible(src.dtype(), dst_dtype);
    pool_.parallel_for(n, 16, [&](int64_t b, int64_t en) {
      std::vector<float> tmp;
      for (int64_t r = b; r < en; ++r) {
        const uint8_t* in = static_cast<const uint8_t*>(src.data()) + (r0 + r) * src.row_bytes();
        uint8_t* out = stage + r * out_row;
        if (src.dtype() == dst_dtype) {
          if (is_quantized(dst_dtype)) to_device_quant_layout(dst_dtype, in, out, 1, cols);
          else std::memcpy(out, in, static_cast<size_t>(out_row));
          continue;
        }
        if (float_pair) {
          quant::convert_float_row(src.dtype(), in, dst_dtype, out, cols);
          continue;
        }
        tmp.resize(static_cast<size_t>(cols));
        quant::dequantize_row(src.dtype(), in, tmp.data(), cols);
        if (dst_dtype == DType::kF32) {
          std::memcpy(out, tmp.data(), static_cast<size_t>(cols * 4));
        } else {
          auto* o = reinterpret_cast<uint16_t*>(out);
          for (int64_t i = 0; i < cols; ++i) o[i] = f32_to_bf16(tmp[i]);
        }
      }
    });
    submit(static_cast<uint8_t*>(dst) + r0 * out_row, static_cast<size_t>(n * out_row));
  }
  bytes_read_ += rows * src.row_bytes();
}

void WeightUploader::upload_fp8_rows(const Tensor& src, void* codes, void* scales) {
  PAGODA_CHECK(src.dtype() == DType::kF8E4M3Rows && src.ndim() == 2, "upload_fp8_rows: an F8E4M3Rows matrix");
  const int64_t rows = src.dim(0), K = src.dim(1);
  PAGODA_CHECK(K <= static_cast<int64_t>(kChunk), "weight row too large for staging");
  const int64_t per = static_cast<int64_t>(kChunk) / K;
  std::vector<float> row_scales(static_cast<size_t>(rows));
  for (int64_t r0 = 0; r0 < rows; r0 += per) {
    const int64_t n = std::min(per, rows - r0);
    uint8_t* stage = next();
    pool_.parallel_for(n, 64, [&](int64_t b, int64_t en) {
      for (int64_t r = b; r < en; ++r) {
        const uint8_t* in = src.row_ptr(r0 + r);  // [f32 scale][K codes]
        std::memcpy(&row_scales[static_cast<size_t>(r0 + r)], in, 4);
        std::memcpy(stage + r * K, in + 4, static_cast<size_t>(K));
      }
    });
    submit(static_cast<uint8_t*>(codes) + r0 * K, static_cast<size_t>(n * K));
  }
  upload_f32(row_scales.data(), rows, scales);
  bytes_read_ += rows * src.row_bytes() - rows * 4;  // upload_f32 counted the scales
}

void WeightUploader::upload_f32(const float* src, int64_t n, void* dst) {
  for (int64_t i0 = 0; i0 < n; i0 += static_cast<int64_t>(kChunk / 4)) {
    const int64_t m = std::min<int64_t>(static_cast<int64_t>(kChunk / 4), n - i0);
    uint8_t* stage = next();
    std::memcpy(stage, src + i0, static_cast<size_t>(m * 4));
    submit(static_cast<float*>(dst) + i0, static_cast<size_t>(m * 4));
  }
  bytes_read_ += n * 4;
}

uint8_t* WeightUploader::next() {
  cur_ ^= 1;
  CUDA_CHECK(cudaEventSynchronize(ev_[cur_]));  // the copy that last used this buffer is done
  return buf_[cur_].as<uint8_t>();
}

void WeightUploader::submit(void* dst, size_t bytes) {
  CUDA_CHECK(cudaMemcpyAsync(dst, buf_[cur_].get(), bytes, cudaMemcpyHostToDevice, s_));
  CUDA_CHECK(cudaEventRecord(ev_[cur_], s_));
}

}  // namespace pagoda::cuda

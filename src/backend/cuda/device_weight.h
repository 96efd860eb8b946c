// Typed device weights: a matmul weight on the GPU carries its format, and the executor's matmul
// dispatch checks it against the kernels' rows:
//   - the compute dtype (bf16 or f32): GEMV for few rows, cuBLASLt or the SIMT GEMM otherwise;
//   - a GGUF block-quantized format with kernels (quant_weight_supported: Q4_0 .. Q8_0, Q4_K,
//     Q5_K, Q6_K), kept as the file's blocks: the int8 GEMV for few rows, dequantized into a
//     scratch buffer for cuBLASLt and the SIMT GEMM otherwise.
//   - FP8 E4M3 with a scale per output channel (kF8E4M3Rows: FP8 checkpoints with per-tensor or
//     per-channel scales, --quantization fp8), N and K multiples of 16, all parts of the weight FP8:
//     codes [n, K] then scales [n] f32 at fp8_scales_offset (one segment), a byte a weight; the
//     FP8 GEMV (bf16 activations) for few rows, else dynamic per-token FP8 activations and the
//     cuBLASLt FP8 GEMM with per-token x per-channel scales.
// 2:4 sparse bf16 weights (tuning sparsity; backend/cuda/sparse_2of4.h) trade their dense segment
// for our 2:4 layout (the GEMV) and cuSPARSELt's (the sparse tensor-core GEMM).
// Every other host dtype (f16, other quantized types) is converted or dequantized to the compute
// dtype at load. A fused weight (q/k/v, gate/up) whose parts come in different formats (llama.cpp's
// mixes give attn_v a higher type) is one segment per run of parts of one format, stacked along N.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/quant_layout.h"
#include "common/dtype.h"
#include "model/model_weights.h"

namespace pagoda::cuda {

struct Sparse2of4Weight;  // backend/cuda/sparse_2of4.h

// Rows [row0, row0 + n) of a device weight, all in one format.
struct DeviceWeightSegment {
  DType format = DType::kBF16;
  int64_t row0 = 0, n = 0;
  int64_t offset = 0;          // bytes into the weight's storage (a multiple of kSegmentAlign)
  const void* data = nullptr;  // [n, K] in `format`'s device layout, device_row_bytes(format, K) bytes a row
};

struct DeviceWeight {
  int64_t n = 0, k = 0;         // [N, K] row-major: row i holds the K inputs of output i
  DeviceBuffer storage;         // owned bytes; empty when the segment views another weight (tied output)
  std::vector<DeviceWeightSegment> segments;  // row0 ascending, covering [0, n)
  // Act-order weights (LinearEntry::input_order): [k] i32, column j reads input order[j]; empty:
  // identity. The executor gathers the activations into that order before the matmul.
  DeviceBuffer input_order;
  // A bf16 weight that holds the 2:4 pattern in its two 2:4 layouts (the executor's
  // make_sparse_copies), which free the dense storage: the segment keeps its shape, its data is
  // null. Null: a dense weight.
  std::shared_ptr<const Sparse2of4Weight> sparse;

  bool uniform() const { return segments.size() == 1; }
  DType format() const { return segments.front().format; }  // the first segment's
  const void* data() const { return segments.front().data; }
  bool quantized() const {
    for (const auto& s : segments)
      if (is_quantized(s.format)) return true;
    return false;
  }
  // FP8 (plan_device_weight makes such a weight one segment).
  bool fp8() const { return !segments.empty() && segments.front().format == DType::kF8E4M3Rows; }
};

// The device format a host weight of `host` dtype and `k` inputs gets for compute dtype `compute`
// (bf16 or f32): its own where `native_quant` and the bf16 path has kernels for it, else the compute
// dtype.
DType device_weight_format(DType host, int64_t k, DType compute, bool native_quant);

// An FP8 segment of n rows: its scales' byte offset from the segment's codes (16-byte aligned).
inline int64_t fp8_scales_offset(int64_t n, int64_t k) { return (n * k + 15) / 16 * 16; }
inline const float* fp8_scales(const DeviceWeightSegment& s, int64_t k) {
  return reinterpret_cast<const float*>(static_cast<const uint8_t*>(s.data) + fp8_scales_offset(s.n, k));
}

// Bytes of an [n, k] weight in `format`.
inline int64_t device_weight_bytes(DType format, int64_t n, int64_t k) {
  if (format == DType::kF8E4M3Rows) return fp8_scales_offset(n, k) + n * 4;
  return n * device_row_bytes(format, k);
}

// Segments are placed at multiples of this in one allocation.
constexpr int64_t kSegmentAlign = 256;

// The device layout of a host linear weight (data pointers unset): every part in its
// device_weight_format, adjacent parts of one format merged into a segment, unless some part has
// no native kernels, or FP8 parts sit beside parts of another format: then the whole weight takes
// the compute dtype (one segment). `bytes`: the storage it needs.
std::vector<DeviceWeightSegment> plan_device_weight(const LinearEntry& e, DType compute, bool native_quant,
                                                    int64_t* bytes);

}  // namespace pagoda::cuda

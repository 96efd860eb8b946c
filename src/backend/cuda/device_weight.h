// Typed device weights: a matmul weight on the GPU carries its format, and the executor's matmul
// dispatch checks it against the kernels' rows:
//   - the compute dtype (bf16 or f32): GEMV for few rows, cuBLASLt or the SIMT GEMM otherwise;
//   - a GGUF block-quantized format with kernels (quant_weight_supported: Q4_0 .. Q8_0, Q4_K,
//     Q5_K, Q6_K), kept as the file's blocks: the int8 GEMV for few rows, dequantized into a
//     scratch buffer for cuBLASLt and the SIMT GEMM otherwise.
// Every other host dtype (f16, other quantized types) is converted or dequantized to the compute
// dtype at load. A fused weight (q/k/v, gate/up) whose parts come in different formats (llama.cpp's
// mixes give attn_v a higher type) is one segment per run of parts of one format, stacked along N.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/quant_layout.h"
#include "common/dtype.h"
#include "model/model_weights.h"

namespace pagoda::cuda {

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

  bool uniform() const { return segments.size() == 1; }
  DType format() const { return segments.front().format; }  // the first segment's
  const void* data() const { return segments.front().data; }
  bool quantized() const {
    for (const auto& s : segments)
      if (is_quantized(s.format)) return true;
    return false;
  }
};

// The device format a host weight of `host` dtype gets for compute dtype `compute` (bf16 or f32):
// its own where `native_quant` and the bf16 path has kernels for it, else the compute dtype.
DType device_weight_format(DType host, DType compute, bool native_quant);

// Bytes of an [n, k] weight in `format`.
inline int64_t device_weight_bytes(DType format, int64_t n, int64_t k) { return n * device_row_bytes(format, k); }

// Segments are placed at multiples of this in one allocation.
constexpr int64_t kSegmentAlign = 256;

// The device layout of a host linear weight (data pointers unset): every part in its
// device_weight_format, adjacent parts of one format merged into a segment, unless some part has
// no native kernels: then the whole weight takes the compute dtype (one segment). `bytes`: the
// storage it needs.
std::vector<DeviceWeightSegment> plan_device_weight(const LinearEntry& e, DType compute, bool native_quant,
                                                    int64_t* bytes);

}  // namespace pagoda::cuda

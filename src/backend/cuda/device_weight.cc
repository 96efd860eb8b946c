#include "backend/cuda/device_weight.h"

#include "backend/cuda/kernels.h"

namespace pagoda::cuda {

DType device_weight_format(DType host, int64_t k, DType compute, bool native_quant) {
  if (!native_quant || compute != DType::kBF16) return compute;
  if (host == DType::kF8E4M3Rows) return fp8_weight_supported(k) ? host : compute;
  return quant_weight_supported(host) ? host : compute;
}

std::vector<DeviceWeightSegment> plan_device_weight(const LinearEntry& e, DType compute, bool native_quant,
                                                    int64_t* bytes) {
  const int64_t k = e.k();
  bool all_native = true;
  int fp8_parts = 0;
  for (const Tensor& part : e.parts) {
    all_native = all_native && device_weight_format(part.dtype(), k, compute, native_quant) != compute;
    fp8_parts += part.dtype() == DType::kF8E4M3Rows ? 1 : 0;
  }
  // FP8: every part (one segment), N a multiple of 16 too (the FP8 GEMM's output leading dimension).
  if (fp8_parts != 0 && (fp8_parts != static_cast<int>(e.parts.size()) || e.n() % 16 != 0)) all_native = false;
  std::vector<DeviceWeightSegment> segs;
  int64_t row = 0, offset = 0;
  for (const Tensor& part : e.parts) {
    const DType f = all_native ? part.dtype() : compute;
    if (segs.empty() || segs.back().format != f) {
      if (!segs.empty()) offset += (device_weight_bytes(segs.back().format, segs.back().n, k) + kSegmentAlign - 1) /
                                   kSegmentAlign * kSegmentAlign;
      segs.push_back({f, row, 0, offset, nullptr});
    }
    segs.back().n += part.dim(0);
    row += part.dim(0);
  }
  if (bytes) *bytes = segs.empty() ? 0 : offset + device_weight_bytes(segs.back().format, segs.back().n, k);
  return segs;
}

}  // namespace pagoda::cuda

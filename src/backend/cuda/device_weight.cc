#include "backend/cuda/device_weight.h"

#include "backend/cuda/kernels.h"

namespace pagoda::cuda {

DType device_weight_format(DType host, DType compute, bool native_quant) {
  if (native_quant && compute == DType::kBF16 && quant_weight_supported(host)) return host;
  return compute;
}

std::vector<DeviceWeightSegment> plan_device_weight(const LinearEntry& e, DType compute, bool native_quant,
                                                    int64_t* bytes) {
  const int64_t k = e.k();
  bool all_native = true;
  for (const Tensor& part : e.parts)
    all_native = all_native && device_weight_format(part.dtype(), compute, native_quant) != compute;
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

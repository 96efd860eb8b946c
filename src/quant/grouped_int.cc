#include "quant/grouped_int.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/half.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace pagoda::quant {

float GroupedIntWeight::value(int64_t r, int64_t c) const {
  const int64_t g = r * groups() + c / group;
  return fp16_to_f32(scales[g]) * static_cast<float>(static_cast<int32_t>(codes[r * k + c]) - zeros[g]);
}

Result<DType> native_format(const GroupedIntWeight& w, const std::string& what) {
  if (w.bits != 4 && w.bits != 8)
    return unimplemented("{}: {}-bit integer weights are not supported (4 and 8 are)", what, w.bits);
  if (w.n <= 0 || w.k <= 0 || w.group <= 0 || w.k % w.group != 0)
    return invalid_argument("{}: group size {} does not divide the {} input features", what, w.group, w.k);
  if (w.group % kQK != 0)
    return unimplemented("{}: group size {} is not a multiple of 32, so its groups do not map onto 32-element "
                         "blocks (supported: 32, 64, 128, ... and per-channel)", what, w.group);
  const size_t cells = static_cast<size_t>(w.n * w.groups());
  if (w.codes.size() != static_cast<size_t>(w.n * w.k) || w.zeros.size() != cells || w.scales.size() != cells)
    return invalid_argument("{}: {} codes, {} zero points and {} scales for a [{}, {}] weight in groups of {}", what,
                            w.codes.size(), w.zeros.size(), w.scales.size(), w.n, w.k, w.group);
  const int32_t mid = 1 << (w.bits - 1);
  const bool symmetric = std::all_of(w.zeros.begin(), w.zeros.end(), [mid](int32_t z) { return z == mid; });
  if (w.bits == 4) return symmetric ? DType::kQ4_0 : DType::kQ4_1;
  if (!symmetric)
    return unimplemented("{}: asymmetric 8-bit weights (zero points other than 128) have no exact native layout: "
                         "code - zero needs 9 bits; use a symmetric 8-bit checkpoint", what);
  return DType::kQ8_0;
}

void write_native_rows(const GroupedIntWeight& w, DType format, void* out) {
  const int64_t blocks = w.k / kQK, G = w.groups();
  uint8_t* dst = static_cast<uint8_t*>(out);
  const int64_t rb = row_bytes(format, w.k);
  for (int64_t r = 0; r < w.n; ++r) {
    const uint8_t* codes = w.codes.data() + r * w.k;
    uint8_t* row = dst + r * rb;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t g = r * G + b * kQK / w.group;
      const uint8_t* q = codes + b * kQK;
      if (format == DType::kQ4_0 || format == DType::kQ4_1) {
        uint8_t* qs;
        if (format == DType::kQ4_0) {
          auto* blk = reinterpret_cast<BlockQ4_0*>(row) + b;
          blk->d = w.scales[g];
          qs = blk->qs;
        } else {
          auto* blk = reinterpret_cast<BlockQ4_1*>(row) + b;
          blk->d = w.scales[g];
          blk->m = f32_to_fp16(-fp16_to_f32(w.scales[g]) * static_cast<float>(w.zeros[g]));
          qs = blk->qs;
        }
        for (int j = 0; j < kQK / 2; ++j) qs[j] = static_cast<uint8_t>((q[j] & 15) | ((q[j + kQK / 2] & 15) << 4));
      } else {
        auto* blk = reinterpret_cast<BlockQ8_0*>(row) + b;
        blk->d = w.scales[g];
        for (int j = 0; j < kQK; ++j) blk->qs[j] = static_cast<int8_t>(static_cast<int32_t>(q[j]) - 128);
      }
    }
  }
}

double native_max_error_in_scales(const GroupedIntWeight& w, DType format) {
  const int64_t rb = row_bytes(format, w.k);
  std::vector<uint8_t> row(static_cast<size_t>(rb));
  std::vector<float> got(static_cast<size_t>(w.k));
  GroupedIntWeight one = w;
  double worst = 0;
  for (int64_t r = 0; r < w.n; ++r) {
    // One row at a time: a view of row r as a 1-row weight.
    one.n = 1;
    one.codes.assign(w.codes.begin() + r * w.k, w.codes.begin() + (r + 1) * w.k);
    one.zeros.assign(w.zeros.begin() + r * w.groups(), w.zeros.begin() + (r + 1) * w.groups());
    one.scales.assign(w.scales.begin() + r * w.groups(), w.scales.begin() + (r + 1) * w.groups());
    write_native_rows(one, format, row.data());
    dequantize_row(format, row.data(), got.data(), w.k);
    for (int64_t c = 0; c < w.k; ++c) {
      const double s = std::abs(fp16_to_f32(w.scales[r * w.groups() + c / w.group]));
      if (s == 0) continue;
      worst = std::max(worst, std::abs(static_cast<double>(got[c]) - w.value(r, c)) / s);
    }
  }
  return worst;
}

}  // namespace pagoda::quant

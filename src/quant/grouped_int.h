// Group-wise integer weights (what GPTQ, AWQ and compressed-tensors store once their packing is
// undone) and their exact mapping onto the engine's native block rows.
//
// A GroupedIntWeight is one linear weight W [n, k] (out, in) in the form
//   W[r][c] = scale[r][c / group] * (code[r][c] - zero[r][c / group])
// with unsigned codes of `bits` bits, one integer zero point and one fp16 scale per row and group.
// Computed in f32 this is exact: |code - zero| <= 2^bits needs at most 9 bits and an fp16 scale 11,
// so the product has at most 20 significant bits.
//
// Mapping (native_format / write_native_rows), each 32-element block of a row lying in one group
// (group a multiple of 32):
//   4 bits, every zero 8            Q4_0: d = scale, q = code               exact
//   4 bits, other zeros             Q4_1: d = scale, m = fp16(-scale * zero), q = code
//                                   |error| = |fp16(-s z) + s z| <= 2^-11 |s z| < 2^-11 * 16 |s|
//                                   (fp16 round to nearest of m; 0 when s z is an fp16 value)
//   8 bits, every zero 128          Q8_0: d = scale, q = code - 128          exact
//   8 bits, other zeros             not representable (|code - zero| needs 9 bits): an error
// A group that is not a multiple of 32, or a k that is not a multiple of the group, is an error.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace pagoda::quant {

struct GroupedIntWeight {
  int64_t n = 0;      // rows (output features)
  int64_t k = 0;      // columns (input features)
  int64_t group = 0;  // columns per group; k for one group per row (per-channel)
  int bits = 0;       // 4 or 8
  std::vector<uint8_t> codes;    // [n * k], row-major: codes[r * k + c] in [0, 2^bits)
  std::vector<int32_t> zeros;    // [n * groups()]
  std::vector<uint16_t> scales;  // [n * groups()], IEEE fp16 bits

  int64_t groups() const { return group > 0 ? k / group : 0; }
  // The weight's value at (r, c), in f32 (exact).
  float value(int64_t r, int64_t c) const;
};

// The native format that holds `w` (table above), or an error naming `what` (the tensor) and the
// reason: bits other than 4 / 8, a group that is not a multiple of 32, asymmetric 8-bit, array sizes
// that disagree with n, k and group.
Result<DType> native_format(const GroupedIntWeight& w, const std::string& what);

// Writes w's n rows in `format` (native_format's answer) to `out`: n * row_bytes(format, k) bytes.
void write_native_rows(const GroupedIntWeight& w, DType format, void* out);

// The largest |native value - w.value| over the weight, in units of the element's scale (0 for
// Q4_0 and Q8_0; the fp16 rounding of m for Q4_1). For tests and the load log.
double native_max_error_in_scales(const GroupedIntWeight& w, DType format);

}  // namespace pagoda::quant

#include "quant/float_convert.h"

#include <cstring>

#include "common/check.h"
#include "common/cpu_features.h"
#include "common/half.h"

namespace pagoda::quant {

namespace avx2 {
// float_convert_avx2.cc: the first n - n % 8 elements; false if the pair has no vector path.
bool convert_float_row(DType src_type, const void* src, DType dst_type, void* dst, int64_t n);
}  // namespace avx2

namespace {

float load_one(DType t, const void* src, int64_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(src)[i];
    case DType::kF16: return fp16_to_f32(static_cast<const uint16_t*>(src)[i]);
    default: return bf16_to_f32(static_cast<const uint16_t*>(src)[i]);
  }
}

void convert_tail(DType st, const void* src, DType dt, void* dst, int64_t begin, int64_t n) {
  for (int64_t i = begin; i < n; ++i) {
    const float v = load_one(st, src, i);
    if (dt == DType::kF32) static_cast<float*>(dst)[i] = v;
    else static_cast<uint16_t*>(dst)[i] = f32_to_bf16(v);
  }
}

}  // namespace

bool float_row_convertible(DType s, DType d) {
  const bool src_ok = s == DType::kF32 || s == DType::kF16 || s == DType::kBF16;
  return src_ok && (d == DType::kF32 || d == DType::kBF16);
}

void convert_float_row_scalar(DType st, const void* src, DType dt, void* dst, int64_t n) {
  PAGODA_CHECK(float_row_convertible(st, dt), "no float row conversion {} -> {}", dtype_name(st), dtype_name(dt));
  if (st == dt) {
    std::memcpy(dst, src, static_cast<size_t>(n * dtype_traits(st).block_bytes));
    return;
  }
  convert_tail(st, src, dt, dst, 0, n);
}

void convert_float_row(DType st, const void* src, DType dt, void* dst, int64_t n) {
  PAGODA_CHECK(float_row_convertible(st, dt), "no float row conversion {} -> {}", dtype_name(st), dtype_name(dt));
  if (st == dt) {
    std::memcpy(dst, src, static_cast<size_t>(n * dtype_traits(st).block_bytes));
    return;
  }
  static const bool vector = cpu_features().avx2 && cpu_features().f16c;
  const int64_t head = vector ? n - n % 8 : 0;
  if (head > 0 && !avx2::convert_float_row(st, src, dt, dst, head)) {
    convert_tail(st, src, dt, dst, 0, n);
    return;
  }
  convert_tail(st, src, dt, dst, head, n);
}

}  // namespace pagoda::quant

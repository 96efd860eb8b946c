// Conversions of whole rows between the plain float formats at load time (a device executor
// converting f16 / bf16 / f32 weights to its compute dtype in its staging buffers).
//
// convert_float_row(src_type, src, dst_type, dst, n): n elements of f32, f16 or bf16 -> f32 or
// bf16, bit-identical to quant::dequantize_row followed by f32_to_bf16 (common/half.h: round to
// nearest even, a NaN stays a quiet NaN, subnormals kept) for every input. Vectorised with AVX2 +
// F16C where the CPU has them, scalar otherwise. src and dst must not overlap. Thread-safe.
#pragma once

#include <cstdint>

#include "common/dtype.h"

namespace pagoda::quant {

// Whether convert_float_row accepts the pair.
bool float_row_convertible(DType src_type, DType dst_type);
void convert_float_row(DType src_type, const void* src, DType dst_type, void* dst, int64_t n);
// The scalar path alone (the oracle the tests compare the vector path with).
void convert_float_row_scalar(DType src_type, const void* src, DType dst_type, void* dst, int64_t n);

}  // namespace pagoda::quant

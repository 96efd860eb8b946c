// Quantized block formats as dtypes: scalar reference conversions, bit-compatible with GGUF/ggml
// layouts. Fast per-ISA dot products and matmuls live in backend/cpu/; these are the oracles.
#pragma once

#include <cstdint>

#include "common/dtype.h"

namespace pagoda::quant {

// src: one row of n elements in dtype t (n a multiple of t's block size); dst: n floats.
// Defined for f32, f16, bf16 and every quantized dtype whose traits say weight_supported, plus
// the activation formats q8_1 and q8_k.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// Reference quantizer (round-to-nearest as ggml's *_ref functions): n floats -> one row in dtype t.
void quantize_row(DType t, const float* src, void* dst, int64_t n);

}  // namespace pagoda::quant

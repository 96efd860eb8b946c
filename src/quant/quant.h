// Quantized block formats as dtypes: scalar reference conversions, bit-compatible with GGUF/ggml
// layouts (block structs in quant/blocks.h). Fast per-ISA kernels live in backend/cpu/; these are
// the oracles they are tested against.
//
// The traits table (quant_ops) is the "adding a format is adding a row" seam: per dtype, the
// reference row conversions and the scalar dot product against its activation partner format.
#pragma once

#include <cstdint>

#include "common/dtype.h"

namespace pagoda::quant {

// src: one row of n elements in dtype t (n a multiple of t's block size); dst: n floats.
// Defined for f32, f16, bf16 and every quantized dtype whose traits say weight_supported, plus
// the activation formats q8_1 and q8_k.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// Reference quantizer: n floats -> one row in dtype t. Legacy formats (q4_0 ... q8_1) round to
// nearest exactly as ggml's *_ref functions (the gguf Python package quantizes bit-identically);
// the k-quants use our own scale search (any valid encoding is a valid GGUF block).
void quantize_row(DType t, const float* src, void* dst, int64_t n);

using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);
// Dot product of one weight row (format t) with one activation row (format vec_dot_type), n
// elements; integer arithmetic within blocks as the fast kernels do. Scalar reference.
using VecDotFn = float (*)(const void* w, const void* a, int64_t n);

struct QuantOps {
  DType dtype;
  int64_t block_size;
  int64_t block_bytes;
  ToFloatFn to_float;      // dequantize_row
  FromFloatFn from_float;  // quantize_row (reference)
  DType vec_dot_type;      // format the activations are quantized to for vec_dot (f32: none)
  VecDotFn vec_dot;        // null for activation-only formats
};

// The table row of t, or nullptr when t has no conversions (i8, q2_k, ...).
const QuantOps* quant_ops(DType t);

// Convenience: dot of weight row w (dtype t) with activation row a (dtype quant_ops(t)->vec_dot_type).
float vec_dot(DType t, const void* w, const void* a, int64_t n);

}  // namespace pagoda::quant

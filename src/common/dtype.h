// Element types, including quantized block formats (ggml's traits-table idea: a quantized format is
// a dtype with a block size and a byte size per block; kernels for it live in quant/).
//
// Values of DType equal GGUF's ggml_type ids so the loader can map them 1:1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace pagoda {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  // Not a GGUF type (dtype_traits_of never returns it): the FP8 E4M3 KV cache of the CUDA backend
  // (1 sign, 4 exponent, 3 mantissa bits, bias 7, no infinities, max 448; half.h converts).
  kF8E4M3 = 0x1000,
  // Not a GGUF type: an FP8 W8A8 linear weight row, one f32 scale then K E4M3 codes ([f32 s][K
  // codes], w[k] = s * e4m3(code[k])). FP8 checkpoints with per-tensor or per-channel scales and
  // `--quantization fp8` load into it for the CUDA backend (decisions.md#d80); the CPU backend
  // gets them as bf16(w) (model_loader.h ModelLoadOptions::fp8_rows).
  kF8E4M3Rows = 0x1001,
};

struct DTypeTraits {
  DType dtype;
  std::string_view name;    // "f32", "q4_k", ...
  int64_t block_size;       // elements per block (1 for plain types)
  int64_t block_bytes;      // bytes per block
  bool quantized;
  bool weight_supported;    // the engine can run matmuls with weights of this type
  // For a GGUF type the engine can read but not compute with: why, and what to use instead
  // (empty when weight_supported or for the plain integer types).
  std::string_view unsupported_hint = {};
  // Bytes a row carries besides its blocks (kF8E4M3Rows: its f32 scale); 0 for every GGUF type.
  int64_t row_scale_bytes = 0;
};

// Traits of a known dtype; nullopt for an id we do not know (e.g. a corrupt GGUF type field).
std::optional<DTypeTraits> dtype_traits_of(uint32_t raw);
const DTypeTraits& dtype_traits(DType t);
inline std::string_view dtype_name(DType t) { return dtype_traits(t).name; }
std::optional<DType> dtype_from_name(std::string_view name);  // "f16", "Q8_0", "bf16" (case-insensitive)

// The element types a KV cache stores: f32, f16, bf16 and (CUDA only) f8_e4m3. The memory planner,
// the CLIs, the CUDA executor and its kernels check against this one list.
inline bool kv_cache_dtype_supported(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kF8E4M3;
}

// Bytes of a row of `n` elements; n must be a multiple of the block size.
inline int64_t row_bytes(DType t, int64_t n) {
  const auto& tr = dtype_traits(t);
  return n / tr.block_size * tr.block_bytes + tr.row_scale_bytes;
}
inline bool is_quantized(DType t) { return dtype_traits(t).quantized; }

}  // namespace pagoda

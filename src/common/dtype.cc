#include "common/dtype.h"

#include <array>
#include <cctype>
#include <string>

#include "common/check.h"

namespace pagoda {
namespace {

constexpr std::string_view kGridHint =
    "its codebook grids are not implemented; use a Q2_K, Q3_K_M, IQ4_XS or Q4_K_M file of the model (llama-quantize "
    "writes them from the F16/BF16 GGUF)";

constexpr std::array kTraits = {
    DTypeTraits{DType::kF32, "f32", 1, 4, false, true},
    DTypeTraits{DType::kF16, "f16", 1, 2, false, true},
    DTypeTraits{DType::kBF16, "bf16", 1, 2, false, true},
    DTypeTraits{DType::kQ4_0, "q4_0", 32, 18, true, true},
    DTypeTraits{DType::kQ4_1, "q4_1", 32, 20, true, true},
    DTypeTraits{DType::kQ5_0, "q5_0", 32, 22, true, true},
    DTypeTraits{DType::kQ5_1, "q5_1", 32, 24, true, true},
    DTypeTraits{DType::kQ8_0, "q8_0", 32, 34, true, true},
    DTypeTraits{DType::kQ8_1, "q8_1", 32, 36, true, false},
    DTypeTraits{DType::kQ2_K, "q2_k", 256, 84, true, true},
    DTypeTraits{DType::kQ3_K, "q3_k", 256, 110, true, true},
    DTypeTraits{DType::kQ4_K, "q4_k", 256, 144, true, true},
    DTypeTraits{DType::kQ5_K, "q5_k", 256, 176, true, true},
    DTypeTraits{DType::kQ6_K, "q6_k", 256, 210, true, true},
    DTypeTraits{DType::kQ8_K, "q8_k", 256, 292, true, false},
    DTypeTraits{DType::kIQ4_NL, "iq4_nl", 32, 18, true, true},
    DTypeTraits{DType::kIQ4_XS, "iq4_xs", 256, 136, true, true},
    DTypeTraits{DType::kTQ1_0, "tq1_0", 256, 54, true, true},
    DTypeTraits{DType::kTQ2_0, "tq2_0", 256, 66, true, true},
    // The grid-codebook i-quants: their lookup grids are not part of this engine.
    DTypeTraits{DType::kIQ2_XXS, "iq2_xxs", 256, 66, true, false, kGridHint},
    DTypeTraits{DType::kIQ2_XS, "iq2_xs", 256, 74, true, false, kGridHint},
    DTypeTraits{DType::kIQ2_S, "iq2_s", 256, 82, true, false, kGridHint},
    DTypeTraits{DType::kIQ3_XXS, "iq3_xxs", 256, 98, true, false, kGridHint},
    DTypeTraits{DType::kIQ3_S, "iq3_s", 256, 110, true, false, kGridHint},
    DTypeTraits{DType::kIQ1_S, "iq1_s", 256, 50, true, false, kGridHint},
    DTypeTraits{DType::kIQ1_M, "iq1_m", 256, 56, true, false, kGridHint},
    DTypeTraits{DType::kMXFP4, "mxfp4", 32, 17, true, false,
                "mxfp4 (a mixture-of-experts format) is not supported yet; use a Q8_0, Q6_K or Q4_K_M file"},
    DTypeTraits{DType::kI8, "i8", 1, 1, false, false},
    DTypeTraits{DType::kI16, "i16", 1, 2, false, false},
    DTypeTraits{DType::kI32, "i32", 1, 4, false, false},
    DTypeTraits{DType::kI64, "i64", 1, 8, false, false},
    DTypeTraits{DType::kF64, "f64", 1, 8, false, false},
    DTypeTraits{DType::kF8E4M3, "f8_e4m3", 1, 1, false, false},
    DTypeTraits{DType::kF8E4M3Rows, "f8_e4m3_rows", 1, 1, true, true, {}, 4},
};

}  // namespace

std::optional<DTypeTraits> dtype_traits_of(uint32_t raw) {
  for (const auto& t : kTraits)
    if (static_cast<uint32_t>(t.dtype) == raw && static_cast<uint32_t>(t.dtype) < 0x1000) return t;  // GGUF ids only
  return std::nullopt;
}

const DTypeTraits& dtype_traits(DType t) {
  for (const auto& tr : kTraits)
    if (tr.dtype == t) return tr;
  PAGODA_CHECK(false, "unknown dtype id {}", static_cast<uint32_t>(t));
}

std::optional<DType> dtype_from_name(std::string_view name) {
  std::string lower(name);
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "fp8") return DType::kF8E4M3;  // vLLM's name for the E4M3 KV cache
  for (const auto& t : kTraits)
    if (t.name == lower) return t.dtype;
  return std::nullopt;
}

}  // namespace pagoda

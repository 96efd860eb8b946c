#include "common/dtype.h"

#include <array>
#include <cctype>
#include <string>

#include "common/check.h"

namespace pagoda {
namespace {

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
    DTypeTraits{DType::kQ2_K, "q2_k", 256, 84, true, false},
    DTypeTraits{DType::kQ3_K, "q3_k", 256, 110, true, false},
    DTypeTraits{DType::kQ4_K, "q4_k", 256, 144, true, true},
    DTypeTraits{DType::kQ5_K, "q5_k", 256, 176, true, true},
    DTypeTraits{DType::kQ6_K, "q6_k", 256, 210, true, true},
    DTypeTraits{DType::kQ8_K, "q8_k", 256, 292, true, false},
    DTypeTraits{DType::kI8, "i8", 1, 1, false, false},
    DTypeTraits{DType::kI16, "i16", 1, 2, false, false},
    DTypeTraits{DType::kI32, "i32", 1, 4, false, false},
    DTypeTraits{DType::kI64, "i64", 1, 8, false, false},
    DTypeTraits{DType::kF64, "f64", 1, 8, false, false},
    DTypeTraits{DType::kF8E4M3, "f8_e4m3", 1, 1, false, false},
};

}  // namespace

std::optional<DTypeTraits> dtype_traits_of(uint32_t raw) {
  for (const auto& t : kTraits)
    if (static_cast<uint32_t>(t.dtype) == raw && t.dtype != DType::kF8E4M3) return t;  // GGUF ids only
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

#include "model/tensor_table.h"

#include <fmt/ranges.h>

namespace pagoda {

Status validate_tensor_table(const std::vector<TensorDecl>& table, WeightNaming naming, const TensorLookup& lookup) {
  for (const auto& d : table) {
    const std::string& name = decl_name(d, naming);
    if (name.empty()) continue;
    auto found = lookup(name);
    if (!found.ok()) {
      if (found.status().code() != StatusCode::kNotFound) return found.status();
      if (d.required) return not_found("model is missing tensor '{}' (expected shape [{}])", name, fmt::join(d.shape, ", "));
      continue;
    }
    const Tensor* t = *found;
    if (t->shape() != d.shape)
      return invalid_argument("tensor '{}' has shape {}, expected [{}]", name, t->shape_string(), fmt::join(d.shape, ", "));
    const auto& tr = dtype_traits(t->dtype());
    const bool float_type = t->dtype() == DType::kF32 || t->dtype() == DType::kF16 || t->dtype() == DType::kBF16;
    if (d.linear && !tr.weight_supported) {
      if (!tr.unsupported_hint.empty())
        return unimplemented("tensor '{}': unsupported type {} ({})", name, tr.name, tr.unsupported_hint);
      return unimplemented("tensor '{}' has dtype {}, which is not supported for weights", name, tr.name);
    }
    if (!d.linear && !float_type && !(d.gguf_name == "token_embd.weight" && tr.weight_supported))
      return unimplemented("tensor '{}' has dtype {}; expected f32, f16 or bf16", name, tr.name);
  }
  return {};
}

}  // namespace pagoda

#include "model/tensor_table.h"

#include <fmt/ranges.h>

namespace pagoda {

std::string expert_tensor_name(const TensorDecl& d, int64_t e) {
  return fmt::format(fmt::runtime(d.hf_name), e);
}

namespace {

Status validate_one(const TensorDecl& d, const std::string& name, const std::vector<int64_t>& shape,
                    const TensorLookup& lookup, DType* dtype_out);

}  // namespace

Status validate_tensor_table(const std::vector<TensorDecl>& table, WeightNaming naming, const TensorLookup& lookup) {
  for (const auto& d : table) {
    const std::string& name = decl_name(d, naming);
    if (name.empty()) continue;
    if (d.experts > 0 && naming == WeightNaming::kHuggingFace) {
      // One tensor per expert, each [N, K], all of one dtype (the experts are one stacked weight).
      const std::vector<int64_t> shape(d.shape.begin() + 1, d.shape.end());
      DType first = DType::kF32;
      for (int64_t e = 0; e < d.experts; ++e) {
        DType dt = DType::kF32;
        const std::string en = expert_tensor_name(d, e);
        PAGODA_RETURN_IF_ERROR(validate_one(d, en, shape, lookup, &dt));
        if (e == 0) first = dt;
        if (dt != first)
          return invalid_argument("expert tensor '{}' has dtype {}, expert 0's has {}: the experts of a layer must "
                                  "share one dtype", en, dtype_name(dt), dtype_name(first));
      }
      continue;
    }
    PAGODA_RETURN_IF_ERROR(validate_one(d, name, d.shape, lookup, nullptr));
  }
  return {};
}

namespace {

Status validate_one(const TensorDecl& d, const std::string& name, const std::vector<int64_t>& shape,
                    const TensorLookup& lookup, DType* dtype_out) {
  {
    auto found = lookup(name);
    if (!found.ok()) {
      if (found.status().code() != StatusCode::kNotFound) return found.status();
      if (d.required) return not_found("model is missing tensor '{}' (expected shape [{}])", name, fmt::join(shape, ", "));
      return {};
    }
    const Tensor* t = *found;
    if (dtype_out != nullptr) *dtype_out = t->dtype();
    if (t->shape() != shape)
      return invalid_argument("tensor '{}' has shape {}, expected [{}]{}", name, t->shape_string(), fmt::join(shape, ", "),
                              d.experts > 0 && shape.size() == 3
                                  ? fmt::format(" ({} experts of [{}, {}])", d.experts, shape[1], shape[2])
                                  : std::string());
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

}  // namespace

}  // namespace pagoda

#include "model/family.h"

#include <algorithm>

#include "model/families/families.h"

namespace pagoda {
namespace {

// One line per family.
const Family* const kFamilies[] = {&llama_family(), &gemma_family(), &moe_family(), &phi3_family()};

}  // namespace

const Family* find_family(std::string_view arch) {
  for (const Family* f : kFamilies)
    for (std::string_view a : f->architectures)
      if (a == arch) return f;
  return nullptr;
}

const Family& family_of(const ModelConfig& config) {
  const Family* f = find_family(arch_family_name(config.family));
  PAGODA_CHECK(f != nullptr, "no family runs {}", arch_family_name(config.family));
  return *f;
}

int64_t declared_parameter_count(const ModelConfig& config) {
  int64_t n = 0;
  for (const auto& d : family_of(config).tensor_table(config)) {
    if (!d.required) continue;
    int64_t e = 1;
    for (int64_t x : d.shape) e *= x;
    n += e;
  }
  return n;
}

ParameterFootprint parameter_footprint(const ModelConfig& config,
                                      const std::function<int64_t(const TensorDecl&)>& bytes_of) {
  ParameterFootprint f;
  bool tied = true;
  for (const auto& d : family_of(config).tensor_table(config))
    if (d.gguf_name == "output.weight") tied = bytes_of(d) < 0;
  for (const auto& d : family_of(config).tensor_table(config)) {
    const int64_t bytes = bytes_of(d);
    if (bytes < 0) continue;
    int64_t n = 1;
    for (int64_t x : d.shape) n *= x;
    f.total_parameters += n;
    f.total_bytes += bytes;
    if (d.experts > 0) {
      // k of the E experts' slices are read per token (each expert has the same bytes).
      f.active_parameters += n / d.experts * config.num_experts_per_tok;
      f.bytes_per_token += bytes / d.experts * config.num_experts_per_tok;
    } else if (d.gguf_name == "token_embd.weight" && !tied) {
      f.active_parameters += n;
      f.bytes_per_token += bytes / std::max<int64_t>(1, d.shape[0]);  // one row looked up
    } else {
      f.active_parameters += n;
      f.bytes_per_token += bytes;
    }
  }
  return f;
}

std::string supported_architectures() {
  std::string out;
  for (const Family* f : kFamilies)
    for (std::string_view a : f->architectures) {
      if (!out.empty()) out += ", ";
      out += a;
    }
  return out;
}

}  // namespace pagoda

#include "model/family.h"

#include "model/families/families.h"

namespace pagoda {
namespace {

// One line per family.
const Family* const kFamilies[] = {&llama_family(), &gemma_family()};

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

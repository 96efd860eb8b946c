#include "model/weight_table_reader.h"

#include "common/check.h"
#include "common/mapped_file.h"
#include "ops/linear.h"

namespace pagoda {

const std::string& WeightTableReader::name_of(const std::string& gguf_name) const {
  for (const auto& d : table_)
    if (d.gguf_name == gguf_name) return decl_name(d, naming_);
  PAGODA_CHECK(false, "no declaration for {}", gguf_name);
}

const Tensor* WeightTableReader::find(const std::string& gguf_name) const {
  const std::string& name = name_of(gguf_name);
  if (name.empty()) return nullptr;
  auto r = lookup_(name);
  return r.ok() ? *r : nullptr;
}

Result<LinearId> WeightTableReader::add_linear(ModelWeights& w, std::initializer_list<std::string> gguf_names,
                                               const std::string& label) {
  LinearEntry e;
  e.name = label;
  for (const std::string& g : gguf_names) {
    const Tensor& t = *find(g);
    const int64_t block = dtype_traits(t.dtype()).block_size;
    if (!e.parts.empty() && t.dim(1) != e.parts[0].dim(1))
      return invalid_argument("'{}': fused weights differ in K ({} and {})", label, t.shape_string(),
                              e.parts[0].shape_string());
    if (t.dim(1) % block != 0)
      return invalid_argument("'{}' {}: K must be a multiple of {}'s block of {}", g, t.shape_string(),
                              dtype_traits(t.dtype()).name, block);
    e.parts.push_back(t);
  }
  if (cpu_kernels_) {
    if (e.parts.size() == 1) {
      PAGODA_ASSIGN_OR_RETURN(e.cpu, prepare_linear(e.parts[0], label));
    } else {
      PAGODA_ASSIGN_OR_RETURN(e.cpu, prepare_linear_fused(e.parts, label));
    }
    // A fused weight owns a concatenated copy or a repacked one: the mapped originals are not
    // read again by the CPU kernels (a device executor reads the parts once, at upload).
    if (e.parts.size() > 1 || linear_weight_repacked(*e.cpu))
      for (const std::string& g : gguf_names) releasable_.push_back(find(g));
  }
  return w.add_linear(std::move(e));
}

void WeightTableReader::release_prepared(const ModelWeights& w) const {
  for (const Tensor* t : releasable_)
    if (t->data() != w.token_embd.data()) release_mapped_pages(t->data(), static_cast<size_t>(t->nbytes()));
}

}  // namespace pagoda

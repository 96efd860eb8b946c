#include "model/weight_table_reader.h"

#include "common/check.h"
#include "common/log.h"
#include "common/mapped_file.h"
#include "common/plan_file.h"
#include "ops/elementwise.h"
#include "ops/linear.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

namespace pagoda {

const TensorDecl& WeightTableReader::decl_of(const std::string& gguf_name) const {
  for (const auto& d : table_)
    if (d.gguf_name == gguf_name) return d;
  PAGODA_CHECK(false, "no declaration for {}", gguf_name);
  __builtin_unreachable();
}

const std::string& WeightTableReader::name_of(const std::string& gguf_name) const {
  return decl_name(decl_of(gguf_name), naming_);
}

const Tensor* WeightTableReader::find(const std::string& gguf_name) const {
  const std::string& name = name_of(gguf_name);
  if (name.empty()) return nullptr;
  auto r = lookup_(name);
  return r.ok() ? *r : nullptr;
}

Status WeightTableReader::add_output_head(ModelWeights& w) {
  w.tied_output = find("output.weight") == nullptr;
  PAGODA_ASSIGN_OR_RETURN(const LinearId output, add_linear(w, w.tied_output ? "token_embd.weight" : "output.weight"));
  w.output = output;
  return Status::ok_status();
}

Tensor WeightTableReader::f32_concat(std::initializer_list<std::string> gguf_names) const {
  std::vector<Tensor> parts;
  for (const std::string& g : gguf_names)
    if (const Tensor* t = find(g)) parts.push_back(to_f32(*t));
  if (parts.empty()) return Tensor();
  if (parts.size() == 1) return parts[0];
  int64_t n = 0;
  for (const Tensor& p : parts) n += p.numel();
  Tensor cat = Tensor::empty(DType::kF32, {n});
  int64_t off = 0;
  for (const Tensor& p : parts) {
    std::copy_n(p.data_as<const float>(), p.numel(), cat.data_as<float>() + off);
    off += p.numel();
  }
  return cat;
}

Result<LinearId> WeightTableReader::add_linear(ModelWeights& w, std::initializer_list<std::string> gguf_names,
                                               const std::string& label) {
  std::vector<Tensor> parts, orders;
  std::vector<std::string> names;
  for (const std::string& g : gguf_names) {
    parts.push_back(*find(g));
    names.push_back(g);
    orders.push_back(input_order_of(name_of(g)));
  }
  return add_parts(w, std::move(parts), names, label, decl_of(*gguf_names.begin()).layer, orders);
}

Tensor WeightTableReader::input_order_of(const std::string& checkpoint_name) const {
  if (naming_ != WeightNaming::kHuggingFace || !checkpoint_name.ends_with(".weight")) return {};
  auto r = lookup_(checkpoint_name.substr(0, checkpoint_name.size() - 7) + ".input_order");
  return r.ok() ? **r : Tensor();
}

Tensor WeightTableReader::expert_matrix(const std::string& gguf_name, int64_t e) const {
  const TensorDecl& d = decl_of(gguf_name);
  if (naming_ == WeightNaming::kGguf) {
    const Tensor& t = *find(gguf_name);
    return t.slice_rows(e, e + 1).reshape({t.dim(1), t.dim(2)});
  }
  auto r = lookup_(expert_tensor_name(d, e));
  PAGODA_CHECK(r.ok(), "expert tensor {} vanished after validation", expert_tensor_name(d, e));
  PAGODA_CHECK(!input_order_of(expert_tensor_name(d, e)).defined(), "act-order expert {} reached the reader",
               expert_tensor_name(d, e));
  return **r;
}

Result<ExpertSetId> WeightTableReader::add_experts(ModelWeights& w, const std::string& gate, const std::string& up,
                                                   const std::string& down, const std::string& label) {
  const int64_t E = decl_of(gate).experts;
  if (naming_ == WeightNaming::kHuggingFace)
    for (const std::string* g : {&gate, &up, &down})
      for (int64_t e = 0; e < E; ++e)
        if (input_order_of(expert_tensor_name(decl_of(*g), e)).defined())
          return unimplemented("expert tensor '{}' is an act-order weight (g_idx): not supported for experts",
                               expert_tensor_name(decl_of(*g), e));
  PAGODA_CHECK(E > 0 && decl_of(up).experts == E && decl_of(down).experts == E, "{}: not stacked expert declarations", label);
  ExpertSet set;
  set.name = label;
  for (int64_t e = 0; e < E; ++e) {
    const std::string el = fmt::format("{}.{}", label, e);
    PAGODA_ASSIGN_OR_RETURN(LinearId gu, add_parts(w, {expert_matrix(gate, e), expert_matrix(up, e)},
                                                   {fmt::format("{}[{}]", gate, e), fmt::format("{}[{}]", up, e)},
                                                   el + ".gate_up", decl_of(gate).layer));
    PAGODA_ASSIGN_OR_RETURN(LinearId dn, add_parts(w, {expert_matrix(down, e)}, {fmt::format("{}[{}]", down, e)},
                                                   el + ".down", decl_of(down).layer));
    set.gate_up.push_back(gu);
    set.down.push_back(dn);
  }
  return w.add_expert_set(std::move(set));
}

Result<LinearId> WeightTableReader::add_parts(ModelWeights& w, std::vector<Tensor> parts,
                                              const std::vector<std::string>& names, const std::string& label,
                                              int64_t layer, const std::vector<Tensor>& orders) {
  LinearEntry e;
  e.name = label;
  // Fused parts read one input: their act-order permutations must be one (GPTQ gives q/k/v the
  // same one when they were quantized from the same inputs; gate/up likewise).
  for (size_t i = 0; i < orders.size(); ++i) {
    const Tensor& o = orders[i];
    const Tensor& first = orders[0];
    if (o.defined() != first.defined() ||
        (o.defined() && (o.numel() != first.numel() || std::memcmp(o.data(), first.data(), static_cast<size_t>(o.nbytes())) != 0)))
      return unimplemented("'{}': the fused weights '{}' and '{}' have different act-order input orders (g_idx), so "
                           "they cannot share one input", label, names[0], names[i]);
    if (o.defined() && (o.dtype() != DType::kI32 || o.ndim() != 1 || o.dim(0) != parts[i].dim(1)))
      return invalid_argument("'{}': input order {} for a weight of K = {}", names[i], o.shape_string(), parts[i].dim(1));
  }
  if (!orders.empty()) e.input_order = orders[0];
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& t = parts[i];
    const std::string& g = names[i];
    const int64_t block = dtype_traits(t.dtype()).block_size;
    if (!e.parts.empty() && t.dim(1) != e.parts[0].dim(1))
      return invalid_argument("'{}': fused weights differ in K ({} and {})", label, t.shape_string(),
                              e.parts[0].shape_string());
    if (t.dim(1) % block != 0)
      return invalid_argument("'{}' {}: K must be a multiple of {}'s block of {}", g, t.shape_string(),
                              dtype_traits(t.dtype()).name, block);
    e.parts.push_back(t);
  }
  const LinearId id = w.add_linear(std::move(e));
  if (cpu_kernels_) pending_.push_back({id, label, layer});
  return id;
}

Status WeightTableReader::finish(ModelWeights& w, int threads) {
  ModelLoadParams p;
  p.load_threads = threads;
  return finish(w, p);
}

Status WeightTableReader::finish(ModelWeights& w, const ModelLoadParams& params) {
  const int threads = params.load_threads;
  // A layer split's device layers keep plain views of the checkpoint (the device part reads them).
  std::erase_if(pending_, [&](const Pending& p) { return p.layer >= 0 && p.layer < params.cpu_kernels_from_layer; });
  // Preparing reads every mapped page of a weight (and repacks it): the bulk of a CPU load. Each
  // entry is independent, so a few threads take them in turn. A weight whose packed layout the
  // plan holds is not read at all.
  std::vector<Result<std::shared_ptr<const LinearWeight>>> prepared(pending_.size(), Status(StatusCode::kInternal, "not prepared"));
  std::atomic<size_t> next{0};
  std::atomic<int64_t> reused{0};
  auto work = [&] {
    for (size_t i = next++; i < pending_.size(); i = next++) {
      const LinearEntry& e = w.linears.at(static_cast<size_t>(pending_[i].id.index));
      if (params.packed_in != nullptr) {
        const std::span<const uint8_t> packed = params.packed_in->section(kPackedSectionPrefix + pending_[i].label);
        if (!packed.empty()) {
          auto lw = prepare_linear_prepacked(e.parts, pending_[i].label, packed, params.packed_in->mapping());
          if (lw.ok()) {
            prepared[i] = std::move(lw);
            ++reused;
            continue;
          }
          log_warn("load", "plan: {}; repacking it", lw.status().message());
        }
      }
      prepared[i] = e.parts.size() == 1 ? prepare_linear(e.parts[0], pending_[i].label)
                                        : prepare_linear_fused(e.parts, pending_[i].label);
    }
  };
  const int n = std::max(1, std::min<int>(threads, static_cast<int>(pending_.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (!prepared[i].ok()) return prepared[i].status();
    LinearEntry& e = w.linears.at(static_cast<size_t>(pending_[i].id.index));
    e.cpu = std::move(prepared[i]).value();
    if (e.input_order.defined()) e.cpu = with_input_order(e.cpu, e.input_order);
    // A fused weight owns a concatenated copy or a repacked one: the mapped originals are not
    // read again by the CPU kernels (a device executor reads the parts once, at upload).
    if (e.parts.size() > 1 || linear_weight_repacked(*e.cpu))
      releasable_.insert(releasable_.end(), e.parts.begin(), e.parts.end());
    if (params.packed_out != nullptr)
      if (const std::span<const uint8_t> packed = linear_weight_packed(*e.cpu); !packed.empty())
        params.packed_out->add_view(kPackedSectionPrefix + pending_[i].label, packed.data(), packed.size());
  }
  packed_reused_ = reused.load();
  if (params.packed_counts != nullptr) {
    int64_t packed = 0;
    for (const Pending& pd : pending_)
      if (!linear_weight_packed(*w.linears.at(static_cast<size_t>(pd.id.index)).cpu).empty()) ++packed;
    params.packed_counts->weights += packed;
    params.packed_counts->reused += packed_reused_;
  }
  pending_.clear();
  release_prepared(w);
  return {};
}

void WeightTableReader::release_prepared(const ModelWeights& w) const {
  for (const Tensor& t : releasable_)
    if (t.data() != w.token_embd.data()) release_mapped_pages(t.data(), static_cast<size_t>(t.nbytes()));
}

}  // namespace pagoda

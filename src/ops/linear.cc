// Linear layer front end: validation, then the CPU backend (backend/cpu/linear.cc).
#include "ops/linear.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/isa.h"
#include "backend/cpu/linear_cpu.h"
#include "quant/quant.h"

namespace pagoda {

Result<std::shared_ptr<const LinearWeight>> prepare_linear(const Tensor& w, const std::string& name) {
  return prepare_linear(w, name, IsaLevel::kAmx);
}

Result<std::shared_ptr<const LinearWeight>> prepare_linear(const Tensor& w, const std::string& name,
                                                           IsaLevel max_isa) {
  if (!w.defined()) return invalid_argument("linear weight '{}' is undefined", name);
  if (w.device() != Device::kCpu) return invalid_argument("linear weight '{}' is not on the CPU", name);
  if (w.ndim() != 2) return invalid_argument("linear weight '{}' must be 2-d, got {}", name, w.shape_string());
  const auto& tr = dtype_traits(w.dtype());
  const quant::QuantOps* ops = quant::quant_ops(w.dtype());
  if (!tr.weight_supported || ops == nullptr || ops->vec_dot == nullptr)
    return unimplemented("linear weight '{}': dtype {} is not supported for matmuls", name, tr.name);
  if (w.dim(1) % tr.block_size != 0 || w.dim(0) <= 0 || w.dim(1) <= 0)
    return invalid_argument("linear weight '{}' {}: K must be a positive multiple of {}", name, w.shape_string(),
                            tr.block_size);
  IsaLevel isa = cpu::active_isa_level();
  if (static_cast<int>(max_isa) < static_cast<int>(isa)) isa = max_isa;
  std::shared_ptr<const LinearWeight> lw = cpu::prepare_linear_cpu(w, name, isa);
  return lw;
}

Result<std::shared_ptr<const LinearWeight>> prepare_linear_fused(const std::vector<Tensor>& ws,
                                                                 const std::string& name) {
  return prepare_linear_fused(ws, name, IsaLevel::kAmx);
}

namespace {

// Parts [b, e) of ws (one dtype) concatenated along N and prepared; the concatenated copy is
// dropped when the kernels read a packed one.
Result<std::shared_ptr<const LinearWeight>> prepare_run(const std::vector<Tensor>& ws, size_t b, size_t e,
                                                        const std::string& name, IsaLevel max_isa) {
  int64_t n = 0;
  for (size_t i = b; i < e; ++i) n += ws[i].dim(0);
  Tensor cat = Tensor::empty(ws[b].dtype(), {n, ws[b].dim(1)});
  int64_t row = 0;
  for (size_t i = b; i < e; ++i) {
    std::memcpy(cat.row_ptr(row), ws[i].data(), static_cast<size_t>(ws[i].nbytes()));
    row += ws[i].dim(0);
  }
  PAGODA_ASSIGN_OR_RETURN(auto prepared, prepare_linear(cat, name, max_isa));
  if (prepared->pack != cpu::PackKind::kNone) {
    // The kernels read the packed copy: drop the concatenated one (keep shape and dtype).
    auto lw = std::const_pointer_cast<LinearWeight>(prepared);
    lw->weight = Tensor::view(cat.dtype(), cat.shape(), nullptr, nullptr);
  }
  return prepared;
}

}  // namespace

Result<std::shared_ptr<const LinearWeight>> prepare_linear_fused(const std::vector<Tensor>& ws,
                                                                 const std::string& name, IsaLevel max_isa) {
  if (ws.empty()) return invalid_argument("fused linear '{}': no weights", name);
  for (const Tensor& w : ws) {
    if (!w.defined() || w.ndim() != 2 || w.dim(1) != ws[0].dim(1))
      return invalid_argument("fused linear '{}': weights must be 2-d with one K, got {} and {}", name,
                              w.shape_string(), ws[0].shape_string());
    if (w.device() != Device::kCpu) return invalid_argument("fused linear '{}': a weight is not on the CPU", name);
  }
  // One sub-weight per run of consecutive equal-dtype parts.
  std::vector<std::shared_ptr<const LinearWeight>> runs;
  for (size_t b = 0; b < ws.size();) {
    size_t e = b + 1;
    while (e < ws.size() && ws[e].dtype() == ws[b].dtype()) ++e;
    const std::string run_name = b == 0 && e == ws.size() ? name : fmt::format("{}[{}:{}]", name, b, e);
    PAGODA_ASSIGN_OR_RETURN(auto run, prepare_run(ws, b, e, run_name, max_isa));
    runs.push_back(std::move(run));
    b = e;
  }
  if (runs.size() == 1) return runs[0];
  std::shared_ptr<const LinearWeight> mixed = cpu::make_mixed_linear(std::move(runs), name);
  return mixed;
}

std::vector<Tensor> linear_weight_parts(const LinearWeight& w) {
  if (w.parts.empty()) return {w.weight};
  std::vector<Tensor> out;
  for (const auto& p : w.parts) out.push_back(p->weight);
  return out;
}

bool linear_weight_mixed(const LinearWeight& w) { return !w.parts.empty(); }

std::span<const uint8_t> linear_weight_packed(const LinearWeight& w) {
  if (!w.parts.empty() || w.pack == cpu::PackKind::kNone || w.packed == nullptr) return {};
  return {static_cast<const uint8_t*>(w.packed.get()), static_cast<size_t>(cpu::packed_bytes(w.dtype, w.n, w.k))};
}

Result<std::shared_ptr<const LinearWeight>> prepare_linear_prepacked(const std::vector<Tensor>& parts,
                                                                     const std::string& name,
                                                                     std::span<const uint8_t> packed,
                                                                     std::shared_ptr<const void> owner) {
  if (parts.empty()) return invalid_argument("linear '{}': no weights", name);
  int64_t n = 0;
  for (const Tensor& t : parts) {
    if (!t.defined() || t.ndim() != 2 || t.dim(1) != parts[0].dim(1) || t.dtype() != parts[0].dtype())
      return invalid_argument("prepacked linear '{}': parts must be 2-d of one dtype and K", name);
    n += t.dim(0);
  }
  const Tensor view = parts.size() == 1 ? parts[0] : Tensor::view(parts[0].dtype(), {n, parts[0].dim(1)}, nullptr, nullptr);
  const IsaLevel isa = cpu::active_isa_level();
  // The mapping is read-only; the kernels never write a packed weight.
  std::shared_ptr<void> data(std::const_pointer_cast<void>(owner), const_cast<uint8_t*>(packed.data()));
  std::shared_ptr<const LinearWeight> lw = cpu::prepare_linear_cpu_prepacked(view, name, isa, std::move(data), packed.size());
  if (lw == nullptr)
    return invalid_argument("prepacked linear '{}': {} bytes is not the {} packed size of {} [{}, {}] here", name,
                            packed.size(), isa_level_name(isa), dtype_name(view.dtype()), view.dim(0), view.dim(1));
  return lw;
}

const Tensor& linear_weight_tensor(const LinearWeight& w) { return w.weight; }
IsaLevel linear_weight_isa(const LinearWeight& w) { return w.isa; }
bool linear_weight_repacked(const LinearWeight& w) {
  if (!w.parts.empty()) {
    for (const auto& p : w.parts)
      if (p->pack != cpu::PackKind::kNone) return true;
    return false;
  }
  return w.pack != cpu::PackKind::kNone;
}

void linear(const LinearWeight& w, const Tensor& x, Tensor& y, ThreadPool& pool) {
  PAGODA_CHECK(x.dtype() == DType::kF32 && y.dtype() == DType::kF32, "linear '{}': x and y must be f32", w.name);
  PAGODA_CHECK(x.ndim() >= 1 && x.dim(-1) == w.k, "linear '{}': x {} does not match K = {}", w.name, x.shape_string(),
               w.k);
  PAGODA_CHECK(y.ndim() >= 1 && y.dim(-1) == w.n && y.rows() == x.rows(), "linear '{}': y {} for x {} and N = {}",
               w.name, y.shape_string(), x.shape_string(), w.n);
  linear(w, x.data_as<const float>(), x.rows(), y.data_as<float>(), pool);
}

std::shared_ptr<const LinearWeight> with_input_order(std::shared_ptr<const LinearWeight> w, const Tensor& order) {
  PAGODA_CHECK(order.dtype() == DType::kI32 && order.ndim() == 1 && order.dim(0) == w->k, "linear '{}': input order {} for K = {}",
               w->name, order.shape_string(), w->k);
  auto out = std::make_shared<LinearWeight>(*w);  // shares the packed bytes
  const int32_t* o = order.data_as<const int32_t>();
  out->input_order.assign(o, o + w->k);
  std::vector<bool> seen(static_cast<size_t>(w->k), false);
  for (int32_t j : out->input_order) {
    PAGODA_CHECK(j >= 0 && j < w->k && !seen[static_cast<size_t>(j)], "linear '{}': input order is not a permutation", w->name);
    seen[static_cast<size_t>(j)] = true;
  }
  return out;
}

void linear(const LinearWeight& w, const float* x, int64_t m, float* y, ThreadPool& pool) {
  if (w.input_order.empty()) return cpu::linear_cpu(w, x, m, y, pool);
  // Act-order: the rows of x gathered into the weight's column order (one copy per call).
  thread_local std::vector<float> gathered;
  gathered.resize(static_cast<size_t>(m * w.k));
  const int32_t* order = w.input_order.data();
  for (int64_t r = 0; r < m; ++r) {
    const float* src = x + r * w.k;
    float* dst = gathered.data() + r * w.k;
    for (int64_t j = 0; j < w.k; ++j) dst[j] = src[order[j]];
  }
  cpu::linear_cpu(w, gathered.data(), m, y, pool);
}

}  // namespace pagoda

// The CPU backends of the op-test harness (op_cases/op_backend.h): the ops/ front ends at every
// ISA level this machine runs and this build has kernels for, two threads.
#include <cstring>
#include <span>

#include "common/thread_pool.h"
#include "ops/activation.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "op_cases/op_backend.h"
#include "test_util.h"

namespace pagoda::test {
namespace {

Tensor tensor_of(const std::vector<float>& v, std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(DType::kF32, std::move(shape));
  std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
  return t;
}
std::vector<float> values_of(const Tensor& t) {
  const float* p = t.data_as<float>();
  return std::vector<float>(p, p + t.numel());
}

class CpuOpBackend final : public OpBackend {
 public:
  explicit CpuOpBackend(IsaLevel isa) : isa_(isa), pool_(2) {}
  std::string name() const override {
    std::string n = std::string("cpu_") + isa_level_name(isa_);
    for (char& c : n)
      if (c == '-') c = '_';  // a test name: letters, digits and '_'
    return n;
  }

  std::vector<float> rms_norm(const std::vector<float>& x, const std::vector<float>& w, int64_t T, int64_t D,
                              double eps) override {
    ScopedIsaCap cap(isa_);
    Tensor out = Tensor::empty(DType::kF32, {T, D});
    pagoda::rms_norm(tensor_of(x, {T, D}), tensor_of(w, {D}), eps, out, pool_);
    return values_of(out);
  }
  std::vector<float> gated_activation(const std::vector<float>& gate_up, int64_t T, int64_t F,
                                      GateActivation act) override {
    ScopedIsaCap cap(isa_);
    Tensor out = Tensor::empty(DType::kF32, {T, F});
    const Tensor gu = tensor_of(gate_up, {T, 2 * F});
    if (act == GateActivation::kSilu)
      swiglu_fused(gu, out, pool_);
    else
      geglu_tanh_fused(gu, out, pool_);
    return values_of(out);
  }
  bool embeds_exactly(DType) const override { return true; }  // rows dequantized as dequantize_row does
  std::vector<float> embedding(const Tensor& table, const std::vector<int32_t>& ids) override {
    ScopedIsaCap cap(isa_);
    Tensor out = Tensor::empty(DType::kF32, {static_cast<int64_t>(ids.size()), table.dim(1)});
    embedding_lookup(table, std::span<const int32_t>(ids), out, pool_);
    return values_of(out);
  }
  std::vector<float> linear(const Tensor& w, const std::vector<float>& x, int64_t M) override {
    ScopedIsaCap cap(isa_);
    auto lw = prepare_linear(w, "w", isa_);
    PAGODA_CHECK(lw.ok(), "prepare_linear: {}", lw.status().to_string());
    std::vector<float> y(M * w.dim(0));
    pagoda::linear(**lw, x.data(), M, y.data(), pool_);
    return y;
  }

 private:
  IsaLevel isa_;
  ThreadPool pool_;
};

}  // namespace

std::vector<std::shared_ptr<OpBackend>> make_op_backends() {
  std::vector<std::shared_ptr<OpBackend>> v;
  for (IsaLevel isa : supported_isa_levels()) v.push_back(std::make_shared<CpuOpBackend>(isa));
  return v;
}

}  // namespace pagoda::test

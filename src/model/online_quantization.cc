#include "model/online_quantization.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/half.h"
#include "common/log.h"
#include "common/thread_pool.h"
#include "loader/hf_model_dir.h"
#include "model/family.h"
#include "quant/grouped_int.h"
#include "quant/quant.h"
#include "quant/rtn.h"

namespace pagoda {
namespace {

// One checkpoint tensor to quantize: its name, the source tensor and the format it becomes.
struct Target {
  std::string name;
  const Tensor* tensor = nullptr;
  DType format = DType::kF32;
};

Result<std::vector<Target>> plan_targets(const ModelConfig& config, const WeightSource& source, WeightQuantization q) {
  const std::string what = fmt::format("--quantization {}", weight_quantization_name(q));
  if (const HfModelDir* d = source.hf_dir()) {
    const nlohmann::json& c = d->config();
    if (c.contains("quantization_config")) {
      const auto& qc = c["quantization_config"];
      const std::string method = qc.is_object() ? qc.value("quant_method", std::string("?")) : std::string("?");
      return invalid_argument("{}: '{}' is already quantized (config.json quantization_config, quant_method '{}'); "
                              "on-line quantization takes a 16-bit or f32 checkpoint (load this one without --quantization)",
                              what, source.path(), method);
    }
  }
  const WeightNaming naming = source.format() == WeightFormat::kGguf ? WeightNaming::kGguf : WeightNaming::kHuggingFace;
  std::vector<Target> out;
  for (const TensorDecl& d : family_of(config).tensor_table(config)) {
    if (!quantizable_linear(d)) continue;
    const std::optional<DType> format = online_quantized_format(d, q);
    std::vector<std::string> names;
    if (d.experts > 0 && naming == WeightNaming::kHuggingFace) {
      for (int64_t e = 0; e < d.experts; ++e) names.push_back(expert_tensor_name(d, e));
    } else {
      names.push_back(decl_name(d, naming));
    }
    for (const std::string& name : names) {
      const Tensor* t = source.find(name);
      if (t == nullptr) continue;  // an absent optional tensor; the family's load reports missing required ones
      const DType dt = t->dtype();
      if (dt != DType::kF32 && dt != DType::kF16 && dt != DType::kBF16)
        return invalid_argument("{}: tensor '{}' of {} is already quantized ({}); on-line quantization takes a 16-bit "
                                "or f32 checkpoint (load this one without --quantization)",
                                what, name, source.path(), t->shape_string());
      if (!format) continue;  // an input size that is not a multiple of 32: stays
      out.push_back({name, t, *format});
    }
  }
  return out;
}

Tensor quantize_tensor(const Tensor& src, DType format, WeightQuantization q) {
  const int64_t k = src.dim(-1), rows = src.rows();
  Tensor out = Tensor::empty(format, src.shape());
  const int64_t group = online_quantization_group(k, q);
  constexpr int64_t kRowsPerChunk = 64;
  std::vector<float> f(static_cast<size_t>(kRowsPerChunk * k));
  for (int64_t r0 = 0; r0 < rows; r0 += kRowsPerChunk) {
    const int64_t n = std::min(kRowsPerChunk, rows - r0);
    for (int64_t r = 0; r < n; ++r) quant::dequantize_row(src.dtype(), src.row_ptr(r0 + r), f.data() + r * k, k);
    if (q == WeightQuantization::kInt4) {
      for (int64_t r = 0; r < n; ++r) quant::quantize_row(DType::kQ4_0, f.data() + r * k, out.row_ptr(r0 + r), k);
    } else if (q == WeightQuantization::kFp8) {
      for (int64_t r = 0; r < n; ++r) quant::quantize_row(DType::kF8E4M3Rows, f.data() + r * k, out.row_ptr(r0 + r), k);
    } else {
      const quant::GroupedIntWeight w = quant::rtn_gptq(f.data(), n, k, 8, group, /*symmetric=*/true);
      quant::write_native_rows(w, format, out.row_ptr(r0));
    }
  }
  return out;
}

}  // namespace

Result<WeightQuantization> parse_weight_quantization(std::string_view name) {
  if (name == "none" || name.empty()) return WeightQuantization::kNone;
  if (name == "int4") return WeightQuantization::kInt4;
  if (name == "int8") return WeightQuantization::kInt8;
  if (name == "fp8") return WeightQuantization::kFp8;
  return invalid_argument("unknown quantization '{}' (none, {})", name, kWeightQuantizationModes);
}

std::string_view weight_quantization_name(WeightQuantization q) {
  switch (q) {
    case WeightQuantization::kNone: return "none";
    case WeightQuantization::kInt4: return "int4";
    case WeightQuantization::kInt8: return "int8";
    case WeightQuantization::kFp8: return "fp8";
  }
  return "?";
}

bool quantizable_linear(const TensorDecl& d) {
  return d.linear && d.layer >= 0 && d.gguf_name.find("ffn_gate_inp") == std::string::npos;  // routers stay
}

int64_t online_quantization_group(int64_t k, WeightQuantization q) {
  if (q == WeightQuantization::kNone || k <= 0 || k % 32 != 0) return 0;
  if (q == WeightQuantization::kInt4) return 32;  // one Q4_0 block: its own fp16 scale costs nothing more
  return k;  // int8, fp8: per output channel
}

std::optional<DType> online_quantized_format(const TensorDecl& d, WeightQuantization q) {
  if (q == WeightQuantization::kNone || !quantizable_linear(d) || d.shape.empty()) return std::nullopt;
  if (online_quantization_group(d.shape.back(), q) == 0) return std::nullopt;
  switch (q) {
    case WeightQuantization::kInt4: return DType::kQ4_0;
    case WeightQuantization::kInt8: return DType::kQ8_0;
    case WeightQuantization::kFp8: return DType::kF8E4M3Rows;
    case WeightQuantization::kNone: break;
  }
  return std::nullopt;
}

namespace {

// Bytes of `rows` rows of `k` in `format` as the load keeps them (F8E4M3Rows as bf16 unless fp8_rows).
int64_t kept_bytes(DType format, int64_t rows, int64_t k, bool fp8_rows) {
  if (format == DType::kF8E4M3Rows && !fp8_rows) format = DType::kBF16;
  return rows * row_bytes(format, k);
}

}  // namespace

Result<int64_t> online_quantized_bytes(const ModelConfig& config, const WeightSource& source, WeightQuantization q,
                                       bool fp8_rows) {
  int64_t bytes = 0;
  for (const std::string& name : source.names())
    if (const Tensor* t = source.find(name))
      bytes += t->dtype() == DType::kF8E4M3Rows ? kept_bytes(t->dtype(), t->rows(), t->dim(-1), fp8_rows) : t->nbytes();
  if (q == WeightQuantization::kNone) return bytes;
  PAGODA_ASSIGN_OR_RETURN(const std::vector<Target> targets, plan_targets(config, source, q));
  for (const Target& t : targets)
    bytes += kept_bytes(t.format, t.tensor->rows(), t.tensor->dim(-1), fp8_rows) - t.tensor->nbytes();
  return bytes;
}

Result<std::unique_ptr<WeightSource>> fp8_rows_as_bf16(std::unique_ptr<WeightSource> source, int threads) {
  std::vector<std::pair<std::string, const Tensor*>> targets;
  for (const std::string& name : source->names())
    if (const Tensor* t = source->find(name); t != nullptr && t->dtype() == DType::kF8E4M3Rows) targets.emplace_back(name, t);
  if (targets.empty()) return source;
  std::vector<Tensor> done(targets.size());
  std::atomic<size_t> next{0};
  ThreadPool pool(threads);
  pool.run([&](int, int) {
    std::vector<float> f;
    for (size_t i = next++; i < targets.size(); i = next++) {
      const Tensor& src = *targets[i].second;
      const int64_t k = src.dim(-1);
      Tensor out = Tensor::empty(DType::kBF16, src.shape());
      f.resize(static_cast<size_t>(k));
      for (int64_t r = 0; r < src.rows(); ++r) {
        quant::dequantize_row(DType::kF8E4M3Rows, src.row_ptr(r), f.data(), k);
        auto* o = reinterpret_cast<uint16_t*>(out.row_ptr(r));
        for (int64_t c = 0; c < k; ++c) o[c] = f32_to_bf16(f[static_cast<size_t>(c)]);
      }
      done[i] = std::move(out);
    }
  });
  std::map<std::string, Tensor> replaced;
  for (size_t i = 0; i < targets.size(); ++i) replaced.emplace(targets[i].first, std::move(done[i]));
  return overlay_weight_source(std::move(source), std::move(replaced));
}

Result<std::unique_ptr<WeightSource>> quantize_weight_source(std::unique_ptr<WeightSource> source,
                                                             const ModelConfig& config, WeightQuantization q,
                                                             int threads) {
  if (q == WeightQuantization::kNone) return source;
  PAGODA_ASSIGN_OR_RETURN(const std::vector<Target> targets, plan_targets(config, *source, q));
  std::vector<Tensor> done(targets.size());
  std::atomic<size_t> next{0};  // tensors differ in size: each worker takes the next one
  ThreadPool pool(threads);
  pool.run([&](int, int) {
    for (size_t i = next++; i < targets.size(); i = next++) done[i] = quantize_tensor(*targets[i].tensor, targets[i].format, q);
  });
  std::map<std::string, Tensor> replaced;
  int64_t before = 0, after = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    before += targets[i].tensor->nbytes();
    after += done[i].nbytes();
    replaced.emplace(targets[i].name, std::move(done[i]));
  }
  log_info("quantize", "--quantization {}: {} linears quantized to {} ({:.1f} MiB -> {:.1f} MiB)", weight_quantization_name(q),
           targets.size(), targets.empty() ? "-" : std::string(dtype_name(targets[0].format)),
           static_cast<double>(before) / 1048576.0, static_cast<double>(after) / 1048576.0);
  return overlay_weight_source(std::move(source), std::move(replaced));
}

}  // namespace pagoda

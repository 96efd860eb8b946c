#include "model/checkpoint_quantizer.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "loader/hf_model_dir.h"
#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "loader/weight_source.h"
#include "model/family.h"
#include "model/model_loader.h"
#include "model/online_quantization.h"
#include "quant/quant.h"

namespace pagoda {
namespace fs = std::filesystem;

Result<QuantizeCheckpointReport> quantize_checkpoint(const std::string& in_dir, const std::string& out_dir,
                                                     const PackedIntSpec& spec,
                                                     const std::function<void(int64_t, int64_t)>& progress) {
  PAGODA_RETURN_IF_ERROR(spec.validate());
  std::error_code ec;
  if (!fs::is_directory(in_dir, ec))
    return invalid_argument("'{}' is not a Hugging Face model directory (config.json + safetensors): pagoda quantize "
                            "reads and writes those", in_dir);
  if (fs::exists(out_dir, ec) && !(fs::is_directory(out_dir, ec) && fs::is_empty(out_dir, ec)))
    return invalid_argument("'{}' exists and is not an empty directory", out_dir);
  PAGODA_ASSIGN_OR_RETURN(std::shared_ptr<HfModelDir> dir, HfModelDir::open(in_dir));
  if (dir->config().contains("quantization_config"))
    return invalid_argument("'{}' is already quantized (config.json has quantization_config); pagoda quantize takes a "
                            "16-bit or f32 checkpoint", in_dir);
  PAGODA_ASSIGN_OR_RETURN(std::unique_ptr<WeightSource> source, make_weight_source(dir));
  PAGODA_ASSIGN_OR_RETURN(const ModelConfig config, model_config_from_source(*source));

  // "<m>.weight" of every decoder linear.
  std::set<std::string> linears;
  for (const TensorDecl& d : family_of(config).tensor_table(config)) {
    if (!quantizable_linear(d)) continue;
    if (d.experts > 0) {
      for (int64_t e = 0; e < d.experts; ++e) linears.insert(expert_tensor_name(d, e));
    } else {
      linears.insert(d.hf_name);
    }
  }
  QuantizeCheckpointReport report;
  std::vector<SafetensorsEntry> entries;
  // One module's packed tensors, made when its first part is written, handed out part by part.
  struct Pending {
    std::map<std::string, std::vector<uint8_t>> parts;
  };
  auto pending = std::make_shared<std::map<std::string, Pending>>();
  auto packed_done = std::make_shared<int64_t>(0);
  int64_t total_linears = 0;
  for (const auto& [name, entry] : dir->tensors()) {
    const SafetensorsTensorInfo& info = *entry.info;
    report.input_bytes += static_cast<int64_t>(info.nbytes());
    if (!linears.count(name)) {
      const SafetensorsFile* file = entry.file;
      const SafetensorsTensorInfo* ip = entry.info;
      entries.push_back({name, info.dtype_name, info.shape, info.nbytes(), [file, ip]() -> Result<std::vector<uint8_t>> {
                           const auto b = file->tensor_bytes(*ip);
                           return std::vector<uint8_t>(b.begin(), b.end());
                         }});
      continue;
    }
    const Tensor* t = source->find(name);
    if (t == nullptr || (t->dtype() != DType::kF32 && t->dtype() != DType::kF16 && t->dtype() != DType::kBF16))
      return invalid_argument("'{}' in {} is {}: pagoda quantize takes f32, f16 or bf16 linear weights", name, in_dir,
                              info.dtype_name);
    if (t->ndim() != 2) return invalid_argument("'{}' in {}: a linear weight [out, in], not {}", name, in_dir, t->shape_string());
    const int64_t n = t->dim(0), k = t->dim(1);
    const std::string module = name.substr(0, name.size() - std::string_view(".weight").size());
    auto layout = packed_layout(spec, n, k);
    if (!layout.ok()) return Status(layout.status().code(), fmt::format("{} {}: {}", name, t->shape_string(), layout.status().message()));
    ++total_linears;
    for (const PackedTensor& p : *layout) {
      const std::string part = p.suffix;
      uint64_t nbytes = safetensors_element_bytes(p.dtype_name).value_or(0);  // 0: the writer refuses the dtype
      for (int64_t d : p.shape) nbytes *= static_cast<uint64_t>(d);
      entries.push_back({module + "." + part, p.dtype_name, p.shape, nbytes,
                         [t, module, part, spec, pending, packed_done, &progress, &total_linears]() -> Result<std::vector<uint8_t>> {
                           auto it = pending->find(module);
                           if (it == pending->end()) {
                             const int64_t n = t->dim(0), k = t->dim(1);
                             std::vector<float> w(static_cast<size_t>(n * k));
                             for (int64_t r = 0; r < n; ++r) quant::dequantize_row(t->dtype(), t->row_ptr(r), w.data() + r * k, k);
                             PAGODA_ASSIGN_OR_RETURN(std::vector<PackedTensor> packed, pack_linear(spec, w.data(), n, k));
                             Pending p;
                             for (PackedTensor& x : packed) p.parts.emplace(x.suffix, std::move(x.bytes));
                             it = pending->emplace(module, std::move(p)).first;
                             ++*packed_done;
                             if (progress) progress(*packed_done, total_linears);
                           }
                           auto pit = it->second.parts.find(part);
                           std::vector<uint8_t> bytes = std::move(pit->second);
                           it->second.parts.erase(pit);
                           if (it->second.parts.empty()) pending->erase(it);
                           return bytes;
                         }});
    }
  }
  report.linears = total_linears;
  if (total_linears == 0) return invalid_argument("'{}' has no decoder linear weights to quantize", in_dir);
  fs::create_directories(out_dir, ec);
  if (ec) return io_error("cannot create '{}': {}", out_dir, ec.message());
  for (const SafetensorsEntry& e : entries) report.output_bytes += static_cast<int64_t>(e.nbytes);
  PAGODA_RETURN_IF_ERROR(write_safetensors(out_dir + "/" + HfModelDir::kSingleFile, std::move(entries)));
  nlohmann::json cfg = dir->config();
  cfg["quantization_config"] = quantization_config(spec);
  {
    std::ofstream out(out_dir + "/" + HfModelDir::kConfigFile);
    out << cfg.dump(2) << "\n";
    if (!out) return io_error("cannot write '{}/{}'", out_dir, HfModelDir::kConfigFile);
  }
  // The rest of the directory (tokenizer, generation config, ...): copied.
  for (const auto& f : fs::directory_iterator(in_dir, ec)) {
    const std::string fname = f.path().filename().string();
    if (!f.is_regular_file() || fname == HfModelDir::kConfigFile || fname == HfModelDir::kIndexFile ||
        fname.ends_with(".safetensors") || fname.ends_with(".gguf") || fname.ends_with(".bin") || fname.ends_with(".pt"))
      continue;
    fs::copy_file(f.path(), fs::path(out_dir) / fname, fs::copy_options::overwrite_existing, ec);
    if (ec) return io_error("cannot copy '{}' to '{}': {}", f.path().string(), out_dir, ec.message());
  }
  return report;
}

}  // namespace pagoda

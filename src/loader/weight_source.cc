#include "loader/weight_source.h"

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "loader/gguf.h"
#include "loader/hf_model_dir.h"
#include "loader/packed_int_checkpoint.h"
#include "loader/safetensors.h"

namespace pagoda {
namespace {

// All formats reduce to a table of name -> tensor (or the reason it cannot be used).
class TableWeightSource final : public WeightSource {
 public:
  struct Entry {
    Tensor tensor;  // defined when usable
    Status status;  // why not, otherwise
  };

  TableWeightSource(WeightFormat format, std::string path) : format_(format), path_(std::move(path)) {}

  WeightFormat format() const override { return format_; }
  const std::string& path() const override { return path_; }
  const Tensor* find(const std::string& name) const override {
    auto it = table_.find(name);
    return it == table_.end() || !it->second.status.ok() ? nullptr : &it->second.tensor;
  }
  Result<const Tensor*> get(const std::string& name) const override {
    auto it = table_.find(name);
    if (it == table_.end())
      return not_found("tensor '{}' not found in {} {}", name, weight_format_name(format_), path_);
    if (!it->second.status.ok()) return it->second.status;
    return &it->second.tensor;
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    out.reserve(table_.size());
    for (const auto& [name, e] : table_) out.push_back(name);
    return out;
  }
  const GgufFile* gguf() const override { return gguf_.get(); }
  const HfModelDir* hf_dir() const override { return hf_.get(); }
  const SafetensorsFile* safetensors() const override { return st_.get(); }

  std::map<std::string, Entry> table_;
  std::shared_ptr<const GgufFile> gguf_;
  std::shared_ptr<const HfModelDir> hf_;
  std::shared_ptr<const SafetensorsFile> st_;

 private:
  WeightFormat format_;
  std::string path_;
};

class OverlayWeightSource final : public WeightSource {
 public:
  OverlayWeightSource(std::shared_ptr<const WeightSource> base, std::map<std::string, Tensor> replaced)
      : base_(std::move(base)), replaced_(std::move(replaced)) {}
  WeightFormat format() const override { return base_->format(); }
  const std::string& path() const override { return base_->path(); }
  const Tensor* find(const std::string& name) const override {
    auto it = replaced_.find(name);
    return it != replaced_.end() ? &it->second : base_->find(name);
  }
  Result<const Tensor*> get(const std::string& name) const override {
    auto it = replaced_.find(name);
    if (it != replaced_.end()) return &it->second;
    return base_->get(name);
  }
  std::vector<std::string> names() const override { return base_->names(); }
  const GgufFile* gguf() const override { return base_->gguf(); }
  const HfModelDir* hf_dir() const override { return base_->hf_dir(); }
  const SafetensorsFile* safetensors() const override { return base_->safetensors(); }

 private:
  std::shared_ptr<const WeightSource> base_;
  std::map<std::string, Tensor> replaced_;
};

void add_safetensors(TableWeightSource* src, const SafetensorsFile& file,
                     const SafetensorsTensorInfo& info) {
  TableWeightSource::Entry e;
  auto t = file.to_tensor(info);
  if (t.ok()) {
    e.tensor = std::move(t).value();
  } else {
    e.status = t.status();
  }
  src->table_.emplace(info.name, std::move(e));
}

}  // namespace

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kGguf: return "GGUF file";
    case WeightFormat::kHfDir: return "Hugging Face directory";
    case WeightFormat::kSafetensors: return "safetensors file";
    case WeightFormat::kRandom: return "random";
  }
  return "?";
}

std::string WeightSource::describe() const {
  if (format() == WeightFormat::kRandom) return fmt::format("random weights for {} ({} tensors)", path(), names().size());
  return fmt::format("{} {} ({} tensors)", weight_format_name(format()), path(), names().size());
}

std::unique_ptr<WeightSource> make_weight_source(WeightFormat format, std::string path, std::map<std::string, Tensor> tensors) {
  auto src = std::make_unique<TableWeightSource>(format, std::move(path));
  for (auto& [name, t] : tensors) src->table_.emplace(name, TableWeightSource::Entry{std::move(t), Status()});
  return src;
}

std::unique_ptr<WeightSource> overlay_weight_source(std::shared_ptr<const WeightSource> base,
                                                    std::map<std::string, Tensor> replaced) {
  return std::make_unique<OverlayWeightSource>(std::move(base), std::move(replaced));
}

Result<std::unique_ptr<WeightSource>> make_weight_source(std::shared_ptr<const GgufFile> gguf) {
  auto src = std::make_unique<TableWeightSource>(WeightFormat::kGguf, gguf->path());
  for (const auto& info : gguf->tensors()) {
    // GGUF dims are innermost first; Tensor shapes outermost first.
    std::vector<int64_t> shape(info.dims.rbegin(), info.dims.rend());
    TableWeightSource::Entry e;
    e.tensor = Tensor::view(info.dtype, std::move(shape), gguf->tensor_data(info), gguf);
    src->table_.emplace(info.name, std::move(e));
  }
  src->gguf_ = std::move(gguf);
  return std::unique_ptr<WeightSource>(std::move(src));
}

Result<std::unique_ptr<WeightSource>> make_weight_source(std::shared_ptr<const HfModelDir> dir) {
  auto src = std::make_unique<TableWeightSource>(WeightFormat::kHfDir, dir->dir());
  // GPTQ / AWQ / compressed-tensors: the packed modules become native "<m>.weight" rows.
  PAGODA_ASSIGN_OR_RETURN(auto packed, decode_packed_int_checkpoint(*dir));
  for (const auto& [name, entry] : dir->tensors())
    if (!packed || !packed->consumed.count(name)) add_safetensors(src.get(), *entry.file, *entry.info);
  if (packed)
    for (auto& [name, t] : packed->weights) src->table_[name] = TableWeightSource::Entry{std::move(t), {}};
  src->hf_ = std::move(dir);
  return std::unique_ptr<WeightSource>(std::move(src));
}

Result<std::unique_ptr<WeightSource>> make_weight_source(std::shared_ptr<const SafetensorsFile> file) {
  auto src = std::make_unique<TableWeightSource>(WeightFormat::kSafetensors, file->path());
  for (const auto& info : file->tensors()) add_safetensors(src.get(), *file, info);
  src->st_ = std::move(file);
  return std::unique_ptr<WeightSource>(std::move(src));
}

Result<std::unique_ptr<WeightSource>> load_weight_source(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return not_found("'{}' does not exist", path);
  if (fs::is_directory(st)) {
    PAGODA_ASSIGN_OR_RETURN(auto dir, HfModelDir::open(path));
    return make_weight_source(std::shared_ptr<const HfModelDir>(std::move(dir)));
  }
  char magic[4] = {};
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    const size_t n = std::fread(magic, 1, 4, f);
    std::fclose(f);
    if (n == 4 && std::memcmp(magic, "GGUF", 4) == 0) {
      PAGODA_ASSIGN_OR_RETURN(auto gguf, GgufFile::open(path));
      return make_weight_source(std::shared_ptr<const GgufFile>(std::move(gguf)));
    }
  } else {
    return io_error("cannot open '{}'", path);
  }
  if (path.size() >= 12 && path.ends_with(".safetensors")) {
    PAGODA_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open(path));
    return make_weight_source(std::shared_ptr<const SafetensorsFile>(std::move(file)));
  }
  return invalid_argument("'{}' is neither a GGUF file, a .safetensors file nor a Hugging Face model directory", path);
}

}  // namespace pagoda

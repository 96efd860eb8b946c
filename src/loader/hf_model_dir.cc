#include "loader/hf_model_dir.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace pagoda {
namespace fs = std::filesystem;

Result<nlohmann::json> read_json_file(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return not_found("'{}' does not exist or is not a regular file", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot open '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return data_loss("'{}' is not valid JSON", path);
  return j;
}

namespace {

// A shard name from the index must stay inside the model directory.
bool safe_relative_name(const std::string& name) {
  if (name.empty() || name[0] == '/') return false;
  for (const auto& part : fs::path(name))
    if (part == "..") return false;
  return true;
}

}  // namespace

Status HfModelDir::add_shard(std::shared_ptr<SafetensorsFile> file) {
  for (const auto& info : file->tensors()) {
    auto [it, inserted] = tensors_.emplace(info.name, Entry{file.get(), &info});
    if (!inserted)
      return data_loss("tensor '{}' appears in both '{}' and '{}'", info.name, it->second.file->path(), file->path());
  }
  shards_.push_back(std::move(file));
  return {};
}

Result<std::shared_ptr<HfModelDir>> HfModelDir::open(const std::string& dir_in) {
  std::shared_ptr<HfModelDir> d(new HfModelDir());
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  d->dir_ = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found("'{}' is not a directory", dir);

  auto config = read_json_file(d->config_path());
  if (!config.ok()) {
    if (config.status().code() == StatusCode::kNotFound)
      return not_found("Hugging Face model directory '{}' has no {}", dir, kConfigFile);
    return config.status();
  }
  if (!config->is_object()) return data_loss("'{}' is not a JSON object", d->config_path());
  d->config_ = std::make_shared<const nlohmann::json>(std::move(config).value());

  const std::string index_path = dir + "/" + kIndexFile;
  const std::string single_path = dir + "/" + kSingleFile;
  if (fs::exists(index_path, ec)) {
    d->sharded_ = true;
    PAGODA_ASSIGN_OR_RETURN(nlohmann::json index, read_json_file(index_path));
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      return data_loss("'{}' has no \"weight_map\" object", index_path);
    const nlohmann::json& weight_map = index["weight_map"];
    // shard file -> the first tensor the index assigns to it (for error messages)
    std::map<std::string, std::string> shard_files;
    for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
      if (!it->is_string()) return data_loss("'{}': weight_map entry for '{}' is not a file name", index_path, it.key());
      const std::string shard = it->get<std::string>();
      if (!safe_relative_name(shard))
        return data_loss("'{}': shard name '{}' (for tensor '{}') is not a file inside the directory", index_path, shard,
                         it.key());
      shard_files.emplace(shard, it.key());
    }
    if (shard_files.empty()) return data_loss("'{}': weight_map is empty", index_path);
    std::map<std::string, const SafetensorsFile*> by_name;
    for (const auto& [shard, first_tensor] : shard_files) {
      const std::string path = dir + "/" + shard;
      if (!fs::exists(path, ec))
        return not_found("shard '{}' listed in '{}' (for tensor '{}') does not exist", path, index_path, first_tensor);
      PAGODA_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open(path));
      by_name[shard] = file.get();
      PAGODA_RETURN_IF_ERROR(d->add_shard(std::move(file)));
    }
    for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
      const SafetensorsFile* shard = by_name.at(it->get<std::string>());
      if (shard->find_tensor(it.key()) == nullptr)
        return data_loss("tensor '{}' is listed in '{}' as in '{}', but that shard has no such tensor", it.key(),
                         index_path, shard->path());
    }
  } else if (fs::exists(single_path, ec)) {
    PAGODA_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open(single_path));
    PAGODA_RETURN_IF_ERROR(d->add_shard(std::move(file)));
  } else {
    return not_found("Hugging Face model directory '{}' has neither {} nor {}", dir, kSingleFile, kIndexFile);
  }
  return d;
}

const HfModelDir::Entry* HfModelDir::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace pagoda

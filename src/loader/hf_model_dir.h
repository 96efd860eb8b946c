// A Hugging Face model directory: config.json plus weights in safetensors, either one
// `model.safetensors` or shards listed by `model.safetensors.index.json` ({"weight_map":
// {tensor name: shard file name}}).
//
// Contract: open() maps every shard once and checks that the index and the shards agree: a shard
// named by the index must exist (kNotFound naming the shard and a tensor it should hold), each
// tensor the index lists must be in the shard it names (kDataLoss naming both), and no tensor may
// be in two shards (kDataLoss naming the tensor and both files). Tensors a shard holds that the
// index does not list are kept (the shard is the ground truth). Shard names must be relative paths
// inside the directory (no absolute paths, no "..").
//
// Thread-safety: immutable after open().
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"
#include "loader/safetensors.h"

namespace pagoda {

class HfModelDir {
 public:
  static constexpr const char* kConfigFile = "config.json";
  static constexpr const char* kSingleFile = "model.safetensors";
  static constexpr const char* kIndexFile = "model.safetensors.index.json";

  // Where one tensor lives.
  struct Entry {
    const SafetensorsFile* file = nullptr;        // owned by shards()
    const SafetensorsTensorInfo* info = nullptr;  // owned by *file
  };

  static Result<std::shared_ptr<HfModelDir>> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  std::string config_path() const { return dir_ + "/" + kConfigFile; }
  const nlohmann::json& config() const { return *config_; }  // the parsed config.json (an object)
  bool sharded() const { return sharded_; }
  const std::vector<std::shared_ptr<SafetensorsFile>>& shards() const { return shards_; }
  const std::map<std::string, Entry>& tensors() const { return tensors_; }
  const Entry* find(const std::string& name) const;

 private:
  HfModelDir() = default;
  Status add_shard(std::shared_ptr<SafetensorsFile> file);

  std::string dir_;
  std::shared_ptr<const nlohmann::json> config_;
  bool sharded_ = false;
  std::vector<std::shared_ptr<SafetensorsFile>> shards_;
  std::map<std::string, Entry> tensors_;
};

// Reads a whole small JSON file (config.json, an index) without exceptions.
Result<nlohmann::json> read_json_file(const std::string& path);

}  // namespace pagoda

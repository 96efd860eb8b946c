// Checkpoints that declare 2:4 structured sparsity (llm-compressor's compressed-tensors
// sparsity_config, weights stored dense): config.json's declaration is read into
// ModelConfig::sparsity_2of4 (the CUDA backend's cue for its sparse GEMMs, tests/gpu/
// cuda_sparse_test.cc); other structures are plain dense checkpoints; compressed storage formats
// are refused with a message that names them; a sparse-only checkpoint is not a quantized one, so it
// loads and runs on the CPU exactly as the same weights without the declaration.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/thread_pool.h"
#include "cpu_greedy_run.h"
#include "loader/packed_int_checkpoint.h"
#include "model/model_config.h"
#include "model/model_loader.h"
#include "test_paths.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

nlohmann::json tiny_config() {
  return nlohmann::json::parse(std::ifstream(test::models_dir() + "/tiny/llama3/config.json"));
}

nlohmann::json sparsity(const std::string& structure, const std::string& format = "dense") {
  return {{"format", format}, {"sparsity_structure", structure}, {"targets", {"Linear"}}, {"ignore", {"lm_head"}}};
}

TEST(SparsityConfig, TwoOfFourStoredDenseIsDeclared) {
  ASSERT_TRUE(fs::exists(test::models_dir() + "/tiny/llama3/config.json")) << "scripts/make_test_models.sh";
  nlohmann::json j = tiny_config();
  auto plain = model_config_from_hf_json(j);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_FALSE(plain->sparsity_2of4);
  for (const char* key : {"quantization_config", "compression_config"}) {
    nlohmann::json c = tiny_config();
    c[key] = {{"quant_method", "compressed-tensors"}, {"format", "dense"}, {"sparsity_config", sparsity("2:4")}};
    auto m = model_config_from_hf_json(c);
    ASSERT_TRUE(m.ok()) << key << ": " << m.status().to_string();
    EXPECT_TRUE(m->sparsity_2of4) << key;
    EXPECT_NE(m->summary().find("2:4 sparse"), std::string::npos) << m->summary();
    EXPECT_EQ(m->to_json().value("sparsity", std::string()), "2:4");
    // Not a quantized checkpoint: no packed-linear format for the memory planner.
    auto f = packed_int_linear_format(c);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    EXPECT_FALSE(f->has_value());
  }
  for (const char* other : {"unstructured", "8:16", ""}) {
    nlohmann::json c = tiny_config();
    c["quantization_config"] = {{"quant_method", "compressed-tensors"}, {"sparsity_config", sparsity(other)}};
    auto m = model_config_from_hf_json(c);
    ASSERT_TRUE(m.ok()) << other << ": " << m.status().to_string();
    EXPECT_FALSE(m->sparsity_2of4) << other;
  }
}

TEST(SparsityConfig, CompressedStorageIsRefusedByName) {
  for (const char* format : {"sparse-24-bitmask", "sparse-bitmask"}) {
    nlohmann::json c = tiny_config();
    c["quantization_config"] = {{"quant_method", "compressed-tensors"}, {"sparsity_config", sparsity("2:4", format)}};
    auto m = model_config_from_hf_json(c);
    ASSERT_FALSE(m.ok()) << format;
    EXPECT_EQ(m.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(m.status().message().find(format), std::string::npos) << m.status().message();
  }
  nlohmann::json c = tiny_config();
  c["quantization_config"] = {{"quant_method", "compressed-tensors"}, {"sparsity_config", "2:4"}};
  auto m = model_config_from_hf_json(c);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << m.status().to_string();
}

TEST(SparsityConfig, SparseOnlyCheckpointRunsLikeItsWeightsOnTheCpu) {
  const std::string src = test::models_dir() + "/tiny/llama3";
  ASSERT_TRUE(fs::exists(src + "/model.safetensors")) << "scripts/make_test_models.sh";
  const fs::path dir = fs::temp_directory_path() / ("pagoda_sparsity_config_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  nlohmann::json c = tiny_config();
  c["quantization_config"] = {{"quant_method", "compressed-tensors"}, {"format", "dense"},
                              {"quantization_status", "compressed"}, {"sparsity_config", sparsity("2:4")}};
  std::ofstream(dir / "config.json") << c.dump(2);
  fs::create_symlink(fs::absolute(src + "/model.safetensors"), dir / "model.safetensors");
  auto declared = load_model(dir.string(), {});
  ASSERT_TRUE(declared.ok()) << declared.status().to_string();
  auto plain = load_model(src, {});
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_TRUE(declared->config.sparsity_2of4);
  ThreadPool pool(1);
  const std::vector<int32_t> prompt = {1, 17, 230, 5, 99, 311};
  const auto a = test::cpu_greedy_run(declared->config, *declared->model, prompt, 4, pool);
  const auto b = test::cpu_greedy_run(plain->config, *plain->model, prompt, 4, pool);
  EXPECT_EQ(a.logits, b.logits);
  EXPECT_EQ(a.greedy, b.greedy);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pagoda

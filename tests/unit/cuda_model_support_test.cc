// cuda_supports_model: the models the CUDA executor runs, decided from the configuration alone, in
// every build (the CLI's --device auto asks it before loading).
#include <gtest/gtest.h>

#include "model/model_loader.h"
#include "runtime/cuda_executor.h"
#include "test_paths.h"

namespace pagoda {
namespace {

ModelConfig config_of(const std::string& dir) {
  auto c = load_model_config(test::models_dir() + "/tiny/" + dir);
  EXPECT_TRUE(c.ok()) << dir << ": " << c.status().to_string();
  return c.ok() ? *c : ModelConfig{};
}

TEST(CudaModelSupport, LlamaFamilyPhi3FamilyAndGemma3Run) {
  for (const char* dir : {"llama3", "qwen2", "qwen3", "mistral", "llama-mqa", "gemma3", "phi3", "phi4-mini", "phi4"}) {
    const Status s = cuda_supports_model(config_of(dir));
    EXPECT_TRUE(s.ok()) << dir << ": " << s.to_string();
  }
}

TEST(CudaModelSupport, Gemma2WithAttentionSoftCappingRuns) {
  const ModelConfig c = config_of("gemma2");
  ASSERT_GT(c.attn_logit_softcap, 0.0);
  const Status s = cuda_supports_model(c);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(CudaModelSupport, GemmaWithFewerQkvColumnsThanHiddenIsRefused) {
  ModelConfig c = config_of("gemma3");
  c.hidden_size = c.q_size() + 2 * c.kv_size() + 32;
  const Status s = cuda_supports_model(c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("q + 2 kv"), std::string::npos) << s.message();
}

TEST(CudaModelSupport, MixtureOfExpertsFamiliesRun) {
  for (const char* dir : {"mixtral", "qwen2-moe", "qwen3-moe", "olmoe"}) {
    const Status s = cuda_supports_model(config_of(dir));
    EXPECT_TRUE(s.ok()) << dir << ": " << s.to_string();
  }
}

TEST(CudaModelSupport, MixtureOfExpertsBeyondTheKernelsAreRefusedWithTheReason) {
  // backend/cuda/moe.cu: at most 256 experts, top-16, rows of whole 16 bytes; --device auto then
  // runs such models on the CPU.
  auto refused = [](const ModelConfig& c, const char* why) {
    const Status s = cuda_supports_model(c);
    ASSERT_FALSE(s.ok()) << why;
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s.to_string();
    EXPECT_NE(s.message().find(why), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("--device cpu"), std::string::npos) << s.message();
  };
  ModelConfig many = config_of("olmoe");
  many.num_experts = 512;
  refused(many, "512 experts");
  ModelConfig wide_k = config_of("olmoe");
  wide_k.num_experts_per_tok = 20;
  refused(wide_k, "top-20");
  ModelConfig odd = config_of("qwen3-moe");
  odd.expert_intermediate_size = 60;
  refused(odd, "multiples of 8");
}

}  // namespace
}  // namespace pagoda

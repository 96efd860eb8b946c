// Memory planner on real model shapes (testdata/configs) against the formula, and its errors.
#include <gtest/gtest.h>

#include "model/model_config.h"
#include "model/family.h"
#include "runtime/memory_plan.h"
#include "test_paths.h"

namespace pagoda {
namespace {

ModelConfig config(const std::string& name) {
  auto c = model_config_from_hf_file(test::testdata_dir() + "/configs/" + name + ".json");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return *c;
}

TEST(MemoryPlan, KvBytesPerTokenOfPublishedShapes) {
  // 2 x layers x kv_heads x head_dim x 2 bytes (f16).
  EXPECT_EQ(config("llama-3-8b").kv_bytes_per_token(DType::kF16), 2 * 32 * 8 * 128 * 2);    // 128 KiB
  EXPECT_EQ(config("llama-3-70b").kv_bytes_per_token(DType::kF16), 2 * 80 * 8 * 128 * 2);   // 320 KiB
  EXPECT_EQ(config("qwen2.5-7b").kv_bytes_per_token(DType::kF16), 2 * 28 * 4 * 128 * 2);    // 56 KiB
  EXPECT_EQ(config("llama-3-8b").kv_bytes_per_token(DType::kF32), 2 * 32 * 8 * 128 * 4);
  EXPECT_EQ(config("llama-3-8b").kv_bytes_per_token(DType::kF8E4M3), 2 * 32 * 8 * 128);  // 64 KiB: FP8 cache
}

TEST(MemoryPlan, ParameterCountsOfPublishedShapes) {
  EXPECT_EQ(declared_parameter_count(config("llama-3-8b")), 8030261248);
  EXPECT_EQ(declared_parameter_count(config("llama-3-70b")), 70553706496);
  EXPECT_EQ(declared_parameter_count(config("qwen2.5-7b")), 7615616512);
}

// Total and active parameters of the mixture-of-experts shapes, and the bytes one token reads.
TEST(MemoryPlan, MixtureOfExpertsActiveParameters) {
  auto footprint = [](const ModelConfig& c) {
    return parameter_footprint(c, [](const TensorDecl& d) -> int64_t {
      if (!d.required) return -1;
      int64_t n = 1;
      for (int64_t x : d.shape) n *= x;
      return 2 * n;  // bf16
    });
  };
  // Mixtral-8x7B by the formula: per layer attention 2 x 4096^2 + 2 x 1024 x 4096, router 8 x 4096,
  // experts 8 x 3 x 4096 x 14336, two norms; embedding and output 32000 x 4096 each.
  const ModelConfig mixtral = config("mixtral-8x7b");
  EXPECT_EQ(mixtral.family, ArchFamily::kMixtral);
  const int64_t attn = 2 * 4096LL * 4096 + 2 * 1024LL * 4096, expert = 3 * 4096LL * 14336;
  const int64_t per_layer_dense = attn + 8 * 4096 + 2 * 4096;
  const int64_t globals = 2 * 32000LL * 4096 + 4096;
  const ParameterFootprint m = footprint(mixtral);
  EXPECT_EQ(m.total_parameters, 32 * (per_layer_dense + 8 * expert) + globals);
  EXPECT_EQ(m.total_parameters, declared_parameter_count(mixtral));
  EXPECT_EQ(m.active_parameters, 32 * (per_layer_dense + 2 * expert) + globals);
  EXPECT_NEAR(m.total_parameters / 1e9, 46.7, 0.05);   // the published 46.7B
  EXPECT_NEAR(m.active_parameters / 1e9, 12.9, 0.05);  // and 12.9B active
  // Per token: the weights once, of the experts 2 of 8, of the (untied) embedding one row.
  EXPECT_EQ(m.bytes_per_token, 2 * (m.active_parameters - 32000LL * 4096 + 4096));
  EXPECT_EQ(m.total_bytes, 2 * m.total_parameters);
  // Published totals / active counts (model cards): 30.5B / 3.3B, 14.3B / 2.7B, 6.9B / 1.3B.
  const ParameterFootprint q3 = footprint(config("qwen3-30b-a3b"));
  EXPECT_NEAR(q3.total_parameters / 1e9, 30.5, 0.1);
  EXPECT_NEAR(q3.active_parameters / 1e9, 3.3, 0.1);
  const ParameterFootprint q2 = footprint(config("qwen1.5-moe-a2.7b"));
  EXPECT_NEAR(q2.total_parameters / 1e9, 14.3, 0.1);
  EXPECT_NEAR(q2.active_parameters / 1e9, 2.7, 0.1);
  const ParameterFootprint ol = footprint(config("olmoe-1b-7b"));
  EXPECT_NEAR(ol.total_parameters / 1e9, 6.9, 0.1);
  EXPECT_NEAR(ol.active_parameters / 1e9, 1.3, 0.05);
  // A dense model reads every weight per token, the embedding's one row aside.
  const ParameterFootprint dense = footprint(config("llama-3-8b"));
  EXPECT_EQ(dense.active_parameters, dense.total_parameters);
}

TEST(MemoryPlan, Llama3_8bOn80GiBFollowsTheFormula) {
  MemoryPlanInput in;
  in.config = config("llama-3-8b");
  in.weight_bytes = declared_parameter_count(in.config) * 2;
  in.device_memory = int64_t{80} << 30;
  in.memory_utilization = 0.9;
  in.max_num_seqs = 256;
  in.max_num_batched_tokens = 8192;
  auto p = plan_memory(in);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const int64_t budget = static_cast<int64_t>(0.9 * (int64_t{80} << 30));
  const int64_t ws = workspace_bytes(in.config, 8192);
  const int64_t logits = int64_t{256} * 128256 * 4;
  const int64_t block = 2 * 32 * 8 * 128 * 2 * 16;
  const int64_t kv_budget = budget - in.weight_bytes - ws - logits - p->runtime_overhead;
  EXPECT_EQ(p->num_blocks, kv_budget / block - 1);
  EXPECT_EQ(p->kv_tokens, p->num_blocks * 16);
  EXPECT_LE(p->total, budget);
  EXPECT_GT(p->total, budget - block);  // uses the whole budget, less than one block of slack
  EXPECT_NEAR(p->max_concurrency, static_cast<double>(p->kv_tokens) / 8192, 1e-9);
  // Workspace: the activations of 8192 tokens (f32): residual/hidden/proj/last [D], qkv [Q + 2KV],
  // q/attn [Q], k/v [KV], gate_up [2F], act [F].
  EXPECT_EQ(ws, int64_t{8192} * (4 * 4096 + 3 * 4096 + 4 * 1024 + 3 * 14336) * 4);
}

// A CPU + GPU layer split (--n-gpu-layers 16 of 32): the device's KV holds half the layers, the
// block count is capped by the CPU part's host KV (2 GiB, or one sequence of max_model_len when
// that is more), whose bytes the plan reports beside the device total.
TEST(MemoryPlan, LayerSplitCountsTheDeviceLayersAndCapsTheHostKv) {
  MemoryPlanInput in;
  in.config = config("llama-3-8b");
  in.weight_bytes = int64_t{8} << 30;
  in.device_memory = int64_t{80} << 30;
  in.memory_utilization = 0.9;
  in.max_model_len = 4096;
  set_layer_split(in, 16);
  EXPECT_EQ(in.split_device_layers, 16);
  EXPECT_EQ(in.split_host_kv_bytes, int64_t{2} << 30);  // 4096 tokens x 64 KiB < 2 GiB
  auto p = plan_memory(in);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const int64_t half_block = 2 * 16 * 8 * 128 * 2 * 16;  // 2 (K, V) x 16 layers x 8 heads x 128 x 2 bytes: 64 KiB a token
  EXPECT_EQ(p->kv_bytes_per_token, half_block / 16);
  EXPECT_EQ(p->block_bytes, half_block);
  EXPECT_EQ(p->num_blocks, (int64_t{2} << 30) / half_block - 1);  // the host cap, far below the device's room
  EXPECT_EQ(p->host_kv_cache, (p->num_blocks + 1) * half_block);
  EXPECT_EQ(p->kv_cache, p->host_kv_cache);
  EXPECT_NE(p->to_string().find("layer split: layers [0, 16)"), std::string::npos) << p->to_string();
  // A long context raises the cap to one sequence; every layer or none on the device is no split.
  in.max_model_len = 65536;
  set_layer_split(in, 16);
  EXPECT_EQ(in.split_host_kv_bytes, (65536 + 48) * int64_t{65536});
  for (int64_t n : {0, 32, 40}) {
    set_layer_split(in, n);
    EXPECT_EQ(in.split_device_layers, 0) << n;
  }
  in.split_device_layers = 32;
  EXPECT_FALSE(plan_memory(in).ok());
}

TEST(MemoryPlan, KvTierSizes) {
  MemoryPlanInput in;
  in.config = config("llama-3-8b");
  in.weight_bytes = declared_parameter_count(in.config) * 2;
  in.device_memory = int64_t{80} << 30;
  in.max_model_len = 8192;
  const int64_t block = 2 * 32 * 8 * 128 * 2 * 16;  // 2 MiB
  in.kv_host_tier_bytes = int64_t{64} << 30;
  auto p = plan_memory(in);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->host_tier_blocks, (int64_t{64} << 30) / block);  // 32768 blocks, 512k tokens
  EXPECT_EQ(p->host_tier, (p->host_tier_blocks + 1) * block);
  EXPECT_EQ(p->disk_tier, 0);
  EXPECT_NE(p->to_string().find("KV tiers: host"), std::string::npos) << p->to_string();
  // A disk tier alone: its files (header + token ids + the block) within the cap, and one
  // sequence of host staging.
  in.kv_host_tier_bytes = 0;
  in.kv_disk_tier_bytes = int64_t{100} << 30;
  p = plan_memory(in);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->host_tier_blocks, 8192 / 16 + 1);
  EXPECT_EQ(p->disk_tier_blocks, (int64_t{100} << 30) / (48 + 4 * 16 + block));
  EXPECT_NE(p->to_string().find("disk"), std::string::npos);
  // No tiers: nothing printed.
  in.kv_disk_tier_bytes = 0;
  p = plan_memory(in);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->host_tier_blocks, 0);
  EXPECT_EQ(p->to_string().find("KV tiers"), std::string::npos);
}

TEST(MemoryPlan, SeventyBOn80GiBNamesTheWeights) {
  MemoryPlanInput in;
  in.config = config("llama-3-70b");
  in.weight_bytes = declared_parameter_count(in.config) * 2;
  in.device_memory = int64_t{80} << 30;
  auto p = plan_memory(in);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(p.status().message().find("weights are the largest term"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("q4_k"), std::string::npos);
}

TEST(MemoryPlan, ContextThatCannotFitSaysWhatFits) {
  MemoryPlanInput in;
  in.config = config("qwen2.5-7b");
  in.weight_bytes = declared_parameter_count(in.config) * 2;
  in.kv_cache_memory = int64_t{1} << 30;  // 1 GiB of KV: 1170 blocks of 896 KiB, one is the null block
  auto p = plan_memory(in);
  ASSERT_FALSE(p.ok());
  const std::string m = p.status().message();
  EXPECT_NE(m.find("max_model_len 32768"), std::string::npos) << m;
  EXPECT_NE(m.find("--max-model-len 18704"), std::string::npos) << m;  // (1 GiB / 896 KiB - 1) blocks x 16
  in.max_model_len = 16384;
  auto ok = plan_memory(in);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->kv_tokens, 18704);
}

// Mistral-7B-v0.1 slides every layer over 4096 positions: with the blocks outside the window
// released, a 32768-token sequence holds (ceil(4095 / 16) + 1 + 2048 / 16) x 16 = 6160 tokens at
// once, which 1 GiB of f16 KV (8176 tokens) holds; keeping every block it needs all 32768.
TEST(MemoryPlan, SlidingWindowEvictionBoundsTheTokensASequenceHolds) {
  MemoryPlanInput in;
  in.config = config("mistral-7b-v0.1");
  ASSERT_EQ(in.config.sliding_window, 4096);
  in.weight_bytes = declared_parameter_count(in.config) * 2;
  in.kv_cache_memory = int64_t{1} << 30;  // 512 blocks of 2 MiB (128 KiB a token), one the null block
  in.max_num_batched_tokens = 2048;
  auto p = plan_memory(in);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->kv_window, 4096);
  EXPECT_EQ(p->kv_tokens, 8176);
  EXPECT_EQ(p->kv_tokens_per_sequence, 6160);
  EXPECT_NEAR(p->max_concurrency, 8176.0 / 6160.0, 1e-9);
  EXPECT_NE(p->to_string().find("sliding window 4096"), std::string::npos) << p->to_string();
  in.kv_window_eviction = false;
  auto full = plan_memory(in);
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.status().message().find("max_model_len 32768"), std::string::npos) << full.status().to_string();
  // A model with full-attention layers among the sliding ones (Gemma) keeps every block.
  in.kv_window_eviction = true;
  in.config.sliding_layers.assign(static_cast<size_t>(in.config.num_layers), true);
  in.config.sliding_layers[5] = false;
  auto mixed = plan_memory(in);
  ASSERT_FALSE(mixed.ok());
  EXPECT_EQ(kv_eviction_window(in), 0);
}

}  // namespace
}  // namespace pagoda

// Sliding-window KV eviction in the engine, on the tiny Phi-3 model (every layer slides, window
// 48, context 256): greedy tokens are identical with eviction on and with every block kept; with
// eviction a KV cache smaller than one full sequence runs long generations without preemption
// (the memory planner counts the bound, and refuses that cache without eviction); prefix-cache hits
// over released blocks give the same tokens.
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "model/model_loader.h"
#include "test_paths.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using test::collect;

std::string phi3_model() { return test::models_dir() + "/tiny/phi3/model-f32.gguf"; }  // the GGUF carries a vocabulary

EngineConfig config_for(bool eviction, int64_t kv_blocks) {
  EngineConfig c = test::base_engine_config(phi3_model());
  c.max_model_len = 256;
  c.block_size = 16;
  c.kv_dtype = DType::kF32;
  c.scheduler.max_num_batched_tokens = 16;  // chunked prefill: a step adds at most one block
  c.scheduler.max_num_seqs = 4;
  c.sliding_window_eviction = eviction;
  auto mc = load_model_config(phi3_model());
  EXPECT_TRUE(mc.ok());
  c.kv_cache_memory = mc->kv_bytes_per_token(c.kv_dtype) * c.block_size * (kv_blocks + 1);
  return c;
}

GenerateRequest greedy_request(int prompt_len, int max_tokens, int seed) {
  GenerateRequest g;
  for (int i = 0; i < prompt_len; ++i) g.prompt_ids.push_back(3 + (seed * 131 + i * 37) % 500);
  g.sampling.temperature = 0;
  g.stop.max_tokens = max_tokens;
  g.stop.ignore_eos = true;
  return g;
}

TEST(SlidingWindowKv, GreedyTokensMatchAFullCacheAndBlocksStayBounded) {
  if (!fs::exists(phi3_model())) GTEST_FAIL() << "tiny phi3 missing: run scripts/make_test_models.sh";
  auto mc = load_model_config(phi3_model());
  ASSERT_TRUE(mc.ok());
  ASSERT_EQ(mc->sliding_window, 48);
  ASSERT_TRUE(mc->sliding_layers.empty());  // every layer slides
  // A full cache: every block of every sequence kept.
  auto full = Engine::create(config_for(false, 80));
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  // 7 blocks (112 tokens) for sequences of 240: enough only because blocks outside the window go
  // (one sequence holds at most 3 + 1 + 1 blocks, core/kv_window.h).
  auto windowed = Engine::create(config_for(true, 7));
  ASSERT_TRUE(windowed.ok()) << windowed.status().to_string();
  // Without eviction the planner refuses that cache: one sequence of 256 needs 16 blocks.
  auto refused = Engine::create(config_for(false, 7));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status().to_string();
  for (int seed = 0; seed < 3; ++seed) {
    const GenerateRequest g = greedy_request(40 + 13 * seed, 200 - 10 * seed, seed);
    auto a = (*full)->submit(g);
    auto b = (*windowed)->submit(g);
    ASSERT_TRUE(a.ok() && b.ok());
    const auto want = collect(**a).tokens[0];
    const auto got = collect(**b).tokens[0];
    ASSERT_EQ(want.size(), static_cast<size_t>(g.stop.max_tokens));
    EXPECT_EQ(got, want) << "seed " << seed;
  }
  const EngineStats st = (*windowed)->stats();
  EXPECT_EQ(st.num_preemptions, 0);
  EXPECT_EQ(st.num_kv_blocks, 7);
  EXPECT_EQ(st.free_kv_blocks, st.num_kv_blocks);
  // Blocks in use over the run, per step: at most the bound of one sequence.
  ASSERT_GT(st.kv_util_steps, 0);
  EXPECT_LE(st.kv_tokens_allocated_sum / static_cast<double>(st.kv_util_steps), 5.0 * 16);
}

TEST(SlidingWindowKv, PrefixHitsOverReleasedBlocksGiveTheSameTokens) {
  if (!fs::exists(phi3_model())) GTEST_FAIL() << "tiny phi3 missing: run scripts/make_test_models.sh";
  // Room for the released blocks to stay cached: a second run of the same prompt hits its whole
  // prefix, blocks far outside the window included (released again at its first step).
  auto engine = Engine::create(config_for(true, 60));
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto full = Engine::create(config_for(false, 80));
  ASSERT_TRUE(full.ok());
  const GenerateRequest g = greedy_request(120, 60, 7);
  const auto want = collect(**(*full)->submit(g)).tokens[0];
  const auto first = collect(**(*engine)->submit(g)).tokens[0];
  const auto second = collect(**(*engine)->submit(g)).tokens[0];
  EXPECT_EQ(first, want);
  EXPECT_EQ(second, want);
  const EngineStats st = (*engine)->stats();
  EXPECT_GE(st.prefix_cache_hits, 112);  // the second prompt's 7 full blocks
  // A tiny cache: the released blocks are handed out again, later lookups hit less, tokens equal.
  auto tiny = Engine::create(config_for(true, 7));
  ASSERT_TRUE(tiny.ok());
  for (int round = 0; round < 2; ++round) EXPECT_EQ(collect(**(*tiny)->submit(g)).tokens[0], want) << round;
  EXPECT_EQ((*tiny)->stats().num_preemptions, 0);
}

}  // namespace
}  // namespace pagoda

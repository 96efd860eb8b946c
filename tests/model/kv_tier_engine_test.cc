// KV cache tiers on a real model (SmolLM2-135M, CPU): a workload of shared prefixes larger than
// the primary KV pool gives exactly the greedy tokens without tiers, with a host tier, with a
// disk tier (and after a restart that finds the disk tier's files, and after those files were
// damaged), while the hits are counted per tier.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "common/check.h"
#include "engine/engine.h"
#include "engine/engine_config.h"
#include "model/model_config.h"
#include "model/model_loader.h"
#include "engine_test_util.h"
#include "test_paths.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using test::collect;

struct WorkloadRun {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<int32_t> cached;
  EngineStats stats;
};

// 6 prefixes of 160 tokens in two rounds, each request the prefix and 8 tokens of its own: 60
// distinct full blocks against a primary pool of 24 blocks (and a disk tier's host staging of 17).
WorkloadRun run_workload(EngineConfig cfg) {
  auto engine = Engine::create(cfg);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  WorkloadRun run;
  if (!engine.ok()) return run;
  const int64_t vocab = (*engine)->model_config().vocab_size;
  for (int round = 0; round < 2; ++round) {
    for (int p = 0; p < 6; ++p) {
      GenerateRequest g;
      for (int k = 0; k < 160; ++k) g.prompt_ids.push_back(static_cast<int32_t>((p * 7919 + k * 104729) % (vocab - 10) + 5));
      for (int k = 0; k < 8; ++k) g.prompt_ids.push_back(static_cast<int32_t>((round * 31 + p * 131 + k * 17 + 3) % (vocab - 10) + 5));
      g.sampling.temperature = 0;
      g.stop.max_tokens = 6;
      g.stop.ignore_eos = true;
      auto s = (*engine)->submit(g);
      EXPECT_TRUE(s.ok());
      if (!s.ok()) return run;
      test::Collected c = collect(**s);
      run.tokens.push_back(c.tokens[0]);
      run.cached.push_back(c.cached[0]);
    }
  }
  run.stats = (*engine)->stats();
  return run;
}

EngineConfig small_pool_config() {
  EngineConfig c = test::base_engine_config(test::smollm2_path());
  c.max_model_len = 256;
  c.scheduler.max_num_seqs = 4;
  c.scheduler.max_num_batched_tokens = 256;
  auto mc = load_model_config(c.model);
  PAGODA_CHECK(mc.ok(), "{}", mc.status().to_string());
  c.kv_cache_memory = mc->kv_bytes_per_token(c.kv_dtype) * 16 * 25;  // 24 usable blocks + the null block
  return c;
}

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / fmt::format("pagoda_kv_tier_engine_{}", ::getpid())) {
    fs::remove_all(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

TEST(KvTierEngine, GreedyOutputsAreTheSameWithAndWithoutTiers) {
  ASSERT_TRUE(fs::exists(test::smollm2_path())) << "run scripts/setup.sh";
  const EngineConfig base = small_pool_config();
  const WorkloadRun plain = run_workload(base);
  ASSERT_EQ(plain.tokens.size(), 12u);
  // Without tiers the second round finds nothing: the first round's prefixes were evicted.
  EXPECT_EQ(plain.stats.kv_tier.host_hits + plain.stats.kv_tier.disk_hits, 0);

  EngineConfig host = base;
  host.kv_tiers.host_bytes = int64_t{64} << 20;
  const WorkloadRun with_host = run_workload(host);
  EXPECT_EQ(with_host.tokens, plain.tokens);
  // Every second-round prefix (160 tokens = 10 blocks) came back from the host tier.
  EXPECT_GE(with_host.stats.kv_tier.host_hits, 6 * 160) << "host stores " << with_host.stats.kv_tier.host_stores;
  for (int i = 6; i < 12; ++i) EXPECT_GE(with_host.cached[i], 160) << "request " << i;

  TempDir dir;
  EngineConfig disk = base;
  disk.kv_tiers.disk_dir = dir.str();  // the host tier is then one sequence of staging (17 blocks)
  const WorkloadRun with_disk = run_workload(disk);
  EXPECT_EQ(with_disk.tokens, plain.tokens);
  EXPECT_GT(with_disk.stats.kv_tier.disk_stores, 0);
  EXPECT_GT(with_disk.stats.kv_tier.disk_hits, 0);
  EXPECT_EQ(with_disk.stats.kv_tier.disk_rejected, 0);

  // A restart on the same directory finds the blocks of the previous process.
  const WorkloadRun restarted = run_workload(disk);
  EXPECT_EQ(restarted.tokens, plain.tokens);
  EXPECT_GT(restarted.stats.kv_tier.disk_hits, with_disk.stats.kv_tier.disk_hits / 2);
  EXPECT_GT(restarted.cached[0], 0);  // the very first request already hits the disk tier

  // Every file damaged (one byte flipped, or cut short): misses, counted, same outputs.
  int n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir.str())) {
    if (!e.is_regular_file()) continue;
    if (n++ % 2 == 0) {
      std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(-5, std::ios::end);
      const char c = static_cast<char>(f.get());
      f.seekp(-5, std::ios::end);
      f.put(static_cast<char>(c ^ 0x10));
    } else {
      fs::resize_file(e.path(), fs::file_size(e.path()) / 2);
    }
  }
  ASSERT_GT(n, 0);
  const WorkloadRun damaged = run_workload(disk);
  EXPECT_EQ(damaged.tokens, plain.tokens);
  EXPECT_GT(damaged.stats.kv_tier.disk_rejected, 0);
  EXPECT_EQ(damaged.cached[0], 0);
}

}  // namespace
}  // namespace pagoda

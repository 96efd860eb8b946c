// Block pool and KV cache manager: reference counts, LRU reuse of cached blocks, collision guard,
// and a randomized leak test (thousands of requests with random cancels end with every block free).
#include <gtest/gtest.h>

#include <random>

#include <map>

#include "kv/kv_cache_manager.h"
#include "sched/scheduler.h"

namespace pagoda {
namespace {

TEST(BlockPool, AllocateReleaseAndNullBlock) {
  BlockPool pool(5, 4, true);
  EXPECT_EQ(pool.num_free_blocks(), 4);
  auto a = pool.allocate(3);
  EXPECT_EQ(a, (std::vector<BlockId>{1, 2, 3}));
  EXPECT_EQ(pool.num_free_blocks(), 1);
  EXPECT_NEAR(pool.usage(), 0.75, 1e-9);
  pool.release(a);
  EXPECT_EQ(pool.num_free_blocks(), 4);
  EXPECT_TRUE(pool.check_invariants());
}

TEST(BlockPool, FreedCachedBlockStaysFindableUntilEvicted) {
  BlockPool pool(4, 2, true);  // 3 usable
  std::vector<int32_t> t1 = {1, 2}, t2 = {3, 4};
  auto b = pool.allocate(1);
  const BlockHash h = hash_block_tokens(kRootHash, t1);
  pool.cache_block(b[0], h, t1);
  pool.release(b);
  ASSERT_TRUE(pool.find_cached(h, t1).has_value());
  EXPECT_FALSE(pool.find_cached(h, t2).has_value());  // collision guard: tokens compared
  // LRU: the two never-used blocks are handed out before the cached one.
  auto c = pool.allocate(2);
  EXPECT_TRUE(pool.find_cached(h, t1).has_value());
  auto d = pool.allocate(1);  // now the cached block is evicted
  EXPECT_EQ(d[0], b[0]);
  EXPECT_FALSE(pool.find_cached(h, t1).has_value());
  EXPECT_TRUE(pool.check_invariants());
}

TEST(BlockPool, TouchRevivesAFreeCachedBlock) {
  BlockPool pool(3, 2, true);
  std::vector<int32_t> t = {9, 9};
  auto b = pool.allocate(1);
  pool.cache_block(b[0], 42, t);
  pool.release(b);
  EXPECT_EQ(pool.num_free_blocks(), 2);
  pool.touch(b);
  EXPECT_EQ(pool.num_free_blocks(), 1);
  EXPECT_EQ(pool.ref_count(b[0]), 1);
  pool.touch(b);
  EXPECT_EQ(pool.ref_count(b[0]), 2);
  pool.release(b);
  pool.release(b);
  EXPECT_EQ(pool.num_free_blocks(), 2);
  EXPECT_TRUE(pool.check_invariants());
}

TEST(KvCacheManager, AllocateSlotsReturnsNulloptWhenFull) {
  KvCacheManager kv(4, 4, false);  // 3 usable blocks = 12 tokens
  Request r;
  r.id = "r";
  r.prompt.assign(13, 1);
  EXPECT_FALSE(kv.allocate_slots(r, 13).has_value());
  EXPECT_EQ(kv.num_free_blocks(), 3);  // nothing changed
  auto ok = kv.allocate_slots(r, 12);
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->size(), 3u);
  kv.free(r);
  EXPECT_EQ(kv.num_free_blocks(), 3);
}

TEST(KvCacheManager, RandomRequestsWithCancelsLeakNothing) {
  std::mt19937 rng(7);
  KvCacheManager kv(60, 8, true, 50);  // small enough that preemption happens
  SchedulerConfig c;
  c.max_num_batched_tokens = 256;
  c.max_num_seqs = 32;
  c.max_model_len = 400;
  c.preemption = PreemptionMode::kSwap;
  Scheduler sched(c, kv);
  std::map<std::string, std::unique_ptr<Request>> reqs;
  int next = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    if (rng() % 3 == 0) {
      auto r = std::make_unique<Request>();
      r->id = "r" + std::to_string(next++);
      const int len = 1 + static_cast<int>(rng() % 120);
      const int family = static_cast<int>(rng() % 4);  // shared prefixes exercise the cache
      for (int i = 0; i < len; ++i) r->prompt.push_back(i < 40 ? family * 100 + i : static_cast<int>(rng() % 1000));
      r->stop.max_tokens = 1 + static_cast<int>(rng() % 60);
      r->arrival_seq = next;
      sched.add_request(r.get());
      reqs[r->id] = std::move(r);
    }
    if (!reqs.empty() && rng() % 7 == 0) {
      auto it = reqs.begin();
      std::advance(it, rng() % reqs.size());
      sched.finish_request(it->first, RequestStatus::kFinishedAborted);
      reqs.erase(it);
    }
    SchedulerOutput out = sched.schedule();
    std::vector<SampledToken> sampled;
    for (const auto& st : out.num_scheduled_tokens) {
      const Request& r = *reqs.at(st.id);
      if (r.num_computed_tokens == r.num_tokens()) sampled.push_back({st.id, static_cast<int32_t>(rng() % 1000)});
    }
    StepUpdate up = sched.update_from_output(out, sampled);
    for (Request* r : up.finished) reqs.erase(r->id);
    ASSERT_TRUE(kv.pool().check_invariants()) << "iteration " << iter;
  }
  for (auto& [id, r] : reqs) sched.finish_request(id, RequestStatus::kFinishedAborted);
  EXPECT_FALSE(sched.has_unfinished());
  EXPECT_EQ(kv.num_free_blocks(), kv.pool().num_usable_blocks());
  kv.begin_step();  // the last step's copies hold their host blocks until the next step begins
  EXPECT_EQ(kv.num_free_host_blocks(), 50);
  EXPECT_GT(sched.num_preemptions(), 0);
  EXPECT_GT(kv.prefix_stats().hits, 0);
}

}  // namespace
}  // namespace pagoda

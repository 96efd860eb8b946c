// Sliding-window KV eviction in the block manager and the scheduler (kv/kv_cache_manager.h): the
// blocks that left every later query's window are released and their table entries nulled, a
// decoding request holds a bounded number of blocks, released cached blocks stay findable by the
// prefix cache, swap preemption keeps the nulls, and the runner is sent the replaced table.
#include <gtest/gtest.h>

#include <memory>

#include "core/kv_window.h"
#include "kv/kv_cache_manager.h"
#include "sched/scheduler.h"

namespace pagoda {
namespace {

std::unique_ptr<Request> make_request(const std::string& id, int prompt_len, int first_token = 100) {
  auto r = std::make_unique<Request>();
  r->id = id;
  for (int i = 0; i < prompt_len; ++i) r->prompt.push_back(first_token + i);
  r->stop.max_tokens = 1 << 20;
  return r;
}

int32_t held(const KvCacheManager& kv, const std::string& id) {
  int32_t n = 0;
  for (BlockId b : kv.block_table(id)) n += b != kNullBlock;
  return n;
}

// One decode step as the scheduler runs it: evict, allocate one token, "compute" it, sample.
void decode_step(KvCacheManager& kv, Request& r) {
  kv.evict_outside_window(r);
  ASSERT_TRUE(kv.allocate_slots(r, 1).has_value());
  r.num_computed_tokens += 1;
  r.output.push_back(7 + static_cast<int32_t>(r.output.size() % 5));
}

TEST(KvWindow, BlocksHeldBoundMatchesTheWindow) {
  // window 48, blocks of 16: 47 earlier keys start at most one block early (3 + 1 blocks), + the step's.
  EXPECT_EQ(kv_window_blocks_held(48, 16, 1000, 1), 5);
  EXPECT_EQ(kv_window_blocks_held(48, 16, 1000, 64), 8);
  EXPECT_EQ(kv_window_blocks_held(48, 16, 40, 1), 3);     // short sequences hold all of theirs
  EXPECT_EQ(kv_window_blocks_held(0, 16, 1000, 1), 63);   // no window: everything
  EXPECT_EQ(kv_window_blocks_held(1, 16, 1000, 1), 2);    // only the current token
}

TEST(KvWindow, DecodeReleasesBlocksOutsideTheWindowAndStaysBounded) {
  const int32_t bs = 16, window = 48;
  KvCacheManager kv(64, bs, /*enable_prefix_caching=*/true);
  kv.set_sliding_window(window);
  auto r = make_request("a", 40);
  ASSERT_TRUE(kv.allocate_slots(*r, 40).has_value());
  r->num_computed_tokens = 40;
  int32_t most = 0;
  for (int step = 0; step < 400; ++step) {
    decode_step(kv, *r);
    most = std::max(most, held(kv, "a"));
    ASSERT_LE(held(kv, "a"), kv.max_blocks_held(r->num_tokens(), 1)) << "step " << step;
    // Every entry whose block ends before the next query's window is null; the rest are held.
    const auto table = kv.block_table("a");
    const int32_t first_needed = r->num_computed_tokens - window + 1;
    for (size_t i = 0; i < table.size(); ++i) {
      const bool outside = static_cast<int32_t>(i + 1) * bs <= first_needed;
      if (!outside) {
        EXPECT_NE(table[i], kNullBlock) << "step " << step << " entry " << i;
      }
    }
    ASSERT_TRUE(kv.pool().check_invariants());
  }
  EXPECT_EQ(kv.block_table("a").size(), static_cast<size_t>((r->num_tokens() + bs - 1) / bs));  // positions kept
  EXPECT_LE(most, 5);
  kv.evict_outside_window(*r);
  kv.free(*r);
  EXPECT_EQ(kv.num_free_blocks(), 63);
  EXPECT_TRUE(kv.pool().check_invariants());
}

TEST(KvWindow, WithoutAWindowNothingIsReleased) {
  KvCacheManager kv(64, 16, true);
  auto r = make_request("a", 40);
  ASSERT_TRUE(kv.allocate_slots(*r, 40).has_value());
  r->num_computed_tokens = 40;
  for (int step = 0; step < 100; ++step) {
    EXPECT_EQ(kv.evict_outside_window(*r), 0);
    ASSERT_TRUE(kv.allocate_slots(*r, 1).has_value());
    r->num_computed_tokens += 1;
    r->output.push_back(7);
  }
  EXPECT_EQ(held(kv, "a"), (r->num_tokens() + 15) / 16);
}

TEST(KvWindow, ReleasedCachedBlocksStayFindableUntilReused) {
  const int32_t bs = 16;
  KvCacheManager kv(64, bs, true);
  kv.set_sliding_window(32);
  auto a = make_request("a", 96);
  ASSERT_TRUE(kv.allocate_slots(*a, 96).has_value());
  a->num_computed_tokens = 96;
  decode_step(kv, *a);  // first_needed 65: blocks 0-3 released
  EXPECT_EQ(held(kv, "a"), 3);
  // The same prompt: its whole prefix is still cached (the released blocks kept their hashes).
  auto b = make_request("b", 96);
  ComputedBlocks hit = kv.find_computed_blocks(*b);
  EXPECT_EQ(hit.num_tokens, 80);  // 5 full blocks (the last token stays uncomputed)
  ASSERT_TRUE(kv.allocate_slots(*b, 16, hit).has_value());
  b->num_computed_tokens = 96;
  EXPECT_TRUE(kv.pool().check_invariants());
  // b's own step releases the hit blocks that are outside its window (blocks 0-3; block 4 is
  // shared with a, block 5 is b's own).
  kv.evict_outside_window(*b);
  EXPECT_EQ(held(kv, "b"), 2);
  kv.free(*a);
  kv.free(*b);
  EXPECT_EQ(kv.num_free_blocks(), 63);
  // Once a released block is handed out again, a prefix hit stops before it (the chain breaks).
  KvCacheManager small(9, bs, true);
  small.set_sliding_window(32);
  auto c = make_request("c", 96);
  ASSERT_TRUE(small.allocate_slots(*c, 96).has_value());
  c->num_computed_tokens = 96;
  small.evict_outside_window(*c);
  auto d = make_request("d", 40, 5000);  // takes the free blocks, the released ones among them
  ASSERT_TRUE(small.allocate_slots(*d, 40).has_value());
  auto e = make_request("e", 96);
  const ComputedBlocks miss = small.find_computed_blocks(*e);
  EXPECT_LT(miss.num_tokens, 80);
  EXPECT_TRUE(small.pool().check_invariants());
}

TEST(KvWindow, SwapKeepsTheNullEntries) {
  const int32_t bs = 16;
  KvCacheManager kv(64, bs, true, /*num_host_blocks=*/32);
  kv.set_sliding_window(32);
  auto r = make_request("a", 100);
  ASSERT_TRUE(kv.allocate_slots(*r, 100).has_value());
  r->num_computed_tokens = 100;
  kv.evict_outside_window(*r);
  const std::vector<BlockId> before(kv.block_table("a").begin(), kv.block_table("a").end());
  const int32_t n_held = held(kv, "a");
  ASSERT_LT(n_held, static_cast<int32_t>(before.size()));
  auto out = kv.swap_out(*r);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(static_cast<int32_t>(out->size()), n_held);  // only the held blocks are copied
  EXPECT_EQ(kv.num_free_blocks(), 63);
  auto in = kv.swap_in(*r);
  ASSERT_TRUE(in.has_value());
  EXPECT_EQ(static_cast<int32_t>(in->size()), n_held);
  const auto after = kv.block_table("a");
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i] == kNullBlock, before[i] == kNullBlock) << i;
  kv.free(*r);
  EXPECT_EQ(kv.num_free_blocks(), 63);
  EXPECT_TRUE(kv.pool().check_invariants());
}

TEST(KvWindow, SchedulerSendsTheRunnerTheTableWithReleasedEntriesNulled) {
  const int32_t bs = 16;
  KvCacheManager kv(8, bs, true);  // 7 usable blocks: 112 tokens, less than the 300 the request reaches
  kv.set_sliding_window(32);
  SchedulerConfig sc;
  sc.max_num_batched_tokens = 16;
  sc.max_num_seqs = 4;
  sc.max_model_len = 1024;
  Scheduler sched(sc, kv);
  auto r = make_request("a", 40);
  r->stop.max_tokens = 260;
  sched.add_request(r.get());
  int replaced = 0;
  bool finished = false;
  for (int step = 0; step < 400 && !finished; ++step) {
    SchedulerOutput out = sched.schedule();
    for (const auto& c : out.cached_requests) {
      if (!c.replace_block_table) continue;
      ++replaced;
      EXPECT_EQ(c.new_block_ids.front(), kNullBlock);  // the first block left the window first
      EXPECT_EQ(c.new_block_ids.size(), kv.block_table("a").size());
    }
    std::vector<SampledToken> sampled;
    if (r->num_computed_tokens == r->num_tokens()) sampled.push_back({"a", 7});
    StepUpdate u = sched.update_from_output(out, sampled);
    finished = !u.finished.empty();
    EXPECT_EQ(sched.num_preemptions(), 0);
    ASSERT_TRUE(kv.pool().check_invariants());
  }
  EXPECT_TRUE(finished);
  EXPECT_GT(replaced, 10);
  EXPECT_EQ(kv.num_free_blocks(), 7);
}

}  // namespace
}  // namespace pagoda

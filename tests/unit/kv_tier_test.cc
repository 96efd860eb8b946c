// KV cache tiers without a model: the disk tier's files (checksums, truncation, capacity, reuse
// after a restart) and the block manager's host and disk tiers driven by the scheduler, against
// a simulated executor whose "K/V" of a slot is the token id computed into it. Every step checks
// that each scheduled request's block table holds exactly its tokens in the slots the scheduler
// counts as computed: a fill from a tier with the wrong bytes, a copy in the wrong order or a
// spill of a block not yet written fails it.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <random>

#include <unistd.h>

#include "common/check.h"
#include "kv/disk_tier_store.h"
#include "kv/kv_cache_manager.h"
#include "sched/scheduler.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / fmt::format("pagoda_kv_tier_{}_{}", ::getpid(), counter_++);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

std::vector<uint8_t> pattern(size_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + seed * 7 + 1);
  return v;
}

TEST(DiskTierStore, RoundTripAndReopen) {
  TempDir dir;
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const auto bytes = pattern(256, 1);
  {
    auto store = DiskTierStore::open(dir.str(), 42, 1 << 20, 256);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    (*store)->store(0xabc, tokens, bytes);
    EXPECT_TRUE((*store)->contains(0xabc));
    std::vector<uint8_t> back(256);
    ASSERT_TRUE((*store)->load(0xabc, tokens, back));
    EXPECT_EQ(back, bytes);
    EXPECT_FALSE((*store)->load(0xdef, tokens, back));
    // Same hash, other tokens: a collision, a miss, the file is kept.
    EXPECT_FALSE((*store)->load(0xabc, std::vector<int32_t>{1, 2, 3, 5}, back));
    EXPECT_TRUE((*store)->contains(0xabc));
    EXPECT_EQ((*store)->num_rejected(), 0);
  }
  // A restart finds the block; another namespace (model) does not.
  auto again = DiskTierStore::open(dir.str(), 42, 1 << 20, 256);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->num_blocks(), 1);
  std::vector<uint8_t> back(256);
  ASSERT_TRUE((*again)->load(0xabc, tokens, back));
  EXPECT_EQ(back, bytes);
  auto other = DiskTierStore::open(dir.str(), 43, 1 << 20, 256);
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE((*other)->contains(0xabc));
}

TEST(DiskTierStore, CorruptAndTruncatedFilesAreMisses) {
  TempDir dir;
  auto store = DiskTierStore::open(dir.str(), 7, 1 << 20, 128);
  ASSERT_TRUE(store.ok());
  DiskTierStore& s = **store;
  const std::vector<int32_t> tokens = {9, 8};
  std::vector<uint8_t> back(128);
  // One flipped payload byte.
  s.store(1, tokens, pattern(128, 1));
  {
    std::fstream f(s.path_of(1), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(DiskTierStore::kHeaderBytes + 8 + 100);
    f.put('\x5a' ^ static_cast<char>(pattern(128, 1)[100]));
  }
  EXPECT_FALSE(s.load(1, tokens, back));
  EXPECT_EQ(s.num_rejected(), 1);
  EXPECT_FALSE(s.contains(1));
  EXPECT_FALSE(fs::exists(s.path_of(1)));
  // A truncated file.
  s.store(2, tokens, pattern(128, 2));
  fs::resize_file(s.path_of(2), DiskTierStore::kHeaderBytes + 8 + 60);
  EXPECT_FALSE(s.load(2, tokens, back));
  EXPECT_EQ(s.num_rejected(), 2);
  // A flipped token id (the checksum covers the tokens too).
  s.store(3, tokens, pattern(128, 3));
  {
    std::fstream f(s.path_of(3), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(DiskTierStore::kHeaderBytes);
    const int32_t t = 10;
    f.write(reinterpret_cast<const char*>(&t), 4);
  }
  EXPECT_FALSE(s.load(3, std::vector<int32_t>{10, 8}, back));
  EXPECT_EQ(s.num_rejected(), 3);
  // A file renamed to another block's name (its header names another hash).
  s.store(4, tokens, pattern(128, 4));
  fs::copy_file(s.path_of(4), s.path_of(5));
  auto reopened = DiskTierStore::open(dir.str(), 7, 1 << 20, 128);
  ASSERT_TRUE(reopened.ok());
  EXPECT_FALSE((*reopened)->load(5, tokens, back));
  EXPECT_EQ((*reopened)->num_rejected(), 1);
  ASSERT_TRUE((*reopened)->load(4, tokens, back));
  EXPECT_EQ(back, pattern(128, 4));
}

TEST(DiskTierStore, CapacityEvictsLeastRecentlyUsed) {
  TempDir dir;
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const int64_t file = DiskTierStore::kHeaderBytes + 16 + 1000;
  auto store = DiskTierStore::open(dir.str(), 1, 3 * file, 1000);
  ASSERT_TRUE(store.ok());
  DiskTierStore& s = **store;
  std::vector<uint8_t> back(1000);
  for (BlockHash h = 1; h <= 3; ++h) s.store(h, tokens, pattern(1000, static_cast<int>(h)));
  EXPECT_EQ(s.bytes_used(), 3 * file);
  ASSERT_TRUE(s.load(1, tokens, back));  // 1 is now the most recent
  s.store(4, tokens, pattern(1000, 4));  // evicts 2
  EXPECT_TRUE(s.contains(1));
  EXPECT_FALSE(s.contains(2));
  EXPECT_FALSE(fs::exists(s.path_of(2)));
  EXPECT_TRUE(s.contains(3) && s.contains(4));
  EXPECT_EQ(s.num_evicted(), 1);
  EXPECT_LE(s.bytes_used(), s.capacity_bytes());
  // Reopening with a smaller cap trims the oldest files.
  auto small = DiskTierStore::open(dir.str(), 1, 2 * file, 1000);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ((*small)->num_blocks(), 2);
}

// The executor of a scheduler timeline: a slot's "K/V" is the token id computed there (-1:
// never written). Host blocks are read and written by the disk tier through KvHostBlockIo.
class SimulatedKv final : public KvHostBlockIo {
 public:
  SimulatedKv(int32_t num_blocks, int32_t num_host_blocks, int32_t block_size)
      : bs_(block_size), dev_(num_blocks, std::vector<int32_t>(block_size, -1)),
        host_(num_host_blocks + 1, std::vector<int32_t>(block_size, -1)) {}

  int64_t host_block_bytes() const override { return bs_ * 4; }
  void read_host_block(BlockId b, std::span<uint8_t> dst) override { std::memcpy(dst.data(), host_[b].data(), bs_ * 4); }
  void write_host_block(BlockId b, std::span<const uint8_t> src) override { std::memcpy(host_[b].data(), src.data(), bs_ * 4); }

  // The copies, then the forward: writes each scheduled token id into its slot.
  void run(const SchedulerOutput& out, const KvCacheManager& kv, const std::map<std::string, std::unique_ptr<Request>>& reqs) {
    for (const auto& [d, h] : out.swap_out) host_[h] = dev_[d];
    for (const auto& [h, d] : out.swap_in) dev_[d] = host_[h];
    for (const auto& st : out.num_scheduled_tokens) {
      const Request& r = *reqs.at(st.id);
      const auto table = kv.block_table(st.id);
      for (int32_t p = r.num_computed_tokens - st.num_tokens; p < r.num_computed_tokens; ++p)
        dev_[table[p / bs_]][p % bs_] = r.token_at(p);
    }
  }
  // Every computed slot of r holds r's token.
  ::testing::AssertionResult holds(const Request& r, const KvCacheManager& kv) const {
    const auto table = kv.block_table(r.id);
    for (int32_t p = 0; p < r.num_computed_tokens; ++p) {
      const int32_t got = dev_[table[p / bs_]][p % bs_];
      if (got != r.token_at(p))
        return ::testing::AssertionFailure() << r.id << " slot " << p << " holds " << got << ", want " << r.token_at(p);
    }
    return ::testing::AssertionSuccess();
  }

 private:
  int32_t bs_;
  std::vector<std::vector<int32_t>> dev_, host_;
};

class TierHarness {
 public:
  TierHarness(int32_t num_blocks, int32_t host_blocks, const std::string& disk_dir = {}, int64_t disk_bytes = 1 << 20)
      : sim_(num_blocks, host_blocks, kBs), kv_(num_blocks, kBs, true, host_blocks), sched_(config(), kv_) {
    if (!disk_dir.empty()) {
      auto disk = DiskTierStore::open(disk_dir, 5, disk_bytes, kBs * 4);
      PAGODA_CHECK(disk.ok(), "{}", disk.status().to_string());
      kv_.set_disk_tier(std::move(*disk), &sim_);
    }
  }
  static SchedulerConfig config() {
    SchedulerConfig c;
    c.max_num_batched_tokens = 64;
    c.max_num_seqs = 4;
    c.max_model_len = 1024;
    c.preemption = PreemptionMode::kSwap;
    return c;
  }
  // A prompt of `shared` tokens from `prefix` then `own` tokens of the request's own.
  void add(const std::string& id, int prefix, int shared, int own, int max_tokens = 2) {
    auto r = std::make_unique<Request>();
    r->id = id;
    for (int i = 0; i < shared; ++i) r->prompt.push_back(prefix * 10000 + i);
    for (int i = 0; i < own; ++i) r->prompt.push_back(500000 + static_cast<int>(reqs_.size()) * 1000 + i);
    r->stop.max_tokens = max_tokens;
    r->arrival_seq = reqs_.size();
    sched_.add_request(r.get());
    reqs_[id] = std::move(r);
  }
  // One step, checking the simulated cache of every scheduled request.
  void step() {
    SchedulerOutput out = sched_.schedule();
    sim_.run(out, kv_, reqs_);
    std::vector<SampledToken> sampled;
    for (const auto& st : out.num_scheduled_tokens) {
      const Request& r = *reqs_.at(st.id);
      ASSERT_TRUE(sim_.holds(r, kv_)) << "step " << steps_;
      if (r.num_computed_tokens == r.num_tokens()) sampled.push_back({st.id, 900000 + r.num_tokens()});
    }
    sched_.update_from_output(out, sampled);
    ASSERT_TRUE(kv_.pool().check_invariants());
    ++steps_;
  }
  // Steps until every request finished.
  void run_all() {
    for (int n = 0; sched_.has_unfinished(); ++n) {
      ASSERT_LT(n, 10000);
      step();
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  void abort(const std::string& id) { sched_.finish_request(id, RequestStatus::kFinishedAborted); }
  bool has_unfinished() const { return sched_.has_unfinished(); }
  KvCacheManager& kv() { return kv_; }
  Request& req(const std::string& id) { return *reqs_.at(id); }
  static constexpr int32_t kBs = 4;

 private:
  SimulatedKv sim_;
  KvCacheManager kv_;
  Scheduler sched_;
  std::map<std::string, std::unique_ptr<Request>> reqs_;
  int steps_ = 0;
};

TEST(KvTiers, EvictedPrefixComesBackFromTheHostTier) {
  // 16 usable primary blocks of 4 tokens; a 40-token shared prefix (10 blocks).
  TierHarness h(17, 64);
  h.add("a", 1, 40, 3);
  h.run_all();
  // Another prefix pushes a's blocks out of the primary pool (into the host tier).
  h.add("b", 2, 48, 3);
  h.run_all();
  // b evicted a's blocks tail first: a's first blocks may still be in the primary pool.
  EXPECT_GE(h.kv().tier_stats().host_stores, 7);
  EXPECT_EQ(h.kv().prefix_stats().hits, 0);
  h.add("c", 1, 40, 5);
  h.run_all();
  EXPECT_GE(h.kv().tier_stats().host_hits, 28);
  EXPECT_EQ(h.kv().prefix_stats().hits + h.kv().tier_stats().host_hits, 40);
  EXPECT_EQ(h.req("c").num_cached_prompt_tokens, 40);
  EXPECT_EQ(h.kv().tier_stats().disk_hits, 0);
}

TEST(KvTiers, HostTierEvictionCascadesToDiskAndComesBack) {
  TempDir dir;
  // A host tier of 12 blocks: two 40-token prefixes do not fit it, the first goes to disk.
  TierHarness h(17, 12, dir.str());
  h.add("a", 1, 40, 3);
  h.run_all();
  h.add("b", 2, 48, 3);
  h.run_all();
  h.add("b2", 3, 48, 3);
  h.run_all();
  EXPECT_GE(h.kv().tier_stats().disk_stores, 7);
  h.add("c", 1, 40, 5);
  h.run_all();
  EXPECT_GE(h.kv().tier_stats().disk_hits, 16);
  EXPECT_EQ(h.req("c").num_cached_prompt_tokens, 40);  // from the primary pool, the host and the disk tier
}

TEST(KvTiers, CorruptDiskBlockEndsTheHitAndIsRecomputed) {
  TempDir dir;
  TierHarness h(17, 12, dir.str());
  h.add("a", 1, 40, 3);
  h.run_all();
  h.add("b", 2, 48, 3);
  h.run_all();
  h.add("b2", 3, 48, 3);
  h.run_all();
  // Corrupt the file of a's sixth block: blocks 0-4 still hit, the rest is recomputed.
  const DiskTierStore* disk = h.kv().disk_tier();
  ASSERT_NE(disk, nullptr);
  Request probe;
  for (int i = 0; i < 40; ++i) probe.prompt.push_back(10000 + i);
  BlockHash parent = kRootHash;
  BlockHash sixth = 0;
  for (int b = 0; b < 6; ++b) {
    parent = hash_block_tokens(parent, std::span<const int32_t>(probe.prompt).subspan(b * 4, 4));
    sixth = parent;
  }
  ASSERT_TRUE(fs::exists(disk->path_of(sixth)));
  {
    std::fstream f(disk->path_of(sixth), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x77');
  }
  h.add("c", 1, 40, 5);
  h.run_all();
  EXPECT_EQ(h.kv().tier_stats().disk_rejected, 1);
  EXPECT_EQ(h.req("c").num_cached_prompt_tokens, 20);
}

TEST(KvTiers, PreemptedRequestsSwapToTheHostTier) {
  // 8 usable primary blocks; two requests that grow past them.
  TierHarness h(9, 64);
  h.add("a", 1, 12, 0, 14);
  h.add("b", 2, 12, 0, 14);
  h.run_all();
  EXPECT_GT(h.kv().tier_stats().swap_outs, 0);
  EXPECT_EQ(h.kv().tier_stats().swap_outs, h.kv().tier_stats().swap_ins);
  EXPECT_EQ(h.req("a").output.size(), 14u);
  EXPECT_EQ(h.req("b").output.size(), 14u);
}

TEST(KvTiers, ManySharedPrefixesAgainstSmallPools) {
  // Six prefixes in rotation over a primary pool of 12 blocks, a host tier of 20 and a disk:
  // hits come from every level, and the simulated cache stays right at every step.
  TempDir dir;
  TierHarness h(13, 20, dir.str());
  for (int round = 0; round < 3; ++round)
    for (int p = 1; p <= 6; ++p) {
      h.add(fmt::format("r{}p{}", round, p), p, 24, 2 + p);
      h.run_all();
    }
  EXPECT_GT(h.kv().tier_stats().host_hits + h.kv().tier_stats().disk_hits, 0);
  EXPECT_GT(h.kv().tier_stats().disk_hits, 0);
  EXPECT_EQ(h.kv().tier_stats().disk_rejected, 0);
}

TEST(KvTiers, RandomConcurrentWorkloadWithAbortsKeepsTheCacheRight) {
  // Up to 4 requests at a time over 5 prefix families, swaps, aborts, a small host tier over a
  // disk tier: every scheduled slot is checked at every step.
  TempDir dir;
  TierHarness h(21, 14, dir.str(), 200 * (DiskTierStore::kHeaderBytes + 16 + 16));
  std::mt19937 rng(11);
  int next = 0;
  std::vector<std::string> live;
  for (int iter = 0; iter < 1500; ++iter) {
    if (rng() % 3 == 0) {
      const std::string id = fmt::format("q{}", next++);
      h.add(id, 1 + static_cast<int>(rng() % 5), 8 + static_cast<int>(rng() % 40), static_cast<int>(rng() % 9),
            1 + static_cast<int>(rng() % 12));
      live.push_back(id);
    }
    if (!live.empty() && rng() % 11 == 0) {
      const size_t i = rng() % live.size();
      h.abort(live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    h.step();
    if (::testing::Test::HasFatalFailure()) return;
  }
  h.run_all();
  const KvTierStats& st = h.kv().tier_stats();
  EXPECT_GT(st.host_hits, 0);
  EXPECT_GT(st.disk_hits, 0);
  EXPECT_GT(st.host_stores, 0);
  EXPECT_GT(st.disk_stores, 0);
  EXPECT_LE(h.kv().disk_tier()->bytes_used(), h.kv().disk_tier()->capacity_bytes());
  EXPECT_GT(h.kv().disk_tier()->num_evicted(), 0);  // the disk tier's own cap was reached
  h.kv().begin_step();
  EXPECT_EQ(h.kv().num_free_blocks(), h.kv().pool().num_usable_blocks());
  EXPECT_EQ(h.kv().num_free_host_blocks(), 14);
}

}  // namespace
}  // namespace pagoda

// Scheduler timelines without a model: each table row is one iteration with the expected
// scheduled tokens per request, running and waiting queues, and preemptions.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "sched/scheduler.h"

namespace pagoda {
namespace {

struct Row {
  std::map<std::string, int> scheduled;
  std::vector<std::string> running;
  std::vector<std::string> waiting;
  std::vector<std::string> preempted = {};
};

class Harness {
 public:
  Harness(int32_t num_blocks, int32_t block_size, SchedulerConfig cfg, bool caching = true, int32_t host_blocks = 0)
      : kv_(num_blocks, block_size, caching, host_blocks), sched_(cfg, kv_) {}

  // Prompts are distinct per request unless first_token is given (shared prefixes).
  Request* add(const std::string& id, int prompt_len, int max_tokens, int priority = 0, int first_token = -1) {
    if (first_token < 0) first_token = 1000 * static_cast<int>(reqs_.size() + 1);
    auto r = std::make_unique<Request>();
    r->id = id;
    for (int i = 0; i < prompt_len; ++i) r->prompt.push_back(first_token + i);
    r->stop.max_tokens = max_tokens;
    r->priority = priority;
    r->arrival_time = static_cast<double>(reqs_.size());
    r->arrival_seq = reqs_.size();
    Request* raw = r.get();
    reqs_[id] = std::move(r);
    sched_.add_request(raw);
    return raw;
  }

  // One iteration: schedule, then "run the model": every request whose known tokens are all
  // computed samples token 7.
  SchedulerOutput step() {
    SchedulerOutput out = sched_.schedule();
    std::vector<SampledToken> sampled;
    for (const auto& st : out.num_scheduled_tokens) {
      const Request& r = *reqs_.at(st.id);
      if (r.num_computed_tokens == r.num_tokens()) sampled.push_back({st.id, 7});
    }
    sched_.update_from_output(out, sampled);
    return out;
  }

  void check(const std::vector<Row>& rows) {
    for (size_t i = 0; i < rows.size(); ++i) {
      SCOPED_TRACE("iteration " + std::to_string(i));
      SchedulerOutput out = step();
      std::map<std::string, int> got;
      for (const auto& s : out.num_scheduled_tokens) got[s.id] = s.num_tokens;
      EXPECT_EQ(got, rows[i].scheduled);
      EXPECT_EQ(sched_.running_ids(), rows[i].running);
      EXPECT_EQ(sched_.waiting_ids(), rows[i].waiting);
      EXPECT_EQ(out.preempted, rows[i].preempted);
      EXPECT_TRUE(kv_.pool().check_invariants());
    }
  }

  Scheduler& sched() { return sched_; }
  KvCacheManager& kv() { return kv_; }
  Request& req(const std::string& id) { return *reqs_.at(id); }

 private:
  KvCacheManager kv_;
  Scheduler sched_;
  std::map<std::string, std::unique_ptr<Request>> reqs_;
};

SchedulerConfig cfg(int budget, int max_seqs = 16, const char* policy = "fcfs") {
  SchedulerConfig c;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = max_seqs;
  c.max_model_len = 1000;
  c.policy = policy;
  return c;
}

TEST(SchedulerTimeline, ChunkedPrefillThenDecodeNeverStarvesDecodes) {
  Harness h(64, 4, cfg(8));
  h.add("A", 10, 3);
  h.add("B", 4, 2);
  h.check({
      {{{"A", 8}}, {"A"}, {"B"}},                 // A's prompt chunked: 8 of 10
      {{{"A", 2}, {"B", 4}}, {"A", "B"}, {}},     // A finishes its prompt (samples), B prefills whole
      {{{"A", 1}, {"B", 1}}, {"A"}, {}},          // decodes; B reaches max_tokens 2 and finishes
      {{{"A", 1}}, {}, {}},                       // A's third token: done
  });
  EXPECT_EQ(h.kv().num_free_blocks(), 63);
}

TEST(SchedulerTimeline, LongPrefillDoesNotBlockRunningDecode) {
  Harness h(64, 4, cfg(6));
  h.add("A", 2, 5);
  h.check({{{{"A", 2}}, {"A"}, {}}});
  h.add("B", 20, 1);
  h.check({
      {{{"A", 1}, {"B", 5}}, {"A", "B"}, {}},  // decode first, then B's chunk fills the rest
      {{{"A", 1}, {"B", 5}}, {"A", "B"}, {}},
      {{{"A", 1}, {"B", 5}}, {"A", "B"}, {}},
  });
}

TEST(SchedulerTimeline, MaxNumSeqsLimitsAdmission) {
  Harness h(64, 4, cfg(100, 2));
  h.add("A", 3, 2);
  h.add("B", 3, 2);
  h.add("C", 3, 2);
  h.check({
      {{{"A", 3}, {"B", 3}}, {"A", "B"}, {"C"}},
      {{{"A", 1}, {"B", 1}}, {}, {"C"}},
      {{{"C", 3}}, {"C"}, {}},
  });
}

TEST(SchedulerTimeline, RecomputePreemptionKeepsGeneratedTokens) {
  // 4 usable blocks of 2 tokens = 8 tokens. A and B take 3 prompt tokens each (2 blocks each).
  Harness h(5, 2, cfg(100));
  h.add("A", 3, 10);
  h.add("B", 3, 10);
  h.check({
      {{{"A", 3}, {"B", 3}}, {"A", "B"}, {}},  // both sample: 4 tokens each known, 3 computed
      {{{"A", 1}, {"B", 1}}, {"A", "B"}, {}},  // token 4 fits in block 2; each now has 5 tokens
      // A needs a third block: none free; B (latest) is preempted, A proceeds.
      {{{"A", 1}}, {"A"}, {"B"}, {"B"}},
  });
  const Request& b = h.req("B");
  EXPECT_EQ(b.status, RequestStatus::kPreempted);
  EXPECT_EQ(b.num_computed_tokens, 0);
  EXPECT_EQ(b.output.size(), 2u);  // generated tokens survive the preemption
  EXPECT_EQ(h.sched().num_preemptions(), 1);
}

TEST(SchedulerTimeline, PreemptedRequestResumesWithPromptAndOutput) {
  Harness h(5, 2, cfg(100));
  h.add("A", 3, 3);
  h.add("B", 3, 10);
  h.check({
      {{{"A", 3}, {"B", 3}}, {"A", "B"}, {}},
      {{{"A", 1}, {"B", 1}}, {"A", "B"}, {}},
      {{{"A", 1}}, {}, {"B"}, {"B"}},  // A finishes (3 tokens), B was preempted for it
      // B comes back with prompt 3 + output 2 = 5 tokens. Its freed blocks went to the free
      // queue tail-first, so A's new block evicted B's second block; the first (2 tokens) is
      // still cached and only 3 tokens are recomputed.
      {{{"B", 3}}, {"B"}, {}},
  });
  EXPECT_EQ(h.req("B").output.size(), 3u);
}

TEST(SchedulerTimeline, PriorityOrdersAdmissionAndPicksVictims) {
  // 6 usable blocks of 2 tokens; three 4-token prompts fill them. On the next step each needs a
  // third block: the victim is the lowest priority (b), not the latest arrival (c).
  Harness h(7, 2, cfg(100, 16, "priority"));
  h.add("a", 4, 10, /*priority=*/0);
  h.add("b", 4, 10, /*priority=*/5);
  h.add("c", 4, 10, /*priority=*/2);
  h.check({
      {{{"a", 4}, {"b", 4}, {"c", 4}}, {"a", "c", "b"}, {}},  // admitted in priority order
      {{{"a", 1}, {"c", 1}}, {"a", "c"}, {"b"}, {"b"}},
  });
}

TEST(SchedulerTimeline, FcfsPicksTheLatestArrivalAsVictim) {
  Harness h(7, 2, cfg(100, 16, "fcfs"));
  h.add("a", 4, 10, 0);
  h.add("b", 4, 10, 5);
  h.add("c", 4, 10, 2);
  h.check({
      {{{"a", 4}, {"b", 4}, {"c", 4}}, {"a", "b", "c"}, {}},
      {{{"a", 1}, {"b", 1}}, {"a", "b"}, {"c"}, {"c"}},
  });
}

TEST(SchedulerTimeline, HigherPriorityWaitingRequestPreemptsLowerRunning) {
  Harness h(4, 2, cfg(100, 16, "priority"));
  h.add("low", 4, 10, 5);
  h.check({{{{"low", 4}}, {"low"}, {}}});
  h.add("high", 4, 10, 0);
  // 3 usable blocks: low holds 2 (+1 soon); high needs 3: low is preempted at admission.
  h.check({{{{"high", 4}}, {"high"}, {"low"}, {"low"}}});
}

TEST(SchedulerTimeline, PrefixCacheHitSkipsComputedBlocks) {
  Harness h(64, 4, cfg(100));
  h.add("A", 10, 1, 0, /*first_token=*/50);
  h.check({{{{"A", 10}}, {}, {}}});
  // Same first 10 tokens: 2 full blocks (8 tokens) are cached; 2 left to compute.
  h.add("B", 12, 1, 0, 50);
  h.check({{{{"B", 4}}, {}, {}}});
  EXPECT_EQ(h.req("B").num_cached_prompt_tokens, 8);
  EXPECT_EQ(h.kv().prefix_stats().hits, 8);
}

TEST(SchedulerTimeline, ParallelSamplesWaitForLeaderThenShareBlocks) {
  Harness h(64, 4, cfg(100));
  Request* a0 = h.add("A#0", 9, 2, 0, 20);
  Request* a1 = h.add("A#1", 9, 2, 0, 20);
  a1->prefill_leader = "A#0";
  (void)a0;
  h.check({
      {{{"A#0", 9}}, {"A#0"}, {"A#1"}},                 // follower waits for the leader's prompt
      {{{"A#0", 1}, {"A#1", 1}}, {"A#1"}, {}},          // hit on 8 tokens: only 1 computed
  });
  EXPECT_EQ(h.req("A#1").num_cached_prompt_tokens, 8);
}

TEST(SchedulerTimeline, SwapPreemptionMovesBlocksToHost) {
  SchedulerConfig c = cfg(100);
  c.preemption = PreemptionMode::kSwap;
  Harness h(5, 2, c, true, /*host_blocks=*/8);
  h.add("A", 3, 3);
  h.add("B", 3, 10);
  h.step();
  h.step();
  SchedulerOutput out = h.step();  // A needs a block: B swapped out (not recomputed)
  EXPECT_TRUE(out.preempted.empty());
  EXPECT_EQ(out.swap_out.size(), 2u);  // B's 2 blocks (4 computed tokens)
  EXPECT_TRUE(h.req("B").swapped_out);
  EXPECT_EQ(h.req("B").num_computed_tokens, 4);  // kept, not recomputed
  SchedulerOutput back = h.step();  // A finished last step; B swaps in and continues
  EXPECT_EQ(back.swap_in.size(), 2u);
  ASSERT_EQ(back.num_scheduled_tokens.size(), 1u);
  EXPECT_EQ(back.num_scheduled_tokens[0].num_tokens, 1);
  EXPECT_FALSE(h.req("B").swapped_out);
}

TEST(SchedulerTimeline, NoChunkingWaitsForWholePromptBudget) {
  SchedulerConfig c = cfg(8);
  c.chunked_prefill = false;
  Harness h(64, 4, c);
  h.add("A", 6, 2);
  h.add("B", 6, 2);
  h.check({
      {{{"A", 6}}, {"A"}, {"B"}},               // B (6) does not fit the remaining 2
      {{{"A", 1}, {"B", 6}}, {"B"}, {}},
  });
}

TEST(SchedulerTimeline, AbortFreesBlocksImmediately) {
  Harness h(16, 4, cfg(100));
  h.add("A", 10, 50);
  h.step();
  const int32_t free_before = h.kv().num_free_blocks();
  h.sched().finish_request("A", RequestStatus::kFinishedAborted);
  EXPECT_EQ(h.kv().num_free_blocks(), free_before + 3);
  SchedulerOutput out = h.sched().schedule();
  EXPECT_EQ(out.finished, std::vector<std::string>{"A"});
  EXPECT_TRUE(out.empty());
}

TEST(SchedulerStops, EosStopIdsMinTokensAndLength) {
  Harness h(64, 4, cfg(100));
  Request* r = h.add("A", 2, 10);
  r->eos_token_ids = {7};  // the harness always samples 7
  r->stop.min_tokens = 2;
  h.step();  // token 1 = 7, but min_tokens 2: continue
  EXPECT_EQ(r->status, RequestStatus::kRunning);
  h.step();  // token 2 = 7: stop
  EXPECT_EQ(r->status, RequestStatus::kFinishedStopped);
  Request* s = h.add("B", 2, 10);
  s->eos_token_ids = {7};
  s->stop.ignore_eos = true;
  s->stop.max_tokens = 3;
  h.step();
  h.step();
  h.step();
  EXPECT_EQ(s->status, RequestStatus::kFinishedLength);
  EXPECT_EQ(s->output.size(), 3u);
}

}  // namespace
}  // namespace pagoda

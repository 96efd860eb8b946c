// Speculative decoding without a model: the scheduler's lookahead allocation and trimming of
// rejected slots, stop checks over several tokens per step, the n-gram proposer, and the
// verifier (greedy prefix rule; the rejection sampler's output distribution by chi-square; both
// under a structured-output constraint's per-row masks).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "runtime/model_runner.h"
#include "runtime/ngram_proposer.h"
#include "runtime/sampler.h"
#include "runtime/spec_verifier.h"
#include "sched/scheduler.h"

namespace pagoda {
namespace {

std::unique_ptr<Request> make_request(const std::string& id, int prompt_len, int max_tokens, int first = 100) {
  static uint64_t seq = 0;
  auto r = std::make_unique<Request>();
  r->arrival_seq = ++seq;
  r->arrival_time = static_cast<double>(seq);
  r->id = id;
  for (int i = 0; i < prompt_len; ++i) r->prompt.push_back(first + i);
  r->stop.max_tokens = max_tokens;
  r->eos_token_ids = {2};
  return r;
}

int scheduled(const SchedulerOutput& out, const std::string& id, std::vector<int32_t>* spec = nullptr) {
  for (const auto& s : out.num_scheduled_tokens)
    if (s.id == id) {
      if (spec) *spec = s.spec_tokens;
      return s.num_tokens;
    }
  return 0;
}

TEST(SpecScheduler, SchedulesDraftsWithLookaheadAndTrimsRejectedSlots) {
  KvCacheManager kv(32, 4, /*prefix caching=*/true);
  SchedulerConfig cfg;
  cfg.max_model_len = 100;
  Scheduler sched(cfg, kv);
  auto r = make_request("a", 6, 20);
  sched.add_request(r.get());
  SchedulerOutput out = sched.schedule();  // prefill: 6 tokens, 2 blocks
  EXPECT_EQ(scheduled(out, "a"), 6);
  sched.update_from_output(out, {{"a", 7}});
  EXPECT_EQ(kv.block_table("a").size(), 2u);
  sched.update_draft_tokens({{"a", {8, 9, 10}}});
  EXPECT_EQ(r->num_tokens_with_spec(), 10);

  std::vector<int32_t> spec;
  out = sched.schedule();  // token 7 at position 6 + drafts at 7, 8, 9: positions up to 9 -> 3 blocks
  EXPECT_EQ(scheduled(out, "a", &spec), 4);
  EXPECT_EQ(spec, (std::vector<int32_t>{8, 9, 10}));
  EXPECT_EQ(kv.block_table("a").size(), 3u);
  EXPECT_EQ(r->num_computed_tokens, 10);
  // Only verified tokens are hashed: block 1 (tokens 4..7) holds the draft 8 at slot 7 -> not yet.
  EXPECT_TRUE(kv.pool().is_cached(kv.block_table("a")[0]));
  EXPECT_FALSE(kv.pool().is_cached(kv.block_table("a")[1]));
  const BlockId third = kv.block_table("a")[2];
  const int32_t free_before = kv.num_free_blocks();
  // The target accepted draft 8 and then chose 11 (drafts 9, 10 rejected).
  sched.update_from_output(out, {{"a", 8}, {"a", 11}});
  EXPECT_EQ(r->output, (std::vector<int32_t>{7, 8, 11}));
  EXPECT_TRUE(r->spec_token_ids.empty());
  EXPECT_EQ(r->num_computed_tokens, 8);  // 6 prompt + 7 + 8; 11 is computed next
  EXPECT_EQ(kv.block_table("a").size(), 2u);  // the block of the rejected slots is given back
  EXPECT_EQ(kv.num_free_blocks(), free_before + 1);
  EXPECT_EQ(kv.pool().ref_count(third), 0);
  EXPECT_TRUE(kv.pool().check_invariants());

  // Next step: no drafts; the runner gets the whole (trimmed, then grown) table.
  out = sched.schedule();
  EXPECT_EQ(scheduled(out, "a"), 1);
  ASSERT_EQ(out.cached_requests.size(), 1u);
  EXPECT_TRUE(out.cached_requests[0].replace_block_table);
  const auto table = kv.block_table("a");
  EXPECT_EQ(out.cached_requests[0].new_block_ids, std::vector<BlockId>(table.begin(), table.end()));
  sched.update_from_output(out, {{"a", 12}});
  EXPECT_TRUE(kv.pool().is_cached(kv.block_table("a")[1]));  // tokens 4..7 verified now
}

TEST(SpecScheduler, DraftsAreCutByTheBudgetMaxTokensAndModelLength) {
  KvCacheManager kv(64, 4, false);
  SchedulerConfig cfg;
  cfg.max_model_len = 12;
  cfg.max_num_batched_tokens = 3;
  Scheduler sched(cfg, kv);
  auto r = make_request("a", 2, 8);
  sched.add_request(r.get());
  SchedulerOutput out = sched.schedule();
  sched.update_from_output(out, {{"a", 7}});
  sched.update_draft_tokens({{"a", {1, 1, 1, 1, 1}}});
  std::vector<int32_t> spec;
  out = sched.schedule();
  EXPECT_EQ(scheduled(out, "a", &spec), 3);  // budget 3: the token + 2 drafts
  EXPECT_EQ(spec.size(), 2u);
  sched.update_from_output(out, {{"a", 1}, {"a", 1}, {"a", 5}});  // all accepted + bonus
  EXPECT_EQ(r->num_computed_tokens, 5);
  EXPECT_EQ(r->output.size(), 4u);
  // max_tokens 8: 4 generated, so at most 3 drafts (accepting them all plus the bonus makes 8).
  KvCacheManager kv2(64, 4, false);
  SchedulerConfig cfg2;
  cfg2.max_model_len = 100;
  Scheduler s2(cfg2, kv2);
  auto q = make_request("q", 2, 4);
  s2.add_request(q.get());
  out = s2.schedule();
  s2.update_from_output(out, {{"q", 7}});
  s2.update_draft_tokens({{"q", {1, 1, 1, 1, 1}}});
  out = s2.schedule();
  EXPECT_EQ(scheduled(out, "q", &spec), 3);  // 1 + 2 drafts: 1 + 3 tokens reach max_tokens 4
  // max_model_len 12 caps drafts: a request at 10 tokens may draft at most 1.
  KvCacheManager kv3(64, 4, false);
  SchedulerConfig cfg3;
  cfg3.max_model_len = 12;
  Scheduler s3(cfg3, kv3);
  auto w = make_request("w", 9, 50);
  s3.add_request(w.get());
  out = s3.schedule();
  s3.update_from_output(out, {{"w", 7}});
  s3.update_draft_tokens({{"w", {1, 1, 1}}});
  out = s3.schedule();
  EXPECT_EQ(scheduled(out, "w", &spec), 2);
}

TEST(SpecScheduler, StopInsideTheAcceptedTokensCutsThereAndFreesEverything) {
  KvCacheManager kv(32, 4, true);
  SchedulerConfig cfg;
  Scheduler sched(cfg, kv);
  auto r = make_request("a", 5, 20);
  auto m = make_request("m", 5, 3, 300);
  sched.add_request(r.get());
  sched.add_request(m.get());
  SchedulerOutput out = sched.schedule();
  sched.update_from_output(out, {{"a", 7}, {"m", 7}});
  sched.update_draft_tokens({{"a", {8, 2, 9}}, {"m", {8, 8, 8}}});
  out = sched.schedule();
  // a: draft 8 accepted, EOS (2) accepted -> stops at EOS; 9 and the bonus are dropped.
  // m: max_tokens 3 -> at most 1 draft scheduled; both kept tokens reach the limit exactly.
  std::vector<int32_t> spec;
  EXPECT_EQ(scheduled(out, "m", &spec), 2);
  StepUpdate up = sched.update_from_output(out, {{"a", 8}, {"a", 2}, {"a", 9}, {"a", 4}, {"m", 8}, {"m", 6}});
  EXPECT_EQ(r->output, (std::vector<int32_t>{7, 8, 2}));
  EXPECT_EQ(r->status, RequestStatus::kFinishedStopped);
  EXPECT_EQ(m->output, (std::vector<int32_t>{7, 8, 6}));
  EXPECT_EQ(m->status, RequestStatus::kFinishedLength);
  EXPECT_EQ(up.finished.size(), 2u);
  EXPECT_EQ(kv.num_free_blocks(), kv.pool().num_usable_blocks());
  EXPECT_TRUE(kv.pool().check_invariants());
}

TEST(SpecScheduler, NoRoomForLookaheadDropsTheDraftsBeforeAnyPreemption) {
  // 4 usable blocks of 4 tokens, both requests at 7 tokens in 2 blocks: no room for lookahead.
  KvCacheManager kv(5, 4, false);
  SchedulerConfig cfg;
  Scheduler sched(cfg, kv);
  auto a = make_request("a", 6, 20);
  auto b = make_request("b", 6, 20, 300);
  sched.add_request(a.get());
  sched.add_request(b.get());
  SchedulerOutput out = sched.schedule();
  sched.update_from_output(out, {{"a", 7}, {"b", 7}});
  sched.update_draft_tokens({{"a", {1, 1, 1}}, {"b", {1, 1, 1}}});
  out = sched.schedule();
  std::vector<int32_t> spec = {0};
  EXPECT_EQ(scheduled(out, "a", &spec), 1);
  EXPECT_TRUE(spec.empty());
  EXPECT_EQ(scheduled(out, "b"), 1);
  EXPECT_TRUE(out.preempted.empty());
}

TEST(SpecScheduler, PreemptionDropsDraftsInFlight) {
  // 5 usable blocks: a (6 tokens) takes the last free block for its drafts' lookahead; b (9
  // tokens) then needs a block even without drafts and is preempted, its drafts dropped.
  KvCacheManager kv(6, 4, false);
  SchedulerConfig cfg;
  Scheduler sched(cfg, kv);
  auto a = make_request("a", 6, 20);
  auto b = make_request("b", 8, 20, 300);
  sched.add_request(a.get());
  sched.add_request(b.get());
  SchedulerOutput out = sched.schedule();
  sched.update_from_output(out, {{"a", 7}, {"b", 7}});
  sched.update_draft_tokens({{"a", {1, 1, 1}}, {"b", {1, 1, 1}}});
  out = sched.schedule();
  std::vector<int32_t> spec;
  EXPECT_EQ(scheduled(out, "a", &spec), 4);
  EXPECT_EQ(spec.size(), 3u);
  EXPECT_EQ(out.preempted, std::vector<std::string>{"b"});
  EXPECT_TRUE(b->spec_token_ids.empty());
  EXPECT_EQ(b->num_computed_tokens, 0);
  sched.update_from_output(out, {{"a", 5}});  // every draft rejected
  EXPECT_EQ(a->num_computed_tokens, 7);
  EXPECT_EQ(kv.block_table("a").size(), 2u);
  EXPECT_TRUE(kv.pool().check_invariants());
}

TEST(NgramProposer, DraftsWhatFollowedTheLongestMostRecentMatch) {
  NgramProposer p(1, 3);
  // ... 5 6 7 8 9 ... 5 6 7 -> 8 9 (the 3-gram match)
  std::vector<int32_t> t = {1, 5, 6, 7, 8, 9, 4, 7, 3, 5, 6, 7};
  EXPECT_EQ(p.lookup(t, 2), (std::vector<int32_t>{8, 9}));
  EXPECT_EQ(p.lookup(t, 10), (std::vector<int32_t>{8, 9, 4, 7, 3, 5, 6, 7}));
  // No 3- or 2-gram match: the most recent 1-gram match (7 at index 7 -> 3).
  std::vector<int32_t> u = {7, 1, 7, 2, 9, 7};
  EXPECT_EQ(p.lookup(u, 2), (std::vector<int32_t>{2, 9}));
  EXPECT_TRUE(p.lookup(std::vector<int32_t>{1, 2, 3}, 4).empty());
  // A run of one token: the most recent match has one token after it, an earlier one more.
  std::vector<int32_t> run = {4, 9, 9, 9, 9, 9};
  EXPECT_EQ(p.lookup(run, 3), (std::vector<int32_t>{9, 9}));  // 3-gram "9 9 9" at 1 -> 9 9 (2 left)
  NgramProposer p2(2, 2);
  EXPECT_TRUE(p2.lookup(u, 2).empty());
}

TEST(AdaptiveSpeculation, DraftLengthFollowsAcceptanceAndDraftCost) {
  // Free drafts (n-gram) and high acceptance: the longest; falling acceptance: shorter.
  EXPECT_EQ(best_draft_length(0.95, 8, 0.05), 8);
  EXPECT_EQ(best_draft_length(0.9, 4, 0.1), 4);
  EXPECT_LT(best_draft_length(0.5, 8, 0.1), 4);
  EXPECT_GE(best_draft_length(0.5, 8, 0.1), 1);
  // A draft model costing 0.45 of the target a pass: drafts pay only at good acceptance.
  EXPECT_EQ(best_draft_length(0.3, 4, 0.55), 0);
  EXPECT_GE(best_draft_length(0.85, 4, 0.55), 2);
  EXPECT_EQ(best_draft_length(0.0, 4, 0.0), 0);
}

std::vector<float> rows(std::initializer_list<std::vector<float>> rs) {
  std::vector<float> out;
  for (const auto& r : rs) out.insert(out.end(), r.begin(), r.end());
  return out;
}

TEST(SpecVerifier, GreedyKeepsTheLongestMatchingPrefixAndTheTargetsToken) {
  SpecVerifier v;
  SamplingParams sp;
  sp.temperature = 0;
  // argmax per row: 2, 0, 3, 1
  const std::vector<float> logits = rows({{0, 1, 5, 2}, {4, 1, 0, 2}, {0, 1, 2, 3}, {0, 9, 2, 3}});
  std::vector<int32_t> prompt = {1};
  auto run = [&](std::vector<int32_t> drafts) {
    VerifyInput in;
    in.logits = std::span<const float>(logits.data(), (drafts.size() + 1) * 4);
    in.vocab = 4;
    in.drafts = drafts;
    in.params = &sp;
    in.prompt = prompt;
    std::vector<int32_t> toks;
    for (const auto& r : v.verify(in)) toks.push_back(r.token);
    return toks;
  };
  EXPECT_EQ(run({2, 0, 3}), (std::vector<int32_t>{2, 0, 3, 1}));  // all accepted + bonus
  EXPECT_EQ(run({2, 1, 3}), (std::vector<int32_t>{2, 0}));        // second rejected: target's 0
  EXPECT_EQ(run({3, 0, 3}), (std::vector<int32_t>{2}));
  EXPECT_EQ(run({}), (std::vector<int32_t>{2}));
  // Repetition penalty sees the accepted drafts: row 1 with 0 penalised (4 / 5 < 2) picks 3.
  sp.repetition_penalty = 5.0f;
  prompt = {0};
  EXPECT_EQ(run({2, 3}), (std::vector<int32_t>{2, 3, 1}));
}

// Pearson chi-square of observed counts against probabilities (cells with p > 0).
double chi_square(const std::vector<int64_t>& counts, const std::vector<float>& p, int64_t n, int* dof) {
  double chi = 0;
  *dof = -1;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
      continue;
    }
    const double e = p[i] * static_cast<double>(n);
    chi += (counts[i] - e) * (counts[i] - e) / e;
    ++*dof;
  }
  return chi;
}
// 99.9% quantile of chi-square with k degrees of freedom (Wilson-Hilferty).
double chi_square_999(int k) {
  const double z = 3.090;
  const double a = 2.0 / (9.0 * k);
  return k * std::pow(1 - a + z * std::sqrt(a), 3);
}

struct Case {
  const char* name;
  SamplingParams params;
  bool with_q;  // proposer distribution q (else a fixed draft: one-hot q)
};

TEST(SpecVerifier, RejectionSamplingKeepsTheTargetDistribution) {
  const std::vector<float> target = {1.0f, 0.2f, -0.5f, 2.0f, 0.7f, -1.5f, 0.0f, 1.4f};  // draft row logits below
  const std::vector<float> next = {0.3f, 0.1f, 0.0f, -0.2f, 0.5f, 0.2f, 0.1f, 0.0f};
  const std::vector<float> q = {0.05f, 0.3f, 0.05f, 0.1f, 0.2f, 0.1f, 0.15f, 0.05f};
  const int V = 8;
  std::vector<Case> cases;
  SamplingParams base;
  base.temperature = 1.0f;
  cases.push_back({"t1 with q", base, true});
  cases.push_back({"t1 one-hot", base, false});
  SamplingParams c = base;
  c.temperature = 0.7f;
  c.top_k = 5;
  cases.push_back({"t0.7 top-k 5 with q", c, true});
  c = base;
  c.top_p = 0.8f;
  c.min_p = 0.05f;
  cases.push_back({"top-p 0.8 min-p 0.05 one-hot", c, false});
  c = base;
  c.repetition_penalty = 1.5f;
  c.presence_penalty = 0.5f;
  cases.push_back({"penalties with q", c, true});
  c = base;
  c.logit_bias = {{3, -2.0f}, {5, 3.0f}};
  c.presence_penalty = 0.5f;
  cases.push_back({"logit_bias and a penalty one-hot", c, false});
  const std::vector<int32_t> prompt = {3, 1}, output = {7};
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.name);
    std::vector<float> p;
    target_probabilities(target, cs.params, {prompt, output}, {}, p);
    // The plain sampler draws from the same distribution.
    Sampler sampler;
    const int64_t n = 60000;
    std::vector<int64_t> plain(V, 0), spec(V, 0);
    int dof = 0;
    for (int64_t i = 0; i < n; ++i) {
      Rng rng(1000 + i);
      ++plain[sampler.sample(target, cs.params, {prompt, output}, rng).token];
    }
    double chi = chi_square(plain, p, n, &dof);
    EXPECT_LT(chi, chi_square_999(dof)) << "plain sampler vs target_probabilities";
    SpecVerifier v;
    const std::vector<float> logits = rows({target, next});
    for (int64_t i = 0; i < n; ++i) {
      // Draft from q (or always token 4), verify, keep the first token.
      Rng draw(77 + 31 * i);
      int32_t d = 4;
      if (cs.with_q) {
        double u = draw.uniform();
        for (d = 0; d < V - 1; ++d) {
          u -= q[d];
          if (u < 0) break;
        }
      }
      std::vector<int32_t> drafts = {d};
      VerifyInput in;
      in.logits = logits;
      in.vocab = V;
      in.drafts = drafts;
      if (cs.with_q) in.draft_probs = q;
      in.params = &cs.params;
      in.prompt = prompt;
      in.output = output;
      in.seed = static_cast<uint64_t>(i) * 7919 + 13;
      const auto kept = v.verify(in);
      ASSERT_GE(kept.size(), 1u);
      ++spec[kept[0].token];
    }
    chi = chi_square(spec, p, n, &dof);
    EXPECT_LT(chi, chi_square_999(dof)) << "rejection sampler vs target";
  }
}

TEST(SpecVerifier, SeedsReproduceAndAcceptedDraftsSeeTheirHistory) {
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.logprobs = 1;
  const std::vector<float> logits = rows({{1, 2, 3, 0}, {2, 2, 0, 1}, {0, 0, 3, 3}});
  const std::vector<int32_t> drafts = {2, 1}, prompt = {0};
  SpecVerifier v;
  std::map<std::vector<int32_t>, int> seen;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    VerifyInput in;
    in.logits = logits;
    in.vocab = 4;
    in.drafts = drafts;
    in.params = &sp;
    in.prompt = prompt;
    in.seed = seed;
    auto a = v.verify(in), b = v.verify(in);
    ASSERT_EQ(a.size(), b.size());
    std::vector<int32_t> ta;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].token, b[i].token);
      ta.push_back(a[i].token);
      // Raw-row logprob of each kept token.
      const std::span<const float> row(logits.data() + 4 * i, 4);
      EXPECT_NEAR(a[i].logprob, row[a[i].token] - log_sum_exp(row), 1e-5);
      ASSERT_EQ(a[i].top.size(), 1u);
    }
    ++seen[ta];
  }
  EXPECT_GT(seen.size(), 3u);  // accepts, rejects and bonus tokens all occur
}

// A constraint for the verifier tests: the allowed ids at output position i are allowed[i] (the
// last set repeats past the end); it counts its advances and rollbacks.
class PositionConstraint final : public TokenConstraint {
 public:
  PositionConstraint(int32_t vocab, std::vector<std::vector<int32_t>> allowed) : vocab_(vocab), allowed_(std::move(allowed)) {}
  int32_t vocab_size() const override { return vocab_; }
  void fill_mask(std::span<uint32_t> mask) const override {
    std::fill(mask.begin(), mask.end(), 0u);
    for (int32_t t : at()) mask[t / 32] |= 1u << (t % 32);
  }
  bool accepts(int32_t token) const override { return std::count(at().begin(), at().end(), token) > 0; }
  bool advance(int32_t token) override {
    if (!accepts(token)) return false;
    ++depth_;
    return true;
  }
  void rollback(int n) override {
    ASSERT_LE(n, depth_);
    depth_ -= n;
  }
  bool finished() const override { return false; }
  int depth() const { return depth_; }
  std::vector<uint32_t> mask() const {
    std::vector<uint32_t> m((vocab_ + 31) / 32);
    fill_mask(m);
    return m;
  }

 private:
  const std::vector<int32_t>& at() const { return allowed_[std::min<size_t>(depth_, allowed_.size() - 1)]; }
  int32_t vocab_;
  std::vector<std::vector<int32_t>> allowed_;
  int depth_ = 0;
};

TEST(TokenConstraint, AcceptedPrefixStopsAtTheFirstForbiddenTokenAndKeepsTheState) {
  PositionConstraint c(8, {{1, 2}, {3}, {4, 5}});
  EXPECT_EQ(accepted_prefix(c, std::vector<int32_t>{2, 3, 5, 5}), 4);
  EXPECT_EQ(accepted_prefix(c, std::vector<int32_t>{2, 4, 5}), 1);
  EXPECT_EQ(accepted_prefix(c, std::vector<int32_t>{0}), 0);
  EXPECT_EQ(accepted_prefix(c, std::vector<int32_t>{}), 0);
  EXPECT_EQ(c.depth(), 0);
  ASSERT_TRUE(c.advance(1));
  EXPECT_EQ(accepted_prefix(c, std::vector<int32_t>{3, 4}), 2);
  EXPECT_EQ(c.depth(), 1);
}

// Greedy verification under a constraint: row j is masked with the constraint advanced through
// the drafts before it; a draft the mask forbids is never accepted, even where it is the row's
// unmasked argmax; the result equals plain constrained decoding token by token; the constraint
// is back in its entry state. (Without the masks every expectation below changes.)
TEST(SpecVerifier, GreedyAppliesEachRowsConstraintMask) {
  SpecVerifier v;
  SamplingParams sp;
  sp.temperature = 0;
  sp.logprobs = 2;
  // Unmasked argmax per row: 2, 0, 3, 1.
  const std::vector<float> logits = rows({{0, 1, 5, 2}, {4, 1, 0, 2}, {0, 1, 2, 3}, {0, 9, 2, 3}});
  // Allowed: position 0 {1, 2}; 1 {1, 3} (not the argmax 0); 2 {0, 1, 2} (not the argmax 3); then {0, 2, 3}.
  const std::vector<std::vector<int32_t>> allowed = {{1, 2}, {1, 3}, {0, 1, 2}, {0, 2, 3}};
  PositionConstraint c(4, allowed);
  const std::vector<int32_t> prompt = {1};
  auto run = [&](std::vector<int32_t> drafts) {
    VerifyInput in;
    in.logits = std::span<const float>(logits.data(), (drafts.size() + 1) * 4);
    in.vocab = 4;
    in.drafts = drafts;
    in.params = &sp;
    in.prompt = prompt;
    in.constraint = &c;
    std::vector<int32_t> toks;
    const auto kept = v.verify(in);
    for (size_t j = 0; j < kept.size(); ++j) {
      toks.push_back(kept[j].token);
      // Logprobs of the masked row (as the plain sampler reports them): masked ids never listed.
      EXPECT_EQ(kept[j].top.size(), 2u);
      for (const auto& t : kept[j].top) EXPECT_EQ(std::count(allowed[j].begin(), allowed[j].end(), t.token), 1) << "row " << j;
    }
    EXPECT_EQ(c.depth(), 0);
    return toks;
  };
  EXPECT_EQ(run({2, 3, 2}), (std::vector<int32_t>{2, 3, 2, 3}));  // the masked choices: all accepted + bonus
  EXPECT_EQ(run({2, 0, 3}), (std::vector<int32_t>{2, 3}));        // 0 is row 1's argmax but forbidden
  EXPECT_EQ(run({2, 3, 3}), (std::vector<int32_t>{2, 3, 2}));     // 3 is row 2's argmax but forbidden
  EXPECT_EQ(run({1}), (std::vector<int32_t>{2}));
  EXPECT_EQ(run({}), (std::vector<int32_t>{2}));
  // Plain constrained decoding of the same rows, one token a step.
  Sampler sampler;
  std::vector<int32_t> plain;
  for (int j = 0; j < 4; ++j) {
    Rng rng(1);
    const auto mask = c.mask();
    const std::span<const float> row(logits.data() + 4 * j, 4);
    plain.push_back(sampler.sample(row, sp, {prompt, plain}, rng, mask).token);
    ASSERT_TRUE(c.advance(plain.back()));
  }
  c.rollback(4);
  EXPECT_EQ(plain, run({plain[0], plain[1], plain[2]}));
}

// The rejection sampler under a constraint keeps the masked target distribution (the plain
// sampler's with the mask) for a proposer distribution q with mass on forbidden tokens, for a
// one-hot draft of an allowed token and for a one-hot draft of a forbidden one; a kept token is
// never forbidden at its row.
TEST(SpecVerifier, RejectionSamplingUnderAMaskKeepsTheMaskedTargetDistribution) {
  const std::vector<float> target = {1.0f, 0.2f, -0.5f, 2.0f, 0.7f, -1.5f, 0.0f, 1.4f};
  const std::vector<float> next = {0.3f, 0.1f, 0.0f, -0.2f, 0.5f, 0.2f, 0.1f, 0.0f};
  const std::vector<float> q = {0.05f, 0.3f, 0.05f, 0.1f, 0.2f, 0.1f, 0.15f, 0.05f};
  const int V = 8;
  // Position 0 forbids 3 (the target's most likely token), 1 and 6; position 1 allows 0, 5 and 7.
  const std::vector<std::vector<int32_t>> allowed = {{0, 2, 4, 5, 7}, {0, 5, 7}};
  struct MaskCase {
    const char* name;
    SamplingParams params;
    bool with_q;
    int32_t fixed_draft;  // one-hot draft (without q)
  };
  SamplingParams base;
  base.temperature = 1.0f;
  SamplingParams topk = base;
  topk.temperature = 0.7f;
  topk.top_k = 3;
  topk.presence_penalty = 0.5f;
  const std::vector<MaskCase> cases = {{"t1 with q", base, true, -1},
                                       {"t1 one-hot allowed", base, false, 4},
                                       {"t1 one-hot forbidden", base, false, 3},
                                       {"t0.7 top-k 3 penalty with q", topk, true, -1}};
  const std::vector<int32_t> prompt = {3, 1}, output = {7};
  for (const MaskCase& cs : cases) {
    SCOPED_TRACE(cs.name);
    PositionConstraint c(V, allowed);
    const auto mask = c.mask();
    std::vector<float> masked(target);
    apply_token_mask(masked, mask);
    std::vector<float> p;
    target_probabilities(masked, cs.params, {prompt, output}, {}, p);
    for (int32_t t : {1, 3, 6}) ASSERT_EQ(p[t], 0.0f);
    const int64_t n = 60000;
    std::vector<int64_t> plain(V, 0), spec(V, 0);
    Sampler sampler;
    for (int64_t i = 0; i < n; ++i) {
      Rng rng(1000 + i);
      ++plain[sampler.sample(target, cs.params, {prompt, output}, rng, mask).token];
    }
    int dof = 0;
    double chi = chi_square(plain, p, n, &dof);
    EXPECT_LT(chi, chi_square_999(dof)) << "plain sampler with the mask vs the masked target";
    SpecVerifier v;
    const std::vector<float> logits = rows({target, next});
    int64_t second_rows = 0;
    for (int64_t i = 0; i < n; ++i) {
      Rng draw(77 + 31 * i);
      int32_t d = cs.fixed_draft;
      if (cs.with_q) {
        double u = draw.uniform();
        for (d = 0; d < V - 1; ++d) {
          u -= q[d];
          if (u < 0) break;
        }
      }
      std::vector<int32_t> drafts = {d};
      VerifyInput in;
      in.logits = logits;
      in.vocab = V;
      in.drafts = drafts;
      if (cs.with_q) in.draft_probs = q;
      in.params = &cs.params;
      in.prompt = prompt;
      in.output = output;
      in.seed = static_cast<uint64_t>(i) * 7919 + 13;
      in.constraint = &c;
      const auto kept = v.verify(in);
      ASSERT_GE(kept.size(), 1u);
      ASSERT_EQ(c.depth(), 0);
      ++spec[kept[0].token];
      if (kept.size() == 2) {
        ++second_rows;
        ASSERT_EQ(kept[0].token, d);
        const int32_t t = kept[1].token;
        ASSERT_TRUE(t == 0 || t == 5 || t == 7) << "bonus token " << t << " forbidden at position 1";
      }
    }
    chi = chi_square(spec, p, n, &dof);
    EXPECT_LT(chi, chi_square_999(dof)) << "rejection sampler vs the masked target";
    if (cs.fixed_draft != 3) EXPECT_GT(second_rows, 0);
  }
}

}  // namespace
}  // namespace pagoda

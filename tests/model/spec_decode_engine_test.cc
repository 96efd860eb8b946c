// Speculative decoding on real models (CPU): greedy output identical with and without
// speculation for each proposer (n-gram on SmolLM2 and a tiny llama; a draft model: the tiny
// llama's own q8_0 file, high acceptance, and a tiny qwen2 of the same vocabulary size, low
// acceptance; random-weight EAGLE-3 heads, drafts rarely accepted, and one built to repeat the
// target's greedy token, accepted; a MiMo MTP module) across batch sizes and under
// preemption; max_tokens, stop ids and stop strings cut
// inside drafts; seeds reproduce when sampling; KV blocks (target and draft) all free after random
// cancels mid-draft; the batch-size off-switch; adaptive draft lengths; a clear error for a draft
// model of another vocabulary. The structured-output cases: spec_decode_constrained_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <random>
#include <regex>

#include <nlohmann/json.hpp>

#include "engine/draft_head_proposer.h"
#include "engine/draft_model_proposer.h"
#include "engine/engine.h"
#include "engine/engine_config.h"
#include "model/model_config.h"
#include "engine/engine_core.h"
#include "grammar/constraint.h"
#include "tokenizer/tokenizer.h"
#include "engine_test_util.h"
#include "model/model_loader.h"
#include "runtime/replay_proposer.h"
#include "spec_decode_test_util.h"
#include "test_paths.h"

namespace pagoda {
namespace {

using test::collect;
using test::mixed_prompt;
using namespace spec_test;  // the shared cases and helpers (spec_decode_test_util.h)

struct BatchRun {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logprobs;
  EngineStats stats;
};

BatchRun run_batch(Engine& e, int n, int max_tokens) {
  const int64_t vocab = e.model_config().vocab_size;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < n; ++i) {
    auto s = e.submit(greedy_request(i, vocab, max_tokens));
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    streams.push_back(*s);
  }
  BatchRun r;
  for (auto& s : streams) {
    std::vector<int32_t> t;
    std::vector<float> lp;
    while (auto o = s->next())
      for (const auto& tok : o->tokens) {
        t.push_back(tok.token);
        lp.push_back(tok.logprob);
      }
    r.tokens.push_back(t);
    r.logprobs.push_back(lp);
  }
  r.stats = e.stats();
  return r;
}

class SpecGreedyEquivalence : public ::testing::TestWithParam<SpecCase> {};

TEST_P(SpecGreedyEquivalence, SameTokensAndLogprobsAsPlainDecodingAtEveryBatchSize) {
  const SpecCase& sc = GetParam();
  const std::string model = target_path(sc);
  ASSERT_TRUE(std::filesystem::exists(model)) << model;
  auto plain = Engine::create(config_for(model, nullptr));
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  auto spec = Engine::create(config_for(model, &sc));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  const bool small = sc.target.empty();  // SmolLM2: fewer, shorter requests
  for (int batch : small ? std::vector<int>{1, 4} : std::vector<int>{1, 5, 16}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const int len = small ? 24 : 40;
    const BatchRun a = run_batch(**plain, batch, len);
    const BatchRun b = run_batch(**spec, batch, len);
    for (int i = 0; i < batch; ++i) {
      ASSERT_EQ(a.tokens[i], b.tokens[i]) << "request " << i;
      for (size_t j = 0; j < a.logprobs[i].size(); ++j)
        EXPECT_NEAR(a.logprobs[i][j], b.logprobs[i][j], 2e-3) << "request " << i << " token " << j;
    }
    EXPECT_EQ(b.stats.free_kv_blocks, b.stats.num_kv_blocks);
  }
  const EngineStats st = (*spec)->stats();
  EXPECT_GT(st.spec_num_draft_tokens, 0);
  if (sc.accepts) {
    EXPECT_GT(st.spec_num_accepted_tokens, 0);
  }
  EXPECT_LE(st.spec_num_accepted_tokens, st.spec_num_draft_tokens);
  int64_t per_pos = 0;
  for (int64_t v : st.spec_accepted_per_position) per_pos += v;
  EXPECT_EQ(per_pos, st.spec_num_accepted_tokens);
  std::printf("[%s] drafts %lld, draft tokens %lld, accepted %lld\n", sc.name.c_str(),
              static_cast<long long>(st.spec_num_drafts), static_cast<long long>(st.spec_num_draft_tokens),
              static_cast<long long>(st.spec_num_accepted_tokens));
}

INSTANTIATE_TEST_SUITE_P(
    Proposers, SpecGreedyEquivalence,
    ::testing::Values(SpecCase{"SmolLM2Ngram", "", "ngram", ""},
                      SpecCase{"TinyLlamaNgram", tiny("llama3/model-f32.gguf"), "ngram", ""},
                      SpecCase{"TinyLlamaDraftQ8", tiny("llama3/model-f32.gguf"), "draft", tiny("llama3/model-q8_0.gguf")},
                      SpecCase{"TinyLlamaDraftQwen2", tiny("llama3/model-f32.gguf"), "draft", tiny("qwen2/model-f32.gguf"), false},
                      // Random-weight EAGLE-3 heads (tools/make_draft_heads.py): drafts rarely accepted.
                      SpecCase{"TinyLlamaEagle3", tiny("llama3/model-f32.gguf"), "eagle3", tiny("eagle3-llama3"), false},
                      SpecCase{"TinyLlamaF16Eagle3FullVocab", tiny("llama3/model-f16.gguf"), "eagle3", tiny("eagle3-llama3-full"), false},
                      // A head built to repeat the target's greedy token (tools/make_draft_heads.py): accepted.
                      SpecCase{"TinyLlamaEagle3Echo", tiny("llama3/model-f32.gguf"), "eagle3", tiny("eagle3-llama3-echo")},
                      // A MiMo-style checkpoint's random MTP layer (the tiny qwen2's weights as the target).
                      SpecCase{"TinyQwen2MimoMtp", tiny("qwen2/model-f32.gguf"), "mtp", tiny("mimo-mtp"), false}),
    [](const auto& info) { return info.param.name; });

TEST(SpecDecode, PreemptionUnderATinyCacheKeepsGreedyOutput) {
  const std::string model = tiny("llama3/model-f32.gguf");
  Result<ModelConfig> mc = load_model_config(model);
  ASSERT_TRUE(mc.ok());
  for (const SpecCase& sc : {SpecCase{"ngram", model, "ngram", ""},
                             SpecCase{"draft", model, "draft", tiny("llama3/model-q8_0.gguf")},
                             SpecCase{"eagle3", model, "eagle3", tiny("eagle3-llama3"), false},
                             SpecCase{"eagle3-echo", model, "eagle3", tiny("eagle3-llama3-echo")}}) {
    for (bool swap : {false, true}) {
      SCOPED_TRACE(sc.name + (swap ? " swap" : " recompute"));
      EngineConfig c = config_for(model, nullptr);
      c.block_size = 16;
      c.kv_cache_memory = mc->kv_bytes_per_token(c.kv_dtype) * 16 * 20;  // 20 blocks for 10 requests
      if (swap) c.kv_tiers.host_bytes = mc->kv_bytes_per_token(c.kv_dtype) * 16 * 200;
      auto plain = Engine::create(c);
      ASSERT_TRUE(plain.ok()) << plain.status().to_string();
      EngineConfig cs = c;
      cs.speculative.method = sc.method;
      cs.speculative.model = sc.draft;
      auto spec = Engine::create(cs);
      ASSERT_TRUE(spec.ok()) << spec.status().to_string();
      const BatchRun a = run_batch(**plain, 10, 60);
      const BatchRun b = run_batch(**spec, 10, 60);
      for (int i = 0; i < 10; ++i) EXPECT_EQ(a.tokens[i], b.tokens[i]) << "request " << i;
      EXPECT_GT(b.stats.num_preemptions, 0);
      EXPECT_GT(b.stats.spec_num_draft_tokens, 0);
      if (sc.accepts) EXPECT_GT(b.stats.spec_num_accepted_tokens, 0);
      EXPECT_EQ(b.stats.free_kv_blocks, b.stats.num_kv_blocks);
    }
  }
}

// One request's tokens and text with the given stop settings, with and without a draft model.
struct Out {
  std::vector<int32_t> tokens;
  std::string text, finish;
};
Out generate(Engine& e, GenerateRequest g) {
  auto s = e.submit(std::move(g));
  EXPECT_TRUE(s.ok());
  Out o;
  while (auto r = (*s)->next()) {
    for (const auto& t : r->tokens) o.tokens.push_back(t.token);
    o.text += r->text;
    if (r->finished) o.finish = r->finish_reason;
  }
  return o;
}

TEST(SpecDecode, MaxTokensStopIdsAndStopStringsCutInsideDrafts) {
  const std::string model = tiny("llama3/model-f32.gguf");
  auto plain = Engine::create(config_for(model, nullptr));
  ASSERT_TRUE(plain.ok());
  SpecCase sc{"draft", model, "draft", tiny("llama3/model-q8_0.gguf")};
  auto spec = Engine::create(config_for(model, &sc));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  const int64_t vocab = (*plain)->model_config().vocab_size;
  GenerateRequest g = greedy_request(3, vocab, 48);
  g.sampling.logprobs = -1;
  const Out full = generate(**plain, g);
  ASSERT_EQ(full.tokens.size(), 48u);
  // Every max_tokens: drafts reach past most of these limits (4 per step, mostly accepted).
  for (int n = 1; n <= 14; ++n) {
    GenerateRequest h = g;
    h.stop.max_tokens = n;
    const Out o = generate(**spec, h);
    EXPECT_EQ(o.tokens, std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + n)) << "max_tokens " << n;
    EXPECT_EQ(o.finish, "length");
  }
  // Stop ids: each token of the output's first 14 (first occurrence) ends generation there.
  for (int k = 1; k < 14; ++k) {
    const int32_t t = full.tokens[k];
    if (std::find(full.tokens.begin(), full.tokens.begin() + k, t) != full.tokens.begin() + k) continue;
    GenerateRequest h = g;
    h.stop.stop_token_ids = {t};
    const Out a = generate(**plain, h), b = generate(**spec, h);
    EXPECT_EQ(b.tokens, std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + k + 1)) << "stop id at " << k;
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(b.finish, "stop");
  }
  // Stop strings: the decoded text of tokens k..k+1 as a stop string; text cut at the same place.
  int tried = 0;
  for (int k = 2; k < 20 && tried < 6; ++k) {
    const std::string piece = (*plain)->detokenize(std::span<const int32_t>(full.tokens.data() + k, 2));
    if (piece.size() < 2) continue;
    ++tried;
    GenerateRequest h = g;
    h.stop.stop = {piece};
    const Out a = generate(**plain, h), b = generate(**spec, h);
    EXPECT_EQ(a.text, b.text) << "stop string '" << piece << "'";
    EXPECT_EQ(a.finish, b.finish);
    EXPECT_EQ(b.finish, "stop");
  }
  EXPECT_GT(tried, 0);
  EXPECT_GT((*spec)->stats().spec_num_accepted_tokens, 0);
}

TEST(SpecDecode, SeedsReproduceWhenSampling) {
  const std::string model = tiny("llama3/model-f32.gguf");
  for (const SpecCase& sc : {SpecCase{"ngram", model, "ngram", ""},
                             SpecCase{"draft", model, "draft", tiny("llama3/model-q8_0.gguf")}}) {
    SCOPED_TRACE(sc.name);
    auto spec = Engine::create(config_for(model, &sc));
    ASSERT_TRUE(spec.ok());
    GenerateRequest g = greedy_request(2, (*spec)->model_config().vocab_size, 40);
    g.sampling.temperature = 3.0f;  // the tiny model's distributions are sharp
    g.sampling.top_p = 0.95f;
    g.sampling.top_k = 100;
    g.sampling.seed = 42;
    g.sampling.logprobs = 1;
    const Out a = generate(**spec, g), b = generate(**spec, g);
    EXPECT_EQ(a.tokens, b.tokens);
    ASSERT_EQ(a.tokens.size(), 40u);
    g.sampling.seed = 43;
    EXPECT_NE(generate(**spec, g).tokens, a.tokens);
    EXPECT_GT((*spec)->stats().spec_num_draft_tokens, 0);
  }
}

TEST(SpecDecode, RandomCancelsMidDraftFreeEveryTargetAndDraftBlock) {
  const std::string model = tiny("llama3/model-f32.gguf");
  for (const SpecCase& sc : {SpecCase{"draft", model, "draft", tiny("llama3/model-q8_0.gguf")},
                             SpecCase{"eagle3", model, "eagle3", tiny("eagle3-llama3-echo")}}) {
  SCOPED_TRACE(sc.name);
  EngineConfig c = config_for(model, &sc);
  ThreadPool pool(2);
  auto core = make_core(c, pool);
  ASSERT_TRUE(core.ok()) << core.status().to_string();
  EngineCore& e = **core;
  // The proposer's own cache: a draft model's or a draft head's.
  const auto* draft = dynamic_cast<const DraftModelProposer*>(e.runner().proposer());
  const auto* head = dynamic_cast<const DraftHeadProposer*>(e.runner().proposer());
  ASSERT_TRUE(draft != nullptr || head != nullptr);
  std::mt19937 rng(7);
  std::vector<std::string> live;
  int added = 0, cancelled = 0;
  for (int step = 0; step < 300 && (added < 40 || e.has_unfinished()); ++step) {
    if (added < 40 && rng() % 3 == 0) {
      auto r = std::make_unique<Request>();
      r->id = "r" + std::to_string(added);
      r->prompt = mixed_prompt(added, e.model_config().vocab_size);
      r->sampling.temperature = added % 2 ? 0.0f : 0.8f;
      r->seed = added;
      r->stop.max_tokens = 20 + added % 30;
      r->stop.ignore_eos = true;
      live.push_back(r->id);
      ASSERT_TRUE(e.add_request(std::move(r)).ok());
      ++added;
    }
    if (!live.empty() && rng() % 4 == 0) {
      const size_t v = rng() % live.size();
      e.finish(live[v]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(v));
      ++cancelled;
    }
    for (const CoreOutput& o : e.step())
      if (o.finished) std::erase(live, o.id);
  }
  for (int i = 0; i < 3; ++i) e.step();  // the runner hears of the last finishes
  EXPECT_FALSE(e.has_unfinished());
  EXPECT_GT(cancelled, 5);
  EXPECT_GT(e.stats().spec_num_accepted_tokens, 0);
  EXPECT_EQ(e.kv_manager().num_free_blocks(), e.kv_manager().pool().num_usable_blocks());
  EXPECT_TRUE(e.kv_manager().pool().check_invariants());
  EXPECT_EQ(e.runner().num_tracked_requests(), 0u);
  if (draft != nullptr) {
    EXPECT_EQ(draft->num_tracked_requests(), 0u);
    EXPECT_EQ(draft->num_free_blocks(), draft->num_usable_blocks());
  } else {
    EXPECT_EQ(head->num_tracked_requests(), 0u);
    EXPECT_EQ(head->num_free_blocks(), head->num_usable_blocks());
  }
  }
}

TEST(SpecDecode, LargeBatchesTurnSpeculationOffAndAdaptiveLengthsFollowAcceptance) {
  const std::string model = tiny("llama3/model-f32.gguf");
  SpecCase sc{"ngram", model, "ngram", ""};
  EngineConfig c = config_for(model, &sc);
  c.speculative.disable_by_batch_size = 4;
  {
    // Driven step by step: eight requests admitted together decode together and finish
    // together, so no step has 4 or fewer; then one alone drafts.
    ThreadPool pool(2);
    auto core = make_core(c, pool);
    ASSERT_TRUE(core.ok()) << core.status().to_string();
    auto add = [&](int i) {
      auto r = std::make_unique<Request>();
      r->id = "r" + std::to_string(i);
      r->prompt = greedy_request(i, (*core)->model_config().vocab_size, 30).prompt_ids;
      r->sampling.temperature = 0;
      r->stop.max_tokens = 30;
      r->stop.ignore_eos = true;
      ASSERT_TRUE((*core)->add_request(std::move(r)).ok());
    };
    for (int i = 0; i < 8; ++i) add(i);
    while ((*core)->has_unfinished()) (*core)->step();
    EXPECT_EQ((*core)->stats().spec_num_drafts, 0);
    add(8);
    while ((*core)->has_unfinished()) (*core)->step();
    EXPECT_GT((*core)->stats().spec_num_drafts, 0);
  }
  // A poor draft model (another model's weights): adaptive lengths draft fewer tokens per step.
  double mean[2];
  for (bool adaptive : {false, true}) {
    SpecCase d{"draft", model, "draft", tiny("qwen2/model-f32.gguf")};
    EngineConfig cd = config_for(model, &d);
    cd.speculative.adaptive = adaptive;
    auto ed = Engine::create(cd);
    ASSERT_TRUE(ed.ok());
    const BatchRun r = run_batch(**ed, 1, 60);
    mean[adaptive] = static_cast<double>(r.stats.spec_num_draft_tokens) / static_cast<double>(r.stats.spec_num_drafts);
  }
  EXPECT_GT(mean[0], 3.5);  // fixed: 4 per step (fewer only near max_tokens)
  EXPECT_LT(mean[1], mean[0]);
}

TEST(SpecDecode, ADraftModelOfAnotherVocabularyOrAnUnknownMethodIsAClearError) {
  const std::string model = test::smollm2_path();
  ASSERT_FALSE(model.empty());
  SpecCase sc{"draft", model, "draft", tiny("llama3/model-f32.gguf")};
  auto e = Engine::create(config_for(model, &sc));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("vocabulary of 512 tokens but the target model has 49152"), std::string::npos)
      << e.status().to_string();
  EngineConfig c = config_for(model, nullptr);
  c.speculative.method = "medusa";
  auto f = Engine::create(c);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("'ngram', 'draft', 'eagle3' or 'mtp'"), std::string::npos) << f.status().to_string();
  c.speculative.method = "draft";
  c.speculative.model = "/nonexistent.gguf";
  auto g = Engine::create(c);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("draft model"), std::string::npos) << g.status().to_string();
}

// The benchmark proposer of `pagoda bench spec` (runtime/replay_proposer.h): replaying a plain
// run's greedy record with wrong drafts at a constructed rate keeps the output equal to the record,
// and the engine's accepted drafts and rejections are exactly those the construction predicts
// (each position judged once, while the drafts before it were accepted): a simulation of the
// draft/verify sequence from the proposer's own corrupted() gives the same counts, and their
// ratio is the constructed acceptance within sampling error. A draft model run for its cost only
// (its drafts replaced) changes none of this.
struct ReplayCounts {
  int64_t accepted = 0, rejections = 0;
};

TEST(SpecDecode, ReplayProposerHitsTheConstructedAcceptanceAndKeepsGreedyOutput) {
  const std::string model = tiny("llama3/model-f32.gguf");
  for (const bool with_draft : {false, true}) {
    SCOPED_TRACE(with_draft ? "draft model for its cost" : "free drafting");
    SpecCase sc{"draft", model, "draft", tiny("llama3/model-q8_0.gguf")};
    EngineConfig c = config_for(model, with_draft ? &sc : nullptr);
    ThreadPool pool(2);
    auto core = make_core(c, pool);
    ASSERT_TRUE(core.ok()) << core.status().to_string();
    EngineCore& e = **core;
    std::unique_ptr<Proposer> inner = e.release_proposer();
    EXPECT_EQ(inner != nullptr, with_draft);
    const int64_t vocab = e.model_config().vocab_size;
    const int kRequests = 8, kTokens = 80, k = 4;
    auto run = [&](const std::string& tag) {
      return run_greedy_core(e, tag, kRequests, [&](Request& r) {
        r.stop.max_tokens = kTokens;
        r.stop.ignore_eos = true;
      });
    };
    const auto record = run("plain-");
    for (double alpha : {0.5, 0.8, 1.0}) {
      SCOPED_TRACE("acceptance " + std::to_string(alpha));
      const std::string tag = "replay" + std::to_string(static_cast<int>(alpha * 10)) + "-";
      const auto records = recorded_sequences(record, tag, vocab);
      auto replay = std::make_unique<ReplayProposer>(records, alpha, vocab, 42, std::move(inner));
      ReplayProposer* rp = replay.get();
      SpeculativeConfig spec;
      spec.method = "replay";
      spec.num_speculative_tokens = k;
      spec.adaptive = false;
      e.set_speculation(spec, std::move(replay));
      const CoreStats before = e.stats();
      const auto got = run(tag);
      const CoreStats after = e.stats();
      for (int i = 0; i < kRequests; ++i) EXPECT_EQ(got[i], record[i]) << "request " << i;
      EXPECT_EQ(rp->num_diverged(), 0);
      // The draft/verify sequence the construction implies: after the prefill's token, drafts at
      // the next positions (capped so that all of them fit max_tokens), the leading right ones kept
      // plus the target's token.
      ReplayCounts want;
      for (int i = 0; i < kRequests; ++i) {
        const std::string id = tag + std::to_string(i);
        const int64_t prompt = static_cast<int64_t>(mixed_prompt(i + 1, vocab).size());
        int32_t n_out = 1;
        while (n_out < kTokens) {
          const int32_t m = std::min(k, kTokens - n_out - 1);
          if (m <= 0) {
            ++n_out;
            continue;
          }
          int32_t a = 0;
          while (a < m && !rp->corrupted(id, prompt + n_out + a)) ++a;
          want.accepted += a;
          want.rejections += a < m;
          n_out += a + 1;
        }
      }
      const int64_t accepted = after.spec_num_accepted_tokens - before.spec_num_accepted_tokens;
      const int64_t rejections = after.spec_num_rejections - before.spec_num_rejections;
      EXPECT_EQ(accepted, want.accepted);
      EXPECT_EQ(rejections, want.rejections);
      const double evaluated = static_cast<double>(accepted + rejections);
      ASSERT_GT(evaluated, 100);
      const double measured = accepted / evaluated;
      EXPECT_NEAR(measured, alpha, 4 * std::sqrt(std::max(alpha * (1 - alpha), 0.01) / evaluated) + 1e-9);
      std::printf("[spec-replay] %s acceptance %.2f: measured %.3f over %.0f judged drafts, %lld accepted\n",
                  with_draft ? "draft" : "free", alpha, measured, evaluated, static_cast<long long>(accepted));
      std::unique_ptr<Proposer> back = e.release_proposer();
      inner = rp->release_inner();
    }
    if (with_draft) {
      const auto* draft = dynamic_cast<const DraftModelProposer*>(inner.get());
      ASSERT_NE(draft, nullptr);
      for (int i = 0; i < 3; ++i) e.step();
      EXPECT_EQ(draft->num_tracked_requests(), 0u);
      EXPECT_EQ(draft->num_free_blocks(), draft->num_usable_blocks());
    }
    EXPECT_EQ(e.kv_manager().num_free_blocks(), e.kv_manager().pool().num_usable_blocks());
  }
}

// The replay proposer alone: wrong drafts at the constructed rate over many positions, never the
// recorded token; nothing for a request that left its record or that it has no record of.
TEST(SpecDecode, ReplayProposerCorruptsAtTheConstructedRate) {
  std::vector<int32_t> rec(20000);
  for (size_t i = 0; i < rec.size(); ++i) rec[i] = static_cast<int32_t>((i * 37) % 1000);
  ReplayProposer p({{"a", rec}}, 0.7, 1000, 9);
  int64_t wrong = 0, total = 0;
  for (size_t pos = 1; pos + 4 <= rec.size(); pos += 4) {
    const std::string id = "a";
    ProposeRequest q;
    q.id = &id;
    q.tokens = std::span<const int32_t>(rec.data(), pos);
    q.max_drafts = 4;
    std::vector<std::vector<int32_t>> d;
    p.propose(std::span<const ProposeRequest>(&q, 1), d);
    ASSERT_EQ(d[0].size(), 4u);
    for (size_t j = 0; j < 4; ++j) {
      const bool bad = d[0][j] != rec[pos + j];
      EXPECT_EQ(bad, p.corrupted(id, static_cast<int64_t>(pos + j)));
      EXPECT_GE(d[0][j], 0);
      EXPECT_LT(d[0][j], 1000);
      wrong += bad;
      ++total;
    }
  }
  EXPECT_NEAR(static_cast<double>(wrong) / total, 0.3, 4 * std::sqrt(0.21 / total));
  const std::string a = "a", other = "b";
  std::vector<int32_t> off(rec.begin(), rec.begin() + 10);
  off[5] += 1;
  ProposeRequest q[2];
  q[0].id = &a;
  q[0].tokens = off;
  q[0].max_drafts = 4;
  q[1].id = &other;
  q[1].tokens = off;
  q[1].max_drafts = 4;
  std::vector<std::vector<int32_t>> d;
  p.propose(std::span<const ProposeRequest>(q, 2), d);
  EXPECT_TRUE(d[0].empty());
  EXPECT_TRUE(d[1].empty());
  EXPECT_EQ(p.num_diverged(), 1);
}


// Greedy verification "on the device" (SamplingCpuExecutor): the same tokens and logprobs as the
// host verifier and as plain decoding, penalties and min_tokens included; the verification steps
// went through forward_sample with 1 + drafts rows per request.
TEST(SpecDecode, DeviceSideGreedyVerificationMatchesTheHostVerifier) {
  const std::string model = tiny("llama3/model-f32.gguf");
  for (const std::string method : {"ngram", "draft"}) {
    SCOPED_TRACE(method);
    SpecCase sc{method, model, method, method == "draft" ? tiny("llama3/model-q8_0.gguf") : ""};
    ThreadPool pool(2);
    auto run = [&](const SpecCase* spec, bool sampling_executor) {
      auto core = make_core(config_for(model, spec), pool, sampling_executor);
      EXPECT_TRUE(core.ok()) << core.status().to_string();
      EngineCore& e = **core;
      const int64_t vocab = e.model_config().vocab_size;
      std::vector<std::vector<std::pair<int32_t, float>>> out(6);
      for (int i = 0; i < 6; ++i) {
        GenerateRequest g = greedy_request(i, vocab, 40);
        auto r = std::make_unique<Request>();
        r->id = std::to_string(i);
        r->prompt = g.prompt_ids;
        r->sampling = g.sampling;
        r->sampling.logprobs = 1;
        r->stop = g.stop;
        if (i == 2) {  // min_tokens blocks the stop ids inside the first drafts
          r->stop.min_tokens = 6;
          r->stop.stop_token_ids = {5, 6, 7};
        }
        EXPECT_TRUE(e.add_request(std::move(r)).ok());
      }
      while (e.has_unfinished())
        for (const CoreOutput& o : e.step())
          if (o.has_token) out[std::stoi(o.id)].push_back({o.sample.token, o.sample.logprob});
      return std::make_pair(out, e.stats().spec_num_accepted_tokens);
    };
    SamplingCpuExecutor::multi_row_steps = 0;
    const auto plain = run(nullptr, false);
    const auto host = run(&sc, false);
    EXPECT_EQ(SamplingCpuExecutor::multi_row_steps, 0);
    const auto device = run(&sc, true);
    EXPECT_GT(SamplingCpuExecutor::multi_row_steps, 0);
    EXPECT_GT(device.second, 0);
    EXPECT_EQ(device.second, host.second);
    for (int i = 0; i < 6; ++i) {
      ASSERT_EQ(device.first[i].size(), plain.first[i].size()) << "request " << i;
      for (size_t j = 0; j < plain.first[i].size(); ++j) {
        EXPECT_EQ(device.first[i][j].first, plain.first[i][j].first) << "request " << i << " token " << j;
        EXPECT_EQ(device.first[i][j].first, host.first[i][j].first) << "request " << i << " token " << j;
        EXPECT_NEAR(device.first[i][j].second, host.first[i][j].second, 2e-3) << "request " << i << " token " << j;
      }
    }
  }
}

}  // namespace
}  // namespace pagoda

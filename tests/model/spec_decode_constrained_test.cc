// Speculative decoding with structured outputs (CPU): greedy constrained output identical with and
// without speculation for each proposer (n-gram, a draft model of high and of low acceptance), a
// JSON schema and a regex, on the host verifier and on the device-verify path; drafts the grammar
// forbids are never accepted; a draft model drafts inside the grammar.
#include <gtest/gtest.h>

#include <memory>
#include <regex>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/draft_model_proposer.h"
#include "engine/engine.h"
#include "engine/engine_core.h"
#include "grammar/constraint.h"
#include "runtime/replay_proposer.h"
#include "spec_decode_test_util.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

using test::mixed_prompt;
using namespace spec_test;  // the shared cases and helpers (spec_decode_test_util.h)

// A JSON schema whose every output is bounded, and a regex the tiny models' text fits often (so
// that drafts survive the cut before a forbidden token and get verified).
grammar::ConstraintSource json_constraint() {
  return {grammar::ConstraintKind::kJsonSchema,
          R"({"type":"object","properties":{"name":{"enum":["alice","bob","carol"]},"note":{"type":"string","maxLength":24},)"
          R"("tags":{"type":"array","items":{"enum":["red","green","blue"]},"minItems":1,"maxItems":8},)"
          R"("age":{"type":"integer","minimum":0,"maximum":120},"ok":{"type":"boolean"}},)"
          R"("required":["name","note","tags","age","ok"],"additionalProperties":false})",
          {},
          nullptr};
}
const char* kRegex = "[a-z][a-z ]{4,60}[.]";
grammar::ConstraintSource regex_constraint() { return {grammar::ConstraintKind::kRegex, kRegex, {}, nullptr}; }

struct ConstrainedOut {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::string> texts, finishes;
  EngineStats stats;
};

// Greedy constrained requests (prompts as greedy_request's, some with logprobs and penalties).
ConstrainedOut run_constrained(Engine& e, const std::shared_ptr<const TokenConstraintSpec>& spec, int n, int max_tokens) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < n; ++i) {
    GenerateRequest g = greedy_request(i, e.model_config().vocab_size, max_tokens);
    g.stop.ignore_eos = false;
    g.sampling.constraint = spec;
    auto s = e.submit(std::move(g));
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    streams.push_back(*s);
  }
  ConstrainedOut r;
  for (auto& s : streams) {
    std::vector<int32_t> t;
    std::string text, finish;
    while (auto o = s->next()) {
      for (const auto& tok : o->tokens) t.push_back(tok.token);
      text += o->text;
      if (o->finished) finish = o->finish_reason;
    }
    r.tokens.push_back(t);
    r.texts.push_back(text);
    r.finishes.push_back(finish);
  }
  r.stats = e.stats();
  return r;
}

// Every token of `tokens` taken by a fresh state of `spec`; a finished output ("stop") parses as
// the schema's JSON / matches the regex.
void expect_valid(const TokenConstraintSpec& spec, bool json, const std::vector<int32_t>& tokens, const std::string& text,
                  const std::string& finish) {
  auto c = spec.start();
  for (size_t j = 0; j < tokens.size(); ++j) ASSERT_TRUE(c->advance(tokens[j])) << "token " << j << " of " << text;
  if (finish != "stop") return;
  if (json) {
    const auto v = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << text;
    for (const char* k : {"name", "note", "tags", "age", "ok"}) EXPECT_TRUE(v.contains(k)) << text;
    EXPECT_TRUE(v["ok"].is_boolean()) << text;
    EXPECT_GE(v["tags"].size(), 1u) << text;
  } else {
    EXPECT_TRUE(std::regex_match(text, std::regex(kRegex))) << text;
  }
}

class ConstrainedSpecEquivalence : public ::testing::TestWithParam<SpecCase> {};

// Greedy constrained output is the same with and without speculation, for each proposer, a JSON
// schema and a regex, at batch 1 and 5, on the host verifier and on the device-verify path
// (SamplingCpuExecutor: per-row masks); every output is valid; drafts were verified and (for the
// proposers whose drafts can be right) accepted. Dropping the masks in either verifier changes
// the output: the target's unmasked choice is mostly forbidden.
TEST_P(ConstrainedSpecEquivalence, SameTokensAsPlainConstrainedDecoding) {
  const SpecCase& sc = GetParam();
  const std::string model = target_path(sc);
  auto plain = Engine::create(config_for(model, nullptr));
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  for (const bool device : {false, true}) {
    SCOPED_TRACE(device ? "device verify" : "host verify");
    auto spec = Engine::create(config_for(model, &sc), device ? device_sampling_decorator() : ExecutorDecorator{});
    ASSERT_TRUE(spec.ok()) << spec.status().to_string();
    SamplingCpuExecutor::multi_row_steps = 0;
    for (const bool json : {true, false}) {
      SCOPED_TRACE(json ? "json schema" : "regex");
      auto cs = (*plain)->constraint(json ? json_constraint() : regex_constraint());
      ASSERT_TRUE(cs.ok()) << cs.status().to_string();
      for (int batch : {1, 5}) {
        SCOPED_TRACE("batch " + std::to_string(batch));
        const ConstrainedOut a = run_constrained(**plain, *cs, batch, 120);
        const ConstrainedOut b = run_constrained(**spec, *cs, batch, 120);
        for (int i = 0; i < batch; ++i) {
          ASSERT_EQ(a.tokens[i], b.tokens[i]) << "request " << i << ": " << a.texts[i] << " vs " << b.texts[i];
          EXPECT_EQ(a.finishes[i], b.finishes[i]);
          expect_valid(**cs, json, b.tokens[i], b.texts[i], b.finishes[i]);
        }
        EXPECT_EQ(b.stats.free_kv_blocks, b.stats.num_kv_blocks);
      }
    }
    const EngineStats st = (*spec)->stats();
    EXPECT_GT(st.spec_num_draft_tokens, 0);
    if (sc.accepts) EXPECT_GT(st.spec_num_accepted_tokens, 0);
    if (device) EXPECT_GT(SamplingCpuExecutor::multi_row_steps, 0);
    std::printf("[constrained %s %s] drafts %lld, draft tokens %lld, accepted %lld\n", sc.name.c_str(),
                device ? "device" : "host", static_cast<long long>(st.spec_num_drafts),
                static_cast<long long>(st.spec_num_draft_tokens), static_cast<long long>(st.spec_num_accepted_tokens));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Proposers, ConstrainedSpecEquivalence,
    ::testing::Values(SpecCase{"TinyLlamaNgram", tiny("llama3/model-f32.gguf"), "ngram", ""},
                      SpecCase{"TinyLlamaDraftQ8", tiny("llama3/model-f32.gguf"), "draft", tiny("llama3/model-q8_0.gguf")},
                      SpecCase{"TinyLlamaDraftQwen2", tiny("llama3/model-f32.gguf"), "draft", tiny("qwen2/model-f32.gguf"), false}),
    [](const auto& info) { return info.param.name; });

// Drafts each request's recorded greedy continuation with the token at draft index 1 replaced by
// one the constraint forbids there (found on a fresh constraint replayed over the output and
// draft 0): every step's drafts are [right, forbidden, right, ...].
class ForbiddingProposer final : public Proposer {
 public:
  ForbiddingProposer(std::unordered_map<std::string, std::vector<int32_t>> records,
                     std::unordered_map<std::string, size_t> prompt_lens, std::shared_ptr<const TokenConstraintSpec> spec)
      : records_(std::move(records)), prompt_lens_(std::move(prompt_lens)), spec_(std::move(spec)) {}
  std::string name() const override { return "forbidding"; }
  void propose(std::span<const ProposeRequest> reqs, std::vector<std::vector<int32_t>>& drafts) override {
    drafts.assign(reqs.size(), {});
    for (size_t i = 0; i < reqs.size(); ++i) {
      const auto& rec = records_.at(*reqs[i].id);
      const size_t n = reqs[i].tokens.size();
      if (n >= rec.size() || !std::equal(reqs[i].tokens.begin(), reqs[i].tokens.end(), rec.begin())) continue;
      drafts[i].assign(rec.begin() + n, rec.begin() + std::min(rec.size(), n + reqs[i].max_drafts));
      if (drafts[i].size() < 2) continue;
      auto c = spec_->start();
      for (size_t j = prompt_lens_.at(*reqs[i].id); j <= n; ++j) EXPECT_TRUE(c->advance(rec[j]));
      int32_t f = 0;
      while (f < c->vocab_size() && c->accepts(f)) ++f;
      if (f == c->vocab_size()) continue;  // everything allowed here: no forbidden token to propose
      drafts[i][1] = f;
      ++forbidden;
    }
  }
  int64_t forbidden = 0;

 private:
  std::unordered_map<std::string, std::vector<int32_t>> records_;
  std::unordered_map<std::string, size_t> prompt_lens_;
  std::shared_ptr<const TokenConstraintSpec> spec_;
};

// A proposer that drafts forbidden tokens: they are never verified nor accepted (cut before), the
// drafts before them are all accepted, the output is plain constrained decoding's, on the host
// verifier and on the device-verify path.
TEST(SpecDecode, DraftsTheGrammarForbidsAreNeverAccepted) {
  const std::string model = tiny("llama3/model-f32.gguf");
  auto engine = Engine::create(config_for(model, nullptr));
  ASSERT_TRUE(engine.ok());
  auto cs = (*engine)->constraint(json_constraint());
  ASSERT_TRUE(cs.ok()) << cs.status().to_string();
  const std::vector<int32_t> eos = (*engine)->tokenizer().stop_ids();
  for (const bool device : {false, true}) {
    SCOPED_TRACE(device ? "device verify" : "host verify");
    EngineConfig c = config_for(model, nullptr);
    ThreadPool pool(2);
    auto core = make_core(c, pool, device);
    ASSERT_TRUE(core.ok()) << core.status().to_string();
    EngineCore& e = **core;
    const int64_t vocab = e.model_config().vocab_size;
    const int kRequests = 6;
    auto run = [&](const std::string& tag) {
      return run_greedy_core(e, tag, kRequests, [&](Request& r) {
        r.sampling.constraint = *cs;
        r.stop.max_tokens = 100;
        r.eos_token_ids = eos;
      });
    };
    const auto record = run("plain-");
    const auto records = recorded_sequences(record, "spec-", vocab);
    std::unordered_map<std::string, size_t> prompt_lens;
    for (int i = 0; i < kRequests; ++i) prompt_lens["spec-" + std::to_string(i)] = mixed_prompt(i + 1, vocab).size();
    auto proposer = std::make_unique<ForbiddingProposer>(records, prompt_lens, *cs);
    ForbiddingProposer* fp = proposer.get();
    SpeculativeConfig spec;
    spec.method = "forbidding";
    spec.num_speculative_tokens = 4;
    spec.adaptive = false;
    e.set_speculation(spec, std::move(proposer));
    const auto got = run("spec-");
    for (int i = 0; i < kRequests; ++i) {
      EXPECT_EQ(got[i], record[i]) << "request " << i;
      expect_valid(**cs, true, got[i], "", "");
    }
    const CoreStats& st = e.stats();
    EXPECT_GT(fp->forbidden, 20);
    EXPECT_GT(st.spec_num_draft_tokens, 20);
    // Only draft 0 of a forbidding step reaches the verifier, and it is the right token.
    EXPECT_EQ(st.spec_num_accepted_tokens, st.spec_num_draft_tokens);
    EXPECT_EQ(e.kv_manager().num_free_blocks(), e.kv_manager().pool().num_usable_blocks());
  }
}

// The draft model drafts inside the grammar: under a constraint its drafts are taken one after
// another by the constraint (its unmasked drafts are not), and the constraint is in its entry
// state afterwards.
TEST(SpecDecode, ADraftModelDraftsOnlyWhatTheGrammarAllows) {
  const std::string model = tiny("llama3/model-f32.gguf");
  auto engine = Engine::create(config_for(model, nullptr));
  ASSERT_TRUE(engine.ok());
  auto cs = (*engine)->constraint(json_constraint());
  ASSERT_TRUE(cs.ok()) << cs.status().to_string();
  SpecCase sc{"draft", model, "draft", tiny("llama3/model-q8_0.gguf")};
  EngineConfig c = config_for(model, &sc);
  ThreadPool pool(2);
  auto core = make_core(c, pool);
  ASSERT_TRUE(core.ok()) << core.status().to_string();
  std::unique_ptr<Proposer> draft = (*core)->release_proposer();
  ASSERT_NE(draft, nullptr);
  const int64_t vocab = (*core)->model_config().vocab_size;
  int unmasked_forbidden = 0;
  for (int i = 0; i < 8; ++i) {
    const std::vector<int32_t> prompt = mixed_prompt(i + 1, vocab);
    auto constraint = (*cs)->start();
    // Some output already: the first 3 tokens of plain constrained decoding's kind (any allowed ones).
    std::vector<int32_t> tokens = prompt;
    for (int k = 0; k < 3; ++k) {
      std::vector<uint32_t> m((constraint->vocab_size() + 31) / 32);
      constraint->fill_mask(m);
      int32_t t = 0;
      while (!((m[t / 32] >> (t % 32)) & 1u)) ++t;
      ASSERT_TRUE(constraint->advance(t));
      tokens.push_back(t);
    }
    std::vector<uint32_t> before((constraint->vocab_size() + 31) / 32), after(before.size());
    constraint->fill_mask(before);
    for (const bool masked : {true, false}) {
      const std::string id = (masked ? "masked-" : "free-") + std::to_string(i);
      ProposeRequest q;
      q.id = &id;
      q.tokens = tokens;
      q.max_drafts = 4;
      q.constraint = masked ? constraint.get() : nullptr;
      std::vector<std::vector<int32_t>> d;
      draft->propose(std::span<const ProposeRequest>(&q, 1), d);
      ASSERT_EQ(d.size(), 1u);
      ASSERT_EQ(d[0].size(), 4u);
      const int32_t ok = accepted_prefix(*constraint, d[0]);
      if (masked) EXPECT_EQ(ok, 4) << "request " << i;
      else unmasked_forbidden += ok < 4;
      constraint->fill_mask(after);
      EXPECT_EQ(before, after);
      draft->forget(id);
    }
  }
  EXPECT_GT(unmasked_forbidden, 4);  // the masks mattered
}

}  // namespace
}  // namespace pagoda

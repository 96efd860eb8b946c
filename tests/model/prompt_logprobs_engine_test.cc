// Prompt logprobs through the engine (SamplingParams::prompt_logprobs) against the reference of
// one whole-prompt forward pass (tests/prompt_logprobs_reference.h): under chunked prefill (the
// rows gathered across chunks), after the prompt is in the prefix cache (a request asking for
// them computes every position), with n > 1, for a one-token prompt, and without changing the
// tokens generated.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "prompt_logprobs_reference.h"
#include "test_paths.h"

namespace pagoda {
namespace {

using test::collect_prompt_logprobs;

std::string tiny_llama() { return test::models_dir() + "/tiny/llama3/model-f32.gguf"; }

EngineConfig config(const std::string& model, int32_t budget) {
  EngineConfig c = test::base_engine_config(model);
  c.kv_dtype = DType::kF32;
  c.scheduler.max_num_batched_tokens = budget;
  return c;
}

std::vector<int32_t> prompt_of(int64_t vocab, int len) {
  std::vector<int32_t> p;
  for (int k = 0; k < len; ++k) p.push_back(static_cast<int32_t>((k * 7919 + 13) % (vocab - 10) + 5));
  return p;
}

// got against want row by row: logprob within 1e-4 (the chunked forward sums in another order),
// the top N in order where neighbours are not tied, the rank exact unless the token's logit
// sits within 1e-4 of another's.
void expect_rows_match(const std::vector<RowLogprobs>& got, const std::vector<RowLogprobs>& want, int32_t top_n,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int rank_equal = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i].logprob, want[i].logprob, 1e-4) << what << " token " << i + 1;
    ASSERT_EQ(got[i].top.size(), static_cast<size_t>(top_n)) << what << " token " << i + 1;
    for (int32_t k = 0; k < top_n; ++k) {
      EXPECT_NEAR(got[i].top[k].logprob, want[i].top[k].logprob, 1e-4) << what << " token " << i + 1 << " top " << k;
      const bool tied = (k > 0 && want[i].top[k - 1].logprob - want[i].top[k].logprob < 1e-4) ||
                        (k + 1 < top_n && want[i].top[k].logprob - want[i].top[k + 1].logprob < 1e-4);
      if (!tied) {
        EXPECT_EQ(got[i].top[k].token, want[i].top[k].token) << what << " token " << i + 1 << " top " << k;
      }
    }
    EXPECT_NEAR(got[i].rank, want[i].rank, 2) << what << " token " << i + 1;
    rank_equal += got[i].rank == want[i].rank;
  }
  EXPECT_GE(rank_equal, static_cast<int>(got.size() * 9 / 10)) << what;
}

TEST(PromptLogprobs, MatchAWholePromptForwardPassAcrossChunksAndPrefixHits) {
  const std::string model = tiny_llama();
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "no " << model;
  for (int32_t budget : {512, 24}) {  // whole prompt in one step; chunks of 24 tokens
    auto engine = Engine::create(config(model, budget));
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    const int64_t vocab = (*engine)->model_config().vocab_size;
    const std::vector<int32_t> prompt = prompt_of(vocab, 100);
    const int32_t top_n = 5;
    const auto want = test::reference_prompt_logprobs(model, prompt, top_n);
    ASSERT_EQ(want.size(), prompt.size() - 1);
    auto request = [&](int32_t plp, int32_t n) {
      GenerateRequest g;
      g.prompt_ids = prompt;
      g.sampling.temperature = 0;
      g.sampling.prompt_logprobs = plp;
      g.stop.max_tokens = 6;
      g.stop.ignore_eos = true;
      g.n = n;
      return g;
    };
    // Without prompt logprobs first: its blocks land in the prefix cache.
    auto plain = collect_prompt_logprobs(**(*engine)->submit(request(-1, 1)));
    EXPECT_EQ(plain.outputs_with_prompt_logprobs, 0);
    auto cached = collect_prompt_logprobs(**(*engine)->submit(request(-1, 1)));
    EXPECT_GT(cached.cached[0], 0) << "the prompt should be a prefix-cache hit";
    auto with = collect_prompt_logprobs(**(*engine)->submit(request(top_n, 1)));
    EXPECT_EQ(with.cached[0], 0) << "a request asking for prompt logprobs computes its whole prompt";
    EXPECT_EQ(with.outputs_with_prompt_logprobs, 1) << "only the first token's output carries them";
    expect_rows_match(with.prompt[0], want, top_n, "budget " + std::to_string(budget));
    EXPECT_EQ(with.tokens[0], plain.tokens[0]) << "prompt logprobs must not change the tokens";
    // The prompt NLL (the perplexity path's figure) is minus their sum.
    double nll_got = 0, nll_want = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      nll_got -= with.prompt[0][i].logprob;
      nll_want -= want[i].logprob;
    }
    EXPECT_NEAR(nll_got, nll_want, 1e-5 * want.size());
    // n = 2: each sample carries them.
    auto two = collect_prompt_logprobs(**(*engine)->submit(request(2, 2)));
    ASSERT_EQ(two.prompt.size(), 2u);
    for (int s = 0; s < 2; ++s) expect_rows_match(two.prompt[s], want, 2, "n=2 sample " + std::to_string(s));
    const EngineStats st = (*engine)->stats();
    EXPECT_EQ(st.free_kv_blocks, st.num_kv_blocks);
  }
}

TEST(PromptLogprobs, ConcurrentRequestsKeepTheirTokensAndAOneTokenPromptHasNone) {
  const std::string model = tiny_llama();
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "no " << model;
  auto engine = Engine::create(config(model, 64));
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const int64_t vocab = (*engine)->model_config().vocab_size;
  auto make = [&](int i, int32_t plp) {
    GenerateRequest g;
    g.prompt_ids = test::mixed_prompt(i, vocab);
    g.sampling.temperature = 0;
    g.sampling.prompt_logprobs = plp;
    g.stop.max_tokens = 5;
    g.stop.ignore_eos = true;
    return g;
  };
  const int kRequests = 12;
  std::vector<std::vector<int32_t>> solo(kRequests);
  for (int i = 0; i < kRequests; ++i) solo[i] = collect_prompt_logprobs(**(*engine)->submit(make(i, -1))).tokens[0];
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < kRequests; ++i) streams.push_back(*(*engine)->submit(make(i, i % 2 == 0 ? 3 : -1)));
  for (int i = 0; i < kRequests; ++i) {
    auto got = collect_prompt_logprobs(*streams[i]);
    EXPECT_EQ(got.tokens[0], solo[i]) << "request " << i;
    const auto prompt = test::mixed_prompt(i, vocab);
    if (i % 2 == 0 && prompt.size() > 1) {
      expect_rows_match(got.prompt[0], test::reference_prompt_logprobs(model, prompt, 3), 3, "request " + std::to_string(i));
    } else {
      EXPECT_EQ(got.outputs_with_prompt_logprobs, 0) << "request " << i << " (" << prompt.size() << " prompt tokens)";
    }
  }
  // mixed_prompt(0) has one token: nothing to score.
  ASSERT_EQ(test::mixed_prompt(0, vocab).size(), 1u);
  GenerateRequest bad = make(1, 21);
  EXPECT_FALSE((*engine)->submit(bad).ok()) << "prompt_logprobs above 20 is refused";
}

}  // namespace
}  // namespace pagoda

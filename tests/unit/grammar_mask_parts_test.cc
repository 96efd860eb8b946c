// Token masks on a real vocabulary (GPT-2's 50,257 tokens, ../shared/tokenizers) by every path
// the engine takes: the whole trie walk, the walk in parts (each part's node range alone, and the
// MaskWalk job with its parts run out of order), the cache after eviction, and one step of 64 rows
// through runtime/constraint_masks.h on a pool of threads (rows sharing states share a job); each
// against the plain reference, every token's bytes tried on the state. States come from random
// walks (random allowed tokens) through schemas of the benchmark corpus.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "common/thread_pool.h"
#include "engine/engine.h"
#include "grammar/constraint.h"
#include "grammar/json_schema_compiler.h"
#include "grammar/matcher.h"
#include "unit/grammar_brute_force_mask.h"
#include "runtime/constraint_masks.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::grammar {
namespace {

std::shared_ptr<const TokenVocabulary> gpt2_vocab() {
  static std::shared_ptr<const TokenVocabulary> v = [] {
    std::shared_ptr<const TokenVocabulary> out;
    auto tok = Tokenizer::load(test::shared_dir() + "/tokenizers/vocab-vectors/ggml-vocab-gpt-2.gguf");
    if (tok.ok()) out = make_token_vocabulary(**tok);
    return out;
  }();
  return v;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The corpus schemas that compile, plus bench/schemas/people.json (first).
std::vector<std::string> corpus_schemas() {
  const std::filesystem::path bench = std::filesystem::path(test::testdata_dir()) / ".." / "bench" / "schemas";
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(bench / "corpus"))
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::vector<std::string> out{read((bench / "people.json").string())};
  for (const auto& f : files) out.push_back(read(f));
  return out;
}

int popcount(const std::vector<uint32_t>& m) {
  int n = 0;
  for (uint32_t w : m) n += __builtin_popcount(w);
  return n;
}

// A random allowed token that is not a stop id; -1 if none.
int32_t pick(const TokenVocabulary& vocab, const std::vector<uint32_t>& mask, std::mt19937& rng) {
  std::vector<int32_t> allowed;
  for (int32_t t = 0; t < vocab.size(); ++t)
    if (((mask[t >> 5] >> (t & 31)) & 1) && !vocab.is_stop(t)) allowed.push_back(t);
  return allowed.empty() ? -1 : allowed[rng() % allowed.size()];
}

TEST(MaskParts, EveryPathEqualsTryingEveryTokenOnAReal50kVocabulary) {
  auto vocab = gpt2_vocab();
  if (!vocab) GTEST_SKIP() << "no GPT-2 vocabulary under " << test::shared_dir();
  const auto& starts = vocab->part_starts();
  ASSERT_GE(starts.size(), 3u);
  for (size_t k = 1; k + 1 < starts.size(); ++k) {
    ASSERT_LT(starts[k - 1], starts[k]);
    ASSERT_LE(vocab->nodes()[starts[k]].depth, 2u);
  }
  // Free strings first (states that allow most of the vocabulary: the walks that are split), then
  // the benchmark's schemas in a random order.
  std::vector<std::string> schemas = corpus_schemas();
  std::mt19937 rng(7);
  std::shuffle(schemas.begin() + 1, schemas.end(), rng);
  schemas.insert(schemas.begin(), {R"({"type":"array","items":{"type":"string"}})",
                                   R"({"type":"object","properties":{"text":{"type":"string"}},"required":["text"]})"});
  int states = 0, split = 0, deep_starts_used = 0, accepting = 0, wide = 0;
  std::vector<uint32_t> walked(vocab->mask_words()), parted(vocab->mask_words()), via_job(vocab->mask_words());
  for (size_t si = 0; si < schemas.size() && states < 96; ++si) {
    auto g = compile_json_schema_text(schemas[si]);
    if (!g.ok()) continue;
    auto cg = std::make_shared<const CompiledGrammar>(std::move(g).value(), vocab);
    StackSet st = cg->initial();
    for (int s = 0; s < 12 && !st.empty() && states < 96; ++s) {
      const std::vector<uint32_t> want = brute_force_mask(*cg, st);
      ++states;
      accepting += cg->pda().accepting(st) ? 1 : 0;
      wide += popcount(want) > 10000 ? 1 : 0;
      cg->compute_mask(st, walked);
      ASSERT_EQ(walked, want) << "whole walk, schema " << si << " step " << s;
      // Every part's node range alone (stop ids added as compute_mask adds them).
      std::fill(parted.begin(), parted.end(), 0u);
      if (cg->pda().accepting(st))
        for (int32_t t : vocab->stop_ids()) parted[t >> 5] |= 1u << (t & 31);
      for (size_t k = 0; k + 1 < starts.size(); ++k) {
        cg->walk_nodes(st, starts[k], starts[k + 1], parted);
        deep_starts_used += vocab->nodes()[starts[k]].depth == 2 ? 1 : 0;
      }
      ASSERT_EQ(parted, want) << "parts, schema " << si << " step " << s;
      // The job: parts in a random order, then the cache.
      std::shared_ptr<MaskJob> job;
      if (!cg->fill_mask_if_ready(st, via_job, &job)) {
        std::vector<int32_t> order(static_cast<size_t>(job->parts()));
        for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int32_t>(k);
        std::shuffle(order.begin(), order.end(), rng);
        split += order.size() > 1 ? 1 : 0;
        for (int32_t k : order) job->run_part(k);
        std::shared_ptr<MaskJob> again;
        ASSERT_TRUE(cg->fill_mask_if_ready(st, via_job, &again)) << "the finished job's mask is cached";
      }
      ASSERT_EQ(via_job, want) << "job, schema " << si << " step " << s;
      const int32_t t = pick(*vocab, want, rng);
      if (t < 0) break;
      ASSERT_TRUE(cg->pda().advance_bytes(&st, vocab->bytes(t)));
    }
  }
  // The states must reach what the fast paths do differently.
  EXPECT_EQ(states, 96);
  EXPECT_GT(split, 3) << "walks in parts";
  EXPECT_GT(wide, 3) << "states allowing most of the vocabulary";
  EXPECT_GT(accepting, 0);
  EXPECT_GT(deep_starts_used, 0) << "a part starting below the root's children";
}

TEST(MaskParts, AStepOf64RowsOnAPoolEqualsTheReference) {
  auto vocab = gpt2_vocab();
  if (!vocab) GTEST_SKIP() << "no GPT-2 vocabulary under " << test::shared_dir();
  ConstraintCache cache(vocab);
  const std::vector<std::string> schemas = corpus_schemas();
  // 64 rows over 8 schemas (rows of a schema start in the same state: they share jobs), each
  // advanced by a random allowed token a step, for 6 steps; the masks of every step checked.
  std::vector<std::shared_ptr<const GrammarConstraintSpec>> specs;
  for (size_t i = 0; i < schemas.size() && specs.size() < 8; ++i) {
    auto s = cache.get({ConstraintKind::kJsonSchema, schemas[i], {}, nullptr});
    if (s.ok()) specs.push_back(*s);
  }
  ASSERT_EQ(specs.size(), 8u);
  struct R {
    std::unique_ptr<TokenConstraint> c;
    GrammarMatcher reference;
    std::vector<uint32_t> mask;
    int32_t last = -1;
  };
  std::vector<R> rows;
  for (int i = 0; i < 64; ++i)
    rows.push_back({specs[i % 8]->start(), GrammarMatcher(specs[i % 8]->compiled()), std::vector<uint32_t>(vocab->mask_words()), -1});
  ThreadPool pool(4);
  std::mt19937 rng(5);
  int64_t computed = 0;
  for (int step = 0; step < 6; ++step) {
    std::vector<ConstraintMaskRow> mr(rows.size());
    for (size_t k = 0; k < rows.size(); ++k) mr[k] = {rows[k].c.get(), std::span<uint32_t>(rows[k].mask)};
    fill_constraint_masks(pool, mr, [&](size_t k) {
      if (rows[k].last >= 0) EXPECT_TRUE(rows[k].c->advance(rows[k].last));
    });
    for (auto& r : rows) {
      std::vector<uint32_t> want = brute_force_mask(r.reference.grammar(), r.reference.state());
      if (popcount(want) == 0)
        for (int32_t t : vocab->stop_ids()) want[t >> 5] |= 1u << (t & 31);
      ASSERT_EQ(r.mask, want) << "step " << step;
      r.last = pick(*vocab, r.mask, rng);
      if (r.last < 0) {
        r.c = specs[0]->start();
        r.reference = GrammarMatcher(specs[0]->compiled());
      } else {
        ASSERT_TRUE(r.reference.accept_token(r.last));
      }
    }
  }
  for (const auto& s : specs) computed += s->compiled()->cache_stats().misses;
  // Rows in one state share a computation: far fewer than rows x steps.
  EXPECT_GT(computed, 8);
  EXPECT_LT(computed, 64 * 6);
}

TEST(MaskParts, EvictedMasksAreComputedAgainExactly) {
  auto vocab = gpt2_vocab();
  if (!vocab) GTEST_SKIP() << "no GPT-2 vocabulary under " << test::shared_dir();
  // A string of up to 200 characters: a distinct state per length, more than the cache keeps
  // (the least it keeps: 16 masks).
  auto cg = std::make_shared<const CompiledGrammar>(*compile_json_schema_text(R"({"type":"string","maxLength":200})"), vocab, 0);
  const size_t cap = cg->cache_capacity();
  ASSERT_EQ(cap, 16u);
  std::vector<uint32_t> mask(vocab->mask_words()), ref(vocab->mask_words());
  std::vector<StackSet> states;
  GrammarMatcher m(cg);
  ASSERT_TRUE(m.accept_bytes("\""));
  for (size_t i = 0; i < cap + 40; ++i) {
    states.push_back(m.state());
    m.fill_mask(mask);
    ASSERT_TRUE(m.accept_bytes("a"));
  }
  EXPECT_GT(cg->cache_stats().evictions, 0);
  EXPECT_LE(static_cast<size_t>(cg->cache_stats().entries), cap);
  for (size_t i = 0; i < states.size(); i += 7) {
    cg->fill_mask(states[i], mask);
    cg->compute_mask(states[i], ref);
    ASSERT_EQ(mask, ref) << i;
  }
}

}  // namespace
}  // namespace pagoda::grammar

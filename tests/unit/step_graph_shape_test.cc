// The CUDA executor's choice of a verification graph (backend/cuda/step_graph_shape.h): which steps
// replay one, the (bucket, rows) shape, the key table, and where each batch token lands in the
// graph's padded layout. Host logic only: runs in every build.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "backend/cuda/step_graph_shape.h"

namespace pagoda {
namespace {

using cuda::StepGraphShape;

const std::vector<int64_t> kBuckets = {1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64};

// A block table long enough for `context` tokens of 16-token blocks, blocks numbered from `first`.
std::vector<int32_t> table(int32_t context, int32_t first) {
  std::vector<int32_t> t;
  for (int32_t b = 0; b * 16 < context; ++b) t.push_back(first + b);
  return t;
}

// One sequence per entry: (new tokens, context after the step); logits at every new token.
ForwardBatch verification(const std::vector<std::pair<int32_t, int32_t>>& seqs) {
  ForwardBatch b;
  int32_t first = 1;
  for (const auto& [n, ctx] : seqs) {
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < n; ++i) ids.push_back(100 + i);
    b.add_sequence(ids, ctx, table(ctx, first), 16, true, true);
    first += 64;
  }
  return b;
}

TEST(StepGraphShape, UniformVerificationTakesTheSmallestBucketThatHoldsItsSequences) {
  // Batch 1, 1 + 4 drafts: bucket 1 of 5 rows.
  auto s = cuda::verify_graph_shape(verification({{5, 133}}), kBuckets, 64);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s, (StepGraphShape{1, 5}));
  EXPECT_EQ(s->tokens(), 5);
  // 3 sequences: bucket 4 (one padding sequence), 20 tokens.
  s = cuda::verify_graph_shape(verification({{5, 200}, {5, 40}, {5, 9}}), kBuckets, 64);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s, (StepGraphShape{4, 5}));
  EXPECT_EQ(s->tokens(), 20);
}

TEST(StepGraphShape, SequencesWithFewerDraftsArePaddedToTheLongest) {
  // Drafts of 4, none and 2: rows = 5, every sequence at its own graph offset.
  const ForwardBatch b = verification({{5, 133}, {1, 50}, {3, 70}});
  const auto s = cuda::verify_graph_shape(b, kBuckets, 64);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s, (StepGraphShape{4, 5}));
  std::vector<int32_t> map(static_cast<size_t>(b.num_tokens()), -1);
  cuda::map_graph_tokens(b, *s, map);
  EXPECT_EQ(map, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 10, 11, 12}));
  std::set<int32_t> distinct(map.begin(), map.end());
  EXPECT_EQ(distinct.size(), map.size());
}

TEST(StepGraphShape, DecodePrefillAndOversizedStepsTakeNoVerificationGraph) {
  // One token a sequence: the decode graphs' business.
  EXPECT_FALSE(cuda::verify_graph_shape(verification({{1, 10}, {1, 20}}), kBuckets, 64).has_value());
  // A prefill chunk longer than kMaxGraphRowsPerSeq.
  EXPECT_FALSE(cuda::verify_graph_shape(verification({{cuda::kMaxGraphRowsPerSeq + 1, 40}}), kBuckets, 1024).has_value());
  EXPECT_TRUE(cuda::verify_graph_shape(verification({{cuda::kMaxGraphRowsPerSeq, 40}}), kBuckets, 1024).has_value());
  // 13 sequences of 5 rows: bucket 16 would need 80 tokens, over the limit of 64.
  std::vector<std::pair<int32_t, int32_t>> many(13, {5, 30});
  EXPECT_FALSE(cuda::verify_graph_shape(verification(many), kBuckets, 64).has_value());
  many.resize(12);  // bucket 16 x 5 = 80 > 64 as well
  EXPECT_FALSE(cuda::verify_graph_shape(verification(many), kBuckets, 64).has_value());
  many.resize(8);  // bucket 8 x 5 = 40
  const auto s = cuda::verify_graph_shape(verification(many), kBuckets, 64);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s, (StepGraphShape{8, 5}));
  // More sequences than the largest bucket.
  std::vector<std::pair<int32_t, int32_t>> over(65, {2, 30});
  EXPECT_FALSE(cuda::verify_graph_shape(verification(over), kBuckets, 4096).has_value());
  // An empty batch.
  EXPECT_FALSE(cuda::verify_graph_shape(ForwardBatch{}, kBuckets, 64).has_value());
}

TEST(StepGraphShape, StepsWithoutEveryRowsLogitsRunEagerly) {
  // A short prompt chunk (or a draft model's catch-up pass): logits at its last token only.
  ForwardBatch b;
  b.add_sequence({5, 6, 7, 8}, 4, table(4, 1), 16);
  EXPECT_FALSE(cuda::verify_graph_shape(b, kBuckets, 64).has_value());
  // Beside a verification, too.
  ForwardBatch mixed = verification({{5, 133}});
  mixed.add_sequence({5, 6, 7}, 3, table(3, 100), 16);
  EXPECT_FALSE(cuda::verify_graph_shape(mixed, kBuckets, 64).has_value());
  // A one-token sequence without logits (a chunk ending a prompt without sampling) does not matter.
  ForwardBatch quiet = verification({{5, 133}});
  quiet.add_sequence({9}, 20, table(20, 100), 16, /*want_logits=*/false);
  const auto s = cuda::verify_graph_shape(quiet, kBuckets, 64);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s, (StepGraphShape{2, 5}));
}

TEST(StepGraphShape, MalformedBatchesRunEagerly) {
  ForwardBatch b = verification({{5, 133}, {5, 60}});
  ForwardBatch out_of_order = b;
  std::swap(out_of_order.seqs[0], out_of_order.seqs[1]);  // token_begin no longer in sequence order
  EXPECT_FALSE(cuda::verify_graph_shape(out_of_order, kBuckets, 64).has_value());
  ForwardBatch bad_row = b;
  bad_row.logits_rows.push_back(static_cast<int32_t>(b.num_tokens()));  // past the batch's tokens
  EXPECT_FALSE(cuda::verify_graph_shape(bad_row, kBuckets, 64).has_value());
  ForwardBatch short_ctx = b;
  short_ctx.seqs[1].context_len = 3;  // fewer keys than new tokens
  EXPECT_FALSE(cuda::verify_graph_shape(short_ctx, kBuckets, 64).has_value());
  ForwardBatch extra_token = b;
  extra_token.token_ids.push_back(7);  // a token no sequence owns
  EXPECT_FALSE(cuda::verify_graph_shape(extra_token, kBuckets, 64).has_value());
}

TEST(StepGraphShape, KeysAreDistinctAndOneRowKeysKeepTheDecodeTable) {
  for (int64_t b : kBuckets) {
    EXPECT_EQ(cuda::step_graph_key({b, 1}, false), 2 * b);
    EXPECT_EQ(cuda::step_graph_key({b, 1}, true), 2 * b + 1);
  }
  std::set<int64_t> keys;
  size_t n = 0;
  for (int64_t rows = 1; rows <= cuda::kMaxGraphRowsPerSeq; ++rows)
    for (int64_t b : {int64_t{1}, int64_t{2}, int64_t{64}, int64_t{1024}})
      for (bool sk : {false, true}) {
        keys.insert(cuda::step_graph_key({b, rows}, sk));
        ++n;
      }
  EXPECT_EQ(keys.size(), n);
}

}  // namespace
}  // namespace pagoda

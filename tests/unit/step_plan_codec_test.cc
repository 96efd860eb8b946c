// The step plan's wire format (core/step_plan_codec.h): every field of a SchedulerOutput survives
// a round trip, the encoding is canonical (with the constraint put back where its flag says), the
// constraint travels as a flag only, and malformed
// bytes (every truncation, a flipped byte of a count, wrong magic / version, trailing bytes, token
// counts that do not add up) are errors, never a crash or an over-read (fuzz/step_plan_fuzz.cc
// covers arbitrary bytes).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "core/step_plan_codec.h"
#include "core/token_constraint.h"

namespace pagoda {
namespace {

// A constraint the codec never looks into (only whether there is one).
struct OpaqueConstraint final : TokenConstraintSpec {
  std::unique_ptr<TokenConstraint> start() const override { return nullptr; }
};

SchedulerOutput rich_plan() {
  SchedulerOutput p;
  NewRequestData a;
  a.id = "req-a";
  a.tokens = {1, 15043, 3186, -7, std::numeric_limits<int32_t>::max()};
  a.num_prompt_tokens = 4;
  a.sampling.temperature = 0.7f;
  a.sampling.top_k = 40;
  a.sampling.top_p = 0.95f;
  a.sampling.min_p = 0.05f;
  a.sampling.repetition_penalty = 1.1f;
  a.sampling.presence_penalty = -0.5f;
  a.sampling.frequency_penalty = 2.0f;
  a.sampling.seed = 1234567890123ull;
  a.sampling.logprobs = 5;
  a.sampling.prompt_logprobs = 0;
  a.sampling.logit_bias = {{7, -100.0f}, {42, 3.5f}};
  a.seed = 0xfeedfacecafebeefull;
  a.block_ids = {3, 4, 9};
  a.num_computed_tokens = 2;
  a.min_tokens = 3;
  a.min_tokens_blocked_ids = {2, 128001};
  NewRequestData b;
  b.id = "";  // an empty id is data, not an error
  b.tokens = {5};
  b.num_prompt_tokens = 1;
  b.sampling.constraint = std::make_shared<OpaqueConstraint>();
  p.new_requests = {a, b};
  CachedRequestData c;
  c.id = "req-c";
  c.new_block_ids = {11};
  c.num_computed_tokens = 77;
  c.replace_block_table = true;
  p.cached_requests = {c, CachedRequestData{"req-d", {}, 5, false}};
  p.num_scheduled_tokens = {{"req-a", 2, {}}, {"", 1, {}}, {"req-c", 4, {900, 901, 902}}, {"req-d", 1, {}}};
  p.total_num_scheduled_tokens = 8;
  p.preempted = {"req-x"};
  p.finished = {"req-y", "req-z"};
  p.swap_out = {{5, 1}, {6, 2}};
  p.swap_in = {{3, 12}};
  return p;
}

void expect_same_sampling(const SamplingParams& x, const SamplingParams& y) {
  EXPECT_EQ(x.temperature, y.temperature);
  EXPECT_EQ(x.top_k, y.top_k);
  EXPECT_EQ(x.top_p, y.top_p);
  EXPECT_EQ(x.min_p, y.min_p);
  EXPECT_EQ(x.repetition_penalty, y.repetition_penalty);
  EXPECT_EQ(x.presence_penalty, y.presence_penalty);
  EXPECT_EQ(x.frequency_penalty, y.frequency_penalty);
  EXPECT_EQ(x.seed, y.seed);
  EXPECT_EQ(x.logprobs, y.logprobs);
  EXPECT_EQ(x.prompt_logprobs, y.prompt_logprobs);
  EXPECT_EQ(x.logit_bias, y.logit_bias);
}

TEST(StepPlanCodec, EveryFieldSurvivesARoundTrip) {
  const SchedulerOutput p = rich_plan();
  const std::vector<uint8_t> bytes = encode_step_plan(p);
  auto d = decode_step_plan(bytes);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  const SchedulerOutput& q = d->plan;
  ASSERT_EQ(q.new_requests.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const NewRequestData &x = p.new_requests[i], &y = q.new_requests[i];
    EXPECT_EQ(x.id, y.id);
    EXPECT_EQ(x.tokens, y.tokens);
    EXPECT_EQ(x.num_prompt_tokens, y.num_prompt_tokens);
    expect_same_sampling(x.sampling, y.sampling);
    EXPECT_EQ(x.seed, y.seed);
    EXPECT_EQ(x.block_ids, y.block_ids);
    EXPECT_EQ(x.num_computed_tokens, y.num_computed_tokens);
    EXPECT_EQ(x.min_tokens, y.min_tokens);
    EXPECT_EQ(x.min_tokens_blocked_ids, y.min_tokens_blocked_ids);
    EXPECT_EQ(y.sampling.constraint, nullptr) << "the constraint stays on rank 0";
  }
  EXPECT_EQ(d->constrained, (std::vector<bool>{false, true}));
  ASSERT_EQ(q.cached_requests.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(p.cached_requests[i].id, q.cached_requests[i].id);
    EXPECT_EQ(p.cached_requests[i].new_block_ids, q.cached_requests[i].new_block_ids);
    EXPECT_EQ(p.cached_requests[i].num_computed_tokens, q.cached_requests[i].num_computed_tokens);
    EXPECT_EQ(p.cached_requests[i].replace_block_table, q.cached_requests[i].replace_block_table);
  }
  ASSERT_EQ(q.num_scheduled_tokens.size(), p.num_scheduled_tokens.size());
  for (size_t i = 0; i < q.num_scheduled_tokens.size(); ++i) {
    EXPECT_EQ(p.num_scheduled_tokens[i].id, q.num_scheduled_tokens[i].id);
    EXPECT_EQ(p.num_scheduled_tokens[i].num_tokens, q.num_scheduled_tokens[i].num_tokens);
    EXPECT_EQ(p.num_scheduled_tokens[i].spec_tokens, q.num_scheduled_tokens[i].spec_tokens);
  }
  EXPECT_EQ(q.total_num_scheduled_tokens, 8);
  EXPECT_EQ(q.preempted, p.preempted);
  EXPECT_EQ(q.finished, p.finished);
  EXPECT_EQ(q.swap_out, p.swap_out);
  EXPECT_EQ(q.swap_in, p.swap_in);
  SchedulerOutput again = q;  // with rank 0's constraint back where the flag says: the same bytes
  for (size_t i = 0; i < again.new_requests.size(); ++i)
    if (d->constrained[i]) again.new_requests[i].sampling.constraint = std::make_shared<OpaqueConstraint>();
  EXPECT_EQ(encode_step_plan(again), bytes) << "canonical";
}

TEST(StepPlanCodec, AnEmptyPlanRoundTrips) {
  const std::vector<uint8_t> bytes = encode_step_plan(SchedulerOutput{});
  EXPECT_EQ(bytes.size(), 4u + 2 + 2 + 4 + 7 * 4);  // header, total, seven empty lists
  auto d = decode_step_plan(bytes);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_TRUE(d->plan.empty());
}

TEST(StepPlanCodec, EveryTruncationIsAnError) {
  const std::vector<uint8_t> bytes = encode_step_plan(rich_plan());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto d = decode_step_plan(std::span<const uint8_t>(bytes.data(), n));
    ASSERT_FALSE(d.ok()) << "accepted the first " << n << " of " << bytes.size() << " bytes";
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(StepPlanCodec, MalformedHeadersCountsAndTotalsAreNamed) {
  const std::vector<uint8_t> good = encode_step_plan(rich_plan());
  auto error_of = [](std::vector<uint8_t> b) {
    auto d = decode_step_plan(b);
    return d.ok() ? std::string("accepted") : d.status().message();
  };
  std::vector<uint8_t> b = good;
  b[0] ^= 1;
  EXPECT_NE(error_of(b).find("magic"), std::string::npos) << error_of(b);
  b = good;
  b[4] = 2;
  EXPECT_NE(error_of(b).find("version"), std::string::npos) << error_of(b);
  b = good;
  b.push_back(0);
  EXPECT_NE(error_of(b).find("bytes after"), std::string::npos) << error_of(b);
  b = good;
  const uint32_t huge = 0x7fffffff;  // the new-request count: more than the bytes could hold
  std::memcpy(b.data() + 12, &huge, 4);
  EXPECT_NE(error_of(b).find("new_requests counts more"), std::string::npos) << error_of(b);
  b = good;
  const int32_t total = 9;  // not 2 + 1 + 4 + 1
  std::memcpy(b.data() + 8, &total, 4);
  EXPECT_NE(error_of(b).find("total_num_scheduled_tokens"), std::string::npos) << error_of(b);

  SchedulerOutput p;  // fewer scheduled tokens than draft tokens
  p.num_scheduled_tokens = {{"r", 1, {4, 5}}};
  p.total_num_scheduled_tokens = 1;
  EXPECT_NE(error_of(encode_step_plan(p)).find("draft tokens"), std::string::npos);
}

TEST(StepPlanCodec, NoFlippedByteCrashesAndEveryAcceptedPlanIsCanonical) {
  const std::vector<uint8_t> good = encode_step_plan(rich_plan());
  int accepted = 0;
  for (size_t i = 0; i < good.size(); ++i)
    for (uint8_t x : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::vector<uint8_t> b = good;
      b[i] ^= x;
      auto d = decode_step_plan(b);
      if (!d.ok()) continue;
      ++accepted;  // a value byte changed: still a plan, and it re-encodes to exactly these bytes
      EXPECT_EQ(encode_step_plan(d->plan).size(), b.size()) << "byte " << i;
    }
  EXPECT_GT(accepted, 0) << "value bytes (tokens, floats) are data: some flips must decode";
}

}  // namespace
}  // namespace pagoda

// The tensor-parallel rank command's wire format (runtime/rank_command.h): every op and every
// field of a forward batch survive a round trip, and the encoding is canonical; every truncation,
// a wrong magic / version / op, per-token lists of different lengths, a sequence or logits row
// outside the batch, a bool byte other than 0 / 1 and trailing bytes are errors naming the field,
// never a crash or an over-read (fuzz/rank_command_fuzz.cc explores the rest).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/rank_command.h"

namespace pagoda {
namespace {

RankCommand forward_command() {
  RankCommand c;
  c.batch.add_sequence({1, 15043, 3186}, 3, {4, 9}, 16, true, true);
  c.batch.add_sequence({77}, 21, {2, 5}, 16);
  c.batch.slots.back() = -1;  // a token that is not cached
  return c;
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  auto d = decode_rank_command(bytes);
  return d.ok() ? std::string() : d.status().message();
}

TEST(RankCommand, EveryOpRoundTripsCanonically) {
  std::vector<RankCommand> commands(5);
  commands[0] = forward_command();
  commands[1].op = RankOp::kSwapOut;
  commands[1].copies = {{5, 1}, {6, 2}};
  commands[2].op = RankOp::kSwapIn;
  commands[2].copies = {{3, 12}};
  commands[3].op = RankOp::kSetGraphs;
  commands[3].flag = true;
  commands[4].op = RankOp::kShutdown;
  for (const RankCommand& c : commands) {
    const std::vector<uint8_t> bytes = encode_rank_command(c);
    auto d = decode_rank_command(bytes);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    EXPECT_EQ(d->op, c.op);
    EXPECT_EQ(d->batch.token_ids, c.batch.token_ids);
    EXPECT_EQ(d->batch.positions, c.batch.positions);
    EXPECT_EQ(d->batch.slots, c.batch.slots);
    EXPECT_EQ(d->batch.logits_rows, c.batch.logits_rows);
    ASSERT_EQ(d->batch.seqs.size(), c.batch.seqs.size());
    for (size_t i = 0; i < c.batch.seqs.size(); ++i) {
      EXPECT_EQ(d->batch.seqs[i].token_begin, c.batch.seqs[i].token_begin);
      EXPECT_EQ(d->batch.seqs[i].num_tokens, c.batch.seqs[i].num_tokens);
      EXPECT_EQ(d->batch.seqs[i].context_len, c.batch.seqs[i].context_len);
      EXPECT_EQ(d->batch.seqs[i].block_table, c.batch.seqs[i].block_table);
    }
    EXPECT_EQ(d->copies, c.copies);
    EXPECT_EQ(d->flag, c.flag);
    EXPECT_EQ(encode_rank_command(*d), bytes) << "canonical";
  }
}

TEST(RankCommand, EveryTruncationIsAnError) {
  const std::vector<uint8_t> bytes = encode_rank_command(forward_command());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto d = decode_rank_command(std::span<const uint8_t>(bytes.data(), n));
    ASSERT_FALSE(d.ok()) << n;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(RankCommand, MalformedFieldsAreNamed) {
  std::vector<uint8_t> b = encode_rank_command(forward_command());
  std::vector<uint8_t> bad = b;
  bad[0] ^= 1;
  EXPECT_NE(error_of(bad).find("magic"), std::string::npos);
  bad = b;
  bad[4] = 2;
  EXPECT_NE(error_of(bad).find("version"), std::string::npos);
  bad = b;
  bad[6] = 9;
  EXPECT_NE(error_of(bad).find("op"), std::string::npos);
  bad = b;
  bad.push_back(0);
  EXPECT_NE(error_of(bad).find("bytes after"), std::string::npos);

  RankCommand c = forward_command();
  c.batch.positions.pop_back();
  EXPECT_NE(error_of(encode_rank_command(c)).find("one entry per token"), std::string::npos);
  c = forward_command();
  c.batch.seqs[1].num_tokens = 2;  // past the last token
  EXPECT_NE(error_of(encode_rank_command(c)).find("outside the batch"), std::string::npos);
  c = forward_command();
  c.batch.logits_rows.push_back(4);
  EXPECT_NE(error_of(encode_rank_command(c)).find("logits_rows"), std::string::npos);
  c = RankCommand{};
  c.op = RankOp::kSetGraphs;
  bad = encode_rank_command(c);
  bad.back() = 2;
  EXPECT_NE(error_of(bad).find("flag"), std::string::npos);
  // A count the remaining bytes cannot hold is refused before anything is allocated.
  c = RankCommand{};
  c.op = RankOp::kSwapIn;
  bad = encode_rank_command(c);
  bad[7] = 0xff;
  bad[8] = 0xff;
  bad[9] = 0xff;
  bad[10] = 0x7f;
  EXPECT_NE(error_of(bad).find("counts more elements"), std::string::npos);
}

}  // namespace
}  // namespace pagoda

// What rank 0 of a tensor-parallel model hands the other ranks each time it calls its executor
// (docs/decisions.md D78): the same call, which every rank then runs on its shards. The ranks
// hold only an executor each; rank 0's scheduler, KV manager and runner build the calls, so a
// worker repeats exactly the device work of rank 0 (the same forward batches, block copies and
// graph switches, in the same order) and its collectives meet rank 0's.
//
// Format (version 1), little-endian (common/wire_codec.h): u32 magic "PGRC", u16 version, u8 op,
// then per op: kForward a ForwardBatch (token ids, positions, slots, sequences with their block
// tables, logits rows: counted lists), kSwapOut / kSwapIn the block copies, kSetGraphs one bool
// byte, kShutdown nothing.
//
// Decoding never reads past the input nor allocates more than it could hold; malformed input (bad
// magic, version or op, a count past the end, per-token lists of different lengths, a sequence or
// logits row outside the tokens, trailing bytes) is an invalid-argument error naming the field.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "core/block_ids.h"
#include "runtime/forward_batch.h"

namespace pagoda {

inline constexpr uint32_t kRankCommandMagic = 0x43524750;  // "PGRC"
inline constexpr uint16_t kRankCommandVersion = 1;

enum class RankOp : uint8_t {
  kForward = 1,    // forward(batch) (rank 0: forward or forward_sample)
  kSwapOut = 2,    // swap_out(copies)
  kSwapIn = 3,     // swap_in(copies)
  kSetGraphs = 4,  // set_graphs_enabled(flag)
  kShutdown = 5,   // the worker leaves its loop
};

struct RankCommand {
  RankOp op = RankOp::kForward;
  ForwardBatch batch;             // kForward
  std::vector<BlockCopy> copies;  // kSwapOut, kSwapIn
  bool flag = false;              // kSetGraphs
};

std::vector<uint8_t> encode_rank_command(const RankCommand& c);
// encode_rank_command of a kForward command of `batch`, without copying the batch into one.
std::vector<uint8_t> encode_forward_command(const ForwardBatch& batch);
Result<RankCommand> decode_rank_command(std::span<const uint8_t> bytes);

}  // namespace pagoda

#include "runtime/rank_command.h"

#include "common/wire_codec.h"

namespace pagoda {

namespace {

void write_head(wire::Writer& w, RankOp op) {
  w.num(kRankCommandMagic);
  w.num(kRankCommandVersion);
  w.num(static_cast<uint8_t>(op));
}

void write_batch(wire::Writer& w, const ForwardBatch& b) {
  w.ints(b.token_ids);
  w.ints(b.positions);
  w.count(b.slots.size());
  for (int64_t s : b.slots) w.num(s);
  w.count(b.seqs.size());
  for (const ForwardSeq& s : b.seqs) {
    w.num(s.token_begin);
    w.num(s.num_tokens);
    w.num(s.context_len);
    w.ints(s.block_table);
  }
  w.ints(b.logits_rows);
}

}  // namespace

std::vector<uint8_t> encode_forward_command(const ForwardBatch& batch) {
  wire::Writer w;
  write_head(w, RankOp::kForward);
  write_batch(w, batch);
  return w.take();
}

std::vector<uint8_t> encode_rank_command(const RankCommand& c) {
  if (c.op == RankOp::kForward) return encode_forward_command(c.batch);
  wire::Writer w;
  write_head(w, c.op);
  switch (c.op) {
    case RankOp::kSwapOut:
    case RankOp::kSwapIn:
      w.count(c.copies.size());
      for (const auto& [src, dst] : c.copies) {
        w.num(src);
        w.num(dst);
      }
      break;
    case RankOp::kSetGraphs: w.flag(c.flag); break;
    case RankOp::kForward:
    case RankOp::kShutdown: break;
  }
  return w.take();
}

Result<RankCommand> decode_rank_command(std::span<const uint8_t> bytes) {
  wire::Reader r(bytes, "command");
  RankCommand c;
  if (r.num<uint32_t>("magic") != kRankCommandMagic && r.ok()) r.fail("magic", "is not \"PGRC\"");
  if (r.num<uint16_t>("version") != kRankCommandVersion && r.ok()) r.fail("version", "is not 1");
  const uint8_t op = r.num<uint8_t>("op");
  if (r.ok() && (op < static_cast<uint8_t>(RankOp::kForward) || op > static_cast<uint8_t>(RankOp::kShutdown)))
    r.fail("op", "is not an executor call");
  c.op = static_cast<RankOp>(op);
  if (r.ok() && c.op == RankOp::kForward) {
    ForwardBatch& b = c.batch;
    b.token_ids = r.ints("token_ids");
    b.positions = r.ints("positions");
    b.slots.resize(r.count("slots", 8));
    for (int64_t& s : b.slots) s = r.num<int64_t>("slots");
    const int64_t T = static_cast<int64_t>(b.token_ids.size());
    if (r.ok() && (static_cast<int64_t>(b.positions.size()) != T || static_cast<int64_t>(b.slots.size()) != T))
      r.fail("positions", "and slots do not have one entry per token");
    b.seqs.resize(r.count("seqs", 16));
    for (ForwardSeq& s : b.seqs) {
      s.token_begin = r.num<int32_t>("seqs.token_begin");
      s.num_tokens = r.num<int32_t>("seqs.num_tokens");
      s.context_len = r.num<int32_t>("seqs.context_len");
      s.block_table = r.ints("seqs.block_table");
      if (r.ok() && (s.token_begin < 0 || s.num_tokens < 0 || s.token_begin + int64_t{s.num_tokens} > T ||
                     s.context_len < s.num_tokens))
        r.fail("seqs", "has a sequence outside the batch's tokens");
    }
    b.logits_rows = r.ints("logits_rows");
    for (int32_t row : b.logits_rows)
      if (r.ok() && (row < 0 || row >= T)) r.fail("logits_rows", "names a row outside the batch's tokens");
  } else if (r.ok() && (c.op == RankOp::kSwapOut || c.op == RankOp::kSwapIn)) {
    c.copies.resize(r.count("copies", 8));
    for (auto& [src, dst] : c.copies) {
      src = r.num<BlockId>("copies");
      dst = r.num<BlockId>("copies");
    }
  } else if (r.ok() && c.op == RankOp::kSetGraphs) {
    c.flag = r.flag("flag");
  }
  if (r.ok() && !r.at_end()) r.fail("command", "has bytes after its last field");
  if (!r.ok()) return invalid_argument("rank command: {} (at byte {} of {})", r.error(), r.pos(), bytes.size());
  return c;
}

}  // namespace pagoda

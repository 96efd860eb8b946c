// libFuzzer target: bytes -> a tensor-parallel rank command (runtime/rank_command.h). Any bytes: a
// clear error, or a command whose per-token lists agree in length, whose sequences and logits rows
// lie inside the batch, and that re-encodes to exactly the input (the format is canonical).
// Findings are crashes, sanitizer reports (an over-read, a huge allocation from a count) and
// failed checks.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "runtime/rank_command.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto d = pagoda::decode_rank_command(std::span<const uint8_t>(data, size));
  if (!d.ok()) {
    check(!d.status().message().empty());
    return 0;
  }
  const pagoda::ForwardBatch& b = d->batch;
  const int64_t T = b.num_tokens();
  check(static_cast<int64_t>(b.positions.size()) == T && static_cast<int64_t>(b.slots.size()) == T);
  for (const auto& s : b.seqs) check(s.token_begin >= 0 && s.num_tokens >= 0 && s.token_begin + int64_t{s.num_tokens} <= T);
  for (int32_t r : b.logits_rows) check(r >= 0 && r < T);
  const std::vector<uint8_t> again = pagoda::encode_rank_command(*d);
  check(again.size() == size && std::equal(again.begin(), again.end(), data));
  return 0;
}

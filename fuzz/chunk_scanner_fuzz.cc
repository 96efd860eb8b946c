// libFuzzer target: the gateway's chunked-body scanner (src/gateway/chunk_scanner.h). The first
// byte picks the piece size; the rest is a worker's body fed in pieces. The outcome must not
// depend on the split: done, failed and the boundary equal those of the body fed whole (up to the
// byte where feeding stopped), the boundary never passes the bytes scanned and never moves back.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "gateway/chunk_scanner.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t piece = 1 + data[0] % 64;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  pagoda::gateway::ChunkScanner whole;
  const bool whole_ok = whole.feed(body);
  pagoda::gateway::ChunkScanner split;
  bool ok = true;
  uint64_t last = 0;
  for (size_t at = 0; at < body.size() && ok; at += piece) {
    ok = split.feed(body.substr(at, piece));
    check(split.boundary() >= last && split.boundary() <= split.scanned());
    last = split.boundary();
  }
  check(ok == whole_ok);
  check(split.failed() == whole.failed() && split.done() == whole.done());
  if (whole_ok) check(split.boundary() == whole.boundary() && whole.boundary() <= body.size());
  if (whole.done()) check(whole.boundary() == body.size());
  return 0;
}

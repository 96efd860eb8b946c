// Finds the chunk boundaries of an HTTP/1.1 chunked body (RFC 9112 section 7.1) as its bytes
// arrive, so that the gateway forwards a worker's event stream as the worker framed it, whole
// chunks only, without decoding and re-encoding it: a stream cut later still ends on a chunk
// boundary, where the gateway can append its error event and the last chunk.
//
// Offsets count the body's bytes from its first one. Linear: every byte is looked at once (a
// chunk's data is skipped, not examined). Thread-safety: one scanner per body, one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pagoda::gateway {

class ChunkScanner {
 public:
  // Scans the next bytes of the body (those after every byte fed before). Returns false on a
  // framing error (a bad size line, a missing CRLF, a size or line beyond the limits); the
  // scanner then stays failed.
  bool feed(std::string_view bytes);
  // The offset just past the last complete chunk (its data and CRLF), or past the whole body
  // once done(): bytes before it may be forwarded as they are.
  uint64_t boundary() const { return boundary_; }
  // The last chunk (size 0) and its trailer section were read: the body ends at boundary().
  bool done() const { return state_ == kDone; }
  bool failed() const { return state_ == kFailed; }
  // Bytes fed so far.
  uint64_t scanned() const { return pos_; }

 private:
  enum State { kSize, kExtension, kSizeLf, kData, kDataCr, kDataLf, kTrailerStart, kTrailerLine, kTrailerLf, kEndLf,
               kDone, kFailed };
  static constexpr int kMaxSizeDigits = 15;          // chunk sizes below 2^60
  static constexpr size_t kMaxLine = 4096;           // a size line's extension, a trailer line
  State state_ = kSize;
  uint64_t size_ = 0, remaining_ = 0, pos_ = 0, boundary_ = 0;
  int digits_ = 0;
  size_t line_ = 0;
};

}  // namespace pagoda::gateway

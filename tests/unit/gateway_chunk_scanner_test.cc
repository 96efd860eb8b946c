// gateway/chunk_scanner.h: the chunk boundaries of a chunked body found in one pass, however the
// bytes are split into reads, and every framing error refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gateway/chunk_scanner.h"

namespace pagoda::gateway {
namespace {

// Feeds `body` in pieces cut at `cuts` (sorted offsets); returns the boundary after each piece.
std::vector<uint64_t> boundaries_fed(const std::string& body, const std::vector<size_t>& cuts, ChunkScanner* s) {
  std::vector<uint64_t> out;
  size_t at = 0;
  std::vector<size_t> ends = cuts;
  ends.push_back(body.size());
  for (size_t end : ends) {
    EXPECT_TRUE(s->feed(std::string_view(body).substr(at, end - at))) << "at " << at;
    out.push_back(s->boundary());
    at = end;
  }
  return out;
}

TEST(GatewayChunkScanner, BoundariesOfEveryChunkHoweverTheBytesAreSplit) {
  const std::string c1 = "ca\r\n" + std::string(0xca, 'x') + "\r\n";
  const std::string c2 = "5;name=value\r\nhello\r\n";
  const std::string c3 = "A\r\n0123456789\r\n";  // upper-case hex
  const std::string end = "0\r\n\r\n";
  const std::string body = c1 + c2 + c3 + end;
  const uint64_t b1 = c1.size(), b2 = b1 + c2.size(), b3 = b2 + c3.size();
  for (size_t cut = 0; cut <= body.size(); ++cut) {
    ChunkScanner s;
    boundaries_fed(body, {cut}, &s);
    EXPECT_TRUE(s.done()) << cut;
    EXPECT_EQ(s.boundary(), body.size()) << cut;
    EXPECT_EQ(s.scanned(), body.size());
  }
  // Byte by byte: the boundary moves exactly at each chunk's last byte.
  ChunkScanner s;
  for (size_t i = 0; i < body.size(); ++i) {
    ASSERT_TRUE(s.feed(body.substr(i, 1)));
    const uint64_t want = i + 1 >= body.size() ? body.size() : i + 1 >= b3 ? b3 : i + 1 >= b2 ? b2 : i + 1 >= b1 ? b1 : 0;
    ASSERT_EQ(s.boundary(), want) << i;
    ASSERT_EQ(s.done(), i + 1 == body.size());
  }
}

TEST(GatewayChunkScanner, TrailersEndTheBody) {
  ChunkScanner s;
  EXPECT_TRUE(s.feed("3\r\nabc\r\n0\r\nX-Trailer: 1\r\nY: 2\r\n\r\n"));
  EXPECT_TRUE(s.done());
  EXPECT_EQ(s.boundary(), s.scanned());
  // Nothing may follow the body.
  EXPECT_FALSE(s.feed("x"));
  EXPECT_TRUE(s.failed());
}

TEST(GatewayChunkScanner, FramingErrorsAreRefused) {
  for (const char* bad : {"g\r\n", "\r\n", "3\r\nabcX", "3\r\nabc\rX", "3\nabc\r\n", "3\r\nabc\r\n0\r\nbad\n",
                          "1234567890abcdef\r\n", "0\r\n\rX", "-1\r\n"}) {
    ChunkScanner s;
    EXPECT_FALSE(s.feed(bad)) << bad;
    EXPECT_TRUE(s.failed()) << bad;
    EXPECT_FALSE(s.feed("0\r\n\r\n")) << "stays failed: " << bad;
  }
  ChunkScanner partial;
  EXPECT_TRUE(partial.feed("5\r\nab"));  // incomplete is not an error
  EXPECT_EQ(partial.boundary(), 0u);
  EXPECT_FALSE(partial.done());
}

}  // namespace
}  // namespace pagoda::gateway

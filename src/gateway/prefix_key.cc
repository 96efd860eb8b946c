#include "gateway/prefix_key.h"

#include <algorithm>

namespace pagoda::gateway {

uint64_t fnv1a64(std::string_view data, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::optional<uint64_t> prefix_key(std::string_view text, int chunk_chars, int max_chunks) {
  if (chunk_chars < 1 || max_chunks < 1) return std::nullopt;
  const size_t full = text.size() / static_cast<size_t>(chunk_chars);
  const size_t n = std::min(full, static_cast<size_t>(max_chunks));
  if (n == 0) return std::nullopt;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h = fnv1a64(text.substr(i * chunk_chars, chunk_chars), h);
    h = fnv1a64(std::string_view("\x00", 1), h);  // block boundary
  }
  return h;
}

}  // namespace pagoda::gateway

// Vocabulary basics shared by the tokenizer models and loaders: token types (GGUF numbering) and a
// string -> id hash map with heterogeneous (string_view) lookup.
#pragma once

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL  // hashing short keys: inline, no call through the shared library
#endif
#include <xxhash.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "tokenizer/string_index.h"

namespace pagoda {

// Token types, numbered as GGUF's tokenizer.ggml.token_type (and SentencePiece's piece types).
enum class TokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // special tokens: BOS, EOS, <|im_start|> ...
  kUserDefined = 4,  // added tokens matched verbatim in text
  kUnused = 5,
  kByte = 6,         // SentencePiece byte-fallback pieces <0xNN>
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return static_cast<size_t>(XXH3_64bits(s.data(), s.size())); }
};

// Vocabulary text -> id.
using StringIdMap = StringIndex;

inline int32_t find_id(const StringIdMap& map, std::string_view key) { return map.find(key); }

// "<0x0A>" -> 0x0A; -1 if `piece` is not a byte piece (upper-case hex, as SentencePiece writes).
int byte_piece_value(std::string_view piece);

}  // namespace pagoda

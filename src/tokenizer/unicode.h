// Unicode helpers for the tokenizers: strict UTF-8 decoding, code point classes and lossy repair.
//
// Code point classes come from utf8proc's general categories (no hand-made ranges):
//   kLetter \p{L}, kNumber \p{N}, kPunct \p{P}, kSymbol \p{S}, kMark \p{M}, kSeparator \p{Z},
//   kOther \p{C}, and kSpace = the Unicode White_Space property, which is what `\s` means in
//   Oniguruma (Hugging Face tokenizers) and Rust's regex: U+0009..U+000D, U+0085 and \p{Z}.
// The table is built once, on first use (thread-safe static), and is immutable afterwards.
//
// Invalid UTF-8: decode_utf8() reports a malformed sequence with the length of its "maximal
// subpart" (Unicode 15, section 3.9, U+FFFD substitution of maximal subparts), the same rule as
// the WHATWG decoder, Python's errors="replace" and Rust's String::from_utf8_lossy. The tokenizers
// treat each byte of a malformed sequence as one unit; append_lossy_utf8() replaces each maximal
// subpart with one U+FFFD.
#pragma once

#include "common/utf8.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pagoda::unicode {

using pagoda::append_utf8;  // common/utf8.h

enum CodepointFlag : uint8_t {
  kLetter = 1u << 0,
  kNumber = 1u << 1,
  kPunct = 1u << 2,
  kSymbol = 1u << 3,
  kMark = 1u << 4,
  kSeparator = 1u << 5,
  kOther = 1u << 6,
  kSpace = 1u << 7,  // White_Space property
};

// Flags of a code point (0 for values above U+10FFFF).
uint8_t codepoint_flags(char32_t cp);

// utf8proc general category (UTF8PROC_CATEGORY_*) of a code point.
int codepoint_category(char32_t cp);

inline bool is_space(char32_t cp) { return codepoint_flags(cp) & kSpace; }

struct Utf8Char {
  char32_t cp = 0;     // the code point; 0xFFFD for a malformed sequence
  uint32_t len = 0;    // bytes consumed: the character, or the maximal subpart of a malformed sequence
  bool valid = false;  // false for a malformed sequence
  bool truncated = false;  // malformed only because the input ends: more bytes could complete it
};

// Decodes the character at the start of s (s must not be empty).
Utf8Char decode_utf8(std::string_view s);

// Length of the character at s[0] for the tokenizers: the character's length if well formed, else 1
// (each byte of a malformed sequence is its own unit). s must not be empty.
inline uint32_t unit_length(std::string_view s) {
  const uint8_t b = static_cast<uint8_t>(s[0]);
  if (b < 0x80) return 1;
  Utf8Char c = decode_utf8(s);
  return c.valid ? c.len : 1;
}

// One tokenizer unit: a code point with its flags, or a single byte of malformed UTF-8
// (cp = 0xFFFD, flags = kOther, len = 1).
struct Unit {
  char32_t cp;
  uint32_t len;
  uint8_t flags;
};
Unit unit_at_slow(std::string_view s, size_t pos);
extern const std::array<uint8_t, 128> kAsciiFlags;  // flags of U+0000..U+007F
inline Unit unit_at(std::string_view s, size_t pos) {
  const uint8_t b = static_cast<uint8_t>(s[pos]);
  if (b < 0x80) return Unit{b, 1, kAsciiFlags[b]};
  return unit_at_slow(s, pos);
}


bool is_valid_utf8(std::string_view s);

// Appends `in` to *out as valid UTF-8, replacing each maximal subpart of a malformed sequence
// with U+FFFD. If `final` is false, a truncated sequence at the very end (one that more bytes
// could still complete) is left unconsumed. Returns the number of bytes of `in` consumed.
size_t append_lossy_utf8(std::string_view in, bool final, std::string* out);

inline std::string to_valid_utf8(std::string_view in) {
  std::string out;
  append_lossy_utf8(in, true, &out);
  return out;
}

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
// Unicode normalization through utf8proc. Malformed bytes are kept as they are (normalization
// applies to the well-formed stretches between them).
std::string normalize(std::string_view s, NormalForm form);
// Simple lowercase mapping of each code point (utf8proc_tolower).
std::string to_lower(std::string_view s);

}  // namespace pagoda::unicode

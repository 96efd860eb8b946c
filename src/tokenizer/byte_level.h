// The byte-to-character map of byte-level BPE (GPT-2's bytes_to_unicode): every byte value is
// shown as one printable code point so that vocabularies can be stored as text. Printable
// Latin-1 bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves; the other 68
// bytes, in increasing order, take U+0100, U+0101, ... (so ' ' is U+0120 'Ġ', '\n' is U+010A 'Ċ').
//
// Pagoda's byte-level BPE works on raw bytes: vocabulary strings are mapped back to bytes once, at
// load time, so encoding never builds the mapped text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pagoda::byte_level {

// The code point that stands for byte b.
char32_t byte_to_char(uint8_t b);
// The byte a code point stands for, or -1 if it is not one of the 256 mapped code points.
int char_to_byte(char32_t cp);

// Maps a byte string to its byte-level text (UTF-8).
std::string bytes_to_text(std::string_view bytes);
// Maps byte-level text back to bytes; nullopt if some character is not a mapped code point
// (e.g. an added token written as plain text) or the text is not valid UTF-8.
std::optional<std::string> text_to_bytes(std::string_view text);

}  // namespace pagoda::byte_level

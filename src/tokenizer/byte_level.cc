#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/unicode.h"

namespace pagoda::byte_level {
namespace {

struct Maps {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // indexed by code point; mapped code points are < 0x144
  Maps() {
    to_byte.fill(-1);
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) to_char[b] = printable(b) ? static_cast<char32_t>(b) : next++;
    for (int b = 0; b < 256; ++b) to_byte[to_char[b]] = static_cast<int16_t>(b);
  }
};

const Maps& maps() {
  static const Maps m;
  return m;
}

}  // namespace

char32_t byte_to_char(uint8_t b) { return maps().to_char[b]; }

int char_to_byte(char32_t cp) {
  if (cp >= maps().to_byte.size()) return -1;
  return maps().to_byte[cp];
}

std::string bytes_to_text(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) unicode::append_utf8(byte_to_char(static_cast<uint8_t>(c)), &out);
  return out;
}

std::optional<std::string> text_to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    unicode::Utf8Char c = unicode::decode_utf8(text.substr(i));
    if (!c.valid) return std::nullopt;
    int b = char_to_byte(c.cp);
    if (b < 0) return std::nullopt;
    out.push_back(static_cast<char>(b));
    i += c.len;
  }
  return out;
}

}  // namespace pagoda::byte_level

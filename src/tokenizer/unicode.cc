#include "tokenizer/unicode.h"

#include <utf8proc.h>
#include <xxhash.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <utility>
#include <vector>

namespace pagoda::unicode {
namespace {

uint8_t flags_from_utf8proc(char32_t cp) {
  uint8_t f = 0;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      f = kLetter;
      break;
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
      f = kMark;
      break;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      f = kNumber;
      break;
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      f = kPunct;
      break;
    case UTF8PROC_CATEGORY_SM:
    case UTF8PROC_CATEGORY_SC:
    case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO:
      f = kSymbol;
      break;
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
      f = kSeparator | kSpace;
      break;
    default:  // Cn, Cc, Cf, Cs, Co
      f = kOther;
      break;
  }
  // White_Space = \p{Z} plus these controls.
  if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x85) f |= kSpace;
  return f;
}

// Two-stage table: kStage1[cp >> 8] selects a deduplicated 256-entry block of flags.
struct FlagTable {
  std::vector<uint16_t> stage1;  // 0x1100 entries
  std::vector<uint8_t> blocks;   // 256 * number of distinct blocks
  FlagTable() {
    stage1.resize(0x110000 >> 8);
    std::unordered_multimap<uint64_t, uint16_t> seen;  // block hash -> block index
    std::array<uint8_t, 256> block{};
    for (char32_t hi = 0; hi < (0x110000 >> 8); ++hi) {
      for (char32_t lo = 0; lo < 256; ++lo) block[lo] = flags_from_utf8proc((hi << 8) | lo);
      const uint64_t h = XXH3_64bits(block.data(), block.size());
      int found = -1;
      auto [b, e] = seen.equal_range(h);
      for (auto it = b; it != e && found < 0; ++it)
        if (std::memcmp(&blocks[static_cast<size_t>(it->second) << 8], block.data(), 256) == 0) found = it->second;
      if (found < 0) {
        found = static_cast<int>(blocks.size() >> 8);
        blocks.insert(blocks.end(), block.begin(), block.end());
        seen.emplace(h, static_cast<uint16_t>(found));
      }
      stage1[hi] = static_cast<uint16_t>(found);
    }
  }
  uint8_t get(char32_t cp) const {
    if (cp >= 0x110000) return 0;
    return blocks[(static_cast<size_t>(stage1[cp >> 8]) << 8) | (cp & 0xFF)];
  }
};

const FlagTable& flag_table() {
  static const FlagTable table;
  return table;
}

// Expected continuation-byte range after each lead byte (Unicode Table 3-7).
struct LeadInfo {
  uint8_t len;          // total sequence length, 0 for an invalid lead byte
  uint8_t lo, hi;       // range of the first continuation byte
};
inline LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

// ASCII classes, spelled out so the hot path needs no table lookup through a function-local
// static; unicode_test checks every entry against utf8proc.
namespace {
constexpr uint8_t ascii_flags(char32_t c) {
  if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')) return kLetter;
  if (c >= '0' && c <= '9') return kNumber;
  if (c == ' ') return kSeparator | kSpace;
  if (c >= 0x09 && c <= 0x0D) return kOther | kSpace;
  if (c < 0x20 || c == 0x7F) return kOther;
  // Symbols (Sm, Sc, Sk): $ + < = > ^ ` | ~ ; every other printable ASCII character is punctuation.
  if (c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' || c == '`' || c == '|' || c == '~')
    return kSymbol;
  return kPunct;
}
template <size_t... I>
constexpr std::array<uint8_t, 128> make_ascii_table(std::index_sequence<I...>) {
  return {ascii_flags(static_cast<char32_t>(I))...};
}
constexpr std::array<uint8_t, 128> kAsciiTable = make_ascii_table(std::make_index_sequence<128>{});
}  // namespace

constinit const std::array<uint8_t, 128> kAsciiFlags = kAsciiTable;

uint8_t codepoint_flags(char32_t cp) { return flag_table().get(cp); }

int codepoint_category(char32_t cp) {
  if (cp >= 0x110000) return UTF8PROC_CATEGORY_CN;
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

Utf8Char decode_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  const uint8_t b0 = p[0];
  if (b0 < 0x80) return {b0, 1, true, false};
  const LeadInfo li = lead_info(b0);
  if (li.len == 0) return {0xFFFD, 1, false, false};
  // First continuation byte has a lead-specific range, the others are 80..BF.
  char32_t cp = b0 & (0xFF >> (li.len + 1));
  for (uint32_t k = 1; k < li.len; ++k) {
    if (k >= n) return {0xFFFD, k, false, true};
    const uint8_t b = p[k];
    const uint8_t lo = k == 1 ? li.lo : 0x80;
    const uint8_t hi = k == 1 ? li.hi : 0xBF;
    if (b < lo || b > hi) return {0xFFFD, k, false, false};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, li.len, true, false};
}

Unit unit_at_slow(std::string_view s, size_t pos) {
  Utf8Char c = decode_utf8(s.substr(pos));
  if (!c.valid) return Unit{0xFFFD, 1, kOther};
  return Unit{c.cp, c.len, codepoint_flags(c.cp)};
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    Utf8Char c = decode_utf8(s.substr(i));
    if (!c.valid) return false;
    i += c.len;
  }
  return true;
}

size_t append_lossy_utf8(std::string_view in, bool final, std::string* out) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  size_t i = 0;
  size_t run_start = 0;  // start of a stretch of valid bytes not yet copied
  while (i < in.size()) {
    if (static_cast<uint8_t>(in[i]) < 0x80) {
      ++i;
      continue;
    }
    Utf8Char c = decode_utf8(in.substr(i));
    if (c.valid) {
      i += c.len;
      continue;
    }
    out->append(in.data() + run_start, i - run_start);
    if (c.truncated && !final) return i;  // wait for more bytes
    out->append(kReplacement, 3);
    i += c.len;
    run_start = i;
  }
  out->append(in.data() + run_start, i - run_start);
  return i;
}

namespace {
std::string utf8proc_transform(std::string_view s, int options) {
  // utf8proc rejects malformed input, so normalize each well-formed stretch separately.
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    while (j < s.size()) {
      Utf8Char c = decode_utf8(s.substr(j));
      if (!c.valid) break;
      j += c.len;
    }
    if (j > i) {
      utf8proc_uint8_t* result = nullptr;
      utf8proc_ssize_t len = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                          static_cast<utf8proc_ssize_t>(j - i), &result,
                                          static_cast<utf8proc_option_t>(options));
      if (len >= 0 && result) {
        out.append(reinterpret_cast<const char*>(result), static_cast<size_t>(len));
      } else {
        out.append(s.data() + i, j - i);
      }
      std::free(result);
    }
    if (j < s.size()) {
      out.push_back(s[j]);  // one malformed byte, kept as is
      ++j;
    }
    i = j;
  }
  return out;
}
}  // namespace

std::string normalize(std::string_view s, NormalForm form) {
  int opt = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNfc: opt |= UTF8PROC_COMPOSE; break;
    case NormalForm::kNfd: opt |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::kNfkc: opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::kNfkd: opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  return utf8proc_transform(s, opt);
}

std::string to_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    Utf8Char c = decode_utf8(s.substr(i));
    if (!c.valid) {
      out.push_back(s[i]);
      ++i;
      continue;
    }
    append_utf8(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c.cp))), &out);
    i += c.len;
  }
  return out;
}

}  // namespace pagoda::unicode

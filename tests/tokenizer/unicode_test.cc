// Unicode helpers: code point classes (utf8proc) cross-checked against ICU for every code point,
// UTF-8 decoding, and lossy repair against ICU's U+FFFD substitution (u_strFromUTF8WithSub,
// maximal-subpart rule) on random byte strings, whole and in chunks.
#include <gtest/gtest.h>
#include <unicode/uchar.h>
#include <unicode/ustring.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <random>
#include <set>

#include "test_paths.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace pagoda::unicode {
namespace {

TEST(Unicode, AsciiTableMatchesUtf8proc) {
  // codepoint_flags() builds its table from utf8proc; the ASCII fast path is spelled out.
  for (char32_t c = 0; c < 128; ++c) EXPECT_EQ(kAsciiFlags[c], codepoint_flags(c)) << static_cast<int>(c);
}

TEST(Unicode, ClassesMatchIcuForEveryCodepoint) {
  int mismatches = 0;
  for (UChar32 c = 0; c < 0x110000; ++c) {
    const uint32_t mask = U_GET_GC_MASK(c);
    const uint8_t f = codepoint_flags(static_cast<char32_t>(c));
    const bool ok = ((f & kLetter) != 0) == ((mask & U_GC_L_MASK) != 0) && ((f & kNumber) != 0) == ((mask & U_GC_N_MASK) != 0) &&
                    ((f & kPunct) != 0) == ((mask & U_GC_P_MASK) != 0) && ((f & kSymbol) != 0) == ((mask & U_GC_S_MASK) != 0) &&
                    ((f & kMark) != 0) == ((mask & U_GC_M_MASK) != 0) &&
                    ((f & kSeparator) != 0) == ((mask & U_GC_Z_MASK) != 0) &&
                    ((f & kSpace) != 0) == static_cast<bool>(u_isUWhiteSpace(c));
    if (!ok && ++mismatches <= 5) ADD_FAILURE() << "U+" << std::hex << c;
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Unicode, DecodeWellFormedAndMalformed) {
  for (char32_t cp : {U'\0', U'a', U'\u00e9', U'\u07ff', U'\u0800', U'\uffff', U'\U00010000', U'\U0010ffff'}) {
    std::string s;
    append_utf8(cp, &s);
    Utf8Char c = decode_utf8(s);
    EXPECT_TRUE(c.valid);
    EXPECT_EQ(c.cp, cp);
    EXPECT_EQ(c.len, s.size());
  }
  // Surrogates, overlongs, out-of-range and stray continuation bytes are malformed.
  for (std::string bad : {"\xED\xA0\x80", "\xC0\xAF", "\xE0\x80\xAF", "\xF4\x90\x80\x80", "\x80", "\xFF", "\xF5\x80"}) {
    EXPECT_FALSE(decode_utf8(bad).valid) << bad.size();
    EXPECT_FALSE(is_valid_utf8(bad));
  }
  Utf8Char t = decode_utf8(std::string_view("\xF0\x9F\x98", 3));
  EXPECT_FALSE(t.valid);
  EXPECT_TRUE(t.truncated);
  EXPECT_EQ(t.len, 3u);
}

std::string icu_lossy(const std::string& bytes) {
  UErrorCode st = U_ZERO_ERROR;
  int32_t len = 0, subs = 0;
  std::vector<UChar> buf(bytes.size() + 1);
  u_strFromUTF8WithSub(buf.data(), static_cast<int32_t>(buf.size()), &len, bytes.data(), static_cast<int32_t>(bytes.size()),
                       0xFFFD, &subs, &st);
  EXPECT_TRUE(U_SUCCESS(st));
  std::string out;
  icu::UnicodeString(buf.data(), len).toUTF8String(out);
  return out;
}

TEST(Unicode, LossyRepairMatchesIcuWholeAndChunked) {
  std::mt19937 rng(7);
  const std::string pool[] = {"a", " ", "\xC3", "\xA9", "\xE2\x82", "\xAC", "\xF0\x9F", "\x98\x80", "\xED\xA0\x80", "\xC0", "\xFF", "\x80", "\xF4\x90"};
  for (int iter = 0; iter < 20000; ++iter) {
    std::string s;
    const int parts = static_cast<int>(rng() % 12);
    for (int k = 0; k < parts; ++k) s += pool[rng() % std::size(pool)];
    const std::string whole = to_valid_utf8(s);
    ASSERT_EQ(whole, icu_lossy(s)) << iter;
    ASSERT_TRUE(is_valid_utf8(whole));
    // Chunked, holding back truncated sequences between chunks (as the streaming detokenizer).
    std::string pending, chunked;
    size_t pos = 0;
    while (pos < s.size()) {
      const size_t take = 1 + rng() % 3;
      pending += s.substr(pos, take);
      pos += take;
      std::string piece;
      pending.erase(0, append_lossy_utf8(pending, false, &piece));
      ASSERT_TRUE(is_valid_utf8(piece));
      chunked += piece;
    }
    append_lossy_utf8(pending, true, &chunked);
    ASSERT_EQ(chunked, whole) << iter;
  }
}

TEST(Unicode, ByteLevelMapIsGpt2s) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string text = byte_level::bytes_to_text(all);
  EXPECT_EQ(byte_level::text_to_bytes(text), all);
  // GPT-2's first 256 tokens are exactly the 256 byte characters.
  auto tok = Tokenizer::load(test::shared_dir() + "/tokenizers/vocab-vectors/ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(tok.ok());
  std::set<std::string> vocab_bytes, mapped;
  for (int32_t id = 0; id < 256; ++id) vocab_bytes.insert(std::string((*tok)->token_text(id)));
  for (int b = 0; b < 256; ++b) mapped.insert(byte_level::bytes_to_text(std::string(1, static_cast<char>(b))));
  EXPECT_EQ(vocab_bytes, mapped);
  for (int32_t id = 0; id < 256; ++id) EXPECT_EQ((*tok)->token_bytes(id).size(), 1u);
}

std::string icu_normalize(const std::string& s, NormalForm form) {
  UErrorCode st = U_ZERO_ERROR;
  const icu::Normalizer2* n = form == NormalForm::kNfc    ? icu::Normalizer2::getNFCInstance(st)
                              : form == NormalForm::kNfd  ? icu::Normalizer2::getNFDInstance(st)
                              : form == NormalForm::kNfkc ? icu::Normalizer2::getNFKCInstance(st)
                                                          : icu::Normalizer2::getNFKDInstance(st);
  icu::UnicodeString out = n->normalize(icu::UnicodeString::fromUTF8(s), st);
  EXPECT_TRUE(U_SUCCESS(st));
  std::string r;
  out.toUTF8String(r);
  return r;
}

TEST(Unicode, NormalizationMatchesIcu) {
  std::mt19937 rng(11);
  const std::u32string pool = U"aeiouAEIOU \u0300\u0301\u0308\u0327\u00e9\u00c5\u212b\u1e9b\u0323\ufb01\u2460\uff21\u3300"
                              U"\u1100\u1161\u11a8\uac00\u0958\u2126\u00bd\u00b2\u017f\u1f7d";
  for (int iter = 0; iter < 5000; ++iter) {
    std::string s;
    const int n = static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) append_utf8(pool[rng() % pool.size()], &s);
    for (NormalForm f : {NormalForm::kNfc, NormalForm::kNfd, NormalForm::kNfkc, NormalForm::kNfkd})
      ASSERT_EQ(normalize(s, f), icu_normalize(s, f)) << iter;
    std::string lower;
    for (size_t i = 0; i < s.size();) {
      Utf8Char c = decode_utf8(std::string_view(s).substr(i));
      append_utf8(static_cast<char32_t>(u_tolower(static_cast<UChar32>(c.cp))), &lower);
      i += c.len;
    }
    ASSERT_EQ(to_lower(s), lower) << iter;
  }
  // A malformed byte is kept and does not stop normalization around it.
  EXPECT_EQ(normalize(std::string("e\xCC\x81\xFF" "e\xCC\x81"), NormalForm::kNfc),
            icu_normalize("e\xCC\x81", NormalForm::kNfc) + "\xFF" + icu_normalize("e\xCC\x81", NormalForm::kNfc));
}

}  // namespace
}  // namespace pagoda::unicode

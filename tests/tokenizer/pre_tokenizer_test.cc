// Pre-tokenizers and regex matchers.
//  * testdata/tokenizer/pre_tokenizer_cases.json: pieces the tokenizers library produced for small
//    inputs under every Split behaviour (with and without invert), Digits, Punctuation,
//    WhitespaceSplit, Metaspace and ByteLevel.
//  * The hand-written matchers (GPT-2, Llama 3, Qwen2) and the class-sequence engine against ICU's
//    regex engine, an independent implementation, on random strings mixing every character class
//    that matters (letters of many scripts, marks, digits of several kinds, White_Space incl.
//    U+000B, U+0085, U+00A0, U+2028, contractions incl. U+017F, emoji, malformed bytes excluded).
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"

namespace pagoda::test {
namespace {

std::vector<std::string> run(const PreTokenizer& p, std::string_view text) {
  std::vector<std::string> out;
  p.run(text, true, [&](std::string_view piece, bool) { out.emplace_back(piece); });
  return out;
}

std::unique_ptr<PreTokenizerStep> step_for(const nlohmann::json& c) {
  const std::string kind = c["kind"];
  const auto& p = c["params"];
  if (kind == "Split") {
    std::unique_ptr<Matcher> m;
    if (p["regex"].get<bool>()) {
      m = std::move(make_regex_matcher(p["pattern"].get<std::string>())).value();
    } else {
      m = make_literal_matcher(p["pattern"].get<std::string>());
    }
    return make_split_step(std::move(m), parse_split_behavior(p["behavior"].get<std::string>()).value(), p["invert"].get<bool>());
  }
  if (kind == "Digits") return make_digits_step(p["individual_digits"].get<bool>());
  if (kind == "Punctuation") return make_punctuation_step(parse_split_behavior(p["behavior"].get<std::string>()).value());
  if (kind == "WhitespaceSplit") return make_whitespace_split_step();
  if (kind == "Metaspace")
    return make_metaspace_step("\xE2\x96\x81", parse_prepend_scheme(p["prepend_scheme"].get<std::string>()).value(),
                               p["split"].get<bool>());
  if (kind == "ByteLevel") return make_byte_level_step(p["add_prefix_space"].get<bool>(), true);
  return nullptr;
}

TEST(PreTokenizer, MatchesTokenizersLibraryCases) {
  auto cases = nlohmann::json::parse(read_file_or_empty(hf_testdata() + "/pre_tokenizer_cases.json"));
  ASSERT_GT(cases.size(), 500u);
  for (const auto& c : cases) {
    auto step = step_for(c);
    ASSERT_TRUE(step) << c.dump();
    PreTokenizer p;
    p.add(std::move(step));
    std::vector<std::string> got = run(p, c["input"].get<std::string>());
    if (c["kind"] == "ByteLevel") {
      for (std::string& piece : got) piece = byte_level::bytes_to_text(piece);
    }
    EXPECT_EQ(got, c["pieces"].get<std::vector<std::string>>()) << c["kind"] << " " << c["params"].dump() << " on "
                                                                 << show(c["input"].get<std::string>());
  }
}

TEST(PreTokenizer, EngineSelection) {
  EXPECT_STREQ(make_regex_matcher(kGpt2Pattern).value()->engine(), "gpt2");
  EXPECT_STREQ(make_regex_matcher(kGpt2PatternNoTail).value()->engine(), "gpt2");
  EXPECT_STREQ(make_regex_matcher(kLlama3Pattern).value()->engine(), "llama3");
  EXPECT_STREQ(make_regex_matcher(kQwen2Pattern).value()->engine(), "qwen2");
  for (const char* simple : {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", R"(\p{N}{1,3})", "[0-9][0-9][0-9]", R"(\s+$)",
                             R"([\p{P}\$\+<=>\^~\|`]+)", "[一-龥ࠀ-一가-퟿]+", R"(\S+)", "a{2,}b?"})
    EXPECT_STREQ(make_regex_matcher(simple).value()->engine(), "simple") << simple;
  for (const char* icu : {R"(\w+|[^\w\s]+)", "(ab)+", "a|b", R"(\d+)", "x+?", R"([\p{Lu}\p{Ll}]+)"})
    EXPECT_STREQ(make_regex_matcher(icu).value()->engine(), "icu") << icu;
  EXPECT_FALSE(make_regex_matcher("(unbalanced").ok());
  EXPECT_FALSE(make_regex_matcher("[z-a]").ok());
}

// Random strings over a mixed alphabet; each unit is one code point (valid UTF-8 only: ICU cannot
// say where a match would end inside malformed bytes).
std::string random_text(std::mt19937& rng, size_t max_units) {
  static const std::vector<std::u32string> groups = {
      U"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
      U"0123456789",
      U"          ",
      U"\t\n\r\v\f",
      U"\u0085\u00a0\u1680\u2000\u2007\u200a\u2028\u2029\u202f\u205f\u3000",
      U"'''''sStTmMdDlLrRvVeE\u017f\u212a",
      U"!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~",
      U"\u00a1\u00bf\u00ab\u00bb\u2014\u2013\u2026\u00b7\u2018\u2019\u201c\u201d\u20ac\u00a3\u00b1\u00a9",
      U"\u00e0\u00e9\u00ee\u00f5\u00fc\u00df\u0133\u0153\u01c5\u01c8\u1e9e",
      U"\u0300\u0301\u0308\u0327\u064b\u093f\u20dd",
      U"\u0430\u0431\u0432\u0433\u0414\u0416\u03b1\u03b2\u03a9\u1f7d\u1fbe\u2126",
      U"\u4e00\u4e2d\u6587\u9fa5\u9fff\u3042\u30a2\u30fc\uac00\ud7a3\u0e01\u0915\u0627\u05d0",
      U"\u0660\u0663\uff10\uff19\u00b2\u00bd\u2160\u216b\u3007",
      U"\U0001F600\U0001F999\U0001F680\U0001F44D\U0001F3FD\u2764\ufe0f\u200d\u2705",
      U"\u200b\u200c\u200e\ufeff\u00ad\u0378\U000E0001\ue000",
  };
  std::uniform_int_distribution<size_t> len_dist(1, max_units);
  std::string s;
  const size_t n = len_dist(rng);
  for (size_t i = 0; i < n; ++i) {
    const std::u32string& g = groups[rng() % groups.size()];
    unicode::append_utf8(g[rng() % g.size()], &s);
  }
  return s;
}

std::vector<std::pair<size_t, size_t>> matches(const Matcher& m, std::string_view text) {
  std::vector<std::pair<size_t, size_t>> out;
  m.find_all(text, [&](size_t b, size_t e) { out.emplace_back(b, e); });
  return out;
}

TEST(PreTokenizer, MatchersAgreeWithIcu) {
  const std::vector<std::string> patterns = {
      kGpt2Pattern, kGpt2PatternNoTail, kLlama3Pattern, kQwen2Pattern, R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)",
      R"(\p{N})", R"(\p{N}+)", R"(\p{N}{1,3})", "[0-9][0-9][0-9]", R"(\s+$)", R"(\s?[!-/:-~！-／：-～‘-‟　-。]+)",
      "[一-龥ࠀ-一가-퟿]+", R"([\p{P}\$\+<=>\^~\|`]+)", R"( ?[^\s\p{L}\p{N}]+)", R"(\S+\s?)", R"([^\r\n\p{L}\p{N}]?\p{L}+)"};
  std::mt19937 rng(1234);
  std::vector<std::string> texts;
  for (int i = 0; i < 3000; ++i) texts.push_back(random_text(rng, i % 10 == 0 ? 200 : 24));
  for (const std::string& p : patterns) {
    auto fast = make_regex_matcher(p);
    auto icu = make_icu_matcher(p);
    ASSERT_TRUE(fast.ok() && icu.ok()) << p;
    ASSERT_STRNE((*fast)->engine(), "icu") << p;
    int failures = 0;
    for (const std::string& t : texts) {
      const auto a = matches(**fast, t), b = matches(**icu, t);
      if (a != b && ++failures <= 3) ADD_FAILURE() << "pattern " << p << " on " << show(t);
    }
    EXPECT_EQ(failures, 0) << p;
  }
}

TEST(PreTokenizer, LongInputsAndMalformedBytes) {
  // Long runs exercise the loops; malformed bytes are single "other" units and must not crash
  // or lose bytes: the pieces of Isolated splits always tile the input.
  std::mt19937 rng(99);
  for (const char* p : {kGpt2Pattern, kLlama3Pattern, kQwen2Pattern, R"(\s?\p{L}+)", R"(\s+$)"}) {
    PreTokenizer pt;
    pt.add(make_split_step(std::move(make_regex_matcher(p)).value(), SplitBehavior::kIsolated, false));
    for (int i = 0; i < 300; ++i) {
      std::string t;
      const size_t n = rng() % 300;
      for (size_t k = 0; k < n; ++k) t.push_back(static_cast<char>(rng() % 4 == 0 ? rng() % 256 : " a1\n\xC3\xA9."[rng() % 8]));
      std::string joined;
      for (const auto& piece : run(pt, t)) joined += piece;
      EXPECT_EQ(joined, t) << p;
    }
    const std::string spaces(100000, ' ');
    std::string joined;
    for (const auto& piece : run(pt, spaces + "x" + spaces)) joined += piece;
    EXPECT_EQ(joined, spaces + "x" + spaces);
  }
}

}  // namespace
}  // namespace pagoda::test

// The grammar engine: matching of regex / GBNF / JSON Schema grammars on strings, integer ranges
// exhaustively, token masks against a brute-force reference (every token's bytes tried) on random
// states, the mask cache, rollback, and the errors for grammars we reject.
#include <gtest/gtest.h>

#include <random>

#include "common/utf8.h"
#include "grammar/constraint.h"
#include "grammar/gbnf_parser.h"
#include "grammar/json_schema_compiler.h"
#include "grammar/matcher.h"
#include "unit/grammar_brute_force_mask.h"
#include "grammar/regex_compiler.h"

namespace pagoda::grammar {
namespace {

bool matches(const Grammar& g, std::string_view s) {
  Pda p(g);
  StackSet st = p.initial();
  return p.advance_bytes(&st, s) && p.accepting(st);
}

Grammar regex(std::string_view re) {
  auto g = compile_regex(re);
  EXPECT_TRUE(g.ok()) << re << ": " << g.status().to_string();
  return g.ok() ? std::move(g).value() : Grammar{};
}

Grammar schema(std::string_view text) {
  auto g = compile_json_schema_text(text);
  EXPECT_TRUE(g.ok()) << text << ": " << g.status().to_string();
  return g.ok() ? std::move(g).value() : Grammar{};
}

TEST(Regex, MatchesWholeText) {
  Grammar g = regex("a[bc]+d?");
  EXPECT_TRUE(matches(g, "ab"));
  EXPECT_TRUE(matches(g, "acbcd"));
  EXPECT_FALSE(matches(g, "a"));
  EXPECT_FALSE(matches(g, "abdd"));
  EXPECT_FALSE(matches(g, "xab"));
}

TEST(Regex, StackedQuantifiersAreOneQuantifier) {
  EXPECT_TRUE(matches(regex("a(b+)+c"), "abbbc"));
  EXPECT_FALSE(matches(regex("a(b+)+c"), "ac"));
  EXPECT_TRUE(matches(regex("ab+?c"), "abc"));  // lazy '+', not '+' then '?'
  EXPECT_FALSE(matches(regex("ab+?c"), "ac"));
  EXPECT_TRUE(matches(regex("ab?+c"), "ac"));
  EXPECT_TRUE(matches(regex("ab?+c"), "abbc"));
  EXPECT_TRUE(matches(regex("ab??c"), "ac"));  // lazy '?'
  EXPECT_FALSE(matches(regex("ab??c"), "abbc"));
  EXPECT_TRUE(matches(regex("ab{2}+c"), "abbbbc"));  // {2} then +: (bb)+, not merged
  EXPECT_FALSE(matches(regex("ab{2}+c"), "abbbc"));
  // The fuzzer's case: a hundred stacked '+' compile to one repetition and match in linear time.
  const std::string deep = "x" + std::string(100, '+') + "y";
  Grammar g = regex(deep);
  EXPECT_TRUE(matches(g, "xxxxy"));
  EXPECT_FALSE(matches(g, "y"));
}

TEST(Regex, ClassesEscapesCountsAlternation) {
  Grammar g = regex("^(\\d{3}-\\d{4}|[A-Z]\\w{0,2})$");
  EXPECT_TRUE(matches(g, "555-1234"));
  EXPECT_TRUE(matches(g, "Q"));
  EXPECT_TRUE(matches(g, "Ab_"));
  EXPECT_FALSE(matches(g, "Ab_c"));
  EXPECT_FALSE(matches(g, "55-1234"));
  Grammar neg = regex("[^a-c]{2,}");
  EXPECT_TRUE(matches(neg, "xyz"));
  EXPECT_TRUE(matches(neg, "\xC3\xA9\xE2\x82\xAC"));  // é€: multi-byte characters are characters
  EXPECT_FALSE(matches(neg, "\xC3\xA9"));            // one character only
  EXPECT_FALSE(matches(neg, "xa"));
  Grammar dot = regex("a.c");
  EXPECT_TRUE(matches(dot, "a\xF0\x9F\x98\x80" "c"));  // U+1F600
  EXPECT_FALSE(matches(dot, "a\nc"));
  EXPECT_FALSE(matches(dot, "a\xC3" "c"));  // a lone lead byte is not a character
  Grammar uni = regex("[\\u00e0-\\u00ff]+");
  EXPECT_TRUE(matches(uni, "\xC3\xA0\xC3\xBF"));
  EXPECT_FALSE(matches(uni, "\xC3\x9F"));
}

TEST(Regex, RejectsWhatItCannotMatchExactly) {
  for (const char* bad : {"(a", "a)", "[a", "a{2,1}", "(?=a)", "\\1", "\\bword", "*a", "a^b"}) {
    auto g = compile_regex(bad);
    EXPECT_FALSE(g.ok()) << bad;
  }
}

TEST(Utf8Classes, EveryCodepointOfARangeAndNoOther) {
  // [\u0370-\u2FFF] lowered to byte sequences: check a sweep of code points either side.
  Grammar g = regex("[\\u0370-\\u2fff]");
  for (uint32_t cp = 0x300; cp < 0x3100; cp += 7) {
    std::string s;
    append_utf8(static_cast<char32_t>(cp), &s);
    EXPECT_EQ(matches(g, s), cp >= 0x370 && cp <= 0x2FFF) << std::hex << cp;
  }
}

TEST(Gbnf, ParsesLlamaCppStyleGrammars) {
  auto g = compile_gbnf(R"G(
    # arithmetic
    root ::= expr
    expr ::= term ("+" term)*
    term ::= [0-9]+ | "(" expr ")"
  )G");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_TRUE(matches(*g, "1+(2+33)"));
  EXPECT_TRUE(matches(*g, "7"));
  EXPECT_FALSE(matches(*g, "1+"));
  EXPECT_FALSE(matches(*g, "(1"));
  auto rep = compile_gbnf("root ::= \"a\"{2,3} [^\\n]? \"\\x41\"");
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  EXPECT_TRUE(matches(*rep, "aaA"));
  EXPECT_TRUE(matches(*rep, "aaa-A"));
  EXPECT_FALSE(matches(*rep, "aA"));
  EXPECT_FALSE(matches(*rep, "aaaaaA"));
}

TEST(Gbnf, ErrorsNameTheProblem) {
  struct Case {
    const char* text;
    const char* says;
  } cases[] = {
      {"", "empty"},
      {"root ::= foo", "'foo' is used but not defined"},
      {"start ::= \"a\"", "no 'root' rule"},
      {"root ::= root \"a\"", "left-recursive"},
      {"root ::= x \"a\"\nx ::= \"b\"?\nx ::= \"c\"", "defined twice"},
      {"root ::= \"abc", "unterminated"},
      {"root ::= [b-a]", "out of order"},
      {"root ::= (\"a\"?)*", "left-recursive"},
  };
  for (const auto& c : cases) {
    auto g = compile_gbnf(c.text);
    ASSERT_FALSE(g.ok()) << c.text;
    EXPECT_NE(g.status().message().find(c.says), std::string::npos) << c.text << " -> " << g.status().message();
  }
}

TEST(JsonSchema, ObjectsWithRequiredAndOptionalProperties) {
  Grammar g = schema(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},"required":["b"]})");
  EXPECT_TRUE(matches(g, R"({"b":"x"})"));
  EXPECT_TRUE(matches(g, R"({"a":-12, "b":"x\"y","c":true})"));
  EXPECT_TRUE(matches(g, R"({"b":"","c":false})"));
  EXPECT_FALSE(matches(g, R"({"a":1})"));                    // b missing
  EXPECT_FALSE(matches(g, R"({"b":"x","d":1})"));            // additional (absent = false)
  EXPECT_FALSE(matches(g, R"({"b":"x",})"));
  EXPECT_FALSE(matches(g, R"({"a":01,"b":"x"})"));           // leading zero
  EXPECT_FALSE(matches(g, "{\"b\":\"a\nb\"}"));              // raw control character in a string
}

TEST(JsonSchema, AdditionalPropertiesArraysEnumsConstRefs) {
  Grammar ap = schema(R"({"type":"object","additionalProperties":{"type":"number"}})");
  EXPECT_TRUE(matches(ap, R"({})"));
  EXPECT_TRUE(matches(ap, R"({"x":1.5e+3, "y":0})"));
  EXPECT_TRUE(matches(ap, R"({"x":-0.25E-99})"));
  EXPECT_FALSE(matches(ap, R"({"x":-0.1e+800})"));  // beyond a double's range: clients read -inf or fail
  EXPECT_FALSE(matches(ap, R"({"x":"s"})"));
  Grammar arr = schema(R"({"type":"array","items":{"enum":["red",2,null]},"minItems":1,"maxItems":3})");
  EXPECT_TRUE(matches(arr, R"(["red"])"));
  EXPECT_TRUE(matches(arr, R"([2, null,"red"])"));
  EXPECT_FALSE(matches(arr, R"([])"));
  EXPECT_FALSE(matches(arr, R"([2,2,2,2])"));
  EXPECT_FALSE(matches(arr, R"(["blue"])"));
  Grammar tuple = schema(R"({"type":"array","prefixItems":[{"const":"k"},{"type":"integer"}]})");
  EXPECT_TRUE(matches(tuple, R"(["k",5])"));
  EXPECT_FALSE(matches(tuple, R"(["k"])"));
  EXPECT_FALSE(matches(tuple, R"(["k",5,6])"));
  Grammar tree = schema(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},"$ref":"#/$defs/node"})");
  EXPECT_TRUE(matches(tree, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"));
  EXPECT_FALSE(matches(tree, R"({"v":1,"kids":[{}]})"));
  Grammar any = schema(R"({"anyOf":[{"type":"null"},{"type":"string","maxLength":2}]})");
  EXPECT_TRUE(matches(any, "null"));
  EXPECT_TRUE(matches(any, R"("\u00e9x")"));
  EXPECT_FALSE(matches(any, R"("abc")"));
}

TEST(JsonSchema, StringPatternsAreMatchedOnTheDecodedText) {
  Grammar g = schema(R"({"type":"string","pattern":"^a\"[0-9]+\\\\$"})");  // a"<digits>\ decoded
  EXPECT_TRUE(matches(g, R"("a\"12\\")"));
  EXPECT_FALSE(matches(g, R"("a"12\")"));
  Grammar date = schema(R"({"type":"string","format":"date"})");
  EXPECT_TRUE(matches(date, R"("2024-02-28")"));
  EXPECT_FALSE(matches(date, R"("2024-13-01")"));
}

TEST(JsonSchema, IntegerRangesExactly) {
  std::mt19937 rng(7);
  const std::pair<int64_t, int64_t> fixed[] = {{0, 0}, {-5, 5}, {7, 123}, {-1000, -37}, {99, 1001}, {0, 9}, {10, 10}};
  std::vector<std::pair<int64_t, int64_t>> ranges(std::begin(fixed), std::end(fixed));
  for (int i = 0; i < 20; ++i) {
    int64_t a = static_cast<int64_t>(rng() % 4000) - 2000, b = a + static_cast<int64_t>(rng() % 3000);
    ranges.push_back({a, b});
  }
  for (auto [lo, hi] : ranges) {
    Grammar g = schema(fmt::format(R"({{"type":"integer","minimum":{},"maximum":{}}})", lo, hi));
    for (int64_t v = lo - 60; v <= hi + 60; v += (hi - lo > 500 ? 7 : 1))
      ASSERT_EQ(matches(g, std::to_string(v)), v >= lo && v <= hi) << v << " in [" << lo << "," << hi << "]";
    EXPECT_FALSE(matches(g, "-0"));
    EXPECT_FALSE(matches(g, "0" + std::to_string(std::max<int64_t>(lo, 1))));
  }
  // Bounds at the 19-digit edge (the fuzzer's find: 10^18 * 10 overflowed): clamped to +-10^18.
  Grammar big = schema(R"({"type":"integer","minimum":-9223372036854775808,"maximum":9223372036854775807})");
  EXPECT_TRUE(matches(big, "1000000000000000000"));
  EXPECT_TRUE(matches(big, "-999999999999999999"));
  EXPECT_TRUE(matches(big, "0"));
  EXPECT_FALSE(matches(big, "10000000000000000000"));
  Grammar x = schema(R"({"type":"number","exclusiveMinimum":0.5,"exclusiveMaximum":3})");
  EXPECT_FALSE(matches(x, "0"));
  EXPECT_TRUE(matches(x, "1"));
  EXPECT_TRUE(matches(x, "2"));
  EXPECT_FALSE(matches(x, "3"));
}

TEST(JsonSchema, UnsupportedKeywordsAndBadSchemasAreErrors) {
  for (const char* s : {R"({"type":"integer","multipleOf":3})", R"({"type":"array","uniqueItems":true})", R"({"not":{}})",
                        R"({"type":"strin"})", R"({"$ref":"#/$defs/missing"})", R"({"$ref":"http://x"})", R"(false)",
                        R"({"type":"integer","minimum":5,"maximum":4})", R"({"enum":[]})", R"([1)", R"({"type":"string","maxLength":1000000})"}) {
    auto g = compile_json_schema_text(s);
    EXPECT_FALSE(g.ok()) << s;
  }
}

TEST(JsonObject, AnyObject) {
  auto g = json_object_grammar();
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(matches(*g, R"({"a":[1,{"b":null}],"c":"d"})"));
  EXPECT_TRUE(matches(*g, "{}"));
  EXPECT_FALSE(matches(*g, "[]"));
  EXPECT_FALSE(matches(*g, R"({"a":})"));
}

// A vocabulary with every single byte, frequent JSON pieces, multi-byte characters and random
// byte strings; a few ids are special (empty bytes) and two are stop ids.
std::shared_ptr<const TokenVocabulary> test_vocab() {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
  for (const char* s : {"{\"", "\":", "\",", "\"}", "true", "false", "null", "12", "00", "-1", ", \"", "\"a", "ab", "abc",
                        "\\n", "\\\"", "\xC3\xA9", "\xE2\x82\xAC", "}}", "]}", "[{\"", "\": \"", "e+", "1.5"})
    v.push_back(s);
  std::mt19937 rng(3);
  const std::string alphabet = "{}[]\":,. abcxyz0123456789-+eE\\ntu";
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    const int n = 1 + static_cast<int>(rng() % 6);
    for (int k = 0; k < n; ++k) s += alphabet[rng() % alphabet.size()];
    v.push_back(s);
  }
  v.push_back("");  // special
  v.push_back("");  // stop
  v.push_back("");  // stop
  const int32_t n = static_cast<int32_t>(v.size());
  return std::make_shared<TokenVocabulary>(std::move(v), std::vector<int32_t>{n - 2, n - 1});
}

// Random walks through the grammar by tokens; at each state the trie mask equals brute force.
void check_masks(const Grammar& grammar, int walks, int steps, uint32_t seed) {
  auto vocab = test_vocab();
  auto g = std::make_shared<const CompiledGrammar>(grammar, vocab);
  std::mt19937 rng(seed);
  std::vector<uint32_t> mask(vocab->mask_words());
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(g);
    for (int s = 0; s < steps && !m.is_terminated(); ++s) {
      m.fill_mask(mask);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < vocab->size(); ++t)
        if ((mask[t >> 5] >> (t & 31)) & 1) allowed.push_back(t);
      ASSERT_FALSE(allowed.empty());
      for (int32_t t = 0; t < vocab->size(); t += 1 + static_cast<int32_t>(rng() % 5))
        ASSERT_EQ(m.accepts_token(t), ((mask[t >> 5] >> (t & 31)) & 1) != 0) << "token " << t << " step " << s;
      const int32_t pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept_token(pick));
    }
  }
}

TEST(TokenMask, TrieWalkEqualsBruteForceOnRandomStates) {
  const char* schemas[] = {
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":3}},"required":["name","age"]})",
      R"({"type":"object"})",
      R"({"anyOf":[{"type":"number"},{"type":"array","items":{"type":"boolean"}}]})",
  };
  auto vocab = test_vocab();
  std::mt19937 rng(11);
  std::vector<uint32_t> mask(vocab->mask_words());
  int states = 0;
  for (const char* text : schemas) {
    auto g = std::make_shared<const CompiledGrammar>(schema(text), vocab);
    for (int w = 0; w < 8; ++w) {
      StackSet st = g->initial();
      for (int s = 0; s < 30 && !st.empty(); ++s) {
        g->compute_mask(st, mask);
        ASSERT_EQ(mask, brute_force_mask(*g, st)) << text << " step " << s;
        ++states;
        // Next: a random allowed token that is not a stop id.
        std::vector<int32_t> allowed;
        for (int32_t t = 0; t < vocab->size(); ++t)
          if (((mask[t >> 5] >> (t & 31)) & 1) && !vocab->is_stop(t)) allowed.push_back(t);
        if (allowed.empty()) break;
        ASSERT_TRUE(g->pda().advance_bytes(&st, vocab->bytes(allowed[rng() % allowed.size()])));
      }
    }
  }
  EXPECT_GT(states, 200);
}

TEST(TokenMask, MatcherAcceptsExactlyTheMaskAndStopsOnlyWhenAccepting) {
  check_masks(schema(R"({"type":"object","properties":{"k":{"enum":["x","yy"]},"n":{"type":"number"}},"required":["k"]})"), 10, 30, 5);
  check_masks(regex("(ab|c)+[0-9]{2}"), 10, 20, 6);
}

TEST(TokenMask, CacheHitsGiveTheSameMask) {
  auto vocab = test_vocab();
  auto g = std::make_shared<const CompiledGrammar>(schema(R"({"type":"array","items":{"type":"string"}})"), vocab);
  std::vector<uint32_t> a(vocab->mask_words()), b(vocab->mask_words());
  GrammarMatcher m(g);
  ASSERT_TRUE(m.accept_bytes("[\"ab"));
  m.fill_mask(a);
  ASSERT_TRUE(m.accept_bytes("c"));  // same state: inside a string
  m.fill_mask(b);
  EXPECT_EQ(a, b);
  EXPECT_GE(g->cache_stats().hits, 1);
  StackSet st = g->initial();
  ASSERT_TRUE(g->pda().advance_bytes(&st, "[\"abc"));
  EXPECT_EQ(b, brute_force_mask(*g, st));
}

TEST(Matcher, StopTokensRollbackAndTermination) {
  auto vocab = test_vocab();
  const int32_t stop = vocab->size() - 1, special = vocab->size() - 3;
  auto g = std::make_shared<const CompiledGrammar>(regex("ab"), vocab);
  GrammarMatcher m(g);
  EXPECT_FALSE(m.accepts_token(stop));
  EXPECT_FALSE(m.accepts_token(special));
  ASSERT_TRUE(m.accept_token('a'));
  EXPECT_FALSE(m.accept_token('a'));
  ASSERT_TRUE(m.accept_token('b'));
  EXPECT_TRUE(m.is_accepting());
  EXPECT_TRUE(m.is_terminated());
  std::vector<uint32_t> mask(vocab->mask_words());
  m.fill_mask(mask);
  for (int32_t t = 0; t < vocab->size(); ++t) EXPECT_EQ((mask[t >> 5] >> (t & 31)) & 1, vocab->is_stop(t) ? 1u : 0u) << t;
  m.rollback(1);
  EXPECT_FALSE(m.is_accepting());
  EXPECT_TRUE(m.accepts_token('b'));
  ASSERT_TRUE(m.accept_token('b'));
  ASSERT_TRUE(m.accept_token(stop));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.accepts_token(stop));
}

TEST(ConstraintCache, CompilesOnceAndReportsErrors) {
  ConstraintCache cache(test_vocab(), 2);
  ConstraintSource s{ConstraintKind::kJsonSchema, R"({"type":"integer"})", {}, nullptr};
  auto a = cache.get(s);
  auto b = cache.get(s);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(cache.hits(), 1);
  auto bad = cache.get({ConstraintKind::kRegex, "(", {}, nullptr});
  EXPECT_FALSE(bad.ok());
  auto choice = cache.get({ConstraintKind::kChoice, "", {"yes", "no"}, nullptr});
  ASSERT_TRUE(choice.ok());
  auto c = (*choice)->start();
  EXPECT_TRUE(c->advance('n'));
  EXPECT_FALSE(c->accepts('y'));
  EXPECT_TRUE(c->advance('o'));
  EXPECT_TRUE(c->finished());
}

}  // namespace
}  // namespace pagoda::grammar

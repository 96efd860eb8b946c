// The grammar IR of constrained decoding: a byte-level context-free grammar.
//
// Every front end (JSON Schema, json_object, regular expressions, choice lists, GBNF) builds an
// Expr tree per rule and hands it to GrammarBuilder, which lowers it to a Grammar: rules whose
// alternatives are sequences of byte sets and rule references, stored flat. Text is matched as
// UTF-8 bytes: a character class over code points lowers to alternatives of byte-set sequences
// (one per UTF-8 length), so the matcher (grammar/matcher.h) only ever compares single bytes.
//
// Contracts: a built Grammar is immutable and has no left recursion (a rule that can reach itself
// without consuming a byte is rejected at build time), so expanding a matcher state terminates.
// Sizes are bounded (kMaxGrammarElements) so that a hostile schema cannot exhaust memory.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace pagoda::grammar {

constexpr size_t kMaxGrammarElements = 1u << 21;

// A set of bytes (256 bits).
struct ByteSet {
  uint64_t words[4] = {0, 0, 0, 0};
  bool test(uint8_t b) const { return (words[b >> 6] >> (b & 63)) & 1; }
  void set(uint8_t b) { words[b >> 6] |= uint64_t{1} << (b & 63); }
  void set_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) set(static_cast<uint8_t>(b));
  }
  ByteSet& operator|=(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) words[i] |= o.words[i];
    return *this;
  }
  bool empty() const { return (words[0] | words[1] | words[2] | words[3]) == 0; }
  bool operator==(const ByteSet& o) const {
    return words[0] == o.words[0] && words[1] == o.words[1] && words[2] == o.words[2] && words[3] == o.words[3];
  }
  bool operator<(const ByteSet& o) const {
    for (int i = 0; i < 4; ++i)
      if (words[i] != o.words[i]) return words[i] < o.words[i];
    return false;
  }
};

struct Element {
  enum Kind : uint8_t { kEnd, kBytes, kRule };
  Kind kind = kEnd;
  uint32_t arg = 0;  // kBytes: index into byte_sets; kRule: rule index
};

struct Grammar {
  // Alternatives laid out back to back, each terminated by a kEnd element.
  std::vector<Element> elements;
  std::vector<ByteSet> byte_sets;
  // rules[r]: start positions (into elements) of rule r's alternatives.
  std::vector<std::vector<uint32_t>> rules;
  std::vector<std::string> rule_names;
  uint32_t root = 0;

  // Readable GBNF-like listing (tests, debugging).
  std::string to_string() const;
};

// The expression tree the front ends build. Shared, immutable nodes.
struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct CodepointRange {
  uint32_t lo, hi;  // inclusive
};

struct Expr {
  enum Kind { kLiteral, kClass, kSeq, kAlt, kRepeat, kRef };
  Kind kind = kSeq;
  std::string literal;                 // kLiteral: bytes (any, not necessarily UTF-8)
  std::vector<CodepointRange> ranges;  // kClass: code points
  bool negated = false;                // kClass: the complement over all code points
  bool byte_class = false;             // kClass: ranges are bytes (0..255), not code points
  std::vector<ExprPtr> items;          // kSeq, kAlt; kRepeat: items[0]
  int32_t min = 0, max = -1;           // kRepeat: max -1 = unbounded
  std::string ref;                     // kRef: rule name
};

namespace ex {
ExprPtr lit(std::string_view bytes);
ExprPtr cls(std::vector<CodepointRange> ranges, bool negated = false);
ExprPtr bytes(std::vector<CodepointRange> byte_ranges);  // ranges of raw bytes
ExprPtr seq(std::vector<ExprPtr> items);
ExprPtr alt(std::vector<ExprPtr> items);
ExprPtr repeat(ExprPtr e, int32_t min, int32_t max);
inline ExprPtr opt(ExprPtr e) { return repeat(std::move(e), 0, 1); }
inline ExprPtr star(ExprPtr e) { return repeat(std::move(e), 0, -1); }
inline ExprPtr plus(ExprPtr e) { return repeat(std::move(e), 1, -1); }
ExprPtr ref(std::string_view rule);
inline ExprPtr empty() { return seq({}); }
}  // namespace ex

// Named rules -> Grammar. Not thread-safe; one builder per compilation.
class GrammarBuilder {
 public:
  // Defines (or redefines: an error at build) rule `name`.
  void define(const std::string& name, ExprPtr body);
  bool has(const std::string& name) const { return defs_.count(name) != 0; }
  // A rule name not yet used, starting with `hint`.
  std::string fresh_name(std::string_view hint);
  // Lowers every rule reachable from `root`; errors: an undefined rule, left recursion, size.
  Result<Grammar> build(const std::string& root);

 private:
  std::map<std::string, ExprPtr> defs_;
  std::vector<std::string> duplicate_;
  int fresh_ = 0;
};

}  // namespace pagoda::grammar

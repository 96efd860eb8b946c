// A small regex engine for patterns that are a sequence of character classes with greedy
// quantifiers, optionally ending in `$`:  atom := [class] | \p{X} | \P{X} | \s | \S | literal,
// quantifier := ? | * | + | {n} | {n,} | {n,m}. Classes hold literals, ranges, \p{X} and \s.
// Anything else (alternation, groups, look-around, lazy quantifiers, \d, \w ...) is refused, and
// make_regex_matcher() falls back to ICU.
//
// Matching is Oniguruma's: leftmost start, greedy quantifiers with backtracking (only needed when
// an item is followed by another or by `$`), `$` = end of text or before '\n'.
#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "tokenizer/regex_matcher.h"
#include "tokenizer/unicode.h"

namespace pagoda {
namespace {

using unicode::Unit;
using unicode::unit_at;

struct CharClass {
  bool negated = false;
  uint8_t flags = 0;  // members: any unit whose flags intersect these
  std::vector<std::pair<char32_t, char32_t>> ranges;  // sorted, inclusive

  bool contains(const Unit& u) const {
    bool in = (u.flags & flags) != 0;
    if (!in && !ranges.empty()) {
      auto it = std::upper_bound(ranges.begin(), ranges.end(), std::make_pair(u.cp, std::numeric_limits<char32_t>::max()));
      in = it != ranges.begin() && std::prev(it)->second >= u.cp;
    }
    return in != negated;
  }
  void finish() {
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<char32_t, char32_t>> merged;
    for (auto r : ranges) {
      if (!merged.empty() && r.first <= merged.back().second + 1) {
        merged.back().second = std::max(merged.back().second, r.second);
      } else {
        merged.push_back(r);
      }
    }
    ranges = std::move(merged);
  }
};

struct Item {
  CharClass cls;
  uint32_t min = 1;
  uint32_t max = 1;
};

struct Program {
  std::vector<Item> items;
  bool anchor_end = false;
};

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  std::optional<Program> parse() {
    Program prog;
    while (pos_ < p_.size()) {
      char32_t c = next();
      if (c == '$') {
        if (pos_ != p_.size()) return std::nullopt;
        prog.anchor_end = true;
        break;
      }
      Item item;
      if (c == '[') {
        if (!parse_class(&item.cls)) return std::nullopt;
      } else if (c == '\\') {
        if (!parse_escape_atom(&item.cls)) return std::nullopt;
      } else if (is_meta(c)) {
        return std::nullopt;
      } else {
        item.cls.ranges.push_back({c, c});
      }
      item.cls.finish();
      if (!parse_quantifier(&item)) return std::nullopt;
      prog.items.push_back(std::move(item));
    }
    if (prog.items.empty() || failed_) return std::nullopt;
    return prog;
  }

 private:
  static bool is_meta(char32_t c) {
    return c == '|' || c == '(' || c == ')' || c == '^' || c == '.' || c == '*' || c == '+' || c == '?' ||
           c == '{' || c == '}' || c == ']';
  }
  bool at_end() const { return pos_ >= p_.size(); }
  char32_t peek() const {
    if (at_end()) return 0;
    unicode::Utf8Char c = unicode::decode_utf8(p_.substr(pos_));
    return c.valid ? c.cp : 0xFFFFFFFF;
  }
  char32_t next() {
    unicode::Utf8Char c = unicode::decode_utf8(p_.substr(pos_));
    pos_ += c.len;
    if (!c.valid) failed_ = true;
    return c.cp;
  }

  static std::optional<char32_t> literal_escape(char32_t c) {
    switch (c) {
      case 'r': return U'\r';
      case 'n': return U'\n';
      case 't': return U'\t';
      case 'f': return U'\f';
      case 'v': return U'\v';
      default: break;
    }
    // Escaped ASCII punctuation stands for itself.
    if (c < 0x80 && c > ' ' && !((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')))
      return c;
    return std::nullopt;
  }

  // \p{X} with X one general category letter; returns its flag, or 0 if unsupported.
  uint8_t parse_property() {
    if (next() != '{') return 0;
    size_t close = p_.find('}', pos_);
    if (close == std::string_view::npos) return 0;
    std::string_view name = p_.substr(pos_, close - pos_);
    pos_ = close + 1;
    if (name == "L") return unicode::kLetter;
    if (name == "N") return unicode::kNumber;
    if (name == "P") return unicode::kPunct;
    if (name == "S") return unicode::kSymbol;
    if (name == "M") return unicode::kMark;
    if (name == "Z") return unicode::kSeparator;
    if (name == "C") return unicode::kOther;
    return 0;
  }

  bool parse_escape_atom(CharClass* cls) {
    if (at_end()) return false;
    char32_t c = next();
    if (c == 'p' || c == 'P') {
      uint8_t f = parse_property();
      if (!f) return false;
      cls->flags = f;
      cls->negated = c == 'P';
      return true;
    }
    if (c == 's' || c == 'S') {
      cls->flags = unicode::kSpace;
      cls->negated = c == 'S';
      return true;
    }
    auto lit = literal_escape(c);
    if (!lit) return false;
    cls->ranges.push_back({*lit, *lit});
    return true;
  }

  // One class member that can start a range: a literal (escaped or not). Sets *is_literal false
  // for \p{X} / \s members, which it adds to cls itself.
  bool parse_class_member(CharClass* cls, char32_t* lit, bool* is_literal) {
    char32_t c = next();
    *is_literal = true;
    if (c == '\\') {
      if (at_end()) return false;
      char32_t e = next();
      if (e == 'p') {
        uint8_t f = parse_property();
        if (!f) return false;
        cls->flags |= f;
        *is_literal = false;
        return true;
      }
      if (e == 's') {
        cls->flags |= unicode::kSpace;
        *is_literal = false;
        return true;
      }
      auto l = literal_escape(e);
      if (!l) return false;
      *lit = *l;
      return true;
    }
    if (c == '[') return false;  // nested classes / set operations
    *lit = c;
    return true;
  }

  bool parse_class(CharClass* cls) {
    if (peek() == '^') {
      next();
      cls->negated = true;
    }
    if (peek() == ']') return false;
    while (true) {
      if (at_end()) return false;
      if (peek() == ']') {
        next();
        return true;
      }
      char32_t lo = 0;
      bool is_literal = false;
      if (!parse_class_member(cls, &lo, &is_literal)) return false;
      if (!is_literal) continue;
      if (peek() == '-' && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        next();
        char32_t hi = 0;
        bool hi_literal = false;
        if (!parse_class_member(cls, &hi, &hi_literal) || !hi_literal || hi < lo) return false;
        cls->ranges.push_back({lo, hi});
      } else {
        cls->ranges.push_back({lo, lo});
      }
    }
  }

  bool parse_number(uint32_t* v) {
    size_t start = pos_;
    uint64_t x = 0;
    while (!at_end() && p_[pos_] >= '0' && p_[pos_] <= '9') {
      x = x * 10 + static_cast<uint64_t>(p_[pos_] - '0');
      if (x > 100000) return false;
      ++pos_;
    }
    *v = static_cast<uint32_t>(x);
    return pos_ > start;
  }

  bool parse_quantifier(Item* item) {
    constexpr uint32_t kInf = std::numeric_limits<uint32_t>::max();
    char32_t c = peek();
    if (c == '?') {
      next();
      item->min = 0;
      item->max = 1;
    } else if (c == '*') {
      next();
      item->min = 0;
      item->max = kInf;
    } else if (c == '+') {
      next();
      item->min = 1;
      item->max = kInf;
    } else if (c == '{') {
      next();
      uint32_t lo = 0;
      if (!parse_number(&lo)) return false;
      uint32_t hi = lo;
      if (peek() == ',') {
        next();
        hi = kInf;
        if (peek() != '}' && !parse_number(&hi)) return false;
      }
      if (next() != '}' || hi < lo || hi == 0) return false;
      item->min = lo;
      item->max = hi;
    } else {
      return true;
    }
    // Lazy or possessive quantifiers are outside the subset.
    c = peek();
    return !(c == '?' || c == '+' || c == '*' || c == '{');
  }

  std::string_view p_;
  size_t pos_ = 0;
  bool failed_ = false;
};

class SimpleMatcher final : public Matcher {
 public:
  explicit SimpleMatcher(Program prog) : prog_(std::move(prog)) {}

  // When the first item is an unbounded run and matching from i fails, every start inside that
  // run fails too (the rest of a match depends only on where the run ends, and a later start
  // offers a subset of those ends), so the search resumes at the end of the run. This keeps
  // patterns like `\s+$` linear on long runs of spaces.
  void find_all(std::string_view text, FunctionRef<void(size_t, size_t)> on_match) const override {
    std::vector<std::vector<size_t>> scratch(prog_.items.size());
    const Item& first = prog_.items[0];
    const bool skip_runs = first.max == std::numeric_limits<uint32_t>::max();
    size_t i = 0;
    while (i < text.size()) {
      size_t end = 0;
      if (match_here(text, 0, i, &end, scratch) && end > i) {
        on_match(i, end);
        i = end;
        continue;
      }
      size_t next = i + unicode::unit_length(text.substr(i));
      if (skip_runs) {
        size_t p = i;
        while (p < text.size()) {
          Unit u = unit_at(text, p);
          if (!first.cls.contains(u)) break;
          p += u.len;
        }
        next = std::max(next, p);
      }
      i = next;
    }
  }
  const char* engine() const override { return "simple"; }

 private:
  bool match_here(std::string_view s, size_t k, size_t pos, size_t* end, std::vector<std::vector<size_t>>& scratch) const {
    if (k == prog_.items.size()) {
      if (prog_.anchor_end && !(pos == s.size() || s[pos] == '\n')) return false;
      *end = pos;
      return true;
    }
    const Item& item = prog_.items[k];
    const bool last_free = k + 1 == prog_.items.size() && !prog_.anchor_end;
    std::vector<size_t>& positions = scratch[k];
    positions.clear();
    if (!last_free) positions.push_back(pos);
    size_t p = pos;
    uint32_t count = 0;
    while (count < item.max && p < s.size()) {
      Unit u = unit_at(s, p);
      if (!item.cls.contains(u)) break;
      p += u.len;
      ++count;
      if (!last_free) positions.push_back(p);
    }
    if (count < item.min) return false;
    if (last_free) {
      *end = p;
      return true;
    }
    for (uint32_t c = count + 1; c-- > item.min;) {
      // positions may be reused by deeper levels only at other indices, so copy the value first.
      const size_t at = positions[c];
      if (match_here(s, k + 1, at, end, scratch)) return true;
    }
    return false;
  }

  Program prog_;
};

}  // namespace

std::unique_ptr<Matcher> make_simple_matcher(std::string_view pattern) {
  auto prog = Parser(pattern).parse();
  if (!prog) return nullptr;
  return std::make_unique<SimpleMatcher>(std::move(*prog));
}

}  // namespace pagoda

// Hand-written matchers for the common pre-tokenizer alternations.
//
// Each `match_at(text, i)` returns the end of the match that the regex engine would report
// starting at unit i, trying the alternatives in order exactly as a backtracking engine does; the
// patterns below match at every position, so find_all simply walks the text. Character classes
// come from the utf8proc-derived flags (tokenizer/unicode.h); malformed UTF-8 bytes count as one
// "other" unit each (neither letter, number nor space), which no reference engine can see.
#include "tokenizer/regex_matcher.h"

#include "tokenizer/unicode.h"

namespace pagoda {

const char kGpt2Pattern[] = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char kGpt2PatternNoTail[] = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const char kLlama3Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kQwen2Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

using unicode::kLetter;
using unicode::kNumber;
using unicode::kSpace;
using unicode::Unit;
using unicode::unit_at;

constexpr uint8_t kLetterNumberSpace = kLetter | kNumber | kSpace;

// End of the run of units starting at i whose flags intersect `mask`.
inline size_t run_end(std::string_view s, size_t i, uint8_t mask) {
  while (i < s.size()) {
    Unit u = unit_at(s, i);
    if (!(u.flags & mask)) break;
    i += u.len;
  }
  return i;
}

// End of the run of "other" units ([^\s\p{L}\p{N}]) starting at i.
inline size_t other_run_end(std::string_view s, size_t i) {
  while (i < s.size()) {
    Unit u = unit_at(s, i);
    if (u.flags & kLetterNumberSpace) break;
    i += u.len;
  }
  return i;
}

inline bool is_other(const Unit& u) { return !(u.flags & kLetterNumberSpace); }

// Whitespace tail shared by the patterns: `\s+(?!\S)|\s+` at i (a space unit). Also reports the
// end of the last '\r' / '\n' in the run, for Llama 3's `\s*[\r\n]+`.
struct SpaceRun {
  size_t end;       // end of the run of spaces
  size_t last;      // start of its last unit
  size_t count;     // units in the run
  size_t nl_end;    // end of its last '\r' or '\n', or 0 if none
};
inline SpaceRun space_run(std::string_view s, size_t i) {
  SpaceRun r{i, i, 0, 0};
  size_t k = i;
  while (k < s.size()) {
    Unit u = unit_at(s, k);
    if (!(u.flags & kSpace)) break;
    if (u.cp == '\r' || u.cp == '\n') r.nl_end = k + 1;
    r.last = k;
    k += u.len;
    ++r.count;
  }
  r.end = k;
  return r;
}
// `\s+(?!\S)` then `\s+`: the whole run if it reaches the end of the text; otherwise all but its
// last unit (which then leads the next word); a single space before a non-space stands alone.
inline size_t space_tail(const SpaceRun& r, size_t n) {
  if (r.end == n) return r.end;
  if (r.count >= 2) return r.last;
  return r.end;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t gpt2_match_at(std::string_view s, size_t i) {
  const size_t n = s.size();
  Unit c = unit_at(s, i);
  if (c.cp == '\'' && i + 1 < n) {
    const char a = s[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 < n) {
      const char b = s[i + 2];
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
  }
  size_t j = i;
  if (c.cp == ' ' && i + 1 < n) {
    Unit d = unit_at(s, i + 1);
    if (!(d.flags & kSpace)) {
      j = i + 1;
      c = d;
    }
  }
  if (c.flags & kLetter) return run_end(s, j, kLetter);
  if (c.flags & kNumber) return run_end(s, j, kNumber);
  if (!(c.flags & kSpace)) return other_run_end(s, j);
  return space_tail(space_run(s, i), n);
}

// Case-insensitive letter of the contractions: ASCII letters and U+017F (long s), which
// Oniguruma's case folding equates with 's'.
inline char32_t fold_contraction_letter(char32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + ('a' - 'A');
  if (cp == 0x17F) return 's';
  return cp;
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}| ?[^\s\p{L}\p{N}]+[\r\n]*|
// \s*[\r\n]+|\s+(?!\S)|\s+        (D = 3 for Llama 3, 1 for Qwen2)
size_t llama3_match_at(std::string_view s, size_t i, int max_digits) {
  const size_t n = s.size();
  Unit c = unit_at(s, i);
  if (c.cp == '\'' && i + 1 < n) {
    Unit a = unit_at(s, i + 1);
    const char32_t la = fold_contraction_letter(a.cp);
    if (la == 's' || la == 't' || la == 'm' || la == 'd') return i + 1 + a.len;
    const size_t k = i + 1 + a.len;
    if ((la == 'r' || la == 'v' || la == 'l') && k < n) {
      Unit b = unit_at(s, k);
      const char32_t lb = fold_contraction_letter(b.cp);
      if (((la == 'r' || la == 'v') && lb == 'e') || (la == 'l' && lb == 'l')) return k + b.len;
    }
  }
  if (c.flags & kLetter) return run_end(s, i, kLetter);
  if (c.cp != '\r' && c.cp != '\n' && !(c.flags & kNumber) && i + c.len < n) {
    Unit d = unit_at(s, i + c.len);
    if (d.flags & kLetter) return run_end(s, i + c.len, kLetter);
  }
  if (c.flags & kNumber) {
    size_t k = i;
    for (int count = 0; count < max_digits && k < n; ++count) {
      Unit u = unit_at(s, k);
      if (!(u.flags & kNumber)) break;
      k += u.len;
    }
    return k;
  }
  size_t j = i;
  Unit cc = c;
  if (c.cp == ' ' && i + 1 < n) {
    Unit d = unit_at(s, i + 1);
    if (is_other(d)) {
      j = i + 1;
      cc = d;
    }
  }
  if (is_other(cc)) {
    size_t k = other_run_end(s, j);
    while (k < n && (s[k] == '\r' || s[k] == '\n')) ++k;
    return k;
  }
  SpaceRun r = space_run(s, i);
  if (r.nl_end != 0) return r.nl_end;
  return space_tail(r, n);
}

// with_tail: the pattern ends in `|\s+`. Without it, a lone space unit before a non-space is not
// a match but a gap (the same pieces under Isolated, different ones under other behaviours).
class Gpt2Matcher final : public Matcher {
 public:
  explicit Gpt2Matcher(bool with_tail) : with_tail_(with_tail) {}
  void find_all(std::string_view text, FunctionRef<void(size_t, size_t)> on_match) const override {
    size_t i = 0;
    while (i < text.size()) {
      const size_t e = gpt2_match_at(text, i);
      if (with_tail_ || !is_lone_space(text, i, e)) on_match(i, e);
      i = e;
    }
  }
  const char* engine() const override { return "gpt2"; }

 private:
  // [i, e) is a single space unit followed by a non-space: only `\s+` matches it.
  static bool is_lone_space(std::string_view s, size_t i, size_t e) {
    if (e >= s.size()) return false;
    const Unit u = unit_at(s, i);
    return (u.flags & kSpace) && i + u.len == e && !(unit_at(s, e).flags & kSpace);
  }
  bool with_tail_;
};

class Llama3Matcher final : public Matcher {
 public:
  explicit Llama3Matcher(int max_digits) : max_digits_(max_digits) {}
  void find_all(std::string_view text, FunctionRef<void(size_t, size_t)> on_match) const override {
    size_t i = 0;
    while (i < text.size()) {
      const size_t e = llama3_match_at(text, i, max_digits_);
      on_match(i, e);
      i = e;
    }
  }
  const char* engine() const override { return max_digits_ == 3 ? "llama3" : "qwen2"; }

 private:
  int max_digits_;
};

class LiteralMatcher final : public Matcher {
 public:
  explicit LiteralMatcher(std::string literal) : literal_(std::move(literal)) {}
  void find_all(std::string_view text, FunctionRef<void(size_t, size_t)> on_match) const override {
    if (literal_.empty()) return;
    size_t pos = 0;
    while ((pos = text.find(literal_, pos)) != std::string_view::npos) {
      on_match(pos, pos + literal_.size());
      pos += literal_.size();
    }
  }
  const char* engine() const override { return "literal"; }

 private:
  std::string literal_;
};

}  // namespace

Result<std::unique_ptr<Matcher>> make_regex_matcher(std::string_view pattern) {
  if (pattern == kGpt2Pattern) return std::unique_ptr<Matcher>(new Gpt2Matcher(true));
  if (pattern == kGpt2PatternNoTail) return std::unique_ptr<Matcher>(new Gpt2Matcher(false));
  if (pattern == kLlama3Pattern) return std::unique_ptr<Matcher>(new Llama3Matcher(3));
  if (pattern == kQwen2Pattern) return std::unique_ptr<Matcher>(new Llama3Matcher(1));
  if (auto simple = make_simple_matcher(pattern)) return simple;
  return make_icu_matcher(pattern);
}

std::unique_ptr<Matcher> make_literal_matcher(std::string literal) {
  return std::make_unique<LiteralMatcher>(std::move(literal));
}

}  // namespace pagoda

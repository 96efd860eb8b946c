#include "grammar/regex_compiler.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "common/utf8.h"

namespace pagoda::grammar {

uint32_t decode_utf8(std::string_view s, size_t* i) {
  const auto c = static_cast<unsigned char>(s[*i]);
  int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || *i + n > s.size()) {
    ++*i;
    return c;
  }
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < n; ++k) {
    const auto d = static_cast<unsigned char>(s[*i + k]);
    if ((d >> 6) != 2) {
      ++*i;
      return c;
    }
    cp = (cp << 6) | (d & 0x3F);
  }
  *i += n;
  return cp;
}

namespace {

constexpr int kMaxRepeat = 10000;

class RegexParser {
 public:
  explicit RegexParser(std::string_view p) : p_(p) {}

  Result<ExprPtr> parse() {
    if (!p_.empty() && p_[0] == '^') ++i_;
    auto e = parse_alt();
    if (!e.ok()) return e;
    if (i_ < p_.size()) return err(p_[i_] == ')' ? "unbalanced ')'" : "unexpected character");
    return e;
  }

 private:
  Status err(std::string_view what) const { return invalid_argument("regex: {} at offset {} of '{}'", what, i_, p_); }
  bool at_end() const { return i_ >= p_.size(); }

  Result<ExprPtr> parse_alt() {
    std::vector<ExprPtr> alts;
    for (;;) {
      auto s = parse_seq();
      if (!s.ok()) return s;
      alts.push_back(*s);
      if (!at_end() && p_[i_] == '|') {
        ++i_;
        continue;
      }
      break;
    }
    return ex::alt(std::move(alts));
  }

  Result<ExprPtr> parse_seq() {
    std::vector<ExprPtr> items;
    while (!at_end() && p_[i_] != '|' && p_[i_] != ')') {
      if (p_[i_] == '$') {
        ++i_;
        if (at_end() || p_[i_] == ')' || p_[i_] == '|') continue;  // end anchor
        return err("'$' inside the pattern is not supported");
      }
      auto a = parse_atom();
      if (!a.ok()) return a;
      ExprPtr e = *a;
      // Quantifiers. Stacked ones from {?, *, +} (and {0,1} {1,} {0,}) are one quantifier of the same
      // language: (e+)+ = e+, (e?)+ = (e+)? = e*, ... Nesting them instead makes a rule per level whose
      // expansion paths multiply (a fuzzer's x+++...+ of 100 levels never finished one mask).
      bool quantified = false;
      int32_t qmn = 1, qmx = 1;  // the quantifier not yet applied to e
      auto simple = [](int32_t lo, int32_t hi) { return lo <= 1 && (hi == 1 || hi == -1); };
      while (!at_end()) {
        int32_t mn, mx;
        const char c = p_[i_];
        if (c == '*') { mn = 0; mx = -1; ++i_; }
        else if (c == '+') { mn = 1; mx = -1; ++i_; }
        else if (c == '?') { mn = 0; mx = 1; ++i_; }
        else if (c == '{' && parse_braces(&mn, &mx)) {}
        else break;
        if (!at_end() && p_[i_] == '?') ++i_;  // lazy: same language
        if (mn > kMaxRepeat || mx > kMaxRepeat) return err("repetition count over 10000");
        if (mx >= 0 && mx < mn) return err("repetition {n,m} with m < n");
        if (quantified && simple(qmn, qmx) && simple(mn, mx)) {
          qmn *= mn;  // the counts of both are intervals from 0 or 1: their composition is one
          qmx = (qmx == -1 || mx == -1) ? -1 : 1;
          continue;
        }
        if (quantified) e = ex::repeat(e, qmn, qmx);
        quantified = true;
        qmn = mn;
        qmx = mx;
      }
      if (quantified) e = ex::repeat(e, qmn, qmx);
      items.push_back(e);
    }
    return ex::seq(std::move(items));
  }

  // {n} {n,} {n,m}: true (and i_ past it) if well-formed, else false (a literal '{').
  bool parse_braces(int32_t* mn, int32_t* mx) {
    size_t j = i_ + 1;
    auto num = [&](int32_t* v) {
      size_t s = j;
      int64_t x = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') {
        x = std::min<int64_t>(x * 10 + (p_[j] - '0'), 1 << 30);
        ++j;
      }
      *v = static_cast<int32_t>(x);
      return j > s;
    };
    if (!num(mn)) return false;
    if (j < p_.size() && p_[j] == '}') {
      *mx = *mn;
    } else if (j < p_.size() && p_[j] == ',') {
      ++j;
      if (j < p_.size() && p_[j] == '}') *mx = -1;
      else if (!num(mx)) return false;
      if (j >= p_.size() || p_[j] != '}') return false;
    } else {
      return false;
    }
    i_ = j + 1;
    return true;
  }

  static std::vector<CodepointRange> digit() { return {{'0', '9'}}; }
  static std::vector<CodepointRange> word() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
  static std::vector<CodepointRange> space() { return {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x2028, 0x2029}, {0xFEFF, 0xFEFF}}; }
  static std::vector<CodepointRange> complement(std::vector<CodepointRange> r) {
    std::sort(r.begin(), r.end(), [](auto a, auto b) { return a.lo < b.lo; });
    std::vector<CodepointRange> out;
    uint32_t next = 0;
    for (auto x : r) {
      if (x.lo > next) out.push_back({next, x.lo - 1});
      next = std::max(next, x.hi + 1);
    }
    if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
    return out;
  }

  Status hex(int n, uint32_t* cp) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      if (at_end() || !isxdigit(static_cast<unsigned char>(p_[i_]))) return err("bad hex escape");
      v = v * 16 + static_cast<uint32_t>(std::stoi(std::string(1, p_[i_]), nullptr, 16));
      ++i_;
    }
    *cp = v;
    return {};
  }

  // After a backslash: a class (*ranges set, returns true) or one code point (*cp).
  Result<bool> parse_escape(std::vector<CodepointRange>* ranges, uint32_t* cp) {
    if (at_end()) return err("trailing backslash");
    const char c = p_[i_++];
    switch (c) {
      case 'd': *ranges = digit(); return true;
      case 'D': *ranges = complement(digit()); return true;
      case 'w': *ranges = word(); return true;
      case 'W': *ranges = complement(word()); return true;
      case 's': *ranges = space(); return true;
      case 'S': *ranges = complement(space()); return true;
      case 'n': *cp = '\n'; return false;
      case 'r': *cp = '\r'; return false;
      case 't': *cp = '\t'; return false;
      case 'f': *cp = '\f'; return false;
      case 'v': *cp = '\v'; return false;
      case '0': *cp = 0; return false;
      case 'x': PAGODA_RETURN_IF_ERROR(hex(2, cp)); return false;
      case 'u':
        if (!at_end() && p_[i_] == '{') {
          ++i_;
          uint32_t v = 0;
          int n = 0;
          while (!at_end() && isxdigit(static_cast<unsigned char>(p_[i_])) && n < 6) {
            v = v * 16 + static_cast<uint32_t>(std::stoi(std::string(1, p_[i_]), nullptr, 16));
            ++i_;
            ++n;
          }
          if (n == 0 || at_end() || p_[i_] != '}' || v > 0x10FFFF) return err("bad \\u{...} escape");
          ++i_;
          *cp = v;
          return false;
        }
        PAGODA_RETURN_IF_ERROR(hex(4, cp));
        return false;
      case 'b': case 'B': return err("word boundaries (\\b, \\B) are not supported");
      default:
        if (c >= '1' && c <= '9') return err("backreferences are not supported");
        if (isalnum(static_cast<unsigned char>(c))) return err("unknown escape");
        --i_;
        *cp = decode_utf8(p_, &i_);
        return false;
    }
  }

  Result<ExprPtr> parse_atom() {
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (p_.substr(i_, 2) == "?:") i_ += 2;
      else if (!at_end() && p_[i_] == '?') return err("lookaround and named groups are not supported");
      auto e = parse_alt();
      if (!e.ok()) return e;
      if (at_end() || p_[i_] != ')') return err("missing ')'");
      ++i_;
      return e;
    }
    if (c == '[') return parse_class();
    if (c == '.') {
      ++i_;
      return ex::cls({{'\n', '\n'}, {'\r', '\r'}}, true);
    }
    if (c == '\\') {
      ++i_;
      std::vector<CodepointRange> r;
      uint32_t cp = 0;
      auto is_class = parse_escape(&r, &cp);
      if (!is_class.ok()) return is_class.status();
      if (*is_class) return ex::cls(r);
      std::string s;
      append_utf8(cp, &s);
      return ex::lit(s);
    }
    if (c == '*' || c == '+' || c == '?') return err("quantifier without an operand");
    if (c == '^') return err("'^' inside the pattern is not supported");
    const size_t start = i_;
    decode_utf8(p_, &i_);
    return ex::lit(p_.substr(start, i_ - start));
  }

  Result<ExprPtr> parse_class() {
    ++i_;  // [
    bool negated = false;
    if (!at_end() && p_[i_] == '^') {
      negated = true;
      ++i_;
    }
    std::vector<CodepointRange> ranges;
    bool first = true;
    for (;;) {
      if (at_end()) return err("missing ']'");
      if (p_[i_] == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      uint32_t lo;
      auto item = [&](uint32_t* cp) -> Result<bool> {
        if (p_[i_] == '\\') {
          ++i_;
          std::vector<CodepointRange> r;
          auto is_class = parse_escape(&r, cp);
          if (!is_class.ok()) return is_class.status();
          if (*is_class) ranges.insert(ranges.end(), r.begin(), r.end());
          return *is_class;
        }
        *cp = decode_utf8(p_, &i_);
        return false;
      };
      auto a = item(&lo);
      if (!a.ok()) return a.status();
      if (*a) continue;
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        uint32_t hi;
        auto b = item(&hi);
        if (!b.ok()) return b.status();
        if (*b) return err("a class escape cannot end a range");
        if (hi < lo) return err("range out of order");
        ranges.push_back({lo, hi});
      } else {
        ranges.push_back({lo, lo});
      }
    }
    if (ranges.empty() && !negated) return err("empty class");
    if (ranges.empty()) return ex::cls({{0, 0x10FFFF}});
    return ex::cls(std::move(ranges), negated);
  }

  std::string_view p_;
  size_t i_ = 0;
};

}  // namespace

Result<ExprPtr> parse_regex(std::string_view pattern) { return RegexParser(pattern).parse(); }

Result<Grammar> compile_regex(std::string_view pattern) {
  PAGODA_ASSIGN_OR_RETURN(ExprPtr e, parse_regex(pattern));
  GrammarBuilder b;
  b.define("root", e);
  return b.build("root");
}

}  // namespace pagoda::grammar

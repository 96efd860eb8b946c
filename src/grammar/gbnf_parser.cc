#include "grammar/gbnf_parser.h"

#include <cctype>
#include <string>

#include "common/utf8.h"
#include "grammar/regex_compiler.h"

namespace pagoda::grammar {

namespace {

constexpr int kMaxRepeat = 10000;

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; }

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view t) : t_(t) {}

  Status parse(GrammarBuilder* b) {
    skip_space();
    if (at_end()) return invalid_argument("grammar is empty");
    while (!at_end()) {
      std::string name = parse_name();
      if (name.empty()) return err("expected a rule name");
      skip_space();
      if (t_.substr(i_, 3) != "::=") return err("expected '::=' after rule name '" + name + "'");
      i_ += 3;
      auto body = parse_alternatives(0);
      if (!body.ok()) return body.status();
      if (b->has(name)) return err("rule '" + name + "' is defined twice");
      b->define(name, *body);
      skip_space();
    }
    return {};
  }

 private:
  Status err(std::string_view what) const {
    size_t line = 1;
    for (size_t k = 0; k < i_ && k < t_.size(); ++k) line += t_[k] == '\n';
    return invalid_argument("grammar: {} (line {}, offset {})", what, line, i_);
  }
  bool at_end() const { return i_ >= t_.size(); }
  void skip_space() {
    while (!at_end()) {
      if (t_[i_] == '#') {
        while (!at_end() && t_[i_] != '\n') ++i_;
      } else if (std::isspace(static_cast<unsigned char>(t_[i_]))) {
        ++i_;
      } else {
        break;
      }
    }
  }
  std::string parse_name() {
    size_t s = i_;
    while (!at_end() && is_name_char(t_[i_])) ++i_;
    return std::string(t_.substr(s, i_ - s));
  }
  // At a name followed by ::= (the start of the next rule)?
  bool at_rule_start() const {
    size_t j = i_;
    while (j < t_.size() && is_name_char(t_[j])) ++j;
    if (j == i_) return false;
    while (j < t_.size() && std::isspace(static_cast<unsigned char>(t_[j]))) ++j;
    return t_.substr(j, 3) == "::=";
  }

  Result<ExprPtr> parse_alternatives(int depth) {
    if (depth > 64) return err("groups nested too deep");
    std::vector<ExprPtr> alts;
    for (;;) {
      auto s = parse_sequence(depth);
      if (!s.ok()) return s;
      alts.push_back(*s);
      skip_space();
      if (!at_end() && t_[i_] == '|') {
        ++i_;
        continue;
      }
      break;
    }
    return ex::alt(std::move(alts));
  }

  Result<ExprPtr> parse_sequence(int depth) {
    std::vector<ExprPtr> items;
    for (;;) {
      skip_space();
      if (at_end() || t_[i_] == '|' || t_[i_] == ')' || at_rule_start()) break;
      ExprPtr e;
      const char c = t_[i_];
      if (c == '"') {
        auto l = parse_literal();
        if (!l.ok()) return l;
        e = *l;
      } else if (c == '[') {
        auto k = parse_class();
        if (!k.ok()) return k;
        e = *k;
      } else if (c == '(') {
        ++i_;
        auto g = parse_alternatives(depth + 1);
        if (!g.ok()) return g;
        skip_space();
        if (at_end() || t_[i_] != ')') return err("missing ')'");
        ++i_;
        e = *g;
      } else if (c == '.') {
        ++i_;
        e = ex::cls({{0, 0x10FFFF}});
      } else if (is_name_char(c)) {
        e = ex::ref(parse_name());
      } else {
        return err(std::string("unexpected '") + c + "'");
      }
      // Postfix operators (no space before them, as llama.cpp).
      while (!at_end()) {
        const char q = t_[i_];
        if (q == '*') { e = ex::star(e); ++i_; }
        else if (q == '+') { e = ex::plus(e); ++i_; }
        else if (q == '?') { e = ex::opt(e); ++i_; }
        else if (q == '{') {
          int32_t mn = 0, mx = -1;
          PAGODA_RETURN_IF_ERROR(parse_braces(&mn, &mx));
          e = ex::repeat(e, mn, mx);
        } else {
          break;
        }
      }
      items.push_back(e);
    }
    return ex::seq(std::move(items));
  }

  Status parse_braces(int32_t* mn, int32_t* mx) {
    ++i_;
    auto num = [&](int32_t* v) {
      skip_space();
      size_t s = i_;
      int64_t x = 0;
      while (!at_end() && std::isdigit(static_cast<unsigned char>(t_[i_]))) {
        x = std::min<int64_t>(x * 10 + (t_[i_] - '0'), 1 << 30);
        ++i_;
      }
      *v = static_cast<int32_t>(x);
      skip_space();
      return i_ > s;
    };
    if (!num(mn)) return err("expected a number in {}");
    if (!at_end() && t_[i_] == '}') {
      *mx = *mn;
    } else if (!at_end() && t_[i_] == ',') {
      ++i_;
      skip_space();
      if (!at_end() && t_[i_] == '}') *mx = -1;
      else if (!num(mx)) return err("expected a number in {m,n}");
    }
    if (at_end() || t_[i_] != '}') return err("missing '}'");
    ++i_;
    if (*mn > kMaxRepeat || *mx > kMaxRepeat) return err("repetition count over 10000");
    if (*mx >= 0 && *mx < *mn) return err("repetition {m,n} with n < m");
    return {};
  }

  Status hex(int n, uint32_t* cp) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      if (at_end() || !std::isxdigit(static_cast<unsigned char>(t_[i_]))) return err("bad hex escape");
      const char h = static_cast<char>(std::tolower(static_cast<unsigned char>(t_[i_++])));
      v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : h - 'a' + 10);
    }
    *cp = v;
    return {};
  }

  // One character of a literal or class (escapes decoded).
  Status parse_char(uint32_t* cp) {
    if (t_[i_] != '\\') {
      *cp = decode_utf8(t_, &i_);
      return {};
    }
    ++i_;
    if (at_end()) return err("trailing backslash");
    const char c = t_[i_++];
    switch (c) {
      case 'n': *cp = '\n'; return {};
      case 'r': *cp = '\r'; return {};
      case 't': *cp = '\t'; return {};
      case 'x': return hex(2, cp);
      case 'u': return hex(4, cp);
      case 'U': return hex(8, cp);
      case '\\': case '"': case '[': case ']': case '-': case '^': *cp = static_cast<uint8_t>(c); return {};
      default: return err(std::string("unknown escape '\\") + c + "'");
    }
  }

  Result<ExprPtr> parse_literal() {
    ++i_;
    std::string s;
    for (;;) {
      if (at_end()) return err("unterminated string literal");
      if (t_[i_] == '"') {
        ++i_;
        break;
      }
      uint32_t cp;
      const bool raw_byte = t_[i_] == '\\' && i_ + 1 < t_.size() && t_[i_ + 1] == 'x';
      PAGODA_RETURN_IF_ERROR(parse_char(&cp));
      if (raw_byte) s.push_back(static_cast<char>(cp));
      else append_utf8(static_cast<char32_t>(cp), &s);
    }
    return ex::lit(s);
  }

  Result<ExprPtr> parse_class() {
    ++i_;
    bool negated = false;
    if (!at_end() && t_[i_] == '^') {
      negated = true;
      ++i_;
    }
    std::vector<CodepointRange> ranges;
    for (;;) {
      if (at_end()) return err("missing ']'");
      if (t_[i_] == ']') {
        ++i_;
        break;
      }
      uint32_t lo = 0, hi = 0;
      PAGODA_RETURN_IF_ERROR(parse_char(&lo));
      hi = lo;
      if (i_ + 1 < t_.size() && t_[i_] == '-' && t_[i_ + 1] != ']') {
        ++i_;
        PAGODA_RETURN_IF_ERROR(parse_char(&hi));
        if (hi < lo) return err("character range out of order");
      }
      ranges.push_back({lo, hi});
    }
    if (ranges.empty()) return err("empty character class");
    return ex::cls(std::move(ranges), negated);
  }

  std::string_view t_;
  size_t i_ = 0;
};

}  // namespace

Result<Grammar> compile_gbnf(std::string_view text) {
  GrammarBuilder b;
  PAGODA_RETURN_IF_ERROR(GbnfParser(text).parse(&b));
  if (!b.has("root")) return invalid_argument("grammar has no 'root' rule");
  return b.build("root");
}

}  // namespace pagoda::grammar

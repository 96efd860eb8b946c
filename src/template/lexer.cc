#include "template/lexer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "template/unicode.h"

namespace pagoda::tmpl {

const char* token_type_name(TokenType t) {
  switch (t) {
    case TokenType::kData: return "template data";
    case TokenType::kVariableBegin: return "begin of print statement";
    case TokenType::kVariableEnd: return "end of print statement";
    case TokenType::kBlockBegin: return "begin of statement block";
    case TokenType::kBlockEnd: return "end of statement block";
    case TokenType::kName: return "name";
    case TokenType::kString: return "string";
    case TokenType::kInteger: return "integer";
    case TokenType::kFloat: return "float";
    case TokenType::kOperator: return "operator";
    case TokenType::kEof: return "end of template";
  }
  return "token";
}

namespace {

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& opts) : src_(std::move(source)), opts_(opts) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t n = src_.size();
    while (pos_ < n) {
      size_t t = find_tag_start(pos_);
      if (t == std::string::npos) {
        emit_data(pos_, src_.substr(pos_));
        pos_ = n;
        break;
      }
      char kind = src_[t + 1];
      char sign = (t + 2 < n && (src_[t + 2] == '-' || src_[t + 2] == '+')) ? src_[t + 2] : 0;
      size_t after_sign = t + 2 + (sign ? 1 : 0);
      size_t raw_end = kind == '%' ? match_raw_begin(after_sign) : std::string::npos;
      std::string text = src_.substr(pos_, t - pos_);
      strip_text(&text, sign, kind != '{');
      emit_data(pos_, std::move(text));
      line_starting_ = false;
      if (raw_end != std::string::npos) {
        line_starting_ = src_[raw_end - 1] == '\n';
        lex_raw(t, raw_end);
      } else if (kind == '#') {
        lex_comment(t, after_sign);
      } else {
        lex_tag(t, after_sign, kind == '%');
      }
    }
    Token eof;
    eof.type = TokenType::kEof;
    eof.pos = pos_at(src_.size());
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

 private:
  // Line and column (in code points) of `offset`. Tokens come in increasing offset order, so the
  // column is counted on from the previous position on the same line: linear in the source
  // overall, however long its lines (counting from the line start each time was quadratic).
  SourcePos pos_at(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line = static_cast<size_t>(it - line_starts_.begin());
    size_t start = line_starts_[line - 1];
    size_t from = start, col = 1;
    if (last_line_ == line && last_offset_ >= start && last_offset_ <= offset) {
      from = last_offset_;
      col = last_col_;
    }
    col += utf8_length(std::string_view(src_).substr(from, offset - from));
    last_line_ = line;
    last_offset_ = offset;
    last_col_ = col;
    return {static_cast<int>(line), static_cast<int>(col)};
  }

  [[noreturn]] void fail(size_t offset, std::string msg) const { throw_error_at(pos_at(offset), std::move(msg)); }

  size_t find_tag_start(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return std::string::npos;
  }

  // Length of the Unicode whitespace run at `i` (Python's \s*).
  size_t ws_run(size_t i) const {
    size_t j = i;
    while (j < src_.size()) {
      size_t k = j;
      char32_t c = utf8_next(src_, &k);
      if (!py_isspace(c)) break;
      j = k;
    }
    return j - i;
  }

  static bool all_space(std::string_view s) {
    if (s.empty()) return false;
    size_t i = 0;
    while (i < s.size())
      if (!py_isspace(utf8_next(s, &i))) return false;
    return true;
  }

  static std::string rstrip(const std::string& s) { return py_strip(s, nullptr, false, true); }

  // Whitespace control on the data before a tag (jinja2.lexer OptionalLStrip).
  void strip_text(std::string* text, char sign, bool lstrip_applies) const {
    if (sign == '-') {
      *text = rstrip(*text);
    } else if (sign != '+' && opts_.lstrip_blocks && lstrip_applies) {
      size_t nl = text->rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && all_space(std::string_view(*text).substr(l_pos))) text->resize(l_pos);
    }
  }

  void emit_data(size_t offset, std::string text) {
    if (text.empty()) return;
    Token tok;
    tok.type = TokenType::kData;
    tok.text = std::move(text);
    tok.pos = pos_at(offset);
    tokens_.push_back(std::move(tok));
  }

  void emit(TokenType type, size_t offset, std::string text = {}) {
    Token tok;
    tok.type = type;
    tok.text = std::move(text);
    tok.pos = pos_at(offset);
    tokens_.push_back(std::move(tok));
  }

  bool starts_with(size_t i, std::string_view s) const {
    return i <= src_.size() && std::string_view(src_).substr(i, s.size()) == s;
  }

  // Block end at `i`: returns the number of bytes consumed (0: not an end).
  size_t match_block_end(size_t i) const {
    if (starts_with(i, "+%}")) return 3;
    if (starts_with(i, "-%}")) return 3 + ws_run(i + 3);
    if (starts_with(i, "%}")) return 2 + ((opts_.trim_blocks && starts_with(i + 2, "\n")) ? 1 : 0);
    return 0;
  }

  // `\s*raw\s*(-%}\s*|%})` at `i`; returns the end offset or npos.
  size_t match_raw_begin(size_t i) const {
    i += ws_run(i);
    if (!starts_with(i, "raw")) return std::string::npos;
    i += 3;
    i += ws_run(i);  // then the tag must end: "rawx %}" is not a raw block
    if (starts_with(i, "-%}")) return i + 3 + ws_run(i + 3);
    if (starts_with(i, "%}")) return i + 2;
    return std::string::npos;
  }

  void lex_raw(size_t tag_start, size_t content_start) {
    for (size_t i = content_start; i + 1 < src_.size(); ++i) {
      if (src_[i] != '{' || src_[i + 1] != '%') continue;
      size_t j = i + 2;
      char sign = 0;
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) sign = src_[j++];
      j += ws_run(j);
      if (!starts_with(j, "endraw")) continue;
      j += 6;
      j += ws_run(j);
      size_t end_len = match_block_end(j);
      if (end_len == 0) continue;
      std::string text = src_.substr(content_start, i - content_start);
      strip_text(&text, sign, true);
      emit_data(content_start, std::move(text));
      pos_ = j + end_len;
      line_starting_ = src_[pos_ - 1] == '\n';
      return;
    }
    fail(tag_start, "missing end of raw directive");
  }

  void lex_comment(size_t tag_start, size_t i) {
    for (; i < src_.size(); ++i) {
      size_t end = 0;
      if (starts_with(i, "+#}")) {
        end = i + 3;
      } else if (starts_with(i, "-#}")) {
        end = i + 3 + ws_run(i + 3);
      } else if (starts_with(i, "#}")) {
        end = i + 2 + ((opts_.trim_blocks && starts_with(i + 2, "\n")) ? 1 : 0);
      }
      if (end) {
        pos_ = end;
        line_starting_ = src_[end - 1] == '\n';
        return;
      }
    }
    fail(tag_start, "missing end of comment tag");
  }

  void lex_tag(size_t tag_start, size_t i, bool block) {
    emit(block ? TokenType::kBlockBegin : TokenType::kVariableBegin, tag_start);
    std::vector<std::pair<char, size_t>> brackets;
    size_t n = src_.size();
    while (true) {
      if (i >= n) fail(tag_start, block ? "unclosed statement block: missing '%}'" : "unclosed print statement: missing '}}'");
      if (brackets.empty()) {
        size_t end_len = 0;
        if (block) {
          end_len = match_block_end(i);
        } else if (starts_with(i, "-}}")) {
          end_len = 3 + ws_run(i + 3);
        } else if (starts_with(i, "}}")) {
          end_len = 2;
        }
        if (end_len) {
          emit(block ? TokenType::kBlockEnd : TokenType::kVariableEnd, i);
          pos_ = i + end_len;
          line_starting_ = src_[pos_ - 1] == '\n';
          return;
        }
      }
      size_t w = ws_run(i);
      if (w) {
        i += w;
        continue;
      }
      unsigned char c = static_cast<unsigned char>(src_[i]);
      if (isdigit(c)) {
        i = lex_number(i);
      } else if (isalpha(c) || c == '_') {
        size_t j = i;
        while (j < n && (isalnum(static_cast<unsigned char>(src_[j])) || src_[j] == '_')) ++j;
        emit(TokenType::kName, i, src_.substr(i, j - i));
        i = j;
      } else if (c == '\'' || c == '"') {
        i = lex_string(i);
      } else {
        static const char* kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (const char* t : kTwo)
          if (starts_with(i, t)) op = t;
        if (op.empty() && std::string_view("+-/*%~[](){}><=.:|,;").find(static_cast<char>(c)) != std::string_view::npos)
          op = std::string(1, static_cast<char>(c));
        if (op.empty()) {
          size_t k = i;
          char32_t cp = utf8_next(src_, &k);
          std::string ch;
          utf8_append(&ch, cp);
          fail(i, fmt::format("unexpected char {}", py_string_repr(ch)));
        }
        if (op == "(" || op == "[" || op == "{") {
          brackets.emplace_back(op == "(" ? ')' : (op == "[" ? ']' : '}'), i);
        } else if (op == ")" || op == "]" || op == "}") {
          if (brackets.empty()) fail(i, fmt::format("unexpected '{}'", op));
          char want = brackets.back().first;
          if (want != op[0]) fail(i, fmt::format("unexpected '{}', expected '{}'", op, want));
          brackets.pop_back();
        }
        emit(TokenType::kOperator, i, op);
        i += op.size();
      }
    }
  }

  // float: (\d+_)*\d+((\.(\d+_)*\d+)?e[+-]?(\d+_)*\d+|\.(\d+_)*\d+); integer: 0b/0o/0x/decimal.
  size_t digits_run(size_t i, int base) const {
    // (\d+_)*\d+ in the given base; returns end (== i if no digit)
    auto is_d = [&](char ch) {
      unsigned char u = static_cast<unsigned char>(ch);
      if (base == 16) return isxdigit(u) != 0;
      if (base == 8) return ch >= '0' && ch <= '7';
      if (base == 2) return ch == '0' || ch == '1';
      return isdigit(u) != 0;
    };
    size_t j = i;
    if (j >= src_.size() || !is_d(src_[j])) return i;
    while (j < src_.size()) {
      if (is_d(src_[j])) {
        ++j;
      } else if (src_[j] == '_' && j + 1 < src_.size() && is_d(src_[j + 1])) {
        j += 1;
      } else {
        break;
      }
    }
    return j;
  }

  size_t lex_number(size_t i) {
    size_t n = src_.size();
    bool after_dot = i > 0 && src_[i - 1] == '.';
    size_t int_end = digits_run(i, 10);
    if (!after_dot) {
      size_t j = int_end;
      bool frac = false, expo = false;
      if (j < n && src_[j] == '.') {
        size_t k = digits_run(j + 1, 10);
        if (k > j + 1) {
          frac = true;
          j = k;
        }
      }
      if (j < n && (src_[j] == 'e' || src_[j] == 'E')) {
        size_t k = j + 1;
        if (k < n && (src_[k] == '+' || src_[k] == '-')) ++k;
        size_t m = digits_run(k, 10);
        if (m > k) {
          expo = true;
          j = m;
        }
      }
      if (frac || expo) {
        std::string text;
        for (size_t k = i; k < j; ++k)
          if (src_[k] != '_') text += src_[k];
        Token tok;
        tok.type = TokenType::kFloat;
        tok.text = src_.substr(i, j - i);
        tok.float_value = std::strtod(text.c_str(), nullptr);
        tok.pos = pos_at(i);
        tokens_.push_back(std::move(tok));
        return j;
      }
    }
    int base = 10;
    size_t start = i, j;
    if (src_[i] == '0' && i + 1 < n && std::string_view("bBoOxX").find(src_[i + 1]) != std::string_view::npos) {
      char p = static_cast<char>(tolower(static_cast<unsigned char>(src_[i + 1])));
      base = p == 'b' ? 2 : (p == 'o' ? 8 : 16);
      size_t k = i + 2;
      if (k < n && src_[k] == '_') ++k;
      j = digits_run(k, base);
      if (j == k) fail(i, "invalid integer literal");
      start = k;
    } else if (src_[i] == '0') {
      j = i + 1;  // 0(_?0)*
      while (j < n && (src_[j] == '0' || (src_[j] == '_' && j + 1 < n && src_[j + 1] == '0'))) ++j;
    } else {
      j = int_end;
    }
    std::string digits;
    for (size_t k = start; k < j; ++k)
      if (src_[k] != '_') digits += src_[k];
    errno = 0;
    char* endp = nullptr;
    long long v = std::strtoll(digits.c_str(), &endp, base);
    if (errno == ERANGE) fail(i, "integer literal too large (only 64-bit integers are supported)");
    Token tok;
    tok.type = TokenType::kInteger;
    tok.text = src_.substr(i, j - i);
    tok.int_value = v;
    tok.pos = pos_at(i);
    tokens_.push_back(std::move(tok));
    return j;
  }

  static int hex_val(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  size_t lex_string(size_t i) {
    char q = src_[i];
    size_t j = i + 1, n = src_.size();
    while (j < n && src_[j] != q) j += (src_[j] == '\\' && j + 1 < n) ? 2 : 1;
    if (j >= n) fail(i, "unterminated string literal");
    // Python "unicode-escape" decoding of the body.
    std::string out;
    for (size_t k = i + 1; k < j;) {
      char c = src_[k];
      if (c != '\\' || k + 1 >= j) {
        out += c;
        ++k;
        continue;
      }
      char e = src_[k + 1];
      k += 2;
      switch (e) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          int len = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          char32_t cp = 0;
          for (int d = 0; d < len; ++d) {
            int h = k + d < j ? hex_val(src_[k + d]) : -1;
            if (h < 0) fail(k - 2, fmt::format("truncated \\{} escape in string literal", e));
            cp = cp * 16 + static_cast<char32_t>(h);
          }
          if (cp > 0x10FFFF) fail(k - 2, "illegal Unicode character in string literal");
          k += len;
          utf8_append(&out, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int d = 0; d < 2 && k < j && src_[k] >= '0' && src_[k] <= '7'; ++d) cp = cp * 8 + (src_[k++] - '0');
            utf8_append(&out, cp);
          } else if (e == 'N') {
            fail(k - 2, "\\N{...} escapes are not supported");
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    Token tok;
    tok.type = TokenType::kString;
    tok.text = std::move(out);
    tok.pos = pos_at(i);
    tokens_.push_back(std::move(tok));
    return j + 1;
  }

  std::string src_;
  LexerOptions opts_;
  std::vector<size_t> line_starts_;
  mutable size_t last_line_ = 0, last_offset_ = 0, last_col_ = 1;  // pos_at's previous answer
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  bool line_starting_ = true;
};

std::string normalize_source(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '\r') {
      out += '\n';
      if (i + 1 < in.size() && in[i + 1] == '\n') ++i;
    } else {
      out += in[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(normalize_source(source), options).run();
}

}  // namespace pagoda::tmpl

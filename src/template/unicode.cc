#include "template/unicode.h"

#include "common/utf8.h"

#include <utf8proc.h>

#include <algorithm>

namespace pagoda::tmpl {

char32_t utf8_next(std::string_view s, size_t* i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), k = *i;
  unsigned char c = p[k];
  if (c < 0x80) {
    *i = k + 1;
    return c;
  }
  int len = 0;
  char32_t cp = 0;
  if ((c & 0xE0) == 0xC0) {
    len = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4;
    cp = c & 0x07;
  } else {
    *i = k + 1;
    return 0xFFFD;
  }
  if (k + len > n) {
    *i = k + 1;
    return 0xFFFD;
  }
  for (int j = 1; j < len; ++j) {
    unsigned char cc = p[k + j];
    if ((cc & 0xC0) != 0x80) {
      *i = k + 1;
      return 0xFFFD;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  *i = k + len;
  return cp;
}

void utf8_append(std::string* out, char32_t cp) { append_utf8(cp, out); }

std::vector<char32_t> utf8_decode(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) out.push_back(utf8_next(s, &i));
  return out;
}

std::string utf8_encode(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t c : cps) utf8_append(&out, c);
  return out;
}

size_t utf8_length(std::string_view s) {
  if (is_ascii(s)) return s.size();
  size_t i = 0, n = 0;
  while (i < s.size()) {
    utf8_next(s, &i);
    ++n;
  }
  return n;
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

bool py_isspace(char32_t c) {
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E:
    case 0x1F: case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool py_isprintable(char32_t c) {
  if (c == ' ') return true;
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

bool py_iscased_upper(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT;
}
bool py_iscased_lower(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_LL;
}

namespace {

bool is_cased(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

// Full upper-case mapping for the few special cases Python handles and utf8proc's simple
// mapping does not (the common ones); everything else uses the simple mapping.
void append_upper(std::string* out, char32_t c) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c >= 'a' && c <= 'z' ? c - 32 : c));
    return;
  }
  if (c == 0xDF) {  // sharp s
    *out += "SS";
    return;
  }
  utf8_append(out, static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))));
}

void append_lower(std::string* out, char32_t c) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    return;
  }
  if (c == 0x130) {  // capital I with dot above -> i + combining dot
    *out += "i\xCC\x87";
    return;
  }
  utf8_append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
}

void append_title(std::string* out, char32_t c) {
  if (c < 0x80) {
    append_upper(out, c);
    return;
  }
  if (c == 0xDF) {
    *out += "Ss";
    return;
  }
  utf8_append(out, static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c))));
}

bool in_set(char32_t c, const std::vector<char32_t>& set) {
  return std::find(set.begin(), set.end(), c) != set.end();
}

}  // namespace

std::string py_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) append_upper(&out, utf8_next(s, &i));
  return out;
}

std::string py_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) append_lower(&out, utf8_next(s, &i));
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out;
  size_t i = 0;
  bool first = true;
  while (i < s.size()) {
    char32_t c = utf8_next(s, &i);
    if (first)
      append_title(&out, c);
    else
      append_lower(&out, c);
    first = false;
  }
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  size_t i = 0;
  bool prev_cased = false;
  while (i < s.size()) {
    char32_t c = utf8_next(s, &i);
    if (prev_cased)
      append_lower(&out, c);
    else
      append_title(&out, c);
    prev_cased = is_cased(c);
  }
  return out;
}

std::string jinja_title(std::string_view s) {
  // "".join(item[0].upper() + item[1:].lower() for item in re.split(r"([-\s({\[<]+)", s) if item)
  // Separator runs are items too; upper()/lower() leave them unchanged.
  auto cps = utf8_decode(s);
  auto is_sep = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c); };
  std::string out;
  size_t i = 0;
  while (i < cps.size()) {
    size_t j = i;
    bool sep = is_sep(cps[i]);
    while (j < cps.size() && is_sep(cps[j]) == sep) ++j;
    if (sep) {
      for (size_t k = i; k < j; ++k) utf8_append(&out, cps[k]);
    } else {
      append_upper(&out, cps[i]);
      for (size_t k = i + 1; k < j; ++k) append_lower(&out, cps[k]);
    }
    i = j;
  }
  return out;
}

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  auto cps = utf8_decode(s);
  std::vector<char32_t> set;
  if (chars) set = utf8_decode(*chars);
  auto strip_it = [&](char32_t c) { return chars ? in_set(c, set) : py_isspace(c); };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return utf8_encode(std::vector<char32_t>(cps.begin() + b, cps.begin() + e));
}

std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (sep) {
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
        size_t f = s.find(*sep, pos);
        if (f == std::string_view::npos) break;
        out.emplace_back(s.substr(pos, f - pos));
        pos = f + sep->size();
      }
      out.emplace_back(s.substr(pos));
    } else {
      size_t end = s.size();
      std::vector<std::string> rev;
      while (maxsplit < 0 || static_cast<int64_t>(rev.size()) < maxsplit) {
        if (end < sep->size()) break;
        size_t f = s.rfind(*sep, end - sep->size());
        if (f == std::string_view::npos) break;
        rev.emplace_back(s.substr(f + sep->size(), end - f - sep->size()));
        end = f;
      }
      rev.emplace_back(s.substr(0, end));
      out.assign(rev.rbegin(), rev.rend());
    }
    return out;
  }
  auto cps = utf8_decode(s);
  if (!from_right) {
    size_t i = 0, n = cps.size();
    while (true) {
      while (i < n && py_isspace(cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        size_t e = n;
        while (e > i && py_isspace(cps[e - 1])) --e;
        out.push_back(utf8_encode(std::vector<char32_t>(cps.begin() + i, cps.begin() + e)));
        break;
      }
      size_t j = i;
      while (j < n && !py_isspace(cps[j])) ++j;
      out.push_back(utf8_encode(std::vector<char32_t>(cps.begin() + i, cps.begin() + j)));
      i = j;
    }
  } else {
    std::vector<std::string> rev;
    size_t e = cps.size();
    while (true) {
      while (e > 0 && py_isspace(cps[e - 1])) --e;
      if (e == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(rev.size()) >= maxsplit) {
        size_t b = 0;
        while (b < e && py_isspace(cps[b])) ++b;
        rev.push_back(utf8_encode(std::vector<char32_t>(cps.begin() + b, cps.begin() + e)));
        break;
      }
      size_t b = e;
      while (b > 0 && !py_isspace(cps[b - 1])) --b;
      rev.push_back(utf8_encode(std::vector<char32_t>(cps.begin() + b, cps.begin() + e)));
      e = b;
    }
    out.assign(rev.rbegin(), rev.rend());
  }
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s) {
  std::vector<std::string> out;
  auto cps = utf8_decode(s);
  size_t i = 0, start = 0, n = cps.size();
  while (i < n) {
    char32_t c = cps[i];
    bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
               c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    out.push_back(utf8_encode(std::vector<char32_t>(cps.begin() + start, cps.begin() + i)));
    if (c == '\r' && i + 1 < n && cps[i + 1] == '\n') ++i;
    ++i;
    start = i;
  }
  if (start < n) out.push_back(utf8_encode(std::vector<char32_t>(cps.begin() + start, cps.end())));
  return out;
}

std::string py_replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between every code point (and at both ends), up to count times.
    size_t i = 0;
    int64_t done = 0;
    if (count != 0) {
      out += to;
      ++done;
    }
    while (i < s.size()) {
      size_t b = i;
      utf8_next(s, &i);
      out.append(s.substr(b, i - b));
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(from, pos);
    if (f == std::string_view::npos) break;
    out.append(s.substr(pos, f - pos));
    out.append(to);
    pos = f + from.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

}  // namespace pagoda::tmpl

// UTF-8 helpers with Python `str` semantics, for the chat-template interpreter.
//
// Template strings are stored as UTF-8 std::string; Python operates on code points, so lengths,
// indexing, slicing, whitespace and case mapping go through these helpers. Invalid UTF-8 bytes
// decode to U+FFFD one byte at a time (never read past the end), so any byte string is safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::tmpl {

// Decodes the code point at s[*i] and advances *i past it (1..4 bytes).
char32_t utf8_next(std::string_view s, size_t* i);
void utf8_append(std::string* out, char32_t cp);
std::vector<char32_t> utf8_decode(std::string_view s);
std::string utf8_encode(const std::vector<char32_t>& cps);
// Number of code points (Python len()).
size_t utf8_length(std::string_view s);
bool is_ascii(std::string_view s);

// Python str.isspace() for one code point.
bool py_isspace(char32_t cp);
// Python str.isprintable() for one code point (used by repr()).
bool py_isprintable(char32_t cp);
bool py_iscased_upper(char32_t cp);
bool py_iscased_lower(char32_t cp);

// Python str methods (no regex, no locale).
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);  // first upper (title case), rest lower
std::string py_title(std::string_view s);       // str.title()
std::string jinja_title(std::string_view s);    // Jinja's |title filter (splits on -\s({[<)
// strip/lstrip/rstrip: chars == nullptr strips whitespace.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split(sep=None, maxsplit=-1) and rsplit; sep == nullptr splits on whitespace runs.
std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit, bool from_right);
// str.splitlines() (no keepends).
std::vector<std::string> py_splitlines(std::string_view s);
std::string py_replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);

}  // namespace pagoda::tmpl

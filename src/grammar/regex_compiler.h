// Regular expressions (the ECMAScript subset JSON Schema `pattern` and vLLM's guided_regex use)
// -> grammar expressions. The whole text must match (the pattern is anchored at both ends, as
// structured-output engines treat it; leading ^ and trailing $ are accepted and ignored).
//
// Supported: literals (UTF-8), ., classes [...] / [^...] with ranges, \d \w \s \D \W \S (also in
// classes), escapes \n \r \t \f \v \0 \xHH \uHHHH \u{H...}, groups (...) and (?:...), |, the
// quantifiers * + ? {n} {n,} {n,m} (lazy forms match the same language). Not supported (an
// error naming it): backreferences, lookaround, word boundaries, anchors inside the pattern.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace pagoda::grammar {

Result<ExprPtr> parse_regex(std::string_view pattern);
// A grammar whose root matches exactly the pattern.
Result<Grammar> compile_regex(std::string_view pattern);

// Decodes one UTF-8 code point at s[*i] (advancing *i); malformed bytes decode as themselves.
uint32_t decode_utf8(std::string_view s, size_t* i);

}  // namespace pagoda::grammar

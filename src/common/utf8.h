// UTF-8 encoding shared by the tokenizer and the template engine.
#pragma once

#include <string>

namespace pagoda {

// Appends the UTF-8 encoding of `cp`; surrogates and values above U+10FFFF become U+FFFD.
void append_utf8(char32_t cp, std::string* out);

}  // namespace pagoda

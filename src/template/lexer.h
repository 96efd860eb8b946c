// Lexer for Jinja2 template source, reproducing jinja2.lexer with the settings Hugging Face
// transformers uses for chat templates (trim_blocks=True, lstrip_blocks=True,
// keep_trailing_newline=False):
//   - newlines (\r\n, \r, \n) become \n; one trailing newline of the source is dropped;
//   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag, `-%}`, `-}}`, `-#}` all after;
//   - trim_blocks drops the first newline after `%}` and `#}`;
//   - lstrip_blocks drops spaces/tabs between a line start and `{%` / `{#` (`{%+` keeps them);
//   - `{% raw %}...{% endraw %}` yields its contents as data; comments yield nothing.
// Inside tags it produces names, numbers, strings (escapes decoded as Python does) and
// operators, and balances brackets so `}}` inside a dict literal does not end a tag.
// Errors throw TemplateException (value.h) with the line:column of the offending character.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "template/value.h"

namespace pagoda::tmpl {

enum class TokenType {
  kData,
  kVariableBegin,
  kVariableEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string text;  // data, name, decoded string value, or operator
  int64_t int_value = 0;
  double float_value = 0;
  SourcePos pos;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options = {});
const char* token_type_name(TokenType t);

}  // namespace pagoda::tmpl

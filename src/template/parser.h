// Parser: tokens (lexer.h) -> AST (ast.h), following jinja2.parser's grammar and precedence:
//   condexpr: or ('if' or ('else' condexpr)?)*      or: and ('or' and)*     and: not ('and' not)*
//   not: 'not' not | compare                        compare: math1 (op math1)*  (op incl. in, not in)
//   math1: concat (('+'|'-') concat)*               concat: math2 ('~' math2)*
//   math2: pow (('*'|'/'|'//'|'%') pow)*            pow: unary ('**' unary)*
//   unary: ('-'|'+') unary-without-filters | primary; then postfix ([...], .attr, (...)) and
//          filters / tests (`|f(...)`, `is [not] t ...`)
// Statements: if/elif/else, for (with `if` filter, else, recursive not supported), set (incl.
// namespace attributes, tuples, block set with filters), macro, call, filter, with, break,
// continue, raw (in the lexer) and transformers' generation block. Unknown tags are errors.
// Nesting depth is bounded (kMaxParseDepth) so hostile input cannot exhaust the stack.
#pragma once

#include <cstddef>
#include <string_view>

#include "template/ast.h"
#include "template/lexer.h"

namespace pagoda::tmpl {

constexpr int kMaxParseDepth = 200;
// Largest template source accepted (real chat templates are a few KiB to a few tens of KiB).
// Lexing and parsing are linear in the source.
constexpr size_t kMaxTemplateBytes = 1 << 20;

// Throws TemplateException with line:column on a syntax error, or when the source is larger
// than kMaxTemplateBytes.
Body parse_template(std::string_view source, const LexerOptions& options = {});

}  // namespace pagoda::tmpl

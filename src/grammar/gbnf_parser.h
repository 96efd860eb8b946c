// GBNF (llama.cpp's grammar format) -> Grammar.
//
//   root  ::= "{" ws pair ("," ws pair)* "}"      # rules: name ::= alternatives
//   pair  ::= [a-z]+ ":" ws ( "1" | "2" )?        # literals, classes, groups, * + ? {m} {m,} {m,n}
//   ws    ::= [ \t\n]*
//
// Literals "..." and classes [...] / [^...] take the escapes \n \r \t \\ \" \] \- \xHH \uHHHH
// \UHHHHHHHH; `.` is any character; names are [A-Za-z0-9_-]+; `#` starts a comment. A rule may
// span lines (a new rule starts at `name ::=`). The start rule is `root`.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace pagoda::grammar {

Result<Grammar> compile_gbnf(std::string_view text);

}  // namespace pagoda::grammar

// Regex matchers for pre-tokenizer splits.
//
// A Matcher reports the non-overlapping, non-empty, leftmost matches of one pattern in a piece of
// text, in order, with the semantics of the Oniguruma engine behind Hugging Face tokenizers' Split
// (greedy backtracking, `\s` = White_Space, `$` = end of text or before '\n'). Matching sees only
// the piece it is given: look-ahead stops at its end. Empty matches are skipped (they never become
// pieces in Hugging Face tokenizers either).
//
// make_regex_matcher() picks the fastest engine that is exact for the pattern:
//   1. hand-written matchers for the widely used alternation patterns (GPT-2's ByteLevel regex,
//      Llama 3's, Qwen2's), driven by code point classes from utf8proc;
//   2. a small backtracking engine for patterns that are a plain sequence of character classes
//      with quantifiers (`[\r\n]`, `\s?\p{L}+`, `\p{N}{1,3}`, `[0-9][0-9][0-9]`, `\s+$`,
//      DeepSeek's literal character ranges ...);
//   3. ICU's regex engine for anything else (with `\s`/`\S` rewritten to White_Space and
//      Oniguruma's line semantics), the fallback; ICU and Oniguruma can differ on rare constructs.
//
// Thread safety: matchers are immutable; find_all may run concurrently from many threads.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "tokenizer/function_ref.h"

namespace pagoda {

class Matcher {
 public:
  virtual ~Matcher() = default;
  // Calls on_match(begin, end) for every match, left to right (byte offsets into text).
  virtual void find_all(std::string_view text, FunctionRef<void(size_t, size_t)> on_match) const = 0;
  // "gpt2", "llama3", "qwen2", "simple", "literal" or "icu": which engine runs the pattern.
  virtual const char* engine() const = 0;
};

// The regex patterns of the hand-written matchers, as written in tokenizer.json files.
extern const char kGpt2Pattern[];        // GPT-2 / ByteLevel pre-tokenizer
extern const char kGpt2PatternNoTail[];  // the same without the final `|\s+` (same splits)
extern const char kLlama3Pattern[];      // Llama 3: digits in groups of up to three
extern const char kQwen2Pattern[];       // Qwen2/2.5/3: single digits

// A matcher for `pattern` (Oniguruma syntax); kInvalidArgument if no engine accepts it.
Result<std::unique_ptr<Matcher>> make_regex_matcher(std::string_view pattern);
// A matcher for a literal string (Split with {"String": ...}); an empty literal never matches.
std::unique_ptr<Matcher> make_literal_matcher(std::string literal);
// ICU's engine on `pattern` (after the `\s` rewrite); used as the fallback and by tests as an
// independent oracle for the hand-written matchers.
Result<std::unique_ptr<Matcher>> make_icu_matcher(std::string_view pattern);
// The small class-sequence engine, or nullptr if the pattern is outside its subset.
std::unique_ptr<Matcher> make_simple_matcher(std::string_view pattern);

}  // namespace pagoda

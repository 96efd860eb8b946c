// ICU regex engine behind the Matcher interface: the fallback for patterns outside the
// hand-written and simple engines, and the independent oracle of the pre-tokenizer tests.
//
// Oniguruma (Hugging Face tokenizers) differs from ICU's defaults in ways that matter for
// tokenizers, so the pattern is adapted before compiling:
//   * `\s` / `\S` become \p{White_Space} / \P{White_Space} (ICU's \s is [\t\n\f\r\p{Z}], without
//     U+000B and U+0085);
//   * UREGEX_MULTILINE | UREGEX_UNIX_LINES: `^` and `$` match at '\n' line boundaries, as in
//     Oniguruma's Ruby syntax, and only '\n' ends a line.
// The text is matched in place through a UTF-8 UText, so match offsets are byte offsets.
#include <unicode/regex.h>
#include <unicode/utext.h>

#include <memory>

#include "tokenizer/regex_matcher.h"
#include "tokenizer/unicode.h"

namespace pagoda {
namespace {

std::string adapt_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (e == 's') {
        out += "\\p{White_Space}";
      } else if (e == 'S') {
        out += "\\P{White_Space}";
      } else {
        out.push_back('\\');
        out.push_back(e);
      }
      ++i;
      continue;
    }
    out.push_back(p[i]);
  }
  return out;
}

struct UTextCloser {
  void operator()(UText* t) const { utext_close(t); }
};

class IcuMatcher final : public Matcher {
 public:
  explicit IcuMatcher(std::unique_ptr<icu::RegexPattern> pattern) : pattern_(std::move(pattern)) {}

  void find_all(std::string_view text, FunctionRef<void(size_t, size_t)> on_match) const override {
    if (text.empty()) return;
    UErrorCode st = U_ZERO_ERROR;
    std::unique_ptr<UText, UTextCloser> ut(utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &st));
    if (U_FAILURE(st)) return;
    std::unique_ptr<icu::RegexMatcher> m(pattern_->matcher(st));
    if (U_FAILURE(st)) return;
    m->reset(ut.get());
    while (m->find(st) && U_SUCCESS(st)) {
      const int64_t b = m->start64(st);
      const int64_t e = m->end64(st);
      if (U_FAILURE(st)) return;
      if (e > b) on_match(static_cast<size_t>(b), static_cast<size_t>(e));
    }
  }
  const char* engine() const override { return "icu"; }

 private:
  std::unique_ptr<icu::RegexPattern> pattern_;
};

}  // namespace

Result<std::unique_ptr<Matcher>> make_icu_matcher(std::string_view pattern) {
  if (!unicode::is_valid_utf8(pattern)) return invalid_argument("regex pattern is not valid UTF-8");
  const std::string adapted = adapt_pattern(pattern);
  icu::UnicodeString upattern = icu::UnicodeString::fromUTF8(icu::StringPiece(adapted.data(), static_cast<int32_t>(adapted.size())));
  UParseError perr{};
  UErrorCode st = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexPattern> compiled(
      icu::RegexPattern::compile(upattern, UREGEX_MULTILINE | UREGEX_UNIX_LINES, perr, st));
  if (U_FAILURE(st) || !compiled) {
    return invalid_argument("cannot compile regex pattern '{}': {} at offset {}", pattern, u_errorName(st), perr.offset);
  }
  return std::unique_ptr<Matcher>(new IcuMatcher(std::move(compiled)));
}

}  // namespace pagoda

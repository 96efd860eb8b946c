// Normalizers: rewrite a text segment (the text between added tokens) before pre-tokenization.
//
//   * Hugging Face normalizers: NFC/NFD/NFKC/NFKD (utf8proc), Lowercase, Strip, Prepend, Replace
//     (literal or regex pattern), Sequence.
//   * SentencePiece's normalizer (SpmNormalizer), used for `.model` files and GGUF "llama"
//     vocabularies: dummy "▁" prefix, optional removal of extra spaces, ' ' -> "▁", and, for
//     `.model` files, SentencePiece's replacement of each malformed UTF-8 byte by U+FFFD.
//
// Thread safety: immutable; normalize() may run concurrently.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex_matcher.h"
#include "tokenizer/unicode.h"

namespace pagoda {

inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁"

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Writes the normalized form of `in` to *out (replacing its content). `at_start`: the segment
  // begins at the start of the input text.
  virtual void normalize(std::string_view in, bool at_start, std::string* out) const = 0;
  virtual std::string describe() const = 0;
};

std::unique_ptr<Normalizer> make_unicode_normalizer(unicode::NormalForm form);
std::unique_ptr<Normalizer> make_lowercase_normalizer();
// HF Strip: removes leading and/or trailing White_Space.
std::unique_ptr<Normalizer> make_strip_normalizer(bool left, bool right);
// HF Prepend: prefixes non-empty text.
std::unique_ptr<Normalizer> make_prepend_normalizer(std::string prefix);
// HF Replace: every match of `matcher` becomes `content`.
std::unique_ptr<Normalizer> make_replace_normalizer(std::unique_ptr<Matcher> matcher, std::string content);
std::unique_ptr<Normalizer> make_sequence_normalizer(std::vector<std::unique_ptr<Normalizer>> steps);

struct SpmNormalizerOptions {
  bool add_dummy_prefix = true;           // "▁" before non-empty text
  bool remove_extra_whitespaces = false;  // drop leading/trailing ' ', collapse runs of ' '
  bool escape_whitespaces = true;         // ' ' -> "▁"
  bool replace_malformed = false;         // each malformed UTF-8 byte -> U+FFFD (SentencePiece)
};
std::unique_ptr<Normalizer> make_spm_normalizer(const SpmNormalizerOptions& options);

}  // namespace pagoda

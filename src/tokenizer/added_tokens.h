// AddedTokenMatcher: finds added / special tokens in raw input text before normalization, and
// splits the text into token segments and plain-text segments (HF AddedVocabulary,
// llama.cpp's tokenizer_st_partition).
//
// Matching is leftmost-longest over all enabled tokens. Special tokens (control tokens: BOS, EOS,
// <|im_start|> ...) are enabled only when the caller asks for it (parse_special); non-special
// added tokens (user-defined) are always matched. lstrip / rstrip make a token absorb the
// White_Space before / after it (HF AddedToken options).
//
// Thread safety: immutable after construction.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;  // gated by parse_special
  bool lstrip = false;
  bool rstrip = false;
};

struct TextSegment {
  size_t begin = 0;  // byte range in the input (for a token: the token's own text)
  size_t end = 0;
  int32_t id = -1;   // token id, or -1 for plain text
};

class AddedTokenMatcher {
 public:
  // Collects a token; call finish() after the last one, before split().
  void add(AddedToken token);
  void finish();
  bool empty() const { return tokens_.empty(); }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

  // Splits text into segments (in order, plain-text segments non-empty).
  void split(std::string_view text, bool parse_special, std::vector<TextSegment>* out) const;

 private:
  std::vector<AddedToken> tokens_;
  std::array<std::vector<uint32_t>, 256> by_first_byte_;  // indices into tokens_, longest first
};

}  // namespace pagoda

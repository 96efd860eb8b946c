// StreamingDetokenizer: incremental decoding for streamed generation.
//
// push(id) returns the text that became final with this token; flush() returns what is left at
// the end. The concatenation of all push() results and flush() equals
// tokenizer->decode(all ids, skip_special) exactly, and every returned piece is valid UTF-8:
// bytes of a character split across tokens (byte-fallback pieces, byte-level tokens) are held
// back until the character is complete; a sequence that can no longer become valid is emitted as
// U+FFFD at once, an incomplete one at flush().
//
// Thread safety: one object per stream (mutable state); the Tokenizer it holds is shared.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"

namespace pagoda {

class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special = true);

  std::string push(int32_t id);
  std::string flush();
  // Forgets all state, as if newly constructed.
  void reset();

 private:
  std::shared_ptr<const Tokenizer> tok_;
  bool skip_special_;
  bool first_ = true;       // no token has reached the decoder yet
  int strip_left_ = 0;      // leading spaces still to strip (decoder's Strip after Fuse)
  std::string pending_;     // bytes not yet emitted (an incomplete UTF-8 sequence)
};

}  // namespace pagoda

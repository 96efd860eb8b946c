#include "tokenizer/streaming_detokenizer.h"

#include "tokenizer/unicode.h"

namespace pagoda {

StreamingDetokenizer::StreamingDetokenizer(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special)
    : tok_(std::move(tokenizer)), skip_special_(skip_special) {
  reset();
}

void StreamingDetokenizer::reset() {
  first_ = true;
  strip_left_ = tok_->strip_leading_spaces();
  pending_.clear();
}

std::string StreamingDetokenizer::push(int32_t id) {
  if (id < 0 || id >= tok_->vocab_size()) return {};
  if (skip_special_ && tok_->is_special(id)) return {};
  const size_t old = pending_.size();
  tok_->append_token_bytes(id, first_, &pending_);
  first_ = false;
  if (strip_left_ > 0) {
    // Only reachable while nothing but stripped spaces has been produced, so pending_ held
    // nothing before this token.
    size_t k = old;
    while (k < pending_.size() && strip_left_ > 0 && pending_[k] == ' ') {
      ++k;
      --strip_left_;
    }
    if (k < pending_.size()) strip_left_ = 0;
    pending_.erase(old, k - old);
  }
  std::string out;
  const size_t used = unicode::append_lossy_utf8(pending_, /*final=*/false, &out);
  pending_.erase(0, used);
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out;
  unicode::append_lossy_utf8(pending_, /*final=*/true, &out);
  pending_.clear();
  return out;
}

}  // namespace pagoda

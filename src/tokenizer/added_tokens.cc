#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace pagoda {

void AddedTokenMatcher::add(AddedToken token) {
  if (token.content.empty() || token.id < 0) return;
  tokens_.push_back(std::move(token));
}

void AddedTokenMatcher::finish() {
  for (auto& bucket : by_first_byte_) bucket.clear();
  for (uint32_t i = 0; i < tokens_.size(); ++i) by_first_byte_[static_cast<uint8_t>(tokens_[i].content[0])].push_back(i);
  for (auto& bucket : by_first_byte_)
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](uint32_t a, uint32_t b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
}

namespace {

// End of the White_Space run starting at i.
size_t skip_space_forward(std::string_view s, size_t i) {
  while (i < s.size()) {
    unicode::Unit u = unicode::unit_at(s, i);
    if (!(u.flags & unicode::kSpace)) break;
    i += u.len;
  }
  return i;
}

// Start of the White_Space run that ends at `end`, not going below `floor`.
size_t skip_space_backward(std::string_view s, size_t floor, size_t end) {
  // Walk forward from floor, remembering where the last trailing run of spaces started.
  size_t i = floor, run_start = end;
  bool in_run = false;
  while (i < end) {
    unicode::Unit u = unicode::unit_at(s, i);
    if (u.flags & unicode::kSpace) {
      if (!in_run) run_start = i;
      in_run = true;
    } else {
      in_run = false;
    }
    i += u.len;
  }
  return in_run ? run_start : end;
}

}  // namespace

void AddedTokenMatcher::split(std::string_view text, bool parse_special, std::vector<TextSegment>* out) const {
  out->clear();
  size_t text_start = 0;  // start of the pending plain-text segment
  size_t i = 0;
  while (i < text.size()) {
    const auto& bucket = by_first_byte_[static_cast<uint8_t>(text[i])];
    const AddedToken* hit = nullptr;
    for (uint32_t idx : bucket) {
      const AddedToken& t = tokens_[idx];
      if (t.special && !parse_special) continue;
      if (text.compare(i, t.content.size(), t.content) == 0) {
        hit = &t;
        break;  // longest first
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t text_end = i;
    if (hit->lstrip) text_end = skip_space_backward(text, text_start, i);
    if (text_end > text_start) out->push_back({text_start, text_end, -1});
    out->push_back({i, i + hit->content.size(), hit->id});
    i += hit->content.size();
    if (hit->rstrip) i = skip_space_forward(text, i);
    text_start = i;
  }
  if (text.size() > text_start) out->push_back({text_start, text.size(), -1});
}

}  // namespace pagoda

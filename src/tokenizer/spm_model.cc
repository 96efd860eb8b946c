#include "tokenizer/spm_model.h"

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

#include "tokenizer/unicode.h"

namespace pagoda {

SpmModel::SpmModel(const std::vector<std::string>& pieces, const std::vector<float>& scores,
                   const std::vector<TokenType>& types, const SpmOptions& options)
    : scores_(scores), types_(types), options_(options) {
  scores_.resize(pieces.size(), 0.0f);
  types_.resize(pieces.size(), TokenType::kNormal);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    switch (types_[i]) {
      case TokenType::kControl:
      case TokenType::kUnknown:
      case TokenType::kByte:
        reserved_.insert(pieces[i], id);
        break;
      case TokenType::kUnused:
        has_unused_ = true;
        pieces_.insert(pieces[i], id);
        break;
      case TokenType::kUserDefined:
        if (options_.inline_user_defined && !pieces[i].empty())
          user_defined_[static_cast<uint8_t>(pieces[i][0])].push_back(pieces[i]);
        pieces_.insert(pieces[i], id);
        break;
      default:
        pieces_.insert(pieces[i], id);
        break;
    }
  }
  // Chunking is exact if no piece a chunk cut could split exists: none holds "▁" right after
  // another character (user-defined pieces included, since they are matched inline).
  constexpr std::string_view kSpace = "\xE2\x96\x81";
  chunk_at_spaces_ = true;
  for (size_t i = 0; i < pieces.size() && chunk_at_spaces_; ++i) {
    if (types_[i] == TokenType::kControl || types_[i] == TokenType::kUnknown || types_[i] == TokenType::kByte) continue;
    const std::string& p = pieces[i];
    for (size_t k = p.find(kSpace, 1); k != std::string::npos; k = p.find(kSpace, k + 1)) {
      if (k < kSpace.size() || std::string_view(p).substr(k - kSpace.size(), kSpace.size()) != kSpace) {
        chunk_at_spaces_ = false;
        break;
      }
    }
  }
  for (auto& bucket : user_defined_)
    std::stable_sort(bucket.begin(), bucket.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (int b = 0; b < 256; ++b) byte_piece_[b] = piece_to_id(fmt::format("<0x{:02X}>", b));
}

int32_t SpmModel::piece_to_id(std::string_view piece) const {
  int32_t id = find_id(reserved_, piece);
  if (id >= 0) return id;
  return find_id(pieces_, piece);
}

size_t SpmModel::match_user_defined(std::string_view text) const {
  for (const std::string& u : user_defined_[static_cast<uint8_t>(text[0])])
    if (text.substr(0, u.size()) == u) return u.size();
  return 0;
}

void SpmModel::emit(std::string_view piece, std::vector<int32_t>* out) const {
  const int32_t id = piece_to_id(piece);
  if (id >= 0 && types_[static_cast<size_t>(id)] != TokenType::kUnknown) {
    out->push_back(id);
    return;
  }
  if (options_.byte_fallback) {
    for (char c : piece) {
      const int32_t b = byte_piece_[static_cast<uint8_t>(c)];
      if (b >= 0) {
        out->push_back(b);
      } else if (options_.unk_id >= 0) {
        out->push_back(options_.unk_id);
      }
    }
    return;
  }
  if (options_.unk_id >= 0) out->push_back(options_.unk_id);
}

void SpmModel::encode(std::string_view text, std::vector<int32_t>* out, SpmScratch* s) const {
  if (text.empty()) return;
  if (!chunk_at_spaces_) {
    encode_chunk(text, out, s);
    return;
  }
  constexpr std::string_view kSpace = "\xE2\x96\x81";
  auto emit_chunk = [&](std::string_view chunk) {
    if (!s->use_cache || chunk.size() > 64) {
      encode_chunk(chunk, out, s);
      return;
    }
    auto it = s->cache.find(chunk);
    if (it != s->cache.end()) {
      out->insert(out->end(), s->cache_ids.begin() + it->second.first,
                  s->cache_ids.begin() + it->second.first + it->second.second);
      return;
    }
    const size_t before = out->size();
    encode_chunk(chunk, out, s);
    const uint32_t offset = static_cast<uint32_t>(s->cache_ids.size());
    s->cache_ids.insert(s->cache_ids.end(), out->begin() + static_cast<ptrdiff_t>(before), out->end());
    s->cache.emplace(std::string(chunk), std::make_pair(offset, static_cast<uint32_t>(out->size() - before)));
  };
  // Cut before every "▁" that follows something other than "▁".
  size_t start = 0;
  for (size_t k = text.find(kSpace, 1); k != std::string_view::npos; k = text.find(kSpace, k + 1)) {
    if (k >= kSpace.size() && text.substr(k - kSpace.size(), kSpace.size()) == kSpace) continue;
    emit_chunk(text.substr(start, k - start));
    start = k;
  }
  emit_chunk(text.substr(start));
}

void SpmModel::encode_chunk(std::string_view text, std::vector<int32_t>* out, SpmScratch* s) const {
  auto& syms = s->syms;
  auto& heap = s->heap;
  syms.clear();
  heap.clear();
  for (size_t i = 0; i < text.size();) {
    size_t len = 0;
    bool frozen = false;
    if (options_.inline_user_defined) {
      len = match_user_defined(text.substr(i));
      frozen = len > 0;
    }
    if (!frozen) len = unicode::unit_length(text.substr(i));
    const int32_t k = static_cast<int32_t>(syms.size());
    syms.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(len), k - 1, -1, frozen});
    if (k > 0) syms[k - 1].next = k;
    i += len;
  }

  // Max-heap on (score, -left).
  auto worse = [](const SpmScratch::Cand& a, const SpmScratch::Cand& b) {
    return a.score != b.score ? a.score < b.score : a.left > b.left;
  };
  std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>> rev_merge;
  auto push = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0 || syms[left].frozen || syms[right].frozen) return;
    const uint32_t size = syms[left].len + syms[right].len;
    const std::string_view piece = text.substr(syms[left].begin, size);
    const int32_t id = pieces_.find(piece);
    if (id < 0) return;
    heap.push_back({scores_[static_cast<size_t>(id)], left, right, size});
    std::push_heap(heap.begin(), heap.end(), worse);
    if (has_unused_ && types_[static_cast<size_t>(id)] == TokenType::kUnused) {
      rev_merge[piece] = {text.substr(syms[left].begin, syms[left].len), text.substr(syms[right].begin, syms[right].len)};
    }
  };
  for (int32_t k = 0; k + 1 < static_cast<int32_t>(syms.size()); ++k) push(k, k + 1);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), worse);
    const SpmScratch::Cand c = heap.back();
    heap.pop_back();
    SpmScratch::Sym& left = syms[c.left];
    SpmScratch::Sym& right = syms[c.right];
    if (left.len == 0 || right.len == 0 || left.len + right.len != c.size) continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (left.next >= 0) syms[left.next].prev = c.left;
    push(left.prev, c.left);
    push(c.left, left.next);
  }

  // Resegment UNUSED pieces into the pieces they were merged from, then map to ids.
  auto resegment = [&](auto&& self, std::string_view w) -> void {
    if (has_unused_) {
      const int32_t id = piece_to_id(w);
      if (id >= 0 && types_[static_cast<size_t>(id)] == TokenType::kUnused) {
        auto it = rev_merge.find(w);
        if (it != rev_merge.end()) {
          self(self, it->second.first);
          self(self, it->second.second);
          return;
        }
      }
    }
    emit(w, out);
  };
  for (int32_t k = 0; k >= 0; k = syms[k].next) resegment(resegment, text.substr(syms[k].begin, syms[k].len));
}

}  // namespace pagoda

#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <climits>

#include <fmt/format.h>

#include "tokenizer/unicode.h"

namespace pagoda {

int byte_piece_value(std::string_view p) {
  if (p.size() != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  int hi = hex(p[3]), lo = hex(p[4]);
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

namespace {
constexpr size_t kShortPiece = 48;  // symbols; beyond this the heap loop is faster
}

BpeModel::BpeModel(StringIdMap model_vocab, const std::vector<BpeMerge>& merges, const BpeOptions& options)
    : vocab_(std::move(model_vocab)), options_(options) {
  pairs_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r)
    pairs_.insert(merges[r].left, merges[r].right, PairMap::Value{static_cast<int32_t>(r), merges[r].merged});
  byte_token_.fill(-1);
  byte_fallback_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    byte_token_[b] = find_id(vocab_, std::string_view(&c, 1));
    byte_fallback_[b] = find_id(vocab_, fmt::format("<0x{:02X}>", b));
  }
}

void BpeModel::initial_symbols(std::string_view piece, std::vector<int32_t>* ids) const {
  ids->clear();
  bool last_unk = false;
  auto push_unk = [&] {
    if (options_.unk_id < 0) return;
    if (options_.fuse_unk && last_unk) return;
    ids->push_back(options_.unk_id);
    last_unk = true;
  };
  if (options_.byte_level) {
    for (char c : piece) {
      const int32_t id = byte_token_[static_cast<uint8_t>(c)];
      if (id >= 0) {
        ids->push_back(id);
        last_unk = false;
      } else {
        push_unk();
      }
    }
    return;
  }
  size_t i = 0;
  while (i < piece.size()) {
    const uint32_t len = unicode::unit_length(piece.substr(i));
    const std::string_view ch = piece.substr(i, len);
    i += len;
    const int32_t id = find_id(vocab_, ch);
    if (id >= 0) {
      ids->push_back(id);
      last_unk = false;
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (char c : ch) all = all && byte_fallback_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        for (char c : ch) ids->push_back(byte_fallback_[static_cast<uint8_t>(c)]);
        last_unk = false;
        continue;
      }
    }
    push_unk();
  }
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>* out, BpeScratch* s) const {
  if (piece.empty()) return;
  if (options_.ignore_merges) {
    const int32_t id = find_id(vocab_, piece);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  initial_symbols(piece, &s->ids);
  if (s->ids.size() >= 2) {
    if (s->ids.size() <= kShortPiece) {
      merge_short(s);
    } else {
      merge_long(s);
    }
  }
  out->insert(out->end(), s->ids.begin(), s->ids.end());
}

// Quadratic loop: pairs[k] caches the merge of (ids[k], ids[k+1]); each step finds the lowest
// rank (leftmost on ties), merges, and refreshes the two affected neighbours.
void BpeModel::merge_short(BpeScratch* s) const {
  std::vector<int32_t>& ids = s->ids;
  std::vector<PairMap::Value>& pairs = s->pairs;
  auto lookup = [&](size_t k) {
    const PairMap::Value* v = pairs_.find(ids[k], ids[k + 1]);
    return v ? *v : PairMap::Value{INT_MAX, -1};
  };
  pairs.resize(ids.size() - 1);
  for (size_t k = 0; k + 1 < ids.size(); ++k) pairs[k] = lookup(k);
  while (!pairs.empty()) {
    int32_t best = INT_MAX;
    size_t bi = 0;
    for (size_t k = 0; k < pairs.size(); ++k) {
      if (pairs[k].rank < best) {
        best = pairs[k].rank;
        bi = k;
      }
    }
    if (best == INT_MAX) break;
    ids[bi] = pairs[bi].merged;
    ids.erase(ids.begin() + static_cast<ptrdiff_t>(bi) + 1);
    pairs.erase(pairs.begin() + static_cast<ptrdiff_t>(bi));
    if (bi > 0) pairs[bi - 1] = lookup(bi - 1);
    if (bi < pairs.size()) pairs[bi] = lookup(bi);
  }
}

// Heap loop: candidates ordered by (rank, left position); a candidate is stale when its left
// symbol died or either side changed id, which is detected when it is popped.
void BpeModel::merge_long(BpeScratch* s) const {
  const int32_t n = static_cast<int32_t>(s->ids.size());
  auto& syms = s->syms;
  auto& heap = s->heap;
  syms.resize(static_cast<size_t>(n));
  for (int32_t k = 0; k < n; ++k) syms[k] = {s->ids[k], k - 1, k + 1 < n ? k + 1 : -1};
  heap.clear();
  auto worse = [](const BpeScratch::Cand& a, const BpeScratch::Cand& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  };
  auto push = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const PairMap::Value* v = pairs_.find(syms[left].id, syms[right].id);
    if (!v) return;
    heap.push_back({v->rank, left, syms[left].id, syms[right].id, v->merged});
    std::push_heap(heap.begin(), heap.end(), worse);
  };
  for (int32_t k = 0; k + 1 < n; ++k) push(k, k + 1);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), worse);
    const BpeScratch::Cand c = heap.back();
    heap.pop_back();
    BpeScratch::Sym& left = syms[c.left];
    if (left.id != c.left_id || left.next < 0) continue;
    BpeScratch::Sym& right = syms[left.next];
    if (right.id != c.right_id) continue;
    left.id = c.merged;
    right.id = -1;
    left.next = right.next;
    if (left.next >= 0) syms[left.next].prev = c.left;
    push(left.prev, c.left);
    push(c.left, left.next);
  }
  s->ids.clear();
  for (int32_t k = 0; k >= 0; k = syms[k].next) s->ids.push_back(syms[k].id);
}

}  // namespace pagoda

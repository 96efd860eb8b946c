#include "grammar/token_vocabulary.h"

#include <algorithm>
#include <numeric>

#include "common/check.h"

namespace pagoda::grammar {

TokenVocabulary::TokenVocabulary(std::vector<std::string> bytes, std::vector<int32_t> stop_ids)
    : bytes_(std::move(bytes)), stop_ids_(std::move(stop_ids)) {
  std::sort(stop_ids_.begin(), stop_ids_.end());
  stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()), stop_ids_.end());
  stop_ids_.erase(std::remove_if(stop_ids_.begin(), stop_ids_.end(), [&](int32_t t) { return t < 0 || t >= size(); }),
                  stop_ids_.end());
  build_trie();
}

bool TokenVocabulary::is_stop(int32_t id) const { return std::binary_search(stop_ids_.begin(), stop_ids_.end(), id); }

void TokenVocabulary::build_trie() {
  std::vector<int32_t> order;
  for (int32_t i = 0; i < size(); ++i)
    if (!bytes_[i].empty() && !is_stop(i)) order.push_back(i);
  // Sorted by bytes, a prefix before its extensions: the tokens in trie preorder.
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b] || (bytes_[a] == bytes_[b] && a < b); });
  trie_tokens_ = order;
  for (int32_t t : order) max_token_bytes_ = std::max(max_token_bytes_, bytes_[t].size());
  PAGODA_CHECK(max_token_bytes_ < (1u << 24), "a token of {} bytes", max_token_bytes_);
  nodes_.clear();
  add_subtree(0, static_cast<uint32_t>(order.size()), 0, 0);
  Node last{};
  last.skip = static_cast<uint32_t>(nodes_.size()) + 1;
  last.tok_begin = static_cast<uint32_t>(order.size());
  nodes_.push_back(last);
  const uint32_t n = num_nodes();
  part_starts_.assign(1, std::min(1u, n));
  for (uint32_t k = 1; k < kWalkParts; ++k) {
    uint32_t i = std::max(part_starts_.back() + 1, static_cast<uint32_t>(1 + static_cast<uint64_t>(n - 1) * k / kWalkParts));
    while (i < n && nodes_[i].depth > 2) ++i;
    if (i < n) part_starts_.push_back(i);
  }
  part_starts_.push_back(n);
  for (uint32_t i = 1; i < n; i = nodes_[i].skip) first_byte_nodes_[nodes_[i].byte] = nodes_[i].skip - i;
}

// The node of the prefix shared by trie_tokens_[lo, hi) (of `depth` bytes, the last `byte`), then
// its subtree; returns the node's index.
uint32_t TokenVocabulary::add_subtree(uint32_t lo, uint32_t hi, uint32_t depth, uint8_t byte) {
  const uint32_t self = static_cast<uint32_t>(nodes_.size());
  Node n{};
  n.tok_begin = lo;
  n.depth = depth;
  n.byte = byte;
  nodes_.push_back(n);
  uint32_t i = lo;
  while (i < hi && bytes_[trie_tokens_[i]].size() == depth) ++i;
  while (i < hi) {
    const uint8_t b = static_cast<uint8_t>(bytes_[trie_tokens_[i]][depth]);
    uint32_t j = i;
    while (j < hi && static_cast<uint8_t>(bytes_[trie_tokens_[j]][depth]) == b) ++j;
    add_subtree(i, j, depth + 1, b);
    i = j;
  }
  nodes_[self].skip = static_cast<uint32_t>(nodes_.size());
  return self;
}

}  // namespace pagoda::grammar

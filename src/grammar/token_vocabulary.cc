#include "grammar/token_vocabulary.h"

#include <algorithm>
#include <numeric>

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
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b] || (bytes_[a] == bytes_[b] && a < b); });
  trie_tokens_ = order;
  for (int32_t t : order) max_token_bytes_ = std::max(max_token_bytes_, bytes_[t].size());
  nodes_.assign(1, Node{});
  // Breadth-first: each queue entry is (node, [lo, hi) of `order` sharing the node's prefix, depth).
  struct Item {
    uint32_t node, lo, hi, depth;
  };
  std::vector<Item> queue{{0, 0, static_cast<uint32_t>(order.size()), 0}};
  for (size_t q = 0; q < queue.size(); ++q) {
    const Item it = queue[q];
    uint32_t i = it.lo;
    while (i < it.hi && bytes_[order[i]].size() == it.depth) ++i;
    nodes_[it.node].tok_begin = it.lo;
    nodes_[it.node].tok_end = i;
    nodes_[it.node].child_begin = static_cast<uint32_t>(nodes_.size());
    while (i < it.hi) {
      const uint8_t b = static_cast<uint8_t>(bytes_[order[i]][it.depth]);
      uint32_t j = i;
      while (j < it.hi && static_cast<uint8_t>(bytes_[order[j]][it.depth]) == b) ++j;
      Node child;
      child.byte = b;
      nodes_.push_back(child);
      queue.push_back({static_cast<uint32_t>(nodes_.size() - 1), i, j, it.depth + 1});
      i = j;
    }
    nodes_[it.node].child_end = static_cast<uint32_t>(nodes_.size());
  }
}

}  // namespace pagoda::grammar

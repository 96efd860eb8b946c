// The tokenizer as the grammar engine sees it: the bytes each token id contributes to the text,
// and the ids that end generation. Built once per model (server/serving: from the Tokenizer) and
// indexed as a byte trie so that a mask is computed by walking the trie with a matcher state.
//
// Thread-safety: immutable after construction; share as std::shared_ptr<const TokenVocabulary>.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pagoda::grammar {

class TokenVocabulary {
 public:
  // bytes[id]: the token's bytes in decoded text; empty: never allowed by a grammar (special and
  // unused tokens). stop_ids: allowed exactly when the grammar is in an accepting state.
  TokenVocabulary(std::vector<std::string> bytes, std::vector<int32_t> stop_ids);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  bool is_stop(int32_t id) const;
  // Words of a packed mask: bit (id % 32) of word (id / 32).
  int32_t mask_words() const { return (size() + 31) / 32; }
  size_t max_token_bytes() const { return max_token_bytes_; }

  // The trie in preorder: node 0 is the root (the empty prefix), every node's subtree is the
  // range [i, skip) of the nodes, and its children follow it in order of their byte. Tokens
  // ending at node i are trie_tokens()[nodes[i].tok_begin, nodes[i + 1].tok_begin) (a last node,
  // past every real one, closes the list); the tokens of node i's subtree are
  // trie_tokens()[nodes[i].tok_begin, nodes[nodes[i].skip].tok_begin). A mask walk is one pass
  // over the nodes in order that jumps to skip where the grammar takes no byte.
  struct Node {
    uint32_t skip = 0;       // first node past this subtree
    uint32_t tok_begin = 0;  // first of the tokens ending here (index into trie_tokens)
    uint32_t depth : 24;     // bytes of the prefix (the root: 0)
    uint32_t byte : 8;       // the prefix's last byte (the root: 0)
  };
  // nodes().size() == num_nodes() + 1: the last entry only closes the token lists.
  const std::vector<Node>& nodes() const { return nodes_; }
  uint32_t num_nodes() const { return static_cast<uint32_t>(nodes_.size()) - 1; }
  const std::vector<int32_t>& trie_tokens() const { return trie_tokens_; }
  // The walk in parts (one mask's work spread over threads): part k is the nodes
  // [part_starts()[k], part_starts()[k + 1]), about equally many each, every part starting at a
  // node of depth 1 or 2 (its ancestors' states are at most one byte from the root's).
  const std::vector<uint32_t>& part_starts() const { return part_starts_; }
  static constexpr int kWalkParts = 16;
  // Nodes of the subtree under the root's child of each byte (0 where none): what a walk from a
  // state taking byte b first visits at most.
  const std::array<uint32_t, 256>& first_byte_nodes() const { return first_byte_nodes_; }

 private:
  void build_trie();
  uint32_t add_subtree(uint32_t lo, uint32_t hi, uint32_t depth, uint8_t byte);
  std::vector<std::string> bytes_;
  std::vector<int32_t> stop_ids_;
  std::vector<Node> nodes_;
  std::vector<int32_t> trie_tokens_;
  std::vector<uint32_t> part_starts_;
  std::array<uint32_t, 256> first_byte_nodes_{};
  size_t max_token_bytes_ = 0;
};

}  // namespace pagoda::grammar

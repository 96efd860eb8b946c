// The tokenizer as the grammar engine sees it: the bytes each token id contributes to the text,
// and the ids that end generation. Built once per model (server/serving: from the Tokenizer) and
// indexed as a byte trie so that a mask is computed by walking the trie with a matcher state.
//
// Thread-safety: immutable after construction; share as std::shared_ptr<const TokenVocabulary>.
#pragma once

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

  // The trie: node 0 is the root (empty prefix). Children of a node are contiguous and sorted
  // by byte; tokens ending at a node are listed in token_ids[tok_begin, tok_end).
  struct Node {
    uint32_t child_begin = 0, child_end = 0;
    uint32_t tok_begin = 0, tok_end = 0;
    uint8_t byte = 0;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& trie_tokens() const { return trie_tokens_; }

 private:
  void build_trie();
  std::vector<std::string> bytes_;
  std::vector<int32_t> stop_ids_;
  std::vector<Node> nodes_;
  std::vector<int32_t> trie_tokens_;
  size_t max_token_bytes_ = 0;
};

}  // namespace pagoda::grammar

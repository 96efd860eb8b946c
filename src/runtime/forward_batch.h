// ForwardBatch: one step's flat batch of tokens from many sequences, as the model sees it.
//
// Tokens of a sequence are contiguous; each sequence says how many of its tokens are new this
// step (num_queries) and how many are visible in the cache once they are written (context_len),
// and carries its block table. slots[t] is where token t's K/V go in the paged cache. The
// runner builds this from the scheduler's output; the model only reads it.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/attention.h"

namespace pagoda {

struct ForwardSeq {
  int32_t token_begin = 0;   // first token of this sequence in the flat arrays
  int32_t num_tokens = 0;    // new tokens this step
  int32_t context_len = 0;   // cached + new tokens after this step
  std::vector<int32_t> block_table;
};

struct ForwardBatch {
  std::vector<int32_t> token_ids;  // [T]
  std::vector<int32_t> positions;  // [T]
  std::vector<int64_t> slots;      // [T] cache slot per token (-1: do not cache)
  std::vector<ForwardSeq> seqs;
  std::vector<int32_t> logits_rows;  // flat token indices whose logits the caller wants, in order

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  void clear() {
    token_ids.clear();
    positions.clear();
    slots.clear();
    seqs.clear();
    logits_rows.clear();
  }
  // Appends a sequence's new tokens at positions [context_len - ids.size(), context_len), their
  // slots computed from the block table; `want_all_logits` asks for every new token's logits
  // (prompt logprobs, tests), else only the last one's.
  void add_sequence(const std::vector<int32_t>& ids, int32_t context_len, std::vector<int32_t> block_table,
                    int64_t block_size, bool want_logits = true, bool want_all_logits = false);
};

}  // namespace pagoda

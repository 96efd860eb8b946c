#include "runtime/forward_batch.h"

#include "common/check.h"

namespace pagoda {

void ForwardBatch::add_sequence(const std::vector<int32_t>& ids, int32_t context_len, std::vector<int32_t> block_table,
                                int64_t block_size, bool want_logits, bool want_all_logits) {
  const int32_t n = static_cast<int32_t>(ids.size());
  PAGODA_CHECK(n > 0 && context_len >= n, "add_sequence: {} tokens, context {}", n, context_len);
  PAGODA_CHECK(static_cast<int64_t>(block_table.size()) * block_size >= context_len, "block table too short");
  ForwardSeq seq;
  seq.token_begin = static_cast<int32_t>(token_ids.size());
  seq.num_tokens = n;
  seq.context_len = context_len;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t pos = context_len - n + i;
    token_ids.push_back(ids[i]);
    positions.push_back(pos);
    slots.push_back(static_cast<int64_t>(block_table[pos / block_size]) * block_size + pos % block_size);
    if (want_all_logits || (want_logits && i == n - 1)) logits_rows.push_back(seq.token_begin + i);
  }
  seq.block_table = std::move(block_table);
  seqs.push_back(std::move(seq));
}

}  // namespace pagoda

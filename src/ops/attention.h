// Attention over the paged KV cache (causal, GQA/MQA, optional sliding window), for prefill,
// chunked prefill and decode alike: each sequence brings `num_queries` new tokens whose keys and
// values are already in the cache (rope_kv_write ran first) and attends to its first
// `context_len` cached tokens, query i sitting at position context_len - num_queries + i.
#pragma once

#include <cstdint>
#include <span>

#include "common/tensor.h"
#include "common/thread_pool.h"
#include "common/kv_layout.h"

namespace pagoda {

struct AttentionSeq {
  int32_t query_begin = 0;   // first row of this sequence in q / out
  int32_t num_queries = 0;
  int32_t context_len = 0;   // cached tokens visible to the last query (>= num_queries)
  std::span<const int32_t> block_table;  // ceil(context_len / block_size) block ids, at least
};

struct PagedAttentionParams {
  const Tensor* q = nullptr;  // [T, num_heads * head_dim] f32 (rotated)
  Tensor* out = nullptr;      // [T, num_heads * head_dim] f32
  std::span<const AttentionSeq> seqs;
  KvLayerView cache;
  int64_t num_heads = 0;
  float scale = 1.0f;            // usually 1/sqrt(head_dim)
  int64_t sliding_window = 0;    // 0 = unlimited; else a query at p sees keys in (p - window, p]
  float softcap = 0.0f;          // > 0: scores (scaled) = softcap * tanh(scores / softcap) (Gemma 2)

  void check() const;
};

void paged_attention(const PagedAttentionParams& p, ThreadPool& pool);

}  // namespace pagoda

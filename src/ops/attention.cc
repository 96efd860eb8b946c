#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_kernels.h"

namespace pagoda {

void PagedAttentionParams::check() const {
  PAGODA_CHECK(q && out, "paged_attention: missing q/out");
  const int64_t d = cache.head_dim;
  PAGODA_CHECK(d > 0 && d <= cpu::kAttentionMaxHeadDim, "paged_attention: head_dim {} unsupported (max {})", d,
               cpu::kAttentionMaxHeadDim);
  PAGODA_CHECK(num_heads > 0 && cache.num_kv_heads > 0 && num_heads % cache.num_kv_heads == 0, "heads {} kv heads {}",
               num_heads, cache.num_kv_heads);
  PAGODA_CHECK(q->dtype() == DType::kF32 && q->ndim() == 2 && q->dim(1) == num_heads * d, "q {}", q->shape_string());
  PAGODA_CHECK(out->shape() == q->shape() && out->dtype() == DType::kF32, "out {}", out->shape_string());
  PAGODA_CHECK(std::isfinite(softcap) && softcap >= 0.0f, "softcap {}", softcap);
  for (const auto& s : seqs) {
    PAGODA_CHECK(s.num_queries >= 0 && s.context_len >= s.num_queries, "seq: {} queries, context {}", s.num_queries,
                 s.context_len);
    PAGODA_CHECK(s.query_begin >= 0 && s.query_begin + s.num_queries <= q->dim(0), "seq rows [{}, +{}) beyond {}",
                 s.query_begin, s.num_queries, q->dim(0));
    const int64_t need = (s.context_len + cache.block_size - 1) / cache.block_size;
    PAGODA_CHECK(static_cast<int64_t>(s.block_table.size()) >= need, "block table has {} blocks, context {} needs {}",
                 s.block_table.size(), s.context_len, need);
    for (int64_t b = 0; b < need; ++b)
      PAGODA_CHECK(s.block_table[b] >= 0 && s.block_table[b] < cache.num_blocks, "block id {} outside the cache",
                   s.block_table[b]);
  }
}

namespace {
constexpr int32_t kMinKeysPerSplit = 256;
}  // namespace

void paged_attention(const PagedAttentionParams& p, ThreadPool& pool) {
  p.check();
  const int64_t d = p.cache.head_dim;
  const int32_t kvh = static_cast<int32_t>(p.cache.num_kv_heads);
  const int32_t group = static_cast<int32_t>(p.num_heads / kvh);
  const int32_t heads_per_task = std::min<int32_t>(group, cpu::kAttentionMaxRows);
  const int32_t tokens_per_task = std::max<int32_t>(1, cpu::kAttentionMaxRows / heads_per_task);
  const size_t nseq = p.seqs.size();

  std::vector<int32_t> query_begin(nseq), num_queries(nseq), context_len(nseq);
  std::vector<const int32_t*> tables(nseq);
  for (size_t s = 0; s < nseq; ++s) {
    query_begin[s] = p.seqs[s].query_begin;
    num_queries[s] = p.seqs[s].num_queries;
    context_len[s] = p.seqs[s].context_len;
    tables[s] = p.seqs[s].block_table.data();
  }

  std::vector<cpu::AttentionTask> tasks;
  for (size_t s = 0; s < nseq; ++s) {
    const auto& seq = p.seqs[s];
    for (int32_t h = 0; h < kvh; ++h)
      for (int32_t g0 = 0; g0 < group; g0 += heads_per_task)
        for (int32_t t0 = 0; t0 < seq.num_queries; t0 += tokens_per_task)
          tasks.push_back({static_cast<int32_t>(s), h, t0, std::min(seq.num_queries, t0 + tokens_per_task),
                           h * group + g0, h * group + std::min(group, g0 + heads_per_task), 0, seq.context_len, -1});
  }

  // Split-KV (flash-decoding): when there are too few tasks to occupy the pool, cut long key
  // ranges of single-tile tasks into pieces and merge their partial softmax states afterwards.
  struct SplitGroup {
    size_t first_task;
    int32_t count;
  };
  std::vector<SplitGroup> splits;
  const int64_t want_tasks = 2 * static_cast<int64_t>(pool.size());
  if (pool.size() > 1 && static_cast<int64_t>(tasks.size()) < want_tasks) {
    std::vector<cpu::AttentionTask> out;
    const int64_t per_task = (want_tasks + static_cast<int64_t>(tasks.size()) - 1) / std::max<int64_t>(1, tasks.size());
    int32_t partial = 0;
    for (const auto& t : tasks) {
      const bool single_tile = p.seqs[t.seq].num_queries <= tokens_per_task;
      int64_t n = std::min<int64_t>(per_task, t.k1 / kMinKeysPerSplit);
      if (!single_tile || n < 2) {
        out.push_back(t);
        continue;
      }
      splits.push_back({out.size(), static_cast<int32_t>(n)});
      for (int64_t i = 0; i < n; ++i) {
        cpu::AttentionTask piece = t;
        piece.k0 = static_cast<int32_t>(t.k1 * i / n);
        piece.k1 = static_cast<int32_t>(t.k1 * (i + 1) / n);
        piece.partial = partial++;
        out.push_back(piece);
      }
    }
    tasks.swap(out);
  }

  int32_t num_partials = 0;
  for (const auto& t : tasks) num_partials = std::max(num_partials, t.partial + 1);
  const int32_t partial_rows = cpu::kAttentionMaxRows;
  std::vector<float> pm(static_cast<size_t>(num_partials) * partial_rows);
  std::vector<float> pl(pm.size());
  std::vector<float> pacc(pm.size() * d);

  cpu::AttentionArgs args{p.q->data_as<float>(), p.out->data_as<float>(), p.cache, p.num_heads, p.scale, p.sliding_window,
                          query_begin.data(), num_queries.data(), context_len.data(), tables.data(),
                          pm.data(), pl.data(), pacc.data(), partial_rows, p.softcap};
  // Longest key ranges first, claimed dynamically: contexts differ a lot within a batch.
  std::vector<int32_t> order(tasks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
    return tasks[x].k1 - tasks[x].k0 > tasks[y].k1 - tasks[y].k0;
  });
  const auto& kern = cpu::cpu_kernels();
  pool.parallel_for_dynamic(static_cast<int64_t>(tasks.size()), [&](int64_t i) { kern.attention_task(args, tasks[order[i]]); });

  // Merge split partials: out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M).
  const int64_t qstride = p.num_heads * d;
  for (const auto& sg : splits) {
    const auto& t0 = tasks[sg.first_task];
    const int32_t heads_in_task = t0.h1 - t0.h0;
    const int32_t rows = (t0.q1 - t0.q0) * heads_in_task;
    for (int32_t r = 0; r < rows; ++r) {
      float M = -INFINITY;
      for (int32_t i = 0; i < sg.count; ++i) M = std::max(M, pm[tasks[sg.first_task + i].partial * partial_rows + r]);
      float L = 0;
      std::vector<float> acc(d, 0.0f);
      for (int32_t i = 0; i < sg.count; ++i) {
        const int64_t slot = static_cast<int64_t>(tasks[sg.first_task + i].partial) * partial_rows + r;
        if (pm[slot] == -INFINITY) continue;
        const float w = std::exp(pm[slot] - M);
        L += pl[slot] * w;
        for (int64_t j = 0; j < d; ++j) acc[j] += pacc[slot * d + j] * w;
      }
      const int64_t tok = t0.q0 + r / heads_in_task;
      const int64_t head = t0.h0 + r % heads_in_task;
      float* dst = p.out->data_as<float>() + (query_begin[t0.seq] + tok) * qstride + head * d;
      const float inv = L > 0 ? 1.0f / L : 0.0f;
      for (int64_t j = 0; j < d; ++j) dst[j] = acc[j] * inv;
    }
  }
}

}  // namespace pagoda

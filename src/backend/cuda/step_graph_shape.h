// Which CUDA graph a step replays: decode steps (one token a sequence) and verification steps of
// speculative decoding (up to `rows` tokens a sequence: the last known token and its drafts), keyed
// by (batch bucket, rows a sequence). Pure host logic, no CUDA: unit-tested on the CPU
// (tests/unit/step_graph_shape_test.cc); the executor (cuda_executor.cc) fills the graph's inputs
// by the token map below.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "runtime/forward_batch.h"

namespace pagoda::cuda {

// Rows a sequence up to which a step can replay a verification graph (1 + 15 drafts); steps with
// longer sequences (prefill chunks) run eagerly.
constexpr int64_t kMaxGraphRowsPerSeq = 16;

// A graph's shape: `bucket` sequences of `rows` tokens each, bucket * rows tokens, every token an
// attention row of the split-KV kernel and a logits row. Sequence i owns the graph tokens
// [i * rows, (i + 1) * rows); its j-th new token is graph token i * rows + j; graph tokens past a
// sequence's new tokens are padding (context 0, slot -1).
struct StepGraphShape {
  int64_t bucket = 0;
  int64_t rows = 0;
  int64_t tokens() const { return bucket * rows; }
  bool operator==(const StepGraphShape&) const = default;
};

// The key of a graph in the executor's table: shape and whether it was captured for short keys
// (row_attention_short). One-row keys are 2 * bucket + short, as the decode graphs always were.
inline int64_t step_graph_key(const StepGraphShape& s, bool short_keys) {
  return 2 * ((s.rows - 1) * (int64_t{1} << 24) + s.bucket) + (short_keys ? 1 : 0);
}

// The verification graph `batch` replays, if any: rows = the largest count of new tokens of a
// sequence, at least 2 and at most kMaxGraphRowsPerSeq; every sequence 1..rows new tokens, laid out
// in sequence order; every logits row one of the batch's tokens, and every token of a sequence of
// several new tokens a logits row (a verification: the last known token and its drafts; prefill
// chunks and a draft model's catch-up passes want the last token's only and run eagerly, so short
// prompts do not capture graphs of their lengths); bucket = the smallest of `buckets`
// (ascending) that holds the batch's sequences and whose bucket * rows <= max_tokens (the graph
// input region and workspace). nullopt: the step runs eagerly (or, one token a sequence, as a
// decode step).
inline std::optional<StepGraphShape> verify_graph_shape(const ForwardBatch& batch, std::span<const int64_t> buckets,
                                                        int64_t max_tokens) {
  const int64_t n_seqs = static_cast<int64_t>(batch.seqs.size());
  const int64_t T = batch.num_tokens();
  if (n_seqs == 0 || T == 0) return std::nullopt;
  int64_t rows = 0, next = 0;
  for (const ForwardSeq& s : batch.seqs) {
    if (s.num_tokens < 1 || s.token_begin != next || s.context_len < s.num_tokens) return std::nullopt;
    next += s.num_tokens;
    rows = std::max<int64_t>(rows, s.num_tokens);
  }
  if (next != T || rows < 2 || rows > kMaxGraphRowsPerSeq) return std::nullopt;
  std::vector<bool> has_logits(static_cast<size_t>(T), false);
  for (int32_t r : batch.logits_rows) {
    if (r < 0 || r >= T) return std::nullopt;
    has_logits[static_cast<size_t>(r)] = true;
  }
  for (const ForwardSeq& s : batch.seqs)
    for (int32_t j = 0; s.num_tokens > 1 && j < s.num_tokens; ++j)
      if (!has_logits[static_cast<size_t>(s.token_begin + j)]) return std::nullopt;
  for (int64_t b : buckets)
    if (b >= n_seqs && b * rows <= max_tokens && static_cast<int64_t>(batch.logits_rows.size()) <= b * rows)
      return StepGraphShape{b, rows};
  return std::nullopt;
}

// Graph token of each batch token under `shape` ([T]; the batch as verify_graph_shape accepted it).
inline void map_graph_tokens(const ForwardBatch& batch, const StepGraphShape& shape, std::span<int32_t> out) {
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const ForwardSeq& s = batch.seqs[i];
    for (int32_t j = 0; j < s.num_tokens; ++j)
      out[static_cast<size_t>(s.token_begin + j)] = static_cast<int32_t>(static_cast<int64_t>(i) * shape.rows + j);
  }
}

}  // namespace pagoda::cuda

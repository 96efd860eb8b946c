// The structured-output masks of one step on the thread pool: the runner's before_sampling on a
// device executor (overlapping the forward pass) and `pagoda bench masks`.
//
// One pool job a step (one fork-join, as before masks were split): the workers claim rows one at a
// time (so a slow row holds no fixed share of the others back): prepare(k) (the row's own work
// first: advancing over the last step's tokens), then the mask if the constraint has it at hand
// (TokenConstraint::fill_mask_if_ready), else its MaskJob is listed, once however many rows share
// it (rows in one state share one). Out of rows, the workers claim the listed jobs' parts one at a
// time until none is left and no row is still running, so one expensive mask is spread over all
// of them. Last, on the calling thread, the masks of the rows that waited for a job (a cache hit
// each). Fewer than kParallelMaskRows rows (or a pool of one) run on the calling thread, only the
// parts of their jobs on the pool.
//
// Thread-safety: prepare(k) and the rows' constraints are used by one worker at a time each.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "common/thread_pool.h"
#include "core/token_constraint.h"

namespace pagoda {

constexpr int64_t kParallelMaskRows = 8;

struct ConstraintMaskRow {
  TokenConstraint* constraint = nullptr;
  // The row's mask ((vocab_size() + 31) / 32 words); empty: prepare() wrote it (rows with
  // speculative drafts, several masks each) or the row needs none.
  std::span<uint32_t> mask;
};

void fill_constraint_masks(ThreadPool& pool, std::span<ConstraintMaskRow> rows, const std::function<void(size_t)>& prepare);

}  // namespace pagoda

// The structured-output masks of one step on the thread pool: the runner's before_sampling on a
// device executor (overlapping the forward pass) and `pagoda bench masks`.
//
// Three passes, each claimed one item at a time by the pool's workers (so a slow item does not
// hold a fixed share of the others back): (1) per row, prepare(k) (the row's own work first:
// advancing over the last step's tokens) and the mask if the constraint has it at hand
// (TokenConstraint::fill_mask_if_ready); (2) the parts of every MaskJob the rows got, each job
// once (rows in the same state share one), so that one expensive mask is spread over all
// workers; (3) the masks of the rows that waited for a job. Fewer than kParallelMaskRows rows
// run passes (1) and (3) on the calling thread; pass (2) uses the pool whenever there is a job.
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

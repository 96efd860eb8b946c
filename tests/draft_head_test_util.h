// Helpers of the draft-head tests, shared by the CPU tier (tests/model/eagle3_spec_test.cc) and the
// GPU tier (tests/gpu/cuda_draft_head_test.cc): the passes a head runs over one sequence in its own
// cache (a catch-up pass over a prompt's captured rows, then chained one-row steps), and the
// host copies of its outputs.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "common/tensor.h"
#include "ops/attention.h"
#include "runtime/draft_head_forward.h"

namespace pagoda::test {

// Owns the rows of one DraftHeadPass over a single sequence whose cache blocks are `table`
// (block_size tokens each: position p goes to slot table[p / block_size] * block_size +
// p % block_size). Not copyable: the pass views the object's own vectors. Each builder replaces the
// previous pass; the returned reference stays valid until the next one.
class DraftPassBuilder {
 public:
  DraftPassBuilder(std::vector<int32_t> table, int64_t block_size) : table_(std::move(table)), block_size_(block_size) {}
  DraftPassBuilder(const DraftPassBuilder&) = delete;
  DraftPassBuilder& operator=(const DraftPassBuilder&) = delete;

  // The catch-up pass of a prompt of T tokens: row p (p < T - 1) is token prompt[p + 1] at position
  // p with the target's captured row p of `features` ([T - 1, n Dt] f32 at least, host memory);
  // one sequence of T - 1 rows and context T - 1; the drafts of `logits_rows` are wanted.
  const DraftHeadPass& catch_up(const std::vector<int32_t>& prompt, const float* features, std::vector<int32_t> logits_rows) {
    const int32_t n = static_cast<int32_t>(prompt.size()) - 1;
    tokens_.assign(prompt.begin() + 1, prompt.end());
    positions_.clear();
    slots_.clear();
    for (int32_t p = 0; p < n; ++p) {
      positions_.push_back(p);
      slots_.push_back(slot(p));
    }
    logits_rows_ = std::move(logits_rows);
    seqs_ = {{0, n, n, table_}};
    pass_ = DraftHeadPass{};
    pass_.features = features;
    return finish();
  }

  // A chained one-row step: `token` at position `pos`, fed with the head's own hidden output row
  // `hidden` ([D] f32, host memory); context pos + 1; the row's draft is wanted.
  const DraftHeadPass& chained(int32_t token, int32_t pos, const float* hidden) {
    tokens_ = {token};
    positions_ = {pos};
    slots_ = {slot(pos)};
    logits_rows_ = {0};
    seqs_ = {{0, 1, pos + 1, table_}};
    pass_ = DraftHeadPass{};
    pass_.hidden = hidden;
    return finish();
  }

  const DraftHeadPass& pass() const { return pass_; }

 private:
  int64_t slot(int32_t p) const { return table_[static_cast<size_t>(p / block_size_)] * block_size_ + p % block_size_; }
  const DraftHeadPass& finish() {
    pass_.tokens = tokens_;
    pass_.positions = positions_;
    pass_.slots = slots_;
    pass_.seqs = seqs_;
    pass_.logits_rows = logits_rows_;
    return pass_;
  }

  std::vector<int32_t> table_;
  int64_t block_size_;
  std::vector<int32_t> tokens_, positions_, logits_rows_;
  std::vector<int64_t> slots_;
  std::vector<AttentionSeq> seqs_;
  DraftHeadPass pass_;
};

// The f32 values of a host tensor, in order.
inline std::vector<float> floats_of(const Tensor& t) { return {t.data_as<const float>(), t.data_as<const float>() + t.numel()}; }

// The last row of a host [m, D] f32 tensor (a runner's hidden output that feeds the next chained step).
inline std::vector<float> last_row(const Tensor& t) {
  const int64_t m = t.dim(0), d = t.dim(1);
  return {t.data_as<const float>() + (m - 1) * d, t.data_as<const float>() + m * d};
}

}  // namespace pagoda::test

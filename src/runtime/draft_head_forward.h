// The CPU forward pass of a draft head (model/draft_head.h gives the equations of both kinds) over its
// own one-layer paged KV cache. A pass takes rows of (token, position, cache slot) with either the
// target's captured hidden states (fused by fc) or the head's own earlier outputs, writes each
// row's K/V, and for the asked rows returns the draft logits, the greedy draft as a target id
// (through d2t) and the pre-norm output hidden (the next chained step's input).
// A head without a host lm_head (an MTP module whose target keeps its output head on a device)
// takes an OutputHead that computes the logits of the normed rows elsewhere
// (ModelExecutor::output_logits).
// Thread-safety: one pass at a time (engine-core thread); uses every worker of `pool`.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "common/tensor.h"
#include "common/thread_pool.h"
#include "model/draft_head.h"
#include "ops/attention.h"
#include "runtime/kv_cache_storage.h"

namespace pagoda {

struct DraftHeadPass {
  std::span<const int32_t> tokens;     // [T] the token of each row (target ids)
  std::span<const int32_t> positions;  // [T] RoPE positions
  std::span<const int64_t> slots;      // [T] cache slots the rows' K/V go to
  std::span<const AttentionSeq> seqs;  // the rows' sequences over the head's cache
  // Exactly one of: [T, n Dt] the target's captured states (n = capture_after.size()), or [T, D]
  // hidden rows (the head's own earlier outputs).
  const float* features = nullptr;
  const float* hidden = nullptr;
  std::span<const int32_t> logits_rows;  // rows whose draft is wanted, in order
};

// logits [m, draft_vocab] f32 of the normed rows x [m, D] f32, host memory both, complete on return.
using DraftOutputHead = std::function<void(const float* x, int64_t m, float* logits)>;

// Runs a head's passes over its own KV cache: DraftHeadForward on the CPU, or a device executor's
// runner (ModelExecutor::make_draft_head_runner). The pass's inputs and the results are in host
// memory either way.
class DraftHeadRunner {
 public:
  virtual ~DraftHeadRunner() = default;
  virtual void forward(const DraftHeadPass& pass) = 0;
  // Of the last pass, one row per logits row: [rows, draft_vocab] f32 logits, the greedy drafts as
  // target ids, [rows, D] f32 hidden outputs (EAGLE-3: before the final norm; MTP: after it).
  virtual const Tensor& logits() const = 0;
  virtual const std::vector<int32_t>& drafts() const = 0;
  virtual const Tensor& out_hidden() const = 0;
};

// The greedy drafts of logits rows [m, draft_vocab] as target ids (the first maximum of a row).
void draft_argmax(const Tensor& logits, const std::vector<int32_t>& draft_to_target, std::vector<int32_t>& drafts);

class DraftHeadForward final : public DraftHeadRunner {
 public:
  // A cache of `num_blocks` blocks (null block included) of `block_size` slots, `kv_dtype` each.
  // `output_head`: the logits' matmul where head.lm_head is null (required then, unused otherwise).
  DraftHeadForward(const DraftHead& head, int64_t num_blocks, int64_t block_size, DType kv_dtype, ThreadPool& pool,
                   DraftOutputHead output_head = {});

  void forward(const DraftHeadPass& pass) override;
  const Tensor& logits() const override { return logits_; }
  const std::vector<int32_t>& drafts() const override { return drafts_; }
  const Tensor& out_hidden() const override { return out_; }
  const DraftHead& head() const { return head_; }

 private:
  void ensure(int64_t T);

  const DraftHead& head_;
  ThreadPool& pool_;
  DraftOutputHead output_head_;
  KvCacheStorage kv_;
  int64_t capacity_ = 0;
  Tensor h_, emb_, cat_, qkv_, q_, k_, v_, attn_, r_, n_, gate_up_, act_, proj_;
  Tensor last_, logits_, out_;
  std::vector<int32_t> drafts_;
};

}  // namespace pagoda

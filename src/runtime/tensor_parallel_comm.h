// The collectives of a tensor-parallel forward pass (docs/decisions.md D78): the all-reduce after
// the row-parallel o and down projections (and the embedding's vocabulary-parallel lookup), and
// the all-gather of the vocabulary-parallel logits. One object per rank; every rank calls the
// same collectives in the same order.
//
// make_thread_comms: the ranks as threads of one process (the CPU forward's ranks and the tests);
// a device implementation (NCCL, one process per GPU) implements the same interface.
//
// Determinism: the all-reduce sums the ranks' values in rank order, so every rank gets the same
// bits, and a run is reproducible.
//
// Thread-safety: each rank's object is used by one thread; the ranks' calls meet (block) inside.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace pagoda {

class TensorParallelComm {
 public:
  virtual ~TensorParallelComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: data[0, n) becomes the sum over the ranks of their data[0, n).
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  // out is [rows, out_cols] row-major; each rank's part [rows, cols] (its own cols) lands at its
  // column offset col_offset, on every rank.
  virtual void all_gather_columns(const float* part, int64_t rows, int64_t cols, int64_t col_offset, float* out,
                                  int64_t out_cols) = 0;
};

// `size` communicators over one process's threads (rank i is element i).
std::vector<std::unique_ptr<TensorParallelComm>> make_thread_comms(int size);

// What a rank's CPU forward needs to know beyond its own model: its communicator and where its
// vocabulary rows sit in the whole vocabulary.
struct TensorParallelRank {
  TensorParallelComm* comm = nullptr;
  int64_t vocab_begin = 0;  // the rank's embedding / output rows are [vocab_begin, vocab_begin + its vocab)
  int64_t vocab_size = 0;   // the whole model's
};

}  // namespace pagoda

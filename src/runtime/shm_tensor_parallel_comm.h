// The collectives of a tensor-parallel forward (runtime/tensor_parallel_comm.h) between processes of
// one host, through a POSIX shared-memory segment: per rank a slot of `slot_floats` floats and
// its pid, and a barrier. Large collectives pass in chunks of a slot.
//
// A collective waits for the other ranks as long as they live: each waiting rank checks its peers'
// pids (common/process_alive.h) while it waits, and a peer that died aborts the process with
// that peer's rank and pid (a rank cannot finish a step alone; the launcher sees the exit). A
// peer that has not opened the segment yet counts as alive.
//
// Sums are taken in rank order (every rank gets the same bits).
//
// Thread-safety: each rank's object is used by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "runtime/tensor_parallel_comm.h"

namespace pagoda {

class ShmTensorParallelComm final : public TensorParallelComm {
 public:
  // Rank 0: creates the segment `name` ("/pagoda-..."; fails if it exists) for `size` ranks and
  // unlinks it when destroyed (ranks that opened it keep their mapping).
  static Result<std::unique_ptr<ShmTensorParallelComm>> create(const std::string& name, int size,
                                                               int64_t slot_floats = int64_t{1} << 22);
  // Rank `rank` (1 <= rank < size) of an existing segment.
  static Result<std::unique_ptr<ShmTensorParallelComm>> open(const std::string& name, int rank);
  ~ShmTensorParallelComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(float* data, int64_t n) override;
  void all_gather_columns(const float* part, int64_t rows, int64_t cols, int64_t col_offset, float* out,
                          int64_t out_cols) override;

 private:
  struct Header;
  ShmTensorParallelComm() = default;
  void barrier();
  float* slot(int r) const;

  std::string name_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  bool owner_ = false;
  int rank_ = 0, size_ = 1;
  int64_t slot_floats_ = 0;
};

}  // namespace pagoda

#include "runtime/tensor_parallel_comm.h"

#include <barrier>
#include <cstring>

namespace pagoda {
namespace {

// What the ranks of one group share: each rank's published buffer and a barrier.
struct ThreadGroup {
  explicit ThreadGroup(int n) : size(n), barrier(n), parts(static_cast<size_t>(n)) {}
  struct Part {
    const float* data = nullptr;
    int64_t cols = 0, col_offset = 0;
  };
  int size;
  std::barrier<> barrier;
  std::vector<Part> parts;
};

class ThreadComm final : public TensorParallelComm {
 public:
  ThreadComm(std::shared_ptr<ThreadGroup> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_->size; }

  void all_reduce_sum(float* data, int64_t n) override {
    if (g_->size == 1) return;
    g_->parts[static_cast<size_t>(rank_)].data = data;
    g_->barrier.arrive_and_wait();  // every rank's input is published
    scratch_.assign(static_cast<size_t>(n), 0.0f);
    for (const auto& p : g_->parts)  // rank order: the same bits on every rank
      for (int64_t i = 0; i < n; ++i) scratch_[static_cast<size_t>(i)] += p.data[i];
    g_->barrier.arrive_and_wait();  // every rank has read every input
    std::memcpy(data, scratch_.data(), static_cast<size_t>(n) * sizeof(float));
  }

  void all_gather_columns(const float* part, int64_t rows, int64_t cols, int64_t col_offset, float* out,
                          int64_t out_cols) override {
    g_->parts[static_cast<size_t>(rank_)] = {part, cols, col_offset};
    g_->barrier.arrive_and_wait();
    for (const auto& p : g_->parts)
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(out + r * out_cols + p.col_offset, p.data + r * p.cols, static_cast<size_t>(p.cols) * sizeof(float));
    g_->barrier.arrive_and_wait();  // no rank reuses its part while another still copies it
  }

 private:
  std::shared_ptr<ThreadGroup> g_;
  int rank_;
  std::vector<float> scratch_;
};

}  // namespace

std::vector<std::unique_ptr<TensorParallelComm>> make_thread_comms(int size) {
  auto g = std::make_shared<ThreadGroup>(size);
  std::vector<std::unique_ptr<TensorParallelComm>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<ThreadComm>(g, r));
  return out;
}

}  // namespace pagoda

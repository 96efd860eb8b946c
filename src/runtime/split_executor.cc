#include "runtime/split_executor.h"

#include <fmt/format.h>

namespace pagoda {
namespace {

class SplitExecutor final : public ModelExecutor {
 public:
  SplitExecutor(std::unique_ptr<ModelExecutor> first, std::unique_ptr<ModelExecutor> rest, int64_t num_layers)
      : first_(std::move(first)), rest_(std::move(rest)), num_layers_(num_layers) {
    const LayerRange a = first_->layer_range(), b = rest_->layer_range();
    PAGODA_CHECK(a.first() && !a.last(num_layers) && b.begin == a.end_in(num_layers) && b.last(num_layers),
                 "a layer split of {} and {}", a.to_string(num_layers), b.to_string(num_layers));
  }

  std::string device_name() const override { return first_->device_name() + "+" + rest_->device_name(); }
  std::string describe() const override {
    return fmt::format("layer split: {} on {} | {} and the output head on {}", first_->layer_range().to_string(num_layers_),
                       first_->describe(), rest_->layer_range().to_string(num_layers_), rest_->describe());
  }

  const Tensor& forward(const ForwardBatch& batch) override {
    const Tensor& residual = first_->forward_part(batch, nullptr);
    return rest_->forward_part(batch, &residual);
  }

  void swap_out(const std::vector<BlockCopy>&) override {
    PAGODA_CHECK(false, "swap-out on a layer split ({}): it has no host swap space", device_name());
  }
  void swap_in(const std::vector<BlockCopy>&) override {
    PAGODA_CHECK(false, "swap-in on a layer split ({}): it has no host swap space", device_name());
  }
  void row_logprobs(std::span<const RowLogprobSpec> rows, std::vector<RowLogprobs>& out) override {
    rest_->row_logprobs(rows, out);
  }
  int64_t workspace_bytes() const override { return first_->workspace_bytes() + rest_->workspace_bytes(); }
  int64_t kv_cache_bytes() const override { return first_->kv_cache_bytes() + rest_->kv_cache_bytes(); }
  DeviceMemoryStats device_memory() const override { return first_->device_memory(); }
  // -1: the host tensors' bytes (each matmul weight is read once a step, by one part or the other).
  int64_t linear_weight_bytes() const override { return -1; }
  int64_t expert_weight_bytes() const override { return -1; }
  bool set_graphs_enabled(bool on) override { return first_->set_graphs_enabled(on); }
  bool set_hidden_capture(const std::vector<int64_t>& after_layers) override { return after_layers.empty(); }
  std::string profile_report() const override { return first_->profile_report() + rest_->profile_report(); }

 private:
  std::unique_ptr<ModelExecutor> first_, rest_;
  int64_t num_layers_;
};

}  // namespace

std::unique_ptr<ModelExecutor> make_split_executor(std::unique_ptr<ModelExecutor> first,
                                                   std::unique_ptr<ModelExecutor> rest, int64_t num_layers) {
  return std::make_unique<SplitExecutor>(std::move(first), std::move(rest), num_layers);
}

}  // namespace pagoda

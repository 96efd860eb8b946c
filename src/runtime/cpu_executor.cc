#include <cstring>

#include "runtime/cpu_layer_ops.h"
#include "runtime/draft_head_forward.h"
#include "runtime/kv_cache_storage.h"
#include "runtime/model_executor.h"

namespace pagoda {
namespace {

class CpuExecutor final : public ModelExecutor {
 public:
  CpuExecutor(const Model& model, const KvCacheSpec& spec, ThreadPool& pool, LayerRange layers,
              const TensorParallelRank* tp)
      : model_(model), pool_(pool), range_(layers), kv_(model.config(), spec.num_blocks, spec.block_size, spec.dtype, layers) {
    if (tp != nullptr && tp->comm != nullptr) {
      PAGODA_CHECK(layers.whole(model.config().num_layers), "tensor parallelism with a layer split");
      tp_ = *tp;
    }
    PAGODA_CHECK(spec.num_host_blocks == 0 || layers.whole(model.config().num_layers),
                 "host KV blocks for a part of a layer split ({})", layers.to_string(model.config().num_layers));
    if (spec.num_host_blocks > 0)
      host_ = std::make_unique<KvCacheStorage>(model.config(), spec.num_host_blocks, spec.block_size, spec.dtype);
  }

  std::string device_name() const override { return "cpu"; }

  LayerRange layer_range() const override { return range_; }

  const Tensor& forward_part(const ForwardBatch& batch, const Tensor* residual_in) override {
    const int64_t L = model_.config().num_layers;
    if (range_.whole(L)) {
      PAGODA_CHECK(residual_in == nullptr, "an input residual for the whole model's executor");
      return forward(batch);
    }
    cpu_forward(model_, batch, kv_, ws_, logits_, pool_, {}, range_, residual_in);
    if (range_.last(L)) return logits_;
    residual_out_ = ws_.residual.slice_rows(0, batch.num_tokens());
    return residual_out_;
  }

  const Tensor& forward(const ForwardBatch& batch) override {
    PAGODA_CHECK(range_.whole(model_.config().num_layers),
                 "forward() on the executor of {}: a layer split runs it through forward_part()",
                 range_.to_string(model_.config().num_layers));
    if (capture_.empty()) {
      cpu_forward(model_, batch, kv_, ws_, logits_, pool_, {}, {}, nullptr, tp());
      return logits_;
    }
    const int64_t T = batch.num_tokens(), D = model_.config().hidden_size, n = static_cast<int64_t>(capture_.size());
    if (!captured_.defined() || captured_.dim(0) != T) captured_ = Tensor::empty(DType::kF32, {T, n * D});
    const LayerHook hook = [&](int64_t layer, const Tensor& residual) {
      for (int64_t i = 0; i < n; ++i) {
        if (capture_[static_cast<size_t>(i)] != layer) continue;
        for (int64_t t = 0; t < T; ++t)
          std::memcpy(captured_.data_as<float>() + (t * n + i) * D, residual.data_as<const float>() + t * D,
                      static_cast<size_t>(D) * sizeof(float));
      }
    };
    cpu_forward(model_, batch, kv_, ws_, logits_, pool_, hook, {}, nullptr, tp());
    return logits_;
  }

  bool set_hidden_capture(const std::vector<int64_t>& after_layers) override {
    if (!range_.whole(model_.config().num_layers)) return after_layers.empty();
    for (int64_t a : after_layers)
      if (a < 0 || a >= model_.config().num_layers) return false;
    capture_ = after_layers;
    captured_ = Tensor();
    return true;
  }
  const Tensor* captured_hidden() const override { return capture_.empty() ? nullptr : &captured_; }

  void swap_out(const std::vector<BlockCopy>& copies) override {
    PAGODA_CHECK(host_ != nullptr, "swap-out without host swap space");
    copy_blocks(copies, kv_, *host_);
  }
  void swap_in(const std::vector<BlockCopy>& copies) override {
    PAGODA_CHECK(host_ != nullptr, "swap-in without host swap space");
    copy_blocks(copies, *host_, kv_);
  }

  int64_t host_block_bytes() const override {
    return host_ ? KvCacheStorage::block_bytes(model_.config(), host_->block_size(), host_->dtype()) : 0;
  }
  void read_host_block(BlockId block, std::span<uint8_t> dst) override { move_host_block(block, dst.data(), nullptr); }
  void write_host_block(BlockId block, std::span<const uint8_t> src) override {
    move_host_block(block, nullptr, src.data());
  }

  void row_logprobs(std::span<const RowLogprobSpec> rows, std::vector<RowLogprobs>& out) override {
    out.assign(rows.size(), RowLogprobs{});
    if (rows.empty()) return;
    const int64_t n_rows = logits_.dim(0), vocab = logits_.dim(1);
    const int64_t n = static_cast<int64_t>(rows.size());
    for (const RowLogprobSpec& spec : rows)
      PAGODA_CHECK(spec.logits_row >= 0 && spec.logits_row < n_rows && spec.token >= 0 && spec.token < vocab,
                   "row_logprobs: row {} of {}, token {} of {}", spec.logits_row, n_rows, spec.token, vocab);
    pool_.run([&](int ith, int nth) {
      SampleResult r;
      std::vector<int32_t> scratch;
      for (int64_t i = n * ith / nth; i < n * (ith + 1) / nth; ++i) {
        const RowLogprobSpec& spec = rows[i];
        const std::span<const float> row(logits_.data_as<float>() + spec.logits_row * vocab, static_cast<size_t>(vocab));
        r.token = spec.token;
        fill_logprobs(row, spec.top_n, r, scratch);
        out[i].logprob = r.logprob;
        out[i].rank = token_rank(row, spec.token);
        out[i].top = std::move(r.top);
      }
    });
  }

  int64_t workspace_bytes() const override {
    return (logits_.defined() ? logits_.nbytes() : 0) + ws_.bytes();
  }
  int64_t kv_cache_bytes() const override { return kv_.bytes(); }

 private:
  void copy_blocks(const std::vector<BlockCopy>& copies, KvCacheStorage& from, KvCacheStorage& to) {
    for (int64_t l = 0; l < model_.config().num_layers; ++l) {
      const KvLayerView src = from.layer(l), dst = to.layer(l);
      const int64_t bytes = src.block_elems() * src.elem_bytes();
      for (const auto& [s, d] : copies) {
        std::memcpy(static_cast<uint8_t*>(dst.k) + d * bytes, static_cast<const uint8_t*>(src.k) + s * bytes, bytes);
        std::memcpy(static_cast<uint8_t*>(dst.v) + d * bytes, static_cast<const uint8_t*>(src.v) + s * bytes, bytes);
      }
    }
  }

  // Gathers host block `block` into `out` or scatters `in` into it, layer by layer, K then V.
  void move_host_block(BlockId block, uint8_t* out, const uint8_t* in) {
    PAGODA_CHECK(host_ != nullptr && block > 0 && block < host_->num_blocks(), "host block {} out of range", block);
    size_t off = 0;
    for (int64_t l = 0; l < model_.config().num_layers; ++l) {
      const KvLayerView view = host_->layer(l);
      const size_t bytes = static_cast<size_t>(view.block_elems() * view.elem_bytes());
      for (void* base : {view.k, view.v}) {
        uint8_t* p = static_cast<uint8_t*>(base) + block * bytes;
        if (out != nullptr) std::memcpy(out + off, p, bytes);
        else std::memcpy(p, in + off, bytes);
        off += bytes;
      }
    }
  }

  const Model& model_;
  ThreadPool& pool_;
  LayerRange range_;     // the layers this executor runs (and caches)
  TensorParallelRank tp_;  // comm null: the whole model
  const TensorParallelRank* tp() const { return tp_.comm != nullptr ? &tp_ : nullptr; }
  KvCacheStorage kv_;
  Tensor residual_out_;  // [T, D] f32 view of ws_.residual: forward_part's output before the last range
  std::unique_ptr<KvCacheStorage> host_;
  ForwardWorkspace ws_;
  Tensor logits_;
  std::vector<int64_t> capture_;  // layers whose output residual forward() keeps
  Tensor captured_;               // [T, capture_.size() * hidden] f32 of the last forward()
};

}  // namespace

void ModelExecutor::read_host_block(BlockId, std::span<uint8_t>) {
  PAGODA_CHECK(false, "read_host_block() on an executor without host blocks ({})", device_name());
}
void ModelExecutor::write_host_block(BlockId, std::span<const uint8_t>) {
  PAGODA_CHECK(false, "write_host_block() on an executor without host blocks ({})", device_name());
}

void ModelExecutor::row_logprobs(std::span<const RowLogprobSpec>, std::vector<RowLogprobs>&) {
  PAGODA_CHECK(false, "row_logprobs() on an executor that does not compute prompt logprobs ({})", device_name());
}

void ModelExecutor::forward_sample(const ForwardBatch&, std::span<const SampleSpec>, std::vector<SampleResult>&,
                                   const std::function<void()>&) {
  PAGODA_CHECK(false, "forward_sample() on an executor that does not sample on its device ({})", device_name());
}

std::unique_ptr<DraftHeadRunner> ModelExecutor::make_draft_head_runner(const DraftHead&, int64_t, int64_t,
                                                                       std::string& why) {
  why = "the " + device_name() + " executor runs no draft heads itself (the host runner does)";
  return nullptr;
}

const Tensor& ModelExecutor::forward_part(const ForwardBatch& batch, const Tensor* residual_in) {
  PAGODA_CHECK(residual_in == nullptr, "forward_part() with an input residual on an executor of the whole model ({})",
               device_name());
  return forward(batch);
}

std::unique_ptr<ModelExecutor> make_cpu_executor(const Model& model, const KvCacheSpec& spec, ThreadPool& pool,
                                                 LayerRange layers, const TensorParallelRank* tp) {
  return std::make_unique<CpuExecutor>(model, spec, pool, layers, tp);
}

}  // namespace pagoda
